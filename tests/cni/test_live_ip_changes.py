"""Live IP changes (KEP Story 9, Req 25): addresses added to and removed from an attached
interface inside the pod's namespace show in the pod's network-status.

The pod is attached through the real shim and plugins (bridge, host-local) in a network
namespace the test makes; addresses are changed with `ip` inside that namespace, as a
workload or SLAAC would. The agent's status writes are counted where they land, in the
object source the agent patches (`MemoryObjects.patches`). Waits poll the status with a
generous deadline; no test asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.delegates.cache import Attachment, State
from bridge.agent.pods.addresswatch import IFA_F_TENTATIVE, Settings
from tests.cni.agent_support import NPWG_NETWORKS, NPWG_STATUS, World, run, status_of

pytestmark = pytest.mark.cni

#: Short waits, so a test sees a change soon; the rate bound is what the burst test counts.
FAST = Settings(quiet=0.2, max_delay=1.0, min_interval=1.0)
DEADLINE = 30.0


@pytest.fixture
async def world(cni_host: list[Path]) -> AsyncIterator[World]:
    w = World(cni_host)
    try:
        await w.start_agent(address_watch=FAST)
        yield w
    finally:
        await w.cleanup()


def eth0_ips(world: World, pod: str) -> list[str]:
    entry = next(e for e in status_of(world, pod) if e.get("interface") == "eth0")
    ips: list[str] = entry.get("ips") or []
    return ips


async def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.05)


def status_writes(world: World, pod: str) -> list[dict[str, Any]]:
    return [p for p in world.objects.patches if p[1] == pod and NPWG_STATUS in p[2]]


async def attached(
    world: World, pod: str = "web", container: str = "ctr-live", annotations: dict[str, str] | None = None
) -> str:
    world.pod(pod, annotations)
    netns = world.make_netns()
    added = await world.cni("ADD", container, netns, pod)
    assert added.returncode == 0, added.stdout + added.stderr
    agent = world.agent
    assert agent is not None
    if agent.config.watch_addresses:
        # The watch opens its socket after the ADD; changes made before its first look would
        # reach the status through that look, not through the events this file is about.
        await until("the watch's first look", lambda: agent.address_watch.looks(container) >= 1)
    return netns


def ip_in(netns: str, *argv: str) -> None:
    run("ip", "-n", Path(netns).name, *argv)


async def test_an_address_added_in_the_pod_joins_the_status_and_leaves_it_when_removed(world: World) -> None:
    netns = await attached(world)
    assigned = eth0_ips(world, "web")
    assert len(assigned) == 1 and ipaddress.ip_interface(assigned[0]).version == 4

    ip_in(netns, "addr", "add", "2001:db8:7::5/64", "dev", "eth0", "nodad")
    await until("2001:db8:7::5 in the status", lambda: "2001:db8:7::5/64" in eth0_ips(world, "web"))
    ips = eth0_ips(world, "web")
    assert ips[0] == assigned[0], "the address the plugin gave stays first (the pod IP of its family)"
    # The interface's own fe80:: address is there too, and never reported (not a pod IP).
    assert any(a.startswith("fe80:") for a in _kernel_v6(netns, "eth0"))
    assert not any(ipaddress.ip_interface(a).ip.is_link_local for a in ips), ips

    ip_in(netns, "addr", "del", "2001:db8:7::5/64", "dev", "eth0")
    await until("2001:db8:7::5 gone from the status", lambda: eth0_ips(world, "web") == assigned)

    # DEL stops the watch before the interfaces go: their removal writes nothing; the only write
    # after it is the DEL's own (the pod has no attachment now).
    writes = len(status_writes(world, "web"))
    assert world.agent is not None and world.agent.address_watch.watched() == ["ctr-live"]
    deleted = await world.cni("DEL", "ctr-live", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.agent.address_watch.watched() == []
    assert [p[2][NPWG_STATUS] for p in status_writes(world, "web")[writes:]] == ["[]"]


async def test_a_burst_of_address_changes_is_written_a_bounded_number_of_times(world: World) -> None:
    netns = await attached(world)
    before = len(status_writes(world, "web"))
    burst = [f"2001:db8:9::{i:x}/64" for i in range(1, 41)]
    started = time.monotonic()
    for address in burst:  # one `ip` each: the burst lasts while 40 processes run, one after another
        proc = await asyncio.create_subprocess_exec("ip", "-n", Path(netns).name, "addr", "add", address,
                                                    "dev", "eth0", "nodad")
        assert await proc.wait() == 0
    await until("every address of the burst in the status", lambda: set(burst) <= set(eth0_ips(world, "web")))
    window = time.monotonic() - started

    writes = len(status_writes(world, "web")) - before
    # One look (and so at most one write) per min_interval, plus the one that ends the window:
    # a slower machine widens the window and so the bound, never the other way round.
    assert 1 <= writes <= 1 + int(window / FAST.min_interval), (writes, window)
    assert writes < len(burst), "40 kernel events must not be 40 writes"


async def test_an_agent_that_starts_again_watches_the_pods_it_recorded(world: World) -> None:
    netns = await attached(world)
    await world.stop_agent()
    ip_in(netns, "addr", "add", "2001:db8:8::7/64", "dev", "eth0", "nodad")  # while no agent runs
    agent = await world.start_agent(address_watch=FAST)
    assert agent.address_watch.watched() == ["ctr-live"]
    await until("the change made while no agent ran", lambda: "2001:db8:8::7/64" in eth0_ips(world, "web"))

    ip_in(netns, "addr", "del", "2001:db8:8::7/64", "dev", "eth0")
    await until("2001:db8:8::7 gone", lambda: "2001:db8:8::7/64" not in eth0_ips(world, "web"))
    deleted = await world.cni("DEL", "ctr-live", netns, "web")
    assert deleted.returncode == 0, deleted.stdout


async def test_a_watch_whose_pod_s_attachments_changed_does_not_write_the_old_shape(world: World) -> None:
    """As after a hot-plug: the record gains an attachment while the watch runs on the old one.
    The next look must not write a status without it; the watch starts over from the record."""
    netns = await attached(world)
    agent = world.agent
    assert agent is not None
    record = agent.cache.load("ctr-live")
    assert record is not None
    extra = Attachment(name="default/extra", ifname="net9", config=record.attachments[0].config,
                       state=State.ATTACHED, result=None)
    record.attachments.append(extra)
    agent.cache.save(record)

    ip_in(netns, "addr", "add", "2001:db8:5::3/64", "dev", "eth0", "nodad")
    await until("the address in a status that lists both attachments",
                lambda: "2001:db8:5::3/64" in eth0_ips(world, "web") and len(status_of(world, "web")) == 2)
    assert all(len(json.loads(p[2][NPWG_STATUS])) == 2 for p in status_writes(world, "web")[1:]), (
        "no write after the ADD's lacks the new attachment"
    )
    deleted = await world.cni("DEL", "ctr-live", netns, "web")
    assert deleted.returncode == 0, deleted.stdout


async def test_a_renamed_interface_is_no_longer_the_attached_one(world: World) -> None:
    """The watch learns interface names again after a link change: an address on eth0 renamed
    to eth9 is not eth0's. net1 (a second attachment) marks when a look saw the rename."""
    world.nad("blue", world.network("blue", 1))
    netns = await attached(world, annotations={NPWG_NETWORKS: "blue"})
    assigned = eth0_ips(world, "web")
    name = Path(netns).name
    script = "link set eth0 down\nlink set eth0 name eth9\nlink set eth9 up\naddr add 2001:db8:4::9/64 dev eth9 nodad\n"
    proc = await asyncio.create_subprocess_exec("ip", "-n", name, "-batch", "-", stdin=asyncio.subprocess.PIPE)
    await proc.communicate(script.encode())
    assert proc.returncode == 0
    ip_in(netns, "addr", "add", "2001:db8:3::1/64", "dev", "net1", "nodad")

    def net1_ips() -> list[str]:
        entry = next(e for e in status_of(world, "web") if e.get("interface") == "net1")
        return list(entry.get("ips") or [])

    await until("the marker on net1", lambda: "2001:db8:3::1/64" in net1_ips())
    assert eth0_ips(world, "web") == assigned, "eth0 is gone: its entry keeps what its plugin reported"
    assert not any("2001:db8:4::9/64" in p[2][NPWG_STATUS] for p in status_writes(world, "web"))
    # Named eth0 again, so the DEL tears down what the ADD made.
    ip_in(netns, "link", "set", "eth9", "down")
    ip_in(netns, "link", "set", "eth9", "name", "eth0")
    deleted = await world.cni("DEL", "ctr-live", netns, "web")
    assert deleted.returncode == 0, deleted.stdout


