"""bridge.translate.podips: NPWG network-status -> KEP pod IPs per PodNetwork."""

from __future__ import annotations

import json

import pytest

from bridge import translate
from bridge.translate import podips
from podnetwork.kep.api import Network
from tests.unit.bridge_support import NS, attachment, nad, podnetwork

WORLD = translate.Objects.from_objects(
    [podnetwork("dataplane"), nad("dataplane"), podnetwork("storage"), nad("storage"),
     podnetwork("twin", nads=[("nets", "dataplane")]), attachment("pna1", "storage")])


def tr(*nets: dict) -> translate.Translation:
    return translate.translate([Network.model_validate(n) for n in nets], NS, WORLD)


DEFAULT_ENTRY = {"name": "cluster-wide-default", "interface": "eth0", "ips": ["10.244.1.5/24", "fd00:10::5/64"],
                 "default": True}


def test_kep_status_each_pod_ip_carries_its_podnetwork_and_interface() -> None:
    translation = tr({"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"})
    status = [DEFAULT_ENTRY,
              {"name": "nets/dataplane", "interface": "net1", "ips": ["10.1.0.7/24"], "default": False}]
    assert podips.pod_ips(status, translation, NS) == [
        {"ip": "10.244.1.5", "podNetwork": "default", "interfaceName": "eth0"},
        {"ip": "fd00:10::5", "podNetwork": "default", "interfaceName": "eth0"},
        {"ip": "10.1.0.7", "podNetwork": "dataplane", "interfaceName": "net1"},
    ]


def test_kep_status_at_most_one_ip_per_family_per_podnetwork() -> None:
    status = [{**DEFAULT_ENTRY, "ips": ["10.244.1.5", "10.244.1.6", "fd00::1", "fd00::2", "bogus"]}]
    assert podips.pod_ips(status, tr({"podNetworkName": "default"}), NS) == [
        {"ip": "10.244.1.5", "podNetwork": "default", "interfaceName": "eth0"},
        {"ip": "fd00::1", "podNetwork": "default", "interfaceName": "eth0"},
    ]


@pytest.mark.parametrize(
    "name",
    [pytest.param("nets/dataplane", id="NPWG 5.3.1 namespace/name"),
     pytest.param("dataplane", id="NPWG 5.3.1 bare name in the pod's namespace")],
)
def test_npwg_5_3_1_status_names_match_the_selected_nad(name: str) -> None:
    pod_ns = "nets" if "/" not in name else NS
    translation = translate.translate([Network(podNetworkName="dataplane")], pod_ns, WORLD)
    status = [{"name": name, "interface": "net1", "ips": ["10.1.0.9/24"], "default": False}]
    assert podips.pod_ips(status, translation, pod_ns) == [
        {"ip": "10.1.0.9", "podNetwork": "dataplane", "interfaceName": "net1"}]


def test_npwg_5_3_1_a_bare_name_in_another_namespace_does_not_match() -> None:
    status = [{"name": "dataplane", "interface": "net1", "ips": ["10.1.0.9/24"], "default": False}]
    assert podips.pod_ips(status, tr({"podNetworkName": "dataplane"}), NS) == []


def test_npwg_4_2_the_same_nad_twice_is_told_apart_by_interface_then_order() -> None:
    translation = tr({"podNetworkName": "dataplane"}, {"podNetworkName": "twin", "interfaceName": "tw0"})
    status = [
        {"name": "nets/dataplane", "interface": "tw0", "ips": ["10.1.0.2/24"], "default": False},
        {"name": "nets/dataplane", "interface": "net1", "ips": ["10.1.0.1/24"], "default": False},
    ]
    assert podips.pod_ips(status, translation, NS) == [
        {"ip": "10.1.0.1", "podNetwork": "dataplane", "interfaceName": "net1"},
        {"ip": "10.1.0.2", "podNetwork": "twin", "interfaceName": "tw0"},
    ]


