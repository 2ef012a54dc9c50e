"""Moving a pod's default route in a real netns: `nsenter` + `ip` (the agent once) against netlink (the agent now).

The namespace looks like a pod after its delegates ran: eth0 (the default network)
and net1, each with an IPv4 and an IPv6 address and an on-link gateway. Each
iteration moves the default route(s) to one interface (alternately net1 and eth0),
once with each executor, in alternating order, so both see the same state and the
same machine noise:

- nsenter + ip: each `RouteOp.argv()` run as `nsenter --net=<netns> ip …`, one child
  process per step, awaited on the event loop (the agent's code before bridge/agent/netns/routes.py);
- netlink: `bridge.agent.netns.routes.apply` (one netlink socket opened in the namespace by a
  short-lived thread, then rtnetlink requests on the event loop, built and read by the
  stdlib reader `bridge.agent.netns.netlink`; pyroute2 until issue 24).

Cases: IPv4 alone (flush + add: 2 steps), dual-stack (4 steps), and dual-stack in
10 namespaces at once (as when pods start together: the child processes run on every
CPU, while the agent's Python work shares the event loop's one). Wall time (median) and
CPU time per pod (this process, and its children). Then the cost of the first move in
fresh interpreters that first import what `podnetwork cni-agent` imports, and the RSS it
adds (it must load no pyroute2); and, for scale, the RSS of an idle `podnetwork cni-agent`.

Needs root. Run:  sudo .venv/bin/python benchmarks/bench_routes.py [-n 200]
Prints a Markdown table for docs/benchmarks.md. Removes its netns and temp files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bridge.agent.cni import plan
from bridge.agent.netns import routes
from bridge.agent.netns.routes import RouteOp

Executor = Callable[[str, Sequence[RouteOp], float], Awaitable[None]]


async def nsenter_ip(netns: str, ops: Sequence[RouteOp], timeout: float) -> None:
    """The agent's executor before bridge/agent/netns/routes.py, as it was."""
    for op in ops:
        proc = await asyncio.create_subprocess_exec(
            "nsenter", f"--net={netns}", *op.argv(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(op.argv())}: {stderr.decode().strip()}")


EXECUTORS: dict[str, Executor] = {"nsenter + ip": nsenter_ip, "netlink": routes.apply}


def ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


def make_pod(name: str, octet: int) -> dict[str, dict[int, str]]:
    """The namespace and each interface's gateways: {ifname: {4: gw, 6: gw}}."""
    ip("netns", "add", name)
    gateways = {}
    for index, (ifname, peer) in enumerate((("eth0", "gw0"), ("net1", "gw1"))):
        ip("-n", name, "link", "add", ifname, "type", "veth", "peer", "name", peer)
        for dev in (ifname, peer):
            ip("-n", name, "link", "set", dev, "up")
        ip("-n", name, "addr", "add", f"10.{octet}.{index}.2/24", "dev", ifname)
        ip("-n", name, "addr", "add", f"fd00:{octet:x}:{index + 10:x}::2/64", "dev", ifname, "nodad")
        gateways[ifname] = {4: f"10.{octet}.{index}.1", 6: f"fd00:{octet:x}:{index + 10:x}::1"}
    ip("-n", name, "route", "add", "default", "via", gateways["eth0"][4], "dev", "eth0")
    ip("-n", name, "-6", "route", "add", "default", "via", gateways["eth0"][6], "dev", "eth0")
    return gateways


def default_devs(name: str) -> set[str]:
    out = set()
    for family in ("-4", "-6"):
        shown = subprocess.run(["ip", "-n", name, "-j", family, "route", "show", "default"],
                               check=True, capture_output=True, text=True).stdout
        out |= {r["dev"] for r in json.loads(shown or "[]")}
    return out


async def moves(iterations: int, warmup: int, concurrent: int) -> dict[str, Any]:
    tag, octet = secrets.token_hex(3), secrets.randbelow(200 - concurrent) + 20
    names = [f"pnbench-rt-{tag}-{k}" for k in range(concurrent)]
    made: list[str] = []
    try:
        gateways = []
        for k, name in enumerate(names):
            made.append(name)
            gateways.append(make_pod(name, octet + k))
        # case -> (families, how many pods move at once)
        cases = {"IPv4 (2 steps)": ((4,), 1), "IPv4 + IPv6 (4 steps)": ((4, 6), 1),
                 f"IPv4 + IPv6, {concurrent} pods at once": ((4, 6), concurrent)}
        samples: dict[str, dict[str, list[float]]] = {c: {e: [] for e in EXECUTORS} for c in cases}
        # CPU seconds of this process (its event loop and the netns threads) and of its children.
        cpu: dict[str, dict[str, list[float]]] = {c: {e: [0.0, 0.0] for e in EXECUTORS} for c in cases}
        for i in range(warmup + iterations):
            target = ("net1", "eth0")[i % 2]
            for case, (families, width) in cases.items():
                jobs = [(f"/var/run/netns/{names[k]}",
                         plan.default_route_ops(target, [gateways[k][target][f] for f in families]))
                        for k in range(width)]
                order = list(EXECUTORS.items())
                if i % 4 >= 2:
                    order.reverse()
                for executor_name, executor in order:
                    before = cpu_seconds()
                    start = time.perf_counter()
                    await asyncio.gather(*(executor(netns, ops, 30) for netns, ops in jobs))
                    elapsed = time.perf_counter() - start
                    after = cpu_seconds()
                    if i >= warmup:
                        samples[case][executor_name].append(elapsed)
                        for k in (0, 1):
                            cpu[case][executor_name][k] += (after[k] - before[k]) / width
                    if families == (4, 6) and default_devs(names[0]) != {target}:
                        raise RuntimeError(f"{executor_name} left default routes on {default_devs(names[0])}, not {target}")
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return {
        case: {
            e: {"median_ms": statistics.median(s) * 1000,
                "cpu_self_ms": cpu[case][e][0] * 1000 / len(s), "cpu_children_ms": cpu[case][e][1] * 1000 / len(s)}
            for e, s in per.items()
        }
        for case, per in samples.items()
    }


def cpu_seconds() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


FIRST_USE = r"""
import asyncio, sys, time
def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
import podnetwork.cli, bridge.agent.daemon.command, bridge.agent.daemon.agent, bridge.agent.daemon.server  # what `cni-agent` loads
from bridge.agent.cni import plan
from bridge.agent.netns import routes
before = rss()
assert "pyroute2" not in sys.modules, "the agent imports pyroute2 before it moves a route"
async def main():
    ops = plan.default_route_ops(sys.argv[2], [sys.argv[1]])
    start = time.perf_counter()
    await routes.apply(sys.argv[3], ops, 30)
    first = time.perf_counter() - start
    start = time.perf_counter()
    await routes.apply(sys.argv[3], ops, 30)
    return first, time.perf_counter() - start
first, second = asyncio.run(main())
assert "pyroute2" not in sys.modules, "a route move loaded pyroute2"
print(before, rss(), first * 1000, second * 1000)
"""


def first_use(runs: int) -> dict[str, float]:
    """The first move in a fresh agent-like interpreter and the RSS it adds."""
    name = f"pnbench-rt-{secrets.token_hex(3)}"
    rows = []
    try:
        gateways = make_pod(name, secrets.randbelow(200) + 20)
        for _ in range(runs):
            out = subprocess.run([sys.executable, "-c", FIRST_USE, gateways["net1"][4], "net1", f"/var/run/netns/{name}"],
                                 check=True, capture_output=True, text=True).stdout.split()
            rows.append([float(x) for x in out])
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    before, after, first, second = (statistics.median(col) for col in zip(*rows, strict=True))
    return {"rss_before_mb": before / 1024, "rss_added_mb": (after - before) / 1024,
            "first_ms": first, "second_ms": second}


def idle_agent_rss() -> float:
    """VmRSS (MB) of a `podnetwork cni-agent` process that is up and waiting for requests."""
    with tempfile.TemporaryDirectory(prefix="pn-bench-rt-") as tmp:
        root = Path(tmp)
        (root / "objects.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
        (root / "default.conflist").write_text(json.dumps(
            {"cniVersion": "1.0.0", "name": "kubenet", "plugins": [{"type": "loopback"}]}))
        sock = root / "agent.sock"
        cmd = [str(Path(sys.executable).with_name("podnetwork")), "cni-agent", "--objects", str(root / "objects.json"),
               "--socket", str(sock), "--cache-dir", str(root / "cache"), "--cni-conf-dir", str(root / "net.d"),
               "--default-network-conf", str(root / "default.conflist")]
        server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not sock.exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"podnetwork cni-agent did not come up: {' '.join(cmd)}")
                time.sleep(0.05)
            time.sleep(0.5)
            with open(f"/proc/{server.pid}/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
        finally:
            server.terminate()
            server.wait(10)


def markdown(result: dict[str, Any]) -> str:
    lines = ["| move the default route | nsenter + ip | netlink (stdlib) | ratio netlink / nsenter + ip |",
             "| --- | --- | --- | --- |"]
    for case, per in result["moves"].items():
        old, new = per["nsenter + ip"]["median_ms"], per["netlink"]["median_ms"]
        lines.append(f"| {case} | {old:.2f} ms | {new:.2f} ms | **{new / old:.2f}** |")
    lines += ["", "| CPU per pod's move, mean: agent process / its children | nsenter + ip | netlink |", "| --- | --- | --- |"]
    for case, per in result["moves"].items():
        cells = [f"{per[e]['cpu_self_ms']:.2f} / {per[e]['cpu_children_ms']:.2f} ms" for e in ("nsenter + ip", "netlink")]
        lines.append(f"| {case} | {cells[0]} | {cells[1]} |")
    f = result["first_use"]
    lines += [
        "",
        f"Medians of {result['iterations']} interleaved iterations ({result['cpus']} CPUs, Python {result['python']}).",
        "",
        "| cost of the first move in an agent-like interpreter | |",
        "| --- | --- |",
        f"| RSS before the first move (agent modules imported) | {f['rss_before_mb']:.1f} MB |",
        f"| RSS added by the first move | {f['rss_added_mb']:.1f} MB |",
        f"| first move (IPv4) | {f['first_ms']:.1f} ms |",
        f"| second move | {f['second_ms']:.2f} ms |",
        f"| idle `podnetwork cni-agent` process, for scale | {result['idle_agent_rss_mb']:.1f} MB |",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--first-use-runs", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=10, help="pods moving their routes at once, last case")
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON too")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_routes: needs root (network namespaces)", file=sys.stderr)
        return 2
    result = {
        "moves": asyncio.run(moves(args.iterations, args.warmup, args.concurrent)),
        "first_use": first_use(args.first_use_runs),
        "idle_agent_rss_mb": idle_agent_rss(),
        "iterations": args.iterations,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    print(markdown(result))
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
