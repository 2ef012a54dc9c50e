"""bridge.translate: a pod's KEP networks -> the NPWG selection annotation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import npwg, translate
from bridge.translate import Objects, Reason, TranslationError
from podnetwork.kep.api import Network
from tests.unit.bridge_support import (
    NAD_REF_KIND,
    NS,
    attachment,
    nad,
    nad_ref,
    options,
    options_ref,
    podnetwork,
)

DEFAULT = podnetwork("default", nads=[], provider="example.com/cluster-cni")
WORLD = [DEFAULT, podnetwork("dataplane"), nad("dataplane"), podnetwork("storage"), nad("storage"),
         podnetwork("other", provider="example.com/vendor")]


def run(nets: list[dict], *objs: dict, base: list[dict] = WORLD) -> translate.Translation:
    return translate.translate([Network.model_validate(n) for n in nets], NS,
                               Objects.from_objects([*base, *objs]))


def test_kep_default_podnetwork_is_the_cluster_default_and_not_in_the_selection() -> None:
    result = run([{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}])
    assert result.includes_default
    assert result.default_source == translate.Source("default", None, None, 0)
    assert [e.to_json() for e in result.elements] == [
        {"name": "dataplane", "namespace": "nets", "interface": "net1"}]
    assert result.sources == [translate.Source("dataplane", "net1", None, 1)]
    assert result.warnings == []
    assert json.loads(result.annotation) == [{"name": "dataplane", "namespace": "nets", "interface": "net1"}]


def test_kep_networks_keep_their_order_in_the_selection() -> None:
    result = run([{"podNetworkName": "storage"}, {"podNetworkName": "default"}, {"podNetworkName": "dataplane"}])
    assert [e.name for e in result.elements] == ["storage", "dataplane"]
    assert [s.index for s in result.sources] == [0, 2]


def test_npwg_6_a_pod_without_the_default_podnetwork_is_translated_with_a_warning() -> None:
    result = run([{"podNetworkName": "dataplane"}])
    assert not result.includes_default and result.default_source is None
    assert len(result.elements) == 1
    assert any("cannot leave it out" in w and "NPWG 6.2" in w and "only the listed networks" in w
               for w in result.warnings)


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        pytest.param({"interfaceName": "eth9"}, "interfaceName 'eth9' is not applied", id="NPWG 6 interfaceName"),
        pytest.param({"isDefaultGW4": True}, "isDefaultGW4/isDefaultGW6 on the default PodNetwork",
                     id="NPWG 6 isDefaultGW4"),
        pytest.param({"isDefaultGW6": True}, "isDefaultGW4/isDefaultGW6 on the default PodNetwork",
                     id="NPWG 6 isDefaultGW6"),
    ],
)
def test_npwg_6_options_of_the_default_podnetwork_npwg_cannot_express_are_warnings(entry: dict, needle: str) -> None:
    result = run([{"podNetworkName": "default", **entry}])
    assert result.elements == []
    assert [w for w in result.warnings if needle in w]


@pytest.mark.parametrize(
    ("pn", "reason", "needle"),
    [
        pytest.param("missing", Reason.PODNETWORK_NOT_FOUND, "PodNetwork missing does not exist", id="missing"),
        pytest.param("other", Reason.NOT_BRIDGE_PROVIDER, "provider 'example.com/vendor'", id="other provider"),
    ],
)
def test_kep_podnetworks_must_exist_and_be_bridge_provided(pn: str, reason: Reason, needle: str) -> None:
    with pytest.raises(TranslationError) as exc:
        run([{"podNetworkName": "default"}, {"podNetworkName": pn}])
    assert exc.value.reason == reason
    assert needle in str(exc.value) and "spec.networks[1]" in str(exc.value)


@pytest.mark.parametrize(
    ("pn", "objs", "reason", "needle"),
    [
        pytest.param(podnetwork("x", nads=[]), [], Reason.INVALID_PARAMETERS, "exactly one", id="no NAD"),
        pytest.param(podnetwork("x", nads=[("nets", "a"), ("nets", "b")]), [nad("a"), nad("b")],
                     Reason.INVALID_PARAMETERS, "found 2", id="two NADs"),
        pytest.param(podnetwork("x", nads=[(None, "x")]), [nad("x")], Reason.INVALID_PARAMETERS,
                     "namespace is required", id="NAD ref without namespace"),
        pytest.param(podnetwork("x"), [], Reason.PARAMETERS_NOT_FOUND,
                     "NetworkAttachmentDefinition nets/x does not exist", id="NAD missing"),
        pytest.param(podnetwork("x"), [nad("x", config="{oops")], Reason.INVALID_PARAMETERS,
                     "not valid JSON", id="NPWG 3.4.1 NAD config is not JSON"),
        pytest.param(podnetwork("x"), [nad("x", config={"type": "../bin/evil"})], Reason.INVALID_PARAMETERS,
                     "bare executable", id="NPWG 3.4.1 plugin type with a path"),
        pytest.param(podnetwork("x", nads=[("nets", "a.b")]), [nad("a.b")], Reason.INVALID_PARAMETERS,
                     "NPWG 3.3", id="NPWG 3.3 NAD name with a dot cannot be selected"),
        pytest.param(podnetwork("x", kind="ConfigMap"), [], Reason.UNSUPPORTED_PARAMETERS_KIND,
                     "ConfigMap", id="unsupported kind"),
    ],
)
def test_kep_parameters_refs_of_bridge_podnetworks_are_checked(
    pn: dict, objs: list[dict], reason: Reason, needle: str
) -> None:
    with pytest.raises(TranslationError) as exc:
        run([{"podNetworkName": "x"}], pn, *objs)
    assert exc.value.reason == reason
    assert needle in str(exc.value)
    assert "PodNetwork x" in str(exc.value)


@pytest.mark.parametrize("kind", [npwg.NAD_KIND, NAD_REF_KIND, npwg.NAD_SINGULAR])
def test_kep_nad_reference_accepts_kind_resource_and_singular_spellings(kind: str) -> None:
    result = run([{"podNetworkName": "x"}], podnetwork("x", kind=kind), nad("x"))
    assert result.elements[0].ref == "nets/x"


def test_npwg_3_2_4_a_nad_without_config_is_a_valid_reference() -> None:
    assert run([{"podNetworkName": "x"}], podnetwork("x"), nad("x", config="")).elements[0].name == "x"


# --- default-route -------------------------------------------------------------------------

DUAL = {"cniVersion": "1.0.0", "plugins": [{"type": "bridge", "ipam": {
    "type": "host-local",
    "ranges": [[{"subnet": "10.5.0.0/24", "gateway": "10.5.0.1"}], [{"subnet": "fd05::/64", "gateway": "fd05::1"}]],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.5.0.1"}, {"dst": "10.9.0.0/16", "gw": "10.5.0.9"}]}},
    {"type": "tuning"}]}


@pytest.mark.parametrize(
    ("flags", "gateways"),
    [
        pytest.param({"isDefaultGW4": True}, ["10.5.0.1"], id="4.1.2.1.9 IPv4 gateway from host-local ranges"),
        pytest.param({"isDefaultGW6": True}, ["fd05::1"], id="4.1.2.1.9 IPv6 gateway from host-local ranges"),
        pytest.param({"isDefaultGW4": True, "isDefaultGW6": True}, ["10.5.0.1", "fd05::1"],
                     id="4.1.2.1.9 both families"),
    ],
)
def test_npwg_4_1_2_1_9_is_default_gw_becomes_default_route_with_the_ipam_gateway(
    flags: dict, gateways: list[str]
) -> None:
    result = run([{"podNetworkName": "x", **flags}], podnetwork("x"), nad("x", config=DUAL))
    assert result.elements[0].default_route == gateways
    assert not [w for w in result.warnings if "gateway" in w]


@pytest.mark.parametrize(
    ("ipam", "gateways"),
    [
        pytest.param({"type": "host-local", "subnet": "10.6.0.0/24", "gateway": "10.6.0.254"}, ["10.6.0.254"],
                     id="host-local gateway"),
        pytest.param({"type": "static", "addresses": [{"address": "10.7.0.5/24"}],
                      "routes": [{"dst": "0.0.0.0/0", "gw": "10.7.0.1"}]}, ["10.7.0.1"], id="static routes"),
        pytest.param({"type": "static", "addresses": [{"address": "10.8.0.5/24", "gateway": "10.8.0.1"}]},
                     ["10.8.0.1"], id="static address gateway"),
    ],
)
def test_npwg_4_1_2_1_9_gateways_are_found_in_common_ipam_configurations(ipam: dict, gateways: list) -> None:
    config = {"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0", "ipam": ipam}
    result = run([{"podNetworkName": "x", "isDefaultGW4": True}], podnetwork("x"), nad("x", config=config))
    assert result.elements[0].default_route == gateways


def test_npwg_4_1_2_1_9_without_a_named_gateway_default_route_is_empty_with_a_warning() -> None:
    result = run([{"podNetworkName": "dataplane", "isDefaultGW4": True}])
    assert result.elements[0].default_route == []
    assert [w for w in result.warnings if "Multus need a gateway IP" in w]


def test_npwg_4_1_2_1_9_gw4_and_gw6_on_two_networks_keep_default_route_on_the_first_with_a_warning() -> None:
    result = run([{"podNetworkName": "dataplane", "isDefaultGW4": True},
                  {"podNetworkName": "storage", "isDefaultGW6": True}])
    assert result.elements[0].default_route == []
    assert result.elements[1].default_route is None
    assert [w for w in result.warnings if "only one element" in w and "spec.networks[0]" in w]


# --- attachments and NetworkSelectionOptions --------------------------------------------------

def test_kep_attachment_maps_to_its_podnetworks_nad() -> None:
    result = run([{"podNetworkAttachmentName": "pna1", "interfaceName": "net7"}], attachment("pna1", "dataplane"))
    assert [e.to_json() for e in result.elements] == [{"name": "dataplane", "namespace": "nets", "interface": "net7"}]
    assert result.sources == [translate.Source("dataplane", "net7", "pna1", 0)]


def test_kep_attachment_nad_reference_overrides_the_podnetworks_in_its_own_namespace() -> None:
    result = run([{"podNetworkAttachmentName": "pna1"}],
                 attachment("pna1", "dataplane", [nad_ref("special")]), nad("special", namespace=NS))
    assert result.elements[0].ref == f"{NS}/special"
    assert result.sources[0].pod_network == "dataplane"


def test_kep_attachment_options_give_the_per_pod_keys() -> None:
    spec = {"ips": ["10.1.0.42/24"], "mac": "02:00:00:00:00:42", "cni-args": {"a": "b"},
            "portMappings": [{"hostPort": 8080, "containerPort": 80}], "bandwidth": {"egressRate": 1000},
            "infiniband-guid": "00:11:22:33:44:55:66:77"}
    result = run([{"podNetworkAttachmentName": "pna1"}],
                 attachment("pna1", "dataplane", [options_ref("opts")]), options("opts", spec))
    assert result.elements[0].to_json() == {"name": "dataplane", "namespace": "nets", **spec}


def test_kep_attachment_options_default_route_is_used_only_with_is_default_gw() -> None:
    objs = [attachment("pna1", "dataplane", [options_ref("opts")]), options("opts", {"default-route": ["10.1.0.9"]})]
    with_gw = run([{"podNetworkAttachmentName": "pna1", "isDefaultGW4": True}], *objs)
    assert with_gw.elements[0].default_route == ["10.1.0.9"]
    assert with_gw.warnings == ["the pod does not list the default PodNetwork, but NPWG cannot leave it out: "
                                "Multus attaches the cluster-wide default network first (NPWG 6.2); this "
                                "project's CNI agent attaches only the listed networks (docs/agent.md \"The "
                                "explicit list\")"]
    without = run([{"podNetworkAttachmentName": "pna1"}], *objs)
    assert without.elements[0].default_route is None
    assert [w for w in without.warnings if "default-route is ignored" in w]


@pytest.mark.parametrize(
    ("objs", "reason", "needle"),
    [
        pytest.param([], Reason.ATTACHMENT_NOT_FOUND, f"PodNetworkAttachment {NS}/pna1 does not exist",
                     id="attachment missing"),
        pytest.param([attachment("pna1", "dataplane", [options_ref("nope")])], Reason.PARAMETERS_NOT_FOUND,
                     f"NetworkSelectionOptions {NS}/nope does not exist", id="options missing"),
        pytest.param([attachment("pna1", "dataplane", [nad_ref("nope")])], Reason.PARAMETERS_NOT_FOUND,
                     f"NetworkAttachmentDefinition {NS}/nope does not exist", id="override NAD missing"),
        pytest.param([attachment("pna1", "dataplane", [options_ref("o")]), options("o", {"mac": "zz"})],
                     Reason.INVALID_PARAMETERS, "spec.mac", id="NPWG 4.1.2.1.4 invalid mac in options"),
        pytest.param([attachment("pna1", "dataplane", [options_ref("o")]), options("o", {"interface": "x"})],
                     Reason.INVALID_PARAMETERS, "unknown key(s) ['interface']", id="interface is the KEP's"),
        pytest.param([attachment("pna1", "dataplane", [options_ref("o")]),
                      options("o", {"ips": ["10.0.0.1"], "ipam-claim-reference": "c"})],
                     Reason.INVALID_PARAMETERS, "spec.ipam-claim-reference", id="NPWG 4.1.2.1.11 ips and claim"),
        pytest.param([attachment("pna1", "dataplane", [options_ref("a"), options_ref("b")]),
                      options("a", {}), options("b", {})], Reason.INVALID_PARAMETERS, "at most one",
                     id="two options"),
        pytest.param([attachment("pna1", "dataplane", [{"group": "k8s.cni.cncf.io", "kind": "podParams",
                                                        "name": "p"}])],
                     Reason.UNSUPPORTED_PARAMETERS_KIND, "podParams", id="the KEP's podParams example"),
        pytest.param([attachment("pna1", "other")], Reason.NOT_BRIDGE_PROVIDER, "PodNetwork other",
                     id="attachment to another provider's network"),
    ],
)
def test_kep_attachment_errors_name_the_object(objs: list[dict], reason: Reason, needle: str) -> None:
    with pytest.raises(TranslationError) as exc:
        run([{"podNetworkAttachmentName": "pna1"}], *objs)
    assert exc.value.reason == reason
    assert needle in str(exc.value)


def test_kep_attachment_to_the_default_podnetwork_counts_as_the_default_and_warns_about_parameters() -> None:
    result = run([{"podNetworkAttachmentName": "pna0"}],
                 attachment("pna0", "default", [options_ref("o")]), options("o", {"mac": "02:00:00:00:00:01"}))
    assert result.includes_default and result.elements == []
    assert result.default_source == translate.Source("default", None, "pna0", 0)
    assert [w for w in result.warnings if "not applied to the cluster-wide default network" in w]


def test_npwg_4_1_2_1_5_an_interface_name_npwg_refuses_is_invalid_parameters() -> None:
    with pytest.raises(TranslationError) as exc:
        run([{"podNetworkName": "dataplane", "interfaceName": "a:b"}])
    assert exc.value.reason == Reason.INVALID_PARAMETERS and "interface" in str(exc.value)


# --- properties ----------------------------------------------------------------------------

names = st.from_regex(r"\A[a-z][a-z0-9]{0,6}\Z").filter(lambda n: n != "default")


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[dict], list[dict]]:
    pn_names = draw(st.lists(names, min_size=1, max_size=5, unique=True))
    objs: list[dict] = [DEFAULT]
    nets: list[dict] = []
    ifnames = iter(f"net{i}" for i in range(10))
    if draw(st.booleans()):
        nets.append({"podNetworkName": "default"})
    for name in pn_names:
        objs += [podnetwork(name), nad(name)]
        entry: dict[str, Any] = {}
        if draw(st.booleans()):
            entry["interfaceName"] = next(ifnames)
        if draw(st.booleans()):
            objs.append(attachment(f"pna-{name}", name))
            entry["podNetworkAttachmentName"] = f"pna-{name}"
        else:
            entry["podNetworkName"] = name
        nets.insert(draw(st.integers(0, len(nets))), entry)
    return nets, objs


@settings(max_examples=60, deadline=None)
@given(worlds())
def test_translation_has_one_element_per_non_default_network_in_order_and_round_trips(world: tuple) -> None:
    nets, objs = world
    result = run(nets, *objs, base=[])
    expected = [n for n in nets if n.get("podNetworkName") != "default"]
    assert len(result.elements) == len(result.sources) == len(expected)
    for element, source, net in zip(result.elements, result.sources, expected, strict=True):
        pn = net.get("podNetworkName") or net["podNetworkAttachmentName"].removeprefix("pna-")
        assert (source.pod_network, element.name, element.namespace) == (pn, pn, "nets")
        assert source.interface == element.interface == net.get("interfaceName")
        assert nets[source.index] == net
    assert result.includes_default == ({"podNetworkName": "default"} in nets)
    assert npwg.parse_selection(result.annotation, NS) == result.elements


def test_an_attachment_is_held_to_the_podnetwork_admission_recorded_for_it() -> None:
    nets = [Network.model_validate(n) for n in [{"podNetworkName": "default"}, {"podNetworkAttachmentName": "fast"}]]
    swapped = Objects.from_objects([*WORLD, attachment("fast", "storage")])
    # Recorded `dataplane` at admission; re-created since to name `storage`: refused.
    with pytest.raises(TranslationError) as caught:
        translate.translate(nets, NS, swapped, {"fast": "dataplane"})
    assert caught.value.reason is Reason.ATTACHMENT_CHANGED
    assert str(caught.value).startswith(
        "spec.networks[1] (PodNetworkAttachment 'fast'): PodNetworkAttachment app/fast names PodNetwork 'storage', "
        "but the pod was admitted with it naming 'dataplane' (multinetwork.x-k8s.io/attachment-networks)")
    # The recorded network, or no record of it (a pod admitted without enforcement): translated.
    assert [e.name for e in translate.translate(nets, NS, swapped, {"fast": "storage"}).elements] == ["storage"]
    assert [e.name for e in translate.translate(nets, NS, swapped, {}).elements] == ["storage"]
    assert [e.name for e in translate.translate(nets, NS, swapped).elements] == ["storage"]


@pytest.mark.parametrize("text", ["[]", '{"fast": 1}', "fast=dataplane", '{"fast": "dataplane"'])
def test_an_admission_record_that_cannot_be_read_is_refused(text: str) -> None:
    with pytest.raises(TranslationError) as caught:
        translate.admitted_networks({"multinetwork.x-k8s.io/attachment-networks": text})
    assert caught.value.reason is Reason.INVALID_RECORD
    assert translate.admitted_networks({}) is None
    assert translate.admitted_networks({"multinetwork.x-k8s.io/attachment-networks": '{"a":"b"}'}) == {"a": "b"}
