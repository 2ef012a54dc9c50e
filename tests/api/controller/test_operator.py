"""The kopf operator against kmock's Kubernetes emulator, over real HTTP.

Each test starts the operator (controller.register + kopf.operator) on a
fresh emulator, changes objects through the emulator's HTTP API as a user or
the provider would, and asserts the requests the operator sent and what they
left stored.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from podnetwork.ground import constants
from podnetwork.kep import controller
from tests.api.controller_support import attachment, node, pod, podnetwork, running
from tests.api.kube_emulator import (
    NODES,
    PN,
    PNA,
    PODS,
    Emulator,
    condition,
    content_types,
    declare_resources,
    eventually,
    requests_to,
)

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(60)]

FIN = constants.IN_USE_FINALIZER
PN_URL = f"/apis/{constants.GROUP}/{constants.VERSION}/podnetworks"
PNA_URL = f"/apis/{constants.GROUP}/{constants.VERSION}/namespaces/ns/podnetworkattachments"
FAST = controller.ControllerSettings(inuse_message_interval=0.2)


def stored(kmock: Any, resource: str, ns: str | None, name: str) -> dict[str, Any]:
    obj = kmock.objects[resource, ns, name]  # KeyError when never created
    if obj.deleted:
        raise KeyError(name)
    return dict(obj)


def gone(kmock: Any, resource: str, ns: str | None, name: str) -> bool:
    try:
        stored(kmock, resource, ns, name)
    except KeyError:
        return True
    return False


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj["metadata"])


async def http(kmock: Any, method: str, path: str, body: Any = None,
               content_type: str = "application/merge-patch+json") -> None:
    kwargs: dict[str, Any] = {}
    if body is not None:
        kwargs = {"json": body, "headers": {"Content-Type": content_type}}
    async with kmock.request(method, path, **kwargs) as resp:
        assert resp.status < 300, await resp.text()


def patches_since(kmock: Any, start: int) -> list[str]:
    return [f"{r.method.value} {r.url.path}" for r in list(kmock)[start:]
            if r.method.value in ("PATCH", "POST", "PUT", "DELETE")]


async def test_startup_creates_default_sets_conditions_finalizer_and_node_condition(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    kmock.objects[NODES, None, "n1"] = node("n1")
    async with running(kmock, FAST):
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse"))
        await eventually(lambda: condition(stored(kmock, NODES, None, "n1"), "DefaultPodNetworkReady"))
        await eventually(lambda: condition(stored(kmock, PN, None, "default"), "Ready"))

    assert requests_to(kmock, "POST", "/podnetworks") == [
        {"apiVersion": constants.API_VERSION, "kind": "PodNetwork",
         "metadata": {"name": "default"}, "spec": {"enabled": True}}]
    blue = stored(kmock, PN, None, "blue")
    assert meta(blue)["finalizers"] == [FIN]
    ready, in_use = condition(blue, "Ready"), condition(blue, "InUse")
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "Ready", 1)
    assert (in_use["status"], in_use["message"]) == ("True", "in use by 1 pod: ns/a")
    # status goes to the status subresource, as a merge patch guarded by resourceVersion
    status_patch = requests_to(kmock, "PATCH", "/podnetworks/blue/status")[0]
    assert status_patch["metadata"] == {"resourceVersion": "0"} or "resourceVersion" in status_patch["metadata"]
    node_cond = condition(stored(kmock, NODES, None, "n1"), "DefaultPodNetworkReady")
    assert (node_cond["status"], node_cond["reason"]) == ("True", "DefaultPodNetworkReady")
    assert content_types(kmock, "PATCH", "/nodes/n1/status") == ["application/strategic-merge-patch+json"]
    # pods are only read: no annotation, no finalizer, no kopf progress storage
    assert requests_to(kmock, "PATCH", "/pods/a") == []
    assert not [r for r in kmock if r.method.value != "GET" and "/pods" in r.url.path]


async def test_steady_cluster_makes_no_writes(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    kmock.objects[NODES, None, "n1"] = node("n1")
    async with running(kmock, FAST):
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse"))
        await eventually(lambda: condition(stored(kmock, NODES, None, "n1"), "DefaultPodNetworkReady"))
        await asyncio.sleep(0.5)
        start = len(list(kmock))
        await asyncio.sleep(1.0)  # several flush intervals and every echo of our own writes
        assert patches_since(kmock, start) == []


async def test_pending_delete_completes_when_the_last_pod_terminates(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    async with running(kmock, FAST):
        await eventually(lambda: FIN in meta(stored(kmock, PN, None, "blue")).get("finalizers", []))
        await http(kmock, "DELETE", f"{PN_URL}/blue")
        await asyncio.sleep(0.3)
        assert meta(stored(kmock, PN, None, "blue")).get("deletionTimestamp")  # waits: in use
        await http(kmock, "PATCH", "/api/v1/namespaces/ns/pods/a/status", {"status": {"phase": "Succeeded"}})
        await eventually(lambda: gone(kmock, PN, None, "blue"))
    assert requests_to(kmock, "PATCH", "/podnetworks/blue")[-1]["metadata"]["finalizers"] == []


async def test_deleted_pod_releases_the_attachment_and_inuse_turns_false(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkAttachmentName": "fast"}])
    async with running(kmock, FAST):
        await eventually(lambda: condition(stored(kmock, PNA, "ns", "fast"), "InUse")["status"] == "True")
        blue_in_use = await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse"))
        assert blue_in_use["message"] == "in use by 1 attachment: pna ns/fast"
        assert FIN in meta(stored(kmock, PNA, "ns", "fast"))["finalizers"]
        await http(kmock, "DELETE", "/api/v1/namespaces/ns/pods/a")
        await eventually(lambda: condition(stored(kmock, PNA, "ns", "fast"), "InUse")["status"] == "False")
        assert meta(stored(kmock, PNA, "ns", "fast"))["finalizers"] == []
        # the PodNetwork is still held by the attachment
        assert meta(stored(kmock, PN, None, "blue"))["finalizers"] == [FIN]


async def test_attachment_follows_its_podnetwork_without_resync(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "blue")
    async with running(kmock, FAST):
        await eventually(lambda: condition(stored(kmock, PNA, "ns", "fast"), "Ready")["status"] == "True")
        await http(kmock, "PATCH", f"{PN_URL}/blue", {"spec": {"enabled": False}})
        cond = await eventually(lambda: condition(stored(kmock, PNA, "ns", "fast"), "Ready")
                                if condition(stored(kmock, PNA, "ns", "fast"), "Ready")["status"] == "False"
                                else None or False)
        assert cond["reason"] == "PodNetworkNotReady"
        assert cond["message"] == 'PodNetwork "blue" is not Ready: its Ready condition is False (AdministrativelyDisabled)'
        assert condition(stored(kmock, PN, None, "blue"), "Ready")["reason"] == "AdministrativelyDisabled"


async def test_attachment_to_a_missing_podnetwork_is_not_ready(kmock):
    declare_resources(kmock)
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "purple")
    async with running(kmock, controller.ControllerSettings(create_default=False)):
        cond = await eventually(lambda: condition(stored(kmock, PNA, "ns", "fast"), "Ready"))
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "PodNetworkNotReady", 'PodNetwork "purple" not found')
    assert requests_to(kmock, "POST", "/podnetworks") == []


async def test_params_ready_from_the_provider_makes_it_ready_and_nudges_waiting_pods(kmock):
    declare_resources(kmock)
    refs = [{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "nad", "namespace": "ns"}]
    kmock.objects[PN, None, "blue"] = podnetwork("blue", parametersRefs=refs)
    kmock.objects[PODS, "ns", "waiting"] = pod("waiting", [{"podNetworkName": "blue"}], node=None, phase="Pending")
    kmock.objects[PODS, "ns", "placed"] = pod("placed", [{"podNetworkName": "blue"}])
    async with running(kmock, FAST):
        cond = await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "Ready"))
        assert (cond["status"], cond["reason"]) == ("False", "ParamsNotReady")
        assert requests_to(kmock, "PATCH", "/pods/waiting") == []
        # the provider (the bridge) reports ParamsReady on the status subresource
        current = stored(kmock, PN, None, "blue")["status"]["conditions"]
        params = {"type": "ParamsReady", "status": "True", "reason": "NADFound", "message": "ok",
                  "lastTransitionTime": "2026-01-01T00:00:00Z"}
        await http(kmock, "PATCH", f"{PN_URL}/blue/status", {"status": {"conditions": [*current, params]}})
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "Ready")["status"] == "True")
        await eventually(lambda: requests_to(kmock, "PATCH", "/pods/waiting"))
    nudge = requests_to(kmock, "PATCH", "/pods/waiting")
    assert list(nudge[0]["metadata"]["annotations"]) == [constants.REQUEUED_AT_ANNOTATION]
    assert requests_to(kmock, "PATCH", "/pods/placed") == []  # scheduled pods are left alone
    # the provider's condition is kept as the provider wrote it
    assert condition(stored(kmock, PN, None, "blue"), "ParamsReady")["reason"] == "NADFound"


async def test_a_node_coming_to_offer_a_network_nudges_the_pods_waiting_for_it(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "waiting"] = pod("waiting", [{"podNetworkName": "blue"}], node=None, phase="Pending")
    kmock.objects[PODS, "ns", "placed"] = pod("placed", [{"podNetworkName": "blue"}])
    kmock.objects[NODES, None, "n2"] = node("n2")
    offers = constants.NODE_PODNETWORKS_ANNOTATION
    await http(kmock, "PATCH", "/api/v1/nodes/n2", {"metadata": {"annotations": {offers: "[]"}}})
    async with running(kmock, FAST):
        await eventually(lambda: condition(stored(kmock, NODES, None, "n2"), "DefaultPodNetworkReady"))
        # blue seen Ready for the first time nudges the pod once already
        await eventually(lambda: requests_to(kmock, "PATCH", "/pods/waiting"))
        start = len(list(kmock))
        await http(kmock, "PATCH", "/api/v1/nodes/n2", {"metadata": {"annotations": {offers: '["blue"]'}}})
        await eventually(lambda: [p for p in patches_since(kmock, start) if p.endswith("/pods/waiting")])
    assert len([p for p in patches_since(kmock, start) if p.endswith("/pods/waiting")]) == 1
    assert requests_to(kmock, "PATCH", "/pods/placed") == []


async def test_default_podnetwork_is_recreated_when_deleted(kmock):
    declare_resources(kmock)
    kmock.objects[PODS, "ns", "a"] = pod("a")  # no annotation: uses `default`
    async with running(kmock, FAST):
        await eventually(lambda: FIN in meta(stored(kmock, PN, None, "default")).get("finalizers", []))
        await http(kmock, "DELETE", f"{PN_URL}/default")
        await eventually(lambda: len(requests_to(kmock, "POST", "/podnetworks")) == 2)
        recreated = await eventually(lambda: condition(stored(kmock, PN, None, "default"), "Ready"))
        assert recreated["status"] == "True"
    # the in-use finalizer was released so the deletion did not hang
    assert [] in [p["metadata"].get("finalizers") for p in requests_to(kmock, "PATCH", "/podnetworks/default")]


async def test_node_override_names_its_own_default_podnetwork(kmock):
    declare_resources(kmock)
    kmock.objects[NODES, None, "n2"] = node("n2", override="green")
    async with running(kmock, FAST):
        cond = await eventually(lambda: condition(stored(kmock, NODES, None, "n2"), "DefaultPodNetworkReady"))
        assert (cond["status"], cond["reason"]) == ("False", "DefaultPodNetworkNotFound")
        assert cond["message"] == 'default PodNetwork "green" (node override) not found in API'
        await http(kmock, "POST", PN_URL, podnetwork("green"), content_type="application/json")
        await eventually(lambda: condition(stored(kmock, NODES, None, "n2"), "DefaultPodNetworkReady")["status"] == "True")


async def test_missing_default_is_reported_on_nodes_when_creation_is_disabled(kmock):
    declare_resources(kmock)
    kmock.objects[NODES, None, "n1"] = node("n1")
    async with running(kmock, controller.ControllerSettings(create_default=False)):
        cond = await eventually(lambda: condition(stored(kmock, NODES, None, "n1"), "DefaultPodNetworkReady"))
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "DefaultPodNetworkNotFound", "default PodNetwork not found in API")


async def test_inuse_message_follows_new_pods_after_the_coalescing_interval(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    async with running(kmock, FAST):
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse")["message"] == "in use by 1 pod: ns/a")
        first = condition(stored(kmock, PN, None, "blue"), "InUse")
        finalizer_patches = len(requests_to(kmock, "PATCH", "/podnetworks/blue"))
        for name in ("b", "c"):
            await http(kmock, "POST", "/api/v1/namespaces/ns/pods", pod(name, [{"podNetworkName": "blue"}]),
                       content_type="application/json")
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse")["message"]
                         == "in use by 3 pods: ns/a, ns/b, ns/c")
        later = condition(stored(kmock, PN, None, "blue"), "InUse")
    assert later["lastTransitionTime"] == first["lastTransitionTime"]  # status stayed True
    assert len(requests_to(kmock, "PATCH", "/podnetworks/blue")) == finalizer_patches  # no finalizer churn
    # two new pods inside one interval: one coalesced status write, not one per pod
    assert len(requests_to(kmock, "PATCH", "/podnetworks/blue/status")) <= 3
