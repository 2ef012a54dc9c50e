"""The bridge controller and the npwg-selection scheduling gate, over HTTP against kmock's emulator."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import kmock as kmock_lib
import pytest

from bridge import npwg
from bridge.operator import controller, pods
from tests.api import bridge_api_support as bs

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

GATE = {"name": pods.SCHEDULING_GATE}
OTHER_GATE = {"name": "example.com/quota"}


def seed(k: kmock_lib.KubernetesEmulator, *objs: dict) -> None:
    bs.declare_resources(k)
    kinds = {"PodNetwork": bs.PN, "PodNetworkAttachment": bs.PNA, npwg.NAD_KIND: bs.NAD, "Pod": bs.PODS}
    for obj in objs:
        meta = obj["metadata"]
        k.objects[kinds[obj["kind"]], meta.get("namespace"), meta["name"]] = obj


def gated(name: str, nets: list[dict[str, Any]], gates: list[dict[str, str]] | None = None,
          **kwargs: Any) -> dict[str, Any]:
    body = bs.pod(name, nets, **kwargs)
    body["spec"]["schedulingGates"] = [GATE] if gates is None else gates
    # Far from the emulator's revision counter, so a write with a stale copy conflicts.
    body["metadata"]["resourceVersion"] = "100"
    return body


def pod_of(k: kmock_lib.KubernetesEmulator, name: str) -> dict:
    return copy.deepcopy(k.objects[bs.PODS, bs.NS, name].raw)


def released(k: kmock_lib.KubernetesEmulator, name: str) -> Any:
    """A check for `bs.eventually`: the pod no longer carries any scheduling gate."""
    def check() -> dict:
        body = pod_of(k, name)
        assert "schedulingGates" not in body["spec"], body["spec"]
        return body
    return check


def pod_patches(k: kmock_lib.KubernetesEmulator, name: str) -> list[dict]:
    return bs.requests_to(k, "PATCH", bs.POD_URL.format(ns=bs.NS, name=name))


async def test_a_gated_pod_gets_its_selection_and_loses_the_gate_in_one_write(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane", ready=False), bs.nad("dataplane"),
         gated("p1", [{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}]))
    async with bs.running(kmock):
        await asyncio.sleep(0.5)
        # Not Ready yet: no write at all, the gate keeps kube-scheduler away.
        assert pod_patches(kmock, "p1") == []
        assert pod_of(kmock, "p1")["spec"]["schedulingGates"] == [GATE]
        await bs.call(kmock, "PATCH", f"{bs.PN_URL}/dataplane/status",
                      {"status": {"conditions": [bs.ready_condition()]}})

        def ungated() -> dict:
            body = pod_of(kmock, "p1")
            assert "schedulingGates" not in body["spec"]
            return body
        body = await bs.eventually(ungated)
        await asyncio.sleep(0.3)
    value = bs.annotations(body)[npwg.NETWORKS_ANNOTATION]
    assert json.loads(value) == [{"name": "dataplane", "namespace": "nets", "interface": "net1"}]
    (patch,) = pod_patches(kmock, "p1")
    assert patch["spec"] == {"schedulingGates": None}
    assert patch["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION] == value
    assert patch["metadata"]["resourceVersion"]  # a concurrent gate change conflicts instead of being lost


async def test_other_controllers_gates_stay_when_the_bridge_removes_its_own(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("dataplane"), bs.nad("dataplane"),
         gated("p2", [{"podNetworkName": "dataplane"}], gates=[OTHER_GATE, GATE]))
    async with bs.running(kmock):
        def written() -> dict:
            body = pod_of(kmock, "p2")
            assert npwg.NETWORKS_ANNOTATION in bs.annotations(body)
            return body
        body = await bs.eventually(written)
    assert body["spec"]["schedulingGates"] == [OTHER_GATE]


async def test_a_gated_pod_the_bridge_can_never_translate_is_released_without_a_selection(
    kmock: bs.Emulator
) -> None:
    seed(kmock, bs.podnetwork("vendor", nad=None, provider="example.com/vendor"),
         gated("p3", [{"podNetworkName": "vendor"}]))
    async with bs.running(kmock):
        await bs.eventually(released(kmock, "p3"))
    assert npwg.NETWORKS_ANNOTATION not in bs.annotations(pod_of(kmock, "p3"))
    # kopf may hand the bridge the listed pod again after its write: that stale copy's patch
    # conflicts (409) on resourceVersion, so every write is this release and only one lands.
    patches = pod_patches(kmock, "p3")
    assert patches and all(p == {"metadata": {"resourceVersion": "100"}, "spec": {"schedulingGates": None}}
                           for p in patches)


async def test_a_gated_pod_whose_hand_written_selection_disagrees_is_released_with_an_event(
    kmock: bs.Emulator
) -> None:
    seed(kmock, bs.podnetwork("dataplane"), bs.nad("dataplane"),
         gated("p4", [{"podNetworkName": "dataplane"}], annotations={npwg.NETWORKS_ANNOTATION: "nets/other"}))
    async with bs.running(kmock):
        await bs.eventually(released(kmock, "p4"))
        await asyncio.sleep(0.3)
    assert len(bs.requests_to(kmock, "POST", f"/api/v1/namespaces/{bs.NS}/events")) == 1
    assert bs.annotations(pod_of(kmock, "p4"))[npwg.NETWORKS_ANNOTATION] == "nets/other"


async def test_with_no_selection_the_bridge_only_releases_gates(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("dataplane", ready=False), bs.nad("dataplane"),
         gated("p5", [{"podNetworkName": "dataplane"}]))
    async with bs.running(kmock, controller.BridgeSettings(write_selection=False)):
        await bs.eventually(released(kmock, "p5"))
    assert npwg.NETWORKS_ANNOTATION not in bs.annotations(pod_of(kmock, "p5"))


async def test_a_stale_write_conflicts_and_the_next_event_retries_with_the_fresh_gates(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("dataplane", ready=False), bs.nad("dataplane"),
         gated("p6", [{"podNetworkName": "dataplane"}], gates=[OTHER_GATE, GATE]))
    async with bs.running(kmock):
        await asyncio.sleep(0.5)
        # Another controller removes its gate; the bridge's memory of the pod is now stale.
        await bs.call(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="p6"),
                      {"spec": {"schedulingGates": [GATE]}})
        await bs.call(kmock, "PATCH", f"{bs.PN_URL}/dataplane/status",
                      {"status": {"conditions": [bs.ready_condition()]}})

        def done() -> dict:
            body = pod_of(kmock, "p6")
            assert "schedulingGates" not in body["spec"]
            return body
        body = await bs.eventually(done)
    assert npwg.NETWORKS_ANNOTATION in bs.annotations(body)
    # Never re-added: the other controller's removed gate stays removed.
    assert all(OTHER_GATE not in (p.get("spec", {}).get("schedulingGates") or [])
               for p in pod_patches(kmock, "p6")[1:])


def events_on(k: kmock_lib.KubernetesEmulator, pod: str) -> list[tuple[str, str]]:
    """(reason, message) of every Event the bridge posted about `pod`, in order."""
    return [(e["reason"], e["message"]) for e in bs.requests_to(k, "POST", f"/api/v1/namespaces/{bs.NS}/events")
            if e["involvedObject"]["name"] == pod]


HELD = f"; the pod stays behind scheduling gate {pods.SCHEDULING_GATE} until its networks exist and are Ready"


async def test_a_gated_pod_says_in_an_event_which_network_holds_it_once_per_cause(kmock: bs.Emulator) -> None:
    # kube-scheduler never sees a gated pod, so no FailedScheduling names the network: the bridge,
    # which holds it, does, in the extender's words (podnetwork.kep.activevalidation).
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         gated("p7", [{"podNetworkName": "default"}, {"podNetworkName": "later"}]),
         gated("p8", [{"podNetworkName": "default"}, {"podNetworkAttachmentName": "gone"}]))
    async with bs.running(kmock):
        await bs.eventually(lambda: events_on(kmock, "p7"))
        await bs.eventually(lambda: events_on(kmock, "p8"))
        # The same cause again (another event of the pod, the network changing) posts nothing more.
        await bs.call(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="p7"),
                      {"metadata": {"labels": {"touched": "yes"}}})
        await bs.call(kmock, "POST", bs.PN_URL, bs.podnetwork("later", ready=False))
        await bs.eventually(lambda: len(events_on(kmock, "p7")) == 2)
        await asyncio.sleep(0.5)
    assert events_on(kmock, "p7") == [
        ("SchedulingGated", 'podnetwork "later" not found' + HELD),
        ("SchedulingGated", 'podnetwork "later" is not Ready: ConditionMissing: the controller has not set the Ready '
                            "condition yet" + HELD)]
    assert events_on(kmock, "p8") == [("SchedulingGated", 'podnetworkattachment "gone" not found' + HELD)]
    assert pod_of(kmock, "p7")["spec"]["schedulingGates"] == [GATE]


async def test_an_attachment_replaced_after_admission_gets_no_selection_and_the_pod_says_why(
    kmock: bs.Emulator
) -> None:
    # Admitted with `fast` naming `dataplane`; `fast` was then re-created to name `other`.
    recorded = {"multinetwork.x-k8s.io/attachment-networks": '{"fast":"dataplane"}'}
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.podnetwork("other", nad=("nets", "other")), bs.nad("dataplane"),
         bs.nad("other"), bs.attachment("fast", "other", []),
         gated("p9", [{"podNetworkName": "default"}, {"podNetworkAttachmentName": "fast"}], annotations=recorded))
    kmock.objects[bs.PNA, bs.NS, "fast"]["status"] = {"conditions": [bs.ready_condition()]}
    async with bs.running(kmock):
        await bs.eventually(lambda: events_on(kmock, "p9"))
        await asyncio.sleep(0.5)
    assert npwg.NETWORKS_ANNOTATION not in bs.annotations(pod_of(kmock, "p9"))
    assert pod_of(kmock, "p9")["spec"]["schedulingGates"] == [GATE]
    ((reason, message),) = events_on(kmock, "p9")
    assert reason == "SchedulingGated"
    assert message.startswith("spec.networks[1] (PodNetworkAttachment 'fast'): PodNetworkAttachment app/fast names "
                              "PodNetwork 'other', but the pod was admitted with it naming 'dataplane'")
