"""The bridge controller over HTTP: kopf against kmock's Kubernetes emulator."""

from __future__ import annotations

import asyncio
import copy
import json

import kmock as kmock_lib
import pytest

from bridge import npwg
from bridge.operator import pods
from podnetwork.ground import constants
from tests.api import bridge_api_support as bs

pytestmark = pytest.mark.kmock(cls=bs.Emulator)


def seed(k: kmock_lib.KubernetesEmulator, *objs: dict) -> None:
    bs.declare_resources(k)
    kinds = {"PodNetwork": bs.PN, "PodNetworkAttachment": bs.PNA, npwg.NAD_KIND: bs.NAD,
             "NetworkSelectionOptions": bs.NSO, "Pod": bs.PODS}
    for obj in objs:
        meta = obj["metadata"]
        k.objects[kinds[obj["kind"]], meta.get("namespace"), meta["name"]] = obj


def pn_of(k: kmock_lib.KubernetesEmulator, name: str) -> dict:
    return copy.deepcopy(k.objects[bs.PN, None, name].raw)


def pod_of(k: kmock_lib.KubernetesEmulator, name: str, ns: str = bs.NS) -> dict:
    return copy.deepcopy(k.objects[bs.PODS, ns, name].raw)


# --- ParamsReady ---------------------------------------------------------------------------------

async def test_params_ready_is_true_for_a_bridge_podnetwork_whose_nad_exists(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("dataplane"), bs.nad("dataplane"),
         bs.podnetwork("vendor", nad=None, provider="example.com/vendor"))
    async with bs.running(kmock):
        cond = await bs.eventually(lambda: bs.condition(pn_of(kmock, "dataplane"), "ParamsReady"))
        assert (cond["status"], cond["reason"]) == ("True", "ParametersReady")
        assert cond["observedGeneration"] == 1
        assert bs.condition(pn_of(kmock, "dataplane"), "Ready")["status"] == "True"  # kept
        await asyncio.sleep(0.3)
    assert "ParamsReady" not in json.dumps(pn_of(kmock, "vendor"))
    assert bs.requests_to(kmock, "PATCH", f"{bs.PN_URL}/vendor/status") == []


async def test_params_ready_follows_nad_creation_change_and_deletion(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("dataplane"))
    nads = bs.NAD_URL.format(ns="nets")
    async with bs.running(kmock):
        cond = await bs.eventually(lambda: bs.condition(pn_of(kmock, "dataplane"), "ParamsReady"))
        assert (cond["status"], cond["reason"]) == ("False", "ParametersNotFound")
        assert "NetworkAttachmentDefinition nets/dataplane does not exist" in cond["message"]

        await bs.call(kmock, "POST", nads, bs.nad("dataplane"))

        def turned_true() -> dict:
            c = bs.condition(pn_of(kmock, "dataplane"), "ParamsReady")
            assert c["status"] == "True"
            return c
        await bs.eventually(turned_true)

        await bs.call(kmock, "PATCH", f"{nads}/dataplane", {"spec": {"config": '{"type": "../../bin/sh"}'}})

        def invalid() -> None:
            c = bs.condition(pn_of(kmock, "dataplane"), "ParamsReady")
            assert (c["status"], c["reason"]) == ("False", "InvalidParameters")
            assert "bare executable name" in c["message"]
        await bs.eventually(invalid)

        await bs.call(kmock, "DELETE", f"{nads}/dataplane")

        def gone() -> None:
            c = bs.condition(pn_of(kmock, "dataplane"), "ParamsReady")
            assert c["reason"] == "ParametersNotFound"
        await bs.eventually(gone)


async def test_params_ready_of_an_attachment_follows_its_selection_options(kmock: bs.Emulator) -> None:
    ref = {"group": "bridge.multinetwork.x-k8s.io", "kind": "NetworkSelectionOptions", "name": "opts"}
    seed(kmock, bs.podnetwork("dataplane"), bs.nad("dataplane"), bs.attachment("pna1", "dataplane", [ref]))
    url = f"/apis/{constants.GROUP}/{constants.VERSION}/namespaces/{bs.NS}/{constants.ATTACHMENT_PLURAL}/pna1"
    async with bs.running(kmock):
        def pna_cond() -> dict:
            return bs.condition(kmock.objects[bs.PNA, bs.NS, "pna1"].raw, "ParamsReady")
        cond = await bs.eventually(pna_cond)
        assert (cond["status"], cond["reason"]) == ("False", "ParametersNotFound")
        await bs.call(kmock, "POST", bs.NSO_URL.format(ns=bs.NS), bs.options("opts", {"mac": "02:00:00:00:00:07"}))

        def true() -> None:
            assert pna_cond()["status"] == "True"
        await bs.eventually(true)
    assert all(req.get("status") for req in bs.requests_to(kmock, "PATCH", f"{url}/status"))


# --- selection -----------------------------------------------------------------------------------

async def test_the_selection_is_written_once_the_podnetwork_is_ready(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane", ready=False), bs.nad("dataplane"),
         bs.pod("p1", [{"podNetworkName": "default"},
                       {"podNetworkName": "dataplane", "interfaceName": "net1", "isDefaultGW4": True}]))
    async with bs.running(kmock):
        await asyncio.sleep(0.5)
        assert npwg.NETWORKS_ANNOTATION not in bs.annotations(pod_of(kmock, "p1"))
        await bs.call(kmock, "PATCH", f"{bs.PN_URL}/dataplane/status",
                      {"status": {"conditions": [bs.ready_condition()]}})

        def written() -> str:
            return bs.annotations(pod_of(kmock, "p1"))[npwg.NETWORKS_ANNOTATION]
        value = await bs.eventually(written)
    assert json.loads(value) == [{"name": "dataplane", "namespace": "nets", "interface": "net1",
                                  "default-route": ["10.9.0.1"]}]
    ann = bs.annotations(pod_of(kmock, "p1"))
    assert ann[pods.WRITTEN_ANNOTATION] == pods.digest(value)
    assert not [k for k in ann if "kopf" in k]
    assert "finalizers" not in pod_of(kmock, "p1")["metadata"]
    patches = bs.requests_to(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="p1"))
    assert len(patches) == 1 and patches[0]["metadata"]["resourceVersion"]


