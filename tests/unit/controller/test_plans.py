"""podnetwork.kep.plans: what the PodNetwork controller writes next, decided purely: an object's
finalizer before its conditions, InUse messages deferred on pod events, what a change of Ready
moves, the requeue nudge, a node's condition and the `default` PodNetwork."""

from __future__ import annotations

import json
from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.core import Node, Pod
from podnetwork.kep import api, inuse, plans
from podnetwork.kep.inuse import attachment_ref, podnetwork_ref

NOW = "2026-01-01T00:00:09Z"
FIN = constants.IN_USE_FINALIZER
BLUE = podnetwork_ref("blue")


def condition(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}


def blue(*conditions: dict[str, Any], finalizers: list[str] | None = None) -> api.PodNetwork:
    body: dict[str, Any] = {"apiVersion": constants.API_VERSION, "kind": constants.PODNETWORK_KIND,
                            "metadata": {"name": "blue", "generation": 1, "resourceVersion": "7",
                                         "finalizers": finalizers or []},
                            "spec": {"enabled": True}, "status": {"conditions": list(conditions)}}
    obj = api.parse(body, constants.PODNETWORK_KIND)
    assert isinstance(obj, api.PodNetwork)
    return obj


def pod(name: str, network: str = "blue", node: str | None = "n1") -> Pod:
    spec = {"nodeName": node} if node else {}
    return Pod.model_validate({"metadata": {"name": name, "namespace": "ns", "annotations": {
        constants.NETWORKS_ANNOTATION: json.dumps([{"podNetworkName": network}])}}, "spec": spec})


READY = condition("Ready", "True", "Ready", "PodNetwork is ready")
IN_USE_BY_A = condition("InUse", "True", "InUse", "in use by 1 pod: ns/a")


def test_the_finalizer_comes_first_and_carries_the_version_it_was_decided_from():
    index = inuse.Index()
    index.set_pod(pod("a"))
    action = plans.object_action(BLUE, blue(), index, None, urgent=True, now=NOW)
    assert isinstance(action, plans.SetFinalizer) and action.adding
    assert action.patch.body == {"metadata": {"finalizers": [FIN], "resourceVersion": "7"}}
    assert not action.patch.status
    # With the finalizer in place, the conditions follow, on the status subresource.
    action = plans.object_action(BLUE, blue(finalizers=[FIN]), index, None, urgent=True, now=NOW)
    assert isinstance(action, plans.WriteConditions) and action.patch.status
    assert action.patch.decided_from == "7"
    assert [(c["type"], c["status"]) for c in action.conditions] == [("Ready", "True"), ("InUse", "True")]


def test_a_pod_event_that_changes_only_the_inuse_message_is_deferred_and_an_urgent_one_is_not():
    index = inuse.Index()
    index.set_pod(pod("a"))
    index.set_pod(pod("b"))
    settled = blue(READY, IN_USE_BY_A, finalizers=[FIN])
    assert plans.object_action(BLUE, settled, index, None, urgent=False, now=NOW) == plans.Defer(BLUE)
    urgent = plans.object_action(BLUE, settled, index, None, urgent=True, now=NOW)
    assert isinstance(urgent, plans.WriteConditions)
    assert urgent.conditions[1]["message"] == "in use by 2 pods: ns/a, ns/b"


def test_an_object_as_it_should_be_is_settled_and_an_attachment_waits_for_its_new_podnetwork():
    index = inuse.Index()
    index.set_pod(pod("a"))
    assert plans.object_action(BLUE, blue(READY, IN_USE_BY_A, finalizers=[FIN]), index, None, urgent=True,
                               now=NOW) == plans.Settled(BLUE)
    port = api.parse({"kind": constants.ATTACHMENT_KIND, "metadata": {"name": "port", "namespace": "ns"},
                      "spec": {"podNetworkName": "blue"}}, constants.ATTACHMENT_KIND)
    ref = attachment_ref("ns", "port")
    assert plans.object_action(ref, port, inuse.Index(), blue(), urgent=True, now=NOW) == plans.Settled(
        ref, waits_for_network=True)


def test_a_podnetwork_turning_ready_moves_its_attachments_its_nodes_and_nudges_the_pods_waiting():
    index = inuse.Index()
    index.set_attachment(api.PodNetworkAttachment.model_validate(
        {"metadata": {"name": "z", "namespace": "ns"}, "spec": {"podNetworkName": "blue"}}))
    index.set_attachment(api.PodNetworkAttachment.model_validate(
        {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"podNetworkName": "blue"}}))
    follow = plans.follow_ups(BLUE, blue(READY), False, index)
    assert follow == plans.FollowUps(True, (attachment_ref("ns", "a"), attachment_ref("ns", "z")), "blue", True)
    assert not plans.follow_ups(BLUE, blue(READY), True, index).nudge
    gone = plans.follow_ups(attachment_ref("ns", "a"), None, True, index)
    assert gone == plans.FollowUps(False)
    assert plans.moves_dependents(BLUE, False, plans.ready_of(blue(READY)), blue(READY))
    assert not plans.moves_dependents(BLUE, True, plans.ready_of(blue(READY)), blue(READY, IN_USE_BY_A))


