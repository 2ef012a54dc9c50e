"""The agent's Kubernetes ObjectSource against kmock's emulator over real HTTP."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import kmock
import pytest

from bridge.agent.kube import objects
from tests.api.kube_emulator import write_kubeconfig

RESOURCES = {
    "v1/pods": ("Pod", True),
    "k8s.cni.cncf.io/v1/network-attachment-definitions": ("NetworkAttachmentDefinition", True),
    "multinetwork.x-k8s.io/v1alpha1/podnetworks": ("PodNetwork", False),
    "multinetwork.x-k8s.io/v1alpha1/podnetworkattachments": ("PodNetworkAttachment", True),
    "bridge.multinetwork.x-k8s.io/v1alpha1/networkselectionoptions": ("NetworkSelectionOptions", True),
}


def put(emulator: kmock.KubernetesEmulator, resource: str, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    meta.setdefault("resourceVersion", "1")
    emulator.objects[resource, meta.get("namespace"), meta["name"]] = obj


@pytest.fixture()
def cluster(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for key, (kind, namespaced) in RESOURCES.items():
        kmock.resources[key] = {"kind": kind, "namespaced": namespaced, "verbs": ["get", "patch"]}
    put(kmock, "v1/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "ns", "annotations": {"keep": "me", "drop": "me"}}})
    put(kmock, "k8s.cni.cncf.io/v1/network-attachment-definitions", {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": {"name": "blue", "namespace": "ns"}, "spec": {"config": "{}"}})
    put(kmock, "multinetwork.x-k8s.io/v1alpha1/podnetworks", {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "default"}, "spec": {"enabled": True}})
    put(kmock, "multinetwork.x-k8s.io/v1alpha1/podnetworkattachments", {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetworkAttachment", "metadata": {"name": "a1", "namespace": "ns"}, "spec": {"podNetworkName": "blue"}})
    put(kmock, "bridge.multinetwork.x-k8s.io/v1alpha1/networkselectionoptions", {"apiVersion": "bridge.multinetwork.x-k8s.io/v1alpha1", "kind": "NetworkSelectionOptions", "metadata": {"name": "o1", "namespace": "ns"}, "spec": {"mac": "02:00:00:00:00:01"}})
    return kmock


@pytest.fixture()
def kubeconfig(tmp_path: Path, kmock: kmock.KubernetesEmulator) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url), token="t0ken")


async def test_the_agent_reads_each_object_by_name_and_a_missing_one_is_not_found(cluster: kmock.KubernetesEmulator, kubeconfig: Path) -> None:
    source = await asyncio.to_thread(objects.KubernetesObjects, str(kubeconfig))
    try:
        assert (await source.get_pod("ns", "web")).metadata.annotation("keep") == "me"
        assert (await source.get_nad("ns", "blue")).spec.config == "{}"
        assert (await source.get_podnetwork("default")).spec.enabled is True
        assert (await source.get_attachment("ns", "a1")).spec.pod_network_name == "blue"
        assert (await source.get_selection_options("ns", "o1")).spec["mac"] == "02:00:00:00:00:01"
        with pytest.raises(objects.NotFound, match="NetworkAttachmentDefinition ns/red not found"):
            await source.get_nad("ns", "red")
        with pytest.raises(objects.NotFound):
            await source.get_pod("other", "web")
    finally:
        await source.close()
    gets = [r for r in cluster if r.method == kmock.method.GET]
    assert gets and all(r.name for r in gets), "single GETs by name, never a list"


async def test_the_agent_patches_only_the_pods_annotations(cluster: kmock.KubernetesEmulator, kubeconfig: Path) -> None:
    source = await asyncio.to_thread(objects.KubernetesObjects, str(kubeconfig))
    try:
        await source.patch_pod_annotations("ns", "web", {"k8s.v1.cni.cncf.io/network-status": "[]", "drop": None})
    finally:
        await source.close()
    (patch,) = [r for r in cluster if r.method == kmock.method.PATCH]
    assert patch.data == {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/network-status": "[]", "drop": None}}}
    content_type = {k.lower(): v for k, v in patch.headers.items()}["content-type"]
    assert content_type.startswith(("application/merge-patch+json", "application/strategic-merge-patch+json"))
    stored = json.loads(json.dumps(cluster.objects["v1/pods", "ns", "web"].raw))
    assert stored["metadata"]["annotations"] == {"keep": "me", "k8s.v1.cni.cncf.io/network-status": "[]"}
