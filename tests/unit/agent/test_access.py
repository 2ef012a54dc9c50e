"""Node access and API access, the pure decisions (`bridge.agent.access.decide`): the switches, the node's
path per NAD type (and each refusal), the API's addresses, and the node's nftables table. Real
traffic through them: tests/cni/test_node_access.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.agent.access import decide as access
from bridge.agent.netns import nftables
from podnetwork.ground import constants

NODE, API = constants.NODE_ACCESS_ANNOTATION, constants.API_ACCESS_ANNOTATION


def bridge_conf(**plugin: Any) -> dict[str, Any]:
    ipam = plugin.pop("ipam", {"type": "host-local", "ranges": [[{"subnet": "10.9.1.0/24"}]]})
    return {"cniVersion": "1.0.0", "name": "blue",
            "plugins": [{"type": "bridge", "bridge": "br-blue", "ipam": ipam, **plugin}, {"type": "tuning"}]}


def test_switches_are_off_unless_true_and_api_access_needs_node_access() -> None:
    assert access.switches(None) == access.Switches(False, False)
    assert access.switches({NODE: "false"}) == access.Switches(False, False)
    assert access.switches({NODE: "true"}) == access.Switches(True, False)
    assert access.switches({NODE: "true", API: "true"}) == access.Switches(True, True)
    with pytest.raises(access.Refusal, match=r"needs .*node-access"):
        access.switches({API: "true"})
    with pytest.raises(access.Refusal, match="'yes' is neither 'true' nor 'false'"):
        access.switches({NODE: "yes"})


def test_a_bridge_network_gives_the_node_each_ranges_gateway_or_the_subnets_first_address() -> None:
    ipam = {"type": "host-local", "ranges": [[{"subnet": "10.9.1.0/24", "gateway": "10.9.1.254"}],
                                             [{"subnet": "fd00:9::/64"}]]}
    path = access.path_for("blue", bridge_conf(ipam=ipam))
    assert (path.kind, path.interface, path.by_plugin) == ("bridge", "br-blue", False)
    assert path.addresses == ("10.9.1.254/24", "fd00:9::1/64")
    assert path.subnets == ("10.9.1.0/24", "fd00:9::/64")
    legacy = access.path_for("blue", {"type": "bridge", "ipam": {"type": "host-local", "subnet": "10.9.2.0/24"}})
    assert (legacy.interface, legacy.addresses) == (access.DEFAULT_BRIDGE, ("10.9.2.1/24",))


def test_a_bridge_whose_plugin_is_the_gateway_already_gives_the_node_that_address() -> None:
    assert access.path_for("blue", bridge_conf(isGateway=True)).by_plugin
    assert not access.path_for("blue", bridge_conf(isGateway=False)).by_plugin


@pytest.mark.parametrize(("conf", "message"), [
    (bridge_conf(ipam={"type": "static", "addresses": [{"address": "10.9.1.5/24"}]}), "its IPAM is 'static'"),
    (bridge_conf(ipam={"type": "host-local", "ranges": [[{"subnet": "10.9.1.0/24", "gateway": "10.8.0.1"}]]}),
     "outside its subnet"),
    (bridge_conf(ipam={"type": "host-local", "ranges": [[{"subnet": "nonsense"}]]}), "cannot be read"),
    ({"type": "macvlan", "ipam": {"type": "host-local", "subnet": "10.9.3.0/24"}}, "names no master"),
    ({"type": "macvlan", "master": "eth1", "mode": "vepa", "ipam": {"type": "dhcp"}}, "mode bridge"),
    ({"type": "ipvlan", "master": "eth1", "mode": "l3s", "ipam": {"type": "dhcp"}}, "l2 or l3"),
    ({"type": "macvlan", "master": "eth1"}, "no IPAM"),
    ({"type": "sriov", "ipam": {"type": "host-local"}}, "only for NAD types bridge, macvlan and ipvlan"),
    ({"plugins": []}, "holds no plugin"),
])
def test_a_network_the_node_cannot_reach_is_refused_with_its_reason(conf: dict[str, Any], message: str) -> None:
    with pytest.raises(access.Refusal, match=message):
        access.path_for("blue", conf)


def test_a_macvlan_or_ipvlan_network_gets_a_node_side_sub_interface_on_its_master_in_its_mode() -> None:
    ipam = {"type": "host-local", "ranges": [[{"subnet": "10.9.4.0/24"}]]}
    path = access.path_for("green", {"cniVersion": "0.4.0", "type": "macvlan", "master": "eth1", "mtu": 1400,
                                     "ipam": ipam})
    assert (path.kind, path.master, path.mode, path.mtu, path.cni_version) == ("macvlan", "eth1", "bridge", 1400,
                                                                               "0.4.0")
    assert path.interface == access.node_link_name("green") and len(path.interface) <= 15
    assert path.ipam == ipam and path.subnets == ("10.9.4.0/24",) and path.addresses == ()
    ipvlan = access.path_for("green", {"type": "ipvlan", "master": "eth1", "ipam": {"type": "dhcp"}})
    assert (ipvlan.mode, ipvlan.subnets) == ("l2", ())


@given(st.text(min_size=1, max_size=253))
def test_the_node_side_link_name_is_a_valid_interface_name_for_any_podnetwork_name(name: str) -> None:
    link = access.node_link_name(name)
    assert len(link) <= 15 and link.isascii() and link.startswith(constants.NODE_LINK_PREFIX)


def test_the_api_is_the_services_cluster_ips_then_its_ready_endpoints() -> None:
    service = {"spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1", "fd00:96::1"]}}
    slices = [
        {"endpoints": [{"addresses": ["192.168.0.10"], "conditions": {"ready": True}},
                       {"addresses": ["192.168.0.11"], "conditions": {"ready": False}},
                       {"addresses": ["192.168.0.12"]}, "junk", {"addresses": ["not-an-ip"]}]},
        {"endpoints": [{"addresses": ["192.168.0.10"]}]},
    ]
    assert access.api_addresses(service, slices) == ("10.96.0.1", "fd00:96::1", "192.168.0.10", "192.168.0.12")
    assert access.api_addresses(None, []) == ()
    assert access.api_addresses({"spec": {"clusterIP": "None"}}, []) == ()


def test_api_routes_go_via_the_nodes_address_of_their_family() -> None:
    assert access.via(["10.9.1.1/24"], ["10.96.0.1", "fd00::1"]) == [("10.96.0.1", "10.9.1.1")]


def test_the_nodes_table_scopes_each_path_and_masquerades_only_towards_the_api() -> None:
    rules = access.ruleset([access.Active("br-blue", ("10.9.1.0/24",), True),
                            access.Active("pnode1", ("10.9.4.0/24",), False)], ["10.96.0.1", "192.168.0.10"])
    assert rules is not None
    nftables.document(rules, nftables.ACCESS)  # all of it in our table, nothing else
    text = json.dumps(rules)
    sets = [c["add"]["set"] for c in rules["nftables"] if "set" in c.get("add", {})]
    assert sets[0]["elem"] == ["10.96.0.1", "192.168.0.10"]
    masquerades = [c for c in rules["nftables"] if "masquerade" in json.dumps(c)]
    assert len(masquerades) == 1 and "10.9.1.0" in json.dumps(masquerades[0]), "blue's subnet only"
    assert "10.9.4.0" not in text, "no API access on pnode1: its subnet appears nowhere"
    drops = [c for c in rules["nftables"] if "drop" in json.dumps(c)]
    assert {json.loads(json.dumps(d))["add"]["rule"]["chain"] for d in drops} == {"forward", "input"}
    assert access.ruleset([], ["10.96.0.1"]) is None, "no path: no table"
