"""bridge.operator.pods: what the bridge writes on a pod (selection, pod IPs, events), decided purely."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import npwg, translate
from bridge.operator import pods
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.kep.api import Network
from tests.unit.bridge_support import NS, attachment, nad, podnetwork

READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


def ready(obj: dict) -> dict:
    return {**obj, "status": READY}


WORLD = translate.Objects.from_objects([
    ready(podnetwork("default", nads=[], provider="example.com/cluster")),
    ready(podnetwork("dataplane")), nad("dataplane"),
    podnetwork("storage"), nad("storage"),
    ready(attachment("pna-ok", "dataplane")), attachment("pna-new", "dataplane"),
])

NETS = [{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}]
WANTED = '[{"name":"dataplane","namespace":"nets","interface":"net1"}]'


def pod(annotations: dict[str, str] | None = None, rv: str = "7") -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": NS, "uid": "u1", "resourceVersion": rv,
                         "annotations": annotations or {}}}


def tr(nets: list[dict] = NETS) -> translate.Translation:
    return translate.translate([Network.model_validate(n) for n in nets], NS, WORLD)


def test_a_pod_without_selection_gets_the_translation_with_the_written_marker_and_resource_version() -> None:
    decision = pods.selection(Pod.model_validate(pod()), tr())
    assert decision.conflict is None
    assert decision.patch == {"metadata": {"resourceVersion": "7", "annotations": {
        npwg.NETWORKS_ANNOTATION: WANTED, pods.WRITTEN_ANNOTATION: pods.digest(WANTED)}}}


def test_npwg_4_a_default_only_pod_gets_no_selection() -> None:
    assert pods.selection(Pod.model_validate(pod()), tr([{"podNetworkName": "default"}])) == pods.SelectionDecision()


@pytest.mark.parametrize(
    "have",
    [pytest.param(WANTED, id="the same JSON"),
     pytest.param("nets/dataplane@net1", id="NPWG 4.1.1 the same in the comma-delimited format")],
)
def test_a_selection_that_already_agrees_is_left_alone(have: str) -> None:
    assert pods.selection(Pod.model_validate(pod({npwg.NETWORKS_ANNOTATION: have})), tr()) == pods.SelectionDecision()


def test_a_hand_written_selection_that_disagrees_is_reported_not_overwritten() -> None:
    decision = pods.selection(Pod.model_validate(pod({npwg.NETWORKS_ANNOTATION: "nets/storage"})), tr())
    assert decision.patch is None
    assert decision.conflict is not None
    assert "nets/storage" in decision.conflict and WANTED in decision.conflict


def test_an_invalid_hand_written_selection_is_reported_too() -> None:
    decision = pods.selection(Pod.model_validate(pod({npwg.NETWORKS_ANNOTATION: "[oops"})), tr())
    assert decision.patch is None and decision.conflict is not None


def test_the_bridges_own_older_selection_is_updated_while_the_pod_is_not_attached() -> None:
    old = '[{"name":"storage","namespace":"nets"}]'
    annotations = {npwg.NETWORKS_ANNOTATION: old, pods.WRITTEN_ANNOTATION: pods.digest(old)}
    decision = pods.selection(Pod.model_validate(pod(annotations)), tr())
    assert decision.patch is not None
    assert decision.patch["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION] == WANTED


def test_kep_req_24_the_bridges_own_selection_follows_the_networks_of_an_attached_pod() -> None:
    old = '[{"name":"storage","namespace":"nets"}]'
    annotations = {npwg.NETWORKS_ANNOTATION: old, pods.WRITTEN_ANNOTATION: pods.digest(old),
                   npwg.NETWORK_STATUS_ANNOTATION: "[]"}
    decision = pods.selection(Pod.model_validate(pod(annotations)), tr())
    assert decision.patch == {"metadata": {"resourceVersion": "7", "annotations": {
        npwg.NETWORKS_ANNOTATION: WANTED, pods.WRITTEN_ANNOTATION: pods.digest(WANTED)}}}
    added = pods.selection(Pod.model_validate(pod({npwg.NETWORK_STATUS_ANNOTATION: "[]"})), tr())
    assert added.patch is not None and added.patch["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION] == WANTED


def test_kep_req_24_removing_the_last_secondary_network_removes_the_selection_and_its_marker() -> None:
    annotations = {npwg.NETWORKS_ANNOTATION: WANTED, pods.WRITTEN_ANNOTATION: pods.digest(WANTED),
                   npwg.NETWORK_STATUS_ANNOTATION: "[]"}
    decision = pods.selection(Pod.model_validate(pod(annotations)), tr([{"podNetworkName": "default"}]))
    assert decision.conflict is None
    assert decision.patch == {"metadata": {"resourceVersion": "7", "annotations": {
        npwg.NETWORKS_ANNOTATION: None, pods.WRITTEN_ANNOTATION: None}}}


def test_an_attached_pods_hand_written_selection_is_still_never_overwritten() -> None:
    annotations = {npwg.NETWORKS_ANNOTATION: "nets/storage", npwg.NETWORK_STATUS_ANNOTATION: "[]"}
    decision = pods.selection(Pod.model_validate(pod(annotations)), tr([{"podNetworkName": "default"}]))
    assert decision.patch is None and decision.conflict is not None


@pytest.mark.parametrize(
    ("nets", "problems"),
    [
        pytest.param(NETS, [], id="all Ready"),
        pytest.param([{"podNetworkName": "storage"}], ["PodNetwork storage is not Ready"], id="PodNetwork not Ready"),
        pytest.param([{"podNetworkName": "nope"}], ["PodNetwork nope is missing"], id="PodNetwork missing"),
        pytest.param([{"podNetworkAttachmentName": "pna-ok"}], [], id="attachment Ready"),
        pytest.param([{"podNetworkAttachmentName": "pna-new"}], [f"PodNetworkAttachment {NS}/pna-new is not Ready"],
                     id="attachment not Ready"),
        pytest.param([{"podNetworkAttachmentName": "gone"}], [f"PodNetworkAttachment {NS}/gone is missing"],
                     id="attachment missing"),
    ],
)
def test_kep_the_selection_waits_until_every_referenced_object_is_ready(nets: list, problems: list) -> None:
    assert pods.not_ready([Network.model_validate(n) for n in nets], NS, WORLD) == problems


def test_kep_status_pod_ips_are_patched_from_network_status_only_when_they_change() -> None:
    status = [{"name": "x/default-net", "interface": "eth0", "ips": ["10.244.0.9/24"], "default": True},
              {"name": "nets/dataplane", "interface": "net1", "ips": ["10.1.0.9/24"], "default": False}]
    p = pod({npwg.NETWORK_STATUS_ANNOTATION: json.dumps(status)})
    patch = pods.pod_ips_patch(Pod.model_validate(p), tr())
    assert patch is not None
    value = patch["metadata"]["annotations"][constants.POD_IPS_ANNOTATION]
    assert json.loads(value) == [{"ip": "10.244.0.9", "podNetwork": "default", "interfaceName": "eth0"},
                                 {"ip": "10.1.0.9", "podNetwork": "dataplane", "interfaceName": "net1"}]
    p["metadata"]["annotations"][constants.POD_IPS_ANNOTATION] = value
    assert pods.pod_ips_patch(Pod.model_validate(p), tr()) is None


def test_pod_ips_the_agent_wrote_for_a_pods_dra_claims_are_kept_while_their_interface_is_reported() -> None:
    """A pod attached by its ResourceClaims (docs/dra.md) has networks its annotation does not name:
    the agent writes their pod-ips, and the bridge keeps them instead of overwriting them."""
    status = [{"name": "x/default-net", "interface": "eth0", "ips": ["10.244.0.9/24"], "default": True},
              {"name": "nets/blue", "interface": "net1", "ips": ["10.2.0.9/24"], "default": False}]
    written = [{"ip": "10.244.0.9", "podNetwork": "default", "interfaceName": "eth0"},
               {"ip": "10.2.0.9", "podNetwork": "blue", "interfaceName": "net1"}]
    p = pod({npwg.NETWORK_STATUS_ANNOTATION: json.dumps(status),
             constants.POD_IPS_ANNOTATION: json.dumps(written, separators=(",", ":"))})
    assert pods.pod_ips_patch(Pod.model_validate(p), tr([{"podNetworkName": "default"}])) is None
    # once net1 is gone from network-status (DEL, hot-unplug), so is its entry
    p["metadata"]["annotations"][npwg.NETWORK_STATUS_ANNOTATION] = json.dumps(status[:1])
    patch = pods.pod_ips_patch(Pod.model_validate(p), tr([{"podNetworkName": "default"}]))
    assert patch is not None and json.loads(patch["metadata"]["annotations"][constants.POD_IPS_ANNOTATION]) == [
        written[0]]


def test_pod_ips_need_network_status_and_a_well_formed_one() -> None:
    assert pods.pod_ips_patch(Pod.model_validate(pod()), tr()) is None
    with pytest.raises(ValueError, match="network-status"):
        pods.pod_ips_patch(Pod.model_validate(pod({npwg.NETWORK_STATUS_ANNOTATION: "{"})), tr())


def test_events_are_named_from_pod_and_message_so_each_is_posted_once() -> None:
    a = pods.event(Pod.model_validate(pod()), "SelectionDisagrees", "m1", now="2026-01-01T00:00:00Z")
    b = pods.event(Pod.model_validate(pod(rv="8")), "SelectionDisagrees", "m1", now="2026-01-02T00:00:00Z")
    c = pods.event(Pod.model_validate(pod()), "SelectionDisagrees", "m2", now="2026-01-01T00:00:00Z")
    assert a["metadata"]["name"] == b["metadata"]["name"] != c["metadata"]["name"]
    assert a["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": NS, "uid": "u1",
                                   "resourceVersion": "7"}
    assert (a["type"], a["reason"], a["count"]) == ("Warning", "SelectionDisagrees", 1)
    long = {"metadata": {"name": "x" * 253, "namespace": NS, "uid": "u"}}
    assert len(pods.event(Pod.model_validate(long), "R", "m", now="t")["metadata"]["name"]) == 253


GATE = {"name": pods.SCHEDULING_GATE}
OTHER_GATE = {"name": "example.com/quota"}


def new_pod(nets: Any = NETS, *, gates: list | None = None, extra: dict[str, str] | None = None,
            **spec: Any) -> dict[str, Any]:
    """A pod as a mutating webhook sees it at CREATE: no namespace in metadata yet."""
    text = nets if isinstance(nets, str) else json.dumps(nets)
    body: dict[str, Any] = {"metadata": {"name": "p", "annotations": {constants.NETWORKS_ANNOTATION: text,
                                                                        **(extra or {})}},
                            "spec": {"containers": [{"name": "c", "image": "x"}], **spec}}
    if gates is not None:
        body["spec"]["schedulingGates"] = gates
    return body


def admitted(pod_: dict[str, Any]) -> dict[str, Any]:
    """The pod after the webhook's JSON Patch, applied by an RFC 6902 implementation."""
    return jsonpatch.apply_patch(pod_, pods.admission_patch(Pod.model_validate(pod_), WORLD, namespace=NS))


