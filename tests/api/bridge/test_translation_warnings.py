"""Translation warnings on the webhook path reach the pod's creator (admission warnings), the pod
(Events, once each) and the bridge's log. The webhook over HTTP (httpx against the ASGI app), the
bridge controller under kopf against kmock's emulator."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from bridge import npwg
from bridge.operator import admissionapp, pods
from tests.api import bridge_api_support as bs
from tests.api.bridge.test_admission_http import admit, new_pod, seed

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

# interfaceName on the default network: NPWG cannot name it (NPWG 6), a translation warning.
NETS = [{"podNetworkName": "default", "interfaceName": "eth9"}, {"podNetworkName": "dataplane"}]
WARNING = "interfaceName 'eth9' is not applied"


def events(k: bs.Emulator) -> list[dict[str, Any]]:
    return bs.requests_to(k, "POST", f"/api/v1/namespaces/{bs.NS}/events")


async def test_a_pod_admitted_with_its_selection_still_gets_each_translation_warning_once(
    kmock: bs.Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.nad("dataplane"))
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "dataplane", nads=("dataplane",))
        response, admitted = await admit(admissionapp.app(bridge.objects), new_pod("web", NETS))
        (warning,) = response["warnings"]
        assert WARNING in warning
        # The webhook wrote the selection: the controller has nothing to write, but warns the pod.
        assert npwg.NETWORKS_ANNOTATION in bs.annotations(admitted)
        await bs.call(kmock, "POST", f"/api/v1/namespaces/{bs.NS}/pods", admitted)

        def posted() -> dict[str, Any]:
            found = events(kmock)
            assert len(found) == 1, found
            return found[0]
        event = await bs.eventually(posted)
        # Later events of the pod post nothing more.
        await bs.call(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="web"),
                      {"metadata": {"labels": {"touched": "yes"}}})
        await asyncio.sleep(0.5)
    assert (event["reason"], event["type"]) == (pods.TRANSLATION_WARNING_REASON, "Warning")
    assert event["involvedObject"]["name"] == "web" and WARNING in event["message"]
    assert len(events(kmock)) == 1
    assert bs.requests_to(kmock, "PATCH", bs.POD_URL.format(ns=bs.NS, name="web")) == [
        {"metadata": {"labels": {"touched": "yes"}}}]
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in logged if m.startswith("admission of pod app/web:") and WARNING in m]
    assert [m for m in logged if m.startswith("pod app/web:") and WARNING in m]


async def test_an_attached_pod_gets_no_warning_events(kmock: bs.Emulator) -> None:
    """After a restart, pods already attached are not warned again: their selection was read."""
    status = '[{"name": "cluster", "default": true, "ips": ["10.0.0.5"]}]'
    seed(kmock, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.nad("dataplane"))
    kmock.objects[bs.PODS, bs.NS, "old"] = bs.pod("old", NETS, annotations={npwg.NETWORK_STATUS_ANNOTATION: status})
    async with bs.running(kmock):
        await asyncio.sleep(1.0)
    assert events(kmock) == []
