"""What one event costs the PodNetwork controller, against kmock's emulator over real HTTP.

A pod event costs O(networks of that pod): it does not rebuild a busy network's InUse
message (the coalesced flush does), an InUse-only status write does not walk the nodes,
and a pod that names its networks does not parse its namespace's profile.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import kopf
import pytest

from podnetwork.ground import constants
from podnetwork.kep import conditions, controller, inuse
from podnetwork.kep.api import Network
from tests.api import kube_emulator
from tests.api.controller_support import node, pod, podnetwork
from tests.api.kube_emulator import (
    NODES,
    PN,
    PODS,
    Emulator,
    condition,
    declare_resources,
    eventually,
)

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(60)]

PN_URL = f"/apis/{constants.GROUP}/{constants.VERSION}/podnetworks"


def stored(kmock: Any, resource: str, ns: str | None, name: str) -> dict[str, Any]:
    obj = kmock.objects[resource, ns, name]
    if obj.deleted:
        raise KeyError(name)
    return dict(obj)






class CountingIndex(inuse.Index):
    """The real index, counting how often the InUse message's O(consumers) sample is built."""

    def __init__(self) -> None:
        super().__init__()
        self.usage_calls: dict[inuse.Ref, int] = {}

    def usage(self, ref: inuse.Ref) -> conditions.Usage:
        self.usage_calls[ref] = self.usage_calls.get(ref, 0) + 1
        return super().usage(ref)


async def test_a_pod_event_on_a_busy_network_does_not_rebuild_the_inuse_message(kmock):
    # One pod event costs O(networks of that pod). Building the InUse
    # message sorts the network's consumers (all pods, for `default`), so a pod event that
    # changes only the count must leave it to the coalesced flush.
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    index = CountingIndex()
    registry = kopf.OperatorRegistry()
    ctl = controller.Controller(
        config=controller.ControllerSettings(inuse_message_interval=30, namespace_profiles=False), index=index,
        api=kube_emulator.api(kmock))
    controller.register(registry, ctl)
    blue = inuse.podnetwork_ref("blue")
    async with kube_emulator.operator(kmock, registry):
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse")["status"] == "True")
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "Ready")["status"] == "True")
        await asyncio.sleep(0.3)
        before = index.usage_calls.get(blue, 0)
        for name in ("b", "c", "d", "e"):
            async with kmock.request("POST", "/api/v1/namespaces/ns/pods",
                                     json=pod(name, [{"podNetworkName": "blue"}])) as resp:
                assert resp.status < 300
        await eventually(lambda: len(ctl.index.pods_of(blue)) == 5)
        await eventually(lambda: blue in ctl.deferred)  # the new count waits for the next flush
        await asyncio.sleep(0.3)  # every pod event handler has run
        assert index.usage_calls.get(blue, 0) == before


@dataclasses.dataclass
class CountingController(controller.Controller):
    """The real controller, counting how often it walks the nodes for a PodNetwork."""

    node_walks: list[str] = dataclasses.field(default_factory=list)

    async def reconcile_nodes(self, podnetwork_name: str) -> None:
        self.node_walks.append(podnetwork_name)
        await super().reconcile_nodes(podnetwork_name)


async def test_an_inuse_only_status_write_does_not_walk_the_nodes(kmock):
    # Nodes and attachments read a PodNetwork's Ready only; the InUse message of a busy
    # network is rewritten every flush and must not cost O(nodes) each time.
    declare_resources(kmock)
    kmock.objects[NODES, None, "n1"] = node("n1")
    kmock.objects[PODS, "ns", "a"] = pod("a")  # on `default`
    ctl = CountingController(config=controller.ControllerSettings(
        inuse_message_interval=0.2, namespace_profiles=False), api=kube_emulator.api(kmock))
    registry = kopf.OperatorRegistry()
    controller.register(registry, ctl)
    async with kube_emulator.operator(kmock, registry):
        await eventually(lambda: condition(stored(kmock, PN, None, "default"), "InUse")["message"]
                         == "in use by 1 pod: ns/a")
        await eventually(lambda: condition(stored(kmock, NODES, None, "n1"), "DefaultPodNetworkReady"))
        await asyncio.sleep(0.5)
        walks = len(ctl.node_walks)
        for name in ("b", "c"):
            async with kmock.request("POST", "/api/v1/namespaces/ns/pods", json=pod(name)) as resp:
                assert resp.status < 300
        await eventually(lambda: condition(stored(kmock, PN, None, "default"), "InUse")["message"]
                         == "in use by 3 pods: ns/a, ns/b, ns/c")
        await asyncio.sleep(0.3)
        assert len(ctl.node_walks) == walks
        # a Ready change still reaches the nodes at once
        async with kmock.request("PATCH", f"{PN_URL}/default", json={"spec": {"enabled": False}},
                                 headers={"Content-Type": "application/merge-patch+json"}) as resp:
            assert resp.status < 300
        await eventually(lambda: condition(stored(kmock, NODES, None, "n1"), "DefaultPodNetworkReady")["status"]
                         == "False")
    assert len(ctl.node_walks) > walks






@dataclasses.dataclass
class ProfileCountingController(controller.Controller):
    """The real controller, counting how often a namespace profile is parsed for a pod event."""

    profile_reads: list[str] = dataclasses.field(default_factory=list)

    def namespace_profile(self, name: str) -> list[Network] | None:
        self.profile_reads.append(name)
        return super().namespace_profile(name)


async def test_pods_that_name_their_networks_do_not_parse_their_namespace_profile(kmock):
    # The profile (KEP Story #6) only fills in pods without the networks annotation; after
    # admission that is none of them, so a pod event must not parse and validate it.
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    kmock.objects[PODS, "other", "b"] = pod("b", ns="other")  # no annotation: the profile applies
    ctl = ProfileCountingController(config=controller.ControllerSettings(
        inuse_message_interval=0.2, namespace_profiles=False), api=kube_emulator.api(kmock))
    for ns in ("ns", "other"):
        ctl.namespaces[ns] = {"metadata": {"name": ns, "annotations": {
            constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: '[{"podNetworkName": "blue"}]'}}}
    registry = kopf.OperatorRegistry()
    controller.register(registry, ctl)
    async with kube_emulator.operator(kmock, registry):
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse")["message"]
                         == "in use by 2 pods: ns/a, other/b")
    assert ctl.index.references_of_pod("other/b") == frozenset({inuse.podnetwork_ref("blue")})
    assert ctl.profile_reads
    assert set(ctl.profile_reads) == {"other"}  # never for pod a, which names its networks
