"""The bridge's CRDs: NetworkSelectionOptions agrees with bridge.npwg's rules, and the
NetworkAttachmentDefinition CRD takes the NPWG spec's examples (3.2.x)."""

from __future__ import annotations

import json
from typing import Any

import celpy
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import npwg, translate
from tests.unit.crd_support import crd, openapi_schema, schema_errors, to_json_schema

NSO_CRD = crd("networkselectionoptions.yaml")
NAD_CRD = crd("network-attachment-definitions.yaml")
_CEL = celpy.Environment()


def nso(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": translate.OPTIONS_API_VERSION, "kind": translate.OPTIONS_KIND,
            "metadata": {"name": "o", "namespace": "app"}, "spec": spec}


def _escape(value: Any) -> Any:
    """Kubernetes CEL sees property names with '-' as '__dash__'."""
    if isinstance(value, dict):
        return {k.replace("-", "__dash__"): _escape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape(v) for v in value]
    return value


def cel_messages(spec: dict[str, Any]) -> list[str]:
    schema = openapi_schema(NSO_CRD)["properties"]["spec"]
    nodes = [(schema, spec)] + [(schema["properties"][k], spec[k]) for k in spec if k in schema["properties"]]
    out = []
    for sub, node in nodes:
        for rule in sub.get("x-kubernetes-validations") or []:
            program = _CEL.program(_CEL.compile(rule["rule"]))
            if not bool(program.evaluate({"self": celpy.json_to_cel(_escape(node))})):
                out.append(rule["message"])
    return out


def refusals(spec: dict[str, Any]) -> list[str]:
    return schema_errors(NSO_CRD, nso(spec)) + cel_messages(spec)


def test_networkselectionoptions_crd_names_and_keys_match_the_translation() -> None:
    assert NSO_CRD["spec"]["group"] == translate.OPTIONS_GROUP
    assert NSO_CRD["spec"]["names"]["kind"] == translate.OPTIONS_KIND
    assert NSO_CRD["spec"]["names"]["plural"] == translate.OPTIONS_PLURAL
    assert NSO_CRD["spec"]["scope"] == "Namespaced"
    assert [v["name"] for v in NSO_CRD["spec"]["versions"]] == [translate.OPTIONS_VERSION]
    assert set(openapi_schema(NSO_CRD)["properties"]["spec"]["properties"]) == set(translate.OPTIONS_KEYS)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        pytest.param({"mac": "02:00:00:00:00"}, "mac", id="NPWG 4.1.2.1.4 5-byte MAC"),
        pytest.param({"ips": []}, "ips", id="NPWG 4.1.2.1.3 empty ips"),
        pytest.param({"portMappings": [{"hostPort": 0, "containerPort": 80}]}, "hostPort",
                     id="NPWG 4.1.2.1.7 port 0"),
        pytest.param({"portMappings": [{"hostPort": 80}]}, "containerPort", id="NPWG 4.1.2.1.7 containerPort"),
        pytest.param({"portMappings": [{"hostPort": 8, "containerPort": 8, "protocol": "icmp"}]}, "protocol",
                     id="NPWG 4.1.2.1.7 protocol"),
        pytest.param({"bandwidth": {"ingressBurst": 5}}, "ingressBurst requires ingressRate",
                     id="NPWG 4.1.2.1.8 burst without rate"),
        pytest.param({"bandwidth": {"egressRate": 0}}, "egressRate", id="NPWG 4.1.2.1.8 zero rate"),
        pytest.param({"infiniband-guid": "00:11"}, "infiniband-guid", id="NPWG 4.1.2.1.10 short GUID"),
        pytest.param({"ips": ["10.0.0.1"], "ipam-claim-reference": "c"}, "may not be set together",
                     id="NPWG 4.1.2.1.11 ips and claim"),
        pytest.param({"interface": "net1"}, "interface", id="interface is the pod's interfaceName"),
    ],
)
def test_networkselectionoptions_crd_refuses_what_the_spec_calls_invalid(spec: dict, needle: str) -> None:
    found = refusals(spec)
    assert [m for m in found if needle in m], found
    assert translate.options_problem(spec) is not None  # and the bridge agrees


hexbyte = st.integers(0, 255).map(lambda b: f"{b:02x}")
ports = st.integers(1, 65535)
valid_specs = st.fixed_dictionaries({}, optional={
    "ips": st.lists(st.ip_addresses().map(str), min_size=1, max_size=3),
    "mac": st.lists(hexbyte, min_size=6, max_size=6).map(":".join),
    "cni-args": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    "portMappings": st.lists(st.fixed_dictionaries(
        {"hostPort": ports, "containerPort": ports}, optional={"protocol": st.sampled_from(["tcp", "UDP", "Sctp"])}),
        min_size=1, max_size=2),
    "bandwidth": st.fixed_dictionaries({"egressRate": st.integers(1, 10**9)},
                                       optional={"egressBurst": st.integers(1, 10**9)}),
    "infiniband-guid": st.lists(hexbyte, min_size=8, max_size=8).map(":".join),
    "default-route": st.lists(st.ip_addresses().map(str), max_size=2),
})


@settings(max_examples=60, deadline=None)
@given(valid_specs)
def test_networkselectionoptions_crd_accepts_everything_the_bridge_accepts(spec: dict) -> None:
    assert translate.options_problem(spec) is None
    assert refusals(spec) == []


def nad_errors(obj: dict[str, Any]) -> list[str]:
    (version,) = NAD_CRD["spec"]["versions"]
    schema = to_json_schema(version["schema"]["openAPIV3Schema"])
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)]


SPEC_3_2_1 = {"cniVersion": "0.3.0", "name": "a-bridge-network", "type": "bridge", "bridge": "br0",
              "isGateway": True, "ipam": {"type": "host-local", "subnet": "192.168.5.0/24",
                                          "dataDir": "/mnt/cluster-ipam"}}


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"config": json.dumps(SPEC_3_2_1)}, id="NPWG 3.2.1 CNI config in the object"),
        pytest.param({"config": '{"cniVersion": "0.3.0", "type": "awesome-plugin"}'}, id="NPWG 3.2.3 thick plugin"),
        pytest.param(None, id="NPWG 3.2.4 implementation-specific reference without spec"),
    ],
)
def test_nad_crd_accepts_the_spec_examples(spec: dict | None) -> None:
    obj: dict[str, Any] = {"apiVersion": npwg.NAD_API_VERSION, "kind": npwg.NAD_KIND,
                           "metadata": {"name": "a-bridge-network"}}
    if spec is not None:
        obj["spec"] = spec
    assert nad_errors(obj) == []


def test_nad_crd_names_are_those_of_spec_3_1() -> None:
    names = NAD_CRD["spec"]["names"]
    assert NAD_CRD["metadata"]["name"] == f"{npwg.NAD_PLURAL}.{npwg.NAD_GROUP}"
    assert (NAD_CRD["spec"]["group"], NAD_CRD["spec"]["scope"]) == (npwg.NAD_GROUP, "Namespaced")
    assert (names["kind"], names["plural"], names["singular"], names["shortNames"]) == (
        npwg.NAD_KIND, npwg.NAD_PLURAL, npwg.NAD_SINGULAR, [npwg.NAD_SHORT])
    assert [v["name"] for v in NAD_CRD["spec"]["versions"]] == [npwg.NAD_VERSION]
    obj = {"apiVersion": npwg.NAD_API_VERSION, "kind": npwg.NAD_KIND, "metadata": {"name": "x"},
           "spec": {"config": {"type": "bridge"}}}
    assert nad_errors(obj)  # config is a string of JSON, not an object
