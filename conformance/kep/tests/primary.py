"""A PodNetwork as a pod's only network (KEP-3698 "the list is explicit"; Phase II Req 19).

A pod whose networks name one PodNetwork, not `default`, gets exactly that network: its
network-status has one entry, marked `"default": true` (NPWG 5.3.5: the network of the pod's
primary interface), and its per-network pod IPs all name that PodNetwork. With a readiness probe,
such a pod becomes Ready only when the kubelet reaches it over that network. The network is the one
`--primary-network` names: a Ready PodNetwork the cluster attaches to pods, and, for the probe,
whose pods the nodes reach (this project: the PodNetwork annotated
`multinetwork.x-k8s.io/node-access: "true"`, docs/node-access.md). The suite cannot create one
portably (its parameters are the implementation's).
"""

from __future__ import annotations

import json
from typing import Any

from conformance.kep import client as kc
from conformance.kep import views
from conformance.kep.suite import ConformanceTest, Context
from conformance.kep.tests.extended import _pod_ips
from conformance.kep.tests.policy import ANSWER, PORT, kubelet_probe
from podnetwork.ground import constants

NETWORK_STATUS = constants.NPWG_NETWORK_STATUS_ANNOTATION
SERVER_COMMAND = ["sh", "-c", f"while true; do echo {ANSWER} | nc -l -p {PORT}; done"]


async def network_probe(ctx: Context) -> str | None:
    if not ctx.settings.get("PRIMARY_NETWORK"):
        return ("no PodNetwork to run a pod on alone: pass --primary-network NAME, a Ready PodNetwork the "
                "cluster attaches to pods")
    return None


async def _running(ctx: Context, name: str) -> dict[str, Any]:
    async def running() -> dict[str, Any] | None:
        pod = await ctx.client.get(kc.Pod, name, ctx.namespace)
        phase = views.read(pod).status.phase
        if phase != "Running":
            raise kc.Unmet(f"pod {name} is {phase or 'not yet scheduled'}")
        return pod

    return await ctx.client.eventually(f"pod {name} runs", running, timeout=ctx.timeouts.schedule)


async def explicit_list(ctx: Context) -> None:
    await ctx.probe("primary-network", network_probe)
    await ctx.probe("kubelet", kubelet_probe)
    network = ctx.settings["PRIMARY_NETWORK"]
    await ctx.apply("pod.yaml", NAME="alone", NETWORKS=json.dumps([{"podNetworkName": network}]))
    await _running(ctx, "alone")

    async def reported() -> tuple[list[dict[str, Any]], list[dict[str, Any]], views.Object]:
        pod = await ctx.client.get(kc.Pod, "alone", ctx.namespace)
        seen = views.read(pod)
        raw = seen.metadata.annotation(NETWORK_STATUS)
        ips = _pod_ips(pod) if pod is not None else []
        if not raw or not ips:
            raise kc.Unmet("the running pod reports no network-status or no per-network pod IPs yet")
        return list(json.loads(raw)), ips, seen

    status, ips, pod = await ctx.client.eventually("the pod reports its networks", reported)
    problem = explicit_list_problem(network, status, ips, pod.status.pod_ip)
    assert problem is None, problem


def explicit_list_problem(network: str, status: list[dict[str, Any]], ips: list[dict[str, Any]],
                          pod_ip: str | None) -> str | None:
    """What is wrong with what a pod listing only `network` reports, or None: its network-status
    (one entry, marked default), its per-network pod IPs (all on `network`) and its status.podIP."""
    if len(status) != 1 or status[0].get("default") is not True:
        return (f"a pod listing only PodNetwork {network} must get exactly that network, marked default "
                f"(NPWG 5.3.5); its network-status: {kc.shown(status)}")
    named = sorted({str(e.get("podNetwork")) for e in ips})
    if named != [network]:
        return (f"every pod IP of a pod listing only {network} must name it (KEP \"Status\"); they name "
                f"{named}: {kc.shown(ips)}")
    if pod_ip is not None and pod_ip not in {str(e.get("ip")) for e in ips}:
        return (f"status.podIP {pod_ip} is not an address on {network}, the pod's only network: "
                f"{kc.shown(ips)}")
    return None


async def readiness_probe(ctx: Context) -> None:
    await ctx.probe("primary-network", network_probe)
    await ctx.probe("kubelet", kubelet_probe)
    network = ctx.settings["PRIMARY_NETWORK"]
    await ctx.apply("pod-readiness.yaml", NAME="probed", NETWORKS=json.dumps([{"podNetworkName": network}]),
                    COMMAND=json.dumps(SERVER_COMMAND),
                    PROBE_IMAGE=ctx.settings["PROBE_IMAGE"])

    async def ready() -> bool:
        pod = await ctx.client.get(kc.Pod, "probed", ctx.namespace)
        state = views.read(pod).condition("Ready")
        if state is None or state.get("status") != "True":
            raise kc.Unmet(f"the pod is not Ready: {kc.shown(state or (pod or {}).get('status'))}")
        return True

    await ctx.client.eventually(
        f"a pod on PodNetwork {network} alone passes its kubelet TCP readiness probe (the node reaches "
        "the pod over that network)", ready, timeout=ctx.timeouts.schedule + ctx.timeouts.settle)


TESTS: tuple[ConformanceTest, ...] = (
    ConformanceTest(
        "PrimaryPodNetworkExplicitList",
        "A pod whose networks name one PodNetwork and not default gets exactly that network: its "
        "network-status has one entry, marked default, and its per-network pod IPs all name that PodNetwork.",
        ("PrimaryPodNetwork",), 'KEP "the list is explicit"; NPWG 5.3.5; KEP "Status"',
        explicit_list, ("pod.yaml",)),
    ConformanceTest(
        "PrimaryPodNetworkReadinessProbe",
        "A pod on a PodNetwork alone, serving TCP, with a kubelet readiness probe on that port becomes "
        "Ready: the node reaches the pod over the network.",
        ("PrimaryPodNetwork",), "KEP Req 19 (Phase II)", readiness_probe, ("pod.yaml", "pod-readiness.yaml")),
)

__all__ = ["TESTS", "explicit_list", "explicit_list_problem", "network_probe", "readiness_probe"]
