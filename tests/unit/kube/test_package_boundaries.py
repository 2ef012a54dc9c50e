"""podnetwork.kube is the one way to the API: who may bypass it, and the kinds its clients address.

The done-criteria of the "one way to reach the API" work, kept true: no module of ours imports
kopf's private modules or the official `kubernetes` client. What podnetwork.kube may import of
ours (only podnetwork.ground) is a layers contract in `.importlinter`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from podnetwork.ground import constants
from podnetwork.kube import client as kube

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("podnetwork", "bridge", "scheduler_plugin", "demo")


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


@pytest.mark.parametrize(("resource", "api_version", "kind", "plural", "namespaced"), [
    (kube.PodNetwork, "multinetwork.x-k8s.io/v1alpha1", "PodNetwork", "podnetworks", False),
    (kube.PodNetworkAttachment, "multinetwork.x-k8s.io/v1alpha1", "PodNetworkAttachment", "podnetworkattachments",
     True),
    (kube.NetworkAttachmentDefinition, "k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition",
     "network-attachment-definitions", True),
    (kube.NetworkSelectionOptions, "bridge.multinetwork.x-k8s.io/v1alpha1", "NetworkSelectionOptions",
     "networkselectionoptions", True),
])
def test_the_clients_address_each_kind_by_its_crds_names_and_scope(
        resource: kube.Resource, api_version: str, kind: str, plural: str, namespaced: bool) -> None:
    assert (kube.api_version_of(resource), kube.kind_of(resource), kube.plural_of(resource)) == (
        api_version, kind, plural)
    assert kube.namespaced(resource) == namespaced


def test_paths_are_the_apis_paths() -> None:
    assert kube.path_of(kube.Pod, "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert kube.path_of(kube.Node, "ignored", "n") == "/api/v1/nodes/n"
    assert kube.path_of(kube.PodNetworkAttachment, "ns") == (
        f"/apis/{constants.API_VERSION}/namespaces/ns/{constants.ATTACHMENT_PLURAL}")
