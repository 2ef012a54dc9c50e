"""Pod admission: real AdmissionReview v1 JSON in, AdmissionReview out."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from podnetwork.ground import constants
from podnetwork.kep import admission, admissionreview
from podnetwork.kep.admission import Webhook

ANN = constants.NETWORKS_ANNOTATION


def pod(annotations: dict[str, str] | None = None, *, host_network: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "nginx"}]}
    if host_network:
        spec["hostNetwork"] = True
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def review(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team", "operation": operation, "object": obj,
        "userInfo": {"username": "alice"}, "dryRun": False,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def namespace(profile: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "team"}
    if profile is not None:
        meta["annotations"] = {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION:
                               profile if isinstance(profile, str) else json.dumps(profile)}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def patch_of(out: dict[str, Any]) -> list[dict[str, Any]]:
    assert out["response"]["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(out["response"]["patch"]))


def apply(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A minimal RFC 6902 `add` applier, enough to check what the API server would store."""
    obj = json.loads(json.dumps(obj))
    for op in ops:
        assert op["op"] == "add"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = obj
        for part in parts[:-1]:
            target = target[part]
        target[parts[-1]] = op["value"]
    return obj


def test_response_echoes_uid_and_review_kind():
    out = admission.review(review(pod({ANN: '[{"podNetworkName":"blue"}]'})), Webhook.VALIDATING)
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["kind"] == "AdmissionReview"
    assert out["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_pod_without_networks_gets_the_default_podnetwork():
    out = admission.review(review(pod()), Webhook.MUTATING)
    assert out["response"]["allowed"] is True
    stored = apply(pod(), patch_of(out))
    assert json.loads(stored["metadata"]["annotations"][ANN]) == [{"podNetworkName": "default"}]


def test_auto_population_keeps_existing_annotations():
    original = pod({"team": "a"})
    stored = apply(original, patch_of(admission.review(review(original), Webhook.MUTATING)))
    assert stored["metadata"]["annotations"]["team"] == "a"
    assert json.loads(stored["metadata"]["annotations"][ANN]) == [{"podNetworkName": "default"}]


def test_namespace_profile_replaces_the_cluster_default():
    profile = [{"podNetworkName": "tenant-a"}, {"podNetworkName": "storage", "interfaceName": "net1"}]
    out = admission.review(review(pod()), Webhook.MUTATING, namespace=namespace(profile))
    stored = apply(pod(), patch_of(out))
    assert json.loads(stored["metadata"]["annotations"][ANN]) == profile


def test_broken_namespace_profile_refuses_the_pod_naming_the_namespace_annotation():
    out = admission.review(review(pod()), Webhook.MUTATING, namespace=namespace([{"podNetwork": "x"}]))
    response = out["response"]
    assert response["allowed"] is False
    assert 'namespace "team" (fix its annotation)' in response["status"]["message"]
    [cause] = response["status"]["details"]["causes"]
    assert cause["field"] == f"metadata.annotations[{constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION}][0].podNetwork"


@pytest.mark.parametrize("obj", [pod({ANN: '[{"podNetworkName":"blue"}]'}), pod(host_network=True)],
                         ids=["names-networks", "host-network"])
def test_pods_that_need_no_population_are_left_alone(obj):
    assert admission.review(review(obj), Webhook.MUTATING)["response"] == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_the_pod_is_read_once_per_request_and_the_decisions_share_that_read():
    request = admissionreview.review_of(review(pod({ANN: '[{"podNetworkName":"blue"}]'}), "UPDATE",
                                              pod({ANN: '[{"podNetworkName":"blue"}]'}))).request
    new, old = request.pods()
    assert request.pod() is new and request.pods() == (new, old)
    assert new.annotation(ANN) == '[{"podNetworkName":"blue"}]' and new.name == "web" and old is not None


def test_a_field_under_its_python_name_is_checked_but_only_the_wire_name_is_read():
    # `host_network` is not a Pod field: the shape check has always refused it when it is not a
    # boolean, and the decisions read `hostNetwork` only, so this pod still gets its networks.
    snake = pod()
    snake["spec"]["host_network"] = True
    assert patch_of(admission.review(review(snake), Webhook.MUTATING))[0]["path"] == "/metadata/annotations"
    snake["spec"]["host_network"] = "yes"
    refused = admission.review(review(snake), Webhook.MUTATING)["response"]
    assert refused["allowed"] is False
    assert [c["field"] for c in refused["status"]["details"]["causes"]] == ["spec.host_network"]


def test_statically_invalid_pod_is_refused_with_field_error_causes():
    bad = pod({ANN: json.dumps([{"podNetworkName": "a", "interfaceName": "net1"},
                                {"podNetworkName": "b", "interfaceName": "net1"}])})
    response = admission.review(review(bad), Webhook.VALIDATING)["response"]
    assert response["allowed"] is False
    status = response["status"]
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"] == 'Pod "web" is invalid: spec.networks[1].interfaceName: Duplicate value: "net1"'
    assert status["details"]["causes"] == [{"reason": "FieldValueDuplicate", "field": "spec.networks[1].interfaceName",
                                            "message": 'spec.networks[1].interfaceName: Duplicate value: "net1"'}]


def test_unparseable_annotation_is_refused():
    response = admission.review(review(pod({ANN: "[{"})), Webhook.VALIDATING)["response"]
    assert response["allowed"] is False
    assert "not valid JSON" in response["status"]["message"]


def test_replacing_the_first_network_of_an_existing_pod_is_refused():
    old = pod({ANN: '[{"podNetworkName":"blue"}]'})
    new = pod({ANN: '[{"podNetworkName":"red"}]'})
    response = admission.review(review(new, "UPDATE", old), Webhook.VALIDATING)["response"]
    assert response["allowed"] is False
    assert response["status"]["details"]["causes"][0]["reason"] == "FieldValueForbidden"
    assert "the first network of a running pod cannot be removed, replaced" in response["status"]["message"]


def test_other_updates_of_a_pod_are_allowed():
    old = pod({ANN: '[{"podNetworkName":"blue"}]'})
    new = pod({ANN: '[{"podNetworkName":"blue"}]', constants.REQUEUED_AT_ANNOTATION: "2026-01-01T00:00:00Z"})
    assert admission.review(review(new, "UPDATE", old), Webhook.VALIDATING)["response"]["allowed"] is True


def test_feature_gate_off_allows_everything_unchanged():
    bad = pod({ANN: "[{"})
    assert admission.review(review(bad), Webhook.VALIDATING, enabled=False)["response"]["allowed"] is True
    assert "patch" not in admission.review(review(pod()), Webhook.MUTATING, enabled=False)["response"]


def test_other_kinds_pass_through():
    body = review(pod())
    body["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert admission.review(body, Webhook.MUTATING)["response"]["allowed"] is True


def test_non_review_body_is_an_error():
    with pytest.raises(ValueError, match="AdmissionReview"):
        admission.review({"kind": "Pod"}, Webhook.VALIDATING)


def test_webhook_configurations_point_at_the_served_paths():
    mutating, validating = admission.webhook_configurations({"url": "https://10.0.0.1:9443", "caBundle": "Q0E="})
    assert mutating["webhooks"][0]["clientConfig"]["url"] == "https://10.0.0.1:9443" + admission.MUTATE_PATH
    assert validating["webhooks"][0]["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert validating["webhooks"][0]["admissionReviewVersions"] == ["v1"]
