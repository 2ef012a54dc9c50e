"""Pods attached and detached by the CNI agent with real plugins in real network namespaces,
driven through the shim.

Each test executes the installed `multinetwork` shim exactly as a container runtime
does (CNI environment + configuration on stdin), the shim talks to the agent over
its unix socket, and the agent runs the real `bridge` and `host-local` plugins.
Afterwards nothing may be left: no interface in the pod netns, no veth on the
bridges, no host-local reservation, no cache record.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.delegates import invoke
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


@pytest.mark.parametrize("secondaries", [0, 1, 3])
async def test_add_check_del_through_the_shim_attach_the_default_network_and_each_selected_one(
    world: World, secondaries: int
) -> None:
    annotations: dict[str, str] = {}
    if secondaries == 1:
        world.nad("blue", world.network("blue", 1))
        annotations[NPWG_NETWORKS] = "blue"
    if secondaries == 3:
        # The pod's spec-style networks, through the bridge's translation; red takes the default route.
        for index, color in enumerate(("red", "green", "blue"), start=1):
            world.nad(color, world.network(color, index))
            bridge_podnetwork(world, color, color)
        annotations[KEP_NETWORKS] = json.dumps(
            [
                {"podNetworkName": "default"},
                {"podNetworkName": "red", "isDefaultGW4": True},
                {"podNetworkName": "green", "interfaceName": "data0"},
                {"podNetworkName": "blue"},
            ]
        )
    world.pod("web", annotations)
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr1", netns, "web")
    assert added.returncode == 0, added.stdout
    result = added.json
    sandbox = [i for i in result["interfaces"] if i.get("sandbox")]
    assert [i["name"] for i in sandbox] == ["eth0"], "the runtime gets the default network's result"

    expected_ifs = {0: ["eth0"], 1: ["eth0", "net1"], 3: ["data0", "eth0", "net1", "net2"]}[secondaries]
    assert world.interfaces(netns) == expected_ifs
    status = status_of(world, "web")
    assert [s["default"] for s in status] == [True] + [False] * secondaries
    assert status[0]["name"] == "kubenet" and status[0]["interface"] == "eth0"
    assert status[0]["ips"] == world.addresses(netns, "eth0")
    for entry in status[1:]:
        assert entry["ips"] == world.addresses(netns, entry["interface"])
    if secondaries == 3:
        assert [(s["name"], s["interface"]) for s in status[1:]] == [
            ("default/red", "net1"),
            ("default/green", "data0"),
            ("default/blue", "net2"),
        ]
        assert world.default_route_dev(netns) == ["net1"]
        assert status[1]["default-route"] == [world.subnet(1).replace(".0/24", ".1")]

    checked = await world.cni("CHECK", "ctr1", netns, "web")
    assert checked.returncode == 0, checked.stdout

    again = await world.cni("ADD", "ctr1", netns, "web")
    assert again.returncode == 0 and again.json == result, "ADD of an attached container returns the cached result"

    deleted = await world.cni("DEL", "ctr1", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert deleted.stdout == ""
    assert world.leftovers() == NOTHING_LEFT
    twice = await world.cni("DEL", "ctr1", netns, "web")
    assert twice.returncode == 0, "DEL of a torn-down container succeeds"


@pytest.mark.every_cni_version
async def test_every_supported_cni_version_attaches_reports_and_detaches(world: World, cni_version: str) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("web", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr-v", netns, "web")
    assert added.returncode == 0, added.stdout
    assert added.json["cniVersion"] == cni_version
    status = status_of(world, "web")
    assert [(s["interface"], s["ips"]) for s in status] == [
        ("eth0", world.addresses(netns, "eth0")),
        ("net1", world.addresses(netns, "net1")),
    ]
    checked = await world.cni("CHECK", "ctr-v", netns, "web")
    if invoke.version_tuple(cni_version) < (0, 4, 0):
        assert checked.returncode == 1 and checked.json["code"] == 1, f"{cni_version} has no CHECK"
    else:
        assert checked.returncode == 0, checked.stdout
    again = await world.cni("ADD", "ctr-v", netns, "web")
    assert again.returncode == 0 and again.json == added.json, "ADD of an attached container returns the cached result"
    assert (await world.cni("DEL", "ctr-v", netns, "web")).returncode == 0
    assert world.leftovers() == NOTHING_LEFT


@pytest.mark.every_cni_version(since="0.4.0")
async def test_check_reports_an_interface_that_vanished_and_del_still_cleans_up(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("web", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    assert (await world.cni("ADD", "ctr8", netns, "web")).returncode == 0
    run("ip", "-n", Path(netns).name, "link", "del", "net1")

    checked = await world.cni("CHECK", "ctr8", netns, "web")
    assert checked.returncode == 1 and "plugin bridge" in checked.json["msg"], checked.json
    assert (await world.cni("DEL", "ctr8", netns, "web")).returncode == 0
    assert world.leftovers() == NOTHING_LEFT


async def test_the_same_nad_selected_twice_gives_two_attachments_with_their_own_interface_and_ip(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("twice", {NPWG_NETWORKS: "blue,default/blue"})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr2", netns, "twice")
    assert added.returncode == 0, added.stdout
    assert world.interfaces(netns) == ["eth0", "net1", "net2"]
    net1, net2 = world.addresses(netns, "net1"), world.addresses(netns, "net2")
    assert len(net1) == len(net2) == 1 and net1 != net2
    status = status_of(world, "twice")
    assert [(s["name"], s["interface"]) for s in status] == [
        ("kubenet", "eth0"),
        ("default/blue", "net1"),
        ("default/blue", "net2"),
    ]

    assert (await world.cni("DEL", "ctr2", netns, "twice")).returncode == 0
    assert world.leftovers() == NOTHING_LEFT


@pytest.mark.every_cni_version
async def test_del_after_the_nad_and_the_pod_were_deleted_leaves_nothing(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("gone", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    assert (await world.cni("ADD", "ctr5", netns, "gone")).returncode == 0
    assert world.interfaces(netns) == ["eth0", "net1"]

    world.objects.delete("NetworkAttachmentDefinition", "default", "blue")
    world.objects.delete("Pod", "default", "gone")
    await world.stop_agent()  # and a fresh agent: only the on-disk cache remembers
    await world.start_agent()

    deleted = await world.cni("DEL", "ctr5", netns, "gone")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


async def test_twenty_pods_attach_concurrently_each_with_its_own_addresses(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    pods = [f"pod{i}" for i in range(20)]
    namespaces = {}
    for pod in pods:
        world.pod(pod, {NPWG_NETWORKS: "blue"})
        namespaces[pod] = world.make_netns()

    answers = await asyncio.gather(*(world.cni("ADD", f"ctr-{pod}", namespaces[pod], pod) for pod in pods))
    assert [a.returncode for a in answers] == [0] * 20, [a.stdout for a in answers if a.returncode]
    eth0 = [world.addresses(namespaces[p], "eth0")[0] for p in pods]
    net1 = [world.addresses(namespaces[p], "net1")[0] for p in pods]
    assert len(set(eth0)) == 20 and len(set(net1)) == 20
    assert len(world.reservations()) == 40

    answers = await asyncio.gather(*(world.cni("DEL", f"ctr-{pod}", namespaces[pod], pod) for pod in pods))
    assert [a.returncode for a in answers] == [0] * 20, [a.stdout for a in answers if a.returncode]
    assert world.leftovers() == NOTHING_LEFT



async def test_thirty_concurrent_adds_of_one_container_attach_it_once_and_all_answer_the_same_text(
    world: World,
) -> None:
    """NPWG 7.3: the agent serializes them; the first attaches, the others answer its recorded result,
    byte for byte (the real bridge plugin's keys are not in alphabetical order)."""
    world.nad("blue", world.network("blue", 1))
    world.pod("many", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()

    answers = await asyncio.gather(*(world.cni("ADD", "ctr-many", netns, "many") for _ in range(30)))
    assert [a.returncode for a in answers] == [0] * 30, [a.stdout for a in answers if a.returncode]
    texts = {a.stdout for a in answers}
    assert len(texts) == 1, texts
    assert world.interfaces(netns) == ["eth0", "net1"]
    assert len(world.reservations()) == 2, "an ADD attached the container again"
    (eth0,) = world.addresses(netns, "eth0")
    assert [ip["address"] for ip in answers[0].json["ips"]] == [eth0]

    deleted = await world.cni("DEL", "ctr-many", netns, "many")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT

def chained(world: World, name: str, index: int) -> dict[str, Any]:
    """bridge (+ host-local) followed by tuning, which needs the bridge's result as prevResult."""
    conf = world.network(name, index)
    conf["plugins"].append({"type": "tuning", "mtu": CHAINED_MTU, "dataDir": str(world.root / "tuning")})
    return conf


CHAINED_MTU = 1400


def mtu(netns: str, ifname: str) -> int:
    (link,) = json.loads(run("ip", "-n", Path(netns).name, "-j", "link", "show", "dev", ifname).stdout)
    return int(link["mtu"])


@pytest.mark.every_cni_version
async def test_a_chained_plugin_gets_the_previous_result_on_add_check_and_del(world: World, cni_version: str) -> None:
    # tuning refuses to run without a prevResult (ADD, CHECK) and restores what it changed
    # on DEL from the backup it keeps under its dataDir; the chain runs in reverse on DEL.
    world.nad("blue", chained(world, "blue", 1))
    world.pod("web", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr-chain", netns, "web")
    assert added.returncode == 0, added.stdout
    assert mtu(netns, "net1") == CHAINED_MTU, "tuning ran on the bridge's interface"
    assert [s["ips"] for s in status_of(world, "web")][1] == world.addresses(netns, "net1"), (
        "the chain's result is the bridge's, passed through tuning")
    if invoke.version_tuple(cni_version) >= (0, 4, 0):
        checked = await world.cni("CHECK", "ctr-chain", netns, "web")
        assert checked.returncode == 0, checked.stdout
        run("ip", "-n", Path(netns).name, "link", "set", "dev", "net1", "mtu", "1300")
        checked = await world.cni("CHECK", "ctr-chain", netns, "web")
        assert checked.returncode == 1 and "plugin tuning" in checked.json["msg"], checked.json

    deleted = await world.cni("DEL", "ctr-chain", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT
    assert sorted(p.name for p in (world.root / "tuning").rglob("*") if p.is_file()) == [], "tuning's DEL ran"


@pytest.mark.every_cni_version
async def test_gc_tears_down_with_real_plugins_the_containers_the_runtime_no_longer_lists(
    world: World, cni_version: str
) -> None:
    # GC exists only in CNI 1.1 requests; the delegates speak the version under test, and
    # the agent tears a stale container down with their DEL (and forwards GC to 1.1 ones).
    world.nad("blue", world.network("blue", 1))
    netns: dict[str, str] = {}
    for pod in ("kept", "stale"):
        world.pod(pod, {NPWG_NETWORKS: "blue"})
        netns[pod] = world.make_netns()
        assert (await world.cni("ADD", f"ctr-{pod}", netns[pod], pod)).returncode == 0
    assert len(world.reservations()) == 4

    gc = {**world.runtime_conf(), "cniVersion": "1.1.0",
          "cni.dev/valid-attachments": [{"containerID": "ctr-kept", "ifname": "eth0"}]}
    collected = await world.cni("GC", "", stdin=json.dumps(gc).encode())
    assert collected.returncode == 0 and collected.stdout == "", collected.stdout + collected.stderr

    assert world.interfaces(netns["stale"]) == []
    assert world.interfaces(netns["kept"]) == ["eth0", "net1"]
    assert world.cached() == ["ctr-kept.jsonl"]
    assert len(world.reservations()) == 2
    assert (await world.cni("DEL", "ctr-kept", netns["kept"], "kept")).returncode == 0
    assert world.leftovers() == NOTHING_LEFT
