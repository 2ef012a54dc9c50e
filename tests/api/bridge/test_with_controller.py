"""The bridge and the PodNetwork controller in one kopf operator, against kmock:
ParamsReady (bridge) -> Ready (controller) -> the pod's NPWG selection (bridge)."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import AsyncIterator

import kmock as kmock_lib
import kopf
import pytest

from bridge import npwg
from bridge.operator import controller as bridge_controller
from podnetwork.kep import controller as pn_controller
from tests.api import bridge_api_support as bs
from tests.api import kube_emulator as ke

pytestmark = pytest.mark.kmock(cls=ke.Emulator)


@contextlib.asynccontextmanager
async def both(k: kmock_lib.KubernetesEmulator) -> AsyncIterator[None]:
    registry = kopf.OperatorRegistry()
    # kmock 0.8 cannot serve the cluster-wide /api/v1/namespaces list the controller may watch.
    config = pn_controller.ControllerSettings(create_default=False, namespace_profiles=False)
    pn_controller.register(registry, pn_controller.Controller(config=config, api=ke.api(k)))
    bridge_controller.register(registry, bridge_controller.Bridge(api=ke.api(k)))
    async with ke.operator(k, registry):
        yield


async def test_a_new_nad_makes_the_podnetwork_ready_and_the_waiting_pod_gets_its_selection(
    kmock: ke.Emulator,
) -> None:
    bs.declare_resources(kmock)
    kmock.objects[ke.PN, None, "default"] = bs.podnetwork("default", nad=None, ready=False,
                                                provider="example.com/cluster")
    kmock.objects[ke.PN, None, "dataplane"] = bs.podnetwork("dataplane", ready=False)
    kmock.objects[ke.PODS, bs.NS, "p1"] = bs.pod(
        "p1", [{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}])

    def pn(name: str) -> dict:
        return copy.deepcopy(kmock.objects[ke.PN, None, name].raw)

    async with both(kmock):
        def not_ready() -> None:
            assert ke.condition(pn("dataplane"), "ParamsReady")["reason"] == "ParametersNotFound"
            assert ke.condition(pn("dataplane"), "Ready")["reason"] == "ParamsNotReady"
        await ke.eventually(not_ready)
        assert npwg.NETWORKS_ANNOTATION not in bs.annotations(kmock.objects[ke.PODS, bs.NS, "p1"].raw)

        await bs.call(kmock, "POST", bs.NAD_URL.format(ns="nets"), bs.nad("dataplane"))

        def selected() -> str:
            return bs.annotations(kmock.objects[ke.PODS, bs.NS, "p1"].raw)[npwg.NETWORKS_ANNOTATION]
        value = await ke.eventually(selected, timeout=15)
    assert json.loads(value) == [{"name": "dataplane", "namespace": "nets", "interface": "net1"}]
    assert ke.condition(pn("dataplane"), "Ready")["status"] == "True"
    assert ke.condition(pn("dataplane"), "ParamsReady")["status"] == "True"
