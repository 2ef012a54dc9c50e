"""podnetwork.kube is the one way to the API: what it may import, who may bypass it, its wire names.

The done-criteria of the "one way to reach the API" work, kept true: no module of ours imports
kopf's private modules or the official `kubernetes` client, and podnetwork.kube imports nothing
else of podnetwork (the agent, the bridge and the extender use it without the KEP layer).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bridge import npwg, translate
from bridge.agent import objects as agent_objects
from podnetwork import constants
from podnetwork.kube import client as kube

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("podnetwork", "bridge", "scheduler_plugin", "embedded")


def sources(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_module_of_ours_uses_kopfs_private_modules() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in sources(*PACKAGES)
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"kopf\._", line)]
    assert found == []


def test_no_module_of_ours_imports_the_kubernetes_package() -> None:
    found = {str(p.relative_to(ROOT)): sorted(n for n in imported(p) if n.split(".")[0] == "kubernetes")
             for p in sources(*PACKAGES)}
    assert {p: names for p, names in found.items() if names} == {}


def test_podnetwork_kube_imports_nothing_else_of_podnetwork() -> None:
    ours = {p.relative_to(ROOT).as_posix(): sorted(n for n in imported(p) if n.split(".")[0] in PACKAGES
                                                    and not n.startswith("podnetwork.kube"))
            for p in sources("podnetwork/kube")}
    assert ours and {p: names for p, names in ours.items() if names} == {}


@pytest.mark.parametrize(("resource", "api_version", "kind", "plural"), [
    (kube.PodNetwork, constants.API_VERSION, constants.PODNETWORK_KIND, constants.PODNETWORK_PLURAL),
    (kube.PodNetworkAttachment, constants.API_VERSION, constants.ATTACHMENT_KIND, constants.ATTACHMENT_PLURAL),
    (kube.NetworkAttachmentDefinition, npwg.NAD_API_VERSION, npwg.NAD_KIND, npwg.NAD_PLURAL),
    (kube.NetworkSelectionOptions, translate.OPTIONS_API_VERSION, translate.OPTIONS_KIND, translate.OPTIONS_PLURAL),
])
def test_the_wire_names_repeated_in_podnetwork_kube_are_the_layers_own(
        resource: kube.Resource, api_version: str, kind: str, plural: str) -> None:
    assert (kube.api_version_of(resource), kube.kind_of(resource), kube.plural_of(resource)) == (
        api_version, kind, plural)
    assert kube.namespaced(resource) == (kind != constants.PODNETWORK_KIND)


def test_the_agent_reads_the_kinds_it_names() -> None:
    assert kube.kind_of(kube.NetworkAttachmentDefinition) == agent_objects.NAD
    assert kube.kind_of(kube.NetworkSelectionOptions) == agent_objects.SELECTION_OPTIONS
    assert kube.kind_of(kube.PodNetworkAttachment) == agent_objects.ATTACHMENT


def test_paths_are_the_apis_paths() -> None:
    assert kube.path_of(kube.Pod, "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert kube.path_of(kube.Node, "ignored", "n") == "/api/v1/nodes/n"
    assert kube.path_of(kube.PodNetworkAttachment, "ns") == (
        f"/apis/{constants.API_VERSION}/namespaces/ns/{constants.ATTACHMENT_PLURAL}")
