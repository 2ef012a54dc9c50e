"""Objects removed from the API without a DELETED event: the periodic resync
(`--resync-interval`) drops them, and a deletion does not wait for a pod whose DELETED
event was missed.

kopf re-lists after 410 Gone and never reports what vanished in the gap. Here the
objects are removed from kmock's store directly, which sends no watch event at
all, as such a gap looks to the controller.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.kep import controller, inuse
from tests.api.controller_support import attachment, pod, podnetwork, running
from tests.api.kube_emulator import PN, PNA, PODS, Emulator, condition, declare_resources, eventually

FAST = controller.ControllerSettings(inuse_message_interval=0.2)
PN_URL = f"/apis/{constants.GROUP}/{constants.VERSION}/podnetworks"
FIN = constants.IN_USE_FINALIZER
RESYNC = controller.ControllerSettings(create_default=False, inuse_message_interval=0.2, resync_interval=0.3)


def stored(kmock: Any, resource: str, ns: str | None, name: str) -> dict[str, Any]:
    obj = kmock.objects[resource, ns, name]
    if obj.deleted:
        raise KeyError(name)
    return dict(obj)


def ready(kmock: Any, ns: str, name: str) -> dict[str, Any]:
    return condition(stored(kmock, PNA, ns, name), "Ready")


async def test_podnetwork_gone_without_an_event_is_dropped_and_its_attachment_turns_not_ready(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "blue")
    async with running(kmock, RESYNC) as ctl:
        await eventually(lambda: ready(kmock, "ns", "fast")["status"] == "True")
        del kmock.objects[PN, None, "blue"]
        await eventually(lambda: ready(kmock, "ns", "fast")["status"] == "False")
        # The attachment may turn not Ready from its own read of the PodNetwork (404) a moment
        # before the resync drops the PodNetwork from memory: wait for that too.
        await eventually(lambda: inuse.podnetwork_ref("blue") not in ctl.objects)
    cond = ready(kmock, "ns", "fast")
    assert (cond["reason"], cond["message"]) == ("PodNetworkNotReady", 'PodNetwork "blue" not found')


async def test_attachment_gone_without_an_event_stops_holding_its_podnetwork(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "blue")
    async with running(kmock, RESYNC) as ctl:
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse")["status"] == "True")
        assert constants.IN_USE_FINALIZER in stored(kmock, PN, None, "blue")["metadata"]["finalizers"]
        del kmock.objects[PNA, "ns", "fast"]
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse")["status"] == "False")
        assert inuse.attachment_ref("ns", "fast") not in ctl.objects
    assert constants.IN_USE_FINALIZER not in (stored(kmock, PN, None, "blue")["metadata"].get("finalizers") or [])


async def test_resync_keeps_what_the_api_still_has(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "blue")
    async with running(kmock, RESYNC) as ctl:
        await eventually(lambda: ready(kmock, "ns", "fast")["status"] == "True")
        lists = lambda: [r for r in list(kmock) if r.method.value == "GET"  # noqa: E731
                         and str(r.url.path).endswith("/podnetworkattachments") and "watch" not in str(r.url)]
        start = len(lists())
        await eventually(lambda: len(lists()) >= start + 2)  # two resyncs ran
        assert {inuse.podnetwork_ref("blue"), inuse.attachment_ref("ns", "fast")} <= set(ctl.objects)
    assert ready(kmock, "ns", "fast")["status"] == "True"


async def test_zero_interval_disables_the_resync(kmock):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    settings = controller.ControllerSettings(create_default=False, inuse_message_interval=0.2, resync_interval=0)
    async with running(kmock, settings) as ctl:
        await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "Ready")["status"] == "True")
        assert ctl._resyncer is None


def gone(kmock: Any, resource: str, ns: str | None, name: str) -> bool:
    try:
        stored(kmock, resource, ns, name)
    except KeyError:
        return True
    return False


@pytest.mark.kmock(cls=Emulator)
@pytest.mark.timeout(60)
async def test_a_deletion_does_not_wait_forever_for_a_pod_whose_deleted_event_was_missed(kmock):
    # kopf relists after a watch's 410 Gone and reports what it lists, never DELETED for
    # what vanished meanwhile (kopf/_cogs/clients/watching.py, continuous_watch): the
    # index keeps such a pod. Here `ghost` is that pod, indexed but absent from the API.
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    async with running(kmock, FAST) as ctl:
        await eventually(lambda: FIN in stored(kmock, PN, None, "blue")["metadata"].get("finalizers", []))
        ctl.index.set_pod(Pod.model_validate(pod("ghost", [{"podNetworkName": "blue"}])))
        async with kmock.request("DELETE", f"{PN_URL}/blue") as resp:
            assert resp.status < 300
        await asyncio.sleep(0.5)
        assert stored(kmock, PN, None, "blue")["metadata"].get("deletionTimestamp")  # `a` still uses it
        async with kmock.request("DELETE", "/api/v1/namespaces/ns/pods/a") as resp:
            assert resp.status < 300
        await eventually(lambda: gone(kmock, PN, None, "blue"))
    assert ctl.index.pods_of(inuse.podnetwork_ref("blue")) == frozenset()
