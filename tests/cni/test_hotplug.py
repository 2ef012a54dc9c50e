"""Hot-plug on a running pod (KEP Story #8, Req 24): `podnetwork cni-agent --node-name` as a
process, its pod watch and reads over real HTTP against kmock's emulator, the bridge controller
(kopf) writing the NPWG selection on the same emulator, the runtime's ADD and DEL through the
shim, and the real bridge, host-local and tuning plugins in a real network namespace.

A change of the pod's `multinetwork.x-k8s.io/networks` (sent to the emulator as kubectl
would send it) makes the bridge rewrite the selection and the agent attach or detach just
those networks in the pod's existing namespace and report them in network-status; a change
whose attach fails leaves the pod as it was (interfaces, addresses, status, record) and says
why in an Event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest

from bridge.agent.daemon import hotplug
from tests.api import bridge_api_support as bs
from tests.api.kube_emulator import write_kubeconfig
from tests.cni.agent_support import KEP_NETWORKS, NOTHING_LEFT, NPWG_NETWORKS, NPWG_STATUS, World

pytestmark = [pytest.mark.cni, pytest.mark.kmock(cls=bs.Emulator)]

NODE = "node-a"
NS = "default"
POD_URL = bs.POD_URL.format(ns=NS, name="vm")
UID = "uid-vm-1"
DEFAULT = {"podNetworkName": "default"}
BLUE = {"podNetworkName": "blue"}
RED = {"podNetworkName": "red", "interfaceName": "data0"}


def seed(k: kmock_lib.KubernetesEmulator, world: World, networks: dict[str, dict[str, Any]],
         nets: list[dict[str, Any]]) -> None:
    bs.declare_resources(k)
    for name, config in networks.items():
        nad = world.nad(name, config)
        nad["metadata"]["resourceVersion"] = "1"
        k.objects[bs.NAD, NS, name] = nad
        k.objects[bs.PN, None, name] = bs.podnetwork(name, nad=(NS, name))  # Ready, as the controller makes it
    k.objects[bs.PN, None, "default"] = bs.podnetwork("default", nad=None, provider="example.com/cluster")
    k.objects[bs.PODS, NS, "vm"] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "vm", "namespace": NS, "uid": UID, "resourceVersion": "1",
                     "annotations": {KEP_NETWORKS: json.dumps(nets)}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"}}


def pod(k: kmock_lib.KubernetesEmulator) -> dict[str, Any]:
    return json.loads(json.dumps(k.objects[bs.PODS, NS, "vm"].raw))


def status(k: kmock_lib.KubernetesEmulator) -> list[dict[str, Any]]:
    return json.loads(pod(k)["metadata"]["annotations"][NPWG_STATUS])


def events(k: kmock_lib.KubernetesEmulator) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(obj.raw)) for (resource, _, _), obj in k.objects.items()
            if resource == bs.EVENTS]


@contextlib.asynccontextmanager
async def agent_process(world: World, k: kmock_lib.KubernetesEmulator) -> AsyncIterator[asyncio.subprocess.Process]:
    """`podnetwork cni-agent` for node-a, reaching the emulator with a kubeconfig; SIGTERM on exit."""
    kubeconfig = write_kubeconfig(world.root / "kubeconfig", str(k.url), token="t0ken")
    default = world.root / "10-kubenet.conflist"
    default.write_text(json.dumps(world.default_network()))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podnetwork", "cni-agent", "--node-name", NODE, "--kubeconfig", str(kubeconfig),
        "--cni-bin-dir", ":".join(map(str, world.bin_dirs)), "--cni-conf-dir", str(world.root / "net.d"),
        "--cache-dir", str(world.cache_dir), "--socket", str(world.socket), "--default-network-conf", str(default),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not world.socket.exists():
            assert proc.returncode is None, "the agent exited before opening its socket"
            assert loop.time() < deadline, "the agent never opened its socket"
            await asyncio.sleep(0.05)
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = await asyncio.wait_for(proc.communicate(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise
            assert "Traceback" not in err.decode(), err.decode()


async def until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll `check` until it returns a truthy value (the agent works in its own process)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        with contextlib.suppress(AssertionError, KeyError, ValueError):
            last = check()
            if last:
                return last
        assert loop.time() < deadline, f"{what}: not seen in {timeout}s (last: {last!r})"
        await asyncio.sleep(0.1)


async def add(world: World, netns: str) -> None:
    env = {"CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={NS};K8S_POD_NAME=vm;K8S_POD_UID={UID}"}
    added = await world.cni("ADD", "ctr-hot", netns, "vm", env=env)
    assert added.returncode == 0, added.stdout + added.stderr


async def change_networks(k: kmock_lib.KubernetesEmulator, nets: list[dict[str, Any]]) -> None:
    await bs.call(k, "PATCH", POD_URL, {"metadata": {"annotations": {KEP_NETWORKS: json.dumps(nets)}}})


async def test_a_network_added_to_a_running_pod_is_attached_and_one_removed_is_detached(
    cni_host: list[Path], kmock: bs.Emulator
) -> None:
    world = World(cni_host)
    try:
        seed(kmock, world, {"blue": world.network("blue", 1), "red": world.network("red", 2)}, [DEFAULT, BLUE])
        netns = world.make_netns()
        async with bs.running(kmock), agent_process(world, kmock):
            await add(world, netns)
            assert world.interfaces(netns) == ["eth0", "net1"]
            blue_ips = world.addresses(netns, "net1")

            await change_networks(kmock, [DEFAULT, BLUE, RED])
            await until(lambda: world.interfaces(netns) == ["data0", "eth0", "net1"], "red attached as data0")
            entries = await until(lambda: len(status(kmock)) == 3 and status(kmock), "network-status with red")
            assert [(e["name"], e["interface"]) for e in entries] == [
                ("kubenet", "eth0"), ("default/blue", "net1"), ("default/red", "data0")]
            assert entries[2]["ips"] == world.addresses(netns, "data0")
            assert world.addresses(netns, "data0")[0].startswith(world.subnet(2).rsplit(".", 1)[0])
            assert world.addresses(netns, "net1") == blue_ips, "blue was left alone"
            # The address watch follows the hot-plugged interface too (Req 25 after Req 24).
            subprocess.run(["ip", "-n", Path(netns).name, "addr", "add", "2001:2::7/64", "dev", "data0", "nodad"],
                           check=True)
            await until(lambda: "2001:2::7/64" in status(kmock)[2]["ips"], "data0's new address in network-status")
            changed = await until(lambda: [e for e in events(kmock) if e["reason"] == hotplug.REASON_CHANGED],
                                  "a NetworksChanged Event")
            assert changed[0]["message"].startswith("attach default/red as data0")
            assert changed[0]["involvedObject"]["uid"] == UID and changed[0]["type"] == "Normal"

            await change_networks(kmock, [DEFAULT, RED])
            await until(lambda: world.interfaces(netns) == ["data0", "eth0"], "blue detached")
            await until(lambda: [e["interface"] for e in status(kmock)] == ["eth0", "data0"], "status without blue")
            assert [r.split("/")[0] for r in world.reservations()] == ["kubenet", "red"], world.reservations()

            deleted = await world.cni("DEL", "ctr-hot", netns, "vm")
            assert deleted.returncode == 0, deleted.stdout
        assert world.leftovers() == NOTHING_LEFT, "the DEL tore down the hot-plugged network too"
        # The agent lists and watches only its node's pods (the bridge's kopf watches all pods).
        selected = [r for r in list(kmock) if r.method == kmock_lib.method.GET
                    and str(r.url.path) == "/api/v1/pods" and "fieldSelector" in r.params]
        assert {bool(r.params.get("watch")) for r in selected} == {True, False}, "a list, then a watch"
        assert {r.params["fieldSelector"] for r in selected} == {f"spec.nodeName={NODE}"}
    finally:
        await world.cleanup()


async def test_a_failing_attach_is_rolled_back_leaving_the_pod_as_it_was_and_an_event_says_why(
    cni_host: list[Path], kmock: bs.Emulator
) -> None:
    world = World(cni_host)
    try:
        broken = world.network("broken", 3)
        # The bridge plugin attaches, then tuning fails on a sysctl the kernel does not have:
        # the second network of the change fails after the first was attached.
        broken["plugins"].append({"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.no_such_knob": "1"}})
        seed(kmock, world, {"blue": world.network("blue", 1), "green": world.network("green", 2),
                            "broken": broken}, [DEFAULT, BLUE])
        netns = world.make_netns()
        async with bs.running(kmock), agent_process(world, kmock):
            await add(world, netns)
            await until(lambda: NPWG_NETWORKS in pod(kmock)["metadata"]["annotations"], "the bridge's selection")
            # The agent writes the ADD's status after its answer, in its own process.
            await until(lambda: status(kmock), "the ADD's network-status")
            before = {"interfaces": world.interfaces(netns), "status": status(kmock),
                      "reservations": world.reservations(), "records": json.loads(
                          (world.cache_dir / "ctr-hot.jsonl").read_text().splitlines()[-1])["attachments"]}

            await change_networks(kmock, [DEFAULT, BLUE, {"podNetworkName": "green"},
                                          {"podNetworkName": "broken"}])
            failed = await until(lambda: [e for e in events(kmock) if e["reason"] == hotplug.REASON_FAILED],
                                 "a NetworksChangeFailed Event")
            message = failed[0]["message"]
            assert failed[0]["type"] == "Warning"
            assert message.startswith("attaching default/broken as net3 failed")
            assert "rolled back: the pod keeps its networks as they were" in message
            after = {"interfaces": world.interfaces(netns), "status": status(kmock),
                     "reservations": world.reservations(), "records": json.loads(
                         (world.cache_dir / "ctr-hot.jsonl").read_text().splitlines()[-1])["attachments"]}
            assert after == before, "green, attached first, was detached again; nothing else changed"
            assert not [e for e in events(kmock) if e["reason"] == hotplug.REASON_CHANGED]

            deleted = await world.cni("DEL", "ctr-hot", netns, "vm")
            assert deleted.returncode == 0, deleted.stdout
        assert world.leftovers() == NOTHING_LEFT
    finally:
        await world.cleanup()


async def test_an_attachment_replaced_after_admission_is_not_hot_plugged_and_an_event_says_why(
    cni_host: list[Path], kmock: bs.Emulator
) -> None:
    # Admission recorded `fast` naming `green` (which the pod may use, docs/controller.md "An
    # attachment is held to what admission checked"); `fast` was then deleted and re-created naming
    # `red`. The agent resolves the attachment again at hot-plug, and must not attach red.
    world = World(cni_host)
    try:
        seed(kmock, world, {"blue": world.network("blue", 1), "red": world.network("red", 2),
                            "green": world.network("green", 3)}, [DEFAULT, BLUE])
        swapped = bs.attachment("fast", "red", [], ns=NS)
        swapped["status"] = {"conditions": [bs.ready_condition()]}
        kmock.objects[bs.PNA, NS, "fast"] = swapped
        netns = world.make_netns()
        async with bs.running(kmock), agent_process(world, kmock):
            await add(world, netns)
            before = {"interfaces": world.interfaces(netns), "reservations": world.reservations()}
            nets = [DEFAULT, BLUE, {"podNetworkAttachmentName": "fast"}]
            await bs.call(kmock, "PATCH", POD_URL, {"metadata": {"annotations": {
                KEP_NETWORKS: json.dumps(nets), "multinetwork.x-k8s.io/attachment-networks": '{"fast":"green"}'}}})
            failed = await until(lambda: [e for e in events(kmock) if e["reason"] == hotplug.REASON_FAILED],
                                 "a NetworksChangeFailed Event")
            message = failed[0]["message"]
            assert message.startswith("the pod's networks cannot be changed: ")
            assert ("PodNetworkAttachment default/fast names PodNetwork 'red', but the pod was admitted with it "
                    "naming 'green'") in message
            await asyncio.sleep(1.0)
            assert {"interfaces": world.interfaces(netns), "reservations": world.reservations()} == before
            assert "red" not in json.dumps(status(kmock))
            deleted = await world.cni("DEL", "ctr-hot", netns, "vm")
            assert deleted.returncode == 0, deleted.stdout
        assert world.leftovers() == NOTHING_LEFT
    finally:
        await world.cleanup()
