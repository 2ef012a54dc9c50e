"""MultiNetworkPolicy enforcement's watches against kmock's Kubernetes emulator over real HTTP: the
agent's wiring (`command.policy_enforcer` over the watch cache: NADs and PodNetworks from the cache's
own watches, Pods, Namespaces and policies from its own) brings a policy, a new peer pod and a
namespace's labels into the table of a local pod; a cluster without the policy CRD is said once and
enforces nothing. The tables are recorded, not written (tests/cni/test_policy_enforcement.py writes
them with real nft and real traffic)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import kmock
import pytest

from bridge.agent.daemon import command
from bridge.agent.delegates.cache import Attachment, Record, State
from bridge.agent.kube import objects, watchcache
from bridge.agent.policy import apply as enforcer
from podnetwork.ground import constants
from tests.api.kube_emulator import Emulator, write_kubeconfig

PODS, NAMESPACES = "v1/pods", "v1/namespaces"
NADS = "k8s.cni.cncf.io/v1/network-attachment-definitions"
PNS = "multinetwork.x-k8s.io/v1alpha1/podnetworks"
POLICIES = "k8s.cni.cncf.io/v1beta1/multi-networkpolicies"
RESOURCES = {
    PODS: ("Pod", True), NAMESPACES: ("Namespace", False), NADS: ("NetworkAttachmentDefinition", True),
    PNS: ("PodNetwork", False),
    "multinetwork.x-k8s.io/v1alpha1/podnetworkattachments": ("PodNetworkAttachment", True),
    "bridge.multinetwork.x-k8s.io/v1alpha1/networkselectionoptions": ("NetworkSelectionOptions", True),
}
NETNS = "/var/run/netns/db-0"


def pod(name: str, labels: Mapping[str, str], ip: str | None = None, namespace: str = "db") -> dict[str, Any]:
    annotations = {}
    if ip:
        annotations[constants.NPWG_NETWORK_STATUS_ANNOTATION] = json.dumps(
            [{"name": "db/blue", "interface": "net1", "ips": [ip]}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": namespace, "labels": dict(labels), "annotations": annotations},
        "spec": {"nodeName": "other"}}


def policy(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy", "metadata": {
        "name": name, "namespace": "db", "annotations": {constants.POLICY_FOR_NAD_ANNOTATION: "blue"}},
        "spec": dict(spec)}


class Kernel:
    def __init__(self) -> None:
        self.tables: dict[str, str] = {}
        self.calls: list[str] = []

    async def apply(self, netns: str, document: Mapping[str, Any], *, timeout: float) -> None:
        self.calls.append("apply")
        self.tables[netns] = json.dumps(document)

    async def remove(self, netns: str, *, timeout: float) -> None:
        self.calls.append("remove")
        self.tables.pop(netns, None)


def cluster_with(policy_crd: bool) -> Emulator:
    k = Emulator()
    resources = dict(RESOURCES)
    if policy_crd:
        resources[POLICIES] = ("MultiNetworkPolicy", True)
    for resource, (kind, namespaced) in resources.items():
        k.resources[resource] = kmock.ResourceInfo(
            kind=kind, namespaced=namespaced, verbs={"get", "list", "watch", "patch", "create", "delete"})
    k.objects[NAMESPACES, None, "db"] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "db"}}
    k.objects[NAMESPACES, None, "web"] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}}
    k.objects[NADS, "db", "blue"] = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                                     "metadata": {"name": "blue", "namespace": "db"}, "spec": {"config": "{}"}}
    k.objects[PODS, "db", "db-0"] = pod("db-0", {"app": "db"})
    return k


@pytest.fixture
async def cluster() -> AsyncIterator[Emulator]:
    async with cluster_with(True) as k, kmock.Server(k):
        yield k


@pytest.fixture
async def no_policy_crd() -> AsyncIterator[Emulator]:
    async with cluster_with(False) as k, kmock.Server(k):
        yield k


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def record() -> Record:
    return Record("c1", NETNS, "eth0", pod_namespace="db", pod_name="db-0", complete=True, attachments=[
        Attachment("db/blue", "net1", {}, state=State.ATTACHED,
                   result={"ips": [{"address": "10.1.0.5/24"}]})])


async def started(k: Emulator, tmp_path: Path) -> tuple[watchcache.CachedObjects, enforcer.Enforcer, Kernel]:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(k.url))
    source = await asyncio.to_thread(objects.KubernetesObjects, str(kubeconfig))
    cache = watchcache.CachedObjects(source)
    args = argparse.Namespace(policies=True, node_name="here")
    enforcing = command.policy_enforcer(args, cache, source.api)
    kernel = Kernel()
    enforcing.apply, enforcing.remove = kernel.apply, kernel.remove
    cache.start()
    enforcing.start([record()])
    return cache, enforcing, kernel


async def send(k: Emulator, method: str, path: str, body: Mapping[str, Any] | None = None) -> None:
    """A write as kubectl makes it, over HTTP: the emulator's watches hear it."""
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with k.clients[0].request(method, path, json=body, headers=headers) as resp:
        assert resp.status in (200, 201), await resp.text()


