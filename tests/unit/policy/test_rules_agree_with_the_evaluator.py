"""Random policies over the x/y/z × a/b/c topology: the compiled nftables rules, walked packet by
packet (tests/unit/nftables_support.py), allow exactly what the reference evaluator allows,
for every pair of pods and every probe. Hypothesis, bounded in examples."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import policy as netpol
from bridge.policy import evaluate, rules, scope
from tests import policy_cases
from tests.policy_cases import DEFAULT_TOPOLOGY as T
from tests.unit import nftables_support as nft

LABEL_SELECTORS = st.sampled_from([
    {}, {"matchLabels": {"pod": "a"}}, {"matchLabels": {"pod": "b"}},
    {"matchExpressions": [{"key": "pod", "operator": "NotIn", "values": ["c"]}]},
    {"matchExpressions": [{"key": "pod", "operator": "Exists"}]},
])
NAMESPACE_SELECTORS = st.sampled_from([
    {}, {"matchLabels": {"ns": "y"}}, {"matchExpressions": [{"key": "ns", "operator": "In", "values": ["x", "z"]}]},
    {"matchExpressions": [{"key": "ns", "operator": "DoesNotExist"}]},
])
CIDRS = st.sampled_from([
    {"cidr": T.subnet}, {"cidr": T.host("y/a")}, {"cidr": "10.99.0.16/28", "except": [T.host("y/b")]},
    {"cidr": T.subnet, "except": ["10.99.0.32/28"]}, {"cidr": "10.0.0.0/8", "except": ["10.99.0.0/26"]},
])
PEERS = st.one_of(
    st.builds(lambda p: {"podSelector": p}, LABEL_SELECTORS),
    st.builds(lambda n: {"namespaceSelector": n}, NAMESPACE_SELECTORS),
    st.builds(lambda p, n: {"podSelector": p, "namespaceSelector": n}, LABEL_SELECTORS, NAMESPACE_SELECTORS),
    st.builds(lambda b: {"ipBlock": b}, CIDRS),
)
PORTS = st.sampled_from([
    {"port": 80}, {"port": 81, "protocol": "TCP"}, {"protocol": "UDP"}, {"port": "serve-81-tcp"},
    {"port": "serve-80-udp", "protocol": "UDP"}, {"port": 79, "endPort": 80}, {"protocol": "SCTP"},
])
RULES = st.fixed_dictionaries({}, optional={"ports": st.lists(PORTS, max_size=2), "peers": st.lists(PEERS, max_size=2)})


def _rule(raw: dict[str, Any], key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "ports" in raw:
        out["ports"] = raw["ports"]
    if "peers" in raw:
        out[key] = raw["peers"]
    return out


POLICIES = st.builds(
    lambda ns, sel, types, ingress, egress, net: policy_cases.policy(
        T, ns, "p", {
            "podSelector": sel,
            **({"policyTypes": types} if types is not None else {}),
            **({"ingress": [_rule(r, "from") for r in ingress]} if ingress is not None else {}),
            **({"egress": [_rule(r, "to") for r in egress]} if egress is not None else {}),
        },
        network=net,
    ),
    st.sampled_from(policy_cases.NAMESPACES),
    LABEL_SELECTORS,
    st.one_of(st.none(), st.sampled_from([["Ingress"], ["Egress"], ["Ingress", "Egress"]])),
    st.one_of(st.none(), st.lists(RULES, max_size=2)),
    st.one_of(st.none(), st.lists(RULES, max_size=2)),
    st.sampled_from([T.network, T.network, T.other_network]),
)
PROBES = [policy_cases.TCP80, policy_cases.TCP81, policy_cases.UDP80, policy_cases.ICMP, policy_cases.Probe("SCTP", 80)]


@settings(max_examples=60, deadline=None)
@given(st.lists(POLICIES, min_size=1, max_size=3))
def test_the_compiled_rules_allow_exactly_what_the_evaluator_allows(policies: list[dict[str, Any]]) -> None:
    for i, p in enumerate(policies):
        p["metadata"]["name"] = f"p{i}"
    world = policy_cases.world(T, policies)
    scopes = scope.scopes(world)
    documents = {key: rules.compile_pod(world, key, scopes).document for key in world.pods}
    tables = {key: nft.Table(doc) if doc else None for key, doc in documents.items()}
    for probe in PROBES:
        protocol: netpol.ConnectionProtocol = netpol.ICMP if probe.protocol == "ICMP" else netpol.Protocol(probe.protocol)
        for s in policy_cases.POD_KEYS:
            for d in policy_cases.POD_KEYS:
                if s == d:
                    continue
                connection = netpol.Connection.between(world, s, d, T.network, protocol, probe.port)
                packet = nft.Packet("net1", connection.source, connection.destination, probe.protocol, probe.port)
                out, into = tables[s], tables[d]
                through = (out is None or out.passes("output", packet)) and (into is None or into.passes("input", packet))
                assert through == evaluate.allowed(world, connection, scopes), (s, d, str(probe))
