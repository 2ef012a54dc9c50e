"""The Services' ClusterIPs kept by the agent in its pods, with real plugins, real nft, real routes and
real traffic.

The real agent behind its socket attaches pods whose delegates run inside the netpol harness's
sealed node namespace (tests/cni/agent_node_support.py: no packet can leave, asserted after the
test). Its Services state hears the objects as its list + watch would (`ServiceState.listed` /
`changed`; the watches themselves are tests/api/agent/test_service_watches.py): the PodNetwork
`blue` backed by the node's net1 NAD, a Service on it with ClusterIP 10.96.77.10 (which no
namespace of the test owns), and our EndpointSlice of its backends' net1 addresses.

One story, in order: backends x/b and x/c are attached by the agent; a client x/a ADDed while the
Service has ready endpoints reaches the ClusterIP over net1 as soon as its ADD answers (each
backend, seeing the client's net1 address); an endpoint change is followed; deleting the Service
removes the table and the routes; a Service again, then DEL leaves no table and no route.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.kube.watchcache import ENDPOINTSLICE, SERVICE
from bridge.agent.netns import clusterips, nftables
from bridge.agent.netns.reconciler import Settings
from bridge.agent.services.apply import ClusterIPs
from bridge.agent.services.state import KINDS, ServiceState
from podnetwork.ground import constants
from tests.cni.agent_node_support import NAD_NAME, add, sealed_node
from tests.cni.agent_support import World
from tests.cni.netpol_pod_support import WHO_PORT
from tests.cni.netpol_support import InNode, Node

pytestmark = pytest.mark.cni

CLUSTER_IP = "10.96.77.10"
TRIES = 16
"""Connections per check: a backend of two is missed by all of them with probability 2**-15."""

PODNETWORK = {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "blue"},
              "spec": {"enabled": True, "provider": "multinetwork.x-k8s.io/npwg-bridge", "parametersRefs": [
                  {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": NAD_NAME,
                   "namespace": "default"}]}}
SERVICE_OBJECT = {
    "apiVersion": "v1", "kind": "Service", "metadata": {
        "namespace": "x", "name": "who", "labels": {constants.SERVICE_PROXY_NAME_LABEL: constants.SERVICE_PROXY_NAME},
        "annotations": {constants.SERVICE_PODNETWORK_ANNOTATION: "blue"}},
    "spec": {"type": "ClusterIP", "clusterIP": CLUSTER_IP, "clusterIPs": [CLUSTER_IP], "selector": {"app": "who"},
             "ports": [{"name": "who", "protocol": "TCP", "port": 80, "targetPort": "who"}]}}


@pytest.fixture
def node(cni_host: list[Path]) -> Iterator[Node]:
    with sealed_node(cni_host) as made:
        yield made


def endpoint_slice(node: Node, *backends: str) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"namespace": "x", "name": "who.ipv4.0", "labels": {
                constants.ENDPOINTSLICE_MANAGED_BY_LABEL: constants.ENDPOINTSLICE_MANAGED_BY,
                constants.ENDPOINTSLICE_SERVICE_NAME_LABEL: "who"}},
            "endpoints": [{"addresses": [node.pods[b].addresses["net1"]], "conditions": {"ready": True}}
                          for b in backends],
            "ports": [{"name": "who", "protocol": "TCP", "port": WHO_PORT}]}


def reached(node: Node, tries: int = TRIES) -> list[dict[str, Any]]:
    return node.who("x/a", CLUSTER_IP, 80, count=tries, timeout=1.0)


def backends_of(answers: list[dict[str, Any]]) -> set[str]:
    return {a["pod"] for a in answers if "pod" in a}


async def eventually_reached(node: Node, expected: set[str], what: str) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    for _ in range(30):
        answers = await asyncio.to_thread(reached, node)
        if backends_of(answers) == expected and (not expected or all("pod" in a for a in answers)):
            return answers
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: the ClusterIP reached {answers}, not {sorted(expected)}")


async def eventually(condition: Any, what: str) -> None:
    for _ in range(40):
        if await condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not so: {what}")


async def test_the_agent_serves_the_cluster_ip_at_add_follows_endpoints_and_leaves_nothing(
    cni_host: list[Path], node: Node
) -> None:
    world = World(cni_host)
    try:
        world.nad(NAD_NAME, node.plugin_config("net1"))
        state = ServiceState()
        for kind in KINDS:
            state.listed(kind, [o for o in (PODNETWORK,) if o["kind"] == kind.name])
        served = ClusterIPs(state, Settings(quiet=0.02, max_delay=0.1, retry_first=0.1, retry_max=1.0))
        await world.start_agent(executor=InNode(node), services=served, default_network=node.plugin_config("eth0"))
        await add(world, node, "x", "b", {"app": "who"})
        await add(world, node, "x", "c", {"app": "who"})
        state.changed(SERVICE, "ADDED", SERVICE_OBJECT)
        state.changed(ENDPOINTSLICE, "ADDED", endpoint_slice(node, "x/b", "x/c"))

        # The client's ADD writes its table and route before it answers: the ClusterIP works at once
        # (polled briefly: the backends' servers may still be starting), over net1.
        a_netns = await add(world, node, "x", "a", {"app": "client"})
        assert await nftables.exists(a_netns, table=nftables.SERVICES)
        assert [r.interface for r in await clusterips.routes(a_netns)] == ["net1"]
        answers = await eventually_reached(node, {"x/b", "x/c"}, "just after the ADD")
        assert {a["peer"] for a in answers} == {node.pods["x/a"].addresses["net1"]}, answers

        # The backends are clients too, and got the table when they were ADDed (the Service came after):
        b_netns = node.pods["x/b"].path
        await eventually(lambda: nftables.exists(b_netns, table=nftables.SERVICES), "x/b's table")

        # An endpoint leaves: followed.
        state.changed(ENDPOINTSLICE, "MODIFIED", endpoint_slice(node, "x/c"))
        await eventually_reached(node, {"x/c"}, "after x/b left the slice")

        # The Service goes: the table and the routes go, and the ClusterIP reaches nothing.
        state.changed(SERVICE, "DELETED", SERVICE_OBJECT)

        async def gone() -> bool:
            return not await nftables.exists(a_netns, table=nftables.SERVICES) and not await clusterips.routes(a_netns)

        await eventually(gone, "the Service's rules removed")
        assert all("error" in a for a in reached(node, tries=2))

        # A Service again, then DEL: no table, no route left in the namespace (which the test made).
        state.changed(SERVICE, "ADDED", SERVICE_OBJECT)
        await eventually_reached(node, {"x/c"}, "the Service back")
        answer = await world.cni("DEL", "c-x-a", a_netns, "a", namespace="x")
        assert answer.returncode == 0, answer.stdout
        assert not await nftables.exists(a_netns, table=nftables.SERVICES)
        assert not await clusterips.routes(a_netns)
    finally:
        await world.cleanup()
