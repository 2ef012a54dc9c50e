"""Hypothesis against the extender's HTTP bodies, served by uvicorn on loopback.

Every POST route (/filter with NodeNames and with Nodes, /prioritize, /baseline/filter)
gets bodies built from kube-scheduler's own shape and then damaged: lone surrogates
(as JSON `\\ud800` escapes, in the body and inside the annotations' own JSON), nesting
100,000 deep, a wrong JSON type in any field the extender reads, and sizes up to past
the body limit. Whatever comes in, the answer is a valid extender reply or a 4xx whose
message says what was wrong; never a 5xx, never a message that echoes a huge value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler_plugin import app as app_mod
from scheduler_plugin.settings import Settings
from tests.api.extender_support import NETWORKS, NODE_NETWORKS, by_names, by_nodes, node, pod, served, world

BODY_LIMIT = 1024 * 1024  # small, so that hypothesis reaches it without building 16 MiB bodies
REPLY_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
#: Messages are cut at 1024 characters (kube-scheduler's own limit), plus "... (N more characters)".
LONGEST_MESSAGE = 1024 + 64
BAD_BODY = "not an extender v1 ExtenderArgs body: "


@pytest.fixture(scope="module")
def extender() -> Iterator[httpx.Client]:
    application = app_mod.create_app(world(), Settings(max_body_bytes=BODY_LIMIT, baseline_endpoint=True))
    with served(application) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


# --- values ------------------------------------------------------------------------------------

#: Text with lone surrogates among other characters; json.dumps writes them as \udXXX escapes.
#: (Drawn one character at a time: st.text() over a union of alphabets never yields a surrogate.)
CHARACTERS = st.one_of(
    st.characters(categories=["Cs"]), st.characters(codec="utf-8"), st.sampled_from("[]{}\",:\\")
)
TEXT = st.lists(CHARACTERS, max_size=12).map("".join)
NAMES = st.sampled_from(["blue", "green", "red", "default", "ghost", "blue-fast", "red-fast", "node-a", "node-b"])
SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | TEXT | NAMES
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        TEXT | NAMES | st.sampled_from(["podNetworkName", "podNetworkAttachmentName", "interfaceName", "name"]),
        inner, max_size=4),
    max_leaves=12,
)
DEPTHS = st.sampled_from([10, 199, 200, 201, 500, 900, 1000, 5000, 100_000])
SIZES = st.sampled_from([1_000, 70_000, 262_144, 262_145, 600_000, BODY_LIMIT + 1])


class Raw(str):
    """JSON text spliced into the body as is (too deep for json.dumps to write)."""


def deep_array(depth: int) -> str:
    return "[" * depth + "]" * depth


# Any JSON value, a deep one (raw, or as the text of a string), or a long one.
WRONG = st.one_of(
    JSON_VALUES,
    DEPTHS.map(lambda d: Raw(deep_array(d))),
    DEPTHS.map(deep_array),
    SIZES.map(lambda n: "x" * n),
    SIZES.map(lambda n: ["node-z"] * (n // 9)),
)


def annotation_text(value: Any) -> str:
    """The text of a networks annotation: JSON of `value` with surrogates as escapes, or raw text."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=True)


NETWORK_LISTS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={"podNetworkName": NAMES | TEXT, "podNetworkAttachmentName": NAMES | TEXT,
                  "interfaceName": st.sampled_from(["net1", "net2", "eth0"]) | TEXT},
    ),
    max_size=4,
)
POD_ANNOTATIONS = st.one_of(NETWORK_LISTS, JSON_VALUES, WRONG).map(annotation_text)
NODE_ANNOTATIONS = st.one_of(st.lists(NAMES | TEXT, max_size=4), JSON_VALUES, WRONG).map(annotation_text)

#: Where a body gets a wrong value: every field the extender reads.
PATHS: list[tuple[str | int, ...]] = [
    (),
    ("Pod",), ("Pod", "metadata"), ("Pod", "metadata", "annotations"), ("Pod", "metadata", "annotations", NETWORKS),
    ("Pod", "metadata", "namespace"), ("Pod", "metadata", "name"), ("Pod", "spec"), ("Pod", "spec", "os"),
    ("Pod", "spec", "os", "name"), ("Pod", "spec", "hostNetwork"), ("Pod", "status"),
    ("Nodes",), ("Nodes", "items"), ("Nodes", "items", 0), ("Nodes", "items", 0, "metadata"),
    ("Nodes", "items", 0, "metadata", "name"), ("Nodes", "items", 0, "metadata", "annotations"),
    ("Nodes", "items", 0, "metadata", "annotations", NODE_NETWORKS),
    ("NodeNames",), ("NodeNames", 0),
]


