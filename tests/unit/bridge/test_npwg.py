"""bridge.npwg: the NPWG multi-net spec v1.3 as a library. Each test names its section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import npwg
from bridge.npwg import DelegationError, InvalidSelection, NetworkSelectionElement

NS = "pod-ns"


def one(raw: dict[str, Any]) -> NetworkSelectionElement:
    (element,) = npwg.parse_selection(json.dumps([raw]), NS)
    return element


# --- 4.1.1 comma-delimited format ------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        pytest.param("net-a", [("pod-ns", "net-a", None)], id="4.1.1 name in the pod's namespace"),
        pytest.param("other/net-c", [("other", "net-c", None)], id="4.1.1 namespace/name"),
        pytest.param(
            "net-a,net-b,other-ns/net-c",
            [("pod-ns", "net-a", None), ("pod-ns", "net-b", None), ("other-ns", "net-c", None)],
            id="4.1.1 the spec's example",
        ),
        pytest.param(" net-a , net-b ", [("pod-ns", "net-a", None), ("pod-ns", "net-b", None)],
                     id="4.1.1 blanks around items are ignored"),
        pytest.param("ns/net-a@net1", [("ns", "net-a", "net1")], id="4.1.1 ns/name@ifname extension"),
        pytest.param("net-a@My_If.1", [("pod-ns", "net-a", "My_If.1")],
                     id="4.1.2.1.5 interface after @ follows the Linux rule, not DNS-1123"),
        pytest.param("net-a,net-a", [("pod-ns", "net-a", None), ("pod-ns", "net-a", None)],
                     id="4.2.2 the same network twice is two attachments"),
        pytest.param("", [], id="4.1 empty annotation selects nothing"),
    ],
)
def test_spec_4_1_1_comma_delimited_format_is_parsed(annotation: str, expected: list[tuple]) -> None:
    got = npwg.parse_selection(annotation, NS)
    assert [(e.namespace, e.name, e.interface) for e in got] == expected


@pytest.mark.parametrize(
    ("annotation", "index", "key", "section"),
    [
        pytest.param("net-a,,net-b", 1, None, "4.1.1", id="4.1.1 empty item"),
        pytest.param("Net-A", 0, "name", "4.1.2.1.1", id="3.3 upper case name"),
        pytest.param("net_a", 0, "name", "4.1.2.1.1", id="3.3 underscore in name"),
        pytest.param("-net", 0, "name", "4.1.2.1.1", id="3.3 name starting with a dash"),
        pytest.param("a.b", 0, "name", "4.1.2.1.1", id="3.3 dot is not in a DNS-1123 label"),
        pytest.param("/net-a", 0, "namespace", "4.1.2.1.2", id="4.1.1 empty namespace before slash"),
        pytest.param("a/b/c", 0, "name", "4.1.2.1.1", id="4.1.1 two slashes"),
        pytest.param("ns/net-a@", 0, "interface", "4.1.2.1.5", id="4.1.2.1.5 empty interface after @"),
        pytest.param("ns/net-a@a-very-long-ifname", 0, "interface", "4.1.2.1.5",
                     id="4.1.2.1.5 interface longer than 15 bytes"),
        pytest.param("net-a@a:b", 0, "interface", "4.1.2.1.5", id="4.1.2.1.5 colon in interface"),
        pytest.param("net-a@..", 0, "interface", "4.1.2.1.5", id="4.1.2.1.5 dot-dot interface"),
        pytest.param('[{"name": "net-a", "interface": "\\udfff"}]', 0, "interface", "4.1.2.1.5",
                     id="4.1.2.1.5 a lone surrogate (JSON escape) in interface"),
        pytest.param("net-a, Ns/x", 1, "namespace", "4.1.2.1.2", id="3.3 upper case namespace"),
        pytest.param("net1@if1@if2", 0, "interface", "4.1.1", id="4.1.1 more than one @"),
        pytest.param("ns/net-a@eth0@1", 0, "interface", "4.1.1", id="4.1.1 a second @ after a valid ifname"),
    ],
)
def test_spec_4_1_1_invalid_comma_items_name_the_element_and_key(
    annotation: str, index: int, key: str | None, section: str
) -> None:
    with pytest.raises(InvalidSelection) as exc:
        npwg.parse_selection(annotation, NS)
    assert (exc.value.index, exc.value.key, exc.value.section) == (index, key, section)
    assert f"{npwg.NETWORKS_ANNOTATION}[{index}]" in str(exc.value)
    assert section in str(exc.value)


# --- 4.1.2 JSON list format --------------------------------------------------------------------


def test_spec_4_1_2_1_every_key_of_the_json_format_is_read() -> None:
    raw = {
        "name": "net-b",
        "namespace": "other",
        "ips": ["10.2.2.42/24", "2001:db8::5/64"],
        "mac": "02:23:45:67:89:01",
        "interface": "net1",
        "cni-args": {"spoofchk": "on"},
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "udp"}],
        "bandwidth": {"ingressRate": 1000, "ingressBurst": 2000, "egressRate": 3000},
        "default-route": ["10.2.2.1"],
        "infiniband-guid": "24:8a:07:03:00:8d:ae:2f",
        "org.example.color": "blue",
    }
    element = one(raw)
    assert element.ips == ["10.2.2.42/24", "2001:db8::5/64"]
    assert element.mac == "02:23:45:67:89:01"
    assert element.interface == "net1"
    assert element.cni_args == {"spoofchk": "on"}
    assert element.port_mappings == [{"hostPort": 8080, "containerPort": 80, "protocol": "udp"}]
    assert element.bandwidth == {"ingressRate": 1000, "ingressBurst": 2000, "egressRate": 3000}
    assert element.default_route == ["10.2.2.1"]
    assert element.infiniband_guid == "24:8a:07:03:00:8d:ae:2f"
    assert element.extensions == {"org.example.color": "blue"}
    assert element.to_json() == raw


@pytest.mark.parametrize(
    ("raw", "namespace"),
    [
        pytest.param({"name": "n"}, NS, id="4.1.2.1.2 missing namespace is the pod's"),
        pytest.param({"name": "n", "namespace": ""}, NS, id="4.1.2.1.1 empty namespace is the pod's"),
        pytest.param({"name": "n", "namespace": "x"}, "x", id="4.1.2.1.2 explicit namespace"),
    ],
)
def test_spec_4_1_2_1_2_namespace_defaults_to_the_pods(raw: dict, namespace: str) -> None:
    assert one(raw).namespace == namespace


def test_spec_4_1_2_1_9_default_route_may_be_an_empty_list() -> None:
    assert one({"name": "n", "default-route": []}).default_route == []


def test_spec_4_1_2_1_11_ipam_claim_reference_is_read() -> None:
    assert one({"name": "n", "ipam-claim-reference": "vm-a.tenantred.pod1"}).ipam_claim_reference == (
        "vm-a.tenantred.pod1"
    )


@pytest.mark.parametrize(
    ("mac"),
    [
        pytest.param("02-23-45-67-89-01", id="4.1.2.1.4 hyphen form"),
        pytest.param("0223.4567.8901", id="4.1.2.1.4 dotted form"),
        pytest.param("AA:BB:CC:DD:EE:FF", id="4.1.2.1.4 upper case"),
    ],
)
def test_spec_4_1_2_1_4_mac_accepts_the_usual_6_byte_spellings(mac: str) -> None:
    assert one({"name": "n", "mac": mac}).mac == mac


BAD_ELEMENTS = [
    pytest.param({"namespace": "x"}, "name", "4.1.2.1.1", id="4.1.2.1.1 name is required"),
    pytest.param({"name": 3}, "name", "4.1.2.1.1", id="4.1.2.1.1 name must be a string"),
    pytest.param({"name": "UP"}, "name", "4.1.2.1.1", id="3.3 name must be a DNS-1123 label"),
    pytest.param({"name": "n", "namespace": 7}, "namespace", "4.1.2.1.2", id="4.1.2.1.2 namespace type"),
    pytest.param({"name": "n", "ips": []}, "ips", "4.1.2.1.3", id="4.1.2.1.3 ips needs an element"),
    pytest.param({"name": "n", "ips": "10.0.0.1"}, "ips", "4.1.2.1.3", id="4.1.2.1.3 ips is a list"),
    pytest.param({"name": "n", "ips": ["10.0.0.300"]}, "ips", "4.1.2.1.3", id="4.1.2.1.3 bad IPv4"),
    pytest.param({"name": "n", "ips": ["10.0.0.1/33"]}, "ips", "4.1.2.1.3", id="4.1.2.1.3 bad prefix"),
    pytest.param({"name": "n", "ips": ["10.0.0.1/255.0.0.0"]}, "ips", "4.1.2.1.3",
                 id="4.1.2.1.3 netmask instead of prefix length"),
    pytest.param({"name": "n", "ips": ["fe80::1%eth0"]}, "ips", "4.1.2.1.3", id="4.1.2.1.3 IPv6 zone"),
    pytest.param({"name": "n", "mac": "02:23:45:67:89"}, "mac", "4.1.2.1.4", id="4.1.2.1.4 5-byte MAC"),
    pytest.param({"name": "n", "mac": "02:23:45:67:89:01:02:03"}, "mac", "4.1.2.1.4",
                 id="4.1.2.1.4 8-byte address is not an Ethernet MAC"),
    pytest.param({"name": "n", "interface": "a/b"}, "interface", "4.1.2.1.5", id="4.1.2.1.5 slash"),
    pytest.param({"name": "n", "interface": "a b"}, "interface", "4.1.2.1.5", id="4.1.2.1.5 space"),
    pytest.param({"name": "n", "interface": "x" * 16}, "interface", "4.1.2.1.5", id="4.1.2.1.5 16 bytes"),
    pytest.param({"name": "n", "cni-args": ["a"]}, "cni-args", "4.1.2.1.6", id="4.1.2.1.6 dict"),
    pytest.param({"name": "n", "portMappings": []}, "portMappings", "4.1.2.1.7",
                 id="4.1.2.1.7 at least one mapping"),
    pytest.param({"name": "n", "portMappings": [{"hostPort": 80}]}, "portMappings", "4.1.2.1.7",
                 id="4.1.2.1.7 containerPort required"),
    pytest.param({"name": "n", "portMappings": [{"hostPort": 0, "containerPort": 80}]}, "portMappings",
                 "4.1.2.1.7", id="4.1.2.1.7 port 0"),
    pytest.param({"name": "n", "portMappings": [{"hostPort": 65536, "containerPort": 80}]}, "portMappings",
                 "4.1.2.1.7", id="4.1.2.1.7 port 65536"),
    pytest.param({"name": "n", "portMappings": [{"hostPort": True, "containerPort": 80}]}, "portMappings",
                 "4.1.2.1.7", id="4.1.2.1.7 boolean is not a port"),
    pytest.param({"name": "n", "portMappings": [{"hostPort": 1, "containerPort": 80, "protocol": "icmp"}]},
                 "portMappings", "4.1.2.1.7", id="4.1.2.1.7 protocol TCP UDP SCTP only"),
    pytest.param({"name": "n", "portMappings": [{"hostPort": 1, "containerPort": 2, "x": 1}]},
                 "portMappings", "4.1.2.1.7", id="4.1.2.1.7 unknown mapping key"),
    pytest.param({"name": "n", "bandwidth": {}}, "bandwidth", "4.1.2.1.8", id="4.1.2.1.8 empty"),
    pytest.param({"name": "n", "bandwidth": {"ingressBurst": 10}}, "bandwidth", "4.1.2.1.8",
                 id="4.1.2.1.8 ingress burst without rate"),
    pytest.param({"name": "n", "bandwidth": {"egressBurst": 10, "ingressRate": 5}}, "bandwidth",
                 "4.1.2.1.8", id="4.1.2.1.8 egress burst without rate"),
    pytest.param({"name": "n", "bandwidth": {"ingressRate": 0}}, "bandwidth", "4.1.2.1.8",
                 id="4.1.2.1.8 zero rate"),
    pytest.param({"name": "n", "bandwidth": {"rate": 5}}, "bandwidth", "4.1.2.1.8", id="4.1.2.1.8 key"),
    pytest.param({"name": "n", "default-route": ["10.0.0.1/24"]}, "default-route", "4.1.2.1.9",
                 id="4.1.2.1.9 gateway is an address, not a prefix"),
    pytest.param({"name": "n", "default-route": "10.0.0.1"}, "default-route", "4.1.2.1.9",
                 id="4.1.2.1.9 string-array"),
    pytest.param({"name": "n", "infiniband-guid": "24:8a:07:03:00:8d:ae"}, "infiniband-guid",
                 "4.1.2.1.10", id="4.1.2.1.10 7-byte GUID"),
    pytest.param({"name": "n", "ipam-claim-reference": ""}, "ipam-claim-reference", "4.1.2.1.11",
                 id="4.1.2.1.11 empty claim name"),
    pytest.param({"name": "n", "ips": ["10.0.0.1"], "ipam-claim-reference": "c"}, "ipam-claim-reference",
                 "4.1.2.1.11", id="4.1.2.1.11 ips together with a claim"),
]


@pytest.mark.parametrize(("raw", "key", "section"), BAD_ELEMENTS)
def test_spec_4_1_2_1_invalid_values_make_the_annotation_invalid(raw: dict, key: str, section: str) -> None:
    annotation = json.dumps([{"name": "ok"}, raw])
    with pytest.raises(InvalidSelection) as exc:
        npwg.parse_selection(annotation, NS)
    assert (exc.value.index, exc.value.key, exc.value.section) == (1, key, section)
    assert f"[1].{key}:" in str(exc.value)


def test_spec_4_1_2_1_errors_name_the_element_by_index_key_and_name() -> None:
    with pytest.raises(InvalidSelection) as exc:
        npwg.parse_selection('[{"name": "net-a"}, {"name": "net-b", "mac": "zz"}]', NS)
    assert str(exc.value) == (
        'k8s.v1.cni.cncf.io/networks[1].mac: "zz" is not a 6-byte Ethernet MAC address '
        "(element 'net-b'; NPWG multi-net spec 4.1.2.1.4)"
    )
    assert (exc.value.element, exc.value.detail) == ("net-b", '"zz" is not a 6-byte Ethernet MAC address')


@pytest.mark.parametrize(
    ("annotation", "section"),
    [
        pytest.param("[", "4.1.2", id="4.1.2 bad JSON"),
        pytest.param('{"name": "a"}', "4.1.2", id="4.1.2 an object is not a list"),
        pytest.param('["a"]', "4.1.2.1", id="4.1.2 elements are objects"),
        pytest.param('[{"name": "a", "default-route": []}, {"name": "b", "default-route": ["1.2.3.4"]}]',
                     "4.1.2.1.9", id="4.1.2.1.9 default-route on two elements"),
    ],
)
def test_spec_4_1_2_invalid_json_annotations_are_refused(annotation: str, section: str) -> None:
    with pytest.raises(InvalidSelection) as exc:
        npwg.parse_selection(annotation, NS)
    assert exc.value.section == section


def test_spec_4_1_2_1_keys_with_a_period_are_kept_as_implementation_extensions() -> None:
    element = one({"name": "n", "org.example.x": {"deep": [1, 2]}})
    assert json.loads(npwg.format_selection([element])) == [
        {"name": "n", "namespace": NS, "org.example.x": {"deep": [1, 2]}}
    ]


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"name": "n", "overrides": {}}, id="4.1.2.1 a reserved key the spec does not define"),
        pytest.param({"name": "n", "ipRequest": ["10.0.0.5/24"]}, id="pre-spec ipRequest"),
        pytest.param({"name": "n", "macRequest": "02:00:00:00:00:01"}, id="pre-spec macRequest"),
        pytest.param({"name": "n", "interfaceRequest": "eth1"}, id="pre-spec interfaceRequest"),
    ],
)
def test_spec_4_1_2_1_undefined_keys_without_a_period_are_ignored_with_a_warning(raw: dict[str, Any]) -> None:
    elements = npwg.parse_selection(json.dumps([{"name": "ok"}, raw]), NS)
    (key,) = set(raw) - {"name"}
    assert elements[1] == NetworkSelectionElement(name="n", namespace=NS), "the key selects nothing"
    assert elements[1].ignored == {key: raw[key]}
    assert key not in elements[1].to_json(), "not written back"
    (warning,) = npwg.ignored_key_warnings(elements)
    assert f"{npwg.NETWORKS_ANNOTATION}[1]" in warning and repr(key) in warning and "4.1.2.1" in warning
    assert npwg.ignored_key_warnings(elements[:1]) == []


def test_spec_4_1_2_to_json_omits_unset_keys() -> None:
    assert NetworkSelectionElement(name="a", namespace="b", interface="net1").to_json() == {
        "name": "a", "namespace": "b", "interface": "net1",
    }


# --- round trip ----------------------------------------------------------------------------

labels = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?\Z")
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
ifnames = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Cc"), blacklist_characters="/:"),
    min_size=1, max_size=15,
).filter(
    # the kernel's isspace() also refuses byte 0xA0, found inside UTF-8 characters such as "à"
    lambda s: s not in (".", "..") and len(s.encode()) <= 15 and not any(c.isspace() for c in s)
    and 0xA0 not in s.encode()
)
ports = st.integers(1, 65535)
hexbyte = st.integers(0, 255).map(lambda b: f"{b:02x}")

elements = st.builds(
    NetworkSelectionElement,
    name=labels,
    namespace=labels,
    ips=st.none() | st.lists(
        st.one_of(ipv4, ipv6, st.tuples(ipv4, st.integers(0, 32)).map(lambda t: f"{t[0]}/{t[1]}")),
        min_size=1, max_size=3),
    mac=st.none() | st.lists(hexbyte, min_size=6, max_size=6).map(":".join),
    interface=st.none() | ifnames,
    cni_args=st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5) | st.integers(), max_size=3),
    port_mappings=st.none() | st.lists(
        st.fixed_dictionaries(
            {"hostPort": ports, "containerPort": ports},
            optional={"protocol": st.sampled_from(["TCP", "udp", "Sctp"])},
        ),
        min_size=1, max_size=2),
    bandwidth=st.none() | st.fixed_dictionaries(
        {"ingressRate": st.integers(1, 10**9)}, optional={"ingressBurst": st.integers(1, 10**9)}),
    default_route=st.none(),
    infiniband_guid=st.none() | st.lists(hexbyte, min_size=8, max_size=8).map(":".join),
    ipam_claim_reference=st.none(),
    extensions=st.dictionaries(
        st.from_regex(r"\A[a-z]{1,5}\.[a-z]{1,5}\Z"), st.integers() | st.text(max_size=4), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(elements, max_size=4), st.integers(0, 3))
def test_spec_4_1_2_parse_after_format_gives_back_the_elements(
    items: list[NetworkSelectionElement], routed: int
) -> None:
    if items:
        items[routed % len(items)].default_route = ["192.0.2.1"]
    assert npwg.parse_selection(npwg.format_selection(items), "elsewhere") == items


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60))
def test_spec_4_1_parse_of_arbitrary_text_either_succeeds_or_raises_invalid_selection(text: str) -> None:
    try:
        result = npwg.parse_selection(text, NS)
    except InvalidSelection as exc:
        assert npwg.NETWORKS_ANNOTATION in str(exc)
    else:
        assert all(isinstance(e, NetworkSelectionElement) for e in result)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.none() | labels, labels,
                          # 4.1.1: a second '@' makes the item invalid, so the format cannot carry one
                          st.none() | ifnames.filter(lambda s: "," not in s and "@" not in s)),
                min_size=1, max_size=4))
def test_spec_4_1_1_comma_format_items_parse_to_their_parts(parts: list[tuple]) -> None:
    text = ",".join(
        (f"{ns}/" if ns else "") + name + (f"@{ifn}" if ifn else "") for ns, name, ifn in parts
    )
    if text != text.strip():  # an interface name with trailing blanks cannot be written this way
        return
    got = npwg.parse_selection(text, NS)
    assert [(e.namespace, e.name, e.interface) for e in got] == [
        (ns or NS, name, ifn) for ns, name, ifn in parts
    ]


# --- 3.4 delegation ------------------------------------------------------------------------

BRIDGE = {"cniVersion": "1.0.0", "type": "bridge", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}}


def test_spec_3_4_1_rule_1_the_nads_config_is_used_first(tmp_path: Path) -> None:
    (tmp_path / "a.conflist").write_text(json.dumps({"name": "net-a", "plugins": [{"type": "macvlan"}]}))
    config = npwg.delegate_config(None, "net-a", "ns", json.dumps({**BRIDGE, "name": "net-a"}), tmp_path)
    assert config["type"] == "bridge"


def test_spec_3_4_1_rule_2_an_on_disk_conflist_with_the_nads_name_comes_next(tmp_path: Path) -> None:
    (tmp_path / "10-other.conflist").write_text(json.dumps({"name": "other", "plugins": [{"type": "ptp"}]}))
    (tmp_path / "20-a.conf").write_text(json.dumps({"name": "net-a", "type": "ipvlan"}))
    (tmp_path / "30-a.conflist").write_text(json.dumps({"name": "net-a", "plugins": [{"type": "macvlan"}]}))
    config = npwg.delegate_config(None, "net-a", "ns", None, tmp_path)
    assert config["plugins"] == [{"type": "macvlan"}]


def test_spec_3_4_1_rule_3_an_on_disk_conf_or_json_file_comes_last(tmp_path: Path) -> None:
    (tmp_path / "broken.conflist").write_text("{not json")
    (tmp_path / "20-a.json").write_text(json.dumps({"name": "net-a", "type": "ipvlan"}))
    assert npwg.delegate_config(None, "net-a", "ns", "", tmp_path)["type"] == "ipvlan"


def test_spec_3_4_1_rule_4_otherwise_the_request_fails(tmp_path: Path) -> None:
    (tmp_path / "20-b.conf").write_text(json.dumps({"name": "net-b", "type": "ipvlan"}))
    with pytest.raises(DelegationError, match=r"ns/net-a has no spec.config .* 3\.4\.1"):
        npwg.delegate_config(None, "net-a", "ns", None, tmp_path)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        pytest.param("{", "not valid JSON", id="3.4.1 config is JSON"),
        pytest.param("[]", "JSON object", id="3.4.1 config is an object"),
        pytest.param('{"plugins": []}', "non-empty", id="3.4.1 list has plugins"),
        pytest.param('{"type": "../../bin/sh"}', "bare executable", id="3.4.1 type is a bare name"),
        pytest.param('{"plugins": [{"type": "bridge"}, {"type": "/usr/bin/x"}]}', r"plugins\[1\]",
                     id="3.4.1 every plugin type is a bare name"),
        pytest.param('{"name": "x"}', '"type"', id="3.4.1 type is required"),
    ],
)
def test_spec_3_4_1_invalid_nad_config_fails_the_request(config: str, match: str) -> None:
    with pytest.raises(DelegationError, match=match):
        npwg.delegate_config(None, "net-a", "ns", config, None)


def test_spec_3_4_2_name_is_injected_when_missing() -> None:
    config = npwg.delegate_config(None, "a-bridge-network", "ns",
                                  '{"cniVersion": "0.3.0", "type": "awesome-plugin"}', None)
    assert config == {"cniVersion": "0.3.0", "name": "a-bridge-network", "type": "awesome-plugin"}


def test_spec_3_4_2_an_empty_name_counts_as_missing() -> None:
    config = npwg.delegate_config(None, "nad", "ns", '{"name": "", "type": "bridge"}', None)
    assert config["name"] == "nad"
    plugins = '{"name": "", "cniVersion": "1.0.0", "plugins": [{"type": "bridge"}]}'
    assert npwg.delegate_config(None, "nad", "ns", plugins, None)["name"] == "nad"


def test_spec_3_4_2_an_existing_name_is_kept() -> None:
    config = npwg.delegate_config(None, "nad", "ns", '{"name": "cni-name", "type": "bridge"}', None)
    assert config["name"] == "cni-name"


CAPABLE = {
    "cniVersion": "1.0.0",
    "name": "net-b",
    "plugins": [
        {"type": "macvlan", "capabilities": {"ips": True, "mac": True, "infinibandGUID": True}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
    ],
}


@pytest.mark.parametrize(
    ("raw", "plugin", "runtime"),
    [
        pytest.param({"ips": ["10.2.2.42/24", "2001:db8::5/64"]}, 0,
                     {"ips": ["10.2.2.42/24", "2001:db8::5/64"]}, id="4.1.2.1.3.2 ips"),
        pytest.param({"mac": "02:23:45:67:89:01"}, 0, {"mac": "02:23:45:67:89:01"}, id="4.1.2.1.4.2 mac"),
        pytest.param({"portMappings": [{"hostPort": 8080, "containerPort": 80}]}, 1,
                     {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
                     id="4.1.2.1.7.2 portMappings default to tcp"),
        pytest.param({"portMappings": [{"hostPort": 53, "containerPort": 53, "protocol": "UDP"}]}, 1,
                     {"portMappings": [{"hostPort": 53, "containerPort": 53, "protocol": "udp"}]},
                     id="4.1.2.1.7.2 portMappings protocol is case-insensitive"),
        pytest.param({"bandwidth": {"ingressRate": 1000, "egressRate": 5, "egressBurst": 7}}, 2,
                     {"bandwidth": {"ingressRate": 1000, "ingressBurst": npwg.DEFAULT_BURST_BITS,
                                    "egressRate": 5, "egressBurst": 7}},
                     id="4.1.2.1.8.2 bandwidth gets a default burst"),
        pytest.param({"infiniband-guid": "24:8a:07:03:00:8d:ae:2f"}, 0,
                     {"infinibandGUID": "24:8a:07:03:00:8d:ae:2f"}, id="4.1.2.1.10.2 infinibandGUID"),
    ],
)
def test_spec_4_1_2_1_x_2_selection_keys_reach_runtime_config_of_capable_plugins_only(
    raw: dict, plugin: int, runtime: dict
) -> None:
    element = one({"name": "net-b", **raw})
    config = npwg.delegate_config(element, "net-b", NS, json.dumps(CAPABLE), None)
    for i, p in enumerate(config["plugins"]):
        assert p.get("runtimeConfig") == (runtime if i == plugin else None)
    assert "runtimeConfig" not in CAPABLE["plugins"][plugin]  # the input is not changed


@pytest.mark.parametrize(
    ("raw", "capability"),
    [
        pytest.param({"ips": ["10.0.0.1"]}, "ips", id="4.1.2.1.3.2 no ips capability"),
        pytest.param({"mac": "02:00:00:00:00:01"}, "mac", id="4.1.2.1.4.2 no mac capability"),
        pytest.param({"portMappings": [{"hostPort": 1, "containerPort": 1}]}, "portMappings",
                     id="4.1.2.1.7.2 no portMappings capability"),
        pytest.param({"bandwidth": {"egressRate": 1}}, "bandwidth", id="4.1.2.1.8.2 no bandwidth capability"),
        pytest.param({"infiniband-guid": "00:00:00:00:00:00:00:01"}, "infinibandGUID",
                     id="4.1.2.1.10.2 no infinibandGUID capability"),
    ],
)
def test_spec_4_1_2_1_x_2_a_key_no_plugin_can_honour_fails_the_request(raw: dict, capability: str) -> None:
    config = {"cniVersion": "1.0.0", "plugins": [{"type": "bridge", "capabilities": {"ips": False}}]}
    with pytest.raises(DelegationError, match=f"'{capability}' capability"):
        npwg.delegate_config(one({"name": "n", **raw}), "n", NS, json.dumps(config), None)


def test_spec_4_1_2_1_6_2_cni_args_merge_into_args_with_the_annotation_winning() -> None:
    nad = {"cniVersion": "1.0.0", "type": "sriov", "args": {"cni": {"spoofchk": "off", "trust": "on"},
                                                            "other": 1}}
    element = one({"name": "net-b", "cni-args": {"spoofchk": "on"}})
    config = npwg.delegate_config(element, "net-b", NS, json.dumps(nad), None)
    assert config["args"] == {"cni": {"spoofchk": "on", "trust": "on"}, "other": 1}


def test_spec_7_5_kubernetes_runtime_config_reaches_the_default_network_only() -> None:
    nad = json.dumps({"cniVersion": "1.0.0", "plugins": [
        {"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": True}}]})
    k8s = {"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}],
           "dns": {"servers": ["10.96.0.10"]}}
    secondary = npwg.delegate_config(None, "net", NS, nad, None, k8s_runtime_config=k8s)
    assert all("runtimeConfig" not in p for p in secondary["plugins"])
    default = npwg.delegate_config(None, "net", NS, nad, None, is_default=True, k8s_runtime_config=k8s)
    assert "runtimeConfig" not in default["plugins"][0]
    assert default["plugins"][1]["runtimeConfig"] == {"portMappings": k8s["portMappings"]}


def _element_with_cni_args() -> NetworkSelectionElement:
    (element,) = npwg.parse_selection('[{"name": "net-a", "cni-args": {"spoofchk": "on"}}]', "ns")
    return element


@pytest.mark.parametrize(
    "nad_args",
    ['"args": "not-an-object"', '"args": {"cni": "not-an-object"}', '"args": []'],
)
def test_4_1_2_1_6_2_cni_args_onto_a_nad_whose_args_is_not_an_object_is_a_delegation_error(
    nad_args: str,
) -> None:
    config = f'{{"cniVersion": "1.0.0", "type": "bridge", {nad_args}}}'
    with pytest.raises(npwg.DelegationError, match="args"):
        npwg.delegate_config(_element_with_cni_args(), "net-a", "ns", config, None)


def test_4_1_2_1_6_2_cni_args_still_win_over_the_nads_args_cni() -> None:
    config = '{"cniVersion": "1.0.0", "type": "bridge", "args": {"cni": {"spoofchk": "off", "x": "1"}}}'
    out = npwg.delegate_config(_element_with_cni_args(), "net-a", "ns", config, None)
    assert out["args"] == {"cni": {"spoofchk": "on", "x": "1"}}


# --- 5 status ------------------------------------------------------------------------------

RESULT_1_0 = {
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "cni0", "mac": "aa:aa:aa:aa:aa:aa"},
        {"name": "veth1", "mac": "bb:bb:bb:bb:bb:bb"},
        {"name": "net1", "mac": "02:11:22:33:44:55", "sandbox": "/var/run/netns/p"},
    ],
    "ips": [
        {"address": "10.1.0.1/24", "interface": 0},
        {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 2},
        {"address": "fd00::5/64", "interface": 2},
    ],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "10.9.0.0/16"}],
    "dns": {"nameservers": ["10.1.0.53"], "domain": "example.com", "search": ["a.example.com"],
            "options": ["ndots:5"]},
}


@pytest.mark.parametrize("version", ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_spec_5_3_status_comes_from_the_first_sandbox_interface(version: str) -> None:
    entry = npwg.status_entry("ns/net-b", {**RESULT_1_0, "cniVersion": version}, default=False)
    assert entry == {
        "name": "ns/net-b",
        "interface": "net1",
        "ips": ["10.1.0.5/24", "fd00::5/64"],
        "mac": "02:11:22:33:44:55",
        "default": False,
        "dns": {"nameservers": ["10.1.0.53"], "domain": "example.com", "search": ["a.example.com"]},
    }


def test_spec_5_3_3_1_without_a_sandbox_interface_ips_without_an_interface_index_are_used() -> None:
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "host0"}],
              "ips": [{"address": "10.0.0.9/24", "interface": 0}, {"address": "10.0.0.7/24"},
                      {"address": "10.0.0.8/24", "interface": -1}]}
    entry = npwg.status_entry("ns/n", result, default=False, interface="net2")
    assert entry == {"name": "ns/n", "ips": ["10.0.0.7/24", "10.0.0.8/24"], "default": False}


def test_spec_5_3_2_1_without_a_sandbox_interface_the_entry_has_no_interface_or_mac() -> None:
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "host0", "mac": "02:00:00:00:00:0a"}],
              "ips": [{"address": "10.0.0.7/24"}]}
    entry = npwg.status_entry("ns/n", result, default=False, interface="net2")
    assert "interface" not in entry and "mac" not in entry
    assert entry["ips"] == ["10.0.0.7/24"]


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("1.2.3", id="newer than any known"),
        pytest.param("2.0.0", id="a new major"),
        pytest.param("1.0", id="not MAJOR.MINOR.PATCH"),
        pytest.param("1.0.x", id="not digits"),
    ],
)
def test_spec_5_3_a_result_of_an_unknown_cni_version_is_an_error_not_a_guess(version: str) -> None:
    with pytest.raises(npwg.UnsupportedResultVersion, match=f"ns/n: CNI result cniVersion '{version}'"):
        npwg.status_entry("ns/n", {**RESULT_1_0, "cniVersion": version}, default=False)


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_spec_5_3_3_1_pre_0_3_results_give_ips_from_ip4_and_ip6(version: str) -> None:
    result = {"cniVersion": version, "ip4": {"ip": "10.0.0.5/24", "gateway": "10.0.0.1",
                                            "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}]},
              "ip6": {"ip": "fd00::5/64"}, "dns": {"nameservers": ["1.1.1.1"]}}
    entry = npwg.status_entry("ns/n", result, default=True, interface="eth0", default_route=[])
    assert entry == {"name": "ns/n", "interface": "eth0", "ips": ["10.0.0.5/24", "fd00::5/64"],
                     "default": True, "dns": {"nameservers": ["1.1.1.1"]}, "default-route": ["10.0.0.1"]}


@pytest.mark.parametrize(
    ("result", "ips"),
    [
        pytest.param({k: v for k, v in RESULT_1_0.items() if k != "cniVersion"}, ["10.1.0.5/24", "fd00::5/64"],
                     id="5.3.3.1 a current result without cniVersion is read by its shape"),
        pytest.param({"cniVersion": "1.0.0", "ip4": {"ip": "10.0.0.5/24"}}, ["10.0.0.5/24"],
                     id="5.3.3.1 an ip4 block under a newer version is read as pre-0.3"),
    ],
)
def test_spec_5_3_3_1_the_result_shape_decides_how_it_is_read(result: dict, ips: list[str]) -> None:
    assert npwg.status_entry("ns/n", result, default=False)["ips"] == ips


def test_spec_5_1_1_an_add_without_result_gives_a_minimal_map() -> None:
    assert npwg.status_entry("ns/n", None, default=False) == {"name": "ns/n", "default": False}
    assert npwg.status_entry("ns/n", None, default=False, interface="net1") == {
        "name": "ns/n", "interface": "net1", "default": False}


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        pytest.param(None, None, id="5.3.6.4 not asked: no default-route key"),
        pytest.param([], ["10.1.0.1"], id="5.3.6.4 asked without gateway: the result's default gateway"),
        pytest.param(["10.1.0.254"], ["10.1.0.254"], id="5.3.6.4 asked with gateways: those"),
    ],
)
def test_spec_5_3_6_4_default_route_only_when_the_selection_asked(asked: list | None, expected: Any) -> None:
    entry = npwg.status_entry("ns/n", RESULT_1_0, default=False, default_route=asked)
    assert entry.get("default-route") == expected


def test_spec_5_3_7_device_info_is_carried_when_given() -> None:
    info = {"type": "pci", "version": "1.0.0", "pci": {"pci-address": "0000:18:02.5"}}
    assert npwg.status_entry("ns/n", None, default=False, device_info=info)["device-info"] == info


def test_spec_5_3_4_mac_is_only_reported_with_an_interface() -> None:
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "", "mac": "02:00:00:00:00:01", "sandbox": "/x"}],
              "ips": [{"address": "10.0.0.2/24", "interface": 0}]}
    entry = npwg.status_entry("ns/n", result, default=False)
    assert "mac" not in entry and entry["ips"] == ["10.0.0.2/24"]


def test_spec_5_parse_status_refuses_what_is_not_a_list_of_named_maps() -> None:
    assert npwg.parse_status('[{"name": "a", "x.y": 1}]') == [{"name": "a", "x.y": 1}]
    for bad in ("{", "{}", "[1]", '[{"name": 3}]'):
        with pytest.raises(ValueError, match=npwg.NETWORK_STATUS_ANNOTATION):
            npwg.parse_status(bad)
