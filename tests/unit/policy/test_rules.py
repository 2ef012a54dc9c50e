"""The rule compiler (bridge.policy.rules): the structure of the table it writes, and the rules
walked packet by packet (tests/unit/nftables_support.py) agreeing with the reference evaluator
on every truth table of tests/policy_cases.py. The kernel loads them in tests/cni/test_policy_rules_load.py."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from bridge import policy as netpol
from bridge.agent.netns import nftables
from bridge.policy import evaluate, rules, scope
from tests import policy_cases
from tests.policy_cases import DEFAULT_TOPOLOGY as T
from tests.unit import nftables_support as nft


def _documents(world: netpol.World) -> dict[str, dict[str, Any] | None]:
    scopes = scope.scopes(world)
    return {key: rules.compile_pod(world, key, scopes).document for key in world.pods}


def _through_rules(
    world: netpol.World, documents: dict[str, dict[str, Any] | None], src: str, dst: str, probe: policy_cases.Probe
) -> bool:
    source = world.pods[src].addresses_on(T.network)[0]
    destination = world.pods[dst].addresses_on(T.network)[0]
    if src == dst:
        return True  # over lo, which no rule of ours sees
    out = nft.Packet("net1", source, destination, probe.protocol, probe.port)
    return nft.passes(documents[src], "output", out) and nft.passes(documents[dst], "input", out)


@pytest.mark.parametrize("case", policy_cases.CASES, ids=lambda c: c.name)
def test_the_compiled_rules_give_the_truth_table_and_agree_with_the_evaluator(case: policy_cases.Case) -> None:
    world = policy_cases.world(T, case.policies(T))
    documents = _documents(world)
    scopes = scope.scopes(world)
    for probe, reach in case.expected.items():
        protocol: netpol.ConnectionProtocol = netpol.ICMP if probe.protocol == "ICMP" else netpol.Protocol(probe.protocol)
        got = {(s, d): _through_rules(world, documents, s, d, probe) for s in policy_cases.POD_KEYS for d in policy_cases.POD_KEYS}
        assert got == reach.matrix(), f"{probe}\n{policy_cases.render(got)}"
        for s, d in got:
            connection = netpol.Connection.between(world, s, d, T.network, protocol, probe.port)
            assert evaluate.allowed(world, connection, scopes) == got[(s, d)], (s, d, probe)


def _commands(document: dict[str, Any] | None) -> list[dict[str, Any]]:
    assert document is not None
    return document["nftables"]


def test_a_pod_no_policy_isolates_gets_no_table() -> None:
    world = policy_cases.world(T, policy_cases.case("deny-all-ingress").policies(T))
    assert rules.compile_pod(world, "y/a").document is None
    assert rules.compile_pod(world, "x/a").document is not None


def test_the_document_builds_the_table_from_nothing_the_applier_replaces_it_and_replies_pass_first() -> None:
    world = policy_cases.world(T, policy_cases.case("deny-all-ingress").policies(T))
    document = rules.compile_pod(world, "x/a").document
    commands = _commands(document)
    table = {"family": "inet", "name": "podnetwork_policy"}
    assert commands[0] == {"metainfo": {"json_schema_version": 1}}
    assert commands[1] == {"add": {"table": table}}
    assert all("delete" not in c for c in commands)  # one replacement, the applier's
    assert document is not None
    sent = nftables.document(document)["nftables"]
    assert sent[:4] == [commands[0], {"add": {"table": table}}, {"delete": {"table": table}}, {"add": {"table": table}}]
    firsts: dict[str, Any] = {}
    for command in commands:
        rule = command.get("add", {}).get("rule")
        if rule is not None:
            firsts.setdefault(rule["chain"], rule["expr"])
    established = [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}}, {"accept": None}]
    assert firsts["input"] == established
    assert firsts["output"] == established
    invalid = [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "invalid"}}, {"drop": None}]
    assert firsts["ingress_0"] == invalid
    hooks = {c["add"]["chain"]["name"]: c["add"]["chain"].get("hook") for c in commands if "chain" in c.get("add", {})}
    assert hooks == {"input": "input", "output": "output", "ingress_0": None}


def test_only_the_interface_of_the_policy_network_is_touched() -> None:
    """eth0 (the cluster default network), lo and an interface on another network meet no rule."""
    base = policy_cases.world(T, policy_cases.case("deny-all-ingress").policies(T))
    pod = base.pods["x/a"]
    with_more = netpol.pod_info(
        pod.namespace, pod.name, pod.labels, ports=pod.ports,
        interfaces=[
            netpol.interface("default", "eth0", "10.244.0.5"),
            *pod.interfaces,
            netpol.interface(T.other_network, "net2", "10.98.0.5"),
        ],
    )
    world = netpol.World.build([with_more], base.namespaces.values(), base.networks.values(), base.policies)
    document = rules.compile_pod(world, "x/a").document
    assert document is not None
    src = ipaddress.ip_address("10.1.2.3")
    for name, address in (("eth0", "10.244.0.5"), ("net2", "10.98.0.5"), ("lo", "127.0.0.1")):
        packet = nft.Packet(name, src, ipaddress.ip_address(address), "TCP", 80)
        assert nft.passes(document, "input", packet), name
    assert not nft.passes(document, "input", nft.Packet("net1", src, ipaddress.ip_address(T.addresses["x/a"]), "TCP", 80))
    texts = str(document)
    assert "eth0" not in texts and "net2" not in texts and "'lo'" not in texts


def test_established_replies_pass_an_isolated_interface_and_invalid_packets_do_not() -> None:
    world = policy_cases.world(T, policy_cases.case("deny-all-ingress").policies(T))
    document = rules.compile_pod(world, "x/a").document
    reply = nft.Packet("net1", ipaddress.ip_address("10.99.0.21"), ipaddress.ip_address("10.99.0.11"), "TCP", 80, "established")
    assert nft.passes(document, "input", reply)
    assert not nft.passes(document, "input", nft.Packet("net1", reply.source, reply.destination, "TCP", 80, "invalid"))


def test_ip_block_except_is_cut_out_of_the_set_as_disjoint_prefixes() -> None:
    world = policy_cases.world(T, policy_cases.case("ip-block-with-except").policies(T))
    commands = _commands(rules.compile_pod(world, "x/a").document)
    (elements,) = [c["add"]["set"]["elem"] for c in commands if "set" in c.get("add", {})]
    nets = [nft.Table._network(e) for e in elements]
    assert not any(ipaddress.ip_address(T.addresses["y/b"]) in n for n in nets)
    assert sum(n.num_addresses for n in nets) == 256 - 1
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])


def test_a_network_whose_interface_name_is_unknown_is_reported_not_silently_skipped() -> None:
    base = policy_cases.world(T, policy_cases.case("deny-all-ingress").policies(T))
    pod = base.pods["x/a"]
    nameless = netpol.pod_info(pod.namespace, pod.name, pod.labels, interfaces=[netpol.interface(T.network, None, "10.99.0.11")])
    world = netpol.World.build([nameless], base.namespaces.values(), base.networks.values(), base.policies)
    ruleset = rules.compile_pod(world, "x/a")
    assert ruleset.document is None
    assert ruleset.unenforced and "x/deny-all" in ruleset.unenforced[0]


def test_ipv6_peers_get_their_own_set_and_neighbour_discovery_passes() -> None:
    t6 = policy_cases.Topology(subnet="fd00:99::/64", addresses={k: f"fd00:99::{i + 1:x}" for i, k in enumerate(policy_cases.POD_KEYS)})
    world = policy_cases.world(t6, policy_cases.case("allow-from-same-namespace").policies(t6))
    document = rules.compile_pod(world, "x/a").document
    sets = [c["add"]["set"] for c in _commands(document) if "set" in c.get("add", {})]
    assert [s["type"] for s in sets] == ["ipv6_addr"]
    xa, xb, ya = (ipaddress.ip_address(t6.addresses[k]) for k in ("x/a", "x/b", "y/a"))
    assert nft.passes(document, "input", nft.Packet("net1", xb, xa, "TCP", 80))
    assert not nft.passes(document, "input", nft.Packet("net1", ya, xa, "TCP", 80))
    table = nft.Table(document)  # type: ignore[arg-type]
    solicit = {"match": {"op": "==", "left": {"payload": {"protocol": "icmpv6", "field": "type"}}, "right": {"set": list(rules.ND_TYPES)}}}
    assert any(solicit in rule for rule in table.chains["ingress_0"][:2])


def test_an_egress_named_port_resolves_on_each_peer_even_when_their_numbers_differ() -> None:
    base = policy_cases.world(T, policy_cases.case("named-port-egress").policies(T))
    ya = base.pods["y/a"]
    moved = netpol.pod_info(
        ya.namespace, ya.name, ya.labels, interfaces=ya.interfaces,
        ports=[netpol.ContainerPort("serve-80-udp", netpol.Protocol.UDP, 8080)],
    )
    pods = [moved if p.key == "y/a" else p for p in base.pods.values()]
    world = netpol.World.build(pods, base.namespaces.values(), base.networks.values(), base.policies)
    document = rules.compile_pod(world, "x/a").document
    xa, ya_addr, yb = (ipaddress.ip_address(T.addresses[k]) for k in ("x/a", "y/a", "y/b"))
    for dst, port, want in ((ya_addr, 8080, True), (ya_addr, 80, False), (yb, 80, True), (yb, 8080, False)):
        packet = nft.Packet("net1", xa, dst, "UDP", port)
        assert nft.passes(document, "output", packet) is want, (dst, port)
        connection = netpol.Connection("policy-net", xa, dst, netpol.Protocol.UDP, port)
        assert evaluate.allowed(world, connection) is want, (dst, port)


def _without_addresses(world: netpol.World, key: str) -> netpol.World:
    pod = world.pods[key]
    bare = netpol.pod_info(pod.namespace, pod.name, pod.labels, node=pod.node, ports=pod.ports,
                           interfaces=[netpol.PodInterface(i.network, i.interface, ()) for i in pod.interfaces])
    pods = [bare if p.key == key else p for p in world.pods.values()]
    return netpol.World.build(pods, world.namespaces.values(), world.networks.values(), world.policies)


@pytest.mark.parametrize("case", policy_cases.CASES, ids=lambda c: c.name)
def test_a_pod_s_table_does_not_depend_on_its_own_addresses_and_its_peers_still_see_them(case: policy_cases.Case) -> None:
    """The table written at ADD, before the delegates gave the pod an address, is the one a later
    pass compiles with the address (bridge.agent.policy.apply): its own addresses are in no set of its own."""
    world = policy_cases.world(T, case.policies(T))
    documents = _documents(world)
    for key in world.pods:
        assert rules.compile_pod(_without_addresses(world, key), key).document == documents[key], key
    # x/b is its own peer here: left out of its own set, in x/a's.
    same = policy_cases.world(T, policy_cases.case("allow-from-same-namespace").policies(T))
    own = T.addresses["x/b"]
    elements = {key: [e for c in _commands(rules.compile_pod(same, key).document) if "set" in c.get("add", {})
                      for e in c["add"]["set"]["elem"]] for key in ("x/a", "x/b")}
    assert own in elements["x/a"] and own not in elements["x/b"]


def test_nested_networks_are_dropped_and_neighbours_stay_side_by_side() -> None:
    nets = [ipaddress.ip_network(n) for n in ("10.0.0.5/32", "10.0.0.0/24", "10.0.1.0/32", "10.0.1.1/32",
                                               "10.0.0.128/25", "10.0.2.0/24", "10.0.1.0/32")]
    assert rules._merged(nets) == [ipaddress.ip_network(n) for n in ("10.0.0.0/24", "10.0.1.0/32", "10.0.1.1/32",
                                                                     "10.0.2.0/24")]
