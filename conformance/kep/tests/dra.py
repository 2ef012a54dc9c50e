"""DRAPlacement: PodNetworks served as devices of Dynamic Resource Allocation (resource.k8s.io/v1), and
kube-scheduler's own allocator placing pods by them (KEP-3698 "DRA integration (alternative)", Req 18).

The suite sees the driver as a user does: its ResourceSlices (one device per Ready PodNetwork a node
offers, the PodNetwork's name in a string attribute), its DeviceClass, and the ResourceClaims of pods
made from a ResourceClaimTemplate the test writes. A pod here names no network but `default`
(admission's), so nothing an extender reads of it tells the nodes apart: where it is bound is the
allocator's doing. The judgements on what the API returns are the pure functions at the top.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from conformance.kep import client as kc
from conformance.kep import views
from conformance.kep.suite import ConformanceTest, Context
from conformance.kep.tests import common as c
from conformance.kep.tests import extended

FEATURE = "DRAPlacement"
CLAIM = "network"
"""The pod's entry in spec.resourceClaims, and its template's request."""
INTERFACE = "dra0"
"""DRANetworkData's interface name for the claimed network in the pod."""


def attribute_value(device: views.Device, driver: str, attribute: str) -> str | None:
    """The string value of the device's `attribute`: named bare (in the driver's domain) or qualified
    `<driver>/<attribute>` (ResourceSlice v1 `attributes`: both mean the same)."""
    found = device.attributes or {}
    value = found.get(attribute) or found.get(f"{driver}/{attribute}")
    return None if value is None else value.string


@dataclass(frozen=True)
class Offered:
    """A device of the driver on a node, and the PodNetwork it stands for."""

    node: str
    pool: str
    device: str
    podnetwork: str | None
    shareable: bool


def offered(slices: Iterable[Mapping[str, Any]], driver: str, attribute: str) -> list[Offered]:
    """The devices `driver` publishes on nodes, from the newest generation of each pool only (the
    scheduler ignores a pool's older generations: ResourcePool v1 `generation`). A slice of
    another driver, or not bound to one node (`nodeName`), is not read."""
    read = [views.read_as(s, views.ResourceSlice).spec for s in slices]
    mine = [s for s in read if s.driver == driver and s.node_name and s.pool.name]
    newest: dict[str, int] = {}
    for spec in mine:
        newest[str(spec.pool.name)] = max(newest.get(str(spec.pool.name), 0), spec.pool.generation or 0)
    found = []
    for spec in mine:
        if (spec.pool.generation or 0) != newest[str(spec.pool.name)]:
            continue
        for device in spec.devices or []:
            found.append(Offered(str(spec.node_name), str(spec.pool.name), str(device.name),
                                 attribute_value(device, driver, attribute),
                                 device.allow_multiple_allocations is True))
    return found


def offering(devices: Iterable[Offered], podnetwork: str) -> set[str]:
    """The nodes with a device for `podnetwork`."""
    return {d.node for d in devices if d.podnetwork == podnetwork}


def allocation_problem(claim: Mapping[str, Any] | None, driver: str, devices: Iterable[Offered],
                       podnetwork: str, node: str, pod_uid: str) -> str | None:
    """What is wrong with a claim bound to a pod on `node` for `podnetwork`, or None: one device of the
    driver allocated, published on `node` for that PodNetwork, and the claim reserved for the pod."""
    if claim is None:
        return "the claim does not exist"
    status = views.read_as(claim, views.ResourceClaim).status
    if status.allocation is None:
        return "the claim is not allocated"
    results = status.allocation.devices.results or []
    if len(results) != 1:
        return f"the allocation has {len(results)} results, not the one device the claim asks for"
    (result,) = results
    if result.driver != driver:
        return f"the allocated device is of driver {result.driver}, not {driver}"
    where = [d for d in devices if (d.pool, d.device) == (result.pool, result.device)]
    if not where:
        return f"the allocated device {result.pool}/{result.device} is in no ResourceSlice of {driver}"
    if (where[0].node, where[0].podnetwork) != (node, podnetwork):
        return (f"the allocated device {result.pool}/{result.device} stands for PodNetwork "
                f"{where[0].podnetwork} on node {where[0].node}, not {podnetwork} on {node}")
    if pod_uid not in {r.uid for r in status.reserved_for or []}:
        return "the claim is not reserved for the pod (status.reservedFor)"
    return None


