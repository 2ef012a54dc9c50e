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


def ready_cache() -> cache_mod.Cache:
    cache = cache_mod.Cache()
    for name in ("default", "blue"):
        cache.upsert({"kind": "PodNetwork", "metadata": {"name": name},
                      "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}})
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