def test_the_nudge_touches_only_unscheduled_pods_and_requires_no_version():
    index = inuse.Index()
    index.set_pod(pod("waiting", node=None))
    index.set_pod(pod("placed"))
    (nudge,) = plans.nudge(BLUE, index, now=NOW)
    assert (nudge.pod, nudge.patch.kind, nudge.patch.key) == ("ns/waiting", "Pod", "ns/waiting")
    assert nudge.patch.body == {"metadata": {"annotations": {constants.REQUEUED_AT_ANNOTATION: NOW}}}
    assert nudge.patch.decided_from is None


def offering(text: str | None) -> Node:
    annotations = {} if text is None else {constants.NODE_PODNETWORKS_ANNOTATION: text}
    return Node.model_validate({"metadata": {"name": "n2", "annotations": annotations}})


def test_a_node_coming_to_offer_networks_names_only_those_it_did_not_offer_before():
    known = ["blue", "red", "green"]
    assert plans.newly_offered(offering("[]"), offering('["blue", "red"]'), known) == {"blue", "red"}
    assert plans.newly_offered(offering('["blue"]'), offering('["blue", "red"]'), known) == {"red"}
    assert plans.newly_offered(offering('["blue"]'), offering(None), known) == {"red", "green"}
    assert plans.newly_offered(offering("not json"), offering('["blue"]'), known) == {"blue"}
    assert plans.newly_offered(offering('{"blue": 1}'), offering('["blue"]'), known) == {"blue"}
    # no news: fewer networks, the same annotation (a heartbeat), a node seen first, one that offered all
    assert plans.newly_offered(offering('["blue", "red"]'), offering('["blue"]'), known) == set()
    assert plans.newly_offered(offering('["blue"]'), offering('["blue"]'), known) == set()
    assert plans.newly_offered(None, offering('["blue"]'), known) == set()
    assert plans.newly_offered(offering(None), offering('["blue"]'), known) == set()
    assert plans.node_offers(offering('[1]')) == frozenset()


def test_a_node_offering_a_network_nudges_the_unscheduled_pods_naming_it_directly_or_by_attachment_once():
    index = inuse.Index()
    index.set_pod(pod("direct", node=None))
    index.set_pod(pod("placed"))
    index.set_pod(pod("other", network="red", node=None))
    index.set_attachment(api.PodNetworkAttachment.model_validate(
        {"metadata": {"name": "port", "namespace": "ns"}, "spec": {"podNetworkName": "blue"}}))
    index.set_pod(Pod.model_validate({"metadata": {"name": "through", "namespace": "ns", "annotations": {
        constants.NETWORKS_ANNOTATION: json.dumps([{"podNetworkAttachmentName": "port"}])}}, "spec": {}}))
    nudges = plans.offer_nudges({"blue"}, index, now=NOW)
    assert [n.pod for n in nudges] == ["ns/direct", "ns/through"]
    assert nudges[0].patch.body == {"metadata": {"annotations": {constants.REQUEUED_AT_ANNOTATION: NOW}}}
    both = plans.offer_nudges({"blue", "red"}, index, now=NOW)
    assert sorted(n.pod for n in both) == ["ns/direct", "ns/other", "ns/through"]


def test_a_node_condition_waits_for_its_default_s_first_status_and_is_a_strategic_patch():
    node = Node.model_validate({"metadata": {"name": "n1"}})
    default = api.parse({"kind": constants.PODNETWORK_KIND, "metadata": {"name": "default"},
                         "spec": {"enabled": True}}, constants.PODNETWORK_KIND)
    assert isinstance(default, api.PodNetwork)
    assert plans.node_action("n1", node, default, now=NOW) is None
    missing = plans.node_action("n1", node, None, now=NOW)
    assert missing is not None and missing.patch.patch_type == "strategic" and missing.patch.status
    assert [(c["type"], c["status"]) for c in missing.conditions] == [("DefaultPodNetworkReady", "False")]
    assert plans.nodes_of({"n1": node}, "default") == ["n1"] and plans.nodes_of({"n1": node}, "blue") == []


def test_the_default_podnetwork_is_created_unless_creation_is_off():
    assert plans.default_podnetwork(False, None) is None
    create = plans.default_podnetwork(True, "example.com/net", again=True)
    assert create is not None and create.again and create.create.kind == constants.PODNETWORK_KIND
    assert create.create.body["spec"] == {"enabled": True, "provider": "example.com/net"}


def test_a_listing_forgets_only_what_it_lacks_and_did_not_change_after_it():
    old, new = blue(), blue().model_copy(update={"metadata": blue().metadata.model_copy(
        update={"resource_version": "12"})})
    cached = [(podnetwork_ref("old"), old), (podnetwork_ref("new"), new), (BLUE, blue())]
    assert plans.gone_after_listing(cached, constants.PODNETWORK_KIND, {BLUE}, "10") == [podnetwork_ref("old")]
    assert plans.gone_after_listing(cached, constants.ATTACHMENT_KIND, set(), "10") == []