async def test_a_pod_on_the_default_network_only_gets_no_selection(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.pod("p0", [{"podNetworkName": "default"}]))
    async with bs.running(kmock):
        await asyncio.sleep(0.5)
    assert bs.requests_to(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="p0")) == []


async def test_a_hand_written_selection_that_disagrees_gets_an_event_and_is_kept(kmock: bs.Emulator) -> None:
    hand = "nets/other@net1"
    seed(kmock, bs.podnetwork("dataplane"), bs.nad("dataplane"),
         bs.pod("p2", [{"podNetworkName": "dataplane"}], annotations={npwg.NETWORKS_ANNOTATION: hand}))
    async with bs.running(kmock):
        def event_posted() -> dict:
            posted = bs.requests_to(kmock, "POST", f"/api/v1/namespaces/{bs.NS}/events")
            assert len(posted) == 1
            return posted[0]
        ev = await bs.eventually(event_posted)
        await asyncio.sleep(0.3)
        # a later pod event does not post it again
        await bs.call(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="p2"),
                      {"metadata": {"labels": {"touched": "yes"}}})
        await asyncio.sleep(0.5)
    assert (ev["reason"], ev["type"], ev["involvedObject"]["name"]) == ("SelectionDisagrees", "Warning", "p2")
    assert "nets/other@net1" in ev["message"] and '"name":"dataplane"' in ev["message"]
    assert len(bs.requests_to(kmock, "POST", f"/api/v1/namespaces/{bs.NS}/events")) == 1
    assert bs.annotations(pod_of(kmock, "p2"))[npwg.NETWORKS_ANNOTATION] == hand


async def test_a_selection_that_agrees_is_left_alone(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("dataplane"), bs.nad("dataplane"),
         bs.pod("p3", [{"podNetworkName": "dataplane"}], annotations={npwg.NETWORKS_ANNOTATION: "nets/dataplane"}))
    async with bs.running(kmock):
        await asyncio.sleep(0.5)
    assert bs.requests_to(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="p3")) == []
    assert bs.requests_to(kmock, "POST", f"/api/v1/namespaces/{bs.NS}/events") == []


async def test_pods_without_the_kep_annotation_are_not_touched(kmock: bs.Emulator) -> None:
    status = json.dumps([{"name": "x", "ips": ["10.0.0.1"], "default": True}])
    seed(kmock, bs.pod("plain", None, annotations={npwg.NETWORK_STATUS_ANNOTATION: status}))
    async with bs.running(kmock):
        await asyncio.sleep(0.5)
    assert [r for r in list(kmock) if r.method.value != "GET"] == []


# --- reverse status ------------------------------------------------------------------------------

async def test_network_status_becomes_pod_ips_per_podnetwork(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.nad("dataplane"),
         bs.pod("p4", [{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}]))
    status = [
        {"name": "cluster-default", "interface": "eth0", "ips": ["10.244.0.5/24", "fd00::5/64"], "default": True},
        {"name": "nets/dataplane", "interface": "net1", "ips": ["10.9.0.7/24"], "mac": "02:00:00:00:00:01",
         "default": False},
    ]
    async with bs.running(kmock):
        await bs.eventually(lambda: bs.annotations(pod_of(kmock, "p4"))[npwg.NETWORKS_ANNOTATION])
        await bs.call(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="p4"),
                      {"metadata": {"annotations": {npwg.NETWORK_STATUS_ANNOTATION: json.dumps(status)}},
                       "status": {"phase": "Running"}})

        def ips() -> list:
            return json.loads(bs.annotations(pod_of(kmock, "p4"))[constants.POD_IPS_ANNOTATION])
        got = await bs.eventually(ips)
        assert got == [
            {"ip": "10.244.0.5", "podNetwork": "default", "interfaceName": "eth0"},
            {"ip": "fd00::5", "podNetwork": "default", "interfaceName": "eth0"},
            {"ip": "10.9.0.7", "podNetwork": "dataplane", "interfaceName": "net1"},
        ]
        status[1]["ips"] = ["10.9.0.8/24"]
        await bs.call(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="p4"),
                      {"metadata": {"annotations": {npwg.NETWORK_STATUS_ANNOTATION: json.dumps(status)}}})

        def updated() -> None:
            assert ips()[2]["ip"] == "10.9.0.8"
        await bs.eventually(updated)
        await asyncio.sleep(0.3)
    # the selection is never rewritten once the pod is attached (kmock replays the initial
    # object on watch start, so a stale second attempt may precede it and get 409)
    requests = [r for r in list(kmock) if r.method.value == "PATCH"
                and str(r.url.path) == bs.POD_URL.format(ns=bs.NS, name="p4")]
    attached_at = next(i for i, r in enumerate(requests)
                       if npwg.NETWORK_STATUS_ANNOTATION in r.data["metadata"].get("annotations", {}))
    assert not [r for r in requests[attached_at:]
                if npwg.NETWORKS_ANNOTATION in r.data["metadata"].get("annotations", {})]
