"""The KEP's explicit list with real plugins (KEP-3698: "only the listed PodNetworks will be attached"):
a pod whose `multinetwork.x-k8s.io/networks` names only `blue` gets `blue` as eth0 and no cluster
default network, through the shim, the agent and the real bridge and host-local plugins in a
network namespace the test makes; blue is a bridge of the test with no route out of it, so no
packet of the pod can leave the machine (the pod has no default route at all).

Hot-plug runs in the agent's process (`hotplug.HotPlug.handle`, as its pod watch calls it), with
the NPWG selection written as the bridge writes it (`bridge.translate`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge import translate
from bridge.agent.daemon import hotplug
from bridge.agent.pods.addresswatch import Settings
from bridge.translate import podips
from podnetwork.ground.core import Pod
from tests.cni.agent_support import (
    KEP_NETWORKS,
    NOTHING_LEFT,
    NPWG_NETWORKS,
    World,
    bridge_podnetwork,
    run,
    status_of,
)

pytestmark = pytest.mark.cni


@pytest.fixture
async def world(cni_host: list[Path]) -> AsyncIterator[World]:
    w = World(cni_host)
    try:
        await w.start_agent(address_watch=Settings(quiet=0.2, max_delay=1.0, min_interval=1.0))
        yield w
    finally:
        await w.cleanup()


def networks(world: World, *names: str) -> None:
    """PodNetworks of the bridge provider, each on a bridge and /24 of the test (index 1, 2, ...)."""
    for index, name in enumerate(names, start=1):
        world.nad(name, world.network(name, index))
        bridge_podnetwork(world, name, name)


def translation(world: World, pod: str) -> translate.Translation:
    """The pod's networks translated as the bridge translates them, from the agent's objects."""
    annotations = world.objects.get("Pod", "default", pod)["metadata"]["annotations"]
    objs = [world.objects.get(kind, ns, name) for (kind, ns, name) in list(world.objects._store)
            if kind in ("PodNetwork", "NetworkAttachmentDefinition")]
    nets = translate.parse_networks(annotations[KEP_NETWORKS])
    return translate.translate(nets, "default", translate.Objects.from_objects(objs))


def set_networks(world: World, pod: str, names: list[str]) -> Pod:
    """The pod's KEP networks changed, and the bridge's NPWG selection written after them."""
    obj = world.objects.get("Pod", "default", pod)
    obj["metadata"]["annotations"][KEP_NETWORKS] = json.dumps([{"podNetworkName": n} for n in names])
    world.objects.put(obj)
    obj["metadata"]["annotations"][NPWG_NETWORKS] = translation(world, pod).annotation
    world.objects.put(obj)
    return Pod.model_validate(obj)


def subnet_prefix(world: World, index: int) -> str:
    return world.subnet(index).rsplit(".", 1)[0] + "."


async def until(what: str, check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.05)


async def test_a_pod_listing_only_blue_gets_blue_as_eth0_its_result_status_and_pod_ips_and_del_leaves_nothing(
    world: World,
) -> None:
    networks(world, "blue")
    world.pod("solo", {KEP_NETWORKS: json.dumps([{"podNetworkName": "blue"}])})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr-solo", netns, "solo")
    assert added.returncode == 0, added.stdout + added.stderr
    assert world.interfaces(netns) == ["eth0"], "blue alone, no cluster default network"
    (eth0_ip,) = world.addresses(netns, "eth0")
    assert eth0_ip.startswith(subnet_prefix(world, 1)), f"{eth0_ip} is blue's"
    assert [p.split("/")[0] for p in world.reservations()] == ["blue"], "kubenet reserved nothing"
    assert world.default_route_dev(netns) == [], "no route out of the pod: blue has none"

    result = added.json
    assert [ip["address"] for ip in result["ips"]] == [eth0_ip], "the runtime gets blue's result"
    assert [i["name"] for i in result["interfaces"] if i.get("sandbox")] == ["eth0"]

    status = status_of(world, "solo")
    assert [(e["name"], e["interface"], e["default"], e["ips"]) for e in status] == [
        ("default/blue", "eth0", True, [eth0_ip])]
    assert podips.pod_ips(status, translation(world, "solo"), "default") == [
        {"ip": eth0_ip.split("/")[0], "podNetwork": "blue", "interfaceName": "eth0"}]

    checked = await world.cni("CHECK", "ctr-solo", netns, "solo")
    assert checked.returncode == 0, checked.stdout

    # The address watch follows eth0 as blue's (KEP Req 25).
    agent = world.agent
    assert agent is not None
    await until("the watch's first look", lambda: agent.address_watch.looks("ctr-solo") >= 1)
    run("ip", "-n", Path(netns).name, "addr", "add", "2001:db8:5::9/64", "dev", "eth0", "nodad")
    await until("the new address in blue's entry", lambda: status_of(world, "solo")[0]["ips"] == [
        eth0_ip, "2001:db8:5::9/64"])

    deleted = await world.cni("DEL", "ctr-solo", netns, "solo")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


class Events:
    def __init__(self) -> None:
        self.posted: list[Mapping[str, Any]] = []

    async def post_event(self, body: Mapping[str, Any]) -> None:
        self.posted.append(body)


async def test_hot_plug_adds_a_second_network_to_a_blue_only_pod_refuses_to_remove_blue_and_del_leaves_nothing(
    world: World,
) -> None:
    networks(world, "blue", "red")
    world.pod("solo", {KEP_NETWORKS: json.dumps([{"podNetworkName": "blue"}])})
    netns = world.make_netns()
    added = await world.cni("ADD", "ctr-solo", netns, "solo")
    assert added.returncode == 0, added.stdout + added.stderr
    agent = world.agent
    assert agent is not None
    events = Events()
    hot = hotplug.HotPlug(agent, events, "node-a")

    (outcome,) = await hot.handle(set_networks(world, "solo", ["blue", "red"]))
    assert outcome.error is None, outcome.error
    assert outcome.change.describe() == "attach default/red as net1"
    assert world.interfaces(netns) == ["eth0", "net1"]
    assert world.addresses(netns, "net1")[0].startswith(subnet_prefix(world, 2))
    await agent.status.idle()
    assert [(e["name"], e["interface"], e["default"]) for e in status_of(world, "solo")] == [
        ("default/blue", "eth0", True), ("default/red", "net1", False)]
    before = {"interfaces": world.interfaces(netns), "reservations": world.reservations(),
              "status": status_of(world, "solo")}

    (refused,) = await hot.handle(set_networks(world, "solo", ["red"]))
    assert refused.error is not None and "default/blue holds the pod's eth0" in refused.error
    assert not refused.change
    await agent.status.idle()
    assert {"interfaces": world.interfaces(netns), "reservations": world.reservations(),
            "status": status_of(world, "solo")} == before, "the pod keeps blue, and red"
    assert [(e["reason"], e["type"]) for e in events.posted] == [
        (hotplug.REASON_CHANGED, "Normal"), (hotplug.REASON_FAILED, "Warning")]
    assert "cannot be removed or replaced on a running pod" in events.posted[1]["message"]

    deleted = await world.cni("DEL", "ctr-solo", netns, "solo")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT
