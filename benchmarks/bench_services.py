"""A client pod's Services table: compiling it (bridge.services.dnat) and applying it in a netns
(bridge.agent.netns.clusterips: the nft transaction and the routes), towards the issue's target of
p99 <= 1 s from an endpoint change to the rules, with 100 Services and 1,000 endpoints.

The pod is on one network (`net1`, a veth end in a namespace of the benchmark). There are
`--services` Services with a ClusterIP and two ports (TCP and UDP) each, and
`--endpoints` endpoints in all, spread evenly (default 100 and 1,000: 10 each). With
`--affinity`, every Service has `sessionAffinity: ClientIP`, which costs a chain and a set per
endpoint and port.

Each iteration is what the agent does when one endpoint changes: compile the pod's table from
the inputs with that endpoint flipped, then apply it (one nft transaction replacing the
table, one listing of our routes per family, no route change). The baseline, measured in the
same run and alternating with it, is applying a table of one chain through the same
`bridge.agent.netns.nftables.apply`: the fixed cost of nsenter + nft.

Needs root and nftables. Run:
    sudo .venv/bin/python benchmarks/bench_services.py [-n 50] [--services 100] [--endpoints 1000] [--affinity]
Prints a Markdown table for docs/benchmarks.md. Removes its netns.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import platform
import secrets
import statistics
import subprocess
import time
from typing import Any

from bridge import services
from bridge.agent.netns import clusterips, nftables
from bridge.services import dnat

NETWORK = "blue"


def inputs(count: int, endpoints: int, affinity: bool) -> tuple[list[services.Service], dict[str, list[services.Endpoint]]]:
    ports = (services.ServicePort(80, services.Protocol.TCP, "http"), services.ServicePort(53, services.Protocol.UDP, "dns"))
    slice_ports = (services.EndpointPort("http", services.Protocol.TCP, 8080),
                   services.EndpointPort("dns", services.Protocol.UDP, 5353))
    mode = services.SessionAffinity.CLIENT_IP if affinity else services.SessionAffinity.NONE
    out, by_service = [], {}
    base = int(ipaddress.ip_address("10.128.0.1"))
    for n in range(count):
        svc = services.Service("bench", f"s{n}", NETWORK, (ipaddress.ip_address(f"10.96.{n // 250}.{n % 250 + 1}"),),
                               ports, mode)
        out.append(svc)
        share = endpoints // count + (1 if n < endpoints % count else 0)
        by_service[svc.key] = [services.Endpoint(ipaddress.ip_address(base + n * 4096 + k), slice_ports)
                               for k in range(share)]
    return out, by_service


def flipped(by_service: dict[str, list[services.Endpoint]], i: int) -> dict[str, list[services.Endpoint]]:
    """The endpoints with one endpoint's readiness flipped: one EndpointSlice change."""
    key = sorted(by_service)[i % len(by_service)]
    changed = list(by_service[key])
    if changed:
        e = changed[0]
        changed[0] = services.Endpoint(e.address, e.ports, not e.ready, not e.ready, e.terminating)
    return {**by_service, key: changed}


def baseline_table() -> dict[str, Any]:
    t = {"family": "inet", "table": nftables.TABLE}
    return {"nftables": [{"add": {"table": {"family": "inet", "name": nftables.TABLE}}},
                         {"add": {"chain": {**t, "name": "output", "type": "filter", "hook": "output", "prio": 0,
                                            "policy": "accept"}}}]}


def ms(samples: list[float], q: float | None = None) -> str:
    if q is None:
        return f"{statistics.median(samples) * 1000:.1f} ms"
    ordered = sorted(samples)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=50, help="endpoint changes measured")
    parser.add_argument("--services", type=int, default=100)
    parser.add_argument("--endpoints", type=int, default=1000, help="endpoints in all, spread over the Services")
    parser.add_argument("--affinity", action="store_true", help="sessionAffinity: ClientIP on every Service")
    args = parser.parse_args()
    name = f"pnbench-svc-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    netns = f"/var/run/netns/{name}"
    pod = services.ClientPod("bench", "client", (services.attachment(NETWORK, "net1", "10.128.255.254"),))
    svcs, by_service = inputs(args.services, args.endpoints, args.affinity)
    compile_s, apply_s, total_s, base_s = [], [], [], []
    try:
        for argv in (["link", "add", "net1", "type", "veth", "peer", "name", "peer1"], ["link", "set", "net1", "up"],
                     ["addr", "add", "10.128.255.254/12", "dev", "net1"]):
            subprocess.run(["ip", "-n", name, *argv], check=True)
        first = dnat.compile_pod(pod, svcs, by_service)
        asyncio.run(clusterips.apply(netns, first))  # the routes are made once; a change keeps them
        commands = len(first.commands)
        for i in range(args.n):
            started = time.perf_counter()
            ruleset = dnat.compile_pod(pod, svcs, flipped(by_service, i))
            compiled = time.perf_counter()
            asyncio.run(clusterips.apply(netns, ruleset))
            done = time.perf_counter()
            compile_s.append(compiled - started)
            apply_s.append(done - compiled)
            total_s.append(done - started)
            started = time.perf_counter()
            asyncio.run(nftables.apply(netns, baseline_table()))
            base_s.append(time.perf_counter() - started)
        assert asyncio.run(nftables.exists(netns, table=nftables.SERVICES))
        assert len(asyncio.run(clusterips.routes(netns))) == args.services
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    base = statistics.median(base_s)
    print(f"{args.n} endpoint changes; {args.services} Services x 2 ports, {args.endpoints} endpoints, "
          f"affinity {'ClientIP' if args.affinity else 'None'}: {commands} commands; {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}\n")
    print("| step | median | p99 | ratio to the baseline (median) |")
    print("| --- | --- | --- | --- |")
    for label, samples in (("compile (bridge.services.dnat.compile_pod)", compile_s),
                           ("apply (bridge.agent.netns.clusterips.apply: nft + route listing)", apply_s),
                           ("endpoint change to rules (compile + apply)", total_s),
                           ("baseline: a one-chain table through nftables.apply", base_s)):
        print(f"| {label} | {ms(samples)} | {ms(samples, 0.99)} | {statistics.median(samples) / base:.2f} |")


if __name__ == "__main__":
    main()
