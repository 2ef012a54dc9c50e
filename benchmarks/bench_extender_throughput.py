"""Benchmark: pods per second through the extender, driven the way kube-scheduler drives it.

kube-scheduler (v1.36, extender `nodeCacheCapable: true`) sends one `POST /filter`
per pod with the names of the nodes that passed its own filters, about 500 of them
(percentageOfNodesToScore of a 5,000-node cluster), starting each search at a
rotating node index; its HTTP client keeps connections alive, and while pods are
bound in the background several requests may be in flight. Here:

- 5,000 nodes in the extender's cache; four PodNetworks, each offered by half of
  the nodes (node i offers network k when bit k of i is set), so a pod naming
  one network passes about half its candidates and one naming two a quarter;
- pods name one or two of those networks, in turn; each request carries 500
  candidate names, a window of the 5,000 that starts one window further each pod;
- the extender runs in its own process (uvicorn, as `podnetwork scheduler-extender`
  serves it, with the settings under test); `--concurrency` clients, each on one
  kept-alive connection, post pods back to back (a small HTTP/1.1 client on raw
  asyncio streams, so the client's own cost stays small beside the server's);
- the baseline is the same server answering "all pass" at `/baseline/filter`
  (same parsing, same reply code, every candidate passes). Short batches of pods
  (40 by default: tens of milliseconds) go to /filter and to the baseline
  alternately, so a burst of other work on a shared machine hits both alike; the
  figure is the ratio of their throughputs (pods/s) in adjacent batches, median
  over the pairs (150 by default), with the range of the middle half.

With `--prioritize`, each pod also gets a `POST /prioritize` after its filter (what
deploy/scheduler configured), against filter alone: the cost of the second call.
With `--variants`, the server settings are compared: the HTTP parser (h11,
httptools), access logs, the event loop (asyncio, uvloop).

Run:  .venv/bin/python benchmarks/bench_extender_throughput.py [--variants] [--prioritize] [--before DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import timeit
from typing import Any

from podnetwork.ground.constants import NETWORKS_ANNOTATION, NODE_PODNETWORKS_ANNOTATION

NODES = 5000
CANDIDATES = 500
NETWORKS = ["blue", "green", "red", "yellow"]
NODE_ANNOTATION = NODE_PODNETWORKS_ANNOTATION


def build_cache(nodes: int) -> Any:
    from scheduler_plugin import cache as cache_mod

    c = cache_mod.Cache()
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    for name in ["default", *NETWORKS]:
        c.upsert({"kind": "PodNetwork", "metadata": {"name": name}, "status": ready})
    items = []
    for i in range(nodes):
        offered = [n for k, n in enumerate(NETWORKS) if i >> k & 1]
        annotations = {NODE_ANNOTATION: json.dumps(offered)} if offered else {}
        items.append({"metadata": {"name": f"node-{i:05d}", "annotations": annotations}})
    c.replace("Node", items)
    c.mark_synced()
    return c


def build_bodies(nodes: int, candidates: int, count: int = 40) -> list[bytes]:
    """`count` distinct pod requests: windows of candidates, pods with one or two networks."""
    names = [f"node-{i:05d}" for i in range(nodes)]
    bodies = []
    for p in range(count):
        start = (p * candidates) % nodes
        window = (names + names)[start:start + candidates]
        nets = [{"podNetworkName": NETWORKS[p % 4], "interfaceName": "net1"}]
        if p % 2:
            nets.append({"podNetworkName": NETWORKS[(p + 1) % 4], "interfaceName": "net2"})
        pod = {
            "metadata": {"name": f"bench-{p}", "namespace": "bench", "uid": f"uid-{p}",
                         "annotations": {NETWORKS_ANNOTATION: json.dumps(nets)}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {}}],
                     "schedulerName": "podnetwork-scheduler", "nodeName": ""},
            "status": {"phase": "Pending"},
        }
        bodies.append(json.dumps({"Pod": pod, "Nodes": None, "NodeNames": window}).encode())
    return bodies


# --- the server, in its own process ------------------------------------------------------------


def serve(port: int, http: str, loop: str, access_log: bool) -> None:
    import uvicorn

    from scheduler_plugin import app as app_mod
    from scheduler_plugin.settings import Settings

    application = app_mod.create_app(build_cache(NODES), Settings(baseline_endpoint=True))
    uvicorn.run(application, host="127.0.0.1", port=port, http=http, loop=loop,  # type: ignore[arg-type]
                access_log=access_log, log_level="info" if access_log else "warning", lifespan="off")


def start_server(http: str, loop: str, access_log: bool, code: str | None = None
                 ) -> tuple[subprocess.Popen[bytes], int]:
    """The extender in its own process; with `code`, the project's packages are taken from
    that directory (e.g. an older checkout) instead of this one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    cmd = [sys.executable, __file__, "--serve", str(port), "--http", http, "--loop", loop]
    if access_log:
        cmd.append("--access-log")
    # The access log goes where kube's container logs would: a pipe someone reads.
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = code
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the extender did not start")