def lists_of(k: Emulator, path_suffix: str) -> list[Any]:
    return [r for r in list(k) if r.method == kmock.method.GET and str(r.url.path).endswith(path_suffix)
            and "watch" not in r.url.query]


async def test_policies_pods_and_namespaces_reach_the_local_pods_table_through_the_watches(
    cluster: Emulator, tmp_path: Path
) -> None:
    cache, enforcing, kernel = await started(cluster, tmp_path)
    try:
        await until(lambda: enforcing.state.ready and kernel.calls == ["remove"], "listed; the start's removal")
        # The NAD came through the watch cache's own watch: no second watch of the kind.
        assert len(lists_of(cluster, "/network-attachment-definitions")) == 1
        assert cache.mirrors[constants.NAD_KIND].listeners == [enforcing.state]
        await send(cluster, "POST", "/apis/k8s.cni.cncf.io/v1beta1/namespaces/db/multi-networkpolicies",
                   policy("from-web", {"podSelector": {"matchLabels": {"app": "db"}},
                                       "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "web"}}}]}]}))
        await until(lambda: NETNS in kernel.tables, "the policy isolates db-0")
        await send(cluster, "POST", "/api/v1/namespaces/web/pods",
                   pod("web-0", {"app": "web"}, ip="10.1.0.42", namespace="web"))
        await until(lambda: "web/web-0" in enforcing.state.pods, "the new peer pod")
        await enforcing.idle()
        assert "10.1.0.42" not in kernel.tables[NETNS]  # its namespace is not labelled team=web yet
        await send(cluster, "PATCH", "/api/v1/namespaces/web", {"metadata": {"labels": {"team": "web"}}})
        await until(lambda: "10.1.0.42" in kernel.tables.get(NETNS, ""), "the peer's address allowed")
        await send(cluster, "DELETE", "/apis/k8s.cni.cncf.io/v1beta1/namespaces/db/multi-networkpolicies/from-web")
        await until(lambda: NETNS not in kernel.tables, "the table removed with the last policy")
    finally:
        await enforcing.stop()
        await cache.close()


async def test_without_the_policy_crd_the_agent_enforces_nothing_and_says_so_once(
    no_policy_crd: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "bridge.agent")
    cache, enforcing, kernel = await started(no_policy_crd, tmp_path)
    try:
        await until(lambda: enforcing.state.ready, "every kind listed or found missing")
        await until(lambda: len(lists_of(no_policy_crd, "/multi-networkpolicies")) >= 3,
                    "the policies looked for again", timeout=15)
        said = [r.message for r in caplog.records if "not installed" in r.message]
        assert len(said) == 1 and "MultiNetworkPolicy" in said[0], said
        await until(lambda: kernel.calls == ["remove"], "the local pod has no table")
        assert enforcing.state.policies == {}
    finally:
        await enforcing.stop()
        await cache.close()
