"""`wire.parse_args`: kube-scheduler's bodies take the short way, and it reads them exactly
as `ExtenderArgs.model_validate_json` does; everything else goes the long way. And `/filter`'s
reply written from the body's bytes (`wire.scheduler_body`, `decision.filter_encoded`)
decodes to exactly the reply of the long way."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pydantic
import pytest
from fastapi import HTTPException
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from podnetwork.ground import core
from scheduler_plugin import app as app_mod
from scheduler_plugin import cache as cache_mod
from scheduler_plugin import decision, wire
from scheduler_plugin.settings import Settings
from tests.api.extender_support import FILTER_BY_NAMES, attachment, by_names, node, pod, podnetwork

NAMES = ["node-a", "node-b", "node-c"]

json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
#: Keys the long way reads (aliases included), and one it ignores.
keys = st.sampled_from(["Pod", "pod", "Nodes", "nodes", "NodeNames", "nodeNames", "nodenames", "Other"])
#: Fields of the pod the models read, with values of any JSON type.
pod_paths = st.sampled_from([
    ("metadata",), ("metadata", "namespace"), ("metadata", "name"), ("metadata", "annotations"),
    ("metadata", "annotations", wire.constants.NETWORKS_ANNOTATION), ("metadata", "labels"),
    ("metadata", "generation"), ("spec",), ("spec", "hostNetwork"), ("spec", "os"), ("spec", "os", "name"),
    ("spec", "nodeName"), ("status",), ("status", "phase"), ("metadata", "uid"), ("kind",), ("apiVersion",),
    ("metadata", "finalizers"), ("metadata", "resourceVersion"), ("metadata", "deletionTimestamp"),
    ("spec", "schedulingGates"), ("spec", "os", "other"),
    # the views' Python names, which they accept too (populate_by_name)
    ("api_version",), ("metadata", "resource_version"), ("spec", "host_network"), ("spec", "node_name"),
])


def damaged_pod(draw: st.DrawFn) -> Any:
    the_pod = pod([{"podNetworkName": "blue", "interfaceName": "net1"}])
    for _ in range(draw(st.integers(0, 3))):
        path, value = draw(pod_paths), draw(json_values)
        target = the_pod
        for part in path[:-1]:
            if not isinstance(target.get(part), dict):
                break
            target = target[part]
        else:
            target[path[-1]] = value
    return the_pod


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    body: dict[str, Any] = by_names(damaged_pod(draw), draw(
        st.lists(st.text(max_size=8), max_size=4) | st.lists(json_values, max_size=3)))
    for _ in range(draw(st.integers(0, 2))):
        key = draw(keys)
        if draw(st.booleans()):
            body.pop(key, None)
        else:
            body[key] = draw(json_values | st.just(None))
    text = json.dumps(body)
    if draw(st.booleans()):  # a key twice: the last one counts, in both parsers
        text = text[:-1] + f', "Pod": {json.dumps(damaged_pod(draw))}}}'
    return text.encode()


def outcome(read: Any, body: bytes) -> Any:
    try:
        args = read(body)
    except (pydantic.ValidationError, ValueError) as exc:
        return ("error", str(exc))
    return ("args", args.pod.model_dump(), args.nodes, args.node_names)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
def test_the_short_way_reads_what_the_long_way_reads(body: bytes) -> None:
    fast = wire._scheduler_args(body)
    event("short way" if fast is not None else "long way")
    long_way = outcome(wire.ExtenderArgs.model_validate_json, body)
    if fast is not None:
        assert long_way == ("args", fast.pod.model_dump(), None, fast.node_names)
    assert outcome(wire.parse_args, body) == long_way


def test_kube_schedulers_own_body_takes_the_short_way() -> None:
    # A captured kube-scheduler request: if this fell back, the fuzz test above would prove nothing.
    fast = wire._scheduler_args(FILTER_BY_NAMES.encode())
    assert fast is not None
    assert fast.node_names == json.loads(FILTER_BY_NAMES)["NodeNames"]
    assert fast.pod.metadata.annotation(wire.constants.NETWORKS_ANNOTATION) is not None


@pytest.mark.parametrize("depth", [150, 250, 5000])
def test_nesting_keeps_the_long_ways_limit(depth: int) -> None:
    """pydantic refuses nesting past 200 levels (docs/limits.md); orjson would read 1,024."""
    the_pod = pod(None)
    the_pod["spec"]["deep"] = "DEEP"
    body = json.dumps(by_names(the_pod, NAMES)).replace('"DEEP"', "[" * depth + "]" * depth).encode()
    if depth < 200:
        assert wire.parse_args(body).node_names == NAMES
    else:
        with pytest.raises(pydantic.ValidationError, match="recursion limit"):
            wire.parse_args(body)


@pytest.mark.parametrize("body", [
    b'{"Pod": {}, "Nodes": null, "NodeNames": ["a", 1]}',
    b'{"Pod": {}, "Nodes": null, "NodeNames": ["a\\ud800"]}',
    b'{"Pod": {"metadata": {"annotations": {"x": 1}}}, "Nodes": null, "NodeNames": []}',
    b'{"Pod": null, "Nodes": null, "NodeNames": []}',
    b'{"Pod": {}, "Nodes": null}',
    b'{"Pod": {}, "Nodes": {"items": []}, "NodeNames": []}',
])
def test_bad_bodies_get_the_long_ways_message(body: bytes) -> None:
    with pytest.raises((pydantic.ValidationError, ValueError)) as fast:
        wire.parse_args(body)
    with pytest.raises((pydantic.ValidationError, ValueError)) as slow:
        wire.ExtenderArgs.model_validate_json(body)
    assert str(fast.value) == str(slow.value)


# --- the reply written from the body's bytes (`decision.filter_encoded`) against the long way ---

#: Node names, plain and not: JSON escapes a quote, a backslash and control characters;
#: Go's encoder also `<`, `>`, `&`, U+2028 and U+2029.
NODE_NAMES = ["node-a", "node-b", "n.c", "node d", "nöde", 'q"uote', "back\\slash", "<&>", "node-\u2028", "x\n"]
PODNETWORKS = ["default", "blue", "green", "red"]


def go_json(value: Any, *, ascii_only: bool) -> bytes:
    """`json.Marshal`'s compact layout (and its `<`, `>`, `&` escapes when `ascii_only` is False)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only)
    if not ascii_only:
        text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.encode()


