"""The bridge controller writes `multinetwork.x-k8s.io/attachments` (KEP-3698 Phase II requirement 17)
from `k8s.v1.cni.cncf.io/network-status`, beside pod IPs in one write per change and none while
nothing changes (real kopf and HTTP against kmock's emulator)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import kmock as kmock_lib
import pytest

from bridge import npwg
from bridge.operator import controller
from podnetwork.ground import constants
from tests.api import bridge_api_support as bs

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

ANN = constants.ATTACHMENTS_ANNOTATION
NETS = [{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}]
STATUS = [
    # As Multus writes it: bare IPs.
    {"name": "cluster-default", "interface": "eth0", "ips": ["10.244.0.5"], "mac": "0a:58:0a:f4:00:05",
     "default": True},
    {"name": "nets/dataplane", "interface": "net1", "ips": ["10.9.0.7", "fd00:9::7"], "mac": "02:00:00:00:00:01"},
]


def seed(k: kmock_lib.KubernetesEmulator, *objs: dict[str, Any]) -> None:
    bs.declare_resources(k)
    kinds = {"PodNetwork": bs.PN, npwg.NAD_KIND: bs.NAD, "Pod": bs.PODS}
    for obj in objs:
        meta = obj["metadata"]
        k.objects[kinds[obj["kind"]], meta.get("namespace"), meta["name"]] = obj


def pod_of(k: kmock_lib.KubernetesEmulator, name: str) -> dict[str, Any]:
    return copy.deepcopy(k.objects[bs.PODS, bs.NS, name].raw)


def writes_of_status(k: kmock_lib.KubernetesEmulator, name: str) -> list[dict[str, Any]]:
    """The bridge's writes of the reverse status (pod IPs, attachment data) on pod `name`."""
    return [p for p in bs.requests_to(k, "PATCH", bs.POD_URL.format(ns=bs.NS, name=name))
            if set((p.get("metadata") or {}).get("annotations") or {}) & {ANN, constants.POD_IPS_ANNOTATION}]


async def set_status(k: kmock_lib.KubernetesEmulator, name: str, status: list[dict[str, Any]]) -> None:
    await bs.call(k, "PATCH", bs.POD_URL.format(ns=bs.NS, name=name),
                  {"metadata": {"annotations": {npwg.NETWORK_STATUS_ANNOTATION: json.dumps(status)}}})


async def test_network_status_becomes_attachment_data_in_one_write_per_change(kmock: bs.Emulator) -> None:
    attached = bs.pod("web", NETS, annotations={npwg.NETWORK_STATUS_ANNOTATION: json.dumps(STATUS)})
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.nad("dataplane"), attached)
    async with bs.running(kmock):
        def data() -> list[dict[str, Any]]:
            return json.loads(bs.annotations(pod_of(kmock, "web"))[ANN])  # type: ignore[no-any-return]
        first = await bs.eventually(data)
        await asyncio.sleep(0.5)
        # A steady pod: another event of it (a label) writes nothing.
        await bs.call(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="web"),
                      {"metadata": {"labels": {"touched": "yes"}}})
        await asyncio.sleep(0.5)
        assert len(writes_of_status(kmock, "web")) == 1
        # The status changes (an address added, say): one more write, of the attachment data only,
        # as the pod IPs keep the first IP per family.
        moved = copy.deepcopy(STATUS)
        moved[1]["ips"] = ["10.9.0.7", "fd00:9::7", "10.9.0.9"]
        await set_status(kmock, "web", moved)

        def updated() -> None:
            assert data()[1]["ips"] == ["10.9.0.7/32", "fd00:9::7/128", "10.9.0.9/32"]
        await bs.eventually(updated)
        await asyncio.sleep(0.5)
    assert first == [
        {"podNetwork": "default", "interfaceName": "eth0", "ips": ["10.244.0.5/32"],
         "hardwareAddress": "0a:58:0a:f4:00:05"},
        {"podNetwork": "dataplane", "interfaceName": "net1", "ips": ["10.9.0.7/32", "fd00:9::7/128"],
         "hardwareAddress": "02:00:00:00:00:01"},
    ]
    one, two = writes_of_status(kmock, "web")
    assert set(one["metadata"]["annotations"]) == {ANN, constants.POD_IPS_ANNOTATION}
    assert set(two["metadata"]["annotations"]) == {ANN}  # the pod IPs (one per family) did not change


async def test_with_no_attachment_data_the_bridge_writes_only_pod_ips(kmock: bs.Emulator) -> None:
    attached = bs.pod("web", NETS, annotations={npwg.NETWORK_STATUS_ANNOTATION: json.dumps(STATUS)})
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.nad("dataplane"), attached)
    async with bs.running(kmock, controller.BridgeSettings(write_attachments=False)):
        await bs.eventually(lambda: bs.annotations(pod_of(kmock, "web"))[constants.POD_IPS_ANNOTATION])
        await asyncio.sleep(0.3)
    assert ANN not in bs.annotations(pod_of(kmock, "web"))
