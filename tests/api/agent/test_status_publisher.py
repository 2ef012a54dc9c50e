"""The agent's network-status publisher (`bridge.agent.pods.publisher`) through `KubernetesObjects`
against kmock's Kubernetes emulator over real HTTP, made to refuse a patch naming another
pod's `metadata.uid` as kube-apiserver does (`tests/api/kube_emulator.py`).

A status reports on one pod: a pod deleted and re-created under its name (while the API
was down, or before a restarted agent republished what was pending) never gets the old
container's IPs. And a DEL cancels its container's write, the one in flight included: a
write that fails after the DEL is not retried, one that lands is not recorded as done, and
the DEL's own status (`[]`, or the pod's other container's) is written after it, so the last
write reports what the pod has.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from bridge import npwg
from bridge.agent.daemon import agent
from bridge.agent.delegates.invoke import CNIError
from bridge.agent.kube import objects
from bridge.agent.pods.publisher import StatusPublisher
from tests.api.kube_emulator import Emulator, write_kubeconfig

PODS = "v1/pods"
POD_PATH = "/api/v1/namespaces/ns/pods/web"
OLD = [{"name": "kubenet", "interface": "eth0", "ips": ["10.1.0.5"], "default": True}]


class HoldingEmulator(Emulator):
    """The emulator, whose pod patches wait while `hold` is set: the test decides when a write
    that is on its way gets its answer, and which (`answer`, an HTTP status; 0: as the emulator
    answers)."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.hold: asyncio.Event | None = None
        self.held = asyncio.Event()
        self.answer = 0

    async def _handle(self, request: Any) -> Any:
        if request.method.value == "PATCH" and str(request.url.path) == POD_PATH and self.hold is not None:
            hold, answer = self.hold, self.answer  # as they were when the request arrived
            self.held.set()
            await hold.wait()
            if answer:
                raise kmock.KubernetesError(status=answer, reason="ServiceUnavailable", message="try again")
        return await super()._handle(request)


def pod(uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "ns", "uid": uid, "resourceVersion": "1"}}


@pytest.fixture
async def cluster() -> AsyncIterator[HoldingEmulator]:
    async with HoldingEmulator() as k, kmock.Server(k):
        k.resources[PODS] = kmock.ResourceInfo(kind="Pod", namespaced=True, verbs={"get", "patch"})
        k.objects[PODS, "ns", "web"] = pod("uid-1")
        yield k


@pytest.fixture
async def source(cluster: HoldingEmulator, tmp_path: Path) -> AsyncIterator[objects.KubernetesObjects]:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(cluster.url))
    src = await asyncio.to_thread(objects.KubernetesObjects, str(kubeconfig))
    try:
        yield src
    finally:
        await src.close()


def stored_status(cluster: Emulator) -> Any:
    annotations = json.loads(json.dumps(cluster.objects[PODS, "ns", "web"].raw))["metadata"].get("annotations") or {}
    text = annotations.get(npwg.NETWORK_STATUS_ANNOTATION)
    return json.loads(text) if text is not None else None


def patches(cluster: Emulator) -> list[Any]:
    return [r.data for r in list(cluster) if r.method == kmock.method.PATCH and str(r.url.path) == POD_PATH]


async def until(condition: Any, what: str) -> None:
    for _ in range(400):
        if condition():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"not within 10 s: {what}")


async def test_a_write_lands_on_the_pod_of_its_uid(cluster: HoldingEmulator, source: objects.KubernetesObjects) -> None:
    publisher = StatusPublisher(source.patch_pod_annotations)
    publisher.publish("ns", "web", OLD, owner="c1", uid="uid-1")
    await asyncio.wait_for(publisher.idle(), 10)
    assert stored_status(cluster) == OLD
    (sent,) = patches(cluster)
    assert sent["metadata"]["uid"] == "uid-1"


async def test_a_pod_re_created_under_its_name_during_an_outage_never_gets_the_old_status(
    cluster: HoldingEmulator, source: objects.KubernetesObjects
) -> None:
    cluster.failures["/pods/web"] = 1000  # the API is down for writes
    publisher = StatusPublisher(source.patch_pod_annotations, retry_first=0.02, retry_max=0.05)
    publisher.publish("ns", "web", OLD, owner="c1", uid="uid-1")
    await until(lambda: publisher.failed >= 1, "a failed write")

    del cluster.objects[PODS, "ns", "web"]
    cluster.objects[PODS, "ns", "web"] = pod("uid-2")  # the same name, another pod
    cluster.failures["/pods/web"] = 0  # the API is back

    await asyncio.wait_for(publisher.idle(), 10)
    assert stored_status(cluster) is None, "the new pod carries the old container's IPs"
    assert publisher.written == 0 and publisher.pending == 0


