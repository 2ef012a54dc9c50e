"""Cost of one pod event's InUse bookkeeping, with 10,000 and with 100,000 pods indexed.

The cluster: 500 PodNetworks and 2,000 PodNetworkAttachments (4 per network,
spread over 50 namespaces); every pod references the `default` PodNetwork plus
one other PodNetwork or attachment. One "pod event" is what the controller does
for a pod's watch event: the body read into the `Pod` view (as the kopf handler
does), then `inuse.Index.set_pod` (the pod changes networks) or `remove_pod` +
`set_pod` (deleted and re-created), alternating; the events are replayed over
random pods so caches cannot favour the small index.

The figure that matters is the ratio (100k / 10k): the index must not grow
per-event cost with the number of pods (the issue's bound is < 1.5). For scale,
the run also times one naive recount (scanning every pod for one network),
which is what a controller without a reverse index pays per decision.

    .venv/bin/python benchmarks/bench_controller_inuse.py [--events 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.kep import api, inuse

NETWORKS = 500
ATTACHMENTS = 2000
NAMESPACES = 50


def make_pod(i: int, rng: random.Random) -> dict[str, Any]:
    ns = f"ns{i % NAMESPACES}"
    if rng.random() < 0.5:
        other = {"podNetworkName": f"net{rng.randrange(NETWORKS)}", "interfaceName": "net1"}
    else:
        # attachments live in the pod's namespace: pna{k} with k % NAMESPACES == namespace index
        k = rng.randrange(ATTACHMENTS // NAMESPACES) * NAMESPACES + (i % NAMESPACES)
        other = {"podNetworkAttachmentName": f"pna{k}", "interfaceName": "net1"}
    nets = [{"podNetworkName": "default"}, other]
    return {"kind": "Pod", "metadata": {"name": f"pod{i}", "namespace": ns, "annotations": {
        constants.NETWORKS_ANNOTATION: json.dumps(nets)}}, "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"}}


def build(pods: int, seed: int = 1) -> tuple[inuse.Index, list[dict[str, Any]]]:
    rng = random.Random(seed)
    index = inuse.Index()
    for k in range(ATTACHMENTS):
        index.set_attachment(api.PodNetworkAttachment.model_validate({"kind": "PodNetworkAttachment", "metadata": {
            "name": f"pna{k}", "namespace": f"ns{k % NAMESPACES}"}, "spec": {"podNetworkName": f"net{k % NETWORKS}"}}))
    objs = [make_pod(i, rng) for i in range(pods)]
    for pod in objs:
        index.set_pod(Pod.model_validate(pod))
    return index, objs


def events(objs: list[dict[str, Any]], count: int, seed: int = 2) -> list[tuple[str, dict[str, Any]]]:
    """Pre-built events (reading pod bodies into the view is included in the measured cost)."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        i = rng.randrange(len(objs))
        moved = make_pod(i, rng)
        out.append(("delete" if n % 2 else "update", moved))
    return out


def per_event_ns(index: inuse.Index, evs: list[tuple[str, dict[str, Any]]]) -> float:
    start = time.perf_counter_ns()
    for kind, body in evs:
        pod = Pod.model_validate(body)
        if kind == "delete":
            index.remove_pod(inuse.key_of(pod))
        index.set_pod(pod)
    return (time.perf_counter_ns() - start) / len(evs)


def naive_recount_ns(objs: list[dict[str, Any]]) -> float:
    start = time.perf_counter_ns()
    target = inuse.podnetwork_ref("net7")
    sum(1 for pod in objs if target in inuse.pod_references(Pod.model_validate(pod)))
    return time.perf_counter_ns() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    results: dict[int, list[float]] = {}
    naive: dict[int, float] = {}
    for pods in (10_000, 100_000):
        index, objs = build(pods)
        evs = events(objs, args.events)
        per_event_ns(index, evs[: args.events // 10])  # warm-up
        results[pods] = [per_event_ns(index, evs) for _ in range(args.rounds)]
        naive[pods] = naive_recount_ns(objs)
        del index, objs, evs
    small, large = (statistics.median(results[n]) for n in (10_000, 100_000))
    print(f"pods indexed | median µs per pod event (over {args.rounds} rounds of {args.events}) | "
          "one naive recount (µs)")
    for pods, label in ((10_000, small), (100_000, large)):
        print(f"{pods:>12,} | {label / 1000:.2f} | {naive[pods] / 1000:,.0f}")
    print(f"ratio 100k/10k per event: {large / small:.2f}")
    print(f"naive recount / indexed event at 100k: {naive[100_000] / large:,.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
