"""What `podnetwork npwg-conformance` prints, and the JSON report `--report` writes."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from conformance.npwg.scenarios import Outcome

REPORT_KIND = "NPWGConformanceReport"
REPORT_VERSION = "v1alpha1"
SPEC = "Kubernetes Network Custom Resource Definition De-facto Standard v1.3 (NPWG)"


def line(outcome: Outcome) -> str:
    """One scenario's result as the progress shows it, with its failures and notes below."""
    mark = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[outcome.verdict]
    s = outcome.scenario
    text = f"{mark} {s.id} [{', '.join(s.sections)}] {s.title}"
    lines = [text]
    if outcome.skip_reason:
        lines.append(f"     skipped: {outcome.skip_reason}")
    lines += [f"     - {f}" for f in outcome.failures]
    lines += [f"     note: {n}" for n in outcome.notes]
    return "\n".join(lines)


def counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return {v: sum(1 for o in outcomes if o.verdict == v) for v in ("passed", "failed", "skipped")}


def summary(outcomes: Sequence[Outcome]) -> str:
    c = counts(outcomes)
    return f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped"


def document(
    outcomes: Sequence[Outcome],
    *,
    plugin: str,
    conf: str,
    cni_version: str,
    netns_prefix: str = "",
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """The JSON report: what ran against what, and each scenario's verdict with its reasons."""
    when = now or datetime.datetime.now(datetime.UTC)
    c = counts(outcomes)
    return {
        "kind": REPORT_KIND,
        "apiVersion": REPORT_VERSION,
        "date": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "spec": SPEC,
        "plugin": plugin,
        "conf": conf,
        "cniVersion": cni_version,
        # The run's own namespaces: what to look for when one outlives an interrupted run.
        "netnsPrefix": netns_prefix,
        "result": "failure" if c["failed"] else "success",
        "summary": c,
        "scenarios": [
            {
                "id": o.scenario.id,
                "title": o.scenario.title,
                "sections": list(o.scenario.sections),
                "result": o.verdict,
                "failures": list(o.failures),
                "notes": list(o.notes),
                **({"skipReason": o.skip_reason} if o.skip_reason else {}),
            }
            for o in outcomes
        ],
    }
