"""Benchmark: the extender's /filter against a baseline that only speaks the protocol.

Both endpoints live in the same app, served by uvicorn on 127.0.0.1, and receive
the same body: a pod with 4 networks (2 PodNetworks, 2 PodNetworkAttachments)
and 5,000 node names (`nodeCacheCapable: true`). `/baseline/filter` parses the
body exactly like `/filter` and passes every node; `/filter` also runs the
decision over the cache snapshot. The ratio of their median times is the cost
of the decision on top of the protocol; the issue asks for it to stay under 1.5.
Two scenarios, each against its own baseline in the same run:
- "one third lack a network": of the cached nodes, a third have no annotation,
  a third offer all four networks, a third offer two of them and fail, so the
  reply also carries 1,667 FailedNodes messages the baseline never writes;
- "every node offers them": half without the annotation, half listing all four,
  so both replies have the same size and the ratio is the decision's own cost.
As kube-scheduler does (it starts each search at a rotating node index), the
candidates come in a different rotation from one round to the next: nothing may
depend on a request repeating the last one's list.

Run:  .venv/bin/python benchmarks/bench_extender.py [--nodes 5000] [--rounds 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import threading
import time
import timeit
from typing import Any

import httpx
import uvicorn

from podnetwork.ground.constants import NETWORKS_ANNOTATION, NODE_PODNETWORKS_ANNOTATION
from scheduler_plugin import app as app_mod
from scheduler_plugin import cache as cache_mod
from scheduler_plugin import decision, wire
from scheduler_plugin.settings import Settings

NETWORKS = ["blue", "green", "red", "yellow"]
#: Distinct orders of the candidate list, used in turn.
ROTATIONS = 7


def build_cache(nodes: int, some_fail: bool = True) -> cache_mod.Cache:
    c = cache_mod.Cache()
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    for name in ["default", *NETWORKS]:
        c.upsert({"kind": "PodNetwork", "metadata": {"name": name}, "status": ready})
    for name in NETWORKS[2:]:
        c.upsert({"kind": "PodNetworkAttachment", "metadata": {"name": f"{name}-fast", "namespace": "bench"},
                  "spec": {"podNetworkName": name}, "status": ready})
    offers = [None, json.dumps(NETWORKS), json.dumps(NETWORKS[:2])] if some_fail else [None, json.dumps(NETWORKS)]
    items = []
    for i in range(nodes):
        offer = offers[i % len(offers)]
        annotations = {} if offer is None else {NODE_PODNETWORKS_ANNOTATION: offer}
        items.append({"metadata": {"name": f"node-{i:05d}", "annotations": annotations}})
    c.replace("Node", items)
    c.mark_synced()
    return c


def build_body(nodes: int, rotation: int = 0) -> bytes:
    networks = [
        {"podNetworkName": "blue", "interfaceName": "net1"},
        {"podNetworkName": "green", "interfaceName": "net2"},
        {"podNetworkAttachmentName": "red-fast", "interfaceName": "net3"},
        {"podNetworkAttachmentName": "yellow-fast", "interfaceName": "net4"},
    ]
    pod = {
        "metadata": {"name": "bench-0", "namespace": "bench",
                     "annotations": {NETWORKS_ANNOTATION: json.dumps(networks)}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulerName": "default-scheduler"},
        "status": {"phase": "Pending"},
    }
    names = [f"node-{i:05d}" for i in range(nodes)]
    names = names[rotation:] + names[:rotation]
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(client: httpx.Client, path: str, body: bytes) -> float:
    started = time.perf_counter()
    response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


def breakdown(cache: cache_mod.Cache, body: bytes) -> dict[str, float]:
    """In-process milliseconds of each step, best of several: where the difference comes from."""
    args = wire.ExtenderArgs.model_validate_json(body)
    names = args.candidate_names()
    snap = cache.snapshot()
    result = decision.filter_nodes(args.pod, names, snap)
    everything = decision.FilterResult(passed=names)

    def best(fn: Any) -> float:
        return min(timeit.repeat(fn, number=50, repeat=7)) / 50 * 1000

    return {
        "parse_ms": best(lambda: wire.ExtenderArgs.model_validate_json(body).candidate_names()),
        "decision_ms": best(lambda: decision.filter_nodes(args.pod, names, snap)),
        "reply_ms": best(lambda: app_mod._reply(args, result).to_json()),
        "baseline_reply_ms": best(lambda: app_mod._reply(args, everything).to_json()),
        "reply_bytes": len(app_mod._reply(args, result).to_json()),
        "baseline_reply_bytes": len(app_mod._reply(args, everything).to_json()),
    }


def run(nodes: int, rounds: int, some_fail: bool) -> dict[str, Any]:
    cache = build_cache(nodes, some_fail)
    body = build_body(nodes)
    bodies = [build_body(nodes, nodes * k // ROTATIONS) for k in range(ROTATIONS)]
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        app_mod.create_app(cache, Settings(baseline_endpoint=True)),
        host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off",
    ))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            reply = client.post("/filter", content=body).json()
            passed, failed = len(reply["NodeNames"]), len(reply["FailedNodes"])
            for i in range(max(5, rounds // 10)):  # warm up both paths
                measure(client, "/filter", bodies[i % ROTATIONS])
                measure(client, "/baseline/filter", bodies[i % ROTATIONS])
            times: dict[str, list[float]] = {"/filter": [], "/baseline/filter": []}
            for i in range(rounds):  # interleaved, so drift hits both alike
                times["/filter"].append(measure(client, "/filter", bodies[i % ROTATIONS]))
                times["/baseline/filter"].append(measure(client, "/baseline/filter", bodies[i % ROTATIONS]))
    finally:
        server.should_exit = True
        thread.join(10)
    filt, base = statistics.median(times["/filter"]), statistics.median(times["/baseline/filter"])
    parts = breakdown(cache, body)
    return {
        "scenario": "one third lack a network" if some_fail else "every node offers them",
        "nodes": nodes, "rounds": rounds, "body_bytes": len(body), "passed": passed, "failed": failed,
        "filter_median_ms": filt * 1000, "baseline_median_ms": base * 1000,
        "filter_calls_per_s": 1 / filt, "baseline_calls_per_s": 1 / base, "ratio": filt / base,
        **parts,
        "python": platform.python_version(), "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3,
                        help="whole runs per scenario; the run with the median ratio is reported")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = []
    for some_fail in (True, False):
        runs = sorted((run(args.nodes, args.rounds, some_fail) for _ in range(args.repeats)),
                      key=lambda r: r["ratio"])
        results.append({**runs[len(runs) // 2], "ratios": [round(r["ratio"], 2) for r in runs]})
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"POST /filter, {args.nodes} node names, a pod with 4 networks, {args.rounds} interleaved rounds, "
          f"uvicorn on 127.0.0.1 (Python {results[0]['python']}, {results[0]['machine']}, "
          f"{os.cpu_count()} CPUs, load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after)")
    print()
    print("| scenario | nodes passed / failed | baseline calls/s | /filter calls/s | ratio | ratios of all runs |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for r in results:
        print(f"| {r['scenario']} | {r['passed']} / {r['failed']} | {r['baseline_calls_per_s']:.0f} | "
              f"{r['filter_calls_per_s']:.0f} | {r['ratio']:.2f} | {', '.join(map(str, r['ratios']))} |")
    print()
    print("In-process, best of 7 (ms): where the difference comes from")
    print()
    print("| scenario | parse | decision | reply (bytes) | baseline reply (bytes) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['scenario']} | {r['parse_ms']:.3f} | {r['decision_ms']:.3f} | "
              f"{r['reply_ms']:.3f} ({r['reply_bytes']}) | {r['baseline_reply_ms']:.3f} ({r['baseline_reply_bytes']}) |")


if __name__ == "__main__":
    main()
