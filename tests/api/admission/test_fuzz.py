"""Hypothesis against both webhooks' HTTP bodies, served over HTTPS as the commands serve them.

Reviews as the API server sends them, then broken: any JSON value (lone
surrogates included) in any field either webhook reads, fields removed, bodies
cut short, nested 1 to 200,000 deep, or padded to either side of the 3 MiB
limit, and raw bytes. Whatever comes, the answer is an AdmissionReview that
echoes the uid, a 400 with a message, or (over the limit only) a 413: never a 5xx.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from podnetwork.cli import operatorshell
from tests.api import webhook_support as ws

pytestmark = pytest.mark.timeout(600)

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LIMIT = operatorshell.MAX_BODY_BYTES
PYTHON_WORDS = ("object has no attribute", "Traceback", "NoneType", "'str'", "'int'", "'dict'", "'list'")

SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
text = st.text(st.characters() | SURROGATES, max_size=12) | st.sampled_from(
    ["", "Pod", "CREATE", "UPDATE", "default", "dataplane", ws.NS, "admission.k8s.io/v1", "AdmissionReview"])
leaves = st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats(
    allow_nan=False, allow_infinity=False) | text
json_values = st.recursive(
    leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4), max_leaves=16)

NETWORK_KEYS = ["podNetworkName", "podNetworkAttachmentName", "interfaceName", "isDefaultGW4", "isDefaultGW6", "x"]
network_entries = st.dictionaries(st.sampled_from(NETWORK_KEYS), st.sampled_from(["dataplane", "default", "net1"])
                                  | json_values, max_size=4)
#: The networks annotation as text: near-valid lists, so the networks rules run too.
networks_text = st.lists(network_entries | json_values, max_size=4).flatmap(
    lambda nets: st.sampled_from([json.dumps(nets), json.dumps(nets)[:-1], json.dumps(nets) + "x"]))

OBJ = ("request", "object")
META, SPEC = (*OBJ, "metadata"), (*OBJ, "spec")
#: Every field either webhook reads, and the containers of each.
PATHS: list[tuple[str | int, ...]] = [
    ("apiVersion",), ("kind",), ("request",),
    ("request", "uid"), ("request", "kind"), ("request", "kind", "kind"), ("request", "kind", "group"),
    ("request", "namespace"), ("request", "operation"), ("request", "subResource"), ("request", "name"),
    OBJ, ("request", "oldObject"), META, (*META, "name"), (*META, "generateName"), (*META, "namespace"),
    (*META, "resourceVersion"), (*META, "annotations"), (*META, "annotations", ws.ANN),
    (*META, "annotations", "example.com/other"), SPEC, (*SPEC, "hostNetwork"), (*SPEC, "nodeName"),
    (*SPEC, "schedulingGates"), (*SPEC, "schedulingGates", 0), (*SPEC, "schedulingGates", 0, "name"),
    (*SPEC, "os"), (*SPEC, "os", "name"), ("request", "oldObject", "metadata", "annotations", ws.ANN),
]


def bases() -> list[dict[str, Any]]:
    """Well-formed reviews that reach each decision: selection or gate, auto-population with a
    namespace profile, hostNetwork, an existing gate, an UPDATE."""
    named = ws.review()
    unnamed = ws.review(ws.pod())
    host = ws.review(ws.pod())
    host["request"]["object"]["spec"]["hostNetwork"] = True
    gated = ws.review()
    gated["request"]["object"]["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    missing = ws.review(ws.pod([{"podNetworkName": "not-yet"}]))
    update = ws.review(operation="UPDATE")
    update["request"]["oldObject"] = ws.pod([{"podNetworkName": "default"}])
    return [named, unnamed, host, gated, missing, update]


def put(doc: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    """Set `path` in `doc` to `value`, making (or replacing) containers on the way."""
    target: Any = doc
    for key, child in itertools.pairwise(path):
        want: type = list if isinstance(child, int) else dict
        if isinstance(key, int):
            while len(target) <= key:
                target.append({})
            if not isinstance(target[key], want):
                target[key] = want()
        elif not isinstance(target.get(key), want):
            target[key] = want()
        target = target[key]
    last = path[-1]
    if isinstance(last, int):
        while len(target) <= last:
            target.append(None)
    target[last] = value


def remove(doc: dict[str, Any], path: tuple[str | int, ...]) -> None:
    target: Any = doc
    for key in path[:-1]:
        try:
            target = target[key]
        except (KeyError, IndexError, TypeError):
            return
    with contextlib.suppress(KeyError, IndexError, TypeError):
        del target[path[-1]]


@st.composite
def reviews(draw: st.DrawFn) -> dict[str, Any]:
    """A base review with one to three fields set to anything, or removed."""
    doc: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(bases())))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        action = draw(st.sampled_from(["value", "value", "remove", "networks"]))
        if action == "remove":
            remove(doc, path)
        elif action == "networks":
            put(doc, (*META, "annotations", ws.ANN), draw(networks_text))
        else:
            put(doc, path, draw(json_values))
    return doc


def deep(depth: int, opener: bytes) -> bytes:
    return opener * depth + (b"]" if opener == b"[" else b'}') * depth


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A request body: a broken review, cut short, holding deep JSON, padded, or raw bytes."""
    kind = draw(st.sampled_from(["review", "review", "review", "cut", "deep", "large", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=256))
    doc = draw(reviews())
    raw = json.dumps(doc).encode()  # ASCII: lone surrogates travel as \ud800 escapes
    if kind == "cut":
        return raw[:draw(st.integers(0, max(len(raw) - 1, 0)))]
    if kind == "deep":
        put(doc, draw(st.sampled_from(PATHS)), "__DEEP__")
        depth = draw(st.integers(1, 200_000) | st.integers(900, 1100))
        opener = draw(st.sampled_from([b"[", b'{"a":']))
        nested = deep(depth, b"[") if opener == b"[" else b'{"a":' * depth + b"1" + b"}" * depth
        return json.dumps(doc).encode().replace(b'"__DEEP__"', nested)
    size = draw(st.sampled_from([LIMIT - 1, LIMIT, LIMIT + 1]) | st.integers(len(raw) + 20, 5 * 1024 * 1024))
    put(doc, (*META, "annotations", "example.com/pad"), "")
    short = len(json.dumps(doc).encode())
    put(doc, (*META, "annotations", "example.com/pad"), "x" * max(size - short, 0))
    return json.dumps(doc).encode()


def sent_uid(body: bytes) -> Any:
    try:
        return json.loads(body)["request"]["uid"]
    except Exception:  # anything the webhook had to refuse: no uid to compare
        return None


def check(body: bytes, resp: httpx.Response) -> None:
    """What every answer must be (module docstring)."""
    assert resp.status_code in (200, 400, 413), (resp.status_code, resp.text[:500])
    answer = resp.json()
    event(f"HTTP {resp.status_code}" + (f", allowed={answer['response']['allowed']}" if resp.status_code == 200 else ""))
    if resp.status_code == 413:
        assert len(body) > LIMIT and "exceeds the limit" in answer["detail"]
        return
    assert len(body) <= LIMIT
    if resp.status_code == 400:
        detail = answer["detail"]
        assert isinstance(detail, str) and detail
        assert not any(word in detail for word in PYTHON_WORDS), detail
        return
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == sent_uid(body) and isinstance(response["uid"], str) and response["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        status = response["status"]
        assert status["code"] in (422,) and isinstance(status["message"], str) and status["message"]
        assert not any(word in status["message"] for word in PYTHON_WORDS), status["message"]
        assert status["details"]["causes"], status
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        try:
            ops = json.loads(base64.b64decode(response["patch"], validate=True))
        except (binascii.Error, ValueError) as exc:
            raise AssertionError(f"the patch is not base64 JSON: {exc}") from None
        assert isinstance(ops, list) and ops and all(op["op"] == "add" for op in ops)


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, httpx.Client]]:
    certificate = ws.certificate(Path(tmp_path_factory.mktemp("webhook-fuzz")))
    with contextlib.ExitStack() as stack:
        out = {}
        for hook in ws.HOOKS:
            port = stack.enter_context(ws.serving_in_thread(hook.app(), certificate))
            out[hook.name] = stack.enter_context(httpx.Client(
                base_url=f"https://127.0.0.1:{port}", verify=ws.client_tls(), timeout=60))
        yield out