def network_data_problem(claim: Mapping[str, Any] | None, driver: str, interface: str,
                         addresses: set[str]) -> str | None:
    """What is wrong with what the driver reported on an allocated claim whose pod has the network as
    `interface` with `addresses`, or None: an entry of status.devices for the allocated device (and its
    shareID, which keys the entry of one allocation of a shared device) whose KEP-4817 networkData
    names that interface and, as CIDRs, exactly those addresses."""
    status = views.read_as(claim, views.ResourceClaim).status
    results = [r for r in (status.allocation.devices.results or []) if r.driver == driver] \
        if status.allocation is not None else []
    if not results:
        return f"the claim has no device of {driver} allocated"
    result = results[0]
    key = (result.driver, result.pool, result.device, result.share_id)
    entries = [d for d in status.devices or [] if (d.driver, d.pool, d.device, d.share_id) == key]
    if not entries:
        return (f"status.devices has no entry for the allocated device {result.pool}/{result.device}"
                + (f" (shareID {result.share_id})" if result.share_id else ""))
    data = entries[0].network_data
    if data is None:
        return f"the entry of {result.pool}/{result.device} has no networkData"
    if data.interface_name != interface:
        return f"networkData.interfaceName is {data.interface_name!r}, not the pod's {interface!r}"
    try:
        reported = {str(ipaddress.ip_interface(ip).ip) for ip in data.ips or [] if "/" in ip}
    except ValueError as exc:
        return f"networkData.ips {data.ips} holds what is no CIDR: {exc}"
    if len(reported) != len(data.ips or []) or reported != addresses:
        return (f"networkData.ips {data.ips} are not the pod's addresses on the network "
                f"{sorted(addresses)}, each as a CIDR")
    return None


def claim_name(pod: Mapping[str, Any] | None, entry: str) -> str | None:
    """The ResourceClaim made for the pod's `entry` from its template (pod status.resourceClaimStatuses)."""
    for each in views.read_as(pod, views.PodClaims).status.resource_claim_statuses or []:
        if each.name == entry:
            return each.resource_claim_name
    return None


def selector(driver: str, attribute: str, podnetwork: str) -> str:
    """CEL that picks the driver's device for `podnetwork` (a JSON string is a CEL string literal)."""
    return f"device.attributes[{json.dumps(driver)}].{attribute} == {json.dumps(podnetwork)}"


# --- the steps, with I/O ---

def _settings(ctx: Context) -> tuple[str, str, str]:
    """The driver, the attribute and the DeviceClass under test (command-line flags)."""
    driver = ctx.settings["DRA_DRIVER"]
    return driver, ctx.settings["DRA_ATTRIBUTE"], ctx.settings.get("DRA_DEVICE_CLASS") or driver


async def dra_probe(ctx: Context) -> str | None:
    driver, _, device_class = _settings(ctx)
    if not await ctx.client.served(kc.DeviceClass):
        return "resource.k8s.io/v1 is not served: the cluster has no Dynamic Resource Allocation"
    if await ctx.client.get(kc.DeviceClass, device_class) is None:
        return (f"no DeviceClass {device_class}: no DRA driver serves PodNetworks as devices here (pass "
                "--dra-driver, and --dra-device-class when the class is not named after the driver "
                f"{driver})")
    return None


async def _devices(ctx: Context) -> list[Offered]:
    driver, attribute, _ = _settings(ctx)
    return offered(await ctx.client.list(kc.ResourceSlice), driver, attribute)


