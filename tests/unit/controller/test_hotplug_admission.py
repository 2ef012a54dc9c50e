"""Hot-plug in pod admission (KEP Story #8, Phase IV requirement 24): which changes of a
running pod's networks annotation the validating webhook allows on UPDATE, real
AdmissionReview v1 JSON in and out; and which added networks need `use` permission."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podnetwork.ground import constants
from podnetwork.kep import admission, admissionreview
from podnetwork.kep.admission import Webhook

ANN = constants.NETWORKS_ANNOTATION
DEFAULT = {"podNetworkName": "default"}
BLUE = {"podNetworkName": "blue", "interfaceName": "blue0"}
RED = {"podNetworkName": "red"}
PORT = {"podNetworkAttachmentName": "green-port"}


def pod(nets: list[dict[str, Any]] | str | None, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "vm", "namespace": "team", "annotations": dict(annotations)}
    if nets is not None:
        meta["annotations"][ANN] = nets if isinstance(nets, str) else json.dumps(nets)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": "node-a"}}


def update(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    request = {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team", "operation": "UPDATE", "object": new, "oldObject": old,
        "userInfo": {"username": "alice"},
    }
    response: dict[str, Any] = admission.review(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request},
        Webhook.VALIDATING)["response"]
    return response


def causes(response: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["reason"], c["field"]) for c in response["status"]["details"]["causes"]]


@pytest.mark.parametrize(("before", "after"), [
    ([DEFAULT], [DEFAULT, BLUE]),
    ([DEFAULT, BLUE], [DEFAULT, BLUE, RED]),
    ([DEFAULT, BLUE], [DEFAULT, RED, BLUE]),  # an addition anywhere after the first
    ([DEFAULT, BLUE, RED], [DEFAULT, RED]),
    ([DEFAULT, BLUE, RED], [DEFAULT]),
    ([DEFAULT, BLUE], [DEFAULT, PORT]),  # one removed and one added in the same update
    ([{"podNetworkName": "blue", "isDefaultGW4": True}], [{"podNetworkName": "blue", "isDefaultGW4": True}, RED]),
], ids=["add-to-default-only", "append", "insert", "remove-one", "remove-all-secondaries", "swap-secondary",
        "add-to-a-pod-whose-first-is-not-default"])
def test_adding_and_removing_secondary_networks_is_allowed(before, after):
    response = update(pod(before), pod(after))
    assert response == {"uid": "u-1", "allowed": True}


def test_removing_the_default_network_is_refused_naming_it_and_how_to_fix_it():
    response = update(pod([DEFAULT, BLUE]), pod([BLUE]))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    message = response["status"]["message"]
    assert 'the "default" PodNetwork cannot be removed from a running pod' in message
    assert 'keep [{"podNetworkName":"default"}] as the first entry' in message
    assert ("FieldValueForbidden", "spec.networks") in causes(response)
    assert ("FieldValueForbidden", "spec.networks[0]") in causes(response)


@pytest.mark.parametrize(("before", "after"), [
    ([DEFAULT, BLUE], [BLUE, DEFAULT]),  # swapped
    ([{"podNetworkName": "blue", "isDefaultGW4": True}, RED], [RED]),  # first (not default) removed
    ([{"podNetworkName": "blue", "isDefaultGW4": True}, RED], [{"podNetworkName": "blue"}, RED]),  # edited
    ([{"podNetworkName": "blue", "isDefaultGW4": True}], [{"podNetworkName": "red", "isDefaultGW4": True}]),
], ids=["swapped", "first-removed", "first-edited", "first-replaced"])
def test_the_first_network_cannot_be_removed_replaced_swapped_or_edited(before, after):
    response = update(pod(before), pod(after))
    assert response["allowed"] is False
    assert ("FieldValueForbidden", "spec.networks[0]") in causes(response)
    assert "the first network of a running pod cannot be removed, replaced or edited" in response["status"]["message"]


def test_an_attached_network_cannot_change_its_interface_name_in_place():
    response = update(pod([DEFAULT, BLUE]), pod([DEFAULT, {"podNetworkName": "blue", "interfaceName": "data0"}]))
    assert response["allowed"] is False
    assert causes(response) == [("FieldValueForbidden", "spec.networks[1]")]
    message = response["status"]["message"]
    assert "PodNetwork 'blue' is attached; its interfaceName and isDefaultGW4/6 cannot change in place" in message
    assert "remove it in one update and add it back in another" in message


def test_kept_networks_cannot_be_reordered():
    response = update(pod([DEFAULT, BLUE, RED]), pod([DEFAULT, RED, BLUE]))
    assert response["allowed"] is False
    assert causes(response) == [("FieldValueForbidden", "spec.networks")]
    assert "must stay in their order" in response["status"]["message"]


@pytest.mark.parametrize("flag", ["isDefaultGW4", "isDefaultGW6"])
def test_an_added_network_cannot_take_the_default_route(flag):
    response = update(pod([DEFAULT]), pod([DEFAULT, {"podNetworkName": "blue", flag: True}]))
    assert response["allowed"] is False
    assert causes(response) == [("FieldValueForbidden", f"spec.networks[1].{flag}")]
    assert "cannot take its default route" in response["status"]["message"]


def test_an_added_network_cannot_take_the_interface_of_one_removed_in_the_same_update():
    response = update(pod([DEFAULT, BLUE]), pod([DEFAULT, {"podNetworkName": "red", "interfaceName": "blue0"}]))
    assert response["allowed"] is False
    assert causes(response) == [("FieldValueForbidden", "spec.networks[1].interfaceName")]
    assert "interface 'blue0' still belongs to a network this update removes" in response["status"]["message"]


def test_the_default_network_cannot_be_added_to_a_running_pod():
    response = update(pod([BLUE]), pod([BLUE, DEFAULT]))
    assert response["allowed"] is False
    assert causes(response) == [("FieldValueForbidden", "spec.networks[1]")]


def test_a_change_that_breaks_the_static_rules_is_refused_with_their_errors():
    response = update(pod([DEFAULT]), pod([DEFAULT, BLUE, {"podNetworkName": "red", "interfaceName": "blue0"}]))
    assert response["allowed"] is False
    assert causes(response) == [("FieldValueDuplicate", "spec.networks[2].interfaceName")]


@pytest.mark.parametrize(("before", "after", "words"), [
    ([DEFAULT, BLUE], None, "cannot be removed"),
    (None, [DEFAULT, BLUE], "created without a networks annotation"),
    ("[{", [DEFAULT, BLUE], "cannot be parsed"),
], ids=["annotation-removed", "annotation-added", "old-unparseable"])
def test_the_annotation_cannot_appear_or_go_and_an_unreadable_one_cannot_change(before, after, words):
    response = update(pod(before), pod(after))
    assert response["allowed"] is False
    assert causes(response) == [("FieldValueForbidden", f"metadata.annotations[{ANN}]")]
    assert words in response["status"]["message"]


def test_updates_that_leave_the_networks_alone_are_allowed():
    response = update(pod([DEFAULT, BLUE]), pod([DEFAULT, BLUE], other="x"))
    assert response == {"uid": "u-1", "allowed": True}


def test_only_the_networks_an_update_adds_need_use_permission():
    request = admissionreview.request_of({
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "team",
        "operation": "UPDATE", "object": pod([DEFAULT, BLUE, PORT, RED]), "oldObject": pod([DEFAULT, BLUE]),
    })
    assert admission.use_requests(request) == [admission.UseRequest(2, "", "green-port"),
                                               admission.UseRequest(3, "red")]
