"""The mapping PodNetwork -> DRA: classes, templates, claims, what each driver cannot express."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import celpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.dra import export
from tests.unit.dra.dra_support import (
    HOST_DEVICE,
    NETWORKS,
    STATUS,
    attachment,
    deployment,
    nad,
    only_claims,
    options,
    parameters,
    pod,
    podnetwork,
    run,
)

CNI = export.CNI_DRIVER
_CEL = celpy.Environment()


def _selects(expressions: list[str], device: dict[str, Any]) -> bool:
    """Whether a device (driver and attributes, as a ResourceSlice publishes them) fits every selector."""
    for text in expressions:
        program = _CEL.program(_CEL.compile(text))
        if not bool(program.evaluate({"device": celpy.json_to_cel(device)})):
            return False
    return True


def _class_expressions(result: export.Export, name: str) -> list[str]:
    (cls,) = [c for c in result.device_classes if c.metadata.name == name]
    return [s.cel.expression for s in cls.spec.selectors or [] if s.cel]


def _reasons(result: export.Export) -> dict[str, str]:
    return {str(u.ref): u.reason for u in result.unexpressible}


def test_a_host_device_network_selects_exactly_that_interface_of_the_dranet_driver() -> None:
    result = run(nad("fabric", HOST_DEVICE), podnetwork("fabric", "fabric"))
    expressions = _class_expressions(result, "fabric")
    ens5 = {"driver": "dra.net", "attributes": {"dra.net": {"ifName": "ens5"}}}
    assert _selects(expressions, ens5)
    assert not _selects(expressions, {"driver": "dra.net", "attributes": {"dra.net": {"ifName": "ens6"}}})
    assert not _selects(expressions, {**ens5, "driver": "gpu.example.com"})


@pytest.mark.parametrize(
    ("config", "attributes"),
    [
        ({"type": "host-device", "hwaddr": "52:54:00:AA:BB:CC"}, {"mac": "52:54:00:aa:bb:cc"}),
        ({"type": "host-device", "pciBusID": "0000:3b:00.1"}, {"pciAddress": "0000:3b:00.1"}),
        ({"type": "ipvlan", "master": "ens6"}, {"ifName": "ens6"}),
    ],
    ids=["hwaddr", "pciBusID", "ipvlan master"],
)
def test_the_class_selects_the_device_the_nad_names(config: dict[str, Any], attributes: dict[str, str]) -> None:
    result = run(nad("n", config), podnetwork("n", "n"))
    expressions = _class_expressions(result, "n")
    assert _selects(expressions, {"driver": "dra.net", "attributes": {"dra.net": attributes}})
    other = {k: v + "0" for k, v in attributes.items()}
    assert not _selects(expressions, {"driver": "dra.net", "attributes": {"dra.net": other}})


def test_a_device_name_with_quotes_is_escaped_in_cel() -> None:
    result = run(nad("q", {"type": "host-device", "device": 'a"b\\c'}), podnetwork("q", "q"))
    assert _selects(_class_expressions(result, "q"),
                    {"driver": "dra.net", "attributes": {"dra.net": {"ifName": 'a"b\\c'}}})


def test_interface_name_and_network_parameters_reach_the_claim() -> None:
    result = run(
        nad("storage", {"type": "ipvlan", "master": "ens6", "mode": "l3", "mtu": 9000,
                        "ipam": {"type": "static", "addresses": [{"address": "10.1.0.5/24"}],
                                 "routes": [{"dst": "10.2.0.0/16", "gw": "10.1.0.1"}]}}),
        podnetwork("storage", "storage"),
        pod("p", [{"podNetworkName": "default"}, {"podNetworkName": "storage", "interfaceName": "st0"}]),
    )
    (claim,) = only_claims(result)
    assert claim.pod_claim == "storage" and claim.interface == "st0"
    assert parameters(result, claim.template) == {
        "interface": {"name": "st0", "addresses": ["10.1.0.5/24"], "mtu": 9000,
                      "ipvlan": {"mode": "l3", "addressing": {"type": "static"}}},
        "routes": [{"destination": "10.2.0.0/16", "gateway": "10.1.0.1"}],
    }
    pod_spec = result.workloads[0].obj["spec"]
    assert pod_spec["resourceClaims"] == [{"name": "storage", "resourceClaimTemplateName": claim.template}]
    assert NETWORKS not in result.workloads[0].obj["metadata"].get("annotations", {})


def test_per_pod_ips_and_mac_become_dranet_addresses_with_the_subnet_prefix() -> None:
    result = run(
        nad("storage", {"type": "ipvlan", "master": "ens6",
                        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.30.0.0/24"}]]}}),
        podnetwork("storage", "storage"),
        options("o", {"ips": ["10.30.0.20", "fd00::20/64"], "mac": "02:00:00:00:00:01"}),
        attachment("a", "storage", options="o"),
        pod("p", [{"podNetworkAttachmentName": "a", "interfaceName": "st0"}]),
    )
    (claim,) = only_claims(result)
    iface = parameters(result, claim.template)["interface"]
    assert iface["addresses"] == ["10.30.0.20/24", "fd00::20/64"]
    assert iface["hardwareAddr"] == "02:00:00:00:00:01"
    assert iface["ipvlan"]["addressing"] == {"type": "static"}


def test_dhcp_ipam_becomes_dranet_dhcp() -> None:
    result = run(nad("f", {**HOST_DEVICE, "ipam": {"type": "dhcp"}}), podnetwork("f", "f"),
                 pod("p", [{"podNetworkName": "f"}]))
    (claim,) = only_claims(result)
    assert parameters(result, claim.template) == {"interface": {"dhcp": True}}


@pytest.mark.parametrize(
    ("config", "reason", "words"),
    [
        ({"type": "bridge", "bridge": "br0"}, "UnsupportedPlugin", "'bridge'"),
        ({"type": "macvlan", "master": "eth0"}, "UnsupportedPlugin", "'macvlan'"),
        ({"type": "host-device"}, "NoDevice", "names no device"),
        ({"type": "ipvlan"}, "NoDevice", "no `master`"),
        ({"type": "ipvlan", "master": "e", "ipam": {"type": "dhcp"}}, "UnsupportedIPAM", "DHCP"),
        (None, "ConfigOnNode", "NPWG 3.2.4"),
    ],
    ids=["bridge", "macvlan", "no device", "no master", "ipvlan dhcp", "config on node"],
)
def test_networks_dranet_cannot_provide_are_reported_with_their_pods(
    config: dict[str, Any] | None, reason: str, words: str
) -> None:
    result = run(nad("n", config), podnetwork("n", "n"), pod("p", [{"podNetworkName": "n"}]))
    assert _reasons(result) == {"PodNetwork n": reason, "Pod default/p": reason}
    assert words in str(result.unexpressible[0])
    assert result.device_classes == [] and result.templates == [] and result.workloads == []


def test_chained_plugins_are_reported_for_dranet_and_carried_by_the_cni_driver() -> None:
    conflist = {"plugins": [{**HOST_DEVICE}, {"type": "tuning", "mtu": 1400}]}
    objs = (nad("n", conflist), podnetwork("n", "n"), pod("p", [{"podNetworkName": "n", "interfaceName": "n0"}]))
    assert _reasons(run(*objs))["PodNetwork n"] == "ChainedPlugins"
    result = run(*objs, driver=CNI)
    (claim,) = only_claims(result)
    params = parameters(result, claim.template)
    assert params["kind"] == "CNI" and params["ifName"] == "n0"
    assert [p["type"] for p in params["config"]["plugins"]] == ["host-device", "tuning"]


def test_a_pool_ipam_needs_per_pod_ips_for_dranet() -> None:
    result = run(
        nad("n", {**HOST_DEVICE, "ipam": {"type": "host-local", "subnet": "10.9.0.0/24"}}),
        podnetwork("n", "n"), pod("p", [{"podNetworkName": "n"}]),
    )
    assert _reasons(result) == {"Pod default/p": "UnsupportedIPAM"}
    assert [c.metadata.name for c in result.device_classes] == ["n"]


def test_an_ip_outside_every_subnet_without_prefix_is_reported() -> None:
    result = run(
        nad("n", {**HOST_DEVICE, "ipam": {"type": "host-local", "subnet": "10.9.0.0/24"}}),
        podnetwork("n", "n"), options("o", {"ips": ["10.8.0.1"]}), attachment("a", "n", options="o"),
        pod("p", [{"podNetworkAttachmentName": "a"}]),
    )
    assert _reasons(result) == {"Pod default/p": "UnsupportedIPAM"}
    assert "'10.8.0.1' has no prefix length" in str(result.unexpressible[0])


def test_a_default_route_on_a_secondary_network_is_not_expressible() -> None:
    result = run(nad("n", {**HOST_DEVICE, "ipam": {"type": "static", "addresses": [{"address": "10.0.0.2/24",
                                                                                     "gateway": "10.0.0.1"}]}}),
                 podnetwork("n", "n"), pod("p", [{"podNetworkName": "n", "isDefaultGW4": True}]))
    assert _reasons(result) == {"Pod default/p": "DefaultRoute"}


@pytest.mark.parametrize("key", [{"cni-args": {"a": "b"}}, {"bandwidth": {"ingressRate": 1, "ingressBurst": 1}},
                                 {"portMappings": [{"hostPort": 80, "containerPort": 80}]},
                                 {"infiniband-guid": "c2:11:22:33:44:55:66:77"}])
@pytest.mark.parametrize("driver", [export.DRANET_DRIVER, CNI])
def test_per_pod_keys_without_a_place_in_the_parameters_are_reported(key: dict[str, Any], driver: str) -> None:
    result = run(nad("n", {**HOST_DEVICE, "capabilities": {"portMappings": True}}), podnetwork("n", "n"),
                 options("o", key), attachment("a", "n", options="o"),
                 pod("p", [{"podNetworkAttachmentName": "a", "interfaceName": "x0"}]), driver=driver)
    assert _reasons(result) == {"Pod default/p": "UnsupportedKey"}
    assert next(iter(key)) in result.unexpressible[0].message


def test_the_cni_driver_cannot_take_per_pod_ips() -> None:
    result = run(nad("n", {"type": "macvlan", "master": "eth0", "capabilities": {"ips": True},
                           "ipam": {"type": "static"}}),
                 podnetwork("n", "n"), options("o", {"ips": ["10.0.0.5/24"]}), attachment("a", "n", options="o"),
                 pod("p", [{"podNetworkAttachmentName": "a"}]), driver=CNI)
    assert _reasons(result) == {"Pod default/p": "UnsupportedKey"}


def test_the_cni_driver_names_unnamed_interfaces_as_npwg_implementations_do() -> None:
    result = run(nad("a", {"type": "macvlan", "master": "eth0"}), nad("b", {"type": "bridge"}),
                 podnetwork("a", "a"), podnetwork("b", "b"),
                 pod("p", [{"podNetworkName": "a", "interfaceName": "net1"}, {"podNetworkName": "b"}]), driver=CNI)
    claims = only_claims(result)
    assert [parameters(result, c.template)["ifName"] for c in claims] == ["net1", "net2"]
    assert any("needs one: net2" in n.message for n in result.notes)


def test_disabled_and_foreign_podnetworks_have_no_class() -> None:
    result = run(nad("n", HOST_DEVICE), podnetwork("off", "n", enabled=False),
                 podnetwork("other", provider="example.com/sdn"), podnetwork("default", provider="example.com/cni"))
    assert _reasons(result) == {"PodNetwork off": "PodNetworkDisabled", "PodNetwork other": "NotBridgeProvider"}
    assert [str(s.ref) for s in result.skipped] == ["PodNetwork default"]


def test_an_attachment_whose_nad_picks_another_device_is_refused() -> None:
    result = run(nad("n", HOST_DEVICE), nad("m", {"type": "host-device", "device": "ens9"}), podnetwork("n", "n"),
                 attachment("a", "n", nad_name="m"), pod("p", [{"podNetworkAttachmentName": "a"}]))
    assert _reasons(result) == {"Pod default/p": "AttachmentChangesDevice"}


def test_an_attachment_nad_on_the_same_device_gives_its_own_parameters() -> None:
    result = run(nad("n", HOST_DEVICE), nad("m", {**HOST_DEVICE, "ipam": {"type": "dhcp"}}), podnetwork("n", "n"),
                 attachment("a", "n", nad_name="m"), pod("p", [{"podNetworkAttachmentName": "a"}]))
    (claim,) = only_claims(result)
    assert parameters(result, claim.template) == {"interface": {"dhcp": True}}


def test_a_pod_is_exported_whole_or_not_at_all() -> None:
    result = run(nad("good", HOST_DEVICE), podnetwork("good", "good"), nad("bad", {"type": "bridge"}),
                 podnetwork("bad", "bad"),
                 pod("p", [{"podNetworkName": "good"}, {"podNetworkName": "bad"}]),
                 pod("q", [{"podNetworkName": "good"}]))
    assert _reasons(result) == {"PodNetwork bad": "UnsupportedPlugin", "Pod default/p": "UnsupportedPlugin"}
    assert [str(w.ref) for w in result.workloads] == ["Pod default/q"]
    assert len(result.templates) == 1  # q's only; p's template for `good` is not left behind


def test_the_same_shape_shares_one_template_and_another_shape_gets_its_own() -> None:
    result = run(nad("n", HOST_DEVICE), podnetwork("n", "n"),
                 pod("a", [{"podNetworkName": "n", "interfaceName": "x0"}]),
                 deployment("b", [{"podNetworkName": "n", "interfaceName": "x0"}]),
                 pod("c", [{"podNetworkName": "n", "interfaceName": "y0"}]),
                 pod("d", [{"podNetworkName": "n", "interfaceName": "x0"}], namespace="other"))
    templates = {str(w.ref): w.claims[0].template for w in result.workloads}
    assert templates["Pod default/a"] == templates["Deployment default/b"] != templates["Pod default/c"]
    assert templates["Pod other/d"] == templates["Pod default/a"]  # same name, in its own namespace
    assert sorted((t.metadata.namespace, t.metadata.name) for t in result.templates) == sorted(
        {("default", templates["Pod default/a"]), ("default", templates["Pod default/c"]),
         ("other", templates["Pod other/d"])}
    )
    (exported,) = [w for w in result.workloads if str(w.ref) == "Deployment default/b"]
    deployment_spec = exported.obj["spec"]["template"]["spec"]
    assert deployment_spec["resourceClaims"][0]["resourceClaimTemplateName"] == templates["Pod default/a"]


def test_claim_names_are_dns_labels_and_keep_the_pods_own_claims() -> None:
    result = run(nad("n", HOST_DEVICE), podnetwork("app.fabric", "n"),
                 pod("p", [{"podNetworkName": "app.fabric"}],
                     resourceClaims=[{"name": "app-fabric", "resourceClaimName": "gpu"}]))
    claims = result.workloads[0].obj["spec"]["resourceClaims"]
    assert claims[0] == {"name": "app-fabric", "resourceClaimName": "gpu"}
    assert claims[1]["name"] == "network-0"


def test_a_cronjob_gets_the_claims_in_its_job_template() -> None:
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "default"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
                "metadata": {"annotations": {NETWORKS: '[{"podNetworkName":"n"}]'}},
                "spec": {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Never"}}}}}}
    result = run(nad("n", HOST_DEVICE), podnetwork("n", "n"), cron)
    template = result.workloads[0].obj["spec"]["jobTemplate"]["spec"]["template"]
    assert template["spec"]["resourceClaims"][0]["name"] == "n"
    assert "metadata" not in template  # its only annotation was the KEP one


def test_a_pod_owned_by_a_workload_is_left_to_its_owner_but_keeps_its_network_data() -> None:
    owned = pod("web-1", [{"podNetworkName": "n", "interfaceName": "n0"}],
                annotations={STATUS: '[{"name":"default/n","interface":"n0","ips":["10.0.0.9"],"default":false}]'})
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                             "uid": "u", "controller": True}]
    result = run(nad("n", {**HOST_DEVICE, "ipam": {"type": "static",
                                                     "addresses": [{"address": "10.0.0.9/28"}]}}),
                 podnetwork("n", "n"), owned)
    assert result.workloads == [] and [str(s.ref) for s in result.skipped] == ["Pod default/web-1"]
    (entry,) = result.network_data
    assert entry.data.to_dict() == {"interfaceName": "n0", "ips": ["10.0.0.9/28"]}


def test_network_status_becomes_kep_4817_network_data_per_claim() -> None:
    status = ('[{"name":"cluster","interface":"eth0","ips":["10.244.0.5/24"],"default":true},'
              '{"name":"default/n","interface":"n0","ips":["192.0.2.5/24","2001:db8::5"],'
              '"mac":"02:00:00:00:00:05","default":false}]')
    result = run(nad("n", HOST_DEVICE), podnetwork("n", "n"),
                 pod("p", [{"podNetworkName": "default"}, {"podNetworkName": "n", "interfaceName": "n0"}],
                     annotations={STATUS: status}, nodeName="w1"))
    (entry,) = result.network_data
    assert entry.to_dict() == {
        "pod": "default/p", "resourceClaimName": "n", "podNetwork": "n", "request": "nic", "driver": "dra.net",
        "networkData": {"interfaceName": "n0", "ips": ["192.0.2.5/24", "2001:db8::5/128"],
                        "hardwareAddress": "02:00:00:00:00:05"},
    }
    assert any("prefix length of 2001:db8::5 is unknown" in n.message for n in result.notes)
    exported = result.workloads[0].obj
    assert "nodeName" not in exported["spec"] and STATUS not in exported["metadata"].get("annotations", {})


_ANY_IP = st.one_of(
    st.text(max_size=40),
    st.ip_addresses().map(str),
    st.tuples(st.ip_addresses().map(str), st.integers(-1, 200)).map(lambda p: f"{p[0]}/{p[1]}"),
    st.integers(),
    st.none(),
)


@settings(max_examples=200, deadline=None)
@given(ips=st.lists(_ANY_IP, max_size=20), mac=st.one_of(st.text(max_size=20), st.integers(), st.none()))
def test_whatever_a_network_status_holds_the_export_never_fails_and_writes_only_cidrs(
    ips: list[Any], mac: Any
) -> None:
    # A tenant may write its pod's network-status; `export-dra -A` reads every pod's.
    status = json.dumps([{"name": "default/n", "interface": "n0", "ips": ips, "mac": mac}])
    result = run(nad("n", HOST_DEVICE), podnetwork("n", "n"),
                 pod("p", [{"podNetworkName": "n", "interfaceName": "n0"}], annotations={STATUS: status}))
    for entry in result.network_data:
        for cidr in entry.data.ips or []:
            assert "%" not in cidr and ipaddress.ip_interface(cidr).with_prefixlen == cidr
        assert len(entry.data.ips or []) <= 16


@pytest.mark.parametrize(
    ("nets", "spec", "reason"),
    [
        ("[{", {}, "InvalidNetworks"),
        ([{"podNetworkName": "n"}, {"podNetworkName": "n"}], {}, "InvalidNetworks"),
        ([{"podNetworkName": "n"}], {"hostNetwork": True}, "InvalidNetworks"),
        ([{"podNetworkName": "missing"}], {}, "PodNetworkNotFound"),
        ([{"podNetworkAttachmentName": "missing"}], {}, "PodNetworkAttachmentNotFound"),
    ],
    ids=["not json", "twice", "hostNetwork", "no such network", "no such attachment"],
)
def test_invalid_pods_are_reported_with_the_rule_they_break(nets: Any, spec: dict[str, Any], reason: str) -> None:
    obj = pod("p", None, **spec)
    obj["metadata"]["annotations"] = {NETWORKS: nets if isinstance(nets, str) else __import__("json").dumps(nets)}
    result = run(nad("n", HOST_DEVICE), podnetwork("n", "n"), obj)
    assert _reasons(result) == {"Pod default/p": reason}
    assert result.workloads == []


def test_pods_without_networks_and_other_kinds_are_left_alone() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {}}
    result = run(nad("n", HOST_DEVICE), podnetwork("n", "n"), pod("plain", None), service)
    assert result.workloads == [] and result.unexpressible == []
    assert [c.metadata.name for c in result.device_classes] == ["n"]


def test_the_default_network_entry_is_noted_not_claimed() -> None:
    result = run(nad("n", HOST_DEVICE), podnetwork("n", "n"),
                 pod("p", [{"podNetworkName": "default", "interfaceName": "eth0", "isDefaultGW4": True},
                           {"podNetworkName": "n"}]),
                 pod("q", [{"podNetworkName": "n"}]))
    assert [len(w.claims) for w in result.workloads] == [1, 1]
    notes = {str(n.ref): n.message for n in result.notes}
    assert "are not carried" in notes["Pod default/p"]
    assert "does not list the default PodNetwork" in notes["Pod default/q"]


def test_parameters_over_the_dra_limit_are_refused() -> None:
    routes = [{"dst": f"10.{i // 256}.{i % 256}.0/24", "gw": "10.255.0.1"} for i in range(400)]
    result = run(nad("n", {**HOST_DEVICE, "ipam": {"type": "static", "routes": routes}}), podnetwork("n", "n"),
                 pod("p", [{"podNetworkName": "n"}]))
    assert _reasons(result) == {"Pod default/p": "ParametersTooLarge"}


@pytest.mark.parametrize("spec", [["not", "an", "object"], {"containers": [], "resourceClaims": {"a": 1}}],
                         ids=["spec a list", "resourceClaims a map"])
def test_a_pod_of_the_wrong_shape_is_reported_not_crashed_on(spec: Any) -> None:
    obj = pod("p", [{"podNetworkName": "n"}])
    obj["spec"] = spec
    result = run(nad("n", HOST_DEVICE), podnetwork("n", "n"), obj)
    assert _reasons(result) == {"Pod default/p": "InvalidObject"}


def test_a_pod_on_the_default_network_only_loses_the_annotation_and_gets_no_claims() -> None:
    result = run(pod("p", [{"podNetworkName": "default"}]))
    (exported,) = result.workloads
    assert "resourceClaims" not in exported.obj["spec"] and "annotations" not in exported.obj["metadata"]
