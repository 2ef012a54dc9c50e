"""The admission webhooks' FastAPI app over HTTP (httpx's ASGI transport), AdmissionReview JSON in and out.

A malformed AdmissionReview gets HTTP 400 with a message, never a 500.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from podnetwork.commands import admissionapp
from podnetwork.ground import constants
from podnetwork.kep import admission
from tests.unit.crd_support import cel

ANN = constants.NETWORKS_ANNOTATION


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team", "operation": operation, "object": obj}}


def pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "team"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}}


def namespace(profile: list[dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "team", "annotations": {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: json.dumps(profile)}}}


async def test_mutating_endpoint_uses_the_namespace_from_the_lookup():
    namespaces = {"team": namespace([{"podNetworkName": "tenant-a"}])}
    app = admissionapp.app(namespaces.get)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        resp = await client.post(admission.MUTATE_PATH, json=review(pod()))
    assert resp.status_code == 200
    body = resp.json()
    assert body["response"]["uid"] == "u-1"
    ops = json.loads(base64.b64decode(body["response"]["patch"]))
    assert ops == [{"op": "add", "path": "/metadata/annotations",
                    "value": {ANN: '[{"podNetworkName":"tenant-a"}]'}}]


async def test_validating_endpoint_refuses_with_causes():
    app = admissionapp.app(lambda _: None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        resp = await client.post(admission.VALIDATE_PATH, json=review(pod({ANN: "[]"})))
    response = resp.json()["response"]
    assert response["allowed"] is False
    assert response["status"]["details"]["causes"][0]["field"] == "spec.networks"


async def test_disabled_gate_serves_allow_all():
    app = admissionapp.app(lambda _: None, enabled=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        resp = await client.post(admission.VALIDATE_PATH, json=review(pod({ANN: "[]"})))
    assert resp.json()["response"] == {"uid": "u-1", "allowed": True}


async def test_garbage_is_a_400_and_health_is_ok():
    app = admissionapp.app(lambda _: None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        assert (await client.post(admission.VALIDATE_PATH, json={"kind": "Pod"})).status_code == 400
        assert (await client.post(admission.MUTATE_PATH, content=b"not json")).status_code == 400
        assert (await client.get("/healthz")).json() == {"status": "ok"}


def _namespaces(name: str) -> dict[str, object] | None:
    # As the controller's cache: a dict lookup (which raises TypeError for unhashable keys).
    return {"ns": {"metadata": {"name": "ns"}}}.get(name)


@pytest.mark.parametrize("namespace", [["ns"], {"name": "ns"}, 5])
@pytest.mark.parametrize("path", [admission.MUTATE_PATH, admission.VALIDATE_PATH])
async def test_an_admission_review_whose_namespace_is_not_a_string_is_a_400(path, namespace):
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "namespace": namespace, "operation": "CREATE",
        "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": {"metadata": {"name": "p"}}}}
    api = admissionapp.app(_namespaces)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://x") as client:
        resp = await client.post(path, json=review)
    assert resp.status_code == 400, resp.text
    assert "namespace" in resp.json()["detail"]


def _status_update(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    body = review(new, operation="UPDATE")
    body["request"].update(oldObject=old, subResource="status",
                           resource={"group": "", "version": "v1", "resource": "pods"})
    return body


def _sent_by_the_api_server(webhook: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether the API server calls `webhook` for this review: its rules, then its matchConditions
    (CEL, evaluated with cel-python as tests/unit/crd_support.py does for the CRDs' rules)."""
    request = body["request"]
    resource = "/".join(filter(None, ("pods", request.get("subResource"))))
    if not any(request["operation"] in r["operations"] and resource in r["resources"] for r in webhook["rules"]):
        return False
    # the API server leaves subResource out of a request on the pod itself
    activation = {"request": {k: request[k] for k in ("operation", "subResource") if request.get(k)},
                  "object": request["object"], "oldObject": request.get("oldObject")}
    return all(bool(cel(c["expression"], activation)) for c in webhook.get("matchConditions", []))


