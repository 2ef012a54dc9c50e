"""Admission for a namespace its cache has not seen yet: one GET through the controller's getter.

A namespace and its pods applied together can reach the webhook before the
namespace's watch event. The app (httpx against the ASGI app) asks the running
controller (real kopf, logged in to kmock over HTTP), which reads the namespace
once from the API and caches it. kmock 0.8 cannot route `/api/v1/namespaces/NAME`
as an object, so the test serves that path with a kmock reaction.

`podnetwork controller` over HTTPS does the same: its webhook runs in uvicorn's
tasks, outside kopf's, and the namespace GET goes through the controller's own
client, made from the same credentials as kopf's login.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from podnetwork.commands import admissionapp
from podnetwork.ground import constants
from podnetwork.kep import admission, controller
from tests.api.controller_support import ask_the_command, running
from tests.api.kube_emulator import declare_resources, requests_to

ANN = constants.NETWORKS_ANNOTATION
SETTINGS = controller.ControllerSettings(create_default=False, inuse_message_interval=0.2)


def review(namespace: str, operation: str = "CREATE", annotations: dict[str, str] | None = None
           ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": namespace,
        "operation": operation, "object": {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                           "spec": {"containers": [{"name": "c", "image": "x"}]}}}}


def namespace(name: str, profile: list[dict[str, str]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"team": "a"}}
    if profile is not None:
        meta["annotations"] = {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: json.dumps(profile)}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def patched_networks(response: dict[str, Any]) -> str:
    ops = json.loads(base64.b64decode(response["response"]["patch"]))
    assert len(ops) == 1 and ops[0]["op"] == "add"
    return ops[0]["value"][ANN] if ops[0]["path"] == "/metadata/annotations" else ops[0]["value"]


async def post(ctl: controller.Controller, path: str, body: dict[str, Any]) -> httpx.Response:
    app = admissionapp.app(ctl.namespace, fetch_namespace=ctl.fetch_namespace)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        return await client.post(path, json=body)


async def test_pod_of_a_namespace_created_just_before_gets_the_profile_networks(kmock):
    declare_resources(kmock)
    async with running(kmock, SETTINGS) as ctl:
        # Created after the controller's start, and no watch event has told it.
        kmock["get /api/v1/namespaces/team"] << namespace("team", [{"podNetworkName": "tenant-a"}])
        assert "team" not in ctl.namespaces
        first = await post(ctl, admission.MUTATE_PATH, review("team"))
        second = await post(ctl, admission.MUTATE_PATH, review("team"))
    assert first.status_code == 200 and second.status_code == 200
    assert patched_networks(first.json()) == '[{"podNetworkName":"tenant-a"}]'
    assert patched_networks(second.json()) == '[{"podNetworkName":"tenant-a"}]'
    # One GET, then the cache answers; the cache keeps the profile, not the whole object.
    assert len(requests_to(kmock, "GET", "/api/v1/namespaces/team")) == 1
    assert ctl.namespaces["team"] == {"metadata": {"name": "team", "annotations": {
        constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: '[{"podNetworkName": "tenant-a"}]'}}}


async def test_unseen_namespace_without_a_profile_gets_default_and_is_remembered(kmock):
    declare_resources(kmock)
    async with running(kmock, SETTINGS) as ctl:
        kmock["get /api/v1/namespaces/plain"] << namespace("plain")
        first = await post(ctl, admission.MUTATE_PATH, review("plain"))
        second = await post(ctl, admission.MUTATE_PATH, review("plain"))
    assert patched_networks(first.json()) == patched_networks(second.json()) == '[{"podNetworkName":"default"}]'
    assert len(requests_to(kmock, "GET", "/api/v1/namespaces/plain")) == 1
    assert ctl.namespace("plain") == {"metadata": {"name": "plain"}}


async def test_failing_namespace_get_fails_the_request_with_a_clear_message(kmock):
    declare_resources(kmock)
    async with running(kmock, SETTINGS) as ctl:
        kmock["get /api/v1/namespaces/broken"] << 503
        resp = await post(ctl, admission.MUTATE_PATH, review("broken"))
    # Not `default` in silence: an error, so the webhook's failurePolicy (Fail) refuses the pod.
    assert resp.status_code == 503
    detail = resp.json()["detail"]
    assert detail.startswith('cannot read namespace "broken" to apply its networks profile '
                             f"({constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION}): GET /api/v1/namespaces/broken")
    assert detail.endswith("retry the request")
    assert "broken" not in ctl.namespaces  # the next request tries again


async def test_known_namespace_and_requests_that_need_no_namespace_make_no_get(kmock):
    declare_resources(kmock)
    async with running(kmock, SETTINGS) as ctl:
        ctl.namespaces["known"] = controller.namespace_entry(namespace("known", [{"podNetworkName": "blue"}]))
        mutated = await post(ctl, admission.MUTATE_PATH, review("known"))
        # Validation, a pod naming its networks and an UPDATE never read the namespace.
        validated = await post(ctl, admission.VALIDATE_PATH, review("elsewhere"))
        named = await post(ctl, admission.MUTATE_PATH,
                           review("elsewhere", annotations={ANN: '[{"podNetworkName":"red"}]'}))
        updated = await post(ctl, admission.MUTATE_PATH, review("elsewhere", operation="UPDATE"))
    assert patched_networks(mutated.json()) == '[{"podNetworkName":"blue"}]'
    for resp in (validated, named, updated):
        assert resp.status_code == 200 and resp.json()["response"] == {"uid": "u-1", "allowed": True}
    assert [r for r in list(kmock) if "/api/v1/namespaces/" in str(r.url.path)
            and not str(r.url.path).endswith(("/pods", "/events"))] == []


@pytest.mark.timeout(60)
async def test_command_reads_an_unseen_namespace_with_its_own_credentials(kmock, tmp_path: Path):
    declare_resources(kmock)
    kmock["get /api/v1/namespaces/team"] << {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "team", "annotations": {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION:
                                        '[{"podNetworkName":"tenant-a"}]'}}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "team",
        "operation": "CREATE", "object": {"metadata": {"name": "p", "namespace": "team"}, "spec": {}}}}
    resp = await ask_the_command(kmock, tmp_path, admission.MUTATE_PATH, review,
                                 "--disable-default-podnetwork-creation")
    ops = json.loads(base64.b64decode(resp.json()["response"]["patch"]))
    assert ops == [{"op": "add", "path": "/metadata/annotations",
                    "value": {constants.NETWORKS_ANNOTATION: '[{"podNetworkName":"tenant-a"}]'}}]
    gets = [r for r in list(kmock) if r.method.value == "GET" and str(r.url.path) == "/api/v1/namespaces/team"]
    assert len(gets) == 1 and gets[0].headers.get("Authorization") == "Bearer secret-token"