async def test_with_the_watch_turned_off_no_pod_is_watched(world: World) -> None:
    await world.stop_agent()
    agent = await world.start_agent(address_watch=FAST, watch_addresses=False)
    netns = await attached(world)
    assert agent.address_watch.watched() == []
    assert len(status_writes(world, "web")) == 1, "the ADD's status only"
    deleted = await world.cni("DEL", "ctr-live", netns, "web")
    assert deleted.returncode == 0, deleted.stdout


def _kernel_v6(netns: str, ifname: str) -> list[str]:
    data = json.loads(run("ip", "-n", Path(netns).name, "-j", "-6", "addr", "show", "dev", ifname).stdout or "[]")
    return [a["local"] for link in data for a in link.get("addr_info", [])]


#: Rounds of ADD, address churn, DEL in the race below; each round is one chance for the DEL
#: to arrive while the watch is waking up for a change.
RACE_ROUNDS = 6
#: How long one DEL may take before the test calls it hung: far beyond any DEL here (a few
#: hundred milliseconds), so only a DEL that never answers fails the test.
DEL_DEADLINE = 60.0


async def test_every_del_answers_while_addresses_change_in_the_pod(world: World) -> None:
    """DELs while the workload adds and removes addresses without pause: the watch wakes up for
    a change just as the DEL stops it. Every DEL answers, and later ones too. (A DEL once
    waited, holding the container's lock, for the watch that waited for that lock; on
    Python 3.11 `asyncio.wait_for` could swallow the DEL's cancellation of the watch.)"""
    world.pod("web")
    netns = world.make_netns()
    name = Path(netns).name
    # One `ip -batch` adds and removes an address on eth0 as fast as the kernel takes it (-force:
    # on past the failures while eth0 is absent).
    churn = await asyncio.create_subprocess_exec(
        "sh", "-c",
        "while :; do echo 'addr add 2001:db8:77::1/64 dev eth0 nodad'; echo 'addr del 2001:db8:77::1/64 dev eth0'; "
        f"done | ip -force -n {name} -batch -",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
    agent = world.agent
    assert agent is not None
    try:
        for round_ in range(RACE_ROUNDS):
            container = f"ctr-race-{round_}"
            added = await world.cni("ADD", container, netns, "web")
            assert added.returncode == 0, added.stdout + added.stderr
            await until("the watch's first look", lambda c=container: agent.address_watch.looks(c) >= 1)
            await asyncio.sleep(0.2 * (round_ % 3))  # a different moment of the watch's cycle each round
            try:
                deleted = await asyncio.wait_for(world.cni("DEL", container, netns, "web"), DEL_DEADLINE)
            except TimeoutError:
                pytest.fail(f"round {round_}: the DEL of {container} never answered")
            assert deleted.returncode == 0, deleted.stdout + deleted.stderr
            assert agent.address_watch.watched() == []
    finally:
        os.killpg(churn.pid, signal.SIGKILL)  # the shell and its `ip`
        await churn.wait()
    assert world.leftovers()["cache records"] == []


class Events:
    """The agent's Event sink, kept in a list."""

    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []

    async def post_event(self, body: Mapping[str, Any]) -> None:
        self.posted.append(dict(body))


async def test_thousands_of_addresses_are_capped_in_the_status_said_in_an_event_and_logged_in_brief(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A pod adding addresses without end must not make network-status outgrow what the API takes
    (256 KiB for all of a pod's annotations: every write would be refused, and retried forever),
    nor make each change a log line of every address."""
    agent = world.agent
    assert agent is not None
    events = Events()
    agent.events = events
    caplog.set_level(logging.INFO, logger="bridge.agent.pods.addresswatch")
    netns = await attached(world)
    assigned = eth0_ips(world, "web")
    cap = agent.config.address_watch.max_ips_per_interface
    burst = "".join(f"addr add 2001:db8:c::{i:x}/64 dev eth0 nodad\n" for i in range(1, 3 * cap + 1))
    proc = await asyncio.create_subprocess_exec("ip", "-n", Path(netns).name, "-batch", "-",
                                                stdin=asyncio.subprocess.PIPE)
    await proc.communicate(burst.encode())
    assert proc.returncode == 0

    await until("the burst in the status", lambda: len(eth0_ips(world, "web")) >= cap)
    ips = eth0_ips(world, "web")
    assert len(ips) == cap and ips[0] == assigned[0], "the first IPs are kept, the plugin's first"
    assert len(json.dumps(status_of(world, "web"))) <= agent.config.address_watch.max_status_bytes
    await until("the Warning Event", lambda: bool(events.posted))
    (event,) = events.posted
    assert (event["reason"], event["type"], event["involvedObject"]["name"]) == (
        "NetworkStatusCapped", "Warning", "web")
    assert f"{cap} of {3 * cap + 1} addresses of eth0" in event["message"], event["message"]
    longest = max(len(r.getMessage()) for r in caplog.records if r.name == "bridge.agent.pods.addresswatch")
    assert longest < 2000, "a log line lists every address"

    deleted = await world.cni("DEL", "ctr-live", netns, "web")
    assert deleted.returncode == 0, deleted.stdout


# --- the reader against pyroute2, on a real namespace ------------------------------------------------


async def _pyroute2_view(netns: str) -> tuple[dict[int, str], list[tuple[int, str, int, int]]]:
    """The namespace's link names and addresses as pyroute2 reads them (the watch's reader before)."""
    from pyroute2 import AsyncIPRoute

    from bridge.agent.netns import routes

    ipr = AsyncIPRoute(fileno=(await routes.socket_in(netns)).detach())
    try:
        names = {int(m["index"]): str(m.get_attr("IFLA_IFNAME")) async for m in await ipr.link("dump")}
        addresses = []
        async for m in await ipr.addr("dump"):
            ip = m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS")
            flags = m.get_attr("IFA_FLAGS")
            addresses.append((int(m["index"]), str(ipaddress.ip_address(ip)), int(m["prefixlen"]),
                              int(flags if flags is not None else m["flags"])))
        return names, addresses
    finally:
        ipr.close()


async def _reader_view(netns: str) -> tuple[dict[int, str], list[tuple[int, str, int, int]]]:
    from bridge.agent.netns import netlink, routes

    events: list[int] = []
    reader = netlink.Reader(await routes.socket_in(netns), events.append, lambda: None)
    try:
        names = dict(await reader.dump(netlink.RTM_GETLINK, netlink.parse_link))
        entries = await reader.dump(netlink.RTM_GETADDR, netlink.parse_address)
        return names, [(e.index, e.ip, e.prefixlen, e.flags) for e in entries]
    finally:
        reader.close()


async def test_the_stdlib_reader_reads_a_namespace_as_pyroute2_does(tmp_path: Path) -> None:
    """Links renamed and plain, IPv4 with a peer (point-to-point), IPv6 tentative and not, and enough
    addresses (600) that the dump spans many datagrams: the same names, addresses, prefixes and flags."""
    name = f"pn-nl-{os.getpid()}"
    run("ip", "netns", "add", name)
    try:
        batch = [
            "link add eth0 type veth peer name peer0",
            "link set eth0 up",
            "link set peer0 up",
            "link set peer0 name renamed0",
            "addr add 10.9.0.1 peer 10.9.0.2/32 dev eth0",
            "addr add 10.8.0.5/24 dev eth0",
            "addr add fd00:1::5/64 dev eth0 nodad",
            # Tentative for as long as the test runs: duplicate detection waits for a carrier.
            "link add tent0 type veth peer name tent1",
            "link set tent0 up",
            "addr add fd00:2::5/64 dev tent0",
        ] + [f"addr add fd00:3::{i:x}/128 dev renamed0 nodad" for i in range(1, 601)]
        script = tmp_path / "batch"
        script.write_text("\n".join(batch) + "\n")
        run("ip", "-n", name, "-batch", str(script))
        netns = f"/var/run/netns/{name}"
        theirs, ours = await _pyroute2_view(netns), await _reader_view(netns)
        assert ours[0] == theirs[0]
        assert sorted(ours[1]) == sorted(theirs[1])
        assert {"lo", "eth0", "renamed0"} <= set(ours[0].values())
        assert len(ours[1]) > 600
        assert any(ip == "10.9.0.1" for _, ip, _, _ in ours[1]), "IFA_LOCAL, not the peer"
        assert [flags & IFA_F_TENTATIVE for _, ip, _, flags in ours[1] if ip == "fd00:2::5"] == [IFA_F_TENTATIVE]
    finally:
        run("ip", "netns", "del", name, check=False)


WATCH_ALONE = """
import asyncio, sys
from bridge.agent.pods import addresswatch
from bridge.agent.delegates.cache import Record

async def main(netns):
    async def publish(record, status):
        return True
    watch = addresswatch.AddressWatch(publish)
    watch.watch(Record(container_id="c", netns=netns, ifname="eth0", pod_namespace="ns", pod_name="p",
                       complete=True), [{"name": "default", "interface": "eth0", "ips": []}])
    for _ in range(600):
        if watch.looks("c"):
            break
        await asyncio.sleep(0.05)
    print(watch.looks("c"), "pyroute2" in sys.modules)
    await watch.close()

asyncio.run(main(sys.argv[1]))
"""


def test_watching_a_pod_s_addresses_does_not_load_pyroute2() -> None:
    """pyroute2 costs the agent ~6.6 MB (docs/benchmarks.md): the watch reads with the stdlib."""
    name = f"pn-nlw-{os.getpid()}"
    run("ip", "netns", "add", name)
    try:
        done = subprocess.run([sys.executable, "-c", WATCH_ALONE, f"/var/run/netns/{name}"],
                              capture_output=True, text=True, check=True, timeout=60)
        assert done.stdout.split() == ["1", "False"], done.stdout + done.stderr
    finally:
        run("ip", "netns", "del", name, check=False)
