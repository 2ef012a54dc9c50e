"""bridge.pods: what the bridge writes on a pod (selection, pod IPs, events), decided purely."""

from __future__ import annotations

import json
from typing import Any

import pytest
from bridge_support import NS, attachment, nad, podnetwork

from bridge import npwg, pods, translate
from podnetwork import constants
from podnetwork.api import Network

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
    decision = pods.selection(pod(), tr())
    assert decision.conflict is None
    assert decision.patch == {"metadata": {"resourceVersion": "7", "annotations": {
        npwg.NETWORKS_ANNOTATION: WANTED, pods.WRITTEN_ANNOTATION: pods.digest(WANTED)}}}


def test_npwg_4_a_default_only_pod_gets_no_selection() -> None:
    assert pods.selection(pod(), tr([{"podNetworkName": "default"}])) == pods.SelectionDecision()


@pytest.mark.parametrize(
    "have",
    [pytest.param(WANTED, id="the same JSON"),
     pytest.param("nets/dataplane@net1", id="NPWG 4.1.1 the same in the comma-delimited format")],
)
def test_a_selection_that_already_agrees_is_left_alone(have: str) -> None:
    assert pods.selection(pod({npwg.NETWORKS_ANNOTATION: have}), tr()) == pods.SelectionDecision()


def test_a_hand_written_selection_that_disagrees_is_reported_not_overwritten() -> None:
    decision = pods.selection(pod({npwg.NETWORKS_ANNOTATION: "nets/storage"}), tr())
    assert decision.patch is None
    assert decision.conflict is not None
    assert "nets/storage" in decision.conflict and WANTED in decision.conflict


def test_an_invalid_hand_written_selection_is_reported_too() -> None:
    decision = pods.selection(pod({npwg.NETWORKS_ANNOTATION: "[oops"}), tr())
    assert decision.patch is None and decision.conflict is not None


def test_the_bridges_own_older_selection_is_updated_while_the_pod_is_not_attached() -> None:
    old = '[{"name":"storage","namespace":"nets"}]'
    annotations = {npwg.NETWORKS_ANNOTATION: old, pods.WRITTEN_ANNOTATION: pods.digest(old)}
    decision = pods.selection(pod(annotations), tr())
    assert decision.patch is not None
    assert decision.patch["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION] == WANTED


def test_npwg_5_an_attached_pod_keeps_the_selection_it_was_attached_with() -> None:
    old = '[{"name":"storage","namespace":"nets"}]'
    annotations = {npwg.NETWORKS_ANNOTATION: old, pods.WRITTEN_ANNOTATION: pods.digest(old),
                   npwg.NETWORK_STATUS_ANNOTATION: "[]"}
    assert pods.selection(pod(annotations), tr()) == pods.SelectionDecision()
    assert pods.selection(pod({npwg.NETWORK_STATUS_ANNOTATION: "[]"}), tr()) == pods.SelectionDecision()


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
    patch = pods.pod_ips_patch(p, tr())
    assert patch is not None
    value = patch["metadata"]["annotations"][constants.POD_IPS_ANNOTATION]
    assert json.loads(value) == [{"ip": "10.244.0.9", "podNetwork": "default", "interfaceName": "eth0"},
                                 {"ip": "10.1.0.9", "podNetwork": "dataplane", "interfaceName": "net1"}]
    p["metadata"]["annotations"][constants.POD_IPS_ANNOTATION] = value
    assert pods.pod_ips_patch(p, tr()) is None


def test_pod_ips_need_network_status_and_a_well_formed_one() -> None:
    assert pods.pod_ips_patch(pod(), tr()) is None
    with pytest.raises(ValueError, match="network-status"):
        pods.pod_ips_patch(pod({npwg.NETWORK_STATUS_ANNOTATION: "{"}), tr())


def test_events_are_named_from_pod_and_message_so_each_is_posted_once() -> None:
    a = pods.event(pod(), "SelectionDisagrees", "m1", now="2026-01-01T00:00:00Z")
    b = pods.event(pod(rv="8"), "SelectionDisagrees", "m1", now="2026-01-02T00:00:00Z")
    c = pods.event(pod(), "SelectionDisagrees", "m2", now="2026-01-01T00:00:00Z")
    assert a["metadata"]["name"] == b["metadata"]["name"] != c["metadata"]["name"]
    assert a["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": NS, "uid": "u1",
                                   "resourceVersion": "7"}
    assert (a["type"], a["reason"], a["count"]) == ("Warning", "SelectionDisagrees", 1)
    long = {"metadata": {"name": "x" * 253, "namespace": NS, "uid": "u"}}
    assert len(pods.event(long, "R", "m", now="t")["metadata"]["name"]) == 253


def apply_json_patch(obj: dict, ops: list[dict]) -> dict:
    """Enough of RFC 6902 `add` for annotation paths (with RFC 6901 unescaping)."""
    out = json.loads(json.dumps(obj))
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = out
        for part in parents:
            node = node[part]
        node[last] = op["value"]
    return out


def test_admission_patch_adds_the_selection_to_a_new_pod_with_escaped_annotation_paths() -> None:
    new_pod = {"metadata": {"name": "p", "annotations": {constants.NETWORKS_ANNOTATION: json.dumps(NETS)}}}
    ops = pods.admission_patch(new_pod, WORLD, namespace=NS)
    assert all("~1" in op["path"] for op in ops)
    patched = apply_json_patch(new_pod, ops)
    assert patched["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION] == WANTED
    assert patched["metadata"]["annotations"][pods.WRITTEN_ANNOTATION] == pods.digest(WANTED)


@pytest.mark.parametrize(
    "annotation",
    [
        pytest.param(json.dumps([{"podNetworkName": "storage"}]), id="a network not Ready"),
        pytest.param(json.dumps([{"podNetworkName": "nope"}]), id="a missing network"),
        pytest.param("[oops", id="an unreadable networks annotation"),
        pytest.param(json.dumps([{"podNetworkName": "default"}]), id="the default network only"),
    ],
)
def test_admission_patch_adds_nothing_it_cannot_stand_behind(annotation: str) -> None:
    new_pod = {"metadata": {"name": "p", "namespace": NS, "annotations": {constants.NETWORKS_ANNOTATION: annotation}}}
    assert pods.admission_patch(new_pod, WORLD) == []


def test_admission_patch_keeps_a_hand_written_selection() -> None:
    new_pod = {"metadata": {"name": "p", "annotations": {constants.NETWORKS_ANNOTATION: json.dumps(NETS),
                                                         npwg.NETWORKS_ANNOTATION: "nets/storage"}}}
    assert pods.admission_patch(new_pod, WORLD, namespace=NS) == []