def post(client: httpx.Client, path: str, body: bytes) -> httpx.Response:
    return client.post(path, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("hook", [pytest.param(hook, id=hook.name) for hook in ws.HOOKS])
@FUZZ
@given(body=bodies())
def test_no_body_gets_a_5xx_or_an_answer_that_is_not_an_admission_review(
        clients: dict[str, httpx.Client], hook: ws.Hook, body: bytes) -> None:
    check(body, post(clients[hook.name], hook.path, body))


@pytest.mark.parametrize("hook", [pytest.param(hook, id=hook.name) for hook in ws.HOOKS])
@FUZZ
@given(doc=reviews())
def test_a_review_with_any_field_broken_is_answered_or_refused_with_a_message(
        clients: dict[str, httpx.Client], hook: ws.Hook, doc: dict[str, Any]) -> None:
    body = json.dumps(doc).encode()
    resp = post(clients[hook.name], hook.path, body)
    check(body, resp)
    request = doc.get("request")
    envelope_ok = (doc.get("kind") == "AdmissionReview" and isinstance(request, dict)
                   and isinstance(request.get("uid"), str) and request["uid"].isprintable()
                   and request["uid"].isascii() and isinstance(request.get("kind"), dict)
                   and isinstance(request.get("operation"), str))
    if resp.status_code == 400 and envelope_ok:
        # Only the envelope's fields may make a 400 here; a bad pod is refused in an answer.
        assert "request." in resp.json()["detail"] or "apiVersion" in resp.json()["detail"], resp.text
