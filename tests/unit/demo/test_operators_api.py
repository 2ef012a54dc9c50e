"""The operators' API over the demo's store (`demo.storeapi`): the calls the operators make, the
store's errors as the operators' client raises them, a node condition merged by type, and every
write told to `on_write` as `AsyncApi` tells it."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from demo.store import Store
from demo.storeapi import StoreApi
from podnetwork.ground import constants
from podnetwork.ground.actions import Patch
from podnetwork.kube import client as kube
from podnetwork.kube import writes

PN = (constants.API_VERSION, constants.PODNETWORK_KIND)


def blue() -> dict[str, Any]:
    return {"apiVersion": PN[0], "kind": PN[1], "metadata": {"name": "blue"}, "spec": {"enabled": True}}


def test_reads_and_writes_reach_the_store() -> None:
    store = Store()
    api = StoreApi(store)
    created = asyncio.run(api.create(kube.PodNetwork, blue()))
    assert asyncio.run(api.get(kube.PodNetwork, "blue")) == created
    listing = asyncio.run(api.list(kube.PodNetwork))
    assert [o["metadata"]["name"] for o in listing.items] == ["blue"]
    assert listing.resource_version == store.resource_version
    status = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    asyncio.run(api.patch(kube.PodNetwork, "blue", status, status=True))
    assert store.get(*PN, "blue")["status"] == status["status"]


def test_the_store_s_errors_are_the_client_s_so_the_write_policy_reads_them_as_on_a_cluster() -> None:
    store = Store()
    api = StoreApi(store)
    with pytest.raises(kube.NotFound, match="get PodNetwork red"):
        asyncio.run(api.get(kube.PodNetwork, "red"))
    asyncio.run(api.create(kube.PodNetwork, blue()))
    with pytest.raises(kube.Conflict):
        asyncio.run(api.create(kube.PodNetwork, blue()))
    stale = Patch(PN[1], "blue", None, {"metadata": {"resourceVersion": "0"}, "spec": {"enabled": False}})
    conflict = asyncio.run(writes.apply(api, stale))
    gone = asyncio.run(writes.apply(api, Patch(PN[1], "red", None, {"spec": {"enabled": False}})))
    assert conflict.conflict and conflict.retry and conflict.body is None
    assert gone.gone and not gone.retry
    with pytest.raises(kube.ApiError) as refused:
        asyncio.run(api.patch(kube.Pod, "a", {}, namespace=None))
    assert refused.value.status == 400


def test_a_node_condition_is_merged_by_type_and_the_kubelet_s_stay() -> None:
    store = Store()
    store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    kubelet = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    store.patch("v1", "Node", "n1", {"status": {"conditions": [
        kubelet, {"type": "DefaultPodNetworkReady", "status": "False"}]}}, subresource="status")
    api = StoreApi(store)
    ours = {"type": "DefaultPodNetworkReady", "status": "True", "reason": "DefaultPodNetworkReady"}
    asyncio.run(api.patch(kube.Node, "n1", {"status": {"conditions": [ours]}}, patch_type="strategic",
                          status=True))
    assert store.get("v1", "Node", "n1")["status"]["conditions"] == [kubelet, ours]


def test_a_strategic_patch_of_a_list_the_demo_cannot_merge_is_refused_not_replaced() -> None:
    store = Store()
    store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    api = StoreApi(store)
    with pytest.raises(kube.ApiError, match=r"merges no list at spec\.taints strategically"):
        asyncio.run(api.patch(kube.Node, "n1", {"spec": {"taints": []}}, patch_type="strategic"))
    with pytest.raises(kube.ApiError, match="does not take json patches"):
        asyncio.run(api.patch(kube.Node, "n1", [], patch_type="json"))


def test_every_write_is_told_with_its_outcome() -> None:
    store = Store()
    api = StoreApi(store)
    told: list[tuple[str, str, str]] = []
    api.on_write = lambda *outcome: told.append(outcome)
    asyncio.run(api.create(kube.PodNetwork, blue()))
    asyncio.run(writes.apply(api, Patch(PN[1], "red", None, {"spec": {}})))
    asyncio.run(writes.apply(api, Patch(PN[1], "blue", None, {"status": {}}, status=True)))
    asyncio.run(api.get(kube.PodNetwork, "blue"))  # a read is no write
    assert told == [("PodNetwork", "create", "written"), ("PodNetwork", "patch", "not_found"),
                    ("PodNetwork", "patch_status", "written")]


def test_delete_removes_and_a_second_delete_is_not_found_as_the_services_controller_reads_it() -> None:
    store = Store()
    api = StoreApi(store)
    told: list[tuple[str, str, str]] = []
    api.on_write = lambda kind, verb, outcome: told.append((kind, verb, outcome))
    slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
              "metadata": {"name": "db.ipv4.0", "namespace": "app"}, "addressType": "IPv4", "endpoints": []}
    asyncio.run(api.create(kube.EndpointSlice, slice_))
    asyncio.run(api.delete(kube.EndpointSlice, "db.ipv4.0", "app"))
    assert store.find("discovery.k8s.io/v1", "EndpointSlice", "db.ipv4.0", "app") is None
    with pytest.raises(kube.NotFound, match=re.escape("delete EndpointSlice app/db.ipv4.0")):
        asyncio.run(api.delete(kube.EndpointSlice, "db.ipv4.0", "app"))
    assert told[1:] == [("EndpointSlice", "delete", "written"), ("EndpointSlice", "delete", "not_found")]
