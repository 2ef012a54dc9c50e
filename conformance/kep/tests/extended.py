"""Extended tests: active validation in scheduling, pod IPs per network and the NPWG bridge
(KEP-3698 "Active validations", "Status"; Phase II)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from conformance.kep import client as kc
from conformance.kep import views
from conformance.kep.suite import ConformanceTest, Context
from conformance.kep.tests import common as c
from podnetwork.ground import constants

DEFAULT = {"podNetworkName": constants.DEFAULT_PODNETWORK}
NPWG_SELECTION = constants.NPWG_NETWORKS_ANNOTATION
NODE_NETWORKS = constants.NODE_PODNETWORKS_ANNOTATION
HOSTNAME = "kubernetes.io/hostname"


def _node(obj: dict[str, Any] | None) -> str | None:
    return views.read(obj).spec.node_name or None


async def _bound(ctx: Context, name: str) -> str | None:
    return _node(await ctx.client.get(kc.Pod, name, ctx.namespace))


async def scheduler_probe(ctx: Context) -> str | None:
    await c.pod(ctx, "probe-scheduled", [DEFAULT])
    try:
        await ctx.client.eventually("a pod naming only default is bound",
                                    lambda: _bound(ctx, "probe-scheduled"), timeout=ctx.timeouts.schedule)
    except kc.TimedOut:
        return (f"no pod was bound to a node in {ctx.timeouts.schedule:g}s: no kube-scheduler runs "
                "(or no node is Ready)")
    return None


async def _held(ctx: Context, name: str) -> str | None:
    """"bound" once the pod has a node, "held" once kube-scheduler says it is unschedulable or the pod
    waits behind a scheduling gate (an implementation may hold a pod whose networks are not usable
    before kube-scheduler sees it; the API server then says PodScheduled False, SchedulingGated)."""
    pod = await ctx.client.get(kc.Pod, name, ctx.namespace)
    if _node(pod):
        return "bound"
    if views.read(pod).spec.scheduling_gates:
        return "held"
    cond = kc.condition(pod, "PodScheduled")
    if cond is not None and cond.get("status") == "False":
        return "held"
    return None


async def extender_probe(ctx: Context) -> str | None:
    await ctx.probe("scheduler", scheduler_probe)
    await c.pod(ctx, "probe-missing", [DEFAULT, {"podNetworkName": ctx.name("probe-missing")}])
    seen = await ctx.client.eventually("a pod naming a missing PodNetwork is bound or held",
                                       lambda: _held(ctx, "probe-missing"), timeout=ctx.timeouts.schedule)
    if seen == "bound":
        return ("a pod naming a missing PodNetwork was bound to a node: nothing checks a pod's networks in "
                "kube-scheduler (no extender or plugin is wired)")
    return None


async def _held_with_event(ctx: Context, pod: str, network: str) -> None:
    """The pod is not bound, PodScheduled is False (or the pod is gated), and an Event on the pod
    names `network`: from whichever component holds it, kube-scheduler's FailedScheduling (an
    extender or plugin rejected it) or the holder of its scheduling gate."""
    seen = await ctx.client.eventually(f"pod {pod} is held Pending", lambda: _held(ctx, pod),
                                       timeout=ctx.timeouts.schedule)
    assert seen == "held", f"pod {pod}, naming PodNetwork {network}, was bound to a node"

    async def event() -> str | None:
        for ev in await ctx.client.list(kc.Event, ctx.namespace):
            event = views.read_as(ev, views.Event)
            if event.about == pod and network in event.text:
                return event.text
        raise kc.Unmet(f"no Event on pod {pod} names {network} (neither a FailedScheduling nor one from "
                       "the holder of a scheduling gate)")

    # KEP "Active validations": "These errors will be presented as Pod Events".
    await ctx.client.eventually(f"an Event on pod {pod} names {network}", event)

    async def unbound() -> str | None:
        node = await _bound(ctx, pod)
        return f"pod {pod} was bound to {node} while {network} is not usable" if node else None

    await ctx.client.never(f"pod {pod} stays Pending", unbound, for_seconds=2.0)


async def _scheduled(ctx: Context, pod: str, why: str) -> None:
    await ctx.client.eventually(f"pod {pod} is bound to a node once {why}", lambda: _bound(ctx, pod),
                                timeout=ctx.timeouts.schedule)


async def pending_until_network_exists(ctx: Context) -> None:
    await ctx.probe("extender", extender_probe)
    network = ctx.name("later")
    await c.pod(ctx, "waiting", [DEFAULT, {"podNetworkName": network}])
    await _held_with_event(ctx, "waiting", network)
    await ctx.apply("podnetwork.yaml", NAME=network)
    await _scheduled(ctx, "waiting", f"PodNetwork {network} exists and is Ready")


async def pending_while_not_ready(ctx: Context) -> None:
    await ctx.probe("extender", extender_probe)
    network = await c.podnetwork(ctx, "off")
    await ctx.client.patch(kc.PodNetwork, network, {"spec": {"enabled": False}})
    await c.wait_condition(ctx, kc.PodNetwork, network, c.READY, "False")
    await c.pod(ctx, "waiting", [DEFAULT, {"podNetworkName": network}])
    await _held_with_event(ctx, "waiting", network)
    await ctx.client.patch(kc.PodNetwork, network, {"spec": {"enabled": True}})
    await _scheduled(ctx, "waiting", f"PodNetwork {network} is enabled and Ready")


async def attachment_and_its_network(ctx: Context) -> None:
    await ctx.probe("extender", extender_probe)
    network = await c.podnetwork(ctx, "twice")
    pna = await c.attachment(ctx, "fast", network)
    await c.pod(ctx, "twice", [DEFAULT, {"podNetworkName": network}, {"podNetworkAttachmentName": pna}])
    await _held_with_event(ctx, "twice", network)


def _schedulable(node: dict[str, Any]) -> bool:
    view = views.read(node)
    ready = view.condition("Ready")
    tainted = any(t.get("effect") in ("NoSchedule", "NoExecute") for t in view.spec.taints or [])
    labelled = HOSTNAME in (view.metadata.labels or {})
    return bool(ready and ready.get("status") == "True") and not view.spec.unschedulable and not tainted \
        and labelled


async def _offers(ctx: Context, node: dict[str, Any], network: str, offer: bool) -> None:
    """Make `node` offer `network` or not, through the node annotation listing the PodNetworks it offers
    (absent: every one); the annotation as it was is put back at cleanup."""
    name = node["metadata"]["name"]
    raw = views.read(node).metadata.annotation(NODE_NETWORKS)
    listed: list[str] | None = None if raw is None else list(json.loads(raw))
    if offer == (listed is None or network in listed):
        return
    wanted = ([*(listed or []), network] if offer
              else [n for n in (listed or [constants.DEFAULT_PODNETWORK]) if n != network])
    await ctx.client.patch(kc.Node, name, {"metadata": {"annotations": {NODE_NETWORKS: json.dumps(wanted)}}})
    restore = {"metadata": {"annotations": {NODE_NETWORKS: raw}}}
    ctx.on_cleanup(lambda: ctx.client.patch(kc.Node, name, restore))


async def bound_where_offered(ctx: Context) -> None:
    await ctx.probe("extender", extender_probe)
    nodes = [n for n in await ctx.client.list(kc.Node) if _schedulable(n)]
    if len(nodes) < 2:
        ctx.skip(f"needs two schedulable nodes with a {HOSTNAME} label; the cluster has {len(nodes)}")
    network = await c.podnetwork(ctx, "pernode")
    await c.wait_condition(ctx, kc.PodNetwork, network, c.READY, "True")
    offering, other = nodes[0], nodes[1]
    await _offers(ctx, offering, network, True)
    await _offers(ctx, other, network, False)
    for pod, node in (("offered", offering), ("not-offered", other)):
        networks = json.dumps([DEFAULT, {"podNetworkName": network}])
        (body,) = ctx.manifest("pod.yaml", NAME=pod, NETWORKS=networks)
        body["spec"]["nodeSelector"] = {HOSTNAME: node["metadata"]["labels"][HOSTNAME]}
        await ctx.create(kc.Pod, body)
    where = offering["metadata"]["name"]
    await _scheduled(ctx, "offered", f"it may only go to {where}, which offers {network}")
    assert await _bound(ctx, "offered") == where
    await _held_with_event(ctx, "not-offered", network)


def _pod_ips(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-network pod IPs: status.podIPs entries that name a podNetwork (KEP "Status"), else the
    multinetwork.x-k8s.io/pod-ips annotation providers write until the kubelet does."""
    view = views.read(pod)
    listed = [ip for ip in view.status.pod_ips or [] if "podNetwork" in ip]
    if listed:
        return listed
    raw = view.metadata.annotation(constants.POD_IPS_ANNOTATION)
    return list(json.loads(raw)) if raw else []


