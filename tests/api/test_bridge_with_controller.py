"""The bridge and the PodNetwork controller in one kopf operator, against kmock:
ParamsReady (bridge) -> Ready (controller) -> the pod's NPWG selection (bridge)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import bridge_api_support as bs
import kmock as kmock_lib
import kopf
import pytest

from bridge import controller as bridge_controller
from bridge import npwg
from podnetwork import controller as pn_controller

pytestmark = pytest.mark.kmock(cls=bs.Emulator)


@contextlib.asynccontextmanager
async def both(k: kmock_lib.KubernetesEmulator) -> AsyncIterator[None]:
    registry = kopf.OperatorRegistry()
    config = pn_controller.ControllerSettings(create_default=False)
    # kmock 0.8 cannot serve the cluster-wide /api/v1/namespaces list the controller may watch.
    if hasattr(config, "namespace_profiles"):
        config.namespace_profiles = False
    pn_controller.register(registry, pn_controller.Controller(config=config))
    bridge_controller.register(registry, bridge_controller.Bridge())

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=str(k.url).rstrip("/"), insecure=True)

    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0.1
    settings.networking.error_backoffs = [0.1]
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(kopf.operator(registry=registry, settings=settings, standalone=True,
                                             clusterwide=True, stop_flag=stop, ready_flag=ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


async def test_a_new_nad_makes_the_podnetwork_ready_and_the_waiting_pod_gets_its_selection(
    kmock: bs.Emulator,
) -> None:
    bs.declare_resources(kmock)
    kmock.resources["v1/nodes"] = kmock_lib.ResourceInfo(kind="Node", namespaced=False, subresources={"status"},
                                                         verbs={"list", "watch", "get", "patch"})
    kmock.objects[bs.PN, None, "default"] = bs.podnetwork("default", nad=None, ready=False,
                                                          provider="example.com/cluster")
    kmock.objects[bs.PN, None, "dataplane"] = bs.podnetwork("dataplane", ready=False)
    kmock.objects[bs.PODS, bs.NS, "p1"] = bs.pod(
        "p1", [{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}])

    def pn(name: str) -> dict:
        return copy.deepcopy(kmock.objects[bs.PN, None, name].raw)

    async with both(kmock):
        def not_ready() -> None:
            assert bs.condition(pn("dataplane"), "ParamsReady")["reason"] == "ParametersNotFound"
            assert bs.condition(pn("dataplane"), "Ready")["reason"] == "ParamsNotReady"
        await bs.eventually(not_ready)
        assert npwg.NETWORKS_ANNOTATION not in bs.annotations(kmock.objects[bs.PODS, bs.NS, "p1"].raw)

        await bs.call(kmock, "POST", bs.NAD_URL.format(ns="nets"), bs.nad("dataplane"))

        def selected() -> str:
            return bs.annotations(kmock.objects[bs.PODS, bs.NS, "p1"].raw)[npwg.NETWORKS_ANNOTATION]
        value = await bs.eventually(selected, timeout=15)
    assert json.loads(value) == [{"name": "dataplane", "namespace": "nets", "interface": "net1"}]
    assert bs.condition(pn("dataplane"), "Ready")["status"] == "True"
    assert bs.condition(pn("dataplane"), "ParamsReady")["status"] == "True"