async def _nodes(ctx: Context, least: int) -> list[dict[str, Any]]:
    """`least` schedulable nodes on which the driver publishes, or a skip saying so."""
    await ctx.probe("scheduler", extended.scheduler_probe)
    await ctx.probe("dra", dra_probe)
    driver = ctx.settings["DRA_DRIVER"]
    published = {s.spec.node_name for s in (views.read_as(o, views.ResourceSlice)
                                            for o in await ctx.client.list(kc.ResourceSlice))
                 if s.spec.driver == driver}
    nodes = [n for n in await ctx.client.list(kc.Node)
             if extended._schedulable(n) and views.read(n).metadata.name in published]
    if len(nodes) < least:
        ctx.skip(f"needs {least} schedulable nodes on which DRA driver {driver} publishes ResourceSlices; "
                 f"the cluster has {len(nodes)}")
    return nodes[:least]


def _name(node: Mapping[str, Any]) -> str:
    return str(views.read(node).metadata.name)


async def _offer(ctx: Context, node: str, podnetwork: str, offer: bool) -> None:
    """Make `node` offer `podnetwork` or not (its Req 18 annotation, read afresh: an earlier change
    of this test is kept); put back as it was at cleanup."""
    got = await ctx.client.get(kc.Node, node)
    assert got is not None, f"node {node} is gone"
    await extended._offers(ctx, got, podnetwork, offer)


async def _published(ctx: Context, podnetwork: str, on: set[str], off: set[str]) -> list[Offered]:
    """Wait until the driver offers `podnetwork` on every node of `on` and on none of `off`."""
    async def check() -> list[Offered]:
        devices = await _devices(ctx)
        nodes = offering(devices, podnetwork)
        if on - nodes or nodes & off:
            raise kc.Unmet(f"PodNetwork {podnetwork} has a device on {sorted(nodes) or 'no node'}")
        return devices

    where = f"on {sorted(on)}" if on else "on no node"
    return await ctx.client.eventually(f"the DRA driver offers PodNetwork {podnetwork} {where}, and not on "
                                       f"{sorted(off)}", check)


async def _template(ctx: Context, name: str, podnetwork: str) -> None:
    driver, attribute, device_class = _settings(ctx)
    await ctx.create(kc.ResourceClaimTemplate, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": CLAIM, "exactly": {
            "deviceClassName": device_class,
            "selectors": [{"cel": {"expression": selector(driver, attribute, podnetwork)}}]}}]}}}})


async def _claiming_pod(ctx: Context, name: str, template: str) -> None:
    (body,) = ctx.manifest("pod-no-networks.yaml", NAME=name)
    body["spec"]["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": template}]
    await ctx.create(kc.Pod, body)


async def _bound_to(ctx: Context, pod: str, why: str) -> str:
    return str(await ctx.client.eventually(f"pod {pod} is bound to a node, {why}",
                                           lambda: extended._bound(ctx, pod), timeout=ctx.timeouts.schedule))


async def devices_follow_offers(ctx: Context) -> None:
    first, second = (_name(n) for n in await _nodes(ctx, 2))
    ready = await c.podnetwork(ctx, "dra-ready")
    off = await c.podnetwork(ctx, "dra-off")
    await ctx.client.patch(kc.PodNetwork, off, {"spec": {"enabled": False}})
    await c.wait_condition(ctx, kc.PodNetwork, ready, c.READY, "True")
    await c.wait_condition(ctx, kc.PodNetwork, off, c.READY, "False")
    for network in (ready, off):
        await _offer(ctx, first, network, True)
    await _offer(ctx, second, ready, False)
    devices = await _published(ctx, ready, {first}, {second})
    assert not offering(devices, off), (
        f"PodNetwork {off} is not Ready (disabled) but has a device on {sorted(offering(devices, off))}")
    mine = [d for d in devices if d.podnetwork == ready]
    assert all(d.shareable for d in mine), (
        f"the device of {ready} does not allow multiple allocations: one pod per node could use it")
    await ctx.client.patch(kc.PodNetwork, off, {"spec": {"enabled": True}})
    await _published(ctx, off, {first}, {second})


