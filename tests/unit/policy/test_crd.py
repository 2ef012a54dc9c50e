"""crds/multi-networkpolicy.yaml: the ecosystem's coordinates, a structural schema the API server
accepts (kubernetes-validate), and offline schema validation (tests/unit/crd_support.py) that
accepts every policy of the truth tables and refuses what the schema can say."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from kubernetes_validate import utils as kubernetes_validate

from bridge.policy import PolicyError, parse_policy
from podnetwork.ground import constants
from tests import policy_cases
from tests.unit.crd_support import FORMATS, apply_defaults, crd, to_json_schema, version_of
from tests.unit.policy.test_parse_policy import UPSTREAM_EXAMPLE

CRD = crd("multi-networkpolicy.yaml")
SCHEMA = version_of(CRD, constants.POLICY_VERSION)["schema"]["openAPIV3Schema"]


def schema_errors(obj: dict[str, Any]) -> list[str]:
    value = apply_defaults(SCHEMA, copy.deepcopy(obj))
    validator = jsonschema.Draft202012Validator(to_json_schema(SCHEMA), format_checker=FORMATS)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]


def test_the_crd_has_the_ecosystem_coordinates() -> None:
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == f"{constants.POLICY_PLURAL}.{constants.POLICY_GROUP}"
    assert (spec["group"], spec["scope"]) == (constants.POLICY_GROUP, "Namespaced")
    assert spec["names"]["kind"] == constants.POLICY_KIND
    assert spec["names"]["plural"] == constants.POLICY_PLURAL
    assert spec["names"]["shortNames"] == [constants.POLICY_SHORT]
    assert [v["name"] for v in spec["versions"]] == [constants.POLICY_VERSION]


def test_the_crd_is_a_valid_custom_resource_definition() -> None:
    kubernetes_validate.validate(CRD, "1.36", strict=True)


def _nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, sub in (node.get("properties") or {}).items():
        found += _nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += _nodes(node["items"], f"{path}[*]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _nodes(node["additionalProperties"], f"{path}{{*}}")
    return found


def test_the_schema_is_structural() -> None:
    for path, node in _nodes(SCHEMA):
        if node.get("x-kubernetes-int-or-string"):
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}] and "type" not in node, path
        else:
            assert node.get("type") in ("object", "array", "string", "integer"), path


def _case_policies() -> list[dict[str, Any]]:
    t = policy_cases.DEFAULT_TOPOLOGY
    return [p for c in policy_cases.CASES for p in c.policies(t)] + [json.loads(UPSTREAM_EXAMPLE)]


@pytest.mark.parametrize("obj", _case_policies(), ids=lambda o: o["metadata"]["name"])
def test_the_schema_and_the_parser_accept_every_policy_of_the_cases(obj: dict[str, Any]) -> None:
    assert schema_errors(obj) == []
    parse_policy(obj)


def _with(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": constants.POLICY_API_VERSION, "kind": constants.POLICY_KIND,
            "metadata": {"name": "p", "namespace": "x"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]}, "spec.ingress.0.ports.0.protocol"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": True}]}]}, "spec.ingress.0.ports.0.port"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": {"n": 1}}]}]}, "spec.ingress.0.ports.0.port"),
        ({"podSelector": {}, "ingress": [{"ports": [{"port": 80, "endPort": 70000}]}]}, "spec.ingress.0.ports.0.endPort"),
        ({"podSelector": {}, "policyTypes": ["ingress"]}, "spec.policyTypes.0"),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}, "spec.podSelector.matchExpressions.0.operator"),
        ({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"except": ["10.0.0.0/8"]}}]}]}, "spec.egress.0.to.0.ipBlock"),
        ({"ingress": []}, "spec"),
        ({"podSelector": {}, "ingress": [{"from": [{"podSelectr": {}}]}]}, "spec.ingress.0.from.0"),
    ],
)
def test_the_schema_refuses_what_it_can_say_and_so_does_the_parser(spec: dict[str, Any], where: str) -> None:
    errors = schema_errors(_with(spec))
    assert any(e.startswith(f"{where}:") for e in errors), errors
    with pytest.raises(PolicyError):
        parse_policy(_with(spec))


def test_the_protocol_defaults_to_tcp_in_the_schema_as_in_the_parser() -> None:
    obj = _with({"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}]})
    assert apply_defaults(SCHEMA, copy.deepcopy(obj))["spec"]["ingress"][0]["ports"][0]["protocol"] == "TCP"