def test_kep_status_attachment_ips_are_reported_under_its_podnetwork_in_the_pods_order() -> None:
    translation = tr({"podNetworkAttachmentName": "pna1", "interfaceName": "st0"}, {"podNetworkName": "default"})
    status = [DEFAULT_ENTRY, {"name": "nets/storage", "ips": ["10.3.0.4/24"], "default": False}]
    assert podips.pod_ips(status, translation, NS) == [
        {"ip": "10.3.0.4", "podNetwork": "storage", "interfaceName": "st0"},
        {"ip": "10.244.1.5", "podNetwork": "default", "interfaceName": "eth0"},
        {"ip": "fd00:10::5", "podNetwork": "default", "interfaceName": "eth0"},
    ]


def test_npwg_5_entries_matching_no_selected_network_are_left_out() -> None:
    status = [{"name": "elsewhere/hand-made", "interface": "x1", "ips": ["192.0.2.1"], "default": False}]
    assert podips.pod_ips(status, tr({"podNetworkName": "default"}), NS) == []


def test_npwg_5_1_1_a_minimal_entry_without_ips_gives_no_pod_ip() -> None:
    status = [{"name": "nets/dataplane", "default": False}]
    assert podips.pod_ips(status, tr({"podNetworkName": "dataplane"}), NS) == []


def test_npwg_5_2_the_default_entry_is_reported_even_when_the_pod_omits_the_default_podnetwork() -> None:
    got = podips.pod_ips([DEFAULT_ENTRY], tr({"podNetworkName": "dataplane"}), NS)
    assert [ip["podNetwork"] for ip in got] == ["default", "default"]


def test_kep_status_annotation_is_compact_json() -> None:
    ips = [{"ip": "10.0.0.1", "podNetwork": "default", "interfaceName": "eth0"}]
    assert json.loads(podips.format_pod_ips(ips)) == ips
    assert " " not in podips.format_pod_ips(ips)


def test_kep_explicit_list_the_default_entry_of_a_pod_without_default_is_its_first_network() -> None:
    # This project's agent attaches only the listed networks, the first on eth0, marked
    # "default": true as the network holding the pod's primary interface.
    translation = tr({"podNetworkName": "dataplane"}, {"podNetworkName": "storage"})
    status = [{"name": "nets/dataplane", "interface": "eth0", "ips": ["10.1.0.7/24"], "default": True},
              {"name": "nets/storage", "interface": "net1", "ips": ["10.3.0.4/24"], "default": False}]
    assert podips.pod_ips(status, translation, NS) == [
        {"ip": "10.1.0.7", "podNetwork": "dataplane", "interfaceName": "eth0"},
        {"ip": "10.3.0.4", "podNetwork": "storage", "interfaceName": "net1"},
    ]
    assert [d["podNetwork"] for d in podips.attachments(status, translation, NS)] == ["dataplane", "storage"]


def test_kep_explicit_list_an_interface_name_on_the_first_network_does_not_hide_its_entry() -> None:
    translation = tr({"podNetworkName": "dataplane", "interfaceName": "dp0"})
    status = [{"name": "nets/dataplane", "interface": "eth0", "ips": ["10.1.0.7/24"], "default": True}]
    assert podips.pod_ips(status, translation, NS) == [
        {"ip": "10.1.0.7", "podNetwork": "dataplane", "interfaceName": "eth0"}]


@pytest.mark.parametrize("default_name", ["cluster-wide-default", "nets/dataplane"])
def test_kep_explicit_list_attached_by_multus_keeps_the_cluster_default_network_apart(default_name: str) -> None:
    # Multus cannot leave the default network out (NPWG 6.2): it reports it beside the listed
    # ones, even when the default network is the same NAD as the first listed network.
    translation = tr({"podNetworkName": "dataplane"})
    status = [{**DEFAULT_ENTRY, "name": default_name},
              {"name": "nets/dataplane", "interface": "net1", "ips": ["10.1.0.7/24"], "default": False}]
    assert podips.pod_ips(status, translation, NS) == [
        {"ip": "10.244.1.5", "podNetwork": "default", "interfaceName": "eth0"},
        {"ip": "fd00:10::5", "podNetwork": "default", "interfaceName": "eth0"},
        {"ip": "10.1.0.7", "podNetwork": "dataplane", "interfaceName": "net1"},
    ]
