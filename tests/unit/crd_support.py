"""What the API server does with a CRD, done offline for the tests of crds/ (tests/unit/api, bridge, migrate).

- `schema_errors`: structural defaulting, then the CRD's own openAPIV3Schema
  converted to JSON Schema and checked with `jsonschema`, plus the list-map key
  uniqueness JSON Schema cannot express.
- `cel_errors`: the CRD's `x-kubernetes-validations` evaluated with cel-python,
  with `self` / `oldSelf` bound the way the API server binds them.
- `vap_errors`: a ValidatingAdmissionPolicy's expressions for one request.

Conversion notes (OpenAPI v3 as Kubernetes uses it -> JSON Schema 2020-12):
`x-kubernetes-*`, `description` and `default` are not validation keywords and
are dropped (defaults are applied first, as the API server does); an object
schema with `properties` gets `additionalProperties: false`, because the
API server's strict field validation (kubectl's default) refuses unknown fields
rather than pruning them; `format: date-time` and `int64` are checked by a
format checker of our own.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
EXAMPLES = ROOT / "examples"

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)
FORMATS = jsonschema.FormatChecker(formats=())


@FORMATS.checks("date-time")
def _date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(_RFC3339.match(value))


@FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def crd(name: str) -> dict[str, Any]:
    (doc,) = load_yaml_documents(CRDS / name)
    return doc


def version_of(crd_doc: dict[str, Any], version: str = "v1alpha1") -> dict[str, Any]:
    (found,) = [v for v in crd_doc["spec"]["versions"] if v["name"] == version]
    return found


def openapi_schema(crd_doc: dict[str, Any]) -> dict[str, Any]:
    return version_of(crd_doc)["schema"]["openAPIV3Schema"]


def to_json_schema(node: Any) -> Any:
    """OpenAPI v3 (Kubernetes' structural subset) -> JSON Schema."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("description", "default", "nullable"):
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = to_json_schema(value)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable"):
        out["type"] = [node["type"], "null"]
    if (
        node.get("type") == "object"
        and "properties" in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
        and "additionalProperties" not in node
    ):
        out["additionalProperties"] = False
    return out


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting: unset properties with a `default` get it, recursively."""
    if isinstance(value, dict) and "properties" in schema:
        for name, sub in schema["properties"].items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def _walk(schema: dict[str, Any], value: Any, path: str) -> Iterator[tuple[str, dict[str, Any], Any]]:
    yield path, schema, value
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                yield from _walk(sub, value[name], f"{path}.{name}" if path else name)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _walk(schema["items"], item, f"{path}[{i}]")


def list_map_errors(schema: dict[str, Any], value: Any) -> list[str]:
    errors = []
    for path, sub, node in _walk(schema, value, ""):
        if sub.get("x-kubernetes-list-type") == "map" and isinstance(node, list):
            keys = sub["x-kubernetes-list-map-keys"]
            seen = set()
            for i, item in enumerate(node):
                key = tuple(item.get(k) for k in keys) if isinstance(item, dict) else None
                if key in seen:
                    errors.append(f"{path}[{i}]: Duplicate value: {dict(zip(keys, key, strict=True))}")
                seen.add(key)
    return errors


def defaulted(crd_doc: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    return apply_defaults(openapi_schema(crd_doc), copy.deepcopy(obj))


def schema_errors(crd_doc: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    """What the API server's schema validation says about `obj` (after defaulting)."""
    schema = openapi_schema(crd_doc)
    value = defaulted(crd_doc, obj)
    validator = jsonschema.Draft202012Validator(to_json_schema(schema), format_checker=FORMATS)
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    ]
    return errors + list_map_errors(schema, value)


_ENV = celpy.Environment()


def cel(expression: str, activation: dict[str, Any]) -> Any:
    program = _ENV.program(_ENV.compile(expression))
    return program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})