async def pod_ips_per_network(ctx: Context) -> None:
    await ctx.probe("scheduler", scheduler_probe)
    await c.pod(ctx, "runs", [DEFAULT])

    async def running() -> bool:
        pod = await ctx.client.get(kc.Pod, "runs", ctx.namespace)
        return views.read(pod).status.phase == "Running"

    try:
        await ctx.client.eventually("a pod naming default runs", running, timeout=ctx.timeouts.schedule)
    except kc.TimedOut:
        ctx.skip(f"no pod reached Running in {ctx.timeouts.schedule:g}s: no kubelet runs pods on the nodes")

    async def ips() -> list[dict[str, Any]] | None:
        pod = await ctx.client.get(kc.Pod, "runs", ctx.namespace)
        found = _pod_ips(pod or {})
        if not found:
            raise kc.Unmet("no per-network pod IPs in status.podIPs or the pod-ips annotation")
        return found

    found = await ctx.client.eventually("the running pod reports its IPs per PodNetwork", ips)
    families: dict[tuple[str, int], str] = {}
    for entry in found:
        network, ip = str(entry.get("podNetwork") or ""), str(entry.get("ip") or "")
        assert network, f"a pod IP names no PodNetwork: {kc.shown(entry)}"
        version = ipaddress.ip_address(ip).version
        assert (network, version) not in families, (
            f"PodNetwork {network} has two IPv{version} addresses ({families[(network, version)]}, {ip}); "
            "the KEP "
            "allows one per family per PodNetwork")
        families[(network, version)] = ip
    assert any(n == constants.DEFAULT_PODNETWORK for n, _ in families), (
        f"the pod names default but no IP belongs to it: {kc.shown(found)}")


