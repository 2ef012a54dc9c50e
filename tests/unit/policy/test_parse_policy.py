"""parse_policy (bridge.policy.model): MultiNetworkPolicy as the ecosystem writes it, NetworkPolicy's
defaulting, and clear field errors for bad input; fuzzed: any JSON is parsed or refused with PolicyError."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.policy import PolicyError, PolicyType, Protocol, parse_policy


def _obj(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicy",
        "metadata": {"name": "p", "namespace": "x", **meta},
        "spec": spec,
    }


def _error(spec: dict[str, Any]) -> str:
    with pytest.raises(PolicyError) as info:
        parse_policy(_obj(spec))
    return str(info.value)


UPSTREAM_EXAMPLE = """
{"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
 "metadata": {"name": "test-network-policy", "namespace": "default",
              "annotations": {"k8s.v1.cni.cncf.io/policy-for": "macvlan1-simple"}},
 "spec": {"podSelector": {"matchLabels": {"role": "db"}},
          "policyTypes": ["Ingress", "Egress"],
          "ingress": [{"from": [{"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}},
                                {"namespaceSelector": {"matchLabels": {"project": "myproject"}}},
                                {"podSelector": {"matchLabels": {"role": "frontend"}}}],
                       "ports": [{"protocol": "TCP", "port": 6379}]}],
          "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
                      "ports": [{"protocol": "TCP", "port": 5978, "endPort": 6000}]}]}}
