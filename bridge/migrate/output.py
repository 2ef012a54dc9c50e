"""What a plan looks like to its readers: the plan file, the human diff, the problems,
and the workloads rewritten (`--write-manifests`). Pure."""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from bridge.migrate.objects import (
    FIELD_MANAGER,
    NAD_KIND,
    NPWG_NETWORKS_ANNOTATION,
    OPTIONS_API_VERSION,
    Action,
)
from bridge.migrate.planning import Plan, WorkloadChange
from podnetwork.ground import constants, findings
from podnetwork.ground.findings import Finding

PLAN_API_VERSION = OPTIONS_API_VERSION
PLAN_KIND = "MigrationPlan"


def _workload_record(change: WorkloadChange) -> dict[str, Any]:
    wl = change.workload
    record: dict[str, Any] = {
        "apiVersion": wl.api_version,
        "kind": str(wl.kind),
        "namespace": wl.namespace,
        "name": wl.name,
        "annotationsPath": wl.annotations_path,
        "before": {NPWG_NETWORKS_ANNOTATION: change.before,
                   **({} if change.replaced is None else {constants.NETWORKS_ANNOTATION: change.replaced})},
        "after": {constants.NETWORKS_ANNOTATION: change.after},
    }
    if wl.resource_version:
        record["resourceVersion"] = wl.resource_version
    if wl.source:
        record["source"] = wl.source
    return record


def plan_header(p: Plan) -> dict[str, Any]:
    """The first document of a plan file: what changes on workloads, what does not migrate."""
    return {
        "apiVersion": PLAN_API_VERSION,
        "kind": PLAN_KIND,
        "fieldManager": FIELD_MANAGER,
        "workloads": [_workload_record(c) for c in p.workloads],
        "reused": [str(o.ref) for o in p.objects(Action.REUSE)],
        "unmigratable": [
            {
                "object": str(u.ref),
                "reason": str(u.reason),
                "message": u.message,
                **({"source": u.source} if u.source else {}),
            }
            for u in p.unmigratable
        ],
        "skipped": [{"object": str(s.ref), "message": s.message} for s in p.skipped],
    }


# libyaml's emitter when present: a plan of thousands of workloads is megabytes of YAML.
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(documents: Iterable[Mapping[str, Any]]) -> str:
    return yaml.dump_all(
        [dict(d) for d in documents], Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )


def to_yaml(p: Plan) -> str:
    """The plan file: the MigrationPlan document, then the objects to create in apply order."""
    return dump_yaml([plan_header(p), *(o.obj for o in p.objects())])


def _annotation_lines(annotations: Mapping[str, str]) -> list[str]:
    return [f"{k}: {v}\n" for k, v in sorted(annotations.items())]


def problems(p: Plan) -> str:
    """One line per workload that cannot be migrated (`!`) or is left to its owner (`~`),
    and per note of a migrated one (`i`: a key it drops)."""
    notes = [Finding(c.workload.ref, note, source=c.workload.source) for c in p.workloads for note in c.notes]
    return findings.report(p.unmigratable, notes, p.skipped)


def _detail(obj: Mapping[str, Any]) -> str:
    """What a planned object points at, for the diff. The objects are the plan's own."""
    spec = obj["spec"]
    if obj["kind"] == constants.PODNETWORK_KIND:
        ref = spec["parametersRefs"][0]
        return f" -> {NAD_KIND} {ref['namespace']}/{ref['name']}"
    if obj["kind"] == constants.ATTACHMENT_KIND:
        return f" -> PodNetwork {spec['podNetworkName']}"
    return " " + json.dumps(spec, sort_keys=True, separators=(",", ":"))


def diff(p: Plan) -> str:
    """What the plan changes, for a human: new objects, then a unified diff per workload."""
    out: list[str] = []
    for o in p.objects(None):
        mark = "+" if o.action == Action.CREATE else "="
        verb = "" if o.action == Action.CREATE else " (exists, reused)"
        out.append(f"{mark} {o.ref}{_detail(o.obj)}{verb}\n")
    for change in p.workloads:
        wl = change.workload
        label = f"{wl.ref} {wl.annotations_path}"
        out.extend(
            difflib.unified_diff(
                _annotation_lines(wl.annotations),
                _annotation_lines(change.new_annotations()),
                fromfile=f"{label} (before)",
                tofile=f"{label} (after)",
                n=0,
            )
        )
    return "".join(out)


def rewrite(obj: Mapping[str, Any], change: WorkloadChange) -> dict[str, Any]:
    """The workload object with its pod template annotations replaced as planned."""
    out = copy.deepcopy(dict(obj))
    cur: dict[str, Any] = out
    for key in (*change.workload.template_path, "metadata"):
        cur = cur.setdefault(key, {})
    cur["annotations"] = change.new_annotations()
    return out


__all__ = [
    "PLAN_API_VERSION",
    "PLAN_KIND",
    "diff",
    "dump_yaml",
    "plan_header",
    "problems",
    "rewrite",
    "to_yaml",
]
