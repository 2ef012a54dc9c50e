"""Tear-down always succeeds, whatever names an ADD was given.

Hostile interface names (through the KEP `interfaceName`, the NPWG `interface` key or the
runtime's CNI_IFNAME), pod names and container IDs go through the real shim to an agent
running the real bridge and host-local plugins in a network namespace the test made.
Whatever the ADD answers (a result, or a CNI error that is not the agent's catch-all), the
DEL that follows succeeds and leaves nothing: no interface in the namespace, no bridge port,
no host-local lease, no record. A lone surrogate such as "\\udfff" in an interface name
once made the ADD fail half-way with error 5 and every DEL after it fail the same way.

Also: a record an earlier agent left with such a name (an attachment never handed to a
plugin, after a real one) is torn down by a DEL.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bridge.agent.delegates.cache import Attachment
from tests.cni.agent_support import KEP_NETWORKS, NOTHING_LEFT, NPWG_NETWORKS, World, bridge_podnetwork

pytestmark = pytest.mark.cni

INTERNAL = {"internal agent error", "internal shim error"}

#: Names that broke a tear-down once, or sit just past a rule's edge.
HOSTILE_IFNAMES = [
    "\udfff", "\ud800", "net\udfff", "\udcff", "\udc80eth", "..", ".", "a/b", "a:b", "a b", "\xa0",
    "x" * 16, "é" * 8, "eth0", "net1", "",
]
HOSTILE_POD_NAMES = ["..", ".", "a/b", "web\udfff", "\udcff", "Web", "x" * 254, "web;K8S_POD_NAME=x", "web"]
HOSTILE_CONTAINER_IDS = [
    "../x", ".hidden", "a/b", "c\udfff", "\udcff", "-x", "a b", "x" * 250, "x" * 300, "ctr\nline", "ctr-ok",
]


def _text(max_size: int) -> st.SearchStrategy[str]:
    # Surrogates included (hypothesis leaves category Cs out unless asked).
    return st.text(st.characters(codec=None, categories=["L", "N", "P", "S", "Z", "Cc", "Cs"]), max_size=max_size)


ifnames = st.one_of(st.sampled_from(HOSTILE_IFNAMES), _text(17))
pod_names = st.one_of(st.sampled_from(HOSTILE_POD_NAMES), _text(20))
container_ids = st.one_of(st.sampled_from(HOSTILE_CONTAINER_IDS), _text(30).filter(bool))
routes = st.sampled_from(["kep", "npwg", "cni_ifname"])


def env_bytes(value: str) -> bytes:
    """What a runtime could put in the environment: any bytes but NUL (lone surrogates as the
    bytes UTF-16-minded code would write, which are not UTF-8)."""
    return value.encode("utf-8", "surrogatepass").replace(b"\0", b"")


class ThreadedWorld:
    """A World whose agent runs on an event loop in a thread, so hypothesis can drive it with
    plain (synchronous) examples: the shim is a subprocess, as under a runtime."""

    def __init__(self, bin_dirs: list[Path]) -> None:
        self.world = World(bin_dirs)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self.world.start_agent())
        world = self.world
        world.nad("blue", world.network("blue", 1))
        bridge_podnetwork(world, "blue", "blue")
        self.netns = world.make_netns()

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def shim(self, command: str, container_id: str, pod: str, ifname: str) -> tuple[int, Any]:
        world = self.world
        env: Mapping[bytes, bytes] = {
            b"PATH": os.environb.get(b"PATH", b"/usr/bin:/bin"),
            b"CNI_COMMAND": command.encode(),
            b"CNI_CONTAINERID": env_bytes(container_id),
            b"CNI_NETNS": self.netns.encode(),
            b"CNI_IFNAME": env_bytes(ifname),
            b"CNI_PATH": str(world.shim.parent).encode(),
            b"CNI_ARGS": b"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + env_bytes(pod),
        }
        proc = subprocess.run([str(world.shim)], input=json.dumps(world.runtime_conf()).encode(),
                              env=dict(env), capture_output=True, timeout=120)
        out = proc.stdout.decode("utf-8", "replace")
        return proc.returncode, json.loads(out) if out.strip() else None

    def close(self) -> None:
        try:
            self.call(self.world.cleanup())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@pytest.fixture(scope="module")
def hostile(cni_host: list[Path]) -> Iterator[ThreadedWorld]:
    w = ThreadedWorld(list(cni_host))
    try:
        yield w
    finally:
        w.close()


def annotations_for(route: str, ifname: str) -> dict[str, str]:
    if route == "kep":
        return {KEP_NETWORKS: json.dumps([{"podNetworkName": "default"},
                                          {"podNetworkName": "blue", "interfaceName": ifname}])}
    if route == "npwg":
        return {NPWG_NETWORKS: json.dumps([{"name": "blue", "interface": ifname}])}
    return {NPWG_NETWORKS: "blue"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=routes, ifname=ifnames, pod=pod_names, container_id=container_ids)
@example(route="kep", ifname="\udfff", pod="web", container_id="ctr-ok")
@example(route="npwg", ifname="\udfff", pod="web", container_id="ctr-ok")
@example(route="cni_ifname", ifname="\udfff", pod="web", container_id="ctr-ok")
@example(route="kep", ifname="net1", pod="web", container_id="ctr-ok")
def test_del_after_an_add_with_hostile_names_succeeds_and_leaves_nothing(
    hostile: ThreadedWorld, route: str, ifname: str, pod: str, container_id: str
) -> None:
    world = hostile.world
    world.pod("web", annotations_for(route, ifname))
    runtime_ifname = ifname if route == "cni_ifname" else "eth0"
    code, answer = hostile.shim("ADD", container_id, pod, runtime_ifname)
    if code != 0:
        assert isinstance(answer, dict) and isinstance(answer.get("code"), int), answer
        assert answer.get("msg") not in INTERNAL, answer

    code, answer = hostile.shim("DEL", container_id, pod, runtime_ifname)
    assert code == 0, f"the DEL failed: {answer}"
    assert world.leftovers() == NOTHING_LEFT


@pytest.fixture
async def world(cni_host: list[Path]) -> Any:
    w = World(list(cni_host))
    try:
        await w.start_agent()
        yield w
    finally:
        await w.cleanup()


async def test_del_of_a_record_an_earlier_agent_left_with_a_lone_surrogate_interface_succeeds(
    world: World,
) -> None:
    """An earlier agent accepted `interfaceName: "\\udfff"`: it recorded the intent, could not
    start the plugin with that name, and every DEL failed. Such a record still exists on nodes:
    eth0 really attached, then the intent no plugin ever saw. The DEL removes eth0 and its lease
    and drops the intent."""
    world.pod("web")
    netns = world.make_netns()
    added = await world.cni("ADD", "ctr-old", netns, "web")
    assert added.returncode == 0, added.stdout + added.stderr
    agent = world.agent
    assert agent is not None
    record = agent.cache.load("ctr-old")
    assert record is not None
    blue = world.network("blue", 1)
    record.attachments.append(Attachment(name="default/blue", ifname="\udfff", config=blue))
    record.complete = False
    agent.cache.save(record)

    deleted = await world.cni("DEL", "ctr-old", netns, "web")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert world.leftovers() == NOTHING_LEFT


async def test_an_add_naming_a_lone_surrogate_interface_attaches_nothing_with_it(world: World) -> None:
    """Each way the name can come: the runtime's CNI_IFNAME is CNI error 4; the KEP
    `interfaceName` fails the translation (105) naming the surrogate; an NPWG selection holding
    it is invalid and ignored, as NPWG 4.1.2.1 says, so the pod gets its default network only.
    No plugin ever sees the name, and DEL leaves nothing."""
    world.nad("blue", world.network("blue", 1))
    bridge_podnetwork(world, "blue", "blue")
    netns = world.make_netns()

    proc = await asyncio.create_subprocess_exec(
        str(world.shim), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        env={b"PATH": os.environb.get(b"PATH", b"/usr/bin:/bin"), b"CNI_COMMAND": b"ADD",
             b"CNI_CONTAINERID": b"ctr-s", b"CNI_NETNS": netns.encode(), b"CNI_IFNAME": env_bytes("\udfff"),
             b"CNI_ARGS": b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web"})
    out, _ = await proc.communicate(json.dumps(world.runtime_conf()).encode())
    answer = json.loads(out)
    assert proc.returncode == 1 and answer["code"] == 4 and answer["msg"] == "invalid interface name", answer
    assert "lone surrogate" in answer["details"], answer
    assert world.leftovers() == NOTHING_LEFT

    world.pod("web", annotations_for("kep", "\udfff"))
    added = await world.cni("ADD", "ctr-s", netns, "web")
    assert added.returncode == 1 and added.json["code"] == 105, added.stdout
    assert "lone surrogate U+DFFF" in added.json["details"], added.stdout
    assert world.leftovers() == NOTHING_LEFT

    world.pod("web", annotations_for("npwg", "\udfff"))
    added = await world.cni("ADD", "ctr-s", netns, "web")
    assert added.returncode == 0, added.stdout
    assert world.interfaces(netns) == ["eth0"]
    deleted = await world.cni("DEL", "ctr-s", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT
