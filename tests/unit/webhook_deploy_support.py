"""deploy/'s webhook parts as the operators use them: the Deployment's registration flags, the RBAC
they need (names included), and the cert-manager component applied as kustomize applies it.

Shared by tests/unit/controller/test_deploy.py and tests/unit/bridge/test_deploy.py, which check
the same things of their own component.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from podnetwork.cli import operatorshell

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

#: (apiGroup, resource, verb, resourceName or "" for any name)
Grant = tuple[str, str, str, str]


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def of_kind(kind: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def grants(role: dict[str, Any]) -> set[Grant]:
    """What a Role or ClusterRole allows, one grant per group, resource, verb and name."""
    return {(group, resource, verb, name) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]
            for name in (rule.get("resourceNames") or [""])}


def allows(found: set[Grant], group: str, resource: str, verb: str, name: str) -> bool:
    """Whether `found` lets a request for `name` (or for no name: "") through, as RBAC decides."""
    return (group, resource, verb, "") in found or (name != "" and (group, resource, verb, name) in found)


def parsed(argv: list[str], configure: Callable[[argparse.ArgumentParser], None]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(argv)


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (found,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(found)


def apply_json_patch(obj: dict[str, Any], operations: list[dict[str, Any]]) -> None:
    """The RFC 6902 operations the components use (`add` at a path or at a list's end `-`,
    `replace`), applied to `obj` in place; any other operation fails the test."""
    for op in operations:
        *parents, last = [p for p in op["path"].split("/")[1:]]
        target: Any = obj
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "add" and last == "-":
            target.append(op["value"])
        elif op["op"] in ("add", "replace") and isinstance(target, dict):
            assert op["op"] == "add" or last in target, op
            target[last] = op["value"]
        else:
            raise AssertionError(f"an operation this helper does not apply: {op}")


def component_resources(component: Path) -> list[dict[str, Any]]:
    """The objects the Component at `component` adds."""
    (kustomization,) = documents(component / "kustomization.yaml")
    assert kustomization["kind"] == "Component"
    return [d for name in kustomization.get("resources", []) for d in documents(component / name)]


def with_component(component: Path, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`docs` (a kustomization's objects) with the Component at `component` applied: its
    resources added, its patches applied to the objects their targets select."""
    (kustomization,) = documents(component / "kustomization.yaml")
    result = [*docs, *component_resources(component)]
    for entry in kustomization.get("patches", []):
        target = entry["target"]
        matched = [d for d in result if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]]
        assert matched, f"the patch for {target} matches nothing"
        for doc in matched:
            apply_json_patch(doc, yaml.safe_load(entry["patch"]))
    return result


def registration_flags(args: argparse.Namespace, *, serve: bool = True) -> operatorshell.WebhookFlags:
    return operatorshell.WebhookFlags.from_args(args, serve=serve)
