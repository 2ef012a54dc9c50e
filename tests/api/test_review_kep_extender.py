"""Review findings on the scheduler extender's HTTP face (httpx against the ASGI app).

Issue #4: a body of the wrong shape gets HTTP 400 with a message, never an answer
with the protocol's Error field (which kube-scheduler reports as the extender failing).
"""

from __future__ import annotations

import json

import httpx
import pytest

from podnetwork import constants
from scheduler_plugin import app as app_mod
from scheduler_plugin import cache as cache_mod
from scheduler_plugin.settings import Settings

T0 = "2026-01-01T00:00:00Z"


def ready_cache() -> cache_mod.Cache:
    cache = cache_mod.Cache()
    for name in ("default", "blue"):
        cache.upsert({"kind": "PodNetwork", "metadata": {"name": name},
                      "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": T0}]}})
    cache.mark_synced()
    return cache


POD = {"metadata": {"name": "p", "namespace": "ns", "annotations": {
    constants.NETWORKS_ANNOTATION: json.dumps([{"podNetworkName": "blue"}])}}, "spec": {}}


@pytest.mark.parametrize("metadata", [
    pytest.param({"name": "n1", "annotations": "x"}, id="annotations a string"),
    pytest.param({"name": "n1", "annotations": ["x"]}, id="annotations a list"),
])
async def test_a_node_list_with_a_node_of_the_wrong_shape_is_a_400(metadata):
    app = app_mod.create_app(ready_cache(), Settings())
    body = {"Pod": POD, "Nodes": {"items": [{"metadata": metadata}]}, "NodeNames": None}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
        resp = await client.post("/filter", json=body)
    assert resp.status_code == 400, resp.text
    assert "Nodes.items[0].metadata.annotations" in resp.json()["message"]


async def test_a_node_list_whose_nodes_have_no_annotations_still_passes():
    app = app_mod.create_app(ready_cache(), Settings())
    body = {"Pod": POD, "Nodes": {"items": [{"metadata": {"name": "n1", "annotations": None}},
                                            {"metadata": {"name": "n2"}}]}, "NodeNames": None}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
        resp = await client.post("/filter", json=body)
    assert resp.status_code == 200
    reply = resp.json()
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n1", "n2"]
    assert reply["Error"] == ""



async def test_a_pod_is_held_when_its_attachment_is_still_ready_but_its_podnetwork_no_longer_is():
    # Between a PodNetwork turning not Ready (e.g. enabled: false) and the controller
    # rewriting its attachments' Ready, the cache holds a Ready attachment over a network
    # that takes no new pods (KEP "Enabled"); the pod must not be placed in that window.
    cache = ready_cache()
    cache.upsert({"kind": "PodNetwork", "metadata": {"name": "blue"}, "status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "AdministrativelyDisabled",
         "message": "spec.enabled is false", "lastTransitionTime": T0}]}})
    cache.upsert({"kind": "PodNetworkAttachment", "metadata": {"name": "a", "namespace": "ns"},
                  "spec": {"podNetworkName": "blue"},
                  "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": T0}]}})
    pod = {"metadata": {"name": "p", "namespace": "ns", "annotations": {
        constants.NETWORKS_ANNOTATION: json.dumps([{"podNetworkAttachmentName": "a"}])}}, "spec": {}}
    app = app_mod.create_app(cache, Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
        resp = await client.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["n1", "n2"]})
    reply = resp.json()
    assert reply["NodeNames"] == []
    assert set(reply["FailedAndUnresolvableNodes"]) == {"n1", "n2"}
    assert reply["FailedAndUnresolvableNodes"]["n1"] == (
        'podnetwork "blue" is not Ready: AdministrativelyDisabled: spec.enabled is false')