async def npwg_probe(ctx: Context) -> str | None:
    if not await ctx.client.served(kc.NetworkAttachmentDefinition):
        return ("NetworkAttachmentDefinitions (k8s.cni.cncf.io/v1) are not served: no NPWG implementation "
                "installed")
    return None


async def npwg_params_ready(ctx: Context) -> None:
    await ctx.probe("npwg", npwg_probe)
    await ctx.apply("nad.yaml", NAME="dataplane")
    network = await c.podnetwork(ctx, "npwg", "podnetwork-npwg.yaml", NAD="dataplane")
    await c.wait_condition(ctx, kc.PodNetwork, network, c.PARAMS_READY, "True")
    await c.wait_condition(ctx, kc.PodNetwork, network, c.READY, "True")
    missing = await c.podnetwork(ctx, "npwg-missing", "podnetwork-npwg.yaml", NAD="absent")
    await c.wait_condition(ctx, kc.PodNetwork, missing, c.PARAMS_READY, "False")
    await c.wait_condition(ctx, kc.PodNetwork, missing, c.READY, "False",
                           constants.ReadyReason.PARAMS_NOT_READY.value)


def _selected(raw: str, namespace: str) -> list[str]:
    """namespace/name of each element of an NPWG selection, JSON list or comma format (NPWG 4.1.1,
    4.1.2); an element without a namespace is in the pod's."""
    text = raw.strip()
    if text.startswith("["):
        return [f"{e.get('namespace') or namespace}/{e.get('name')}" for e in json.loads(text)]
    found = []
    for item in (i.strip().split("@")[0] for i in text.split(",") if i.strip()):
        found.append(item if "/" in item else f"{namespace}/{item}")
    return found


