"""KEP "Static validations" of a pod's networks."""

from __future__ import annotations

import json

import pytest

from podnetwork.ground import constants
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import networks, validation


def pod(nets: object, *, host_network: bool = False, os_name: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "x"}]}
    if host_network:
        spec["hostNetwork"] = True
    if os_name:
        spec["os"] = {"name": os_name}
    text = nets if isinstance(nets, str) else json.dumps(nets)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "annotations": {constants.NETWORKS_ANNOTATION: text}},
        "spec": spec,
    }


def messages(p: dict) -> list[str]:
    return [str(e) for e in validation.validate_pod(p)]


def test_valid_pod_has_no_errors():
    p = pod([
        {"podNetworkName": "default"},
        {"podNetworkName": "dataplane", "interfaceName": "net1", "isDefaultGW4": True},
        {"podNetworkAttachmentName": "fast", "interfaceName": "net2", "isDefaultGW6": True},
    ])
    assert messages(p) == []


def test_pod_without_annotation_is_valid():
    assert validation.validate_pod({"metadata": {"name": "p"}, "spec": {}}) == []


def test_duplicate_interface_name_is_reported_on_the_second_entry():
    p = pod([{"podNetworkName": "a", "interfaceName": "net1"}, {"podNetworkName": "b", "interfaceName": "net1"}])
    assert messages(p) == ['spec.networks[1].interfaceName: Duplicate value: "net1"']


def test_same_podnetwork_twice_is_a_duplicate():
    p = pod([{"podNetworkName": "a"}, {"podNetworkName": "a"}])
    assert messages(p) == ['spec.networks[1].podNetworkName: Duplicate value: "a"']


def test_same_attachment_twice_is_a_duplicate():
    p = pod([{"podNetworkAttachmentName": "x"}, {"podNetworkAttachmentName": "x"}])
    assert messages(p) == ['spec.networks[1].podNetworkAttachmentName: Duplicate value: "x"']


@pytest.mark.parametrize("flag", ["isDefaultGW4", "isDefaultGW6"])
def test_only_one_network_may_hold_a_default_gateway_per_family(flag: str):
    p = pod([{"podNetworkName": "a", flag: True}, {"podNetworkName": "b", flag: True}])
    [msg] = messages(p)
    assert msg.startswith(f"spec.networks[1].{flag}: Invalid value: true: only one network")
    assert f"spec.networks[0].{flag} is already true" in msg


def test_gateways_of_different_families_may_be_on_different_networks():
    p = pod([{"podNetworkName": "a", "isDefaultGW4": True}, {"podNetworkName": "b", "isDefaultGW6": True}])
    assert messages(p) == []


def test_host_network_pod_may_not_name_networks():
    assert messages(pod([{"podNetworkName": "a"}], host_network=True)) == [
        "spec.networks: Forbidden: may not be set when `spec.hostNetwork` is true"
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a" * 16, "spec.networks[0].interfaceName: Too long: may not be more than 15 bytes"),
        ("net/1", "spec.networks[0].interfaceName: Invalid value: \"net/1\": a Linux interface name may not contain '/'"),
        ("net 1", "spec.networks[0].interfaceName: Invalid value: \"net 1\": a Linux interface name may not contain ' '"),
        ("net:1", "spec.networks[0].interfaceName: Invalid value: \"net:1\": a Linux interface name may not contain ':'"),
        (".", "spec.networks[0].interfaceName: Invalid value: \".\": must not be '.' or '..'"),
        ("..", "spec.networks[0].interfaceName: Invalid value: \"..\": must not be '.' or '..'"),
        ("", "spec.networks[0].interfaceName: Invalid value: \"\": must not be empty"),
        ("éééééééé", "spec.networks[0].interfaceName: Too long: may not be more than 15 bytes"),
        # A JSON "\udfff" escape: no UTF-8 form, so no plugin could be given the name.
        ("net\udfff", "spec.networks[0].interfaceName: Invalid value: \"net\\udfff\": must be valid Unicode "
         "text, but holds the lone surrogate U+DFFF, which has no UTF-8 form"),
    ],
)
def test_an_interface_name_linux_refuses_is_invalid_with_the_reason(name: str, expected: str):
    assert messages(pod([{"podNetworkName": "a", "interfaceName": name}])) == [expected]


