"""The invariant that makes the migration safe: translating the migrated networks with
the bridge (bridge.translate) gives back the original NPWG selection: same NADs, in
the same order, with the same interface names and per-pod keys."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bridge import migrate, npwg, translate
from podnetwork.ground import constants
from podnetwork.ground.workloads import WorkloadKind
from podnetwork.kep import networks, validation

POD_NAMESPACES = ("app", "infra")
NAD_NAMES = ("a", "b", "net-1", "sriov0")
NAD_CONFIG = json.dumps({"cniVersion": "1.0.0", "type": "bridge", "ipam": {"type": "host-local", "subnet": "10.9.0.0/24", "gateway": "10.9.0.1"}})

labels = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?\Z")
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
ifnames = st.sampled_from(["eth1", "net1", "net2", "mv0", "stor-0", "if_x", "veth.7"])
hex_byte = st.integers(0, 255).map(lambda b: f"{b:02x}")
macs = st.lists(hex_byte, min_size=6, max_size=6).map(":".join)
guids = st.lists(hex_byte, min_size=8, max_size=8).map(":".join)
cni_args = st.dictionaries(
    st.sampled_from(["spoofchk", "vlan", "trust", "mtu"]),
    st.one_of(st.text(max_size=5), st.integers(-5, 5000), st.booleans()),
    min_size=1,
    max_size=3,
)
port_mappings = st.lists(
    st.fixed_dictionaries(
        {"hostPort": st.integers(1, 65535), "containerPort": st.integers(1, 65535)},
        optional={"protocol": st.sampled_from(["TCP", "udp", "Sctp"])},
    ),
    min_size=1,
    max_size=2,
)
rates = st.integers(1, 10**9)
bandwidths = st.one_of(
    st.fixed_dictionaries({"ingressRate": rates}, optional={"ingressBurst": rates, "egressRate": rates}),
    st.fixed_dictionaries({"egressRate": rates}, optional={"egressBurst": rates}),
)


@st.composite
def elements(draw: st.DrawFn) -> dict[str, Any]:
    element: dict[str, Any] = {"name": draw(st.sampled_from(NAD_NAMES))}
    namespace = draw(st.sampled_from((None, "", *POD_NAMESPACES)))
    if namespace is not None:
        element["namespace"] = namespace
    optional: dict[str, st.SearchStrategy[Any]] = {
        "interface": ifnames,
        "mac": macs,
        "cni-args": cni_args,
        "portMappings": port_mappings,
        "bandwidth": bandwidths,
        "infiniband-guid": guids,
    }
    for key, strategy in optional.items():
        if draw(st.integers(0, 4)) == 0:
            element[key] = draw(strategy)
    which = draw(st.sampled_from(["none", "ips", "claim"]))
    if which == "ips":
        element["ips"] = draw(
            st.lists(st.one_of(ipv4.map(lambda a: a + "/24"), ipv6.map(lambda a: a + "/64"), ipv4), min_size=1, max_size=2)
        )
    elif which == "claim":
        element["ipam-claim-reference"] = draw(labels)
    return element


@st.composite
def selections(draw: st.DrawFn) -> tuple[str, str]:
    """(pod namespace, annotation text) of a valid selection, in either format."""
    pod_namespace = draw(st.sampled_from(POD_NAMESPACES))
    items = draw(st.lists(elements(), max_size=5))
    ifnames_used = [e["interface"] for e in items if "interface" in e]
    assume(len(ifnames_used) == len(set(ifnames_used)))
    if items and draw(st.booleans()):
        route_at = draw(st.integers(0, len(items) - 1))
        items[route_at]["default-route"] = draw(st.lists(st.one_of(ipv4, ipv6), max_size=2))
    simple = all(set(e) <= {"name", "namespace", "interface"} and e.get("namespace") != "" for e in items)
    if items and simple and draw(st.booleans()):
        text = ",".join(
            (f"{e['namespace']}/" if "namespace" in e else "") + e["name"] + (f"@{e['interface']}" if "interface" in e else "")
            for e in items
        )
    else:
        text = json.dumps(items)
    return pod_namespace, text


def nads() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"config": NAD_CONFIG},
        }
        for ns in POD_NAMESPACES
        for name in NAD_NAMES
    ]


def workload(kind: str, namespace: str, text: str) -> dict[str, Any]:
    annotations = {migrate.NPWG_NETWORKS_ANNOTATION: text}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "namespace": namespace, "annotations": annotations}}
    api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    template = {"metadata": {"annotations": annotations}, "spec": {"containers": []}}
    spec = {"jobTemplate": {"spec": {"template": template}}} if kind == "CronJob" else {"template": template}
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "w", "namespace": namespace}, "spec": spec}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(selection=selections(), kind=st.sampled_from([str(k) for k in WorkloadKind]))
def test_translating_the_migrated_networks_gives_back_the_original_selection(
    selection: tuple[str, str], kind: str
) -> None:
    pod_namespace, text = selection
    original = npwg.parse_selection(text, pod_namespace)

    p = migrate.plan(migrate.Inventory.of([*nads(), workload(kind, pod_namespace, text)]))

    assert p.unmigratable == []
    [change] = p.workloads
    migrated = networks.parse(change.after)
    assert migrated[0].pod_network_name == constants.DEFAULT_PODNETWORK
    assert validation.validate_networks(migrated) == []
    objects = translate.Objects.from_objects([*nads(), *(o.obj for o in p.objects())])
    back = translate.translate(migrated, pod_namespace, objects)
    assert [e.to_json() for e in back.elements] == [e.to_json() for e in original]
    assert back.warnings == []


@settings(max_examples=60, deadline=None)
@given(
    a=st.tuples(labels, labels, st.integers(1, 3)),
    b=st.tuples(labels, labels, st.integers(1, 3)),
)
def test_distinct_nads_and_uses_never_share_a_natural_podnetwork_name(
    a: tuple[str, str, int], b: tuple[str, str, int]
) -> None:
    assume(a != b)
    assert migrate.network_name(*a) != migrate.network_name(*b)
    assert validation.dns1123_subdomain_errors("metadata.name", migrate.network_name(*a)) == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
annotation_texts = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["a", "a,b", "app/a@net1", "[]", "[{}]", '[{"name": "a"}]', "{", ",", "a,,b"]),
    st.lists(st.dictionaries(st.sampled_from(["name", "namespace", "ips", "interface", "x.y"]), json_values), max_size=3).map(json.dumps),
)


@st.composite
def manifests_objects(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from([*(str(k) for k in WorkloadKind), "NetworkAttachmentDefinition", "Service"]))
    api = {"Pod": "v1", "Job": "batch/v1", "CronJob": "batch/v1", "NetworkAttachmentDefinition": "k8s.cni.cncf.io/v1", "Service": "v1"}.get(kind, "apps/v1")
    annotations = {migrate.NPWG_NETWORKS_ANNOTATION: draw(annotation_texts)}
    if draw(st.booleans()):
        annotations[constants.NETWORKS_ANNOTATION] = draw(st.text(max_size=10))
    meta: dict[str, Any] = {"name": draw(labels), "namespace": draw(st.sampled_from(POD_NAMESPACES)), "annotations": annotations}
    template: Any = {"metadata": {"annotations": annotations}, "spec": draw(st.one_of(json_values, st.just({"hostNetwork": True})))}
    spec: Any = {"template": template} if kind != "CronJob" else {"jobTemplate": {"spec": {"template": template}}}
    if draw(st.integers(0, 5)) == 0:
        spec = draw(json_values)
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


@settings(max_examples=150, deadline=None)
@given(objects=st.lists(manifests_objects(), max_size=6))
def test_any_input_is_planned_without_crashing_and_no_workload_is_dropped(objects: list[dict[str, Any]]) -> None:
    inventory = migrate.Inventory.of([*nads(), *objects])
    p = migrate.plan(inventory)
    # A workload that does not fit the workload view is reported too, whatever its annotations.
    candidates = [w.ref for w in inventory.workloads if migrate.NPWG_NETWORKS_ANNOTATION in w.annotations]
    candidates += [w.ref for w in inventory.invalid]
    accounted = [c.workload.ref for c in p.workloads] + [u.ref for u in p.unmigratable] + [s.ref for s in p.skipped]
    assert sorted(map(str, accounted)) == sorted(map(str, candidates))
    for change in p.workloads:
        assert validation.validate_networks(networks.parse(change.after)) == []
    invalid = {str(w.ref) for w in inventory.invalid}
    assert {str(u.ref) for u in p.unmigratable if u.reason == migrate.Reason.INVALID_OBJECT} == invalid
    migrate.to_yaml(p)
    migrate.diff(p)
