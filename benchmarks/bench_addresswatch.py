"""The cost of watching pods' addresses (bridge/agent/pods/addresswatch.py) as the number of pods grows.

For N pods (network namespaces, each with a dummy interface holding one address), a fresh
interpreter imports what `podnetwork cni-agent` imports, then watches every namespace, and
reports what that added: RSS, file descriptors and threads. Two designs, in
separate interpreters, alternated:

- event loop (the agent's): one netlink socket per namespace, opened by a short-lived thread
  that enters it, then read on the asyncio event loop (`loop.add_reader`) by the stdlib reader
  `bridge.agent.netns.netlink` (`addresswatch.AddressWatch`);
- thread per pod (the alternative): one netlink socket per namespace and one thread blocked
  in recv(2) on it.

After the watches are up, one address is added in every namespace, and the run waits until
the agent's watch has written every pod's status once (so the numbers are of working watches).

Needs root. Run:  sudo .venv/bin/python benchmarks/bench_addresswatch.py [--pods 100 300] [--rounds 2]
Prints a Markdown table for docs/benchmarks.md. Removes its namespaces.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

NETNS_DIR = Path("/var/run/netns")


def _ip_batch(lines: list[str], netns: str | None = None) -> None:
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    subprocess.run(argv, input="".join(f"{line}\n" for line in lines), text=True, check=True)


def make_namespaces(names: list[str]) -> None:
    _ip_batch([f"netns add {n}" for n in names])
    for i, name in enumerate(names):
        # A veth pair inside the namespace: some kernels have no dummy driver.
        _ip_batch(
            [
                "link add eth0 type veth peer name peer0",
                "link set eth0 up",
                "link set peer0 up",
                f"addr add 10.77.{i // 250}.{i % 250 + 1}/16 dev eth0",
            ],
            name,
        )


def remove_namespaces(prefix: str) -> None:
    """Every namespace of this run, also those of a creation that failed half-way."""
    names = [n for n in os.listdir(NETNS_DIR) if n.startswith(prefix)] if NETNS_DIR.is_dir() else []
    subprocess.run(["ip", "-batch", "-"], input="".join(f"netns del {n}\n" for n in names), text=True, check=False)


def _usage() -> dict[str, int]:
    rss = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return {"rss": rss, "fds": len(os.listdir("/proc/self/fd")), "threads": threading.active_count()}


async def _event_loop_design(paths: list[str]) -> dict[str, Any]:
    from bridge.agent.delegates.cache import Record
    from bridge.agent.pods import addresswatch

    before = _usage()
    written: set[str] = set()

    async def publish(record: Record, entries: list[dict[str, Any]]) -> bool:
        written.add(record.container_id)
        return True

    watch = addresswatch.AddressWatch(publish, addresswatch.Settings(quiet=0.2, max_delay=1.0, min_interval=1.0))
    started = time.monotonic()
    for i, path in enumerate(paths):
        record = Record(container_id=f"c{i}", netns=path, ifname="eth0", pod_namespace="bench", pod_name=f"p{i}",
                        complete=True)
        watch.watch(record, [{"name": "default", "interface": "eth0", "ips": [], "default": True}])
    while any(watch.looks(f"c{i}") < 1 for i in range(len(paths))):
        await asyncio.sleep(0.05)
    opened = time.monotonic() - started
    # Every pod's first look wrote its one address; now a change in each, seen through events.
    written.clear()
    for i, path in enumerate(paths):
        await asyncio.to_thread(_ip_batch, [f"addr add 2001:db8:{i:x}::1/64 dev eth0 nodad"], Path(path).name)
    while len(written) < len(paths):
        await asyncio.sleep(0.05)
    after = _usage()
    await watch.close()
    return {"before": before, "after": after, "open_seconds": opened, "pyroute2": "pyroute2" in sys.modules}


def _thread_design(paths: list[str], own: int) -> dict[str, Any]:
    from bridge.agent.netns import routes

    before = _usage()
    seen: set[int] = set()
    lock = threading.Lock()

    def reader(i: int, sock: socket.socket) -> None:
        while True:
            try:
                if not sock.recv(65536):
                    return
            except OSError:
                return
            with lock:
                seen.add(i)

    socks = []
    for i, path in enumerate(paths):
        sock = routes.open_in(path)  # setns + socket, in this (main) thread, then back
        sock.bind((0, 0x10 | 0x100))
        socks.append(sock)
        threading.Thread(target=reader, args=(i, sock), daemon=True).start()
    routes.setns(own)  # back to the agent's namespace
    for i, path in enumerate(paths):
        _ip_batch([f"addr add 2001:db8:{i:x}::1/64 dev eth0 nodad"], Path(path).name)
    while len(seen) < len(paths):
        time.sleep(0.05)
    after = _usage()
    for sock in socks:
        sock.close()
    return {"before": before, "after": after}


def child(design: str, paths: list[str]) -> None:
    import bridge.agent.daemon.command  # noqa: F401  (what `podnetwork cni-agent` imports)

    if design == "event loop":
        result = asyncio.run(_event_loop_design(paths))
    else:
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        try:
            result = _thread_design(paths, own)
        finally:
            os.close(own)
    print(json.dumps(result))


def run_child(design: str, paths: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", design, *paths], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{design}: {proc.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1:])
        return
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    tag = secrets.token_hex(3)
    designs = ["event loop", "thread per pod"]
    results: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for count in args.pods:
        prefix = f"pn-bench-aw-{tag}-{count}-"
        names = [f"{prefix}{i}" for i in range(count)]
        try:
            make_namespaces(names)
            paths = [str(NETNS_DIR / n) for n in names]
            for r in range(args.rounds):
                for design in designs if r % 2 == 0 else reversed(designs):
                    results.setdefault((count, design), []).append(run_child(design, paths))
                    # The next run starts from the namespaces' first state.
                    for i, name in enumerate(names):
                        _ip_batch([f"addr del 2001:db8:{i:x}::1/64 dev eth0"], name)
        finally:
            remove_namespaces(prefix)
    loaded = any(r.get("pyroute2") for runs in results.values() for r in runs)
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; medians of {args.rounds} runs per design; pyroute2 "
          f"{'loaded' if loaded else 'not loaded'} by the watch\n")
    print("| pods | design | RSS before | RSS after | RSS added | per pod | fds added | threads added "
          "| first look of every pod |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (count, design), runs in sorted(results.items()):
        rss = statistics.median(r["after"]["rss"] - r["before"]["rss"] for r in runs)
        fds = statistics.median(r["after"]["fds"] - r["before"]["fds"] for r in runs)
        threads = statistics.median(r["after"]["threads"] - r["before"]["threads"] for r in runs)
        opened = [r["open_seconds"] for r in runs if "open_seconds" in r]
        look = f"{statistics.median(opened):.2f} s" if opened else "-"
        before = statistics.median(r["before"]["rss"] for r in runs)
        print(f"| {count} | {design} | {before / 2**20:.1f} MB | {(before + rss) / 2**20:.1f} MB "
              f"| {rss / 1e6:.1f} MB | {rss / count / 1e3:.1f} kB | {fds:.0f} | "
              f"{threads:.0f} | {look} |")


if __name__ == "__main__":
    main()