def test_fifteen_byte_interface_name_is_accepted():
    assert messages(pod([{"podNetworkName": "a", "interfaceName": "a" * 15}])) == []


def test_windows_pods_follow_windows_interface_rules():
    long_ok = "Ethernet adapter vEthernet (dataplane)"
    assert messages(pod([{"podNetworkName": "a", "interfaceName": long_ok}], os_name="windows")) == []
    assert messages(pod([{"podNetworkName": "a", "interfaceName": "x\ty"}], os_name="windows")) == [
        'spec.networks[0].interfaceName: Invalid value: "x\\ty": a Windows interface name may not contain control characters'
    ]
    assert messages(pod([{"podNetworkName": "a", "interfaceName": "x" * 256}], os_name="windows")) == [
        "spec.networks[0].interfaceName: Too long: may not be more than 255 characters"
    ]
    assert messages(pod([{"podNetworkName": "a", "interfaceName": "\ud800x"}], os_name="windows")) == [
        'spec.networks[0].interfaceName: Invalid value: "\\ud800x": must be valid Unicode text, but holds the '
        "lone surrogate U+D800, which has no UTF-8 form"
    ]


def test_exactly_one_reference_per_entry():
    assert messages(pod([{"interfaceName": "net1"}])) == [
        "spec.networks[0]: Required value: exactly one of podNetworkName or podNetworkAttachmentName"
    ]
    assert messages(pod([{"podNetworkName": "a", "podNetworkAttachmentName": "b"}])) == [
        "spec.networks[0]: Forbidden: may not set both podNetworkName and podNetworkAttachmentName"
    ]


def test_names_must_be_dns1123():
    [msg] = messages(pod([{"podNetworkName": "Data_Plane"}]))
    assert msg.startswith('spec.networks[0].podNetworkName: Invalid value: "Data_Plane": a lowercase RFC 1123')


def test_empty_list_is_rejected_with_a_hint():
    [msg] = messages(pod([]))
    assert msg.startswith("spec.networks: Required value:")
    assert "remove the annotation" in msg


def test_malformed_json_says_where_it_failed():
    [msg] = messages(pod('[{"podNetworkName": "a"'))
    assert msg.startswith(f"metadata.annotations[{constants.NETWORKS_ANNOTATION}]: Invalid value:")
    assert "not valid JSON" in msg and "line 1 column" in msg


def test_kep_yaml_spelling_gets_a_hint():
    [msg] = messages(pod([{"podNetwork": "a"}]))
    assert msg.startswith('spec.networks[0].podNetwork: Unsupported value: "podNetwork": unknown field')
    assert "did you mean 'podNetworkName'?" in msg


def test_wrong_types_are_field_errors():
    [msg] = messages(pod([{"podNetworkName": "a", "isDefaultGW4": "yes"}]))
    assert msg.startswith('spec.networks[0].isDefaultGW4: Invalid value: "yes"')
    [msg] = messages(pod({"podNetworkName": "a"}))
    assert "must be a JSON list" in msg


def test_parse_raises_invalid_object_and_format_round_trips():
    nets = networks.parse('[{"podNetworkName":"a","interfaceName":"net1","isDefaultGW4":true}]')
    assert networks.parse(networks.format(nets)) == nets
    with pytest.raises(InvalidObject):
        networks.parse("nope")


def test_effective_networks_auto_populate_default():
    assert networks.effective({"metadata": {}, "spec": {}})[0].pod_network_name == "default"
    assert networks.effective({"metadata": {}, "spec": {"hostNetwork": True}}) == []
    ns_default = networks.parse('[{"podNetworkName":"blue"}]')
    assert networks.effective({"metadata": {}, "spec": {}}, ns_default) == ns_default


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("netà", False),  # "à" is C3 A0 in UTF-8; the kernel's isspace() counts 0xA0
        ("net\u2003x", True),  # a Unicode space is no space to the kernel's byte test
        ("net\tx", False),
        ("net\u00e9", True),  # "é" is C3 A9: fine
    ],
)
def test_linux_interface_names_follow_the_kernels_byte_rule(name: str, valid: bool):
    errors = messages(pod([{"podNetworkName": "a", "interfaceName": name}]))
    assert (errors == []) is valid, errors
