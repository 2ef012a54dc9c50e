"""The extender's watch feeder against kmock's Kubernetes emulator, over real HTTP.

The feeder lists, then watches, through podnetwork.kube in its own thread's event
loop; kmock serves the API on loopback in this test's event loop. Changes
made through the API reach the cache, and `/readyz` follows the first full list.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import httpx
import kmock
import pytest

from podnetwork.ground import constants
from podnetwork.kube import client as kube
from podnetwork.kube import credentials
from scheduler_plugin import app as app_mod
from scheduler_plugin import cache as cache_mod
from scheduler_plugin import feeder as feeder_mod
from scheduler_plugin.settings import Settings
from tests.api.extender_support import attachment, by_names, node, pod, podnetwork

PN = f"{constants.GROUP}/{constants.VERSION}/{constants.PODNETWORK_PLURAL}"
PNA = f"{constants.GROUP}/{constants.VERSION}/{constants.ATTACHMENT_PLURAL}"
NODES = "v1/nodes"


def declare(k: kmock.KubernetesEmulator) -> None:
    verbs = {"list", "watch", "get", "create", "patch", "delete"}
    k.resources[PN] = kmock.ResourceInfo(kind="PodNetwork", namespaced=False, verbs=verbs)
    k.resources[PNA] = kmock.ResourceInfo(kind="PodNetworkAttachment", namespaced=True, verbs=verbs)
    k.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs=verbs)


@pytest.fixture()
async def fed(kmock: kmock.KubernetesEmulator) -> AsyncIterator[tuple[cache_mod.Cache, kmock.KubernetesEmulator]]:
    declare(kmock)
    kmock.objects[PN, None, "default"] = podnetwork("default")
    kmock.objects[PN, None, "blue"] = podnetwork("blue", False, "ParamsNotReady", "waiting for the NAD")
    kmock.objects[PNA, "shop", "blue-fast"] = attachment("blue-fast", "blue")
    kmock.objects[NODES, None, "node-a"] = {**node("node-a", ["blue"]), "apiVersion": "v1", "kind": "Node"}
    kmock.objects[NODES, None, "node-b"] = {**node("node-b", []), "apiVersion": "v1", "kind": "Node"}
    api = kube.AsyncApi(credentials.Credentials(server=str(kmock.url).rstrip("/")))
    cache = cache_mod.Cache()
    # kmock ignores the server-side watch timeout: a short read timeout makes the feeder
    # open a new watch after a second of silence, as after a dead connection.
    feeder = feeder_mod.Feeder(cache, api, watch_timeout=1, read_timeout=1.0, retry_delay=0.1)
    feeder.start()
    try:
        yield cache, kmock
    finally:
        await asyncio.to_thread(feeder.stop, 5.0)


async def eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_first_full_list_fills_the_cache_and_marks_it_synced(fed) -> None:  # type: ignore[no-untyped-def]
    cache, _ = fed
    await eventually(lambda: cache.synced, "the cache to sync")
    snap = cache.snapshot()
    assert set(snap.podnetworks) == {"default", "blue"}
    assert not snap.podnetworks["blue"].ready
    assert snap.attachments[("shop", "blue-fast")].pod_network_name == "blue"
    assert snap.nodes["node-a"] == frozenset({"blue"})
    assert snap.nodes["node-b"] == frozenset()


async def test_a_podnetwork_turning_ready_through_the_api_lets_the_pod_schedule(fed) -> None:  # type: ignore[no-untyped-def]
    cache, k = fed
    await eventually(lambda: cache.synced, "the cache to sync")
    application = app_mod.create_app(cache, Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://x") as extender:
        assert (await extender.get("/readyz")).status_code == 200
        body = by_names(pod([{"podNetworkAttachmentName": "blue-fast"}]), ["node-a", "node-b"])
        # The attachment itself is Ready, its PodNetwork is not yet known to be.
        async with k.patch(f"/apis/{PN}/blue", json=podnetwork("blue")) as response:
            assert response.status == 200
        await eventually(lambda: cache.snapshot().podnetworks["blue"].ready, "blue to turn Ready")
        reply = (await extender.post("/filter", json=body)).json()
    assert reply["NodeNames"] == ["node-a"]
    assert reply["FailedNodes"] == {"node-b": 'podnetwork "blue" is not available on this node'}


async def test_created_and_deleted_objects_reach_the_cache(fed) -> None:  # type: ignore[no-untyped-def]
    cache, k = fed
    await eventually(lambda: cache.synced, "the cache to sync")
    new_node = {**node("node-c"), "apiVersion": "v1", "kind": "Node"}
    async with k.post(f"/api/{NODES}", data=json.dumps(new_node),
                      headers={"Content-Type": "application/json"}) as response:
        assert response.status in (200, 201)
    await eventually(lambda: "node-c" in cache.snapshot().nodes, "node-c to arrive")
    assert cache.snapshot().nodes["node-c"] is None
    async with k.delete(f"/apis/{PNA.replace('podnetworkattachments', 'namespaces/shop/podnetworkattachments')}/blue-fast") as response:
        assert response.status == 200
    await eventually(lambda: ("shop", "blue-fast") not in cache.snapshot().attachments, "blue-fast to go")
