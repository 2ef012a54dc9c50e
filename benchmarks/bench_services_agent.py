"""The agent's Services reconciler: from an EndpointSlice change to the rules in every client pod of
the node (issue 22's target: p99 <= 1 s with 100 Services and 1,000 endpoints).

`--pods` client pods (default 20), each a network namespace of the benchmark with `net1` (a veth end
with its address, its peer in the same namespace), recorded as attached to the PodNetwork's NAD. A `ServiceState` holds
`--services` Services on that PodNetwork (a ClusterIP, a TCP and a UDP port each) and one
EndpointSlice per Service, `--endpoints` endpoints in all (default 100 and 1,000: 10 each). The
real `servicer.ClusterIPs` runs on them with its default settings (debounce, 8 writes at once):
real nft transactions and `ip route` in each namespace, real conntrack flushes.

Each iteration changes one slice (an endpoint replaced by a new address: one UDP pair leaves, so
each pod also flushes its conntrack entries) through `ServiceState.changed`, as the watch
delivers it, and measures until the reconciler is idle with every pod's new table written. It
is done twice per iteration, alternating: as the agent does it (each pod's table changed in
place, `clusterips.update`: the changed Service's chains only, no route listing when the routes
stay) and as it did before (each pod's whole table replaced, its routes listed: the reconciler's
`update` swapped for `clusterips.apply`). The baseline, in the same run and alternating with
them, is one pod's whole table applied once by `clusterips.apply` in a namespace of its own
(what one pod cost before, without the debounce nor the other pods).

Needs root, nftables, iproute2 (conntrack optional). Run:
    sudo .venv/bin/python benchmarks/bench_services_agent.py [-n 30] [--pods 20] [--services 100] [--endpoints 1000]
Prints a Markdown table for docs/benchmarks.md. Removes its netns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import secrets
import statistics
import subprocess
import time
from typing import Any

from bridge.agent.delegates.cache import Attachment, Record, State
from bridge.agent.kube.watchcache import ENDPOINTSLICE
from bridge.agent.netns import clusterips
from bridge.agent.services import decide as serving
from bridge.agent.services.apply import ClusterIPs
from bridge.agent.services.state import KINDS, ServiceState
from podnetwork.ground import constants

NETWORK, NAD = "blue", "default/blue-nad"
PODNETWORK = {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": NETWORK},
              "spec": {"enabled": True, "provider": "multinetwork.x-k8s.io/npwg-bridge", "parametersRefs": [
                  {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": "blue-nad",
                   "namespace": "default"}]}}


def service(n: int) -> dict[str, Any]:
    ip = f"10.96.{n // 250}.{n % 250 + 1}"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {
        "namespace": "bench", "name": f"s{n}",
        "labels": {constants.SERVICE_PROXY_NAME_LABEL: constants.SERVICE_PROXY_NAME},
        "annotations": {constants.SERVICE_PODNETWORK_ANNOTATION: NETWORK}},
        "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip], "selector": {"app": f"s{n}"},
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80},
                           {"name": "dns", "protocol": "UDP", "port": 53}]}}


def endpoint_slice(n: int, addresses: list[str]) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"namespace": "bench", "name": f"s{n}.ipv4.0", "labels": {
                constants.ENDPOINTSLICE_MANAGED_BY_LABEL: constants.ENDPOINTSLICE_MANAGED_BY,
                constants.ENDPOINTSLICE_SERVICE_NAME_LABEL: f"s{n}"}},
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080},
                      {"name": "dns", "protocol": "UDP", "port": 5353}]}


def addresses_of(n: int, share: int, generation: int = 0) -> list[str]:
    """Service n's endpoints: `share` addresses, the last replaced by one of its own for a `generation`
    (so a change from generation 0 replaces one endpoint: one UDP pair leaves)."""
    last = share + generation % (250 - share)
    return [f"10.{128 + n // 250}.{n % 250}.{k + 1}" for k in range(share - 1)] + \
        [f"10.{128 + n // 250}.{n % 250}.{last}"]


def record(i: int, netns: str) -> Record:
    ip = f"10.200.{i // 250}.{i % 250 + 1}"
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": netns}],
              "ips": [{"address": f"{ip}/16", "interface": 0}]}
    return Record(f"c{i}", netns, "eth0", pod_namespace="bench", pod_name=f"client-{i}", complete=True,
                  attachments=[Attachment(NAD, "net1", {}, state=State.ATTACHED, result=result)])


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=30, help="endpoint changes measured")
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--services", type=int, default=100)
    parser.add_argument("--endpoints", type=int, default=1000)
    args = parser.parse_args()
    tag = secrets.token_hex(3)
    names = [f"bsa{tag}-{i}" for i in range(args.pods + 1)]  # the last: the baseline's, no agent's
    try:
        records = []
        for k, name in enumerate(names):
            i = k % args.pods  # the baseline's namespace has c0's address: its routes' source
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "add", "net1", "type", "veth", "peer", "name", "peer1")
            sh("ip", "-n", name, "link", "set", "peer1", "up")
            sh("ip", "-n", name, "addr", "add", f"10.200.{i // 250}.{i % 250 + 1}/16", "dev", "net1")
            sh("ip", "-n", name, "link", "set", "net1", "up")
            if k < args.pods:
                records.append(record(i, f"/var/run/netns/{name}"))
        share = args.endpoints // args.services
        state = ServiceState()
        objects = {"PodNetwork": [PODNETWORK], "Service": [service(n) for n in range(args.services)],
                   "EndpointSlice": [endpoint_slice(n, addresses_of(n, share)) for n in range(args.services)]}
        for kind in KINDS:
            state.listed(kind, objects[kind.name])
        served = ClusterIPs(state)
        served.start(records)
        await asyncio.wait_for(served.idle(), 120)
        assert served.failures == 0 and all(isinstance(a, serving.Tables) for a in served.applied.values())
        one = served.applied["c0"]
        assert isinstance(one, serving.Tables)

        async def whole(netns: str, before: Any, after: Any, delta: Any, *, timeout: float) -> bool:
            await clusterips.apply(netns, after, timeout=timeout)  # the table and the route listing
            return False

        in_place, replaced, baseline = [], [], []
        generation = 0
        for _ in range(args.n):
            for how, times in ((clusterips.update, in_place), (whole, replaced)):
                served.update = how
                generation += 1
                n = generation % args.services
                state.changed(ENDPOINTSLICE, "MODIFIED", endpoint_slice(n, addresses_of(n, share, generation)))
                start = time.perf_counter()
                await asyncio.wait_for(served.idle(), 60)
                times.append(time.perf_counter() - start)
                new = addresses_of(n, share, generation)[-1]
                assert all(isinstance(a, serving.Tables) and new in str(a.ruleset.commands)
                           for a in served.applied.values()), "a pod's rules lag"
            start = time.perf_counter()
            await clusterips.apply(f"/var/run/netns/{names[-1]}", one.ruleset)
            baseline.append(time.perf_counter() - start)
        await served.stop()
        failures, flushed, updated = served.failures, served.flushed, served.in_place
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)

    def p(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    def row(name: str, values: list[float]) -> str:
        return (f"| {name} | {statistics.median(values) * 1000:.0f} ms | {p(values, 0.99) * 1000:.0f} ms | "
                f"{max(values) * 1000:.0f} ms | {statistics.median(values) / statistics.median(baseline):.1f} |")

    print(f"<!-- {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores, "
          f"{args.n} changes each way, {args.pods} pods, {args.services} Services, {args.endpoints} endpoints; "
          f"{failures} failed writes, {updated} tables changed in place, {flushed} conntrack runs; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end -->")
    print("| | median | p99 | max | ratio to the baseline (median) |")
    print("| --- | --- | --- | --- | --- |")
    print(row(f"endpoint change -> rules in all {args.pods} pods, changed in place", in_place))
    print(row(f"endpoint change -> rules in all {args.pods} pods, whole tables (before)", replaced))
    print(row("one pod's whole table applied (baseline)", baseline))
    print(f"\ntarget p99 <= 1 s: {'met' if p(in_place, 0.99) <= 1.0 else 'NOT met'} "
          f"(in place: p99 {p(in_place, 0.99) * 1000:.0f} ms)")


if __name__ == "__main__":
    asyncio.run(main())
