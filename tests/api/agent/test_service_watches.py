"""The Services' ClusterIPs' watches against kmock's Kubernetes emulator over real HTTP: the agent's
wiring (`command.service_clusterips` over the watch cache: PodNetworks from the cache's own watch,
Services and EndpointSlices from its own, each asked for by label) brings a Service, its slices'
endpoints and their changes into the state and the local client pod's rules, and the Service's
deletion removes them. The rules are recorded, not written (tests/cni/test_service_enforcement.py
writes them with real nft and real traffic through the agent)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import kmock
import pytest

from bridge.agent.daemon import command
from bridge.agent.delegates.cache import Attachment, Record, State
from bridge.agent.kube import objects, watchcache
from bridge.agent.services import apply as servicer
from bridge.services import Ruleset
from podnetwork.ground import constants
from tests.api.kube_emulator import Emulator, write_kubeconfig

SERVICES, SLICES = "v1/services", "discovery.k8s.io/v1/endpointslices"
PNS = "multinetwork.x-k8s.io/v1alpha1/podnetworks"
RESOURCES = {
    SERVICES: ("Service", True), SLICES: ("EndpointSlice", True), PNS: ("PodNetwork", False),
    "k8s.cni.cncf.io/v1/network-attachment-definitions": ("NetworkAttachmentDefinition", True),
    "multinetwork.x-k8s.io/v1alpha1/podnetworkattachments": ("PodNetworkAttachment", True),
    "bridge.multinetwork.x-k8s.io/v1alpha1/networkselectionoptions": ("NetworkSelectionOptions", True),
}
NETNS = "/var/run/netns/client-0"
CLUSTER_IP = "10.96.0.10"


def service(name: str, *, proxied: bool = True) -> dict[str, Any]:
    labels = {constants.SERVICE_PROXY_NAME_LABEL: constants.SERVICE_PROXY_NAME} if proxied else {}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": name, "namespace": "app", "labels": labels,
        "annotations": {constants.SERVICE_PODNETWORK_ANNOTATION: "blue"}},
        "spec": {"type": "ClusterIP", "clusterIP": CLUSTER_IP, "clusterIPs": [CLUSTER_IP], "selector": {"app": name},
                 "ports": [{"name": "sql", "protocol": "TCP", "port": 5432}]}}


def endpoint_slice(name: str, *addresses: str, managed_by: str = constants.ENDPOINTSLICE_MANAGED_BY) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": name, "namespace": "app", "labels": {
                constants.ENDPOINTSLICE_MANAGED_BY_LABEL: managed_by,
                constants.ENDPOINTSLICE_SERVICE_NAME_LABEL: "db"}},
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
            "ports": [{"name": "sql", "protocol": "TCP", "port": 5432}]}


PODNETWORK = {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "blue"},
              "spec": {"enabled": True, "provider": "multinetwork.x-k8s.io/npwg-bridge", "parametersRefs": [
                  {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": "blue",
                   "namespace": "app"}]}}


class Kernel:
    def __init__(self) -> None:
        self.tables: dict[str, Ruleset] = {}

    async def apply(self, netns: str, ruleset: Ruleset, *, timeout: float) -> None:
        self.tables[netns] = ruleset

    async def update(self, netns: str, before: Ruleset, after: Ruleset, changes: list[Any] | None, *,
                     timeout: float) -> bool:
        """As `clusterips.update`: in place from the table there, else the whole table."""
        in_place = changes is not None and self.tables.get(netns) == before
        self.tables[netns] = after
        return in_place

    async def remove(self, netns: str, *, timeout: float) -> None:
        self.tables.pop(netns, None)

    async def flush(self, netns: str, pairs: list[tuple[str, str]], *, timeout: float, conntrack: str) -> int:
        return len(pairs)

    def endpoints(self) -> str:
        return str(self.tables[NETNS].commands) if NETNS in self.tables else ""


@pytest.fixture
async def cluster() -> AsyncIterator[Emulator]:
    k = Emulator()
    for resource, (kind, namespaced) in RESOURCES.items():
        k.resources[resource] = kmock.ResourceInfo(
            kind=kind, namespaced=namespaced, verbs={"get", "list", "watch", "patch", "create", "delete"})
    k.objects[PNS, None, "blue"] = PODNETWORK
    k.objects[SLICES, "app", "db-upstream"] = endpoint_slice(
        "db-upstream", "10.0.0.99", managed_by="endpointslice-controller.k8s.io")
    async with k, kmock.Server(k):
        yield k


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def record() -> Record:
    return Record("c1", NETNS, "eth0", pod_namespace="app", pod_name="client-0", complete=True, attachments=[
        Attachment("app/blue", "net1", {}, state=State.ATTACHED, result={"ips": [{"address": "10.1.0.5/24"}]})])


async def send(k: Emulator, method: str, path: str, body: Mapping[str, Any] | None = None) -> None:
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with k.clients[0].request(method, path, json=body, headers=headers) as resp:
        assert resp.status in (200, 201), await resp.text()


def requests_of(k: Emulator, path_suffix: str) -> list[Any]:
    return [r for r in list(k) if r.method == kmock.method.GET and str(r.url.path).endswith(path_suffix)]


async def test_services_and_our_slices_reach_the_client_pods_rules_through_the_watches(
    cluster: Emulator, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(cluster.url))
    source = await asyncio.to_thread(objects.KubernetesObjects, str(kubeconfig))
    cache = watchcache.CachedObjects(source)
    served = command.service_clusterips(argparse.Namespace(services=True), cache, source.api)
    assert isinstance(served, servicer.ClusterIPs)
    kernel = Kernel()
    served.apply, served.update, served.remove, served.flush = kernel.apply, kernel.update, kernel.remove, kernel.flush
    cache.start()
    served.start([record()])
    try:
        await until(lambda: served.state.ready, "Services, slices and PodNetworks listed")
        # PodNetworks come through the watch cache's own watch: no second watch of the kind.
        assert cache.mirrors[constants.PODNETWORK_KIND].listeners == [served.state]
        assert len([r for r in requests_of(cluster, "/podnetworks") if "watch" not in r.url.query]) == 1
        # Services and slices are asked for by label: the API server sends only ours.
        for path, selector in (("/services", watchcache.SERVICE.selector),
                               ("/endpointslices", watchcache.ENDPOINTSLICE.selector)):
            asked = requests_of(cluster, path)
            assert asked and all(r.url.query.get("labelSelector") == selector for r in asked), path
        assert served.state.slices == {}  # the upstream controller's slice is not kept (the emulator sent it)
        assert served.state.by_nad() == {"app/blue": "blue"}

        await send(cluster, "POST", "/api/v1/namespaces/app/services", service("db"))
        await send(cluster, "POST", "/apis/discovery.k8s.io/v1/namespaces/app/endpointslices",
                   endpoint_slice("db.ipv4.0", "10.1.0.20"))
        await until(lambda: "10.1.0.20" in kernel.endpoints(), "the Service's endpoint in the client's rules")
        assert [r.destination for r in kernel.tables[NETNS].routes] == [f"{CLUSTER_IP}/32"]

        await send(cluster, "PATCH", "/apis/discovery.k8s.io/v1/namespaces/app/endpointslices/db.ipv4.0",
                   {"endpoints": [{"addresses": ["10.1.0.21"], "conditions": {"ready": True}}]})
        await until(lambda: "10.1.0.21" in kernel.endpoints() and "10.1.0.20" not in kernel.endpoints(),
                    "the endpoint change followed")

        await send(cluster, "POST", "/api/v1/namespaces/app/services", service("not-ours", proxied=False))
        await served.idle()
        assert set(served.state.services) == {"app/db"}

        await send(cluster, "DELETE", "/api/v1/namespaces/app/services/db")
        await until(lambda: NETNS not in kernel.tables, "the rules removed with the Service")
    finally:
        await served.stop()
        await cache.close()