def cel_rules(crd_doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(path, rule, message) of every x-kubernetes-validations rule in the schema."""
    found = []

    def visit(schema: dict[str, Any], path: str) -> None:
        for rule in schema.get("x-kubernetes-validations") or []:
            found.append((path, rule["rule"], rule["message"]))
        for name, sub in (schema.get("properties") or {}).items():
            visit(sub, f"{path}.{name}" if path else name)
        if isinstance(schema.get("items"), dict):
            visit(schema["items"], f"{path}[*]")

    visit(openapi_schema(crd_doc), "")
    return found


def cel_errors(crd_doc: dict[str, Any], new: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """Messages of the CEL rules that fail for a create (`old` None) or an update.

    Like the API server: values are defaulted first; a rule runs where its node
    exists; a transition rule (one that mentions `oldSelf`) runs only on update
    and only where the node exists in both old and new objects.
    """
    schema = openapi_schema(crd_doc)
    new_value = defaulted(crd_doc, new)
    old_value = defaulted(crd_doc, old) if old is not None else None
    messages = []
    for path, sub, node in _walk(schema, new_value, ""):
        for rule in sub.get("x-kubernetes-validations") or []:
            activation = {"self": node}
            if "oldSelf" in rule["rule"]:
                old_node = _lookup(old_value, path)
                if old_node is _MISSING:
                    continue
                activation["oldSelf"] = old_node
            if not bool(cel(rule["rule"], activation)):
                messages.append(rule["message"])
    return messages


_MISSING = object()


def _lookup(value: Any, path: str) -> Any:
    if value is None:
        return _MISSING
    if not path:
        return value
    for part in path.split("."):
        if "[" in part:  # transition rules inside list items are not used by our CRDs
            return _MISSING
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


Authorizer = Callable[[dict[str, str]], bool]
"""Answers the API server's authorizer would give: attributes (`group`, `resource`, `name`,
`namespace`, `subresource`, `verb`) of a check for the request's user -> allowed."""


def _authorizer_functions(authorized: Authorizer) -> dict[str, Any]:
    """The CEL authorizer library (`authorizer.group(g).resource(r).name(n).check(verb).allowed()`),
    as functions over a map of the attributes gathered so far."""
    def setter(key: str) -> Callable[[Any, Any], Any]:
        def put(target: Any, value: Any) -> Any:
            return celpy.celtypes.MapType({**target, celpy.celtypes.StringType(key): value})
        return put

    def check(target: Any, verb: Any) -> Any:
        attrs = {str(k): str(v) for k, v in target.items()}
        return celpy.celtypes.BoolType(authorized({**attrs, "verb": str(verb)}))

    return {"group": setter("group"), "resource": setter("resource"), "name": setter("name"),
            "namespace": setter("namespace"), "subresource": setter("subresource"), "check": check,
            "allowed": lambda decision: decision}


def vap_errors(policy: dict[str, Any], request: dict[str, Any], authorized: Authorizer | None = None) -> list[str]:
    """Messages of the policy's validations that fail for one admission request.

    `request` carries `operation`, `resource` ({group, version, resource}),
    `object` and `oldObject` as the API server would bind them. The policy's
    `variables` are evaluated in order, as `variables.<name>`; `authorizer` answers
    with `authorized` (nothing is allowed without it). A failing validation's
    `messageExpression` is evaluated, else its `message` is taken.
    """
    spec = policy["spec"]
    if not any(_matches(rule, request) for rule in spec["matchConstraints"]["resourceRules"]):
        return []
    activation: dict[str, Any] = {
        "object": request.get("object"),
        "oldObject": request.get("oldObject"),
        "request": {
            "operation": request["operation"],
            "resource": request["resource"],
            "name": (request.get("oldObject") or request.get("object") or {}).get("metadata", {}).get("name"),
        },
    }
    functions = _authorizer_functions(authorized or (lambda _: False))

    def evaluate(expression: str, variables: dict[str, Any]) -> Any:
        program = _ENV.program(_ENV.compile(expression), functions=functions)
        bound = {k: celpy.json_to_cel(v) for k, v in activation.items()}
        return program.evaluate({**bound, "authorizer": celpy.celtypes.MapType({}),
                                 "variables": celpy.celtypes.MapType(variables)})

    variables: dict[Any, Any] = {}
    for variable in spec.get("variables") or []:
        variables[celpy.celtypes.StringType(variable["name"])] = evaluate(variable["expression"], variables)
    errors = []
    for v in spec["validations"]:
        if bool(evaluate(v["expression"], variables)):
            continue
        text = str(evaluate(v["messageExpression"], variables)) if "messageExpression" in v else v["message"]
        errors.append(" ".join(text.split()))
    return errors


def _matches(rule: dict[str, Any], request: dict[str, Any]) -> bool:
    res = request["resource"]

    def has(values: list[str], value: str) -> bool:
        return "*" in values or value in values

    return (
        has(rule["apiGroups"], res["group"])
        and has(rule["apiVersions"], res["version"])
        and has(rule["resources"], res["resource"])
        and has(rule["operations"], request["operation"])
    )
