"""The PodNetwork controller when the API server fails its writes, against kmock's emulator over
real HTTP: `default` is still created and statuses still written, without a new event.

The emulator answers 503 to the first writes to a path (kube_emulator.Emulator.failures).
"""

from __future__ import annotations

from typing import Any

import pytest

from podnetwork.ground import constants
from podnetwork.kep import controller
from tests.api.controller_support import node, podnetwork, running
from tests.api.kube_emulator import NODES, PN, Emulator, condition, declare_resources, eventually, requests_to

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(60)]

FAST = controller.ControllerSettings(inuse_message_interval=0.2)


def stored(kmock: Any, resource: str, ns: str | None, name: str) -> dict[str, Any]:
    obj = kmock.objects[resource, ns, name]
    if obj.deleted:
        raise KeyError(name)
    return dict(obj)


async def test_default_podnetwork_is_created_after_the_api_server_failed_the_first_attempts(kmock):
    declare_resources(kmock)
    kmock.objects[NODES, None, "n1"] = node("n1")
    kmock.failures["/podnetworks"] = 2  # the first create and kopf's own retry both get 503
    async with running(kmock, FAST):
        ready = await eventually(lambda: condition(stored(kmock, PN, None, "default"), "Ready"))
        node_cond = await eventually(
            lambda: condition(stored(kmock, NODES, None, "n1"), "DefaultPodNetworkReady")["status"] == "True")
    assert ready["status"] == "True"
    assert node_cond
    assert kmock.failures["/podnetworks"] == 0
    assert len(requests_to(kmock, "POST", "/podnetworks")) == 3


async def test_deferred_status_writes_still_retry_after_a_failed_default_creation(kmock):
    declare_resources(kmock)
    kmock.failures["/podnetworks"] = 2
    kmock.failures["/podnetworks/blue/status"] = 2  # retried only by the periodic flush
    kmock.objects[PN, None, "blue"] = {
        "apiVersion": constants.API_VERSION, "kind": "PodNetwork",
        "metadata": {"name": "blue", "uid": "uid-blue", "generation": 1, "resourceVersion": "0"},
        "spec": {"enabled": True}}
    async with running(kmock, FAST):
        cond = await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "Ready"))
    assert cond["status"] == "True"


async def test_failed_status_write_is_retried_without_a_new_event(kmock):
    declare_resources(kmock)
    kmock.failures["/podnetworks/blue/status"] = 2  # kopf's own retry fails too
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    async with running(kmock, FAST):
        cond = await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "Ready"))
    assert cond["status"] == "True"
    assert kmock.failures["/podnetworks/blue/status"] == 0
    assert len(requests_to(kmock, "PATCH", "/podnetworks/blue/status")) == 3
