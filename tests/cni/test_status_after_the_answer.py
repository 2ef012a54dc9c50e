"""network-status is written after the runtime has its answer, and never lost (NPWG 5); the last
write reports what the pod has, even when the ADD's write lands after the DEL.

The agent runs as deployed: its own `podnetwork cni-agent` process reading the pod
and its NAD over real HTTP from kmock's Kubernetes emulator (`tests.api.kube_emulator`),
which can make writes to a path answer 503. The runtime side is the shim, the
plugins are real, in a network namespace the test makes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from bridge.agent.delegates import cache
from tests.api.kube_emulator import Emulator, eventually, requests_to, write_kubeconfig
from tests.cni.agent_support import NOTHING_LEFT, NPWG_NETWORKS, NPWG_STATUS, World

pytestmark = pytest.mark.cni

RESOURCES = {
    "v1/pods": ("Pod", True),
    "k8s.cni.cncf.io/v1/network-attachment-definitions": ("NetworkAttachmentDefinition", True),
}


@pytest.fixture
async def cluster() -> AsyncIterator[Emulator]:
    async with Emulator() as k, kmock.Server(k):
        for resource, (kind, namespaced) in RESOURCES.items():
            k.resources[resource] = kmock.ResourceInfo(kind=kind, namespaced=namespaced, verbs={"get", "patch"})
        yield k


@pytest.fixture
async def world(cni_host: list[Path]) -> AsyncIterator[World]:
    w = World(cni_host)
    try:
        yield w
    finally:
        await w.cleanup()


def serve(k: Emulator, world: World) -> None:
    """The world's objects, in the emulator."""
    for kind, namespace, name in list(world.objects._store):
        obj = world.objects.get(kind, namespace, name)
        obj["metadata"]["resourceVersion"] = "1"
        resource = "v1/pods" if kind == "Pod" else "k8s.cni.cncf.io/v1/network-attachment-definitions"
        k.objects[resource, namespace, name] = obj


def start_agent(world: World, kubeconfig: Path) -> subprocess.Popen[bytes]:
    default_conf = world.root / "default.conflist"
    default_conf.write_text(json.dumps(world.default_network()))
    podnetwork = str(Path(sys.executable).with_name("podnetwork"))
    with open(world.root / "agent.log", "ab") as log:
        return subprocess.Popen(
            [podnetwork, "-v", "cni-agent", "--kubeconfig", str(kubeconfig), "--socket", str(world.socket),
             "--cache-dir", str(world.cache_dir), "--cni-conf-dir", str(world.root / "net.d"),
             "--default-network-conf", str(default_conf),
             "--cni-bin-dir", os.pathsep.join(map(str, world.bin_dirs))],
            stdout=subprocess.DEVNULL, stderr=log,
        )


async def wait_for_socket(world: World, process: subprocess.Popen[bytes]) -> None:
    """Until the agent accepts connections (its socket file exists from bind, before listen)."""
    async def accepting() -> bool:
        assert process.poll() is None, log_of(world)
        try:
            _, writer = await asyncio.open_unix_connection(str(world.socket))
        except OSError:
            return False
        writer.close()
        await writer.wait_closed()
        return True

    for _ in range(400):
        if await accepting():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the agent did not listen within 20 s")


def status(k: Emulator, pod: str) -> list[dict[str, Any]] | None:
    annotations = k.objects["v1/pods", "default", pod].raw["metadata"].get("annotations") or {}
    return json.loads(annotations[NPWG_STATUS]) if NPWG_STATUS in annotations else None


def written_status(k: Emulator, pod: str) -> list[dict[str, Any]]:
    """The pod's network-status; KeyError (which `eventually` retries) while there is none."""
    entries = status(k, pod)
    if entries is None:
        raise KeyError(NPWG_STATUS)
    return entries


def no_attachment(k: Emulator, pod: str) -> None:
    assert status(k, pod) == [], status(k, pod)


def log_of(world: World) -> str:
    path = world.root / "agent.log"
    return path.read_text() if path.exists() else ""


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()