async def placed_where_offered(ctx: Context) -> None:
    first, second = (_name(n) for n in await _nodes(ctx, 2))
    network = await c.podnetwork(ctx, "dra-one")
    await c.wait_condition(ctx, kc.PodNetwork, network, c.READY, "True")
    await _offer(ctx, first, network, True)
    await _offer(ctx, second, network, False)
    await _published(ctx, network, {first}, {second})
    await _template(ctx, "one", network)
    pods = ("placed", "shared")  # one device per node serves both
    for pod in pods:
        await _claiming_pod(ctx, pod, "one")
    driver = ctx.settings["DRA_DRIVER"]
    claims: dict[str, str] = {}
    for pod in pods:
        node = await _bound_to(ctx, pod, f"only {first} offers {network}")
        assert node == first, f"pod {pod} claims PodNetwork {network}, offered on {first} only, and was " \
                              f"bound to {node}"
        obj = await ctx.client.get(kc.Pod, pod, ctx.namespace)
        claim = claim_name(obj, CLAIM)
        assert claim, f"pod {pod} is bound but its status names no ResourceClaim for {CLAIM!r}"
        claims[pod] = claim
        problem = allocation_problem(await ctx.client.get(kc.ResourceClaim, claim, ctx.namespace), driver,
                                     await _devices(ctx), network, first, str(views.read(obj).metadata.uid))
        assert problem is None, f"ResourceClaim {claim} of pod {pod}: {problem}"
    await ctx.client.delete(kc.Pod, "placed", ctx.namespace)

    async def deallocated() -> bool:
        claim = await ctx.client.get(kc.ResourceClaim, claims["placed"], ctx.namespace)
        if claim is not None and views.read_as(claim, views.ResourceClaim).status.allocation is not None:
            raise kc.Unmet(f"ResourceClaim {claims['placed']} is still allocated")
        return True

    await ctx.client.eventually("the claim of the deleted pod is deallocated (or deleted)", deallocated,
                                timeout=ctx.timeouts.schedule)


async def pending_where_offered_nowhere(ctx: Context) -> None:
    where = _name((await _nodes(ctx, 1))[0])
    network = await c.podnetwork(ctx, "dra-nowhere")
    await c.wait_condition(ctx, kc.PodNetwork, network, c.READY, "True")
    # every node, not only the schedulable ones with the driver's slices: none may offer it
    everywhere = {_name(n) for n in await ctx.client.list(kc.Node)}
    for each in sorted(everywhere):
        await _offer(ctx, each, network, False)
    await _published(ctx, network, set(), everywhere)
    await _template(ctx, "nowhere", network)
    await _claiming_pod(ctx, "stuck", "nowhere")
    await _unschedulable(ctx, "stuck")
    # and kube-scheduler places it as soon as a node offers the network: Pending was the claim's doing
    await _offer(ctx, where, network, True)
    node = await _bound_to(ctx, "stuck", f"once {where} offers {network}")
    assert node == where, f"pod stuck claims {network}, offered on {where} only, and was bound to {node}"


async def _unschedulable(ctx: Context, pod: str) -> None:
    """PodScheduled False, reason Unschedulable, and kube-scheduler's FailedScheduling Event on the pod."""
    async def held() -> dict[str, Any]:
        got = await ctx.client.get(kc.Pod, pod, ctx.namespace)
        if extended._node(got):
            raise AssertionError(f"pod {pod} was bound to {extended._node(got)}: no node offers its network")
        cond = kc.condition(got, "PodScheduled")
        if cond is None or cond.get("status") != "False" or cond.get("reason") != "Unschedulable":
            raise kc.Unmet(f"PodScheduled is {kc.shown(cond)}")
        return cond

    await ctx.client.eventually(f"pod {pod} is Unschedulable", held, timeout=ctx.timeouts.schedule)

    async def event() -> str:
        for ev in await ctx.client.list(kc.Event, ctx.namespace):
            seen = views.read_as(ev, views.Event)
            if seen.about == pod and seen.reason == "FailedScheduling":
                return seen.text
        raise kc.Unmet(f"no FailedScheduling Event on pod {pod}")

    text = await ctx.client.eventually(f"kube-scheduler's FailedScheduling Event on pod {pod}", event)
    assert "claim" in text.lower(), f"the FailedScheduling Event does not say a claim held the pod: {text}"

    async def unbound() -> str | None:
        node = await extended._bound(ctx, pod)
        return f"pod {pod} was bound to {node}" if node else None

    await ctx.client.never(f"pod {pod} stays Pending", unbound, for_seconds=2.0)