@st.composite
def clusters(draw: st.DrawFn) -> cache_mod.Cache:
    c = cache_mod.Cache()
    for net in PODNETWORKS:
        if net == "default" or draw(st.booleans()):
            c.upsert(podnetwork(net, ready=draw(st.integers(0, 4)) > 0))
    if draw(st.booleans()):
        c.upsert(attachment("blue-fast", "blue", ready=draw(st.booleans())))
    offers = st.none() | st.lists(st.sampled_from(PODNETWORKS), max_size=3) | st.sampled_from(["not json", "{}"])
    for name in draw(st.lists(st.sampled_from(NODE_NAMES), unique=True).map(lambda n: [*NODE_NAMES[:4], *n])):
        c.upsert({**node(name, draw(offers)), "kind": "Node"})
    if draw(st.integers(0, 5)) > 0:
        c.mark_synced()
    return c


@st.composite
def pods(draw: st.DrawFn) -> Any:
    refs = st.sampled_from([*PODNETWORKS, "missing"]).map(lambda n: {"podNetworkName": n}) | st.just(
        {"podNetworkAttachmentName": "blue-fast"})
    networks = st.none() | st.lists(refs, max_size=3) | st.sampled_from(["[", "{}", '[{"podNetworkName": 1}]'])
    the_pod = pod(draw(networks))
    if draw(st.booleans()):
        the_pod = damaged_pod(draw)
    return the_pod