async def npwg_selection(ctx: Context) -> None:
    await ctx.probe("npwg", npwg_probe)
    await ctx.apply("nad.yaml", NAME="dataplane")
    network = await c.podnetwork(ctx, "npwg-sel", "podnetwork-npwg.yaml", NAD="dataplane")
    await c.wait_condition(ctx, kc.PodNetwork, network, c.READY, "True")
    await c.pod(ctx, "selected", [DEFAULT, {"podNetworkName": network, "interfaceName": "net1"}])
    want = f"{ctx.namespace}/dataplane"

    async def selection() -> list[str] | None:
        pod = await ctx.client.get(kc.Pod, "selected", ctx.namespace)
        raw = views.read(pod).metadata.annotation(NPWG_SELECTION)
        if raw is None:
            raise kc.Unmet(f"no {NPWG_SELECTION} annotation")
        return _selected(raw, ctx.namespace)

    got = await ctx.client.eventually(f"the pod's NPWG selection names {want}", selection)
    assert want in got, f"the NPWG selection {got} does not name the NAD {want}"


TESTS: tuple[ConformanceTest, ...] = (
    ConformanceTest(
        "PendingUntilNetworkExists",
        "A pod naming a PodNetwork that does not exist stays Pending with an Event naming it, and is "
        "scheduled once it exists and is Ready.",
        ("ActiveValidation",), 'KEP "Active validations" (present), "Scheduler changes"',
        pending_until_network_exists, ("pod.yaml", "podnetwork.yaml")),
    ConformanceTest(
        "PendingWhileNotReady",
        "A pod naming a PodNetwork that is not Ready (disabled) stays Pending with an Event naming it, and "
        "is scheduled once it is Ready.",
        ("ActiveValidation",),
        'KEP "Active validations" (Ready), "Lifecycle" (NotReady: "Pods ... will be in Pending state")',
        pending_while_not_ready, ("podnetwork.yaml", "pod.yaml")),
    ConformanceTest(
        "AttachmentAndItsPodNetwork",
        "A pod naming both a PodNetwork and an attachment of it stays Pending with an Event naming the "
        "PodNetwork.",
        ("ActiveValidation",),
        'KEP "Active validations" (single Pod references a given PodNetwork only 1 time), '
        '"Resources relations"',
        attachment_and_its_network, ("podnetwork.yaml", "attachment.yaml", "pod.yaml")),
    ConformanceTest(
        "BoundWhereOffered",
        "A pod naming a PodNetwork is bound to a node that offers it, and held Pending with an Event naming "
        "it when its only node does not.",
        ("PerNodeAvailability",), 'KEP Req 18, "Scheduler changes"', bound_where_offered,
        ("podnetwork.yaml", "pod.yaml")),
    ConformanceTest(
        "PodIPsPerNetwork",
        "A running pod reports its IPs with the PodNetwork each belongs to, at most one per family per "
        "PodNetwork.",
        ("PodIPsPerNetwork",), 'KEP "Status", Req 17', pod_ips_per_network, ("pod.yaml",)),
    ConformanceTest(
        "NPWGParamsReady",
        "A PodNetwork whose parametersRefs name a NetworkAttachmentDefinition gets ParamsReady True and "
        "turns Ready; one naming a missing NAD gets ParamsReady False and Ready False, reason "
        "ParamsNotReady.",
        ("NPWGBridge",), 'KEP "Status Conditions" (ParamsReady), "PodNetwork" (parametersRefs example)',
        npwg_params_ready, ("nad.yaml", "podnetwork-npwg.yaml")),
    ConformanceTest(
        "NPWGSelection",
        "A pod naming a NAD-backed PodNetwork gets the NPWG selection k8s.v1.cni.cncf.io/networks naming "
        "that NAD.",
        ("NPWGBridge",), 'KEP "CNI usage models"; NPWG v1.3 4.1', npwg_selection,
        ("nad.yaml", "podnetwork-npwg.yaml", "pod.yaml")),
)