# --- the client ---------------------------------------------------------------------------------


class Connection:
    """One kept-alive HTTP/1.1 connection; Content-Length bodies only (what uvicorn answers)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        return cls(reader, writer)

    async def post(self, path: str, body: bytes) -> bytes:
        self.writer.write(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Accept: application/json\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(body)))
        self.writer.write(body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        reply = await self.reader.readexactly(length)
        if status != 200:
            raise RuntimeError(f"{path}: HTTP {status}: {reply[:200]!r}")
        return reply

    def close(self) -> None:
        self.writer.close()


async def batch(conns: list[Connection], paths: list[str], bodies: list[bytes], pods: int) -> float:
    """Pods per second: `pods` pods over the connections, each pod one call per path."""
    next_pod = iter(range(pods))

    async def worker(conn: Connection) -> None:
        for p in next_pod:
            for path in paths:
                await conn.post(path, bodies[p % len(bodies)])

    started = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    return pods / (time.perf_counter() - started)


async def compare(port: int | dict[str, int], arms: dict[str, list[str]], bodies: list[bytes], pods: int,
                  batches: int, concurrency: int) -> dict[str, list[float]]:
    """Pods/s of each arm, batch after batch, alternating the order. `port` may map an arm
    to the port of its own server (the same paths on two versions of the code)."""
    ports = port if isinstance(port, dict) else dict.fromkeys(arms, port)
    pools = {p: [await Connection.open(p) for _ in range(concurrency)] for p in set(ports.values())}
    try:
        for name, paths in arms.items():  # warm up every path
            await batch(pools[ports[name]], paths, bodies, max(40, pods // 5))
        rates: dict[str, list[float]] = {name: [] for name in arms}
        for i in range(batches):
            order = list(arms.items()) if i % 2 == 0 else list(arms.items())[::-1]
            for name, paths in order:
                rates[name].append(await batch(pools[ports[name]], paths, bodies, pods))
        return rates
    finally:
        for conns in pools.values():
            for c in conns:
                c.close()


def spread(values: list[float]) -> str:
    """The middle half of `values` (first to third quartile)."""
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.2f} - {q3:.2f}"


def ratios(rates: dict[str, list[float]], arm: str, base: str) -> list[float]:
    return [a / b for a, b in zip(rates[arm], rates[base], strict=True)]


def breakdown(bodies: list[bytes]) -> dict[str, float]:
    """In-process microseconds of each step of one /filter call (best of 7)."""
    from scheduler_plugin import app as app_mod
    from scheduler_plugin import decision, wire

    cache = build_cache(NODES)
    snap = cache.snapshot()
    body = bodies[1]
    args = wire.ExtenderArgs.model_validate_json(body)
    names = args.candidate_names()
    result = decision.filter_nodes(args.pod, names, snap)
    everything = decision.FilterResult(passed=names)

    def best(fn: Any) -> float:
        return min(timeit.repeat(fn, number=200, repeat=7)) / 200 * 1e6

    return {
        "parse_us": best(lambda: wire.ExtenderArgs.model_validate_json(body).candidate_names()),
        "decision_us": best(lambda: decision.filter_nodes(args.pod, names, snap)),
        "reply_us": best(lambda: app_mod._reply(args, result).to_json()),
        "baseline_reply_us": best(lambda: app_mod._reply(args, everything).to_json()),
        "body_bytes": len(body),
        "reply_bytes": len(app_mod._reply(args, result).to_json()),
        "baseline_reply_bytes": len(app_mod._reply(args, everything).to_json()),
        "passed": len(result.passed),
        "failed": len(result.failed),
    }


def run_setting(http: str, loop: str, access_log: bool, arms: dict[str, list[str]], args: argparse.Namespace,
                bodies: list[bytes]) -> dict[str, list[float]]:
    proc, port = start_server(http, loop, access_log)
    try:
        return asyncio.run(compare(port, arms, bodies, args.pods, args.batches, args.concurrency))
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=40, help="pods per batch (default: %(default)s)")
    parser.add_argument("--batches", type=int, default=150, help="batches per arm (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=4, help="connections, pods in flight (default: %(default)s)")
    parser.add_argument("--http", default="h11", choices=["h11", "httptools"])
    parser.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--access-log", action="store_true")
    parser.add_argument("--variants", action="store_true", help="also compare server settings")
    parser.add_argument("--prioritize", action="store_true", help="also measure filter + prioritize")
    parser.add_argument("--before", metavar="DIR",
                        help="also run the extender from the project's code in DIR (e.g. "
                        "`git archive REV | tar -x -C DIR`), interleaved with this one")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.http, args.loop, args.access_log)
        return
    bodies = build_bodies(NODES, CANDIDATES)
    load_before = os.getloadavg()[0]
    print(f"{NODES} nodes, {CANDIDATES} candidates per pod, {args.concurrency} kept-alive connections, "
          f"{args.batches} batches of {args.pods} pods per arm, alternated (Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {load_before:.2f} before)")
    print()
    parts = breakdown(bodies)
    print("In-process, one pod naming two networks (best of 7): "
          + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in parts.items()))
    print()
    settings = [(args.http, args.loop, args.access_log)]
    if args.variants:
        settings = [("h11", "asyncio", True), ("h11", "asyncio", False)]
        # Not dependencies of the project: compared when installed (pip install httptools uvloop).
        if importlib.util.find_spec("httptools"):
            settings.append(("httptools", "asyncio", False))
            if importlib.util.find_spec("uvloop"):
                settings.append(("httptools", "uvloop", False))
    arms = {"baseline": ["/baseline/filter"], "filter": ["/filter"]}
    print("| server (http, loop, access log) | baseline pods/s | /filter pods/s | ratio, median | ratio, middle half |")
    print("| --- | ---: | ---: | ---: | --- |")
    for http, loop, access_log in settings:
        rates = run_setting(http, loop, access_log, arms, args, bodies)
        r = ratios(rates, "filter", "baseline")
        print(f"| {http}, {loop}, {'on' if access_log else 'off'} | {statistics.median(rates['baseline']):.0f} | "
              f"{statistics.median(rates['filter']):.0f} | **{statistics.median(r):.2f}** | "
              f"{spread(r)} |", flush=True)
    if args.prioritize:
        print()
        arms = {"filter": ["/filter"], "filter+prioritize": ["/filter", "/prioritize"]}
        rates = run_setting(args.http, args.loop, args.access_log, arms, args, bodies)
        r = ratios(rates, "filter+prioritize", "filter")
        print("| calls per pod | pods/s | ratio to filter alone |")
        print("| --- | ---: | ---: |")
        print(f"| filter | {statistics.median(rates['filter']):.0f} | 1.00 |")
        print(f"| filter + prioritize | {statistics.median(rates['filter+prioritize']):.0f} | "
              f"**{statistics.median(r):.2f}** ({spread(r)}) |")
    if args.before:
        print()
        old, old_port = start_server(args.http, args.loop, args.access_log, args.before)
        new, new_port = start_server(args.http, args.loop, args.access_log)
        try:
            arms = {"before: baseline": ["/baseline/filter"], "before: filter": ["/filter"],
                    "after: baseline": ["/baseline/filter"], "after: filter": ["/filter"]}
            port_of = {name: old_port if name.startswith("before") else new_port for name in arms}
            rates = asyncio.run(compare(port_of, arms, bodies, args.pods, args.batches, args.concurrency))
        finally:
            for proc in (old, new):
                proc.terminate()
                proc.wait(10)
        print("| code | baseline pods/s | /filter pods/s | ratio, median | ratio, middle half |")
        print("| --- | ---: | ---: | ---: | --- |")
        for code in ("before", "after"):
            r = ratios(rates, f"{code}: filter", f"{code}: baseline")
            print(f"| {code} | {statistics.median(rates[f'{code}: baseline']):.0f} | "
                  f"{statistics.median(rates[f'{code}: filter']):.0f} | **{statistics.median(r):.2f}** | "
                  f"{spread(r)} |")
    print()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