@st.composite
def go_bodies(draw: st.DrawFn) -> bytes:
    plain = NODE_NAMES[:4] if draw(st.integers(0, 3)) else [*NODE_NAMES, "unknown"]
    names = draw(st.lists(st.sampled_from(plain), max_size=8))
    body = go_json(by_names(draw(pods()), names), ascii_only=draw(st.booleans()))
    if draw(st.integers(0, 7)) == 0:  # a byte off somewhere: still the long way's answer
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + draw(st.sampled_from([b"", b",", b'"', b"]", b"}", b" "])) + body[at + 1:]
    return body


def answers(cluster: cache_mod.Cache, body: bytes, enabled: bool) -> tuple[bytes | None, Any]:
    """The short way's reply (None: it declined) and the long way's (or its HTTP error)."""
    endpoint = app_mod.create_app(cluster, Settings(multi_network=enabled)).filter_endpoint
    assert endpoint is not None
    # Called directly: the endpoint would log an exception here and answer the long way.
    raw = wire.scheduler_body(body)
    encoded = None if raw is None else decision.filter_encoded(raw.pod, raw.names, cluster.snapshot(),
                                                                enabled=enabled)
    fast = None if encoded is None else encoded.content
    assert fast == endpoint._answer_fast(body)
    try:
        slow: Any = endpoint._answer(*app_mod._args(body))
    except HTTPException as exc:
        slow = exc
    return fast, slow


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), go_bodies(), st.integers(0, 7))
def test_the_reply_from_bytes_decodes_to_the_long_ways_reply(
    cluster: cache_mod.Cache, body: bytes, gate: int
) -> None:
    fast, slow = answers(cluster, body, enabled=gate > 0)
    event("short way" if fast is not None else "long way")
    if fast is None:
        return
    assert not isinstance(slow, HTTPException), f"the long way refuses this body: {slow.detail}"
    assert orjson.loads(fast) == orjson.loads(slow)


def test_a_go_body_takes_the_short_way_and_names_each_nodes_missing_network() -> None:
    # If this fell back, the comparison above would prove nothing about the short way.
    cluster = cache_mod.Cache()
    for net in ("default", "blue", "green"):
        cluster.upsert(podnetwork(net))
    for name, offers in (("n1", ["blue", "green"]), ("n2", ["blue"]), ("n3", []), ("n4", None)):
        cluster.upsert({**node(name, offers), "kind": "Node"})
    cluster.mark_synced()
    nets = [{"podNetworkName": "blue"}, {"podNetworkName": "green"}]
    body = go_json(by_names(pod(nets), ["n4", "n3", "n2", "n1"]), ascii_only=False)
    fast, slow = answers(cluster, body, enabled=True)
    assert fast is not None
    # A body read in several chunks arrives as a bytearray: the same answer.
    endpoint = app_mod.create_app(cluster, Settings()).filter_endpoint
    assert endpoint is not None and endpoint._answer_fast(bytearray(body)) == fast
    assert orjson.loads(fast) == orjson.loads(slow) == {
        "Nodes": None, "NodeNames": ["n4", "n1"],
        "FailedNodes": {"n3": 'podnetwork "blue" is not available on this node',
                        "n2": 'podnetwork "green" is not available on this node'},
        "FailedAndUnresolvableNodes": {}, "Error": "",
    }


def counted(cluster: cache_mod.Cache, answer: str, body: bytes) -> dict[str, float]:
    """`podnetwork_extender_filtered_nodes_total` by outcome after one answer of the endpoint."""
    application = app_mod.create_app(cluster, Settings())
    endpoint = application.filter_endpoint
    assert endpoint is not None
    assert getattr(endpoint, answer)(body) is not None
    registry = application.state.metrics.registry
    return {o: registry.get_sample_value("podnetwork_extender_filtered_nodes_total", {"outcome": o}) or 0.0
            for o in ("passed", "failed", "unresolvable")}


