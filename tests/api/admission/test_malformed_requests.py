"""Malformed AdmissionReviews against both webhooks, served over HTTPS as the commands serve them.

A body that is not an AdmissionReview v1 request gets 400 naming the field; a pod
of the wrong shape gets a proper answer that refuses it (uid echoed, the field
named), because the API server reads any other status as a failed call. Never a
500, and never Python's own words ("'str' object has no attribute 'get'").
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api import webhook_support as ws

pytestmark = pytest.mark.timeout(60)

HOOKS = [pytest.param(hook, id=hook.name) for hook in ws.HOOKS]
PYTHON_WORDS = ("object has no attribute", "Traceback", "NoneType", "'str'", "'int'", "'dict'", "'list'")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, httpx.Client]]:
    """One server per webhook for the module (in threads), each with its client, by hook name."""
    certificate = ws.certificate(Path(tmp_path_factory.mktemp("webhook-servers")))
    with contextlib.ExitStack() as stack:
        clients = {}
        for hook in ws.HOOKS:
            port = stack.enter_context(ws.serving_in_thread(hook.app(), certificate))
            clients[hook.name] = stack.enter_context(
                httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=ws.client_tls()))
        yield clients


def post(hook: ws.Hook, clients: dict[str, httpx.Client], body: bytes) -> httpx.Response:
    return clients[hook.name].post(hook.path, content=body, headers={"Content-Type": "application/json"})


def encoded(document: Any) -> bytes:
    # ensure_ascii writes a lone surrogate as the \ud800 escape, as a hostile client would.
    return json.dumps(document).encode()


def with_field(path: str, value: Any) -> dict[str, Any]:
    """The standard review with the field at dotted `path` (under request) set to `value`."""
    body = ws.review()
    target = body["request"]
    *parents, last = path.split(".")
    for key in parents:
        target = target[key]
    target[last] = copy.deepcopy(value)
    return body


def assert_bad_request(resp: httpx.Response, *expected: str) -> None:
    assert resp.status_code == 400, resp.text
    detail = resp.json()["detail"]
    for text in expected:
        assert text in detail, detail
    assert not any(word in detail for word in PYTHON_WORDS), detail


def assert_refused(resp: httpx.Response, field: str, *expected: str) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response: dict[str, Any] = body["response"]
    assert response["uid"] == "u-1" and response["allowed"] is False, response
    status = response["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert field in [cause["field"] for cause in status["details"]["causes"]], status
    for text in expected:
        assert text in status["message"], status["message"]
    assert not any(word in status["message"] for word in PYTHON_WORDS), status["message"]
    return response


# --- the request is not an AdmissionReview: 400 --------------------------------------------------

@pytest.mark.parametrize("hook", HOOKS)
def test_a_lone_surrogate_in_the_uid_is_a_400_naming_the_uid(hook: ws.Hook, servers: dict[str, httpx.Client]) -> None:
    resp = post(hook, servers, encoded(ws.review(uid="u-\ud800")))
    assert_bad_request(resp, "request.uid", "lone surrogate U+D800")


@pytest.mark.parametrize("hook", HOOKS)
def test_json_nested_100k_deep_is_a_400(hook: ws.Hook, servers: dict[str, httpx.Client]) -> None:
    deep = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":' + (
        b"[" * 100_000 + b"]" * 100_000 + b"}")
    resp = post(hook, servers, deep)
    assert_bad_request(resp, "nests JSON deeper")


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("value", ["Pod", 1, [], None, {"kind": 7}],
                         ids=["a string", "a number", "a list", "null", "a number inside"])
def test_a_request_kind_of_the_wrong_type_is_a_400_naming_the_field(hook: ws.Hook, servers: dict[str, httpx.Client], value: Any) -> None:
    resp = post(hook, servers, encoded(with_field("kind", value)))
    if isinstance(value, dict):
        assert_bad_request(resp, "request.kind.kind: must be a string, not a number")
    else:
        assert_bad_request(resp, "request.kind: ")


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize(("value", "seen"), [(5, "a number"), ({"name": "app"}, "an object")],
                         ids=["a number", "an object"])
def test_a_request_namespace_that_is_not_a_string_is_a_400(hook: ws.Hook, servers: dict[str, httpx.Client], value: Any, seen: str) -> None:
    resp = post(hook, servers, encoded(with_field("namespace", value)))
    assert_bad_request(resp, f"request.namespace: must be a string, not {seen}")


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize(("field", "value", "expected"), [
    ("uid", 5, "request.uid: must be a string, not a number"),
    ("uid", "", "request.uid: must not be empty"),
    ("operation", ["CREATE"], "request.operation: must be a string, not a list"),
    ("object", "a pod", "request.object: must be an object, not a string"),
    ("oldObject", 3, "request.oldObject: must be an object, not a number"),
    ("subResource", {}, "request.subResource: must be a string, not an object"),
    # Who asks (read for the permission to use a PodNetwork).
    ("userInfo", "alice", "request.userInfo: must be an object, not a string"),
    ("userInfo", {"username": 7}, "request.userInfo.username: must be a string, not a number"),
    ("userInfo", {"groups": "devs"}, "request.userInfo.groups: must be a list, not a string"),
    ("userInfo", {"extra": {"k": "v"}}, "request.userInfo.extra.k: must be a list, not a string"),
])
def test_other_envelope_fields_of_the_wrong_type_are_a_400_naming_them(
        hook: ws.Hook, servers: dict[str, httpx.Client], field: str, value: Any, expected: str) -> None:
    resp = post(hook, servers, encoded(with_field(field, value)))
    assert_bad_request(resp, expected)


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize(("body", "expected"), [
    (b"{", "the body is not JSON"),
    (b'{"kind": "AdmissionReview", "request": \xff}', "not UTF-8"),
    (b'{"kind": "AdmissionReview", "request": NaN}', "NaN is not a JSON value"),
    (b"[]", "expected an AdmissionReview (admission.k8s.io/v1) object, got a list"),
    (b'{"kind": "Pod"}', 'kind: must be "AdmissionReview", not "Pod"'),
    (b'{"kind": "AdmissionReview"}', "request: is required"),
    (json.dumps({**ws.review(), "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
     'apiVersion: must be "admission.k8s.io/v1"'),
], ids=["truncated", "not UTF-8", "NaN", "a list", "another kind", "no request", "another version"])
def test_a_body_that_is_not_an_admission_review_is_a_400_saying_why(
        hook: ws.Hook, servers: dict[str, httpx.Client], body: bytes, expected: str) -> None:
    assert_bad_request(post(hook, servers, body), expected)


# --- the pod is bad: an answer that refuses it ----------------------------------------------------

@pytest.mark.parametrize("hook", HOOKS)
def test_a_lone_surrogate_in_the_networks_annotation_refuses_the_pod(hook: ws.Hook, servers: dict[str, httpx.Client]) -> None:
    body = ws.review(ws.pod(annotations={ws.ANN: '[{"podNetworkName":"dataplane\ud800"}]'}))
    resp = post(hook, servers, encoded(body))
    assert_refused(resp, f"metadata.annotations[{ws.ANN}]", "lone surrogate U+D800")


@pytest.mark.parametrize("hook", HOOKS)
def test_a_lone_surrogate_in_another_annotation_refuses_the_pod(hook: ws.Hook, servers: dict[str, httpx.Client]) -> None:
    body = ws.review(ws.pod([{"podNetworkName": "dataplane"}], {"example.com/note": "\udc00"}))
    resp = post(hook, servers, encoded(body))
    assert_refused(resp, "metadata.annotations[example.com/note]", "lone surrogate U+DC00")


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize(("value", "seen"), [("web", "a string"), ([], "a list"), (3, "a number"), (True, "a boolean")])
def test_metadata_that_is_not_an_object_refuses_the_pod(hook: ws.Hook, servers: dict[str, httpx.Client], value: Any, seen: str) -> None:
    resp = post(hook, servers, encoded(with_field("object.metadata", value)))
    assert_refused(resp, "metadata", "metadata: Invalid value", f"must be an object, not {seen}")


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize(("value", "seen"), [("x", "a string"), ([], "a list"), (3, "a number")])
def test_a_spec_that_is_not_an_object_refuses_the_pod(hook: ws.Hook, servers: dict[str, httpx.Client], value: Any, seen: str) -> None:
    resp = post(hook, servers, encoded(with_field("object.spec", value)))
    assert_refused(resp, "spec", f"must be an object, not {seen}")


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize(("value", "field", "seen"), [
    ("gate", "spec.schedulingGates", "must be a list, not a string"),
    (3, "spec.schedulingGates", "must be a list, not a number"),
    ({"name": "g"}, "spec.schedulingGates", "must be a list, not an object"),
    (["gate"], "spec.schedulingGates[0]", "must be an object, not a string"),
    ([{"name": 1}], "spec.schedulingGates[0].name", "must be a string, not a number"),
], ids=["a string", "a number", "an object", "a list of strings", "a gate named by a number"])
def test_scheduling_gates_of_the_wrong_type_refuse_the_pod(
        hook: ws.Hook, servers: dict[str, httpx.Client], value: Any, field: str, seen: str) -> None:
    resp = post(hook, servers, encoded(with_field("object.spec.schedulingGates", value)))
    assert_refused(resp, field, seen)


@pytest.mark.parametrize("hook", HOOKS)
def test_a_service_account_name_that_is_not_a_string_refuses_the_pod(
        hook: ws.Hook, servers: dict[str, httpx.Client]) -> None:
    resp = post(hook, servers, encoded(with_field("object.spec.serviceAccountName", ["web"])))
    assert_refused(resp, "spec.serviceAccountName", "must be a string, not a list")


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize(("value", "seen"), [(5, "a number"), ({"name": "app"}, "an object")],
                         ids=["a number", "an object"])
def test_a_metadata_namespace_that_is_not_a_string_refuses_the_pod(
        hook: ws.Hook, servers: dict[str, httpx.Client], value: Any, seen: str) -> None:
    resp = post(hook, servers, encoded(with_field("object.metadata.namespace", value)))
    assert_refused(resp, "metadata.namespace", "metadata.namespace: Invalid value", f"must be a string, not {seen}")


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize(("field", "value", "expected"), [
    ("annotations", "a=b", "metadata.annotations: Invalid value: \"a=b\": must be an object, not a string"),
    ("annotations", {ws.ANN: ["dataplane"]}, "must be a string, not a list"),
    ("name", 7, "metadata.name: Invalid value: 7: must be a string, not a number"),
], ids=["annotations a string", "an annotation a list", "name a number"])
def test_other_metadata_of_the_wrong_type_refuses_the_pod(
        hook: ws.Hook, servers: dict[str, httpx.Client], field: str, value: Any, expected: str) -> None:
    resp = post(hook, servers, encoded(with_field(f"object.metadata.{field}", value)))
    path = f"metadata.annotations[{ws.ANN}]" if isinstance(value, dict) else f"metadata.{field}"
    assert_refused(resp, path, expected)


@pytest.mark.parametrize("hook", HOOKS)
def test_a_request_with_many_bad_fields_lists_ten_and_counts_the_rest(hook: ws.Hook, servers: dict[str, httpx.Client]) -> None:
    annotations = {f"example.com/a{i}": i for i in range(25)}
    resp = post(hook, servers, encoded(with_field("object.metadata.annotations", annotations)))
    response = assert_refused(resp, "metadata.annotations[example.com/a0]", "; and 15 more")
    assert len(response["status"]["details"]["causes"]) == 25


@pytest.mark.parametrize("hook", HOOKS)
def test_a_well_formed_pod_is_still_answered_as_before(hook: ws.Hook, servers: dict[str, httpx.Client]) -> None:
    resp = post(hook, servers, encoded(ws.review()))
    assert resp.status_code == 200
    response = resp.json()["response"]
    assert response["uid"] == "u-1" and response["allowed"] is True
    assert ("patch" in response) is (hook is ws.BRIDGE)  # the pod names its networks: no auto-population
