"""Objects are read into the models and views where they enter, and what does not fit is handled.

Each edge decides what an object that does not fit its model means (docs/architecture.md,
"Typed edges"): the extender's cache keeps it as not Ready (reason Invalid) or as a node
offering only `default`; the controller and the demo's controller ignore it with a warning
(a pod that does not fit holds no network); `explain` and `graph` show it INVALID with
the fields that do not fit.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pydantic
import pytest

from demo.controlplane import ControlPlane
from demo.store import Store
from podnetwork.ground import constants
from podnetwork.ground.core import Condition, Node, Pod
from podnetwork.kep import api, controller, explain, inuse
from podnetwork.kep import graph as graphs
from scheduler_plugin import cache as cache_mod
from scheduler_plugin import decision

T0 = "2026-01-01T00:00:00Z"


def ready_condition(status: str = "True", reason: str = "Ready", **extra: Any) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": "", "lastTransitionTime": T0,
            **extra}


def podnetwork(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": "PodNetwork", "metadata": {"name": name},
            "spec": {"enabled": True, **spec}, "status": {"conditions": [ready_condition()]}}


def a_pod(nets: list[dict[str, Any]] | None, **spec: Any) -> dict[str, Any]:
    annotations = {} if nets is None else {constants.NETWORKS_ANNOTATION: json.dumps(nets)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "annotations": annotations}, "spec": spec}


# --- the views ---------------------------------------------------------------------------------

def test_the_pod_view_reads_wire_names_and_drops_what_it_does_not_read():
    pod = Pod.model_validate({
        "metadata": {"name": "p", "namespace": "ns", "managedFields": [{"manager": "x"}]},
        "spec": {"nodeName": "n1", "hostNetwork": False, "os": {"name": "windows"},
                 "schedulingGates": [{"name": "example.com/wait"}], "containers": [{"name": "c"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    })
    assert (pod.metadata.key, pod.spec.node_name, pod.status.phase) == ("ns/p", "n1", "Running")
    assert pod.spec.os is not None and pod.spec.os.name == "windows"
    assert [g.name for g in pod.spec.scheduling_gates or []] == ["example.com/wait"]
    assert not hasattr(pod.spec, "containers")


def test_host_network_must_be_a_boolean_as_the_api_server_requires():
    with pytest.raises(pydantic.ValidationError, match="hostNetwork"):
        Pod.model_validate({"spec": {"hostNetwork": "yes"}})


def test_a_node_condition_keeps_the_fields_the_view_does_not_name():
    node = Node.model_validate({"metadata": {"name": "n1"}, "status": {"conditions": [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": T0, "lastTransitionTime": T0}]}})
    cond = node.condition("Ready")
    assert isinstance(cond, Condition)
    assert cond.to_dict() == {"type": "Ready", "status": "True", "reason": "", "message": "",
                              "lastHeartbeatTime": T0, "lastTransitionTime": T0}


def test_parse_reads_either_kind_by_its_kind():
    assert isinstance(api.parse(podnetwork("blue")), api.PodNetwork)
    pna = {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"podNetworkName": "blue"}}
    assert isinstance(api.parse(pna, constants.ATTACHMENT_KIND), api.PodNetworkAttachment)
    with pytest.raises(ValueError, match="not kind 'Pod'"):
        api.parse({"kind": "Pod"})
    with pytest.raises(pydantic.ValidationError, match=r"spec\.enabled"):
        api.parse(podnetwork("odd", enabled="maybe"))


# --- the extender's cache ----------------------------------------------------------------------

def test_a_podnetwork_that_does_not_fit_is_not_ready_and_the_pod_is_told_which_field():
    c = cache_mod.Cache()
    odd = podnetwork("odd")
    del odd["status"]["conditions"][0]["lastTransitionTime"]  # the CRD requires it
    c.upsert(odd)
    c.mark_synced()
    readiness = c.snapshot().podnetworks["odd"]
    assert (readiness.ready, readiness.reason) == (False, "Invalid")
    result = decision.filter_nodes(Pod.model_validate(a_pod([{"podNetworkName": "odd"}])), ["n1"], c.snapshot())
    assert result.unresolvable == {"n1": (
        'podnetwork "odd" is not Ready: Invalid: the object does not fit the PodNetwork schema: '
        "status.conditions[0].lastTransitionTime: Field required")}


def test_an_attachment_that_does_not_fit_is_not_ready():
    c = cache_mod.Cache()
    c.upsert({"kind": "PodNetworkAttachment", "metadata": {"name": "a", "namespace": "ns"},
              "spec": {"podNetworkName": "blue", "colour": "red"}})
    state = c.snapshot().attachments[("ns", "a")]
    assert (state.readiness.ready, state.readiness.reason) == (False, "Invalid")
    assert "spec.colour: Extra inputs are not permitted" in state.readiness.message


def test_a_node_that_does_not_fit_offers_only_the_default_podnetwork_and_can_be_forgotten():
    c = cache_mod.Cache()
    bad = {"kind": "Node", "metadata": {"name": "n1", "labels": {"zone": 7},
                                        "annotations": {constants.NODE_PODNETWORKS_ANNOTATION: '["blue"]'}}}
    c.upsert(bad)
    c.upsert(podnetwork("blue"))
    c.mark_synced()
    offer = c.snapshot().nodes["n1"]
    assert isinstance(offer, cache_mod.InvalidOffer)
    assert "metadata.labels.zone: Input should be a valid string" in offer.message
    blue = Pod.model_validate(a_pod([{"podNetworkName": "blue"}]))
    assert decision.filter_nodes(blue, ["n1"], c.snapshot()).failed == {"n1": offer.message}
    default = Pod.model_validate(a_pod([{"podNetworkName": "default"}]))
    c.upsert(podnetwork("default"))
    assert decision.filter_nodes(default, ["n1"], c.snapshot()).passed == ["n1"]
    c.delete(bad)
    assert "n1" not in c.snapshot().nodes


# --- the controller ----------------------------------------------------------------------------

def test_the_controller_ignores_a_body_that_does_not_fit_and_keeps_the_last_good_one(caplog):
    ctl = controller.Controller()
    ref = inuse.podnetwork_ref("blue")
    good = {**podnetwork("blue"), "metadata": {"name": "blue", "resourceVersion": "5"}}
    assert isinstance(ctl.remember(ref, good), api.PodNetwork)
    bad = {**podnetwork("blue", colour="red"), "metadata": {"name": "blue", "resourceVersion": "6"}}
    with caplog.at_level(logging.WARNING, logger="podnetwork.kep.controller"):
        kept = ctl.remember(ref, bad)
    assert kept is ctl.objects[ref]
    assert kept is not None and kept.metadata.resource_version == "5"
    assert "ignored PodNetwork /blue: it does not fit its model" in caplog.text
    assert "spec.colour" in caplog.text


# --- explain and graph -------------------------------------------------------------------------

def test_explain_shows_a_podnetwork_that_does_not_fit_as_invalid_with_the_field():
    pna = {"apiVersion": constants.API_VERSION, "kind": "PodNetworkAttachment",
           "metadata": {"name": "fast", "namespace": "ns"}, "spec": {"podNetworkName": "odd"}}
    graph = graphs.build([podnetwork("odd", enabled="maybe"), pna, a_pod([{"podNetworkAttachmentName": "fast"}])])
    result = explain.explain(graph, "Pod/ns/p")
    assert result.lines[2] == "    podNetworkName -> PodNetwork odd: INVALID"
    assert result.root_cause is not None and str(result.root_cause) == (
        "PodNetwork odd: spec.enabled: Input should be a valid boolean, unable to interpret input")
    assert graph.nodes["PodNetworkAttachment/ns/fast"]["reason"] == "PodNetworkNotReady"
    assert "its Ready condition is False (Invalid)" in graph.nodes["PodNetworkAttachment/ns/fast"]["message"]


def test_an_object_whose_name_is_not_a_string_is_left_out_of_the_graph(caplog):
    with caplog.at_level(logging.WARNING, logger="podnetwork.kep.graph"):
        graph = graphs.build([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 7}}, podnetwork("blue")])
    assert list(graph.nodes) == ["PodNetwork//blue"]
    assert "left out of the graph: its metadata cannot be read: metadata.name" in caplog.text


# --- the controller on the demo's store ---------------------------------------------------------

def test_the_demo_controller_ignores_an_object_that_does_not_fit_and_reconciles_the_others(caplog):
    api_ = Store()
    ctl = ControlPlane(api_)
    ctl.start()
    try:
        with caplog.at_level(logging.WARNING, logger="podnetwork.kep.controller"):
            api_.create({**podnetwork("odd", colour="red"), "status": {}})
        api_.create({**podnetwork("blue"), "status": {}})
        pod = a_pod([{"podNetworkName": "blue"}, {"podNetworkName": "odd", "interfaceName": "net1"}])
        api_.create({**pod, "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": "n1"}})
        odd = api_.get(constants.API_VERSION, "PodNetwork", "odd")
        blue = api_.get(constants.API_VERSION, "PodNetwork", "blue")
    finally:
        ctl.stop()
    assert not (odd.get("status") or {}).get("conditions")
    assert constants.IN_USE_FINALIZER not in (odd["metadata"].get("finalizers") or [])
    assert "ignored PodNetwork /odd: it does not fit its model" in caplog.text
    assert [c["status"] for c in blue["status"]["conditions"] if c["type"] in ("Ready", "InUse")] == ["True", "True"]


def test_an_rbac_object_whose_metadata_does_not_fit_is_not_kept_by_the_cluster_read() -> None:
    rbac = "rbac.authorization.k8s.io/v1"
    use = [{"apiGroups": [constants.GROUP], "resources": ["podnetworks"], "verbs": ["use"]}]
    objects = [
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": "junk", "rules": use},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": "use-all"}, "rules": use},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": ["b"]},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "use-all"}},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "use-all"}},
    ]
    kept = [(o["kind"], o["metadata"]["name"]) for o in graphs.referenced_roles(objects)]
    assert kept == [("ClusterRole", "use-all"), ("ClusterRoleBinding", "b")]
