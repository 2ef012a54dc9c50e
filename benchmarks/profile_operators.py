"""Where our two operators' CPU per pod goes: the controller and the bridge under cProfile while
single pods are created and deleted on a kit cluster (the install and the pods of
bench_podstart.py's `podnetwork` way).

    sudo .venv/bin/python benchmarks/profile_operators.py [--pods 10] [--top 25]

Each operator runs under a wrapper (`--child`) that profiles every thread (kopf runs sync handlers
in a thread pool) with a per-thread CPU clock (`time.thread_time`), so a function's figure is CPU,
not waiting. On SIGUSR2 the wrapper writes a snapshot; the figures are the difference between the
snapshot after the pods and the one before (after 2 warm-up pods), divided by the pods. cProfile
costs CPU of its own (the process's total CPU per pod is printed with and as measured under it), so
read the shares, not the absolute milliseconds. Removes everything it made.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

Func = tuple[str, int, str]
Table = dict[Func, tuple[int, float, float]]


def _child(out: str, argv: list[str]) -> int:
    """Run `podnetwork argv` with every thread profiled; SIGUSR2 writes `out`.N (N counts up)."""
    profilers: list[cProfile.Profile] = []

    def thread_hook(frame: Any, event: str, arg: Any) -> None:
        profiler = cProfile.Profile(time.thread_time)
        profilers.append(profiler)
        profiler.enable()  # replaces this hook for the thread

    main = cProfile.Profile(time.thread_time)
    profilers.append(main)
    dumps = [0]

    def dump(signum: int, frame: Any) -> None:
        table: Table = {}
        for profiler in list(profilers):
            profiler.snapshot_stats()
            for func, (_cc, nc, tt, ct, _callers) in profiler.stats.items():
                was = table.get(func, (0, 0.0, 0.0))
                table[func] = (was[0] + nc, was[1] + tt, was[2] + ct)
        path = f"{out}.{dumps[0]}"
        with open(path + ".tmp", "wb") as f:
            pickle.dump(table, f)
        os.replace(path + ".tmp", path)
        dumps[0] += 1

    signal.signal(signal.SIGUSR2, dump)
    threading.setprofile(thread_hook)
    from podnetwork.cli import main as podnetwork_main

    sys.argv = ["podnetwork", *argv]
    main.enable()
    return int(podnetwork_main() or 0)


def _short(func: Func) -> str:
    path, line, name = func
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path}:{line})" if path != "~" else name


def _diff(before: Table, after: Table) -> Table:
    return {f: (v[0] - before.get(f, (0, 0, 0))[0], v[1] - before.get(f, (0, 0, 0))[1],
                v[2] - before.get(f, (0, 0, 0))[2]) for f, v in after.items()}


def _print(name: str, table: Table, pods: int, top: int) -> None:
    total = sum(v[1] for v in table.values())
    print(f"\n## {name}: {total / pods * 1000:.1f} ms CPU per pod under the profiler (sum of own time)\n")
    print("| function | calls/pod | own ms/pod | cumulative ms/pod |\n|---|---|---|---|")
    for func, (nc, tt, ct) in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| `{_short(func)}` | {nc / pods:.0f} | {tt / pods * 1000:.2f} | {ct / pods * 1000:.1f} |")
    print(f"\n### {name}: by cumulative time\n")
    print("| function | calls/pod | cumulative ms/pod |\n|---|---|---|")
    for func, (nc, _tt, ct) in sorted(table.items(), key=lambda kv: -kv[1][2])[:top * 2]:
        print(f"| `{_short(func)}` | {nc / pods:.0f} | {ct / pods * 1000:.1f} |")


def _snapshot(pid: int, out: Path, index: int) -> Table:
    os.kill(pid, signal.SIGUSR2)
    path = Path(f"{out}.{index}")
    deadline = time.monotonic() + 60
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no snapshot {path}")
        time.sleep(0.2)
    with path.open("rb") as f:
        table: Table = pickle.load(f)
    return table


def run(args: argparse.Namespace) -> None:
    import benchmarks.bench_podstart as bench
    from tests.real import cluster_support
    from tests.real.attachments_support import bridged_networks

    cluster = cluster_support.Cluster(*cluster_support.binaries(), root=cluster_support.new_root())
    leftovers: list[tuple[str, Path]] = []
    outs = {name: cluster.root / f"profile-{name}" for name in ("controller", "bridge")}
    try:
        cluster_support.start_control_plane(cluster)
        cluster_support.start_extender(cluster)
        api = cluster.api
        assert api is not None
        wrapper = cluster.root / "profiled-podnetwork"
        wrapper.write_text(f'#!/bin/sh\nname="$1"\nexec {sys.executable} {Path(__file__).resolve()} '
                           f'--child {cluster.root}/profile-"$name" -- "$@"\n')
        wrapper.chmod(0o755)
        original = cluster_support.PODNETWORK
        if not args.plain:
            cluster_support.PODNETWORK = wrapper
        try:
            cluster_support.start_controller_and_bridge(cluster)
        finally:
            cluster_support.PODNETWORK = original
        node = cluster.add_node(3)
        try:
            cluster.install_agent(node)
            with bench.namespace(api, f"prof-{cluster.suffix}") as ns, \
                    bridged_networks(api, ns, "blue", "red") as (blue, red):
                leftovers.extend((net.bridge, net.lease_dir) for net in (blue, red))
                networks = [{"podNetworkName": "default"},
                            {"podNetworkName": blue.podnetwork, "interfaceName": "net1"},
                            {"podNetworkName": red.podnetwork, "interfaceName": "net2"}]
                watch = bench.PodWatch(cluster, ns)
                try:
                    runner = bench.Runner(api, watch, ns, lambda n: bench.pod(n, node, networks=networks), 300)
                    runner.batch("warm-up", [[f"warm-{i}"] for i in range(2)], alone=True)
                    pids = {name: cluster.components[name].popen.pid for name in outs}  # type: ignore[union-attr]
                    before = {name: _snapshot(pids[name], outs[name], 0) for name in outs if not args.plain}
                    cpu = bench.components_cpu(cluster)
                    load = os.getloadavg()
                    runner.batch("pods", [[f"single-{i}"] for i in range(args.pods)], alone=True)
                    after = {name: _snapshot(pids[name], outs[name], 1) for name in outs if not args.plain}
                    cpu_after = bench.components_cpu(cluster)
                finally:
                    watch.close()
                print(f"# {args.pods} pods, one after the other (create, Ready, delete, gone); load average "
                      f"before {load[0]:.2f} {load[1]:.2f}, after {' '.join(f'{x:.2f}' for x in os.getloadavg()[:2])}")
                for name in outs:
                    print(f"# {name}: process CPU{'' if args.plain else ' under the profiler'} "
                          f"{(cpu_after[name] - cpu[name]) / args.pods * 1000:.0f} ms per pod")
                for name in after:
                    _print(name, _diff(before[name], after[name]), args.pods, args.top)
        finally:
            bench.remove(cluster, node)
    finally:
        if args.keep_logs:
            for name in outs:
                if (cluster.root / "run" / f"{name}.log").exists():
                    shutil.copy(cluster.root / "run" / f"{name}.log", Path(args.keep_logs) / f"{name}.log")
        cluster.stop()
        import subprocess

        for bridge, lease_dir in leftovers:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
            shutil.rmtree(lease_dir, ignore_errors=True)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return _child(sys.argv[2], sys.argv[4:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=10, help="single pods measured (10)")
    parser.add_argument("--plain", action="store_true",
                        help="no profiler: only each operator's process CPU per pod (a before/after measure)")
    parser.add_argument("--keep-logs", metavar="DIR", help="copy the controller's and the bridge's logs to DIR")
    parser.add_argument("--top", type=int, default=25, help="functions listed (25)")
    run(parser.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
