"""What the agent's policy state keeps of each pod, and how (`bridge.agent.policy.state`).

The state reads pods from the raw objects a list or watch decodes, building the pydantic
`ObjectMeta` only for metadata of unusual types. Proven against the reading it replaced (the
model for every pod, `world.pod_info`), on random pods with hypothesis; and that what it keeps
holds none of the decoded object's strings (which would keep the list's memory: CPython frees
an arena only when nothing in it lives) and shares what pods of one workload carry alike.

The world a pass decides from is kept between passes (each pod keyed by network once, again
only when it or the networks change): after any sequence of changes it is the world built
afresh from what the state keeps, as every pass built it before.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from bridge.agent.kube.watchcache import NAD, NAMESPACE, POD, PODNETWORK, POLICY
from bridge.agent.policy.state import PolicyState
from bridge.policy import views
from bridge.policy.world import PodInfo, World, interface, pod_info
from podnetwork.ground import constants
from podnetwork.ground.core import ObjectMeta
from tests.unit.policy_world_support import afresh, assert_same_world

ENDED = {"Succeeded", "Failed"}


def reference(state: PolicyState, obj: dict[str, Any]) -> tuple[bool, PodInfo | None]:
    """The reading before (ObjectMeta built for every pod): (whether the pod is read at all,
    what is kept of it)."""
    raw = obj.get("metadata")
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return False, None
    try:
        meta = ObjectMeta.model_validate(raw)
    except ValidationError:
        return False, None
    key = f"{meta.namespace or ''}/{meta.name}"  # a pod without a namespace is kept as "/name"
    status, spec = obj.get("status"), obj.get("spec")
    phase = status.get("phase") if isinstance(status, dict) else None
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    interfaces = views.reported_interfaces(meta)
    mine = key in state.local or (state.node is not None and node == state.node)
    if phase in ENDED or not (interfaces or mine):
        return True, None
    labels = {k: v for k, v in (meta.labels or {}).items() if isinstance(k, str) and isinstance(v, str)}
    return True, pod_info(meta.namespace or "", meta.name or "", labels,
                          node=node if isinstance(node, str) else None,
                          ports=views.container_ports(obj), interfaces=interfaces)


def pod(i: int, *, app: str = "web", node: str = "other", address: str | None = None) -> dict[str, Any]:
    """A pod as JSON decodes it: every string its own object."""
    text = json.dumps({"metadata": {
        "name": f"pod-{i}", "namespace": "ns", "labels": {"app": app, "hash": "h1"},
        "annotations": {constants.NPWG_NETWORK_STATUS_ANNOTATION: json.dumps(
            [{"name": "ns/blue", "interface": "net1", "ips": [address or f"10.0.{i // 256}.{i % 256}"]}])}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "ports": [
            {"name": "http", "containerPort": 8080}, {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}]},
        "status": {"phase": "Running"}})
    decoded: dict[str, Any] = json.loads(text)
    return decoded


# --- random pods, including metadata the model coerces or refuses -----------------------------

texts = st.text(max_size=6)
odd = st.one_of(st.none(), st.integers(-3, 3), st.booleans(), st.floats(allow_nan=False, width=16), texts,
                st.lists(texts, max_size=2), st.dictionaries(texts, texts, max_size=2))
labels = st.one_of(st.none(), st.dictionaries(st.sampled_from(["app", "tier", "x"]),
                                              st.sampled_from(["a", "b", ""]), max_size=3), odd)


@st.composite
def status_annotation(draw: st.DrawFn) -> str:
    entries = draw(st.lists(st.fixed_dictionaries(
        {"name": st.sampled_from(["blue", "ns/blue", "other/red", constants.DEFAULT_PODNETWORK])},
        optional={"interface": st.one_of(st.sampled_from(["net1", "net2"]), st.integers(0, 2)),
                  "ips": st.lists(st.sampled_from(["10.0.0.1", "10.0.0.2", "fd00::1", "bad", "10.0.0.3/24"]),
                                  max_size=2),
                  "default": st.booleans()}), max_size=3))
    return draw(st.one_of(st.just(json.dumps(entries)), st.sampled_from(["", "[", "{}", "null"])))


@st.composite
def pod_ips_annotation(draw: st.DrawFn) -> str:
    entries = draw(st.lists(st.fixed_dictionaries(
        {"podNetwork": st.sampled_from(["blue", "green", constants.DEFAULT_PODNETWORK]),
         "ip": st.sampled_from(["10.1.0.1", "fd01::2", "x"])},
        optional={"interfaceName": st.sampled_from(["net1", "net3"])}), max_size=2))
    return draw(st.one_of(st.just(json.dumps(entries)), st.sampled_from(["", "]"])))


@st.composite
def metadata(draw: st.DrawFn) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": draw(st.one_of(st.sampled_from(["a", "b"]), odd))}
    if draw(st.booleans()):
        meta["namespace"] = draw(st.one_of(st.sampled_from(["ns", "other"]), odd))
    for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation",
                "finalizers", "resource_version", "creation_timestamp", "deletion_timestamp"):
        if draw(st.integers(0, 9)) == 0:
            meta[key] = draw(st.one_of(texts, odd, st.just("7")))
    if draw(st.booleans()):
        meta["labels"] = draw(labels)
    annotations: Any = {}
    if draw(st.booleans()):
        annotations[constants.NPWG_NETWORK_STATUS_ANNOTATION] = draw(status_annotation())
    if draw(st.booleans()):
        annotations[constants.POD_IPS_ANNOTATION] = draw(pod_ips_annotation())
    if draw(st.integers(0, 5)) == 0:
        annotations = draw(st.one_of(odd, st.just({"k": 1})))
    meta["annotations"] = annotations
    return meta


ports = st.lists(st.fixed_dictionaries(
    {"containerPort": st.one_of(st.integers(1, 3), st.booleans(), texts)},
    optional={"name": st.one_of(st.sampled_from(["http", "dns"]), st.integers(0, 1)),
              "protocol": st.sampled_from(["TCP", "UDP", "SCTP", "ICMP"])}), max_size=2)
pods = st.fixed_dictionaries(
    {"metadata": st.one_of(metadata(), odd)},
    optional={"spec": st.fixed_dictionaries({}, optional={
                  "nodeName": st.one_of(st.sampled_from(["this", "other"]), odd),
                  "containers": st.lists(st.fixed_dictionaries({}, optional={"ports": ports}), max_size=2)}),
              "status": st.fixed_dictionaries({}, optional={"phase": st.sampled_from(["Running", "Failed",
                                                                                      "Succeeded", "Pending"])})})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=pods, local=st.booleans())
def test_a_pod_is_read_and_kept_exactly_as_the_model_read_it(obj: dict[str, Any], local: bool) -> None:
    state = PolicyState(node="this")
    if local:
        state.keep("ns/a")
    read, expected = reference(state, obj)
    version = state.version
    state.changed(POD, "ADDED", obj)
    assert list(state.pods.values()) == ([] if expected is None else [expected])
    assert state.version == version + (1 if expected is not None else 0)
    if not read:
        return
    key = f"{obj['metadata'].get('namespace') or ''}/{obj['metadata']['name']}"
    assert list(state.pods) == ([] if expected is None else [key])
    if expected is None:
        # A pod that is read but not kept goes (an ended pod, its last secondary address gone).
        state.pods[key] = PodInfo("x", "y", {})
        state.changed(POD, "MODIFIED", obj)
        assert state.pods == {}


# --- what is kept holds none of the decoded object's strings, and is shared ---------------------


def strings_of(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings_of(k), *strings_of(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings_of(v)]
    return []


def test_no_string_the_state_keeps_is_one_of_the_listed_objects_own() -> None:
    listed = [pod(i) for i in range(3)]
    decoded = {id(s) for obj in listed for s in strings_of(obj) if not (len(s) <= 1 or sys.intern(s) is s)}
    state = PolicyState(node="this")
    state.listed(POD, listed)
    assert len(state.pods) == 3
    kept = [*state.pods]
    for info in state.pods.values():
        kept += [info.namespace, info.name, *info.labels, *info.labels.values(), info.node or "",
                 *(p.name for p in info.ports), *(i.network for i in info.interfaces),
                 *(i.interface or "" for i in info.interfaces)]
    assert [s for s in kept if id(s) in decoded] == []


def test_pods_with_the_same_labels_and_ports_share_one_mapping_and_one_tuple() -> None:
    state = PolicyState(node="this")
    state.listed(POD, [pod(0), pod(1), pod(2, app="db")])
    a, b, c = (state.pods[f"ns/pod-{i}"] for i in range(3))
    assert a.labels is b.labels and a.labels == {"app": "web", "hash": "h1"}
    assert c.labels is not a.labels and c.labels == {"app": "db", "hash": "h1"}
    assert a.ports is b.ports is c.ports and [p.name for p in a.ports] == ["http", "dns"]
    assert a.namespace is c.namespace and a.interfaces[0].network is c.interfaces[0].network


def test_label_sets_no_pod_carries_any_more_are_let_go() -> None:
    state = PolicyState(node="this")
    state.listed(POD, [])
    for i in range(600):  # a rollout after another: each pod its own pod-template-hash
        state.changed(POD, "ADDED", pod(i, app=f"v{i}"))
        state.changed(POD, "DELETED", pod(i, app=f"v{i}"))
    state.changed(POD, "ADDED", pod(1000, app="kept"))
    assert len(state.shared_labels) <= 256
    assert state.pods["ns/pod-1000"].labels == {"app": "kept", "hash": "h1"}
    for i in range(600):
        state.changed(POD, "ADDED", pod(2000 + i, app=f"w{i}"))
    assert state.pods["ns/pod-1000"].labels == {"app": "kept", "hash": "h1"}
    assert len(state.shared_labels) >= 601  # every label set a pod carries is still there


# --- the world of a pass: kept between passes, the same as one built afresh ---------------------


def podnetwork(name: str, nad: str | None) -> dict[str, Any]:
    """A PodNetwork: of the NPWG bridge, backed by `nad` (`namespace/name`), or of another provider."""
    spec: dict[str, Any] = {"enabled": True, "provider": "example.com/other"}
    if nad is not None:
        namespace, _, nad_name = nad.partition("/")
        spec = {"enabled": True, "provider": "multinetwork.x-k8s.io/npwg-bridge", "parametersRefs": [
            {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": nad_name,
             "namespace": namespace}]}
    return {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": name},
            "spec": spec}


def nad(key: str) -> dict[str, Any]:
    namespace, _, name = key.partition("/")
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"config": "{}"}}


def policy(namespace: str, name: str, network: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
            "metadata": {"namespace": namespace, "name": name,
                         "annotations": {constants.POLICY_FOR_PODNETWORK_ANNOTATION: network}},
            "spec": {"podSelector": selector, "policyTypes": ["Ingress"]}}


ADDRESSES = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1"]
NADS = ["ns/blue", "other/red", "ns/green-nad"]


@st.composite
def pod_object(draw: st.DrawFn) -> dict[str, Any]:
    """A pod of a small world: a few names, networks named as NADs (bare or `namespace/name`) and
    as PodNetworks, addresses that pods share (the index holds both), ended or running."""
    status = draw(st.lists(st.fixed_dictionaries({
        "name": st.sampled_from(["blue", *NADS, "default/nowhere"]), "interface": st.sampled_from(["net1", "net2"]),
        "ips": st.lists(st.sampled_from(ADDRESSES), min_size=1, max_size=2)}), max_size=2))
    pod_ips = draw(st.lists(st.fixed_dictionaries(
        {"podNetwork": st.sampled_from(["blue-pn", "green", "red"]), "ip": st.sampled_from(ADDRESSES)},
        optional={"interfaceName": st.sampled_from(["net1", "net3"])}), max_size=2))
    annotations = {}
    if status:
        annotations[constants.NPWG_NETWORK_STATUS_ANNOTATION] = json.dumps(status)
    if pod_ips:
        annotations[constants.POD_IPS_ANNOTATION] = json.dumps(pod_ips)
    return {"metadata": {"namespace": draw(st.sampled_from(["ns", "other"])), "name": draw(st.sampled_from("ab")),
                         "labels": {"app": draw(st.sampled_from(["web", "db"]))}, "annotations": annotations},
            "spec": {"nodeName": draw(st.sampled_from(["this", "other"])), "containers": [{"ports": [
                {"name": "http", "containerPort": draw(st.sampled_from([80, 8080]))}]}]},
            "status": {"phase": draw(st.sampled_from(["Running", "Running", "Failed"]))}}


LOCAL_KEYS = ["ns/a", "other/b", "ns/z"]  # ns/z: a local pod the watch has not delivered
_POD_EVENTS = st.tuples(st.just(POD), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), pod_object())
_STEPS = st.one_of(
    _POD_EVENTS, _POD_EVENTS, _POD_EVENTS,  # the most frequent change
    # Every pod read again (a new watch), as the watch gave them or as they are after events it missed.
    st.tuples(st.just("relist"), st.booleans(), st.lists(pod_object(), max_size=4)),
    st.tuples(st.just(NAD), st.sampled_from(["ADDED", "DELETED"]), st.sampled_from(NADS).map(nad)),
    st.tuples(st.just(PODNETWORK), st.sampled_from(["ADDED", "DELETED"]), st.builds(
        podnetwork, st.sampled_from(["blue-pn", "green", "red"]), st.sampled_from([None, *NADS]))),
    st.tuples(st.just(NAMESPACE), st.sampled_from(["ADDED", "DELETED"]), st.builds(
        lambda name, team: {"metadata": {"name": name, "labels": {"team": team}}},
        st.sampled_from(["ns", "other"]), st.sampled_from(["a", "b"]))),
    st.tuples(st.just(POLICY), st.sampled_from(["ADDED", "DELETED"]), st.builds(
        policy, st.sampled_from(["ns", "other"]), st.sampled_from(["deny", "all"]),
        st.sampled_from(["blue-pn", "green", "ns/blue"]),
        st.sampled_from([{}, {"matchLabels": {"app": "db"}}]))),
    st.tuples(st.just("keep"), st.sampled_from(LOCAL_KEYS), st.booleans()),
    st.tuples(st.just("pass"), st.lists(st.tuples(st.sampled_from(LOCAL_KEYS), st.sampled_from(
        ["blue-pn", "ns/blue", "green"]), st.sampled_from(ADDRESSES)), max_size=3), st.none()),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEPS, min_size=1, max_size=40))
def test_the_world_kept_between_passes_is_the_world_built_afresh(steps: list[tuple[Any, Any, Any]]) -> None:
    state = PolicyState(node="this")
    for kind in (POD, NAMESPACE, NAD, PODNETWORK, POLICY):
        state.listed(kind, [])
    watched: dict[str, dict[str, Any]] = {}  # the pods as the watch last gave them, to list again
    local: dict[str, PodInfo] = {}
    earlier: list[tuple[World, list[tuple[str, PodInfo]]]] = []
    for what, event, obj in steps:
        if what == "keep":
            state.keep(event, obj)
        elif what == "pass":
            # This node's pods as their records have them (`enforcement.pod_info_of`), in place of
            # the watched ones: a pass's overlay.
            local = {}
            for key, network, address in event:
                namespace, _, name = key.partition("/")
                local[key] = pod_info(namespace, name, {"app": "db"},
                                      interfaces=[interface(network, "net1", address)])
        elif what == "relist":
            if event:
                watched = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in obj}
            state.listed(POD, list(watched.values()))
        else:
            if what is POD:
                key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
                if event == "DELETED":
                    watched.pop(key, None)
                else:
                    watched[key] = obj
            state.changed(what, event, obj)
        kept = state.world(local)
        assert_same_world(kept, *afresh(state, local))
        earlier.append((kept, list(kept.pods.items())))
    # What a pass was given did not change under it when the state changed after.
    assert all(list(world.pods.items()) == pods for world, pods in earlier)


def test_a_pass_keys_again_only_the_pods_that_changed_and_every_pod_when_the_networks_do() -> None:
    state = PolicyState(node="this")
    state.listed(NAD, [nad("ns/blue")])
    state.listed(PODNETWORK, [podnetwork("blue-pn", "ns/blue")])
    state.listed(POD, [pod(i) for i in range(3)])  # each reports NAD ns/blue: keyed as blue-pn
    first = state.world()
    state.changed(POD, "MODIFIED", pod(1, address="10.0.9.9"))
    second = state.world()
    assert second.pods["ns/pod-0"] is first.pods["ns/pod-0"] and second.pods["ns/pod-2"] is first.pods["ns/pod-2"]
    assert [(i.network, [str(a) for a in i.addresses]) for i in second.pods["ns/pod-1"].interfaces] == [
        ("blue-pn", ["10.0.9.9"])]
    assert [str(a) for a in first.pods["ns/pod-1"].interfaces[0].addresses] == ["10.0.0.1"]
    state.changed(PODNETWORK, "DELETED", podnetwork("blue-pn", "ns/blue"))
    third = state.world()
    assert {i.network for p in third.pods.values() for i in p.interfaces} == {"ns/blue"}
    assert_same_world(third, *afresh(state))
