"""A failure during ADD or DEL, with real plugins through the shim: what the runtime hears
and what is left afterwards.

A failed ADD rolls back what it attached and leaves nothing; an agent killed between
two delegate ADDs is told apart by the runtime (code 102) and a DEL after its restart
leaves nothing; an unreadable cache record fails one DEL, not all: the runtime sees a
CNI error naming where the file went, then its retry succeeds (CRI: tear-down must
eventually succeed). What that record described stays on the node (the agent can no
longer know it) and the test's cleanup removes it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Mapping
from typing import Any

import pytest

from bridge.agent.daemon import agent as agent_mod
from tests.cni.agent_support import NOTHING_LEFT, NPWG_NETWORKS, World, spawn_gated_agent, wait_for_socket

pytestmark = pytest.mark.cni


class Events:
    """The agent's Event sink, kept in a list."""

    def __init__(self) -> None:
        self.posted: list[Mapping[str, Any]] = []

    async def post_event(self, body: Mapping[str, Any]) -> None:
        self.posted.append(body)


@pytest.mark.every_cni_version
async def test_a_failing_second_delegate_rolls_back_the_first_and_leaves_nothing(world: World) -> None:
    # host-local refuses a rangeStart outside the subnet, after the bridge plugin made its veth.
    broken = world.network("broken", 1)
    broken["plugins"][0]["ipam"]["ranges"][0][0]["rangeStart"] = "192.0.2.10"
    world.nad("broken", broken)
    world.pod("unlucky", {NPWG_NETWORKS: "broken"})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr3", netns, "unlucky")
    assert added.returncode == 1
    error = added.json
    assert "default/broken" in error["msg"] and "RangeStart 192.0.2.10 not in network" in error["msg"]
    assert world.leftovers() == NOTHING_LEFT
    assert world.objects.patches == [], "no network-status for a pod whose set-up failed"


async def test_a_default_route_that_cannot_be_set_fails_the_add_and_leaves_nothing(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("lost", {NPWG_NETWORKS: json.dumps([{"name": "blue", "default-route": ["192.0.2.1"]}])})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr7", netns, "lost")
    assert added.returncode == 1
    assert added.json["msg"].startswith("moving the default route failed"), added.json
    assert world.leftovers() == NOTHING_LEFT


@pytest.mark.every_cni_version
async def test_the_agent_killed_between_two_delegate_adds_restarts_and_del_leaves_nothing(world: World) -> None:
    await world.stop_agent()
    world.nad("blue", world.network("blue", 1))
    world.pod("crashy", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    marker = world.root / "gated"
    process = spawn_gated_agent(world, "net1", marker)
    try:
        deadline = time.monotonic() + 20
        while not world.socket.exists():
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "the agent process did not open its socket"
            await asyncio.sleep(0.05)
        add = asyncio.create_task(world.cni("ADD", "ctr4", netns, "crashy"))
        while not marker.exists():
            assert time.monotonic() < deadline, "the second delegate ADD was never reached"
            assert not add.done(), (await add).stdout
            await asyncio.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        answer = await add
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stderr:
            process.stderr.close()

    assert answer.returncode == 1 and answer.json["code"] == 102, "the runtime hears the agent went away"
    assert world.interfaces(netns) == ["eth0"], "the first delegate had attached"
    record = json.loads((world.cache_dir / "ctr4.jsonl").read_text().splitlines()[-1])
    assert [(a["ifname"], a["state"]) for a in record["attachments"]] == [("eth0", "attached"), ("net1", "intent")]

    await world.start_agent()
    deleted = await world.cni("DEL", "ctr4", netns, "crashy")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


async def test_an_agent_killed_during_a_hot_plug_add_rolls_it_back_when_it_starts_again(world: World) -> None:
    """Hot-plug records the new attachment's intent in the complete record of a running pod, then
    runs its delegate. Killed there, the agent left a complete record with an unfinished intent,
    and CHECK failed forever (the plugin's error 999: it has no result to check against). The
    next agent rolls the intent back when it starts (its pod watch then attaches the network anew)."""
    await world.stop_agent()
    world.nad("blue", world.network("blue", 1))
    world.nad("red", world.network("red", 2))
    pod = world.pod("vm", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    marker, trigger = world.root / "gated", world.root / "hotplug.json"
    process = spawn_gated_agent(world, "net2", marker, hotplug_trigger=trigger)
    try:
        await wait_for_socket(world, process)
        added = await world.cni("ADD", "ctr-hp", netns, "vm")
        assert added.returncode == 0, added.stdout
        pod["metadata"]["annotations"] = {NPWG_NETWORKS: "blue,red"}  # red added to the running pod
        trigger.with_suffix(".tmp").write_text(json.dumps(pod))
        trigger.with_suffix(".tmp").rename(trigger)
        deadline = time.monotonic() + 20
        while not marker.exists():
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "the hot-plug's delegate ADD was never reached"
            await asyncio.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stderr:
            process.stderr.close()
    record = json.loads((world.cache_dir / "ctr-hp.jsonl").read_text().splitlines()[-1])
    assert record["complete"]
    assert [(a["ifname"], a["state"]) for a in record["attachments"]] == [
        ("eth0", "attached"), ("net1", "attached"), ("net2", "intent")]

    events = Events()
    await world.start_agent(events=events)
    checked = await world.cni("CHECK", "ctr-hp", netns, "vm")
    assert checked.returncode == 0, checked.stdout
    assert world.interfaces(netns) == ["eth0", "net1"]
    # The pod's owner is told, not only the node's log: a Warning on the pod, naming the network.
    for _ in range(100):
        if events.posted:
            break
        await asyncio.sleep(0.05)
    ((reason, type_, message, involved),) = [
        (e["reason"], e["type"], e["message"], e["involvedObject"]["name"]) for e in events.posted]
    assert (reason, type_, involved) == (agent_mod.REASON_ROLLED_BACK, "Warning", "vm")
    assert "attaching default/red as net2 was cut short by an agent restart and rolled back" in message
    record = json.loads((world.cache_dir / "ctr-hp.jsonl").read_text().splitlines()[-1])
    assert [(a["ifname"], a["state"]) for a in record["attachments"]] == [("eth0", "attached"), ("net1", "attached")]
    deleted = await world.cni("DEL", "ctr-hp", netns, "vm")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


async def test_a_damaged_record_fails_one_del_through_the_shim_and_the_retry_succeeds(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("web", {"k8s.v1.cni.cncf.io/networks": "blue"})
    netns = world.make_netns()
    assert (await world.cni("ADD", "ctr-dmg", netns, "web")).returncode == 0
    assert world.cached() == ["ctr-dmg.jsonl"]
    record = world.cache_dir / "ctr-dmg.jsonl"
    record.write_bytes(b"\x00" * 64 + b"\n")  # a damaged disk block

    first = await world.cni("DEL", "ctr-dmg", netns, "web")
    assert first.returncode == 1
    error = first.json
    assert error["code"] == 5
    aside = sorted(world.cache_dir.glob("ctr-dmg.jsonl.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == b"\x00" * 64 + b"\n"
    assert str(aside[0]) in error["details"]
    assert world.cached() == []

    second = await world.cni("DEL", "ctr-dmg", netns, "web")
    assert second.returncode == 0, second.stdout
    assert world.interfaces(netns) == ["eth0", "net1"], "nothing the record could not name was touched"
