"""`podnetwork export-dra` against a cluster: kmock's Kubernetes emulator over real HTTP.

The export reads (lists per kind and namespace, gets of NADs in other namespaces) and
writes nothing to the cluster; from the cluster it renders what it renders from the same
objects in files.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from bridge.dra import command, export
from podnetwork import cli
from podnetwork.cli import manifests
from tests.api.kube_emulator import write_kubeconfig

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"

RESOURCES = {
    "v1/pods": ("Pod", True),
    "apps/v1/deployments": ("Deployment", True),
    "apps/v1/statefulsets": ("StatefulSet", True),
    "apps/v1/daemonsets": ("DaemonSet", True),
    "apps/v1/replicasets": ("ReplicaSet", True),
    "batch/v1/jobs": ("Job", True),
    "batch/v1/cronjobs": ("CronJob", True),
    "k8s.cni.cncf.io/v1/network-attachment-definitions": ("NetworkAttachmentDefinition", True),
    "multinetwork.x-k8s.io/v1alpha1/podnetworks": ("PodNetwork", False),
    "multinetwork.x-k8s.io/v1alpha1/podnetworkattachments": ("PodNetworkAttachment", True),
    "bridge.multinetwork.x-k8s.io/v1alpha1/networkselectionoptions": ("NetworkSelectionOptions", True),
}
PLURALS = {kind: key for key, (kind, _) in RESOURCES.items()}

#: A PodNetwork whose NAD lives in a namespace the export is not asked about.
INFRA = [
    {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
     "metadata": {"name": "mgmt", "namespace": "infra"},
     "spec": {"config": '{"cniVersion":"1.0.0","name":"mgmt","type":"host-device","device":"ens7"}'}},
    {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "mgmt"},
     "spec": {"provider": "multinetwork.x-k8s.io/npwg-bridge", "parametersRefs": [
         {"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "mgmt", "namespace": "infra"}]}},
]


def _inputs() -> list[dict[str, Any]]:
    return [doc.obj for doc in manifests.load([str(EXAMPLES)])] + copy.deepcopy(INFRA)


def _store(emulator: kmock.KubernetesEmulator, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    emulator.objects[PLURALS[obj["kind"]], meta.get("namespace"), meta["name"]] = obj


@pytest.fixture()
def cluster(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for key, (kind, namespaced) in RESOURCES.items():
        kmock.resources[key] = {"kind": kind, "namespaced": namespaced, "verbs": ["list", "get"]}
    for obj in _inputs():
        _store(kmock, copy.deepcopy(obj))
    return kmock


@pytest.fixture()
def kubeconfig(tmp_path: Path, kmock: kmock.KubernetesEmulator) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url), token="t0ken", name="emu")


async def _export(*argv: str) -> int:
    return await asyncio.to_thread(cli.main, ["export-dra", *argv])


def _offline() -> str:
    inventory = export.Inventory()
    for obj in _inputs():
        inventory.add(obj)
    return command.dump_yaml(export.export(inventory).documents())


async def test_the_cluster_exports_as_the_same_objects_in_files_and_nothing_is_written(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "dra.yaml"
    rc = await _export("--kubeconfig", str(kubeconfig), "-n", "default", "-o", str(output))
    err = capsys.readouterr().err
    assert rc == 0, err
    assert output.read_text() == _offline()
    docs = list(yaml.safe_load_all(output.read_text()))
    assert "mgmt" in {d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass"}  # NAD of `infra`
    assert {r.method for r in cluster} == {kmock.method.GET}
    assert all(r.headers.get("Authorization") == "Bearer t0ken" for r in cluster)
    assert {r.namespace for r in cluster if r.resource and r.resource.plural == "pods"} == {"default"}


async def test_a_cluster_without_networkselectionoptions_reads_as_having_none(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plural = "bridge.multinetwork.x-k8s.io/v1alpha1/networkselectionoptions"
    del cluster.resources[plural]
    for key in [k for k in cluster.objects if k[0] == kmock.resource(plural)]:
        del cluster.objects[key]
    rc = await _export("--kubeconfig", str(kubeconfig), "-A")
    out, err = capsys.readouterr()
    # The attachment's options are gone with their CRD: the translation says so, by name.
    assert rc == 1
    assert out == ""
    assert "Pod default/db: ParametersNotFound: " in err and "storage-db" in err
    options_lists = [r for r in cluster if r.resource and r.resource.plural == "networkselectionoptions"]
    assert options_lists