@pytest.mark.parametrize("nets", [[{"podNetworkName": "blue"}], [{"podNetworkName": "ghost"}], None])
def test_the_short_way_counts_the_nodes_as_the_long_way_does(nets: Any) -> None:
    cluster = cache_mod.Cache()
    for net in ("default", "blue"):
        cluster.upsert(podnetwork(net))
    for name, offers in (("n1", ["blue"]), ("n2", []), ("n3", [])):
        cluster.upsert({**node(name, offers), "kind": "Node"})
    cluster.mark_synced()
    body = go_json(by_names(pod(nets), ["n1", "n2", "n3"]), ascii_only=False)
    fast = counted(cluster, "_answer_fast", body)
    assert fast == counted(cluster, "_answer_long", body) and sum(fast.values()) == 3


@pytest.mark.parametrize("names", [[], ["n1"], ["n1", "n1"]])
def test_no_one_and_repeated_candidates_take_the_short_way(names: list[str]) -> None:
    cluster = cache_mod.Cache()
    cluster.upsert(podnetwork("default"))
    cluster.upsert(podnetwork("blue"))
    cluster.upsert({**node("n1", []), "kind": "Node"})
    cluster.mark_synced()
    body = go_json(by_names(pod([{"podNetworkName": "blue"}]), names), ascii_only=False)
    fast, slow = answers(cluster, body, enabled=True)
    assert fast is not None and orjson.loads(fast) == orjson.loads(slow)


@pytest.mark.parametrize("body", [
    # the names' marker inside the pod, and a second copy of the keys after the names
    b'{"Pod":{"metadata":{},"x":{"a":1,"Nodes":null,"NodeNames":["n1"]}},"Nodes":null,"NodeNames":["n1"]}',
    b'{"Pod":{},"Nodes":null,"NodeNames":["n1"],"Nodes":null,"NodeNames":["n1"]}',
    b'{"Pod":{},"Nodes":null,"NodeNames":["n1"],"Pod":5,"Nodes":null,"NodeNames":["n1"]}',
    b'{"Pod":{},"Nodes":null,"NodeNames":["n1","n1\\",\\"n1"]}',
    b'{"Pod":{},"Nodes":null,"NodeNames":["n1" ,"n1"]}',
    b'{"Pod":{},"Nodes":null,"NodeNames":[n1"]}',
    b'{"Pod":{},"Nodes":null,"NodeNames":["n1]}',
    b'{"Pod":{},"Nodes":null,"NodeNames":["\\u006e1"]}',
    b'{"Pod":{"metadata":{"generation":18446744073709551617}},"Nodes":null,"NodeNames":["n1"]}',
])
def test_bodies_near_the_layout_get_the_long_ways_answer(body: bytes) -> None:
    cluster = cache_mod.Cache()
    cluster.upsert(podnetwork("default"))
    cluster.upsert({**node("n1", []), "kind": "Node"})
    cluster.mark_synced()
    fast, slow = answers(cluster, body, enabled=True)
    if fast is not None:
        assert not isinstance(slow, HTTPException) and orjson.loads(fast) == orjson.loads(slow)


def test_each_snapshot_change_is_seen_by_the_next_short_reply() -> None:
    """The tables the short way reads live in the snapshot's memo: a new snapshot, new tables."""
    cluster = cache_mod.Cache()
    for net in ("default", "blue"):
        cluster.upsert(podnetwork(net))
    cluster.upsert({**node("n1", []), "kind": "Node"})
    cluster.upsert({**node("n2", ["blue"]), "kind": "Node"})
    cluster.mark_synced()
    body = go_json(by_names(pod([{"podNetworkName": "blue"}]), ["n1", "n2"]), ascii_only=False)
    missing = 'podnetwork "blue" is not available on this node'

    def reply() -> Any:
        fast, slow = answers(cluster, body, enabled=True)
        assert fast is not None and orjson.loads(fast) == orjson.loads(slow)
        return orjson.loads(fast)

    assert (reply()["NodeNames"], reply()["FailedNodes"]) == (["n2"], {"n1": missing})
    cluster.upsert({**node("n1", ["blue"]), "kind": "Node"})  # n1 starts offering blue
    assert (reply()["NodeNames"], reply()["FailedNodes"]) == (["n1", "n2"], {})
    cluster.upsert({**node("n2", None), "kind": "Node"})  # n2 drops its list: offers every network
    cluster.upsert({**node("n1", "not json"), "kind": "Node"})
    assert reply()["NodeNames"] == ["n2"] and "not valid JSON" in reply()["FailedNodes"]["n1"]
    cluster.upsert(podnetwork("blue", ready=False))  # the pod's network turns not Ready
    assert set(reply()["FailedAndUnresolvableNodes"]) == {"n1", "n2"}
    cluster.upsert(podnetwork("blue"))
    cluster.delete({"kind": "Node", "metadata": {"name": "n1"}})  # a candidate the cache forgot
    endpoint = app_mod.create_app(cluster, Settings()).filter_endpoint
    assert endpoint is not None and endpoint._answer_fast(body) is None  # the long way says why
    assert orjson.loads(endpoint._answer(*app_mod._args(body)))["FailedNodes"] == {"n1": decision.UNKNOWN_NODE}


