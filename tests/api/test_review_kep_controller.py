"""Review findings on the PodNetwork controller, against the kmock emulator over real HTTP.

Each test pins a behaviour the KEP or issue #3 asks for and that a real API
server can break: transient errors at startup, failed re-creation of `default`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import kopf
import kube_emulator
import pytest
from controller_support import node, pod, podnetwork, running
from kube_emulator import NODES, PN, PODS, Emulator, condition, declare_resources, eventually, requests_to

from podnetwork import conditions, constants, controller, inuse
from podnetwork.api import Network

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(60)]

FAST = controller.ControllerSettings(inuse_message_interval=0.2)
PN_URL = f"/apis/{constants.GROUP}/{constants.VERSION}/podnetworks"
FIN = constants.IN_USE_FINALIZER


def stored(kmock: Any, resource: str, ns: str | None, name: str) -> dict[str, Any]:
    obj = kmock.objects[resource, ns, name]
    if obj.deleted:
        raise KeyError(name)
    return dict(obj)


async def test_default_podnetwork_is_created_after_the_api_server_failed_the_first_attempts(kmock):
    declare_resources(kmock)
    kmock.objects[NODES, None, "n1"] = node("n1")
    kmock.failures["/podnetworks"] = 2  # the first create and kopf's own retry both get 503
    async with running(kmock, FAST):
        ready = await eventually(lambda: condition(stored(kmock, PN, None, "default"), "Ready"))
        node_cond = await eventually(
            lambda: condition(stored(kmock, NODES, None, "n1"), "DefaultPodNetworkReady")["status"] == "True")
    assert ready["status"] == "True"
    assert node_cond
    assert kmock.failures["/podnetworks"] == 0
    assert len(requests_to(kmock, "POST", "/podnetworks")) == 3


async def test_deferred_status_writes_still_retry_after_a_failed_default_creation(kmock):
    declare_resources(kmock)
    kmock.failures["/podnetworks"] = 2
    kmock.failures["/podnetworks/blue/status"] = 2  # retried only by the periodic flush
    kmock.objects[PN, None, "blue"] = {
        "apiVersion": constants.API_VERSION, "kind": "PodNetwork",
        "metadata": {"name": "blue", "uid": "uid-blue", "generation": 1, "resourceVersion": "0"},
        "spec": {"enabled": True}}
    async with running(kmock, FAST):
        cond = await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "Ready"))
    assert cond["status"] == "True"


class CountingIndex(inuse.Index):
    """The real index, counting how often the InUse message's O(consumers) sample is built."""

    def __init__(self) -> None:
        super().__init__()
        self.usage_calls: dict[inuse.Ref, int] = {}

    def usage(self, ref: inuse.Ref) -> conditions.Usage:
        self.usage_calls[ref] = self.usage_calls.get(ref, 0) + 1
        return super().usage(ref)


async def test_a_pod_event_on_a_busy_network_does_not_rebuild_the_inuse_message(kmock):
    # Issue #3 item 2: one pod event costs O(networks of that pod). Building the InUse
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


async def test_a_deletion_does_not_wait_forever_for_a_pod_whose_deleted_event_was_missed(kmock):
    # kopf relists after a watch's 410 Gone and reports what it lists, never DELETED for
    # what vanished meanwhile (kopf/_cogs/clients/watching.py, continuous_watch): the
    # index keeps such a pod. Here `ghost` is that pod, indexed but absent from the API.
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    async with running(kmock, FAST) as ctl:
        await eventually(lambda: FIN in stored(kmock, PN, None, "blue")["metadata"].get("finalizers", []))
        ctl.index.set_pod(pod("ghost", [{"podNetworkName": "blue"}]))
        async with kmock.request("DELETE", f"{PN_URL}/blue") as resp:
            assert resp.status < 300
        await asyncio.sleep(0.5)
        assert stored(kmock, PN, None, "blue")["metadata"].get("deletionTimestamp")  # `a` still uses it
        async with kmock.request("DELETE", "/api/v1/namespaces/ns/pods/a") as resp:
            assert resp.status < 300
        await eventually(lambda: gone(kmock, PN, None, "blue"))
    assert ctl.index.pods_of(inuse.podnetwork_ref("blue")) == frozenset()


def gone(kmock: Any, resource: str, ns: str | None, name: str) -> bool:
    try:
        stored(kmock, resource, ns, name)
    except KeyError:
        return True
    return False


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
