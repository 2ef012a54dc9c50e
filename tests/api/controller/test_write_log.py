"""Every write of the controller is one INFO line naming the object and what it wrote
(real kopf and HTTP against kmock's emulator), so an operator's log tells what it changed."""

from __future__ import annotations

import logging

import pytest

from podnetwork.ground import constants
from podnetwork.kep import controller
from tests.api.controller_support import node, pod, podnetwork, running
from tests.api.kube_emulator import NODES, PN, PODS, Emulator, condition, declare_resources, eventually

pytestmark = pytest.mark.kmock(cls=Emulator)

FAST = controller.ControllerSettings(inuse_message_interval=0.2)


def writes(k: Emulator) -> list[str]:
    return [f"{r.method.value} {r.url.path}" for r in list(k) if r.method.value in ("PATCH", "POST", "PUT")]


async def test_each_write_of_the_controller_is_one_info_line(
    kmock: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="podnetwork")
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    kmock.objects[NODES, None, "n1"] = node("n1")
    async with running(kmock, FAST):
        await eventually(lambda: condition(kmock.objects[PN, None, "blue"].raw, "InUse"))
        await eventually(lambda: condition(kmock.objects[NODES, None, "n1"].raw, "DefaultPodNetworkReady"))
        await eventually(lambda: condition(kmock.objects[PN, None, "default"].raw, "Ready"))
    lines = [r.getMessage() for r in caplog.records
             if r.name == "podnetwork.kep.controller" and r.levelno == logging.INFO]
    assert "created the default PodNetwork" in lines
    assert f"PodNetwork blue: added finalizer {constants.IN_USE_FINALIZER}" in lines
    assert "PodNetwork blue: wrote conditions Ready=True (Ready), InUse=True (InUse)" in lines
    assert "node n1: wrote condition DefaultPodNetworkReady=True (DefaultPodNetworkReady)" in lines
    written = [line for line in lines if line.startswith(("created ", "node ", "PodNetwork "))
               and ("wrote" in line or "finalizer" in line or line.startswith("created "))]
    # One line per write request, no more, no fewer (no write conflicts in this scenario).
    assert len(written) == len(writes(kmock)), (written, writes(kmock))
