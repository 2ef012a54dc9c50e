"""`podnetwork migrate` against a cluster: kmock's Kubernetes emulator over real HTTP.

kmock stores objects as given and merges patches; it knows nothing of
server-side apply. The one thing a real API server does that these tests need
is emulated below, in the open: an apply PATCH to an object that does not exist
creates it. What the tests assert is what the emulator can show: the requests
sent (methods, content types, field manager, order) and the objects stored.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock
import pytest
import yaml

from podnetwork import cli
from podnetwork.cli import manifests
from podnetwork.ground import constants, workloads
from tests.api.kube_emulator import write_kubeconfig

FIXTURES = Path(__file__).parents[2] / "fixtures" / "migrate" / "cluster"
NPWG = "k8s.v1.cni.cncf.io/networks"

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


class ApplyingEmulator(kmock.KubernetesEmulator):
    """The emulator, plus the API server's rule that server-side apply creates missing objects
    (of the resources it serves: an apply to a resource without its CRD stays a 404)."""

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        content_type = {k.lower(): v for k, v in request.headers.items()}.get("content-type", "")
        if (
            request.method == kmock.method.PATCH
            and content_type.startswith("application/apply-patch")
            and request.resource is not None
            and request.name
            and request.resource in self.resources
        ):
            key = (request.resource, request.namespace, request.name)
            if key not in self.objects or self.objects[key].deleted:
                self.objects[key] = dict(request.data)
        return await super()._handle(request)


@pytest.fixture()
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    return {**kmock_options, "cls": ApplyingEmulator}


@pytest.fixture()
def cluster(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    """The emulator with the resources declared and the fixture manifests stored."""
    for key, (kind, namespaced) in RESOURCES.items():
        kmock.resources[key] = {"kind": kind, "namespaced": namespaced, "verbs": ["list", "get", "patch", "delete"]}
    for doc in manifests.load([FIXTURES]):
        store(kmock, doc.obj)
    return kmock


def store(emulator: kmock.KubernetesEmulator, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    meta.setdefault("resourceVersion", "1")
    meta.setdefault("uid", f"uid-{obj['kind']}-{meta['name']}")
    emulator.objects[PLURALS[obj["kind"]], meta.get("namespace"), meta["name"]] = obj


def stored(emulator: kmock.KubernetesEmulator, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
    key = (kmock.resource(PLURALS[kind]), namespace, name)
    if key not in emulator.objects or emulator.objects[key].deleted:
        return None
    return dict(emulator.objects[key].raw)


@pytest.fixture()
def kubeconfig(tmp_path: Path, kmock: kmock.KubernetesEmulator) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url), token="t0ken", name="emu")


async def migrate_cli(*argv: str) -> int:
    # The command is synchronous; the emulator serves on this test's event loop.
    return await asyncio.to_thread(cli.main, ["migrate", *argv])


def patches(emulator: kmock.KubernetesEmulator) -> list[kmock.Request]:
    return [r for r in emulator if r.method == kmock.method.PATCH]


def template_annotations(obj: dict[str, Any], kind: str) -> dict[str, str]:
    path = workloads.KINDS[workloads.WorkloadKind(kind)].template_path
    cur: Any = obj
    for key in (*path, "metadata"):
        cur = cur[key]
    return dict(cur.get("annotations") or {})


async def test_planning_reads_the_cluster_and_writes_nothing(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = await migrate_cli("--kubeconfig", str(kubeconfig), "-A", "-o", str(tmp_path / "plan.yaml"))
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert patches(cluster) == []
    assert "+ PodNetwork infra.storage -> NetworkAttachmentDefinition infra/storage" in out
    assert "change 7 workload(s)" in err
    header = next(yaml.safe_load_all((tmp_path / "plan.yaml").read_text()))
    assert header["kind"] == "MigrationPlan"
    assert {w["resourceVersion"] for w in header["workloads"]} == {"1"}
    assert all(r.headers.get("Authorization") == "Bearer t0ken" for r in cluster)


async def test_a_plan_file_that_cannot_be_written_stops_apply_before_any_write(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without its plan file an apply could not be rolled back: a full disk (here /dev/full,
    # through a link) stops it, with the reason, not a traceback.
    full = tmp_path / "plan.yaml"
    full.symlink_to("/dev/full")
    rc = await migrate_cli("--kubeconfig", str(kubeconfig), "-A", "--apply", "-q", "-o", str(full))
    _, err = capsys.readouterr()
    assert rc == 2
    assert f"podnetwork migrate: -o {full}: cannot write it: No space left on device" in err
    assert "nothing applied" in err and "Traceback" not in err
    assert patches(cluster) == []


async def test_apply_writes_networks_then_options_then_attachments_then_workloads(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = await migrate_cli("--kubeconfig", str(kubeconfig), "-A", "--apply", "-q")
    _, err = capsys.readouterr()
    assert rc == 0, err

    sent = patches(cluster)
    kinds = [r.resource.plural for r in sent]
    order = ["podnetworks", "networkselectionoptions", "podnetworkattachments"]
    firsts = [kinds.index(k) for k in order]
    lasts = [len(kinds) - 1 - kinds[::-1].index(k) for k in order]
    assert lasts[0] < firsts[1] and lasts[1] < firsts[2]
    workload_patches = [r for r in sent if r.resource.plural not in order]
    assert len(workload_patches) == 7
    assert min(sent.index(r) for r in workload_patches) > lasts[2]
    for r in sent:
        assert r.params["fieldManager"] == "podnetwork-migrate"
        content_type = {k.lower(): v for k, v in r.headers.items()}["content-type"]
        if r in workload_patches:
            assert content_type == "application/merge-patch+json"
            assert r.data["metadata"]["resourceVersion"] == "1"
        else:
            assert content_type == "application/apply-patch+yaml"
            assert r.params.get("force", "false") == "false"  # the API default: lightkube sends none

    pn = stored(cluster, "PodNetwork", None, "app.bridge-net")
    assert pn is not None and pn["spec"]["provider"] == constants.BRIDGE_PROVIDER
    assert stored(cluster, "NetworkSelectionOptions", "app", "replicaset-legacy-0") is not None
    assert stored(cluster, "PodNetworkAttachment", "app", "replicaset-legacy-0") is not None
    deployment = stored(cluster, "Deployment", "app", "web")
    assert deployment is not None
    annotations = template_annotations(deployment, "Deployment")
    assert NPWG not in annotations
    assert annotations["example.com/keep-me"] == "yes"
    assert json.loads(annotations[constants.NETWORKS_ANNOTATION]) == [
        {"podNetworkName": "default"},
        {"podNetworkName": "app.bridge-net", "interfaceName": "net1"},
    ]
    cron = stored(cluster, "CronJob", "app", "report")
    assert cron is not None and constants.NETWORKS_ANNOTATION in template_annotations(cron, "CronJob")
    # The pod managed by the ReplicaSet was left to its owner.
    owned = stored(cluster, "Pod", "app", "legacy-x7k2p")
    assert owned is not None and NPWG in owned["metadata"]["annotations"]


async def test_a_second_run_plans_and_writes_nothing(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await migrate_cli("--kubeconfig", str(kubeconfig), "-A", "--apply", "-q") == 0
    before = len(patches(cluster))
    capsys.readouterr()

    rc = await migrate_cli("--kubeconfig", str(kubeconfig), "-A", "--apply")
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert len(patches(cluster)) == before
    assert "change 0 workload(s)" in err
    assert "nothing to apply" in err
    assert out == ""  # the diff is empty


async def test_one_namespace_is_migrated_with_nads_of_other_namespaces_fetched(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store(cluster, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "elsewhere", "namespace": "other", "annotations": {NPWG: "infra/storage"}},
    })
    rc = await migrate_cli("--kubeconfig", str(kubeconfig), "-n", "other", "--apply", "-q")
    _, err = capsys.readouterr()
    assert rc == 0, err
    pod = stored(cluster, "Pod", "other", "elsewhere")
    assert pod is not None
    assert json.loads(pod["metadata"]["annotations"][constants.NETWORKS_ANNOTATION]) == [
        {"podNetworkName": "default"},
        {"podNetworkName": "infra.storage"},
    ]
    assert [r.url.path for r in cluster if r.name == "storage"] == [
        "/apis/k8s.cni.cncf.io/v1/namespaces/infra/network-attachment-definitions/storage"
    ]
    deployment = stored(cluster, "Deployment", "app", "web")
    assert deployment is not None and NPWG in template_annotations(deployment, "Deployment")


async def test_rollback_restores_annotations_and_deletes_what_nothing_uses(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.yaml"
    assert await migrate_cli("--kubeconfig", str(kubeconfig), "-A", "--apply", "-q", "-o", str(plan)) == 0
    # A pod created from the migrated ReplicaSet template still uses its attachment.
    store(cluster, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "legacy-new", "namespace": "app",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "legacy", "uid": "u", "controller": True}],
            "annotations": {constants.NETWORKS_ANNOTATION: '[{"podNetworkName":"default"},{"podNetworkAttachmentName":"replicaset-legacy-0","interfaceName":"mv0"}]'},
        },
        "status": {"phase": "Running"},
    })
    capsys.readouterr()

    rc = await migrate_cli("--kubeconfig", str(kubeconfig), "--rollback", str(plan))
    _, err = capsys.readouterr()
    assert rc == 0, err

    deployment = stored(cluster, "Deployment", "app", "web")
    assert deployment is not None
    annotations = template_annotations(deployment, "Deployment")
    assert annotations[NPWG] == '[{"name": "bridge-net", "interface": "net1"}]'
    assert constants.NETWORKS_ANNOTATION not in annotations
    assert stored(cluster, "PodNetwork", None, "infra.storage") is None
    assert stored(cluster, "PodNetworkAttachment", "app", "job-backup-1") is None
    # Still in use by the running pod: kept, along with what it needs.
    assert stored(cluster, "PodNetworkAttachment", "app", "replicaset-legacy-0") is not None
    assert stored(cluster, "NetworkSelectionOptions", "app", "replicaset-legacy-0") is not None
    assert stored(cluster, "PodNetwork", None, "app.macvlan-conf") is not None
    assert "PodNetworkAttachment app/replicaset-legacy-0: kept: still in use" in err


async def test_rollback_leaves_a_workload_changed_after_the_migration(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.yaml"
    assert await migrate_cli("--kubeconfig", str(kubeconfig), "-A", "--apply", "-q", "-o", str(plan)) == 0
    cluster.objects[PLURALS["Pod"], "app", "client"].patch(
        {"metadata": {"annotations": {constants.NETWORKS_ANNOTATION: '[{"podNetworkName":"default"}]'}}}
    )
    capsys.readouterr()
    rc = await migrate_cli("--kubeconfig", str(kubeconfig), "--rollback", str(plan))
    _, err = capsys.readouterr()
    assert rc == 1
    assert "FAILED Pod app/client: left as is" in err
    pod = stored(cluster, "Pod", "app", "client")
    assert pod is not None and NPWG not in pod["metadata"]["annotations"]


async def test_without_the_options_crd_no_workload_is_changed(
    cluster: kmock.KubernetesEmulator, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    del cluster.resources["bridge.multinetwork.x-k8s.io/v1alpha1/networkselectionoptions"]
    rc = await migrate_cli("--kubeconfig", str(kubeconfig), "-A", "--apply", "-q")
    _, err = capsys.readouterr()
    assert rc == 1
    assert "FAILED NetworkSelectionOptions app/replicaset-legacy-0: apply NetworkSelectionOptions" in err
    assert "is the NetworkSelectionOptions CRD installed? (kubectl apply -f crds/)" in err
    assert "FAILED Deployment app/web: not changed: an object it needs failed above" in err
    assert [r for r in patches(cluster) if r.resource.group in ("", "apps", "batch")] == []
    deployment = stored(cluster, "Deployment", "app", "web")
    assert deployment is not None and NPWG in template_annotations(deployment, "Deployment")


async def test_an_unknown_context_is_a_usage_error_naming_the_known_ones(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = await migrate_cli("--kubeconfig", str(kubeconfig), "--context", "prod", "-A")
    _, err = capsys.readouterr()
    assert rc == 2
    assert "context 'prod' is not in the kubeconfig (contexts: emu)" in err