"""


def test_the_ecosystem_example_parses_with_its_wire_names() -> None:
    policy = parse_policy(json.loads(UPSTREAM_EXAMPLE))
    assert policy.key == "default/test-network-policy"
    ingress = policy.spec.ingress
    assert ingress is not None
    assert ingress[0].peers[0].ip_block is not None and ingress[0].peers[0].ip_block.except_ == ("172.17.1.0/24",)
    egress = policy.spec.egress
    assert egress is not None and egress[0].ports is not None
    assert egress[0].ports[0].numeric_range() == (5978, 6000)
    assert policy.spec.effective_policy_types() == {PolicyType.INGRESS, PolicyType.EGRESS}


@pytest.mark.parametrize(
    ("spec", "types"),
    [
        ({"podSelector": {}}, {PolicyType.INGRESS}),
        ({"podSelector": {}, "ingress": [{}]}, {PolicyType.INGRESS}),
        ({"podSelector": {}, "egress": [{}]}, {PolicyType.INGRESS, PolicyType.EGRESS}),
        ({"podSelector": {}, "egress": []}, {PolicyType.INGRESS}),
        ({"podSelector": {}, "policyTypes": ["Egress"], "ingress": [{}]}, {PolicyType.EGRESS}),
        ({"podSelector": {}, "policyTypes": []}, {PolicyType.INGRESS}),
    ],
)
def test_policy_types_default_as_networkpolicy(spec: dict[str, Any], types: set[PolicyType]) -> None:
    assert parse_policy(_obj(spec)).spec.effective_policy_types() == types


def test_a_port_defaults_to_tcp_and_a_namespace_may_come_from_the_caller() -> None:
    obj = _obj({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]})
    del obj["metadata"]["namespace"]
    policy = parse_policy(obj, namespace="y")
    assert policy.namespace == "y"
    assert policy.spec.ingress and policy.spec.ingress[0].ports and policy.spec.ingress[0].ports[0].protocol is Protocol.TCP
    with pytest.raises(PolicyError, match=r"metadata\.namespace: Required value"):
        parse_policy(obj)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]},
         'spec.ingress[0].ports[0].protocol: Invalid value: "ICMP": unknown protocol "ICMP": must be one of TCP, UDP, SCTP'),
        ({"podSelector": {}, "ingress": [{"ports": [{"protocol": "tcp"}]}]}, "ports[0].protocol: Invalid value"),
        ({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]},
         "spec.ingress[0].from[0].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": must be a CIDR"),
        ({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.1"}}]}]},
         "ipBlock.cidr: Invalid value: \"10.0.0.1\": must be a CIDR with a prefix length"),
        ({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}]}]},
         "spec.egress[0].to[0].ipBlock.except[0]: Invalid value: \"10.1.0.0/24\": must be a strict subset of cidr 10.0.0.0/16"),
        ({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.0.0/16"]}}]}]},
         "must be a strict subset"),
        ({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["fd00::/64"]}}]}]},
         "must be a strict subset"),
        ({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]},
         "spec.ingress[0].from[0]: Forbidden: may not specify both ipBlock and another peer"),
        ({"podSelector": {}, "ingress": [{"from": [{}]}]}, "spec.ingress[0].from[0]: Required value: must specify a peer"),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
         "spec.podSelector.matchExpressions[0].values: Required value: must be non-empty with operator In"),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]}},
         "matchExpressions[0].values: Forbidden: must be empty with operator Exists"),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}},
         'matchExpressions[0].operator: Invalid value: "Has": unknown operator'),
        ({"podSelector": {"matchLabels": {"bad key!": "v"}}}, "spec.podSelector.matchLabels: Invalid value: \"bad key!\""),
        ({"podSelector": {"matchLabels": {"k": "-v"}}}, "spec.podSelector.matchLabels[k]: Invalid value: \"-v\""),
        ({"podSelector": {"matchLabels": {"k": 1}}}, "spec.podSelector.matchLabels.k: Invalid value: 1"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": True}]}]},
         "ports[0].port: Invalid value: true: must be a port number or a container port's name, not a boolean"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": 1.5}]}]}, "ports[0].port: Invalid value: 1.5"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": 0}]}]}, "ports[0].port: Invalid value: 0: must be between 1 and 65535"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": 65536}]}]}, "must be between 1 and 65535"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": "80"}]}]}, "a numeric port is written as a number"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": "HTTP"}]}]}, "a port name must be lower-case"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": "a-very-long-port-name"}]}]}, "at most 15 characters"),
        ({"podSelector": {}, "ingress": [{"ports": [{"endPort": 90}]}]},
         "spec.ingress[0].ports[0].port: Required value: endPort needs a numeric port"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": "http", "endPort": 90}]}]}, "endPort needs a numeric port"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": 90, "endPort": 80}]}]},
         "spec.ingress[0].ports[0].endPort: Invalid value: 80: must be greater than or equal to port"),
        ({"podSelector": {}, "policyTypes": ["ingress"]}, 'unknown policy type "ingress": must be Ingress or Egress'),
        ({"podSelector": {}, "policyTypes": ["Ingress", "Ingress"]}, "spec.policyTypes: Invalid value"),
        ({}, "spec.podSelector: Required value"),
        ({"podSelector": {}, "ingress": [{"form": []}]}, "spec.ingress[0].form: Forbidden: unknown field"),
    ],
)
def test_bad_input_gets_an_error_naming_the_field(spec: dict[str, Any], message: str) -> None:
    assert message in _error(spec)


def test_every_error_is_reported_at_once() -> None:
    text = _error({"podSelector": {}, "ingress": [{"ports": [{"port": 0}, {"port": 90, "endPort": 80}],
                                                  "from": [{"ipBlock": {"cidr": "x"}}]}]})
    assert "ports[0].port" in text and "ports[1].endPort" in text and "ipBlock.cidr" in text


def test_another_kind_or_version_is_refused() -> None:
    obj = _obj({"podSelector": {}})
    obj["apiVersion"] = "k8s.cni.cncf.io/v1"
    with pytest.raises(PolicyError, match=r"apiVersion: Invalid value: \"k8s\.cni\.cncf\.io/v1\": must be k8s\.cni\.cncf\.io/v1beta1"):
        parse_policy(obj)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)
KEYS = st.sampled_from(["podSelector", "namespaceSelector", "ipBlock", "cidr", "except", "ports", "port", "endPort",
                        "protocol", "from", "to", "ingress", "egress", "policyTypes", "matchLabels", "matchExpressions",
                        "key", "operator", "values"])
SHAPED = st.recursive(
    st.none() | st.integers(-5, 70000) | st.sampled_from(["TCP", "UDP", "x", "In", "Exists", "10.0.0.0/8", "10.1.0.0/16", "http", "Ingress"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON, SHAPED.map(lambda spec: {"metadata": {"namespace": "x"}, "spec": spec})))
def test_any_json_is_parsed_or_refused_with_a_policy_error(value: Any) -> None:
    try:
        policy = parse_policy(value)
    except PolicyError as exc:
        assert exc.errors and str(exc)
    else:
        policy.spec.effective_policy_types()