def put(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> Any:
    """`body` with `value` at `path`, where the path still leads somewhere; the body itself at ()."""
    if not path:
        return value
    target: Any = body
    for step in path[:-1]:
        if isinstance(target, dict) and isinstance(step, str):
            target = target.setdefault(step, {})
        elif isinstance(target, list) and isinstance(step, int) and step < len(target):
            target = target[step]
        else:
            return body
    last = path[-1]
    fits = ((isinstance(target, dict) and isinstance(last, str))
            or (isinstance(target, list) and isinstance(last, int) and last < len(target)))
    if fits:
        target[last] = value
    return body


def encode(value: Any) -> bytes:
    """JSON with surrogates as \\udXXX escapes, and each `Raw` spliced in where it stands."""
    raws: list[str] = []

    def mark(v: Any) -> Any:
        if isinstance(v, Raw):
            raws.append(v)
            return f"\x00raw{len(raws) - 1}\x00"
        if isinstance(v, dict):
            return {k: mark(x) for k, x in v.items()}
        if isinstance(v, list):
            return [mark(x) for x in v]
        return v

    text = json.dumps(mark(value), ensure_ascii=True)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{i}\x00"), raw)
    return text.encode()


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """ExtenderArgs as kube-scheduler sends them (either shape), then damaged in a few places."""
    the_pod = pod(draw(POD_ANNOTATIONS), namespace=draw(st.sampled_from(["shop", "other"]) | TEXT))
    candidates = draw(st.lists(NAMES | TEXT, max_size=5))
    if draw(st.booleans()):
        body = by_names(the_pod, candidates)
    else:
        body = by_nodes(the_pod, [node(name, draw(NODE_ANNOTATIONS | st.none())) for name in candidates])
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        body = put(body, draw(st.sampled_from(PATHS)), draw(WRONG))
    if draw(st.booleans()) and isinstance(body, dict):  # Go's decoder also matches lower-camel keys
        body = {{"Pod": "pod", "Nodes": "nodes", "NodeNames": "nodeNames"}.get(k, k): v for k, v in body.items()}
    return encode(body)


# --- what every answer must be -----------------------------------------------------------------

def sent_names(body: bytes) -> set[str] | None:
    """The candidate names a body carries, when Python's json can read it (else None)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    names = data.get("NodeNames") or data.get("nodeNames") or []
    items = (data.get("Nodes") or data.get("nodes") or {}).get("items") or []
    return set(names) | {item["metadata"]["name"] for item in items}


def assert_clean_refusal(response: httpx.Response) -> None:
    assert response.status_code in (400, 413), response.text[:300]
    message = response.json()["message"]
    assert isinstance(message, str) and len(message) <= LONGEST_MESSAGE
    if response.status_code == 400:
        assert message.startswith(BAD_BODY) and len(message) > len(BAD_BODY)
    else:
        assert f"exceeds the limit of {BODY_LIMIT} bytes" in message


def assert_filter_reply(response: httpx.Response, body: bytes) -> None:
    reply = response.json()
    assert set(reply) == REPLY_KEYS
    assert reply["Error"] == "", reply["Error"]  # a readable body never fails the decision
    if reply["NodeNames"] is not None:
        assert reply["Nodes"] is None
        passed = reply["NodeNames"]
    else:
        passed = [item["metadata"]["name"] for item in reply["Nodes"]["items"]]
    failed, unresolvable = reply["FailedNodes"], reply["FailedAndUnresolvableNodes"]
    for message in [*failed.values(), *unresolvable.values()]:
        assert message and len(message) <= LONGEST_MESSAGE
    names = sent_names(body)
    if names is not None:  # every candidate has exactly one fate, and only candidates have one
        assert set(passed) | set(failed) | set(unresolvable) == names
        assert not (set(passed) & set(failed)) and not (set(failed) & set(unresolvable))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=bodies())
def test_no_body_gets_a_5xx_or_an_unclear_answer(extender: httpx.Client, body: bytes) -> None:
    for route in ("/filter", "/prioritize", "/baseline/filter"):
        response = extender.post(route, content=body, headers={"Content-Type": "application/json"})
        event(f"{route} answered {response.status_code}")
        assert response.status_code < 500, (route, response.status_code, response.text[:300])
        if response.status_code != 200:
            assert_clean_refusal(response)
        elif route == "/prioritize":
            scores = response.json()
            assert all(set(s) == {"Host", "Score"} and s["Score"] == 0 for s in scores)
        else:
            assert_filter_reply(response, body)


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=256) | st.sampled_from([b"", b"\xed\xa0\x80", b'"\\ud800"', b"[" * 100_000]))
def test_no_byte_string_gets_a_5xx(extender: httpx.Client, body: bytes) -> None:
    for route in ("/filter", "/prioritize", "/baseline/filter"):
        response = extender.post(route, content=body)
        assert response.status_code < 500, (route, response.text[:300])
        if response.status_code != 200:
            assert_clean_refusal(response)
