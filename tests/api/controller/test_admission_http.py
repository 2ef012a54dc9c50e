"""The admission webhooks' FastAPI app over HTTP (httpx's ASGI transport), AdmissionReview JSON in and out.

A malformed AdmissionReview gets HTTP 400 with a message, never a 500.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from podnetwork import admission, constants

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
    app = admission.app(namespaces.get)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        resp = await client.post(admission.MUTATE_PATH, json=review(pod()))
    assert resp.status_code == 200
    body = resp.json()
    assert body["response"]["uid"] == "u-1"
    ops = json.loads(base64.b64decode(body["response"]["patch"]))
    assert ops == [{"op": "add", "path": "/metadata/annotations",
                    "value": {ANN: '[{"podNetworkName":"tenant-a"}]'}}]


async def test_validating_endpoint_refuses_with_causes():
    app = admission.app(lambda _: None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        resp = await client.post(admission.VALIDATE_PATH, json=review(pod({ANN: "[]"})))
    response = resp.json()["response"]
    assert response["allowed"] is False
    assert response["status"]["details"]["causes"][0]["field"] == "spec.networks"


async def test_disabled_gate_serves_allow_all():
    app = admission.app(lambda _: None, enabled=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        resp = await client.post(admission.VALIDATE_PATH, json=review(pod({ANN: "[]"})))
    assert resp.json()["response"] == {"uid": "u-1", "allowed": True}


async def test_garbage_is_a_400_and_health_is_ok():
    app = admission.app(lambda _: None)
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
    api = admission.app(_namespaces)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://x") as client:
        resp = await client.post(path, json=review)
    assert resp.status_code == 400, resp.text
    assert "namespace" in resp.json()["detail"]
