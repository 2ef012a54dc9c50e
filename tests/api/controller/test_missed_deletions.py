"""The periodic resync (`--resync-interval`): objects removed from the API without a DELETED event.

kopf re-lists after 410 Gone and never reports what vanished in the gap. Here the
objects are removed from kmock's store directly, which sends no watch event at
all, as such a gap looks to the controller.
"""

from __future__ import annotations

from typing import Any

from podnetwork import constants, controller, inuse
from tests.api.controller_support import attachment, podnetwork, running
from tests.api.kube_emulator import PN, PNA, condition, declare_resources, eventually

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
        assert inuse.podnetwork_ref("blue") not in ctl.objects
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