async def test_the_agent_killed_after_answering_add_but_before_the_status_write_writes_it_after_a_restart(
    world: World, cluster: Emulator
) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("patient", {NPWG_NETWORKS: "blue"})
    serve(cluster, world)
    kubeconfig = write_kubeconfig(world.root / "kubeconfig", str(cluster.url))
    netns = world.make_netns()
    # The API refuses every write to the pod while the first agent lives.
    cluster.failures["/pods/patient"] = 1_000_000

    agent = start_agent(world, kubeconfig)
    try:
        await wait_for_socket(world, agent)
        added = await world.cni("ADD", "ctr-status", netns, "patient")
        assert added.returncode == 0, added.stderr + added.stdout
        assert "eth0" in [i["name"] for i in added.json["interfaces"]]
        assert world.interfaces(netns) == ["eth0", "net1"]
        # The agent answered, then tried (and is retrying) the write the API refuses.
        await eventually(lambda: requests_to(cluster, "PATCH", "/pods/patient"))
        assert status(cluster, "patient") is None
        record = cache.Cache(world.cache_dir).load("ctr-status")
        assert record is not None and record.complete and not record.status_published
        agent.send_signal(signal.SIGKILL)
        agent.wait()
    finally:
        stop(agent)

    cluster.failures.clear()
    assert status(cluster, "patient") is None, "nothing wrote it meanwhile"
    agent = start_agent(world, kubeconfig)
    try:
        await wait_for_socket(world, agent)
        written = await eventually(lambda: written_status(cluster, "patient"), timeout=20)
        assert [(e["name"], e["interface"], e["default"]) for e in written] == [
            ("kubenet", "eth0", True), ("default/blue", "net1", False)]
        assert written[1]["ips"] == world.addresses(netns, "net1")
        # Marked written in the record, so a third agent does not write it again.
        await eventually(lambda: cache.Cache(world.cache_dir).load("ctr-status").status_published,  # type: ignore[union-attr]
                         timeout=20)
        deleted = await world.cni("DEL", "ctr-status", netns, "patient")
        assert deleted.returncode == 0, deleted.stdout
        assert world.leftovers() == NOTHING_LEFT
    finally:
        stop(agent)


async def test_a_failing_api_delays_the_status_but_not_the_answer_and_the_write_is_retried_until_it_lands(
    world: World, cluster: Emulator
) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("waiting", {NPWG_NETWORKS: "blue"})
    serve(cluster, world)
    kubeconfig = write_kubeconfig(world.root / "kubeconfig", str(cluster.url))
    netns = world.make_netns()
    cluster.failures["/pods/waiting"] = 3  # three 503s, then the API takes writes again

    agent = start_agent(world, kubeconfig)
    try:
        await wait_for_socket(world, agent)
        added = await world.cni("ADD", "ctr-retry", netns, "waiting")
        assert added.returncode == 0, added.stdout
        written = await eventually(lambda: written_status(cluster, "waiting"), timeout=20)
        assert [e["interface"] for e in written] == ["eth0", "net1"]
        assert cluster.failures["/pods/waiting"] == 0, "every refusal was retried"
        assert len(requests_to(cluster, "PATCH", "/pods/waiting")) == 4
        await asyncio.to_thread(agent.send_signal, signal.SIGTERM)
        await asyncio.to_thread(agent.wait, 20)
        assert agent.returncode == 0
        # A restarted agent does not write the written status again; its DEL writes the pod's
        # status as it leaves it: no attachment.
        deleted_agent = start_agent(world, kubeconfig)
        try:
            await wait_for_socket(world, deleted_agent)
            deleted = await world.cni("DEL", "ctr-retry", netns, "waiting")
            assert deleted.returncode == 0, deleted.stdout
            await eventually(lambda: no_attachment(cluster, "waiting"), timeout=20)
        finally:
            stop(deleted_agent)
        assert len(requests_to(cluster, "PATCH", "/pods/waiting")) == 5
        assert world.leftovers() == NOTHING_LEFT
    finally:
        stop(agent)


async def test_a_del_while_the_adds_status_write_hangs_ends_with_the_dels_status_once_the_api_answers(
    world: World, cluster: Emulator
) -> None:
    """The API takes the ADD's write but answers only after the DEL: the pod then lists interfaces
    that are gone, until the DEL's own write, made after that one, says it has none."""
    world.nad("blue", world.network("blue", 1))
    world.pod("slow", {NPWG_NETWORKS: "blue"})
    serve(cluster, world)
    kubeconfig = write_kubeconfig(world.root / "kubeconfig", str(cluster.url))
    netns = world.make_netns()
    # The first write to the pod waits for a second one, which the agent sends only after the
    # first is answered: so it hangs for the hold's 3 s, then lands.
    held = cluster.hold("/pods/slow", writers=2, timeout=3)

    agent = start_agent(world, kubeconfig)
    try:
        await wait_for_socket(world, agent)
        added = await world.cni("ADD", "ctr-slow", netns, "slow")
        assert added.returncode == 0, added.stdout + added.stderr
        await eventually(lambda: held.arrived == 1)  # the ADD's status is on its way
        deleted = await world.cni("DEL", "ctr-slow", netns, "slow")
        assert deleted.returncode == 0, deleted.stdout
        assert world.leftovers() == NOTHING_LEFT
        assert status(cluster, "slow") is None, "the ADD's write is still unanswered"

        await eventually(lambda: no_attachment(cluster, "slow"), timeout=30)
        written = [json.loads(body["metadata"]["annotations"][NPWG_STATUS])
                   for body in requests_to(cluster, "PATCH", "/pods/slow")]
        assert [[e["interface"] for e in entries] for entries in written] == [["eth0", "net1"], []]
    finally:
        stop(agent)