async def test_networks_changed_through_pods_status_are_refused_and_the_kubelets_status_writes_pass():
    # `kubectl patch pod web --subresource=status` keeps metadata changes on a real API server.
    old = pod({ANN: '[{"podNetworkName":"default"}]'})
    hijack = pod({ANN: '[{"podNetworkName":"default"},{"podNetworkName":"other-tenants-net"}]'})
    kubelet = {**pod({ANN: '[{"podNetworkName":"default"}]',
                      "k8s.v1.cni.cncf.io/network-status": "[]"}), "status": {"phase": "Running"}}
    app = admissionapp.app(lambda _: None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        refused = (await client.post(admission.VALIDATE_PATH, json=_status_update(old, hijack))).json()["response"]
        passed = (await client.post(admission.VALIDATE_PATH, json=_status_update(old, kubelet))).json()["response"]
    assert refused["allowed"] is False
    assert refused["status"]["message"] == (
        f'Pod "web" is forbidden: metadata.annotations[{ANN}]: Forbidden: the networks of a pod cannot be '
        "changed through its status (pods/status): only an update of the pod itself is checked as hot-plug and "
        "for the permission to use its networks; change them on the pod (kubectl annotate or patch without "
        "--subresource), see docs/hotplug.md")
    assert passed == {"uid": "u-1", "allowed": True}
    # As registered: the change reaches the validating webhook, the kubelet's write never calls it
    # (so the kubelet is not held up while the webhook is down); the mutating one sees neither.
    (mutating,), (validating,) = (c["webhooks"] for c in admission.webhook_configurations({"url": "https://x"}))
    assert _sent_by_the_api_server(validating, _status_update(old, hijack))
    assert not _sent_by_the_api_server(validating, _status_update(old, kubelet))
    assert not _sent_by_the_api_server(mutating, _status_update(old, hijack))


def test_pod_creates_and_network_changes_reach_both_webhooks_and_other_pod_updates_neither():
    (mutating,), (validating,) = (c["webhooks"] for c in admission.webhook_configurations({"url": "https://x"}))
    old = pod({ANN: '[{"podNetworkName":"default"}]'})
    hot_plug = review(pod({ANN: '[{"podNetworkName":"default"},{"podNetworkName":"blue"}]'}), operation="UPDATE")
    hot_plug["request"]["oldObject"] = old
    relabel = review({**old, "metadata": {**old["metadata"], "labels": {"a": "b"}}}, operation="UPDATE")
    relabel["request"]["oldObject"] = old
    for webhook in (mutating, validating):
        assert _sent_by_the_api_server(webhook, review(pod()))
        assert _sent_by_the_api_server(webhook, hot_plug)
        assert not _sent_by_the_api_server(webhook, relabel)


def _binding(annotations: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Binding"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "binding",
        "name": "web", "namespace": "team", "operation": "CREATE",
        "object": {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}}}}


async def test_a_binding_that_would_set_the_networks_is_refused_and_the_schedulers_never_reach_the_webhook():
    # The API server copies a Binding's annotations onto the pod it binds (pods/binding).
    hijack = _binding({ANN: '[{"podNetworkName":"default"},{"podNetworkName":"other-tenants-net"}]'})
    scheduler = _binding(None)
    app = admissionapp.app(lambda _: None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        refused = (await client.post(admission.VALIDATE_PATH, json=hijack)).json()["response"]
        passed = (await client.post(admission.VALIDATE_PATH, json=scheduler)).json()["response"]
    assert refused["allowed"] is False
    assert refused["status"]["message"].startswith(
        f'Pod "web" cannot be bound this way: metadata.annotations[{ANN}]: Forbidden: a Binding\'s annotations are '
        "copied onto the pod it binds")
    assert passed == {"uid": "u-1", "allowed": True}
    (_, (validating,)) = (c["webhooks"] for c in admission.webhook_configurations({"url": "https://x"}))
    assert _sent_by_the_api_server(validating, hijack)
    assert not _sent_by_the_api_server(validating, scheduler)
    assert not _sent_by_the_api_server(validating, _binding({"example.com/x": "y"}))
