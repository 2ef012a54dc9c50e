"""MultiNetworkPolicy enforcement in the agent: from a change to rules in place, the ADD's cost, the memory.

Issue 21's targets, measured:

1. **Change -> rules in place on a node** with 1,000 pods in the cluster, 110 on the node and 100
   policies. The decision (`Enforcer.reconcile` over a synthetic `PolicyState`: the world built,
   every policy's scope, the 110 local pods compiled and compared with what was last written) is
   timed after each of three kinds of change: a policy's rules, a remote pod's labels, a new peer
   pod. The writes are timed for real on a sample: the changed tables written with `nft` into
   network namespaces of this run, 8 at once (`Settings.concurrency`). The time from a change to
   its rules is the debounce (`quiet`, 50 ms after the last event) + the decision + the writes.
2. **An ADD with policies applying vs without**: the real agent (`tests/cni/agent_support.World`,
   through the shim, real bridge + host-local plugins, 2 attachments) with a policy selecting the
   pod, against the same agent with none selecting it, interleaved.
3. **RSS with 10,000 pods in the agent's policy state vs without**: two processes that import the
   agent, build 10,000 realistic Pod objects (as one list would deliver them), and feed them to a
   `PolicyState` or not, then drop the list.

Needs root, `nft` and the CNI plugins. Run:  sudo .venv/bin/python benchmarks/bench_policy_agent.py
(`--only add --adds 40`: the ADD's ratio alone, more ADDs; `--only decisions`: the decisions alone).
The memory alone (3., any user):             .venv/bin/python benchmarks/bench_policy_agent.py --rss-only
  [--before DIR]  # also the memory of the project's code in DIR (git archive REV | tar -x -C DIR)
Prints Markdown for docs/benchmarks.md. Removes every namespace, bridge and file it made.
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge.agent.delegates.cache import Attachment, Record, State  # noqa: E402
from bridge.agent.kube.watchcache import POD, POLICY  # noqa: E402
from bridge.agent.netns import nftables  # noqa: E402
from bridge.agent.policy import decide as enforcement  # noqa: E402
from bridge.agent.policy.apply import Enforcer, Settings  # noqa: E402
from bridge.agent.policy.state import KINDS, PolicyState  # noqa: E402
from podnetwork.ground import constants  # noqa: E402

NAD = "default/blue"
NAMESPACES = 20
APPS = 10


def pod_object(i: int, node: str) -> dict[str, Any]:
    ns = f"ns{i % NAMESPACES}"
    ip = f"10.{64 + i // 65536}.{(i // 256) % 256}.{i % 256}"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"pod-{i}", "namespace": ns, "uid": str(uuid.UUID(int=i)), "resourceVersion": str(1000 + i),
        "labels": {"app": f"app{i % APPS}", "tier": ("web", "db", "cache")[i % 3], "pod-template-hash": f"h{i % 50}"},
        "annotations": {
            constants.NPWG_NETWORKS_ANNOTATION: "blue",
            constants.NPWG_NETWORK_STATUS_ANNOTATION: json.dumps([
                {"name": "kubenet", "interface": "eth0", "ips": [f"172.16.{(i // 256) % 256}.{i % 256}"], "default": True},
                {"name": NAD, "interface": "net1", "ips": [ip], "mac": "0a:58:0a:00:00:01"}]),
        }, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"rs-{i % 50}", "uid": "x"}]},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/app:1.2.3",
                 "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                           {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
        "status": {"phase": "Running", "podIP": f"172.16.{(i // 256) % 256}.{i % 256}",
                   "conditions": [{"type": t, "status": "True"} for t in ("Ready", "ContainersReady", "PodScheduled")]}}


def policy_object(i: int) -> dict[str, Any]:
    ns = f"ns{i % NAMESPACES}"
    peers: list[dict[str, Any]] = [
        {"podSelector": {"matchLabels": {"app": f"app{(i + 1) % APPS}"}}},
        {"namespaceSelector": {"matchLabels": {"team": f"t{i % 4}"}}, "podSelector": {"matchLabels": {"tier": "web"}}},
        {"ipBlock": {"cidr": "10.200.0.0/16", "except": ["10.200.1.0/24"]}},
    ]
    return {"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy", "metadata": {
        "namespace": ns, "name": f"p{i}", "annotations": {constants.POLICY_FOR_NAD_ANNOTATION: NAD}},
        "spec": {"podSelector": {"matchLabels": {"app": f"app{i % APPS}"}}, "policyTypes": ["Ingress", "Egress"],
                 "ingress": [{"from": peers[: 1 + i % 3], "ports": [{"port": 8080 + i % 3}, {"port": "http"}]}],
                 "egress": [{"to": peers[:1], "ports": [{"port": "metrics"}]}]}}


def local_record(i: int, netns: str) -> Record:
    ip = f"10.{64 + i // 65536}.{(i // 256) % 256}.{i % 256}"
    return Record(f"c{i}", netns, "eth0", pod_namespace=f"ns{i % NAMESPACES}", pod_name=f"pod-{i}", complete=True,
                  attachments=[Attachment(NAD, "net1", {}, state=State.ATTACHED,
                                          result={"ips": [{"address": f"{ip}/16"}]})])


def q(xs: list[float], p: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(p) - 1] if len(xs) > 1 else xs[0]


async def decisions(iterations: int) -> dict[str, Any]:
    pods, local = 1000, 110
    state = PolicyState(node="this")
    objects = {"Pod": [pod_object(i, "this" if i < local else "other") for i in range(pods)],
               "Namespace": [{"kind": "Namespace", "metadata": {"name": f"ns{n}", "labels": {"team": f"t{n % 4}"}}}
                             for n in range(NAMESPACES)],
               "NetworkAttachmentDefinition": [{"kind": "NetworkAttachmentDefinition",
                                                "metadata": {"namespace": "default", "name": "blue"}}],
               constants.POLICY_KIND: [policy_object(i) for i in range(100)]}
    for kind in KINDS:
        state.listed(kind, objects.get(kind.name, []))

    async def written(netns: str, document: Any, *, timeout: float) -> None:
        pass

    enforcer = Enforcer(state, apply=written, remove=written)
    for i in range(local):
        enforcer.track(local_record(i, f"/nonexistent/{i}"))
    first = await enforcer.reconcile()
    selected = sum(1 for s in first if s.document is not None)
    results: dict[str, Any] = {"selected": selected, "local": local, "pods": pods}
    rng = random.Random(1)
    kinds = {
        "a policy's rules": lambda n: state.changed(POLICY, "MODIFIED", {**policy_object(n % 100), "spec": {
            **policy_object(n % 100)["spec"], "ingress": [{"ports": [{"port": 7000 + n}]}]}}),
        "a remote pod's labels": lambda n: state.changed(POD, "MODIFIED", {**pod_object(local + rng.randrange(pods - local), "other"),
                                                                           "metadata": {**pod_object(local + n, "other")["metadata"],
                                                                                        "labels": {"app": f"app{n % APPS}", "v": str(n)}}}),
        "a new peer pod": lambda n: state.changed(POD, "ADDED", pod_object(pods + n, "other")),
    }
    for name, change in kinds.items():
        times, steps = [], []
        for n in range(iterations):
            change(n)
            t0 = time.perf_counter()
            done = await enforcer.reconcile()
            times.append((time.perf_counter() - t0) * 1000)
            steps.append(len(done))
        results[name] = {"p50": q(times, 50), "p99": q(times, 99), "steps_p50": q(steps, 50), "steps_max": max(steps)}
    return results


async def writes(samples: int, document: dict[str, Any]) -> dict[str, float]:
    names = [f"pnbench-{uuid.uuid4().hex[:8]}" for _ in range(8)]
    for n in names:
        subprocess.run(["ip", "netns", "add", n], check=True)
    try:
        one, eight = [], []
        for _ in range(samples):
            t0 = time.perf_counter()
            await nftables.apply(f"/var/run/netns/{names[0]}", document)
            one.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            await asyncio.gather(*(nftables.apply(f"/var/run/netns/{n}", document) for n in names))
            eight.append((time.perf_counter() - t0) * 1000)
        return {"one_p50": q(one, 50), "one_p99": q(one, 99), "eight_p50": q(eight, 50), "eight_p99": q(eight, 99)}
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], check=False)


class Phases(logging.Handler):
    """The agent's "ADD container ... done in ... (phases)" lines: each ADD's spans (`request.Phases`)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.spans: dict[str, dict[str, float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if len(args) == 6 and args[0] == "ADD" and hasattr(args[5], "spans"):
            self.spans[str(args[1])] = {k: v * 1000 for k, v in args[5].spans.items()}


async def add_cost(iterations: int) -> dict[str, float]:
    from tests.cni.agent_support import World

    phases = Phases()
    agent_log = logging.getLogger("bridge.agent.daemon.agent")
    agent_log.addHandler(phases)
    agent_log.setLevel(logging.INFO)

    bin_dirs = [Path("/usr/lib/cni"), Path("/opt/cni/bin")]
    w = World([d for d in bin_dirs if d.is_dir()])
    try:
        w.nad("blue", w.network("blue", 1))
        state = PolicyState(node="this")
        isolate = {"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy", "metadata": {
            "namespace": "default", "name": "isolate", "annotations": {constants.POLICY_FOR_NAD_ANNOTATION: "default/blue"}},
            "spec": {"podSelector": {"matchLabels": {"isolated": "yes"}},
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": 80}]}]}}
        for kind in KINDS:
            state.listed(kind, {"Namespace": [{"kind": "Namespace", "metadata": {"name": "default"}}],
                                "NetworkAttachmentDefinition": [w.nad("blue", w.network("blue", 1))],
                                constants.POLICY_KIND: [isolate]}.get(kind.name, []))
        await w.start_agent(enforcer=Enforcer(state, Settings()))
        times: dict[str, list[float]] = {"with": [], "without": []}
        waited: list[float] = []
        netns = w.make_netns()
        for n in range(iterations * 2):
            which = ("with", "without")[(n + n // 2) % 2]
            name = f"p{n}"
            w.objects.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": "default", "uid": f"u{n}",
                "labels": {"isolated": "yes" if which == "with" else "no"},
                "annotations": {constants.NPWG_NETWORKS_ANNOTATION: "blue"}}})
            t0 = time.perf_counter()
            answer = await w.cni("ADD", f"c{n}", netns, name)
            elapsed = (time.perf_counter() - t0) * 1000
            assert answer.returncode == 0, answer.stdout
            assert await nftables.exists(netns) == (which == "with")
            answer = await w.cni("DEL", f"c{n}", netns, name)
            assert answer.returncode == 0, answer.stdout
            if n >= 4:
                times[which].append(elapsed)
                if which == "with":
                    waited.append(phases.spans.get(f"c{n}", {}).get("policy", float("nan")))
        return {**{k: statistics.median(v) for k, v in times.items()}, "policy_phase": statistics.median(waited)}
    finally:
        agent_log.removeHandler(phases)
        await w.cleanup()


RSS_PROBE = """
import gc, json, sys, tracemalloc
sys.path.insert(0, {root!r})
import bridge.agent.daemon.agent, bridge.agent.policy.apply
from bridge.agent.policy.apply import Enforcer
from bridge.agent.policy.state import PolicyState
from bridge.agent.kube.watchcache import NAD, POD, PODNETWORK, POLICY
sys.path.insert(0, {bench!r})
from bench_policy_agent import pod_object, podnetwork_object, policy_object
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1])
before = rss()
items = [pod_object(i, "other") for i in range(10000)]
state = PolicyState(node="this")
if {trace}:
    gc.collect()
    tracemalloc.start()
if {feed}:
    state.listed(POD, items)
del items
if {passed}:  # a pass with a policy, its world kept for the next (`Enforcer.last`)
    state.listed(NAD, [{{"metadata": {{"namespace": "default", "name": "blue"}}}}])
    state.listed(PODNETWORK, [podnetwork_object()])
    state.listed(POLICY, [policy_object(0)])
    enforcer = Enforcer(state)
    enforcer.decide([])
    assert enforcer.last is not None
gc.collect()
kept = tracemalloc.get_traced_memory()[0] if {trace} else 0
print(json.dumps({{"before": before, "after": rss(), "pods": len(state.pods), "kept": kept}}))
"""


def podnetwork_object() -> dict[str, Any]:
    """The bridge's PodNetwork `blue`, backed by NAD `NAD`: every pod's network-status names the NAD,
    so a pass keys every pod's interface by the PodNetwork (the most a pass keeps per pod)."""
    namespace, _, name = NAD.partition("/")
    return {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "blue"},
            "spec": {"enabled": True, "provider": "multinetwork.x-k8s.io/npwg-bridge", "parametersRefs": [
                {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": name,
                 "namespace": namespace}]}}


def rss(root: Path = ROOT) -> dict[str, Any]:
    """RSS of a process that fed 10,000 pods to a `PolicyState`, of one that did not, and of one that
    also ran a pass with a policy (the NAD backed by a PodNetwork: every pod keyed) and kept its world
    as the enforcer does; and what the state holds (tracemalloc, in other processes: tracing changes
    the RSS). `root`: the project's code to measure (another tree: `git archive REV | tar -x -C DIR`)."""
    out = {}
    for name, feed, passed, trace in (("without", False, False, False), ("with", True, False, False),
                                      ("traced", True, False, True), ("pass", True, True, False),
                                      ("pass traced", True, True, True)):
        code = RSS_PROBE.format(root=str(root), bench=str(Path(__file__).parent), feed=feed, passed=passed,
                                trace=trace)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        out[name] = json.loads(done.stdout)
    return out


def rss_line(r: dict[str, Any]) -> str:
    with_, without, passed = r["with"], r["without"], r["pass"]

    def grow(arm: dict[str, Any]) -> float:
        return ((arm["after"] - arm["before"]) - (without["after"] - without["before"])) / 1024

    return (f"RSS: {without['after'] / 1024:.1f} MB without the pods, {with_['after'] / 1024:.1f} MB with "
            f"{with_['pods']} pods in the policy state: +{grow(with_):.1f} MB; the state holds "
            f"{r['traced']['kept'] / 2**20:.1f} MB (tracemalloc). After a pass with a policy (every pod keyed "
            f"by a PodNetwork), its world kept for the next: +{grow(passed):.1f} MB; the state and that world "
            f"hold {r['pass traced']['kept'] / 2**20:.1f} MB "
            f"({(r['pass traced']['kept'] - r['traced']['kept']) / with_['pods']:.0f} bytes a pod more).")


async def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=30, help="changes of each kind timed (default 30)")
    parser.add_argument("--adds", type=int, default=20, help="ADDs of each arm, after 2 of each to warm up (default 20)")
    parser.add_argument("--only", choices=["decisions", "add"], help="measure only this")
    parser.add_argument("--rss-only", action="store_true",
                        help="the memory alone (3.): no root, nft or plugins needed")
    parser.add_argument("--before", type=Path, metavar="DIR",
                        help="with --rss-only: also the memory of the project's code in DIR "
                             "(git archive REV | tar -x -C DIR)")
    args = parser.parse_args()
    if args.rss_only:
        print(rss_line(rss()))
        if args.before:
            print(f"Before ({args.before}): {rss_line(rss(args.before.resolve()))}")
        return
    if args.only == "add":
        a = await add_cost(args.adds)
        print(f"ADD (2 attachments, through the shim): {a['without']:.1f} ms with no policy selecting the pod, "
              f"{a['with']:.1f} ms with one (ratio {a['with'] / a['without']:.2f}); the ADD's \"policy\" phase "
              f"(its wait for the table) {a['policy_phase']:.1f} ms.")
        return
    d = await decisions(args.decisions)
    if args.only == "decisions":
        for name in ("a policy's rules", "a remote pod's labels", "a new peer pod"):
            x = d[name]
            print(f"| {name} | {x['p50']:.1f} ms | {x['p99']:.1f} ms | {x['steps_p50']:.0f}, {x['steps_max']} |")
        return
    st = PolicyState(node="this")
    for kind in KINDS:
        st.listed(kind, {"Pod": [pod_object(i, "this" if i < 110 else "other") for i in range(1000)],
                         "NetworkAttachmentDefinition": [{"kind": "NetworkAttachmentDefinition",
                                                          "metadata": {"namespace": "default", "name": "blue"}}],
                         constants.POLICY_KIND: [policy_object(i) for i in range(100)]}.get(kind.name, []))
    enf = Enforcer(st)
    for i in range(110):
        enf.track(local_record(i, f"/x/{i}"))
    docs = [s.document for s in first_steps(enf) if s.document is not None]
    state_doc = max(docs, key=lambda doc: len(json.dumps(doc)))
    w = await writes(30, state_doc)
    a = await add_cost(args.adds)
    r = rss()
    rules = sum(1 for c in state_doc["nftables"] if "rule" in c.get("add", {}))
    print(f"## CNI agent: MultiNetworkPolicy on the node (issue 21)\n\n{platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}; `sudo .venv/bin/python benchmarks/bench_policy_agent.py`\n")
    print(f"Decision: {d['pods']} pods, {d['local']} on the node ({d['selected']} selected by some policy), 100 policies.\n")
    print("| change | decision p50 | decision p99 | tables changed (median, max) |\n|---|---|---|---|")
    for name in ("a policy's rules", "a remote pod's labels", "a new peer pod"):
        x = d[name]
        print(f"| {name} | {x['p50']:.1f} ms | {x['p99']:.1f} ms | {x['steps_p50']:.0f}, {x['steps_max']} |")
    print(f"\nWriting the largest table of that world ({rules} rules) with nft: one {w['one_p50']:.1f} ms p50 / "
          f"{w['one_p99']:.1f} ms p99; 8 at once {w['eight_p50']:.1f} / {w['eight_p99']:.1f} ms.\n")
    print(f"ADD (2 attachments, through the shim): {a['without']:.1f} ms with no policy selecting the pod, "
          f"{a['with']:.1f} ms with one (ratio {a['with'] / a['without']:.2f}); the ADD's \"policy\" phase "
          f"(its wait for the table) {a['policy_phase']:.1f} ms.\n")
    print(rss_line(r))


def first_steps(enf: Enforcer) -> list[enforcement.Step]:
    world = enf.world()
    from bridge.policy import scope

    return enforcement.decide(world, scope.scopes(world), list(enf.locals.values()), {})


if __name__ == "__main__":
    asyncio.run(main())
