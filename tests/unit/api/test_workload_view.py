"""The workload view of the ground (podnetwork.ground.workloads) and the findings record
(podnetwork.ground.findings) that `podnetwork migrate` and `podnetwork export-dra` share:
every kind's pod template found where the kind keeps it, malformed objects refused naming
the fields (never another exception), and the lines both commands print."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podnetwork.ground import excerpts, findings, workloads
from podnetwork.ground.findings import Finding, ObjectRef
from podnetwork.ground.workloads import InvalidWorkload, WorkloadKind

API_VERSIONS = {
    WorkloadKind.POD: "v1",
    WorkloadKind.DEPLOYMENT: "apps/v1",
    WorkloadKind.STATEFULSET: "apps/v1",
    WorkloadKind.DAEMONSET: "apps/v1",
    WorkloadKind.REPLICASET: "apps/v1",
    WorkloadKind.JOB: "batch/v1",
    WorkloadKind.CRONJOB: "batch/v1",
}

TEMPLATE = {
    "metadata": {"labels": {"app": "w"}, "annotations": {"example.com/a": "1", "example.com/b": "two"}},
    "spec": {
        "hostNetwork": True,
        "containers": [{"name": "c", "image": "busybox"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-0"}],
        "schedulingGates": [{"name": "example.com/wait"}],
    },
}


def manifest(kind: WorkloadKind, template: Any = None, **meta: Any) -> dict[str, Any]:
    """An object of `kind` with `template` (by default TEMPLATE) where that kind keeps it, written
    out by hand so the test does not use the table it checks."""
    template = copy.deepcopy(TEMPLATE if template is None else template)
    metadata = {"name": "w", "namespace": "ns", **meta}
    if kind == WorkloadKind.POD:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {**metadata, **template["metadata"]},
                "spec": template["spec"]}
    if kind == WorkloadKind.CRONJOB:
        spec: dict[str, Any] = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    else:
        spec = {"replicas": 2, "template": template}
    return {"apiVersion": API_VERSIONS[kind], "kind": str(kind), "metadata": metadata, "spec": spec}


@pytest.mark.parametrize("kind", list(WorkloadKind))
def test_every_kind_finds_its_pod_template(kind: WorkloadKind) -> None:
    obj = manifest(kind)
    wl = workloads.read(obj, source="f.yaml:doc 1")
    assert wl is not None
    assert (wl.kind, wl.api_version, wl.namespace, wl.name, wl.source) == (
        kind, API_VERSIONS[kind], "ns", "w", "f.yaml:doc 1")
    assert dict(wl.annotations) == TEMPLATE["metadata"]["annotations"]
    assert wl.host_network is True
    assert [c.name for c in wl.spec.resource_claims or ()] == ["gpu"]
    assert [g.name for g in wl.spec.scheduling_gates or ()] == ["example.com/wait"]
    assert wl.obj is obj
    # The path the view names is where the template is in the object.
    node: Any = obj
    for key in wl.template_path:
        node = node[key]
    assert node["spec"] is obj["spec"] if kind == WorkloadKind.POD else node == TEMPLATE
    expected_path = {
        WorkloadKind.POD: "metadata.annotations",
        WorkloadKind.CRONJOB: "spec.jobTemplate.spec.template.metadata.annotations",
    }.get(kind, "spec.template.metadata.annotations")
    assert wl.annotations_path == expected_path
    assert str(wl.ref) == f"{kind} ns/w"


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
        {"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "d"}},
        {"apiVersion": "extensions/v1beta1", "kind": "DaemonSet", "metadata": {"name": "d"}},
        {"apiVersion": "apps/v1", "kind": "Pod", "metadata": {"name": "p"}},
        {"apiVersion": 1, "kind": "Pod"},
        {"kind": "Deployment"},
        ["not", "an", "object"],
    ],
    ids=["Service", "other group", "old group", "Pod in apps", "apiVersion not text", "no apiVersion", "a list"],
)
def test_other_kinds_and_groups_are_not_workloads(obj: Any) -> None:
    assert workloads.read(obj) is None


def test_absent_parts_read_as_empty_and_the_namespace_defaults() -> None:
    bare = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    wl = workloads.read(bare, default_namespace="given")
    assert wl is not None
    assert (wl.namespace, dict(wl.annotations), wl.host_network, wl.template.spec) == ("given", {}, False, None)
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"jobTemplate": None}}
    wl = workloads.read(cron)
    assert wl is not None and dict(wl.annotations) == {} and wl.namespace == "default"


def test_the_owner_is_the_first_controller_of_a_workload_kind() -> None:
    refs = [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "1", "controller": True},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "old", "uid": "2"},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "3", "controller": True},
    ]
    wl = workloads.read(manifest(WorkloadKind.POD, ownerReferences=refs))
    assert wl is not None and wl.owner == ObjectRef("ReplicaSet", "ns", "web")
    wl = workloads.read(manifest(WorkloadKind.POD, ownerReferences=refs[:2]))
    assert wl is not None and wl.owner is None


@pytest.mark.parametrize(("phase", "finished"), [("Succeeded", True), ("Failed", True), ("Running", False),
                                                  (None, False)])
def test_a_pod_is_finished_in_phase_succeeded_or_failed(phase: str | None, finished: bool) -> None:
    obj = manifest(WorkloadKind.POD)
    if phase is not None:
        obj["status"] = {"phase": phase}
    wl = workloads.read(obj)
    assert wl is not None and wl.finished is finished
    job = manifest(WorkloadKind.JOB)
    job["status"] = {"phase": "Succeeded"}  # not a Pod's phase: a Job is never "finished" here
    assert workloads.read(job).finished is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda o: o["spec"]["template"]["metadata"]["annotations"].update({"x": 5}),
         "spec.template.metadata.annotations.x: Input should be a valid string"),
        (lambda o: o["spec"]["template"]["spec"].update({"hostNetwork": "true"}),
         "spec.template.spec.hostNetwork: Input should be a valid boolean"),
        (lambda o: o["spec"].update({"template": ["x"]}), "spec.template: Input should be an object"),
        (lambda o: o.update({"spec": True}), "spec: Input should be an object"),
        (lambda o: o.update({"metadata": True}), "metadata: Input should be an object"),
        (lambda o: o["metadata"].update({"ownerReferences": 5}), "metadata.ownerReferences: Input should be a valid list"),
        (lambda o: o["metadata"].update({"resourceVersion": 7}), "metadata.resourceVersion: Input should be a valid string"),
        (lambda o: o["spec"]["template"]["spec"].update({"resourceClaims": {"a": 1}}),
         "spec.template.spec.resourceClaims: Input should be a valid list"),
        (lambda o: o["spec"]["template"]["spec"].update({"schedulingGates": 5}),
         "spec.template.spec.schedulingGates: Input should be a valid list"),
    ],
    ids=["annotation not text", "hostNetwork not a boolean", "template a list", "spec true", "metadata true",
         "ownerReferences a number", "resourceVersion a number", "resourceClaims a map", "schedulingGates a number"],
)
def test_a_malformed_workload_is_refused_naming_the_field(change: Any, field: str) -> None:
    obj = manifest(WorkloadKind.DEPLOYMENT)
    change(obj)
    with pytest.raises(InvalidWorkload) as caught:
        workloads.read(obj, default_namespace="given", source="f.yaml:doc 3")
    exc = caught.value
    assert field in exc.message and exc.message.startswith("does not fit its schema: ")
    assert exc.source == "f.yaml:doc 3"
    namespace = "given" if obj["metadata"] is True else "ns"
    name = "" if obj["metadata"] is True else "w"
    assert exc.ref == ObjectRef("Deployment", namespace, name)


def test_a_refusal_names_a_few_fields_and_counts_the_rest() -> None:
    obj = manifest(WorkloadKind.POD)
    obj["metadata"]["annotations"] = {f"k{i}": i for i in range(40)}
    with pytest.raises(InvalidWorkload) as caught:
        workloads.read(obj)
    assert caught.value.message.count("Input should be a valid string") == 5
    assert caught.value.message.endswith("and 35 more")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
#: Where a random value replaces part of a well-formed object.
PLACES = [(), ("metadata",), ("metadata", "name"), ("metadata", "namespace"), ("metadata", "ownerReferences"),
          ("metadata", "annotations"), ("spec",), ("spec", "template"), ("spec", "jobTemplate"),
          ("spec", "template", "metadata"), ("spec", "template", "metadata", "annotations"),
          ("spec", "template", "spec"), ("spec", "template", "spec", "hostNetwork"),
          ("spec", "template", "spec", "resourceClaims"), ("spec", "hostNetwork"), ("status",),
          ("status", "phase"), ("apiVersion",), ("kind",)]


def _put(obj: Any, path: tuple[str, ...], value: Any) -> Any:
    if not path:
        return value
    node = obj
    for key in path[:-1]:
        if not isinstance(node, dict):
            return obj
        node = node.setdefault(key, {})
    if isinstance(node, dict):
        node[path[-1]] = value
    return obj


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(list(WorkloadKind)), places=st.lists(st.sampled_from(PLACES), max_size=3),
       values=st.lists(json_values, min_size=3, max_size=3))
def test_any_shape_reads_as_a_workload_none_or_a_refusal_and_the_view_keeps_what_it_read(
    kind: WorkloadKind, places: list[tuple[str, ...]], values: list[Any]
) -> None:
    obj = manifest(kind)
    for place, value in zip(places, values, strict=False):
        obj = _put(obj, place, value)
    before = json.dumps(obj, sort_keys=True, default=repr)
    try:
        wl = workloads.read(obj)
    except InvalidWorkload as exc:
        assert exc.message.startswith("does not fit its schema: ") and len(exc.message) < 2000
        assert exc.ref.kind == str(kind)
        return
    finally:
        assert json.dumps(obj, sort_keys=True, default=repr) == before, "the object read was changed"
    if wl is None:
        return
    # What the view says is what the object holds at the kind's path.
    node: Any = obj
    for key in wl.template_path:
        node = node.get(key) if isinstance(node, dict) else None
    meta = node.get("metadata") if isinstance(node, dict) else None
    raw = meta.get("annotations") if isinstance(meta, dict) else None
    assert dict(wl.annotations) == (raw or {})
    spec = node.get("spec") if isinstance(node, dict) else None
    assert wl.host_network is (isinstance(spec, dict) and spec.get("hostNetwork") is True)


# --- findings ----------------------------------------------------------------------------------


def test_the_lines_are_marked_and_ordered_refused_notes_skipped() -> None:
    pod = ObjectRef("Pod", "ns", "p")
    text = findings.report(
        [Finding(pod, "no such NAD", "MissingNetworkAttachmentDefinition", "f.yaml:doc 2")],
        [Finding(pod, "drops interfaceRequest")],
        [Finding(ObjectRef("PodNetwork", "", "default"), "stays with the cluster")],
    )
    assert text == (
        "! f.yaml:doc 2: Pod ns/p: MissingNetworkAttachmentDefinition: no such NAD\n"
        "i Pod ns/p: drops interfaceRequest\n"
        "~ PodNetwork default: stays with the cluster\n"
    )


def test_bounded_lines_cut_names_and_messages_and_unbounded_ones_do_not() -> None:
    long_name, long_message = "n" * 300, "m" * (excerpts.LINE_LIMIT + 50)
    finding = Finding(ObjectRef("Pod", "ns", long_name), long_message, "Why")
    bounded = finding.line()
    assert long_name not in bounded and "(300 characters, cut)" in bounded
    assert long_message not in bounded and f"({len(long_message)} characters, cut)" in bounded
    assert str(finding) == bounded
    assert finding.line(bounded=False) == f"Pod ns/{long_name}: Why: {long_message}"
