"""The attachment data for the workload (KEP-3698 Phase II requirement 17): NPWG network-status ->
`multinetwork.x-k8s.io/attachments` in KEP-4817's `networkData` shape (`bridge.translate.podips`),
the one merge patch that writes it beside pod IPs (`bridge.operator.pods.reverse_status_patch`),
and the example pod that reads it from a downward-API volume (docs/examples/pod-attachment-data.yaml)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge import npwg, translate
from bridge.operator import pods
from bridge.translate import podips
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.kep.api import Network
from tests.unit.bridge_support import NS, attachment, nad, podnetwork

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "docs" / "examples" / "pod-attachment-data.yaml"
ANN = constants.ATTACHMENTS_ANNOTATION

WORLD = translate.Objects.from_objects(
    [podnetwork("dataplane"), nad("dataplane"), podnetwork("storage"), nad("storage"), attachment("fast", "storage")])

DEFAULT_ENTRY = {"name": "cluster", "interface": "eth0", "ips": ["10.244.1.5/24", "fd00:10::5/64"],
                 "mac": "0a:58:0a:f4:01:05", "default": True}
DATAPLANE_ENTRY = {"name": "nets/dataplane", "interface": "net1", "ips": ["10.1.0.7/24", "10.1.0.8/24"],
                   "mac": "02:11:22:33:44:55"}
NETS = [{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}]


def tr(*nets: dict[str, Any]) -> translate.Translation:
    return translate.translate([Network.model_validate(n) for n in nets], NS, WORLD)


def test_each_attachment_carries_its_podnetwork_interface_ips_as_cidrs_and_mac_in_the_pods_order() -> None:
    data = podips.attachments([DATAPLANE_ENTRY, DEFAULT_ENTRY], tr(*NETS), NS)
    assert data == [
        {"podNetwork": "default", "interfaceName": "eth0", "ips": ["10.244.1.5/24", "fd00:10::5/64"],
         "hardwareAddress": "0a:58:0a:f4:01:05"},
        # Every IP the status lists, two of one family included (pod IPs keep one per family).
        {"podNetwork": "dataplane", "interfaceName": "net1", "ips": ["10.1.0.7/24", "10.1.0.8/24"],
         "hardwareAddress": "02:11:22:33:44:55"},
    ]


def test_an_attachment_named_through_a_podnetworkattachment_says_so() -> None:
    status = [DEFAULT_ENTRY, {"name": "nets/storage", "interface": "net2", "ips": ["10.2.0.9/16"]}]
    data = podips.attachments(status, tr({"podNetworkName": "default"}, {"podNetworkAttachmentName": "fast"}), NS)
    assert data[1] == {"podNetwork": "storage", "podNetworkAttachment": "fast", "interfaceName": "net2",
                       "ips": ["10.2.0.9/16"]}


def test_bare_ips_become_full_length_cidrs_and_what_is_not_an_ip_is_left_out() -> None:
    """Multus reports bare addresses: the status does not say the subnet, so /32 and /128."""
    status = [{"name": "cluster", "ips": ["10.244.1.5", "fd00::5", "bogus", 7, "10.244.1.5"], "default": True}]
    (data,) = podips.attachments(status, tr({"podNetworkName": "default"}), NS)
    assert data == {"podNetwork": "default", "ips": ["10.244.1.5/32", "fd00::5/128"]}


def test_the_kep_interface_name_stands_in_when_the_status_names_none_and_empty_fields_are_left_out() -> None:
    status = [DEFAULT_ENTRY, {"name": "nets/dataplane", "ips": [], "mac": ""}]
    data = podips.attachments(status, tr(*NETS), NS)
    assert data[1] == {"podNetwork": "dataplane", "interfaceName": "net1"}


def test_entries_of_other_networks_are_not_attachments_of_the_pod() -> None:
    status = [DEFAULT_ENTRY, {"name": "nets/unknown", "interface": "net9", "ips": ["10.9.9.9/24"]}]
    assert [d["podNetwork"] for d in podips.attachments(status, tr(*NETS), NS)] == ["default"]


def pod(annotations: dict[str, str]) -> Pod:
    return Pod.model_validate({"metadata": {"name": "p", "namespace": NS, "resourceVersion": "4",
                                            "annotations": {constants.NETWORKS_ANNOTATION: json.dumps(NETS),
                                                            **annotations}}})


STATUS = {npwg.NETWORK_STATUS_ANNOTATION: json.dumps([DEFAULT_ENTRY, DATAPLANE_ENTRY])}


def test_pod_ips_and_attachment_data_are_one_write_and_a_steady_pod_gets_none() -> None:
    patch = pods.reverse_status_patch(pod(STATUS), tr(*NETS))
    assert patch is not None
    written = patch["metadata"]["annotations"]
    assert set(written) == {constants.POD_IPS_ANNOTATION, ANN}
    assert json.loads(written[ANN]) == podips.attachments([DEFAULT_ENTRY, DATAPLANE_ENTRY], tr(*NETS), NS)
    assert pods.reverse_status_patch(pod({**STATUS, **written}), tr(*NETS)) is None


def test_only_what_changed_is_written() -> None:
    first = pods.reverse_status_patch(pod(STATUS), tr(*NETS))
    assert first is not None
    # A second MAC on the same IPs: the pod IPs stay, the attachment data changes.
    moved = [DEFAULT_ENTRY, {**DATAPLANE_ENTRY, "mac": "02:11:22:33:44:66"}]
    after = pod({**first["metadata"]["annotations"], npwg.NETWORK_STATUS_ANNOTATION: json.dumps(moved)})
    patch = pods.reverse_status_patch(after, tr(*NETS))
    assert patch is not None and list(patch["metadata"]["annotations"]) == [ANN]


def test_without_attachment_data_only_pod_ips_are_written() -> None:
    patch = pods.reverse_status_patch(pod(STATUS), tr(*NETS), attachment_data=False)
    assert patch is not None and list(patch["metadata"]["annotations"]) == [constants.POD_IPS_ANNOTATION]


# --- the example pod ------------------------------------------------------------------------------

def example() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    return doc  # type: ignore[no-any-return]


def test_the_example_pod_exposes_the_annotation_in_a_downward_api_volume_it_mounts_whole() -> None:
    pod_ = example()
    (volume,) = pod_["spec"]["volumes"]
    (item,) = volume["downwardAPI"]["items"]
    assert item["fieldRef"]["fieldPath"] == f"metadata.annotations['{ANN}']"
    (container,) = pod_["spec"]["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert "subPath" not in mount  # a subPath file is never updated by the kubelet
    assert f"{mount['mountPath']}/{item['path']}" in " ".join(container["args"])
    assert not [e for e in container.get("env", []) if "fieldRef" in (e.get("valueFrom") or {})]
    # Its networks name a bridge PodNetwork, so the bridge has something to write.
    assert [n["podNetworkName"] for n in json.loads(pod_["metadata"]["annotations"][constants.NETWORKS_ANNOTATION])] \
        == ["default", "dataplane"]


def test_the_example_pod_passes_podnetwork_validate() -> None:
    done = subprocess.run([sys.executable, "-m", "podnetwork", "validate", "-f", str(EXAMPLE)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def downward_file(pod_: dict[str, Any], field_path: str) -> str:
    """What the kubelet writes for a `metadata.annotations['KEY']` fieldRef: the value, or "" when absent."""
    found = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", field_path)
    assert found, field_path
    return str((pod_["metadata"].get("annotations") or {}).get(found.group(1), ""))


@pytest.mark.parametrize("with_data", [False, True], ids=["before the bridge wrote it", "after"])
def test_the_example_reads_the_data_the_bridge_writes(with_data: bool) -> None:
    pod_ = example()
    pod_["metadata"]["annotations"][npwg.NETWORK_STATUS_ANNOTATION] = json.dumps([DEFAULT_ENTRY, DATAPLANE_ENTRY])
    nets = json.loads(pod_["metadata"]["annotations"][constants.NETWORKS_ANNOTATION])
    world = translate.Objects.from_objects([podnetwork("dataplane"), nad("dataplane")])
    translation = translate.translate([Network.model_validate(n) for n in nets], "default", world)
    if with_data:
        patch = pods.reverse_status_patch(Pod.model_validate(pod_), translation)
        assert patch is not None
        pod_["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    (item,) = pod_["spec"]["volumes"][0]["downwardAPI"]["items"]
    content = downward_file(pod_, item["fieldRef"]["fieldPath"])
    if not with_data:
        assert content == ""  # the example's loop waits for a non-empty file
        return
    assert [(d["podNetwork"], d.get("interfaceName"), d["ips"]) for d in json.loads(content)] == [
        ("default", "eth0", ["10.244.1.5/24", "fd00:10::5/64"]), ("dataplane", "net1", ["10.1.0.7/24", "10.1.0.8/24"])]