def test_the_short_way_checks_every_field_the_pod_views_read() -> None:
    """`wire.pod_fields` accepts a pod only when the views surely do: it must know each field
    they read. A field added to a view fails here until `pod_fields` checks it."""
    def keys(model: type[pydantic.BaseModel]) -> set[str]:
        return {field.alias or name for name, field in model.model_fields.items()}

    assert keys(core.Pod) == wire.POD_KEYS
    assert keys(core.ObjectMeta) == wire.META_KEYS
    assert keys(core.PodSpec) == wire.SPEC_KEYS
    assert keys(core.PodStatus) == wire.STATUS_KEYS
    assert keys(core.PodOS) == keys(core.PodSchedulingGate) == {"name"}
    views = (core.Pod, core.ObjectMeta, core.PodSpec, core.PodStatus, core.PodOS, core.PodSchedulingGate)
    assert {name for view in views for name, field in view.model_fields.items()
            if field.alias and field.alias != name} == wire.PYTHON_NAMES


@pytest.mark.parametrize(("path", "value"), [
    (("metadata", "generation"), 2**70), (("metadata", "generation"), "5"), (("metadata", "generation"), True),
    (("spec", "hostNetwork"), 1), (("spec", "os"), {"name": None}), (("spec", "os"), "linux"),
    (("spec", "schedulingGates"), [{"name": 1}]), (("metadata", "labels"), {"a": 1}),
    (("metadata", "finalizers"), ["a", 1]), (("status", "phase"), 1), (("spec", "host_network"), True),
    (("kind",), 1), (("metadata",), None),
])
def test_a_pod_the_short_way_is_unsure_of_goes_the_long_way(path: tuple[str, ...], value: Any) -> None:
    the_pod = pod([{"podNetworkName": "blue"}])
    target = the_pod
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert wire.pod_fields(orjson.loads(json.dumps(the_pod))) is None
    assert wire.pod_fields(orjson.loads(json.dumps(pod([{"podNetworkName": "blue"}])))) is not None


def test_more_distinct_offers_than_a_byte_holds_take_the_long_way() -> None:
    """The short way numbers the snapshot's distinct node offers in a byte; past that, the long
    way judges each node (and still names each node's own missing network)."""
    cluster = cache_mod.Cache()
    cluster.upsert(podnetwork("default"))
    cluster.upsert(podnetwork("blue"))
    names = [f"n{i}" for i in range(decision._MAX_CLASSES + 1)]
    for i, name in enumerate(names):
        cluster.upsert({**node(name, [f"other{i}"]), "kind": "Node"})
    cluster.mark_synced()
    body = go_json(by_names(pod([{"podNetworkName": "blue"}]), names[:3]), ascii_only=False)
    fast, slow = answers(cluster, body, enabled=True)
    assert fast is None
    assert orjson.loads(slow)["FailedNodes"] == dict.fromkeys(names[:3], decision.not_available("blue"))
    cluster.delete({"kind": "Node", "metadata": {"name": names[-1]}})  # one offer fewer: the short way
    fast, slow = answers(cluster, body, enabled=True)
    assert fast is not None and orjson.loads(fast) == orjson.loads(slow)
