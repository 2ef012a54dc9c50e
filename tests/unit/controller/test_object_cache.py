"""The controller's object cache: deletions, finalizers and late attachments (pure: no API involved)."""

from __future__ import annotations

from typing import Any

from podnetwork.ground import constants
from podnetwork.kep import api, controller, inuse, plans

FIN = constants.IN_USE_FINALIZER


def blue(rv: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": constants.API_VERSION, "kind": constants.PODNETWORK_KIND,
        "metadata": {"name": "blue", "generation": 1, "resourceVersion": rv, **meta},
        "spec": {"enabled": True},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]},
    }


def test_the_response_that_removes_the_last_finalizer_of_a_deleted_object_does_not_resurrect_it():
    # The API server answers the patch that drops the last finalizer with the object as it
    # was (deletionTimestamp set, no finalizers) and deletes it. The DELETED watch event may
    # be handled before that answer: the cache must not take the gone object back.
    ctl = controller.Controller()
    ref = inuse.podnetwork_ref("blue")
    ctl.remember(ref, blue("5", deletionTimestamp="2026-01-01T00:00:01Z", finalizers=[FIN]))
    ctl.objects.pop(ref)  # the DELETED event, handled first
    ctl.remember(ref, blue("6", deletionTimestamp="2026-01-01T00:00:01Z", finalizers=[]))
    assert ref not in ctl.objects


def test_an_attachment_created_after_its_podnetwork_was_deleted_is_not_ready():
    ctl = controller.Controller()
    ref = inuse.podnetwork_ref("blue")
    ctl.remember(ref, blue("6", deletionTimestamp="2026-01-01T00:00:01Z"))
    pna = {"apiVersion": constants.API_VERSION, "kind": constants.ATTACHMENT_KIND,
           "metadata": {"name": "a", "namespace": "ns", "generation": 1, "resourceVersion": "7"},
           "spec": {"podNetworkName": "blue"}}
    ref = inuse.attachment_ref("ns", "a")
    obj = api.parse(pna)
    action = plans.object_action(ref, obj, ctl.index, ctl.network_of(obj), urgent=True, now="2026-01-01T00:00:02Z")
    assert isinstance(action, plans.WriteConditions)
    ready = next((c for c in action.conditions if c["type"] == "Ready"), None)
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "PodNetworkNotReady")
    assert 'PodNetwork "blue" not found' in ready["message"]


def test_a_deleting_object_that_still_has_finalizers_stays_cached():
    ctl = controller.Controller()
    ref = inuse.podnetwork_ref("blue")
    ctl.remember(ref, blue("5", deletionTimestamp="2026-01-01T00:00:01Z", finalizers=[FIN]))
    assert ref in ctl.objects
