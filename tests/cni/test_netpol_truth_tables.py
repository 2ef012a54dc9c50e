"""The upstream netpol truth tables with real packets: the rule compiler's tables (bridge.policy.rules),
applied by bridge.agent.netns.nftables in the pods of a node namespace of the test
(tests/cni/netpol_support.py: real bridge and host-local plugins, x/y/z x a/b/c), give the
probe matrix each case of tests/policy_cases.py expects, on the policies' network (net1)
while eth0 stays open; and, on random policies, the matrix the reference evaluator
(bridge.policy.evaluate) decides.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge import policy as netpol
from bridge.policy import evaluate, rules, scope
from tests import policy_cases
from tests.cni.netpol_support import Matrix, Node, Probe, standing

pytestmark = pytest.mark.cni

NETWORK = "net1"


@pytest.fixture(scope="module")
def module_node(cni_host: list[Path]) -> Iterator[Node]:
    with standing(cni_host) as node:
        yield node


@pytest.fixture
def node(module_node: Node) -> Iterator[Node]:
    try:
        yield module_node
    finally:
        module_node.remove_all()


def topology(node: Node) -> policy_cases.Topology:
    """The cases' topology on this node: net1's subnet and the pods' addresses there."""
    addresses = {key: pod.addresses[NETWORK] for key, pod in node.pods.items()}
    return policy_cases.Topology(subnet=str(_subnet(next(iter(addresses.values())))), addresses=addresses)


def _subnet(address: str) -> str:
    return address.rsplit(".", 1)[0] + ".0/24"


def enforce(node: Node, t: policy_cases.Topology, policies: list[dict[str, Any]]) -> netpol.World:
    """Each pod's compiled table applied (or ours removed where it needs none); the world compiled from."""
    world = policy_cases.world(t, policies)
    scopes = scope.scopes(world)
    node.enforce({key: rules.compile_pod(world, key, scopes).document for key in node.pods})
    # A table judges new connections; established ones survive it by design (rules.py). The
    # matrix asks about new ones only.
    node.forget_connections()
    return world


def probe_of(p: policy_cases.Probe) -> Probe:
    return Probe(p.protocol, p.port or 0)


@pytest.mark.parametrize("case", policy_cases.CASES, ids=lambda c: c.name)
def test_the_real_matrix_is_the_truth_table(node: Node, case: policy_cases.Case) -> None:
    t = topology(node)
    enforce(node, t, case.policies(t))

    probes = [probe_of(p) for p in case.expected]
    expected = Matrix.expect(list(node.pods), probes, lambda s, d, p: next(
        reach for q, reach in case.expected.items() if probe_of(q) == p).allowed(s, d))
    assert not (diff := node.probe(probes, network=NETWORK).diff(expected)), f"{case.description}\n{diff}"
    # The policies name net1 only: the cluster default network stays open.
    eth0 = node.probe(probes[:1], network="eth0", sources=["x/a", "y/b"])
    assert all(eth0.connected.values()), eth0.connected


# --- random policies against the reference evaluator ---------------------------------------------

LABELS = st.sampled_from([{}, {"pod": "a"}, {"pod": "b"}, {"pod": "c"}])
NS_LABELS = st.sampled_from([{"ns": "x"}, {"ns": "y"}, {"ns": "z"}, {}])
PORTS = st.sampled_from([
    {"protocol": "TCP", "port": 80}, {"protocol": "TCP", "port": 81}, {"protocol": "UDP", "port": 80},
    {"port": "serve-81-tcp"}, {"protocol": "UDP", "port": "serve-81-udp"}, {"protocol": "TCP", "port": 79, "endPort": 80},
])


@st.composite
def peers(draw: st.DrawFn, t: policy_cases.Topology) -> dict[str, Any]:
    kind = draw(st.sampled_from(["pod", "namespace", "both", "block"]))
    if kind == "pod":
        return {"podSelector": {"matchLabels": draw(LABELS)}}
    if kind == "namespace":
        return {"namespaceSelector": {"matchLabels": draw(NS_LABELS)}}
    if kind == "both":
        return {"podSelector": {"matchLabels": draw(LABELS)}, "namespaceSelector": {"matchLabels": draw(NS_LABELS)}}
    excluded = draw(st.lists(st.sampled_from(policy_cases.POD_KEYS), max_size=2, unique=True))
    return {"ipBlock": {"cidr": t.subnet, "except": [t.host(k) for k in excluded]}}


@st.composite
def random_policies(draw: st.DrawFn, t: policy_cases.Topology) -> list[dict[str, Any]]:
    policies = []
    for i in range(draw(st.integers(1, 3))):
        spec: dict[str, Any] = {"podSelector": {"matchLabels": draw(LABELS)},
                                "policyTypes": draw(st.sampled_from([["Ingress"], ["Egress"], ["Ingress", "Egress"]]))}
        for direction, key in (("Ingress", "from"), ("Egress", "to")):
            if direction in spec["policyTypes"]:
                spec[direction.lower()] = [
                    {k: v for k, v in (("ports", draw(st.lists(PORTS, max_size=2))),
                                       (key, draw(st.lists(peers(t), max_size=2)))) if v}
                    for _ in range(draw(st.integers(0, 2)))]
        policies.append(policy_cases.policy(t, draw(st.sampled_from(policy_cases.NAMESPACES)), f"p{i}", spec))
    return policies


PROBES = (policy_cases.TCP80, policy_cases.TCP81, policy_cases.UDP80, policy_cases.ICMP)


def test_on_random_policies_the_real_matrix_is_the_evaluators(module_node: Node) -> None:
    node = module_node
    t = topology(node)

    @settings(max_examples=8, deadline=None, derandomize=False, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(random_policies(t))
    def check(policies: list[dict[str, Any]]) -> None:
        world = enforce(node, t, policies)
        probes = [probe_of(p) for p in PROBES]

        def decided(s: str, d: str, p: Probe) -> bool:
            protocol: netpol.ConnectionProtocol = netpol.ICMP if p.protocol == "ICMP" else netpol.Protocol(p.protocol)
            return evaluate.allowed(world, netpol.Connection.between(world, s, d, t.network, protocol, p.port or None))

        expected = Matrix.expect(list(node.pods), probes, decided)
        assert not (diff := node.probe(probes, network=NETWORK).diff(expected)), f"{policies}\n{diff}"

    try:
        check()
    finally:
        node.remove_all()
