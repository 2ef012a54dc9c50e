"""isDefaultGW4/6 on a network whose NAD names no gateway of the family: the translation records a
`GatewayGap`, and the bridge operator never writes that selection (no `"default-route": []`
for Multus, which would remove the pod's default route and add none; NPWG 4.1.2.1.9).
Decided purely: `bridge.translate` and `bridge.operator.pods`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge import npwg, translate
from bridge.operator import admission, pods
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.kep.api import Network
from tests.unit.bridge_support import NS, attachment, nad, options, options_ref, podnetwork

READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
V4, V6 = "10.7.0.1", "fd00:7::1"


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "status": READY}


def ranges(*subnets: tuple[str, str | None]) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "type": "bridge", "ipam": {"type": "host-local", "ranges": [
        [{"subnet": subnet, **({"gateway": gw} if gw else {})}] for subnet, gw in subnets]}}


WORLD = translate.Objects.from_objects([
    ready(podnetwork("default", nads=[], provider="example.com/cluster")),
    ready(podnetwork("nogw")), nad("nogw", config=ranges(("10.7.0.0/24", None))),
    ready(podnetwork("v4only")), nad("v4only", config=ranges(("10.7.0.0/24", V4), ("fd00:7::/64", None))),
    ready(podnetwork("dual")), nad("dual", config=ranges(("10.7.0.0/24", V4), ("fd00:7::/64", V6))),
    options("explicit", {"default-route": ["10.7.0.254"]}),
    ready(attachment("nogw-explicit", "nogw", [options_ref("explicit")])),
])


def tr(*nets: dict[str, Any]) -> translate.Translation:
    return translate.translate([Network.model_validate(n) for n in nets], NS, WORLD)


def new_pod(nets: list[dict[str, Any]]) -> Pod:
    return Pod.model_validate({"metadata": {"name": "p", "namespace": NS, "uid": "u1", "resourceVersion": "3",
                                            "annotations": {constants.NETWORKS_ANNOTATION: json.dumps(nets)}},
                               "spec": {"containers": [{"name": "c", "image": "x"}]}})


DEFAULT = {"podNetworkName": "default"}


@pytest.mark.parametrize(
    ("net", "families"),
    [
        pytest.param({"podNetworkName": "nogw", "isDefaultGW4": True}, (4,), id="IPv4, no gateway"),
        pytest.param({"podNetworkName": "v4only", "isDefaultGW6": True}, (6,), id="IPv6, only an IPv4 gateway"),
        pytest.param({"podNetworkName": "v4only", "isDefaultGW4": True, "isDefaultGW6": True}, (6,),
                     id="both, only an IPv4 gateway"),
        pytest.param({"podNetworkName": "nogw", "isDefaultGW4": True, "isDefaultGW6": True}, (4, 6),
                     id="both, no gateway"),
    ],
)
def test_npwg_4_1_2_1_9_a_requested_family_without_a_gateway_is_a_gap_naming_the_nad(
    net: dict[str, Any], families: tuple[int, ...]
) -> None:
    result = tr(DEFAULT, net)
    (gap,) = result.gateway_gaps
    assert gap.nad == ("nets", net["podNetworkName"]) and gap.families == families
    assert f"nets/{net['podNetworkName']}" in gap.message and "spec.networks[1]" in gap.message
    # The agent's translation is unchanged: it completes the list from the CNI result.
    assert gap.warning in result.warnings


@pytest.mark.parametrize(
    "net",
    [
        pytest.param({"podNetworkName": "dual", "isDefaultGW4": True, "isDefaultGW6": True}, id="both named"),
        pytest.param({"podNetworkName": "v4only", "isDefaultGW4": True}, id="the requested family named"),
        pytest.param({"podNetworkAttachmentName": "nogw-explicit", "isDefaultGW4": True},
                     id="gateway given in NetworkSelectionOptions"),
        pytest.param({"podNetworkName": "nogw"}, id="no default route asked"),
    ],
)
def test_a_gateway_the_bridge_can_name_is_no_gap(net: dict[str, Any]) -> None:
    assert tr(DEFAULT, net).gateway_gaps == []


def test_the_bridge_never_writes_a_selection_with_a_gap_and_says_which_nad_lacks_the_gateway() -> None:
    nets = [DEFAULT, {"podNetworkName": "nogw", "interfaceName": "net1", "isDefaultGW4": True}]
    translation = tr(*nets)
    assert translation.elements[0].default_route == []  # what the agent reads, never written for Multus
    decision = pods.selection(new_pod(nets), translation)
    assert decision.patch is None and decision.conflict is None
    assert decision.refused is not None
    assert "NetworkAttachmentDefinition nets/nogw names no IPv4 gateway" in decision.refused
    assert npwg.NETWORKS_ANNOTATION in decision.refused
    # One Event for the refusal; the gap's own warning is not posted twice.
    reasons = [reason for reason, _ in pods.notices(translation)]
    assert reasons == [pods.GATEWAY_MISSING_REASON]


def test_a_gated_pod_with_a_gap_keeps_its_gate() -> None:
    nets = [DEFAULT, {"podNetworkName": "nogw", "isDefaultGW4": True}]
    body = new_pod(nets).model_dump(by_alias=True, exclude_none=True)
    body["spec"]["schedulingGates"] = [{"name": pods.SCHEDULING_GATE}]
    decision = pods.selection(Pod.model_validate(body), tr(*nets))
    assert decision.patch is None and decision.refused is not None


def test_admission_gates_a_pod_with_a_gap_and_warns_naming_the_nad() -> None:
    nets = [DEFAULT, {"podNetworkName": "nogw", "isDefaultGW4": True}]
    pod = {"metadata": {"generateName": "web-", "annotations": {constants.NETWORKS_ANNOTATION: json.dumps(nets)}},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    review = {"uid": "u-9", "kind": {"group": "", "version": "v1", "kind": "Pod"},
              "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": NS,
              "operation": "CREATE", "object": pod}
    response = admission.mutate(review, WORLD)["response"]
    assert response["allowed"] is True
    refusal, gate = response["warnings"]
    assert "nets/nogw names no IPv4 gateway" in refusal and len(refusal) <= admission.WARNING_MAX_CHARS
    assert gate == admission.GATE_WARNING
    ops = pods.admission_patch(Pod.model_validate(pod), WORLD, namespace=NS)
    assert ops == [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": pods.SCHEDULING_GATE}]}]
    assert "default-route" not in json.dumps(ops)


def test_a_pod_whose_gateways_are_named_gets_them_and_no_refusal() -> None:
    nets = [DEFAULT, {"podNetworkName": "dual", "isDefaultGW4": True, "isDefaultGW6": True}]
    decision = pods.selection(new_pod(nets), tr(*nets))
    assert decision.refused is None and decision.patch is not None
    value = json.loads(decision.patch["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION])
    assert value == [{"name": "dual", "namespace": "nets", "default-route": [V4, V6]}]