def test_admission_patch_adds_the_selection_to_a_new_pod_with_escaped_annotation_paths() -> None:
    ops = pods.admission_patch(Pod.model_validate(new_pod()), WORLD, namespace=NS)
    assert ops and all("~1" in op["path"] for op in ops)
    patched = admitted(new_pod())
    assert patched["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION] == WANTED
    assert patched["metadata"]["annotations"][pods.WRITTEN_ANNOTATION] == pods.digest(WANTED)
    assert "schedulingGates" not in patched["spec"]


@pytest.mark.parametrize(
    ("nets", "gates", "expected"),
    [
        pytest.param([{"podNetworkName": "storage"}], None, [GATE], id="a bridge network not Ready"),
        pytest.param([{"podNetworkName": "nope"}], None, [GATE], id="a missing network may be a bridge one"),
        pytest.param([{"podNetworkAttachmentName": "pna-new"}], None, [GATE],
                     id="an attachment not Ready"),
        pytest.param([{"podNetworkAttachmentName": "gone"}], None, [GATE], id="a missing attachment"),
        pytest.param([{"podNetworkName": "storage"}], [OTHER_GATE], [OTHER_GATE, GATE],
                     id="appended after another controller's gate"),
        pytest.param([{"podNetworkName": "storage"}], [GATE], [GATE], id="never twice"),
        pytest.param([{"podNetworkName": "storage"}], [], [GATE], id="an empty gate list"),
    ],
)
def test_admission_gates_a_pod_whose_bridge_selection_cannot_be_written_yet(
    nets: list, gates: list | None, expected: list
) -> None:
    patched = admitted(new_pod(nets, gates=gates))
    assert patched["spec"]["schedulingGates"] == expected
    assert npwg.NETWORKS_ANNOTATION not in patched["metadata"]["annotations"]


VENDOR_WORLD = translate.Objects.from_objects([
    ready(podnetwork("dataplane")), nad("dataplane"), podnetwork("storage"), nad("storage"),
    ready(podnetwork("vendor", nads=[], provider="example.com/vendor")),
    ready(attachment("pna-vendor", "vendor")), ready(attachment("pna-default", "default")),
])


@pytest.mark.parametrize(
    "nets",
    [
        pytest.param([{"podNetworkName": "default"}], id="the default network only"),
        pytest.param([{"podNetworkName": "vendor"}], id="another provider's network"),
        pytest.param([{"podNetworkAttachmentName": "pna-vendor"}], id="an attachment of another provider's network"),
        pytest.param([{"podNetworkAttachmentName": "pna-default"}], id="an attachment of the default network"),
        pytest.param([{"podNetworkName": "vendor"}, {"podNetworkName": "storage"}],
                     id="a mix the bridge can never translate"),
    ],
)
def test_admission_leaves_pods_naming_no_bridge_network_untouched(nets: list) -> None:
    assert pods.admission_patch(Pod.model_validate(new_pod(nets)), VENDOR_WORLD, namespace=NS) == []


@pytest.mark.parametrize(
    "pod_",
    [
        pytest.param(new_pod("[oops"), id="an unreadable networks annotation"),
        pytest.param({"metadata": {"name": "p"}, "spec": {}}, id="no networks annotation"),
        pytest.param(new_pod([{"podNetworkName": "storage"}], hostNetwork=True), id="a hostNetwork pod"),
        pytest.param(new_pod([{"podNetworkName": "storage"}], nodeName="n1"),
                     id="a pod created bound (the API server refuses gates with nodeName)"),
        pytest.param(new_pod([{"podNetworkName": "storage"}], extra={npwg.NETWORKS_ANNOTATION: "nets/storage"}),
                     id="a hand-written selection"),
        pytest.param(new_pod(extra={npwg.NETWORKS_ANNOTATION: "nets/storage"}),
                     id="a hand-written selection while everything is Ready"),
    ],
)
def test_admission_patch_adds_nothing_it_cannot_stand_behind(pod_: dict) -> None:
    assert pods.admission_patch(Pod.model_validate(pod_), WORLD, namespace=NS) == []


def test_admission_needs_a_namespace_from_the_pod_or_the_request() -> None:
    assert pods.admission_patch(Pod.model_validate(new_pod([{"podNetworkName": "storage"}])), WORLD) == []
    with_ns = new_pod([{"podNetworkName": "storage"}])
    with_ns["metadata"]["namespace"] = NS
    assert pods.admission_patch(Pod.model_validate(with_ns), WORLD) != []


def gated_pod(annotations: dict[str, str] | None = None, gates: list | None = None) -> dict[str, Any]:
    body = pod(annotations)
    body["spec"] = {"schedulingGates": [GATE] if gates is None else gates}
    return body


def test_the_selection_write_removes_the_gate_in_the_same_patch() -> None:
    decision = pods.selection(Pod.model_validate(gated_pod()), tr())
    assert decision.patch == {
        "metadata": {"resourceVersion": "7", "annotations": {
            npwg.NETWORKS_ANNOTATION: WANTED, pods.WRITTEN_ANNOTATION: pods.digest(WANTED)}},
        "spec": {"schedulingGates": None},
    }


def test_the_selection_write_keeps_other_controllers_gates() -> None:
    decision = pods.selection(Pod.model_validate(gated_pod(gates=[OTHER_GATE, GATE])), tr())
    assert decision.patch is not None
    assert decision.patch["spec"] == {"schedulingGates": [OTHER_GATE]}


@pytest.mark.parametrize(
    ("annotations", "nets", "conflict"),
    [
        pytest.param({}, [{"podNetworkName": "default"}], False, id="NPWG 4 nothing to select"),
        pytest.param({npwg.NETWORKS_ANNOTATION: WANTED}, NETS, False, id="the selection already agrees"),
        pytest.param({npwg.NETWORKS_ANNOTATION: "nets/storage"}, NETS, True, id="a hand-written one disagrees"),
    ],
)
def test_a_final_decision_without_a_write_still_releases_the_gate(
    annotations: dict, nets: list, conflict: bool
) -> None:
    decision = pods.selection(Pod.model_validate(gated_pod(annotations)), tr(nets))
    assert decision.patch == {"metadata": {"resourceVersion": "7"}, "spec": {"schedulingGates": None}}
    assert (decision.conflict is not None) is conflict


def test_release_patch_is_none_for_an_ungated_pod_and_keeps_other_gates() -> None:
    assert pods.release_patch(Pod.model_validate(pod())) is None
    assert pods.release_patch(Pod.model_validate(gated_pod(gates=[OTHER_GATE]))) is None
    assert pods.release_patch(Pod.model_validate(gated_pod(gates=[GATE, OTHER_GATE]))) == {
        "metadata": {"resourceVersion": "7"}, "spec": {"schedulingGates": [OTHER_GATE]}}


def test_the_real_api_servers_rule_holds_gates_are_only_ever_removed() -> None:
    """Pod update validation: after creation a gate may be removed, never added."""
    for gates in ([GATE], [OTHER_GATE, GATE], [GATE, OTHER_GATE]):
        before = gated_pod(gates=gates)
        decision = pods.selection(Pod.model_validate(before), tr())
        assert decision.patch is not None
        after = decision.patch["spec"]["schedulingGates"] or []
        assert [g for g in gates if g in after] == after and GATE not in after


GATE_NAMES = st.lists(st.from_regex(r"example\.com/[a-z]{1,8}", fullmatch=True), unique=True, max_size=4)


@settings(max_examples=60, deadline=None)
@given(others=GATE_NAMES, ready_at_creation=st.booleans())
def test_admission_then_the_controller_leaves_the_pod_ungated_by_the_bridge_with_its_selection(
    others: list[str], ready_at_creation: bool
) -> None:
    """Whatever other gates a pod has: one bridge gate at most, removed with the selection, the rest kept in order."""
    nets = [{"podNetworkName": "dataplane"}] if ready_at_creation else [{"podNetworkName": "storage"}]
    created = new_pod(nets, gates=[{"name": n} for n in others] or None)
    created = jsonpatch.apply_patch(created, pods.admission_patch(Pod.model_validate(created), WORLD, namespace=NS))
    names = [g["name"] for g in created["spec"].get("schedulingGates") or []]
    assert names == others + ([] if ready_at_creation else [pods.SCHEDULING_GATE])
    assert (npwg.NETWORKS_ANNOTATION in created["metadata"]["annotations"]) is ready_at_creation
    if ready_at_creation:
        return
    # The network turns Ready; the controller decides on the stored pod.
    stored = {**created, "metadata": {**created["metadata"], "namespace": NS, "resourceVersion": "9"}}
    world = translate.Objects.from_objects([ready(podnetwork("storage")), nad("storage")])
    translation = translate.translate([Network.model_validate(n) for n in nets], NS, world)
    decision = pods.selection(Pod.model_validate(stored), translation)
    assert decision.patch is not None and decision.conflict is None
    assert decision.patch["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION] == '[{"name":"storage","namespace":"nets"}]'
    remaining = decision.patch["spec"]["schedulingGates"]
    assert [g["name"] for g in remaining or []] == others
    assert (remaining is None) is (not others)
