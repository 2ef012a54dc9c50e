"""bridge.operator.admission: AdmissionReview v1 in and out for the npwg-selection gate, decided purely."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch
import pytest

from bridge import npwg, translate
from bridge.operator import admission, pods
from podnetwork.ground import constants
from tests.unit.bridge_support import NS, nad, podnetwork

READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
WORLD = translate.Objects.from_objects([
    {**podnetwork("dataplane"), "status": READY}, nad("dataplane"), podnetwork("storage"), nad("storage"),
    {**podnetwork("default", nads=[], provider="example.com/cluster"), "status": READY},
])
#: The translation's warning for a pod that leaves `default` out (NPWG 6 attaches it anyway).
NO_DEFAULT = "the pod does not list the default PodNetwork"


def request(nets: list[dict] | None, *, operation: str = "CREATE", kind: str = "Pod", group: str = "",
            sub: str | None = None) -> dict[str, Any]:
    annotations = {} if nets is None else {constants.NETWORKS_ANNOTATION: json.dumps(nets)}
    req: dict[str, Any] = {
        "uid": "u-7", "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": "pods"}, "namespace": NS,
        "operation": operation,
        "object": {"apiVersion": "v1", "kind": kind, "metadata": {"generateName": "web-", "annotations": annotations},
                   "spec": {"containers": [{"name": "c", "image": "x"}]}},
    }
    if sub:
        req["subResource"] = sub
    return req


def patched(response: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    assert response["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))


def test_a_pod_on_a_ready_bridge_network_is_admitted_with_its_selection_and_no_gate() -> None:
    req = request([{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}])
    out = admission.review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}, WORLD)
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    response = out["response"]
    assert (response["uid"], response["allowed"]) == ("u-7", True)
    assert "warnings" not in response
    pod = patched(response, req["object"])
    assert json.loads(pod["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION]) == [
        {"name": "dataplane", "namespace": "nets", "interface": "net1"}]
    assert "schedulingGates" not in pod["spec"]


def test_a_pod_on_a_bridge_network_not_ready_is_admitted_gated_with_a_warning() -> None:
    req = request([{"podNetworkName": "storage"}])
    response = admission.mutate(req, WORLD)["response"]
    assert response["allowed"] is True
    (no_default, gate) = response["warnings"]
    assert no_default.startswith(NO_DEFAULT) and gate == admission.GATE_WARNING
    pod = patched(response, req["object"])
    assert pod["spec"]["schedulingGates"] == [{"name": pods.SCHEDULING_GATE}]
    assert npwg.NETWORKS_ANNOTATION not in pod["metadata"]["annotations"]


def test_reinvocation_adds_nothing_more() -> None:
    """reinvocationPolicy IfNeeded: a second pass over the patched pod must be a no-op."""
    for nets in ([{"podNetworkName": "storage"}], [{"podNetworkName": "dataplane"}]):
        req = request(nets)
        req["object"] = patched(admission.mutate(req, WORLD)["response"], req["object"])
        assert admission.mutate(req, WORLD)["response"] == {"uid": "u-7", "allowed": True}


@pytest.mark.parametrize(
    "req",
    [
        pytest.param(request(None), id="a pod that names no networks"),
        pytest.param(request([{"podNetworkName": "default"}]), id="a pod on the default network only"),
        pytest.param(request([{"podNetworkName": "storage"}], operation="UPDATE"), id="an update"),
        pytest.param(request([{"podNetworkName": "storage"}], sub="binding"), id="a subresource"),
        pytest.param(request([{"podNetworkName": "storage"}], kind="Deployment", group="apps"),
                     id="another kind"),
        pytest.param({**request(None), "object": None}, id="no object"),
    ],
)
def test_requests_the_gate_does_not_concern_are_allowed_unchanged(req: dict) -> None:
    assert admission.mutate(req, WORLD) == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                            "response": {"uid": "u-7", "allowed": True}}


@pytest.mark.parametrize("body", [None, [], {"kind": "Pod"}, {"kind": "AdmissionReview"},
                                  {"kind": "AdmissionReview", "request": "x"}])
def test_a_body_that_is_not_an_admission_review_is_an_error(body: Any) -> None:
    with pytest.raises(ValueError, match="AdmissionReview"):
        admission.review(body, WORLD)


def test_the_webhook_configuration_is_create_only_fail_closed_reinvoked_and_skips_system_namespaces() -> None:
    cfg = admission.webhook_configuration({"url": "https://10.0.0.1:9444/", "caBundle": "Q0E="})
    (hook,) = cfg["webhooks"]
    assert hook["clientConfig"] == {"url": "https://10.0.0.1:9444/mutate-pods", "caBundle": "Q0E="}
    assert (hook["failurePolicy"], hook["reinvocationPolicy"], hook["sideEffects"]) == ("Fail", "IfNeeded", "None")
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    exempt = hook["namespaceSelector"]["matchExpressions"][1]
    assert "multinetwork-system" in exempt["values"] and exempt["operator"] == "NotIn"
    # Sorted after the PodNetwork controller's configuration (auto-population first on a first pass).
    assert sorted(["podnetwork", cfg["metadata"]["name"]])[0] == "podnetwork"
    service = admission.webhook_configuration({"service": {"name": "s", "namespace": "n", "port": 443}})
    assert service["webhooks"][0]["clientConfig"]["service"]["path"] == admission.MUTATE_PATH


def test_a_pod_that_fits_the_webhooks_shape_but_not_the_pod_view_gets_no_patch() -> None:
    """The bridge's decisions read `podnetwork.ground.core.Pod`; a label that is not text fits
    the shape this webhook checks, not the view: allowed, and nothing written."""
    req = request([{"podNetworkName": "storage"}])
    req["object"]["metadata"]["labels"] = {"app": 1}
    assert admission.mutate(req, WORLD) == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                            "response": {"uid": "u-7", "allowed": True}}
    req["object"]["metadata"]["labels"] = {"app": "web"}
    assert "patch" in admission.mutate(req, WORLD)["response"]
