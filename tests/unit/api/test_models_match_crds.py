"""The pydantic models (podnetwork/kep/api.py) and the CRD schemas (crds/) agree field
by field: same property names, required sets, types, limits and defaults.

Allowed differences, each listed here and checked to be deliberate:
- `format` (date-time, int64) is only in the CRDs: the models keep timestamps as
  the strings the API server sends.
- `required`: metav1.Condition's `message` is required by the CRD (as upstream)
  while the model defaults it to "" and always writes it, so every object the
  model produces satisfies the CRD.
- `metadata` is opaque in the CRDs (the API server validates it itself).
- `spec.podNetworkName` of the attachment has a DNS-1123 `pattern` in the CRD; the
  model leaves that rule to `podnetwork.kep.validation` for a clearer message.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from podnetwork.ground import constants
from podnetwork.kep import api, validation
from tests.unit.crd_support import crd, defaulted, openapi_schema

CASES = [
    (api.PodNetwork, "podnetworks.yaml"),
    (api.PodNetworkAttachment, "podnetworkattachments.yaml"),
]
LIMITS = ("minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems", "pattern", "enum")
#: (path, keyword) constraints only the CRD has, with the reason in the module docstring.
CRD_ONLY = {("spec.podNetworkName", "pattern")}


def resolve(schema: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The model's schema for one field without `$ref`/`Optional` wrapping; and nullable."""
    nullable = False
    if "anyOf" in schema:
        variants = [v for v in schema["anyOf"] if v.get("type") != "null"]
        nullable = len(variants) < len(schema["anyOf"])
        assert len(variants) == 1, schema
        schema = {**{k: v for k, v in schema.items() if k != "anyOf"}, **variants[0]}
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[1]]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema, nullable


def model_type(schema: dict[str, Any]) -> str:
    if "type" in schema:
        return schema["type"]
    if "const" in schema:  # Literal with one value (apiVersion, kind)
        return "string"
    raise AssertionError(f"no type in {schema}")


def compare(model: dict[str, Any], crd_node: dict[str, Any], defs: dict[str, Any], path: str) -> list[str]:
    problems = []
    model, _ = resolve(model, defs)
    where = path or "<root>"
    if model_type(model) != crd_node["type"]:
        problems.append(f"{where}: type {model_type(model)} (model) != {crd_node['type']} (CRD)")
        return problems
    for key in LIMITS:
        if model.get(key) != crd_node.get(key) and (path, key) not in CRD_ONLY:
            if key == "enum" and model.get("const") is not None:
                continue
            problems.append(f"{where}: {key} {model.get(key)!r} (model) != {crd_node.get(key)!r} (CRD)")
    if crd_node["type"] == "array":
        problems += compare(model["items"], crd_node["items"], defs, f"{path}[*]")
    if crd_node["type"] == "object" and path != "metadata":
        model_props = model.get("properties", {})
        crd_props = crd_node.get("properties", {})
        if set(model_props) != set(crd_props):
            problems.append(f"{where}: properties {sorted(model_props)} (model) != {sorted(crd_props)} (CRD)")
        model_required = set(model.get("required", []))
        crd_required = set(crd_node.get("required", []))
        if not model_required <= crd_required:
            problems.append(f"{where}: model requires {sorted(model_required - crd_required)}, CRD does not")
        for name in crd_required - model_required:
            field, _ = resolve(model_props.get(name, {}), defs)
            if field.get("default") is None:
                problems.append(f"{where}.{name}: required by the CRD, optional without a default in the model")
        for name in set(model_props) & set(crd_props):
            sub = f"{path}.{name}" if path else name
            field, _ = resolve(model_props[name], defs)
            crd_field = crd_props[name]
            # A default must be the same on both sides, unless the CRD requires the
            # field (then the model's default only fills what the CRD insists on).
            model_default, crd_default = field.get("default"), crd_field.get("default")
            # (apiVersion and kind are constants of the model, not defaults of a field.)
            if crd_field["type"] != "object" and "const" not in field and model_default != crd_default and not (
                crd_default is None and name in crd_required
            ):
                problems.append(f"{sub}: default {model_default!r} (model) != {crd_default!r} (CRD)")
            problems += compare(model_props[name], crd_field, defs, sub)
    return problems


@pytest.mark.parametrize(("model", "crd_file"), CASES, ids=[c[1] for c in CASES])
def test_model_and_crd_schema_agree_field_by_field(model, crd_file):
    schema = model.model_json_schema(by_alias=True)
    assert compare(schema, openapi_schema(crd(crd_file)), schema.get("$defs", {}), "") == []


def test_comparison_notices_a_difference():
    # The comparison itself must be able to fail: a CRD with a changed limit, an
    # extra field and a dropped requirement is reported on each point.
    schema = api.PodNetworkAttachment.model_json_schema(by_alias=True)
    crd_schema = openapi_schema(crd("podnetworkattachments.yaml"))
    spec = crd_schema["properties"]["spec"]
    broken = {**crd_schema, "properties": {**crd_schema["properties"], "spec": {
        **spec, "required": [],
        "properties": {**spec["properties"], "extra": {"type": "string"},
                       "podNetworkName": {**spec["properties"]["podNetworkName"], "maxLength": 63}},
    }}}
    problems = compare(schema, broken, schema["$defs"], "")
    assert problems == [
        "spec: properties ['parametersRefs', 'podNetworkName'] (model) != "
        "['extra', 'parametersRefs', 'podNetworkName'] (CRD)",
        "spec: model requires ['podNetworkName'], CRD does not",
        "spec.podNetworkName: maxLength 253 (model) != 63 (CRD)",
    ]


def test_defaulted_spec_of_crd_is_the_models_default_spec():
    bare = {"apiVersion": constants.API_VERSION, "kind": "PodNetwork", "metadata": {"name": "n"}}
    assert defaulted(crd("podnetworks.yaml"), bare)["spec"] == api.PodNetwork().spec.to_dict()


def test_crd_only_pattern_is_enforced_by_static_validation():
    obj = {"apiVersion": constants.API_VERSION, "kind": "PodNetworkAttachment",
           "metadata": {"name": "a", "namespace": "ns"}, "spec": {"podNetworkName": "DataPlane"}}
    assert [e.path for e in validation.validate_attachment(obj)] == ["spec.podNetworkName"]


def test_comparison_notices_a_changed_default_and_a_condition_limit():
    schema = api.PodNetwork.model_json_schema(by_alias=True)
    broken = copy.deepcopy(openapi_schema(crd("podnetworks.yaml")))
    broken["properties"]["spec"]["properties"]["enabled"]["default"] = False
    conditions = broken["properties"]["status"]["properties"]["conditions"]
    conditions["items"]["properties"]["reason"]["maxLength"] = 64
    conditions["items"]["properties"]["status"]["enum"] = ["True", "False"]
    assert sorted(compare(schema, broken, schema["$defs"], "")) == [
        "spec.enabled: default True (model) != False (CRD)",
        "status.conditions[*].reason: maxLength 1024 (model) != 64 (CRD)",
        "status.conditions[*].status: enum ['True', 'False', 'Unknown'] (model) != ['True', 'False'] (CRD)",
    ]
