"""Hot-plug through the bridge controller (KEP Story #8, Req 24): kopf against kmock's
emulator over real HTTP. Once a running, attached pod's networks annotation gains or
loses a network, the bridge rewrites its own NPWG selection (`k8s.v1.cni.cncf.io/networks`),
which the node's agent (and any NPWG implementation) follows."""

from __future__ import annotations

import json

import pytest

from bridge import npwg
from bridge.operator import pods
from podnetwork.ground import constants
from tests.api import bridge_api_support as bs
from tests.api.bridge.test_controller import pod_of, seed

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

DEFAULT = {"podNetworkName": "default"}
DATAPLANE = {"podNetworkName": "dataplane", "interfaceName": "net1"}
STORAGE = {"podNetworkName": "storage"}
STATUS = json.dumps([{"name": "cluster-default", "interface": "eth0", "ips": ["10.244.0.5/24"], "default": True}])


def selection(kmock: bs.Emulator, name: str) -> list[dict[str, str]] | None:
    text = bs.annotations(pod_of(kmock, name)).get(npwg.NETWORKS_ANNOTATION)
    return None if text is None else json.loads(text)


async def test_the_bridge_rewrites_its_selection_when_a_running_pod_gains_and_loses_a_network(
    kmock: bs.Emulator,
) -> None:
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.nad("dataplane"),
         bs.podnetwork("storage", nad=("nets", "storage")), bs.nad("storage"),
         bs.pod("vm", [DEFAULT], annotations={npwg.NETWORK_STATUS_ANNOTATION: STATUS}))
    url = bs.POD_URL.format(ns=bs.NS, name="vm")
    async with bs.running(kmock):
        await bs.call(kmock, "PATCH", url, {"status": {"phase": "Running"}})
        await bs.call(kmock, "PATCH", url, {"metadata": {"annotations": {
            constants.NETWORKS_ANNOTATION: json.dumps([DEFAULT, DATAPLANE, STORAGE])}}})

        def both() -> None:
            assert selection(kmock, "vm") == [{"name": "dataplane", "namespace": "nets", "interface": "net1"},
                                              {"name": "storage", "namespace": "nets"}]
        await bs.eventually(both)
        annotations = bs.annotations(pod_of(kmock, "vm"))
        assert annotations[pods.WRITTEN_ANNOTATION] == pods.digest(annotations[npwg.NETWORKS_ANNOTATION])

        await bs.call(kmock, "PATCH", url, {"metadata": {"annotations": {
            constants.NETWORKS_ANNOTATION: json.dumps([DEFAULT, STORAGE])}}})

        def one() -> None:
            assert selection(kmock, "vm") == [{"name": "storage", "namespace": "nets"}]
        await bs.eventually(one)

        await bs.call(kmock, "PATCH", url, {"metadata": {"annotations": {
            constants.NETWORKS_ANNOTATION: json.dumps([DEFAULT])}}})

        def none() -> None:
            annotations = bs.annotations(pod_of(kmock, "vm"))
            assert npwg.NETWORKS_ANNOTATION not in annotations and pods.WRITTEN_ANNOTATION not in annotations
        await bs.eventually(none)


async def test_a_network_added_to_a_running_pod_is_selected_only_once_it_is_ready(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("storage", nad=("nets", "storage"), ready=False), bs.nad("storage"),
         bs.pod("vm", [DEFAULT], annotations={npwg.NETWORK_STATUS_ANNOTATION: STATUS}))
    url = bs.POD_URL.format(ns=bs.NS, name="vm")
    async with bs.running(kmock):
        await bs.call(kmock, "PATCH", url, {"metadata": {"annotations": {
            constants.NETWORKS_ANNOTATION: json.dumps([DEFAULT, STORAGE])}}})

        # ParamsReady turns True (its NAD exists), but Ready is the controller's and stays False.
        await bs.eventually(lambda: bs.condition(kmock.objects[bs.PN, None, "storage"].raw, "ParamsReady"))
        assert selection(kmock, "vm") is None
        await bs.call(kmock, "PATCH", f"{bs.PN_URL}/storage/status",
                      {"status": {"conditions": [bs.ready_condition()]}})

        def selected() -> None:
            assert selection(kmock, "vm") == [{"name": "storage", "namespace": "nets"}]
        await bs.eventually(selected)