async def test_a_restarted_agent_does_not_republish_onto_a_re_created_pod(
    cluster: HoldingEmulator, source: objects.KubernetesObjects, tmp_path: Path
) -> None:
    """The agent died after the ADD's answer and before its status write; the pod was deleted
    and re-created under its name before the runtime's DEL reached the restarted agent."""
    cluster.objects[PODS, "ns", "web"] = pod("uid-2")
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
              "ips": [{"address": "10.1.0.5/24", "interface": 0}]}
    attachment = {"name": "kubenet", "ifname": "eth0", "config": {"cniVersion": "1.0.0", "name": "kubenet",
                                                                   "type": "bridge"},
                  "default": True, "state": "attached", "result": result}
    (tmp_path / "cache").mkdir()
    for container_id, extra in (("c-new", {"pod_uid": "uid-1"}),
                                # An earlier agent's record: no pod_uid, the runtime's K8S_POD_UID.
                                ("c-old", {"cni_args": [["K8S_POD_UID", "uid-1"]]}),
                                # Neither: the runtime passed no K8S_POD_UID to an agent that kept
                                # no UID. Written by the pod's name, it would land on the new pod.
                                ("c-oldest", {})):
        record = {"container_id": container_id, "netns": "/var/run/netns/x", "ifname": "eth0", "cni_args": [],
                  "pod_namespace": "ns", "pod_name": "web", "complete": True, "result": result,
                  "attachments": [attachment], "status_published": False, "format": 1, **extra}
        (tmp_path / "cache" / f"{container_id}.jsonl").write_text(json.dumps(record) + "\n")
    a = agent.Agent(source, agent.AgentConfig(socket_path=tmp_path / "s.sock", cache_dir=tmp_path / "cache",
                                               watch_addresses=False))
    await a.start()
    try:
        await asyncio.wait_for(a.status.idle(), 10)
    finally:
        await a.stop()
    assert len(patches(cluster)) >= 1, "the pending write was attempted"
    assert all(p["metadata"].get("uid") == "uid-1" for p in patches(cluster)), "a write by the pod's name only"
    assert stored_status(cluster) is None, "the re-created pod carries the old container's IPs"


async def test_a_del_cancels_its_containers_write_in_flight_which_then_fails_and_is_not_retried(
    cluster: HoldingEmulator, source: objects.KubernetesObjects
) -> None:
    publisher = StatusPublisher(source.patch_pod_annotations, retry_first=0.02, retry_max=0.05)
    written: list[str] = []

    async def on_written() -> None:
        written.append("c1")

    cluster.hold, cluster.answer = asyncio.Event(), 503
    publisher.publish("ns", "web", OLD, owner="c1", on_written=on_written)
    await asyncio.wait_for(cluster.held.wait(), 10)  # the write is on its way

    assert not publisher.cancel("ns", "web", owner="c2"), "another container's DEL leaves it"
    assert publisher.cancel("ns", "web", owner="c1")  # its container's DEL
    hold = cluster.hold
    cluster.hold, cluster.answer = None, 0  # a retry would land
    hold.set()  # the write in flight gets its 503

    await asyncio.wait_for(publisher.idle(), 10)
    assert len(patches(cluster)) == 1, "the write was retried after its container's DEL"
    assert stored_status(cluster) is None and written == [] and publisher.failed == 1


async def test_a_write_in_flight_that_lands_after_its_containers_del_is_not_recorded_as_written(
    cluster: HoldingEmulator, source: objects.KubernetesObjects
) -> None:
    publisher = StatusPublisher(source.patch_pod_annotations)
    written: list[str] = []

    async def on_written() -> None:
        written.append("c1")

    cluster.hold = asyncio.Event()
    publisher.publish("ns", "web", OLD, owner="c1", on_written=on_written)
    await asyncio.wait_for(cluster.held.wait(), 10)
    assert publisher.cancel("ns", "web", owner="c1")
    hold, cluster.hold = cluster.hold, None
    hold.set()
    await asyncio.wait_for(publisher.idle(), 10)
    assert written == [], "a write its DEL cancelled was recorded as done"


def plugin_result(netns: str, address: str) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": netns}],
            "ips": [{"address": address, "interface": 0}]}


