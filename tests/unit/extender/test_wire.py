"""`wire.parse_args`: kube-scheduler's bodies take the short way, and it reads them exactly
as `ExtenderArgs.model_validate_json` does; everything else goes the long way."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler_plugin import wire
from tests.api.extender_support import FILTER_BY_NAMES, by_names, pod

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
