"""A pod whose isDefaultGW4 cannot be honoured with Multus (its NAD names no IPv4 gateway): refused
visibly, never a silent `"default-route": []`. The webhook over HTTP (httpx against the ASGI app), the
bridge controller under kopf against kmock's emulator."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from bridge import npwg
from bridge.operator import admission, admissionapp, pods
from tests.api import bridge_api_support as bs
from tests.api.bridge.test_admission_http import admit, new_pod, pod_of, seed

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

NO_GATEWAY = {"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0",
              "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24"}]]}}
WITH_GATEWAY = {**NO_GATEWAY, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24",
                                                                          "gateway": "10.9.0.1"}]]}}
NETS = [{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "isDefaultGW4": True}]


def events(k: bs.Emulator) -> list[dict[str, Any]]:
    return bs.requests_to(k, "POST", f"/api/v1/namespaces/{bs.NS}/events")


def every_pod_write(k: bs.Emulator) -> str:
    return json.dumps(bs.requests_to(k, "PATCH", bs.POD_URL.format(ns=bs.NS, name="web")))


async def test_isdefaultgw4_without_a_gateway_is_refused_with_a_warning_an_event_and_a_log_line(
    kmock: bs.Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.nad("dataplane", config=NO_GATEWAY))
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "dataplane", nads=("dataplane",))
        response, admitted = await admit(admissionapp.app(bridge.objects), new_pod("web", NETS))
        # The creator sees why at `kubectl apply`: the webhook warns and gates, writes no selection.
        refusal, gate = response["warnings"]
        assert "NetworkAttachmentDefinition nets/dataplane names no IPv4 gateway" in refusal
        assert gate == admission.GATE_WARNING
        assert npwg.NETWORKS_ANNOTATION not in bs.annotations(admitted)
        await bs.call(kmock, "POST", f"/api/v1/namespaces/{bs.NS}/pods", admitted)

        def posted() -> dict[str, Any]:
            found = events(kmock)
            assert len(found) == 1, found
            return found[0]
        event = await bs.eventually(posted)
        await asyncio.sleep(0.5)
        # Still gated, still no selection: kube-scheduler keeps the pod away from Multus.
        body = pod_of(kmock, "web")
        assert body["spec"]["schedulingGates"] == [{"name": pods.SCHEDULING_GATE}]
        assert npwg.NETWORKS_ANNOTATION not in bs.annotations(body)
        assert every_pod_write(kmock) == "[]"

        # Naming the gateway in the NAD lets the bridge write it and release the pod.
        await bs.call(kmock, "PATCH", bs.NAD_URL.format(ns="nets") + "/dataplane",
                      {"spec": {"config": json.dumps(WITH_GATEWAY)}})

        def released() -> dict[str, Any]:
            fresh = pod_of(kmock, "web")
            assert "schedulingGates" not in fresh["spec"]
            return fresh
        body = await bs.eventually(released)
    assert (event["reason"], event["type"]) == (pods.GATEWAY_MISSING_REASON, "Warning")
    assert event["involvedObject"]["name"] == "web"
    assert "nets/dataplane names no IPv4 gateway" in event["message"]
    assert json.loads(bs.annotations(body)[npwg.NETWORKS_ANNOTATION]) == [
        {"name": "dataplane", "namespace": "nets", "default-route": ["10.9.0.1"]}]
    assert '"default-route": []' not in every_pod_write(kmock)
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in logged if m.startswith("admission of pod app/web:") and "nets/dataplane" in m]
    assert [m for m in logged if m.startswith("pod app/web:") and "nets/dataplane" in m]


async def test_without_the_webhook_the_pod_gets_no_selection_and_an_event(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.nad("dataplane", config=NO_GATEWAY))
    kmock.objects[bs.PODS, bs.NS, "web"] = bs.pod("web", NETS)
    async with bs.running(kmock):
        def posted() -> dict[str, Any]:
            found = events(kmock)
            assert len(found) == 1, found
            return found[0]
        event = await bs.eventually(posted)
        await asyncio.sleep(0.5)
    assert event["reason"] == pods.GATEWAY_MISSING_REASON and "nets/dataplane" in event["message"]
    assert every_pod_write(kmock) == "[]"
    assert len(events(kmock)) == 1
