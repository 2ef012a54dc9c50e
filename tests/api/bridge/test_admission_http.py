"""The bridge's webhook over HTTP (httpx against the ASGI app), fed by the bridge controller running on kmock.

The pod the webhook admits is then created in the emulator as the API server
would store it, and the controller finishes the job: selection and gate removal
in one write.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from typing import Any

import httpx
import jsonpatch
import kmock as kmock_lib
import pytest

from bridge import npwg, translate
from bridge.operator import admission, admissionapp, pods
from tests.api import bridge_api_support as bs

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

#: The translation's warning for a pod that leaves `default` out (NPWG 6 attaches it anyway).
NO_DEFAULT = "the pod does not list the default PodNetwork"


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": bs.NS, "operation": "CREATE", "object": obj}}


def new_pod(name: str, nets: list[dict[str, Any]]) -> dict[str, Any]:
    body = bs.pod(name, nets)
    for key in ("uid", "resourceVersion"):  # the API server sets these after admission
        body["metadata"].pop(key)
    body.pop("status")
    return body


async def admit(app: Any, obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://webhook") as client:
        resp = await client.post(admission.MUTATE_PATH, json=review(obj))
    assert resp.status_code == 200, resp.text
    response = resp.json()["response"]
    assert response["uid"] == "u-1" and response["allowed"] is True
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return response, jsonpatch.apply_patch(obj, ops)


def seed(k: kmock_lib.KubernetesEmulator, *objs: dict) -> None:
    bs.declare_resources(k)
    kinds = {"PodNetwork": bs.PN, npwg.NAD_KIND: bs.NAD}
    for obj in objs:
        meta = obj["metadata"]
        k.objects[kinds[obj["kind"]], meta.get("namespace"), meta["name"]] = obj


def pod_of(k: kmock_lib.KubernetesEmulator, name: str) -> dict:
    return copy.deepcopy(k.objects[bs.PODS, bs.NS, name].raw)


async def test_a_pod_admitted_before_its_network_is_ready_is_scheduled_only_with_its_selection(
    kmock: bs.Emulator
) -> None:
    seed(kmock, bs.podnetwork("dataplane", ready=False), bs.nad("dataplane"))
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "dataplane", nads=("dataplane",))
        app = admissionapp.app(bridge.objects)
        response, admitted = await admit(app, new_pod("web", [{"podNetworkName": "dataplane"}]))
        (no_default, gate) = response["warnings"]
        assert no_default.startswith(NO_DEFAULT) and gate == admission.GATE_WARNING
        assert admitted["spec"]["schedulingGates"] == [{"name": pods.SCHEDULING_GATE}]
        await bs.call(kmock, "POST", f"/api/v1/namespaces/{bs.NS}/pods", admitted)
        await asyncio.sleep(0.5)
        assert pod_of(kmock, "web")["spec"]["schedulingGates"] == [{"name": pods.SCHEDULING_GATE}]

        await bs.call(kmock, "PATCH", f"{bs.PN_URL}/dataplane/status",
                      {"status": {"conditions": [bs.ready_condition()]}})

        def released() -> dict:
            body = pod_of(kmock, "web")
            assert "schedulingGates" not in body["spec"]
            return body
        body = await bs.eventually(released)
    assert json.loads(bs.annotations(body)[npwg.NETWORKS_ANNOTATION]) == [{"name": "dataplane", "namespace": "nets"}]
    (write,) = bs.requests_to(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="web"))
    assert npwg.NETWORKS_ANNOTATION in write["metadata"]["annotations"] and write["spec"] == {"schedulingGates": None}


async def test_a_pod_admitted_once_its_network_is_ready_gets_the_selection_and_no_gate(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("dataplane"), bs.nad("dataplane"))
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "dataplane", nads=("dataplane",))
        response, admitted = await admit(admissionapp.app(bridge.objects), new_pod("api", [{"podNetworkName": "dataplane"}]))
    (no_default,) = response["warnings"]
    assert no_default.startswith(NO_DEFAULT)
    assert "schedulingGates" not in admitted["spec"]
    assert bs.annotations(admitted)[npwg.NETWORKS_ANNOTATION] == '[{"name":"dataplane","namespace":"nets"}]'


async def test_the_webhook_answers_400_to_what_is_not_an_admission_review() -> None:
    app = admissionapp.app(lambda: translate.Objects({}, {}, {}, {}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://webhook") as client:
        not_json = await client.post(admission.MUTATE_PATH, content=b"{", headers={"Content-Type": "application/json"})
        wrong = await client.post(admission.MUTATE_PATH, json={"kind": "Pod"})
        health = await client.get("/healthz")
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["detail"]
    assert wrong.status_code == 400 and "AdmissionReview" in wrong.json()["detail"]
    assert health.json() == {"status": "ok"}
