"""`bridge.agent.netns.routes` in real network namespaces, against `nsenter --net=… ip …` (what the agent ran before).

Each test builds two identical namespaces (a "default network" interface eth0 with
IPv4 and IPv6 default routes, a secondary interface net1, routes that must stay):
the executor works on one, the old way (each `RouteOp.argv()` through `nsenter` and
`ip`) on the other, and the resulting routing tables, or the errors, must be the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.cni import plan
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.netns import routes
from bridge.agent.netns.routes import RouteAction, RouteOp

pytestmark = pytest.mark.cni


def ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=check)


class Pod:
    """A namespace shaped like a pod after its delegates ran, before the default route moves."""

    def __init__(self, name: str, octet: int) -> None:
        self.name = name
        self.path = f"/var/run/netns/{name}"
        self.v4 = {0: f"10.{octet}.0", 1: f"10.{octet}.1"}
        self.v6 = {0: f"fd00:{octet:x}:a", 1: f"fd00:{octet:x}:b"}  # no zero group: ip prints them as written
        ip("netns", "add", name)
        for index, (ifname, peer) in enumerate((("eth0", "gw0"), ("net1", "gw1"))):
            # Both ends stay in the namespace: a link that is up, with on-link gateways.
            ip("-n", name, "link", "add", ifname, "type", "veth", "peer", "name", peer)
            for dev in (ifname, peer):
                ip("-n", name, "link", "set", dev, "up")
            ip("-n", name, "addr", "add", f"{self.v4[index]}.2/24", "dev", ifname)
            ip("-n", name, "addr", "add", f"{self.v6[index]}::2/64", "dev", ifname, "nodad")
        ip("-n", name, "route", "add", "default", "via", f"{self.v4[0]}.1", "dev", "eth0")
        ip("-n", name, "route", "add", "default", "via", f"{self.v4[0]}.254", "dev", "eth0", "metric", "50")
        ip("-n", name, "-6", "route", "add", "default", "via", f"{self.v6[0]}::1", "dev", "eth0")
        # Not the main table's default routes, nor default routes at all: a flush leaves them.
        ip("-n", name, "route", "add", "default", "via", f"{self.v4[0]}.1", "dev", "eth0", "table", "100")
        ip("-n", name, "-6", "route", "add", "default", "via", f"{self.v6[0]}::1", "dev", "eth0", "table", "100")
        ip("-n", name, "route", "add", "192.0.2.0/24", "via", f"{self.v4[0]}.1", "dev", "eth0")

    def table(self) -> list[dict[str, Any]]:
        """Every route of both families in every table, as `ip -d -j` shows them."""
        out = []
        for family in ("-4", "-6"):
            shown = ip("-n", self.name, "-d", "-j", family, "route", "show", "table", "all").stdout
            out += json.loads(shown or "[]")
        return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))

    def defaults(self, family: int) -> list[tuple[str, str, int | None]]:
        shown = ip("-n", self.name, "-j", f"-{family}", "route", "show", "default").stdout
        return sorted((r["dev"], r["gateway"], r.get("metric")) for r in json.loads(shown or "[]"))


@pytest.fixture
def pods(cni_host: list[Path]) -> Iterator[tuple[Pod, Pod]]:
    assert shutil.which("nsenter"), "the comparison runs the old executor: nsenter (util-linux) is needed"
    tag = secrets.token_hex(3)
    octet = secrets.randbelow(200) + 20
    made: list[str] = []
    try:
        twins = []
        for side in ("new", "old"):
            made.append(f"pn-rt-{tag}-{side}")
            twins.append(Pod(made[-1], octet))
        yield twins[0], twins[1]
    finally:
        for name in made:
            ip("netns", "del", name, check=False)
        assert not [n for n in made if Path(f"/var/run/netns/{n}").exists()]


def the_old_way(pod: Pod, ops: list[RouteOp]) -> subprocess.CompletedProcess[str] | None:
    """Runs each step as the agent used to; returns the failed `ip`, or None."""
    for op in ops:
        done = subprocess.run(["nsenter", f"--net={pod.path}", *op.argv()], capture_output=True, text=True)
        if done.returncode != 0:
            return done
    return None


@pytest.mark.parametrize(
    "gateways",
    [
        pytest.param(lambda p: [f"{p.v4[1]}.1"], id="IPv4 only: IPv6 stays on eth0"),
        pytest.param(lambda p: [f"{p.v6[1]}::1"], id="IPv6 only: IPv4 stays on eth0"),
        pytest.param(lambda p: [f"{p.v4[1]}.1", f"{p.v6[1]}::1", f"{p.v4[1]}.254"], id="both, two IPv4 gateways"),
    ],
)
async def test_moving_the_default_route_leaves_the_same_routing_table_as_nsenter_and_ip(
    pods: tuple[Pod, Pod], gateways: Any
) -> None:
    new, old = pods
    assert new.table() == old.table()
    ops = plan.default_route_ops("net1", gateways(new))

    await routes.apply(new.path, ops, timeout=30)
    assert the_old_way(old, ops) is None

    assert new.table() == old.table()
    moved = {4 if "." in gw else 6 for gw in gateways(new)}
    for family in (4, 6):
        devices = {dev for dev, _, _ in new.defaults(family)}
        assert devices == ({"net1"} if family in moved else {"eth0"}), (family, new.defaults(family))
    if moved == {4, 6}:
        assert new.defaults(4) == [("net1", f"{new.v4[1]}.1", None), ("net1", f"{new.v4[1]}.254", 1)]


def test_a_move_needs_no_pyroute2(pods: tuple[Pod, Pod]) -> None:
    """The agent speaks rtnetlink with the stdlib (`bridge.agent.netns.netlink`): no pyroute2 to import."""
    new, _ = pods
    probe = (
        "import asyncio, sys; sys.modules['pyroute2'] = None\n"  # as if it were not installed
        "from bridge.agent.cni import plan\nfrom bridge.agent.netns import routes\n"
        f"asyncio.run(routes.apply({new.path!r}, plan.default_route_ops('net1', [{new.v4[1] + '.1'!r}]), 30))\n"
    )
    subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert new.defaults(4) == [("net1", f"{new.v4[1]}.1", None)]


async def test_the_netns_may_be_given_as_a_process_namespace_path(pods: tuple[Pod, Pod]) -> None:
    new, _ = pods
    holder = subprocess.Popen(["ip", "netns", "exec", new.name, "sleep", "60"])
    try:
        path = f"/proc/{holder.pid}/ns/net"
        for _ in range(500):  # until `ip netns exec` has entered the namespace
            if _same_ns(path, new.path):
                break
            await asyncio.sleep(0.01)
        assert _same_ns(path, new.path), "the holder never entered the pod's namespace"
        await routes.apply(path, plan.default_route_ops("net1", [f"{new.v4[1]}.1"]), timeout=30)
    finally:
        holder.kill()
        holder.wait()
    assert new.defaults(4) == [("net1", f"{new.v4[1]}.1", None)]


def _same_ns(a: str, b: str) -> bool:
    sa, sb = os.stat(a), os.stat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(lambda p: RouteOp(4, RouteAction.ADD_DEFAULT, "198.51.100.1", "net1"), id="IPv4 gateway not on-link"),
        pytest.param(lambda p: RouteOp(6, RouteAction.ADD_DEFAULT, "2001:db8::1", "net1"), id="IPv6 gateway not on-link"),
        pytest.param(lambda p: RouteOp(4, RouteAction.ADD_DEFAULT, f"{p.v4[0]}.1", "eth0"), id="route exists"),
        pytest.param(lambda p: RouteOp(4, RouteAction.ADD_DEFAULT, f"{p.v4[1]}.1", "net9"), id="no such interface"),
    ],
)
async def test_a_refused_step_is_the_same_cni_error_with_ips_own_words(pods: tuple[Pod, Pod], op: Any) -> None:
    new, old = pods
    step = op(new)

    with pytest.raises(CNIError) as caught:
        await routes.apply(new.path, [step], timeout=30)
    refused = the_old_way(old, [step])

    assert refused is not None, "ip accepted what the executor refused"
    assert caught.value.code == ErrorCode.IO_FAILURE
    assert caught.value.msg == f"{' '.join(step.argv())} failed in {new.path}"
    assert caught.value.details == refused.stderr.strip()
    assert new.table() == old.table(), "a refused step changes nothing"


async def test_steps_after_a_refused_one_do_not_run(pods: tuple[Pod, Pod]) -> None:
    new, _ = pods
    ops = [
        RouteOp(4, RouteAction.FLUSH_DEFAULT),
        RouteOp(4, RouteAction.ADD_DEFAULT, "198.51.100.1", "net1"),
        RouteOp(6, RouteAction.FLUSH_DEFAULT),
    ]
    with pytest.raises(CNIError) as caught:
        await routes.apply(new.path, ops, timeout=30)
    assert "ip -4 route add default via 198.51.100.1" in caught.value.msg
    assert new.defaults(4) == [], "the flush before the refused step happened"
    assert new.defaults(6) == [("eth0", f"{new.v6[0]}::1", 1024)], "the flush after it did not"


async def test_a_namespace_that_does_not_exist_is_a_cni_error_naming_the_first_step(cni_host: list[Path]) -> None:
    missing = f"/var/run/netns/pn-rt-absent-{secrets.token_hex(4)}"
    ops = plan.default_route_ops("net1", ["10.1.2.1"])
    with pytest.raises(CNIError) as caught:
        await routes.apply(missing, ops, timeout=30)
    assert caught.value.code == ErrorCode.IO_FAILURE
    assert caught.value.msg == f"ip -4 route flush exact 0.0.0.0/0 failed in {missing}"
    assert "No such file or directory" in caught.value.details
    assert not Path(missing).exists(), "nothing was created at the path"


async def test_a_namespace_path_that_is_no_namespace_is_refused(tmp_path: Path, cni_host: list[Path]) -> None:
    plain = tmp_path / "not-a-netns"
    plain.write_text("")
    with pytest.raises(CNIError) as caught:
        await routes.apply(str(plain), plan.default_route_ops("net1", ["10.1.2.1"]), timeout=30)
    assert caught.value.code == ErrorCode.IO_FAILURE
    assert f"cannot enter network namespace {plain}" in caught.value.details


async def test_entering_the_namespace_that_hangs_is_a_timeout_and_the_stuck_thread_cleans_up(
    tmp_path: Path, cni_host: list[Path]
) -> None:
    # Opening a FIFO for reading blocks until a writer comes: a namespace that never answers.
    fifo = tmp_path / "netns-fifo"
    os.mkfifo(fifo)
    fds_before = set(os.listdir("/proc/self/fd"))
    ops = plan.default_route_ops("net1", ["10.1.2.1"])
    try:
        with pytest.raises(CNIError) as caught:
            await routes.apply(str(fifo), ops, timeout=0.3)
        assert caught.value.code == ErrorCode.PLUGIN_TIMEOUT
        assert caught.value.msg == f"ip -4 route flush exact 0.0.0.0/0 timed out in {fifo}"
    finally:
        writer = os.open(fifo, os.O_WRONLY)  # lets the thread's open() return; its setns then fails
        os.close(writer)
    for _ in range(200):
        if set(os.listdir("/proc/self/fd")) <= fds_before:
            break
        await asyncio.sleep(0.01)
    assert set(os.listdir("/proc/self/fd")) <= fds_before, "the late thread's descriptors were closed"


async def test_repeated_moves_and_failures_leave_no_descriptor_open(pods: tuple[Pod, Pod]) -> None:
    new, _ = pods
    before = sorted(os.listdir("/proc/self/fd"))
    for i in range(10):
        await routes.apply(new.path, plan.default_route_ops("net1", [f"{new.v4[1]}.{1 + i % 2}"]), timeout=30)
        with pytest.raises(CNIError):
            await routes.apply(new.path, [RouteOp(6, RouteAction.ADD_DEFAULT, "2001:db8::1", "net1")], timeout=30)
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert new.defaults(4) == [("net1", f"{new.v4[1]}.2", None)]


async def test_moves_in_several_namespaces_at_once_each_reach_their_own_namespace(pods: tuple[Pod, Pod]) -> None:
    # Each apply has its own socket on the one event loop; replies must not cross.
    for round_ in range(5):
        targets = {pod.name: ("net1", "eth0")[(round_ + k) % 2] for k, pod in enumerate(pods)}
        await asyncio.gather(*(
            routes.apply(pod.path, plan.default_route_ops(targets[pod.name], [f"{pod.v4[index]}.1", f"{pod.v6[index]}::1"]), timeout=30)
            for pod in pods
            for index in [0 if targets[pod.name] == "eth0" else 1]
        ))
        for pod in pods:
            assert {dev for family in (4, 6) for dev, _, _ in pod.defaults(family)} == {targets[pod.name]}
