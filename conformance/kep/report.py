"""The ConformanceReport: what ran, against which implementation and Kubernetes, and the outcome of
every test, per profile. Its JSON Schema is `report.schema.json` beside this module."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from conformance.kep import SUITE_VERSION, features
from conformance.kep.suite import Outcome, TestResult

API_VERSION = "conformance.multinetwork.x-k8s.io/v1alpha1"
KIND = "ConformanceReport"


@dataclass(frozen=True)
class Implementation:
    name: str
    version: str
    url: str
    contact: tuple[str, ...] = ()


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        resources.files("conformance.kep").joinpath("report.schema.json").read_text())
    return loaded


def _level(feature_names: Sequence[str]) -> features.Level:
    levels = {features.BY_NAME[f].level for f in feature_names}
    return features.Level.EXTENDED if features.Level.EXTENDED in levels else features.Level.CORE


def profile_of(result: TestResult) -> str:
    """A test counts in the profile of its highest-level feature: "core" or "extended"."""
    return "extended" if _level(result.features) is features.Level.EXTENDED else "core"


def _result(passed: int, failed: int, skipped: int) -> str:
    if failed:
        return "failure"
    return "partial" if skipped or not passed else "success"


def build(results: Sequence[TestResult], *, implementation: Implementation, requested: Sequence[str],
          kubernetes_version: str, mode: str, excluded: Sequence[str] = (),
          now: datetime.datetime | None = None) -> dict[str, Any]:
    """The report as a JSON-ready dict (key order as shown to readers)."""
    when = (now or datetime.datetime.now(datetime.UTC)).replace(microsecond=0)
    profiles: list[dict[str, Any]] = []
    for profile in ("core", "extended"):
        mine = [r for r in results if profile_of(r) == profile]
        wanted = [f for f in requested if (features.BY_NAME[f].level.value.lower() == profile)]
        if not wanted and not mine:
            continue
        passed = [r.name for r in mine if r.outcome is Outcome.PASSED]
        failed = [{"name": r.name, "message": r.message} for r in mine if r.outcome is Outcome.FAILED]
        skipped = [{"name": r.name, "reason": r.message} for r in mine if r.outcome is Outcome.SKIPPED]
        failed_features = sorted({f for r in mine if r.outcome is Outcome.FAILED for f in r.features})
        profiles.append({
            "name": profile,
            "result": _result(len(passed), len(failed), len(skipped)),
            "summary": f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped",
            "features": wanted,
            "failedFeatures": failed_features,
            "tests": {"passed": passed, "failed": failed, "skipped": skipped},
        })
    cleanup = [{"name": r.name, "left": r.cleanup} for r in results if r.cleanup]
    report: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "suite": {"name": "kep-3698", "version": SUITE_VERSION},
        "date": when.isoformat().replace("+00:00", "Z"),
        "implementation": {"name": implementation.name, "version": implementation.version,
                           "url": implementation.url, "contact": list(implementation.contact)},
        "kubernetesVersion": kubernetes_version,
        "mode": mode,
        "requestedFeatures": list(requested),
        "excludedTests": list(excluded),
        "profiles": profiles,
    }
    if cleanup:
        report["cleanupProblems"] = cleanup
    return report


def failed(report: dict[str, Any]) -> bool:
    return any(p["tests"]["failed"] for p in report["profiles"])
