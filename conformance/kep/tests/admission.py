"""Pod admission: static validation, auto-population and namespace default networks
(KEP-3698 "Static validations", "Auto-population", Phase IV Req 23)."""

from __future__ import annotations

import json
from typing import Any

from conformance.kep import client as kc
from conformance.kep.suite import ConformanceTest, Context
from conformance.kep.tests import common as c
from podnetwork.ground import constants

DEFAULT = {"podNetworkName": constants.DEFAULT_PODNETWORK}


async def admission_probe(ctx: Context) -> str | None:
    """None when something admits pods' networks: a pod naming `default` twice is refused, or a
    pod naming none is given one. Else the reason to skip."""
    try:
        await c.pod(ctx, "probe-twice", [DEFAULT, DEFAULT])
    except kc.ApiError as exc:
        if 400 <= exc.status < 500 and exc.status not in (404, 409):
            return None
        raise
    await c.pod(ctx, "probe-none", None)
    if await c.pod_networks(ctx, "probe-none") is not None:
        return None
    return ("no pod admission for networks: a pod naming the PodNetwork default twice was accepted, and a "
            "pod naming no network was given none (install the implementation's admission webhook)")


INVALID: tuple[tuple[str, list[dict[str, Any]], bool], ...] = (
    ("the same PodNetwork twice", [DEFAULT, DEFAULT], False),
    ("two networks holding the IPv4 default gateway",
     [{**DEFAULT, "isDefaultGW4": True}, {"podNetworkName": "${OTHER}", "isDefaultGW4": True}], False),
    ("two networks holding the IPv6 default gateway",
     [{**DEFAULT, "isDefaultGW6": True}, {"podNetworkName": "${OTHER}", "isDefaultGW6": True}], False),
    ("one interface name twice",
     [{**DEFAULT, "interfaceName": "net1"}, {"podNetworkName": "${OTHER}", "interfaceName": "net1"}], False),
    ("a Linux interface name of 16 bytes", [{**DEFAULT, "interfaceName": "a234567890123456"}], False),
    ("networks on a hostNetwork pod", [DEFAULT], True),
)


async def static_validation(ctx: Context) -> None:
    await ctx.probe("admission", admission_probe)
    other = await c.podnetwork(ctx, "other")
    for index, (what, networks, host) in enumerate(INVALID):
        nets = [{k: (other if v == "${OTHER}" else v) for k, v in n.items()} for n in networks]
        (body,) = ctx.manifest("pod.yaml", NAME=f"invalid-{index}", NETWORKS=json.dumps(nets))
        if host:
            body["spec"]["hostNetwork"] = True
        await c.refused(ctx, f"a pod with {what}", lambda b=body: ctx.create(kc.Pod, b))
    await c.pod(ctx, "valid", [{**DEFAULT, "interfaceName": "eth0", "isDefaultGW4": True},
                               {"podNetworkName": other, "interfaceName": "net1"}])


async def auto_population(ctx: Context) -> None:
    await ctx.probe("admission", admission_probe)
    await c.pod(ctx, "plain", None)
    got = await c.pod_networks(ctx, "plain")
    assert got == [DEFAULT], f"a pod naming no network should get {[DEFAULT]}, got {got}"
    await ctx.apply("pod-host-network.yaml", NAME="host")
    got = await c.pod_networks(ctx, "host")
    assert not got, f"a hostNetwork pod should get no networks (KEP \"Auto-population\"), got {got}"


async def namespace_default_networks(ctx: Context) -> None:
    await ctx.probe("admission", admission_probe)
    # The namespace was created naming this network; it need not exist for admission.
    await c.pod(ctx, "plain", None)
    got = await c.pod_networks(ctx, "plain")
    want = [DEFAULT, {"podNetworkName": ctx.name("nsnet")}]
    assert got == want, f"a pod naming no network in a namespace whose default networks are {want} got {got}"
    await c.pod(ctx, "explicit", [DEFAULT])
    got = await c.pod_networks(ctx, "explicit")
    assert got == [DEFAULT], f"a pod that names its networks keeps them, got {got}"


TESTS: tuple[ConformanceTest, ...] = (
    ConformanceTest(
        "StaticValidation",
        "A pod naming a PodNetwork twice, two default gateways of a family, an interface name twice or too "
        "long, or networks with hostNetwork is refused; a valid one is accepted.",
        ("StaticValidation",), 'KEP "Static validations"', static_validation,
        ("podnetwork.yaml", "pod.yaml")),
    ConformanceTest(
        "AutoPopulation",
        "A pod naming no network gets [{podNetworkName: default}]; a hostNetwork pod gets none.",
        ("AutoPopulation",), 'KEP "Auto-population", Req 11', auto_population,
        ("pod-no-networks.yaml", "pod-host-network.yaml")),
    ConformanceTest(
        "NamespaceDefaultNetworks",
        "A pod naming no network in a namespace with default networks (annotation "
        f"{constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION}) gets them.",
        ("NamespaceDefaultNetworks",), "KEP Req 23, Story #6", namespace_default_networks,
        ("pod-no-networks.yaml", "pod.yaml"),
        {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION:
         '[{"podNetworkName": "default"}, {"podNetworkName": "nsnet-${SUFFIX}"}]'}),
)
