"""The policy enforcer's pass on a node: with no MultiNetworkPolicy at all, and with one.

The agent keeps every pod of the cluster for its MultiNetworkPolicies (a cluster-wide watch),
and runs a pass after each change: a pod's labels or addresses, an ADD, a DEL. Most clusters
have no MultiNetworkPolicy. Measured, in process (`Enforcer.decide` over a synthetic
`PolicyState`, 110 containers on the node, as kubelet's default `maxPods`):

- **no policy**: the cluster has none (the pass says "no table anywhere" without compiling);
- **one policy, selecting none (baseline)**: the same cluster with one policy that selects none
  of its pods (another namespace), a pass with nothing changed since the last: what a pass cost
  with no policy before it was told apart;
- **one policy, a pod changed**: the same, each pass after a remote pod's labels changed (the
  pass that follows a pod event anywhere in the cluster).

Run:  .venv/bin/python benchmarks/bench_policy_pass.py [--pods 1000 10000] [--passes 30]
      [--before DIR]   # also every arm of the project's code in DIR (git archive REV | tar -x -C DIR)
Prints Markdown for docs/benchmarks.md. Needs no root: nothing is written to a kernel.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCAL = 110


def _objects(pods: int, with_policy: bool) -> list[dict[str, Any]]:
    from tests.unit.agent.test_policy_enforcement import BASE, DENY_INGRESS, namespace, pod, policy

    objs: list[dict[str, Any]] = [*BASE, namespace("quiet")]
    objs += [pod("db", f"p-{i}", {"app": f"a{i % 50}"}, ip=f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
                 node="here" if i < LOCAL else "elsewhere") for i in range(pods)]
    if with_policy:  # selects pods labelled app=db in namespace "quiet": there are none
        objs.append(policy("quiet", "deny", DENY_INGRESS))
    return objs


ARMS = {"none": "no policy", "policy": "one policy, selecting none (baseline)",
        "changed": "one policy, a pod changed"}


def measure(pods: int, passes: int, arm: str) -> float:
    """Median seconds of one pass's decision, every local container due."""
    from bridge.agent.kube.watchcache import POD
    from bridge.agent.policy.apply import Enforcer
    from tests.unit.agent.test_policy_enforcement import FAST, Kernel, pod, record, state_with

    state = state_with(*_objects(pods, arm != "none"))
    kernel = Kernel()
    enforcer = Enforcer(state, FAST, apply=kernel.apply, remove=kernel.remove)
    for i in range(LOCAL):
        enforcer.track(record(f"c{i}", "db", f"p-{i}", ip=f"10.0.{i >> 8}.{i & 255}"))
    asyncio.run(enforcer.reconcile())  # the tables (none) as written: later passes write nothing
    times = []
    for n in range(passes):
        if arm == "changed":  # a remote pod's labels, back and forth
            state.changed(POD, "MODIFIED", pod("db", f"p-{LOCAL}", {"app": f"a{n % 2}"}, ip="10.0.0.110",
                                               node="elsewhere"))
        started = time.perf_counter()
        steps = enforcer.decide(enforcer.due())
        times.append(time.perf_counter() - started)
        assert steps == [], "a steady pass writes nothing"
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, nargs="+", default=[1000, 10000], help="pods in the cluster")
    parser.add_argument("--passes", type=int, default=30, help="passes timed per arm (default: %(default)s)")
    parser.add_argument("--before", type=Path, help="also every arm with the code in this tree")
    parser.add_argument("--one", nargs=2, metavar=("PODS", "ARM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(int(args.one[0]), args.passes, args.one[1])))
        return

    def run(pods: int, arm: str, code: Path | None = None) -> float:
        env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{ROOT}" if code else str(ROOT)}
        done = subprocess.run([sys.executable, __file__, "--one", str(pods), arm, "--passes", str(args.passes)],
                              capture_output=True, text=True, check=True, env=env, cwd=code or ROOT)
        return float(json.loads(done.stdout))

    print(f"A pass of the policy enforcer, {LOCAL} containers on the node; median of {args.passes} "
          f"passes, each arm in a fresh process (Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} before)\n")
    now = {(pods, arm): run(pods, arm) for pods in args.pods for arm in ARMS}
    print(f"| pods in the cluster | {ARMS['none']} | {ARMS['policy']} | ratio | {ARMS['changed']} | ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for pods in args.pods:
        none, one, changed = (now[pods, arm] for arm in ARMS)
        print(f"| {pods:,} | {none * 1e3:.3f} ms | {one * 1e3:.2f} ms | **{none / one:.4f}** | "
              f"{changed * 1e3:.2f} ms | **{changed / one:.2f}** |")
    if args.before:
        # One arm after the other, now then before, so that both see the same load.
        before = {(pods, arm): run(pods, arm, args.before.resolve()) for pods in args.pods for arm in ARMS}
        print(f"\nAgainst the code in {args.before} (load average {os.getloadavg()[0]:.2f} after):\n")
        print("| pods in the cluster | pass | now | before | ratio to before |")
        print("| ---: | --- | ---: | ---: | ---: |")
        for pods in args.pods:
            for arm, name in ARMS.items():
                a, b = now[pods, arm], before[pods, arm]
                print(f"| {pods:,} | {name} | {a * 1e3:.3f} ms | {b * 1e3:.3f} ms | **{a / b:.4f}** |")


if __name__ == "__main__":
    main()