async def network_data(ctx: Context) -> None:
    network = ctx.settings.get("DRA_NETWORK")
    if not network:
        ctx.skip("no PodNetwork to attach through a claim: pass --dra-network NAME, a Ready PodNetwork the "
                 "cluster attaches to pods")
    where = _name((await _nodes(ctx, 1))[0])
    await c.wait_condition(ctx, kc.PodNetwork, network, c.READY, "True")
    await _offer(ctx, where, network, True)
    await _published(ctx, network, {where}, set())
    await _template(ctx, "attached", network)
    # named in the pod's networks too: an agent that attaches by the annotation attaches it
    networks = [extended.DEFAULT, {"podNetworkName": network, "interfaceName": INTERFACE}]
    (body,) = ctx.manifest("pod.yaml", NAME="attached", NETWORKS=json.dumps(networks))
    body["spec"]["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": "attached"}]
    await ctx.create(kc.Pod, body)

    async def running() -> dict[str, Any]:
        pod = await ctx.client.get(kc.Pod, "attached", ctx.namespace)
        if views.read(pod).status.phase != "Running":
            raise kc.Unmet(f"phase {views.read(pod).status.phase}, conditions "
                           f"{kc.shown(views.read(pod).status.conditions)}")
        assert pod is not None
        return pod

    pod = await ctx.client.eventually("the pod claiming the network runs", running,
                                      timeout=ctx.timeouts.schedule)
    claim = claim_name(pod, CLAIM)
    assert claim, f"the running pod's status names no ResourceClaim for {CLAIM!r}"

    async def addresses() -> set[str]:
        seen = await ctx.client.get(kc.Pod, "attached", ctx.namespace)
        got = [] if seen is None else extended._pod_ips(seen)
        found = {str(e.get("ip")) for e in got if e.get("podNetwork") == network}
        if not found:
            raise kc.Unmet(f"no pod IP names PodNetwork {network}")
        return found

    on_network = await ctx.client.eventually(f"the pod reports its addresses on {network}", addresses)
    driver = ctx.settings["DRA_DRIVER"]

    async def reported() -> bool:
        problem = network_data_problem(await ctx.client.get(kc.ResourceClaim, claim, ctx.namespace), driver,
                                       INTERFACE, on_network)
        if problem:
            raise kc.Unmet(problem)
        return True

    await ctx.client.eventually(f"ResourceClaim {claim} reports the pod's interface {INTERFACE}", reported)


SPEC = 'KEP "DRA integration (alternative)", Req 18'
TESTS: tuple[ConformanceTest, ...] = (
    ConformanceTest(
        "DRADevicesFollowOffers",
        "The DRA driver publishes a shareable device for a Ready PodNetwork on a node that offers it and "
        "not on one that does not; a disabled PodNetwork has none until it is enabled.",
        (FEATURE,), SPEC, devices_follow_offers, ("podnetwork.yaml",)),
    ConformanceTest(
        "DRAPlacedWhereOffered",
        "Pods claiming a PodNetwork offered on one node are bound there by kube-scheduler, their claims "
        "allocated that node's device and reserved for them; deleting a pod deallocates its claim.",
        (FEATURE,), SPEC, placed_where_offered, ("podnetwork.yaml", "pod-no-networks.yaml")),
    ConformanceTest(
        "DRAPendingWhereOfferedNowhere",
        "A pod claiming a PodNetwork no node offers stays Pending with kube-scheduler's FailedScheduling "
        "Event, and is bound once a node offers it.",
        (FEATURE,), SPEC, pending_where_offered_nowhere, ("podnetwork.yaml", "pod-no-networks.yaml")),
    ConformanceTest(
        "DRANetworkData",
        "A running pod claiming a PodNetwork (and naming it) has its claim report the interface in "
        "KEP-4817 networkData: the interface name and the pod's addresses on that network as CIDRs.",
        ("DRANetworkData",), 'KEP "DRA integration (alternative)", "Status"; KEP-4817 networkData',
        network_data, ("pod.yaml",)),
)
