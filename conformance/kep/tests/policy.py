"""NetworkPolicy on a PodNetwork (KEP-3698 Phase III, Req 22): MultiNetworkPolicy isolates pods.

Connectivity is probed through the Kubernetes API only: a client pod (the `--probe-image`, a
busybox with `nc`) connects once to the server's address on the PodNetwork and exits 0 when
the server answered; its phase, Succeeded or Failed, is the answer. No exec, no port-forward.
The network is the one `--policy-network` names: a PodNetwork the cluster attaches to pods,
which the suite cannot create portably (its parameters are the implementation's).
"""

from __future__ import annotations

import asyncio
import json

from conformance.kep import client as kc
from conformance.kep import views
from conformance.kep.suite import ConformanceTest, Context
from conformance.kep.tests.extended import DEFAULT, _pod_ips, scheduler_probe
from podnetwork.ground import constants

PORT = 8080
#: The server answers each connection with this line, so a client can tell it reached the server.
ANSWER = "ok"
SERVER_COMMAND = ["sh", "-c", f"while true; do echo {ANSWER} | nc -l -p {PORT}; done"]
#: Seconds `nc` waits to connect and for the answer: a dropped SYN is not answered at all.
CONNECT_SECONDS = 3


async def policy_probe(ctx: Context) -> str | None:
    if not await ctx.client.served(kc.MultiNetworkPolicy):
        return (f"{constants.POLICY_KIND} ({constants.POLICY_API_VERSION}) is not served: no policy "
                "implementation is installed")
    if not ctx.settings.get("POLICY_NETWORK"):
        return ("no PodNetwork to test policies on: pass --policy-network NAME, a Ready PodNetwork the "
                "cluster attaches to pods")
    return None


async def kubelet_probe(ctx: Context) -> str | None:
    await ctx.probe("scheduler", scheduler_probe)
    await ctx.apply("pod.yaml", NAME="probe-runs", NETWORKS=json.dumps([DEFAULT]))

    async def running() -> bool:
        pod = await ctx.client.get(kc.Pod, "probe-runs", ctx.namespace)
        return views.read(pod).status.phase == "Running"

    try:
        await ctx.client.eventually("a pod naming default runs", running, timeout=ctx.timeouts.schedule)
    except kc.TimedOut:
        return f"no pod reached Running in {ctx.timeouts.schedule:g}s: no kubelet runs pods on the nodes"
    return None


def _networks(network: str) -> str:
    return json.dumps([DEFAULT, {"podNetworkName": network, "interfaceName": "net1"}])


async def _pod(ctx: Context, name: str, network: str, labels: dict[str, str], command: list[str],
               restart: str) -> None:
    await ctx.apply("pod-probe.yaml", NAME=name, NETWORKS=_networks(network), LABELS=json.dumps(labels),
                    COMMAND=json.dumps(command), RESTART=restart, PROBE_IMAGE=ctx.settings["PROBE_IMAGE"])


async def _server(ctx: Context, network: str) -> str:
    """Start the server pod (app=server) and return its address on `network`."""
    await _pod(ctx, "server", network, {"app": "server"}, SERVER_COMMAND, "Always")

    async def address() -> str | None:
        pod = await ctx.client.get(kc.Pod, "server", ctx.namespace)
        phase = views.read(pod).status.phase
        if phase != "Running":
            raise kc.Unmet(f"the server pod is {phase or 'not yet scheduled'}")
        found = [str(e.get("ip")) for e in _pod_ips(pod or {}) if e.get("podNetwork") == network]
        if not found:
            raise kc.Unmet(f"the server pod reports no IP on PodNetwork {network}")
        return found[0]

    return await ctx.client.eventually(f"the server pod runs with an IP on {network}", address,
                                       timeout=ctx.timeouts.schedule)


async def _connects(ctx: Context, name: str, address: str, network: str, labels: dict[str, str]) -> bool:
    """Whether a new client pod `name` reached the server at `address` (its exit status)."""
    command = ["sh", "-c", f"nc -w {CONNECT_SECONDS} {address} {PORT} </dev/null | grep -q {ANSWER}"]
    await _pod(ctx, name, network, {"app": "client", **labels}, command, "Never")

    async def ended() -> str | None:
        phase = views.read(await ctx.client.get(kc.Pod, name, ctx.namespace)).status.phase
        if phase in ("Succeeded", "Failed"):
            return phase
        raise kc.Unmet(f"client pod {name} is {phase or 'not yet scheduled'}")

    phase = await ctx.client.eventually(f"client pod {name} ends", ended, timeout=ctx.timeouts.schedule)
    return phase == "Succeeded"


async def _until(ctx: Context, what: str, address: str, network: str, labels: dict[str, str],
                 want: bool) -> None:
    """New client pods until one's answer is `want` (an implementation applies policies
    asynchronously), within the settle timeout; each probe takes a few seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.timeouts.settle
    for attempt in range(1, 100):
        if await _connects(ctx, f"{'allowed' if want else 'denied'}-{attempt}", address, network,
                           labels) == want:
            return
        assert loop.time() < deadline, f"{what}: not in {ctx.timeouts.settle:g}s ({attempt} client pods)"


async def deny_then_allow(ctx: Context) -> None:
    await ctx.probe("policy", policy_probe)
    await ctx.probe("kubelet", kubelet_probe)
    network = ctx.settings["POLICY_NETWORK"]
    address = await _server(ctx, network)
    assert await _connects(ctx, "before", address, network, {}), (
        f"before any policy a client pod did not reach the server at {address}:{PORT} on PodNetwork "
        f"{network}: the network carries no TCP between pods, so no policy can be judged on it")
    await ctx.apply("multi-networkpolicy.yaml", NAME="deny-ingress", NETWORK=network, INGRESS="[]")
    await _until(ctx, f"a client is refused once deny-ingress isolates the server on {network}",
                 address, network, {}, want=False)
    allow = [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
              "ports": [{"protocol": "TCP", "port": PORT}]}]
    await ctx.apply("multi-networkpolicy.yaml", NAME="allow-clients", NETWORK=network,
                    INGRESS=json.dumps(allow))
    await _until(ctx, "a client labelled role=client gets through once allow-clients admits it",
                 address, network, {"role": "client"}, want=True)
    assert not await _connects(ctx, "unlabelled", address, network, {}), (
        "a client pod without role=client reached the server: allow-clients admits only role=client")


TESTS: tuple[ConformanceTest, ...] = (
    ConformanceTest(
        "NetworkPolicyDenyThenAllow",
        "On a PodNetwork, a MultiNetworkPolicy with no ingress rule isolates the pods it selects (a client "
        "pod's connection fails), and a second one allowing pods labelled role=client lets those through, "
        "and only those.",
        ("NetworkPolicy",), "KEP Req 22 (Phase III); NetworkPolicy semantics (isolation, union of policies)",
        deny_then_allow, ("pod.yaml", "pod-probe.yaml", "multi-networkpolicy.yaml")),
)

__all__ = ["TESTS", "deny_then_allow", "kubelet_probe", "policy_probe"]