class Plugin:
    """The default network's plugin: each container gets its own address (10.1.0.<n>/24); the ADD
    of a container whose ID starts with "fail" fails."""

    def __init__(self) -> None:
        self.addresses: dict[str, str] = {}

    async def run(self, plugin: Path, env: Any, stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        if env["CNI_COMMAND"] != "ADD":
            return 0, b"", b""
        if env["CNI_CONTAINERID"].startswith("fail"):
            return 1, b'{"cniVersion": "1.0.0", "code": 11, "msg": "no address left"}', b""
        address = self.addresses.setdefault(env["CNI_CONTAINERID"], f"10.1.0.{len(self.addresses) + 5}/24")
        return 0, json.dumps(plugin_result(env["CNI_NETNS"], address)).encode(), b""


def cni_env(command: str, container_id: str, uid: str = "uid-1") -> dict[str, str]:
    return {"CNI_COMMAND": command, "CNI_CONTAINERID": container_id, "CNI_NETNS": f"/var/run/netns/{container_id}",
            "CNI_IFNAME": "eth0", "CNI_ARGS": f"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web;K8S_POD_UID={uid}"}


@pytest.fixture
async def node_agent(source: objects.KubernetesObjects, tmp_path: Path) -> AsyncIterator[agent.Agent]:
    """An agent on the emulator, its default network's plugin `Plugin` (no namespace to watch)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bridge").write_text("#!/bin/sh\n")
    (bin_dir / "bridge").chmod(0o755)
    config = agent.AgentConfig(socket_path=tmp_path / "s.sock", cache_dir=tmp_path / "cache", bin_dirs=(bin_dir,),
                               default_network={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"},
                               watch_addresses=False)
    a = agent.Agent(source, config, executor=Plugin())
    await a.start()
    try:
        yield a
    finally:
        await a.stop()


CONF = b'{"cniVersion": "1.0.0", "name": "multinetwork", "type": "multinetwork"}'


async def test_an_adds_write_that_lands_after_its_containers_del_is_followed_by_the_dels_empty_status(
    cluster: HoldingEmulator, node_agent: agent.Agent
) -> None:
    """The ADD's write is on its way when the DEL comes; the API then heals and takes it, so the
    pod lists the interface the DEL removed, until the DEL's own write (`[]`) lands after it."""
    cluster.hold = asyncio.Event()
    added = await node_agent.handle(cni_env("ADD", "c1"), CONF)
    assert added is not None and added["ips"][0]["address"] == "10.1.0.5/24"
    await asyncio.wait_for(cluster.held.wait(), 10)  # the ADD's status is on its way

    assert await node_agent.handle(cni_env("DEL", "c1"), CONF) is None
    hold, cluster.hold = cluster.hold, None
    hold.set()  # the API heals: the write in flight lands
    await asyncio.wait_for(node_agent.status.idle(), 10)

    sent = [p["metadata"]["annotations"][npwg.NETWORK_STATUS_ANNOTATION] for p in patches(cluster)]
    assert [json.loads(text) and json.loads(text)[0]["ips"] for text in sent] == [["10.1.0.5/24"], []]
    assert stored_status(cluster) == [], "the pod still lists the interfaces its DEL removed"
    assert all(p["metadata"]["uid"] == "uid-1" for p in patches(cluster))


async def test_the_del_of_a_pods_old_container_after_its_new_one_was_added_leaves_the_new_ones_status(
    cluster: HoldingEmulator, node_agent: agent.Agent
) -> None:
    """The pod's sandbox was re-created, and the old one's DEL came after the new one's ADD (its
    first DEL failed): the pod's status after that DEL is the new container's, not `[]`."""
    await node_agent.handle(cni_env("ADD", "c-old"), CONF)
    await asyncio.wait_for(node_agent.status.idle(), 10)
    cluster.hold = asyncio.Event()
    await node_agent.handle(cni_env("ADD", "c-new"), CONF)
    await asyncio.wait_for(cluster.held.wait(), 10)  # the new container's status is on its way

    await node_agent.handle(cni_env("DEL", "c-old"), CONF)
    hold, cluster.hold = cluster.hold, None
    hold.set()
    await asyncio.wait_for(node_agent.status.idle(), 10)
    (entry,) = stored_status(cluster)
    assert entry["ips"] == ["10.1.0.6/24"], "the old container's DEL took the new container's status away"

    await node_agent.handle(cni_env("DEL", "c-new"), CONF)
    await asyncio.wait_for(node_agent.status.idle(), 10)
    assert stored_status(cluster) == []


async def test_a_del_of_a_container_whose_add_failed_writes_no_status(
    cluster: HoldingEmulator, node_agent: agent.Agent
) -> None:
    """Only a container whose status was queued has one to withdraw: a pod whose attachment failed
    is not marked attached (the bridge reads the annotation's presence so)."""
    with pytest.raises(CNIError, match="no address left"):
        await node_agent.handle(cni_env("ADD", "fail-1"), CONF)
    assert await node_agent.handle(cni_env("DEL", "fail-1"), CONF) is None
    await asyncio.wait_for(node_agent.status.idle(), 10)
    assert patches(cluster) == [] and stored_status(cluster) is None
