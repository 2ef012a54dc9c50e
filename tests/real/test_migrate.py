"""`podnetwork migrate` as a process against a real API server (KUBECONFIG as a user sets it):
a plan changes nothing, `--apply` creates the PodNetworks (and the options and attachments of
per-pod keys) by server-side apply and rewrites the workloads with one merge patch each, a
second run plans nothing, and `--rollback` restores the workloads and deletes what it made.

The emulator tier (tests/api/migrate/) asserts the requests; here the API server decides what
server-side apply, its field manager and the resourceVersion preconditions really do, and our
bridge and controller take the migrated networks up (ParamsReady, Ready).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.real.cluster_support import PODNETWORK, Api, Cluster, eventually, pod_manifest
from tests.real.objects_support import (
    BRIDGE_PROVIDER,
    HOLD,
    NETWORKS,
    NPWG_SELECTION,
    PODNETWORKS,
    Made,
    attachments,
    condition,
    nad_body,
    nads,
    pods,
)

pytestmark = pytest.mark.usefixtures("components")
SELECTIONS = {"web": "dataplane@net1",
              "db": json.dumps([{"name": "fast", "interface": "fa0", "mac": "02:00:00:00:00:01"},
                                {"name": "dataplane", "interface": "net1"}])}
MARKER = "bridge.multinetwork.x-k8s.io/networks-written"
OPTIONS = "/apis/bridge.multinetwork.x-k8s.io/v1alpha1/namespaces/{ns}/networkselectionoptions"


def _migrate(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PODNETWORK), "migrate", *args], env=cluster.env(), capture_output=True, text=True,
                          timeout=120)


def _deployment(name: str, selection: str) -> dict[str, Any]:
    # no replicas: the template is what is migrated, and no pod has to run for it
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name},
                                               "annotations": {NPWG_SELECTION: selection, "keep": "me"}},
                                  "spec": pod_manifest(name)["spec"]}}}


def _template_annotations(api: Api, ns: str, name: str) -> dict[str, str]:
    found: dict[str, str] = api.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")["spec"]["template"][
        "metadata"]["annotations"]
    return found


@pytest.fixture
def workloads(api: Api, made: Made, ns: str) -> dict[str, int]:
    """Two NADs and two Deployments selecting them, one with a per-pod key; their generations."""
    made.create(nads(ns), nad_body("dataplane"))
    made.create(nads(ns), nad_body("fast"))
    for network in (f"{ns}.dataplane", f"{ns}.fast"):  # the names the plan gives them: removed whatever happens
        made.objects.append(f"{PODNETWORKS}/{network}")
    generations = {}
    for name, selection in SELECTIONS.items():
        created = api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", _deployment(name, selection))
        generations[name] = created["metadata"]["generation"]
    return generations


def test_a_plan_without_apply_changes_nothing(
        api: Api, made: Made, control_plane: Cluster, ns: str, workloads: dict[str, int], tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    run = _migrate(control_plane, "-n", ns, "-o", str(plan))
    assert run.returncode == 0, run.stderr
    documents = list(yaml.safe_load_all(plan.read_text()))
    assert documents[0]["kind"] == "MigrationPlan"
    planned = {(d["kind"], d["metadata"]["name"]) for d in documents[1:]}
    assert {("PodNetwork", f"{ns}.dataplane"), ("PodNetwork", f"{ns}.fast"),
            ("NetworkSelectionOptions", "deployment-db-0"), ("PodNetworkAttachment", "deployment-db-0")} == planned
    assert f"+ PodNetwork {ns}.dataplane" in run.stdout

    for name, generation in workloads.items():
        # the deployment controller writes status meanwhile: the spec's generation is what a write would move
        deployment = api.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
        assert deployment["metadata"]["generation"] == generation
        assert _template_annotations(api, ns, name)[NPWG_SELECTION] == SELECTIONS[name]
    for network in (f"{ns}.dataplane", f"{ns}.fast"):
        assert api.find(f"{PODNETWORKS}/{network}") is None
    assert not api.get(attachments(ns))["items"]
    assert not api.get(OPTIONS.format(ns=ns))["items"]


def test_apply_migrates_the_workloads_to_podnetworks_that_turn_ready_and_rollback_restores_them(
        api: Api, made: Made, control_plane: Cluster, ns: str, workloads: dict[str, int], tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    run = _migrate(control_plane, "-n", ns, "-o", str(plan), "--apply")
    assert run.returncode == 0, run.stderr

    dataplane = api.get(f"{PODNETWORKS}/{ns}.dataplane")
    assert dataplane["spec"]["provider"] == BRIDGE_PROVIDER
    assert dataplane["spec"]["parametersRefs"] == [{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition",
                                                    "name": "dataplane", "namespace": ns}]
    managers = {m["manager"]: m["operation"] for m in dataplane["metadata"]["managedFields"]}
    assert managers.get("podnetwork-migrate") == "Apply"
    options = api.get(f"{OPTIONS.format(ns=ns)}/deployment-db-0")
    assert options["spec"] == {"mac": "02:00:00:00:00:01"}
    attachment = api.get(f"{attachments(ns)}/deployment-db-0")
    assert attachment["spec"]["podNetworkName"] == f"{ns}.fast"

    web = _template_annotations(api, ns, "web")
    assert NPWG_SELECTION not in web and web["keep"] == "me"
    assert json.loads(web[NETWORKS]) == [{"podNetworkName": "default"},
                                         {"podNetworkName": f"{ns}.dataplane", "interfaceName": "net1"}]
    db = json.loads(_template_annotations(api, ns, "db")[NETWORKS])
    assert db == [{"podNetworkName": "default"}, {"podNetworkAttachmentName": "deployment-db-0",
                                                  "interfaceName": "fa0"},
                  {"podNetworkName": f"{ns}.dataplane", "interfaceName": "net1"}]

    # the bridge reads the migrated networks' NADs, the controller then calls them Ready
    for network in (f"{ns}.dataplane", f"{ns}.fast"):
        eventually(lambda network=network: (c := condition(api.get(f"{PODNETWORKS}/{network}"), "Ready"))
                   and c["status"] == "True", f"{network} is Ready")
    eventually(lambda: (c := condition(api.get(f"{attachments(ns)}/deployment-db-0"), "Ready"))
               and c["status"] == "True", "the attachment is Ready")

    again = _migrate(control_plane, "-n", ns, "--apply")
    assert again.returncode == 0, again.stderr
    assert "nothing to apply" in again.stdout + again.stderr

    back = _migrate(control_plane, "--rollback", str(plan))
    assert back.returncode == 0, back.stdout + back.stderr
    for name, selection in SELECTIONS.items():
        restored = _template_annotations(api, ns, name)
        assert NETWORKS not in restored
        assert restored[NPWG_SELECTION] == selection
    eventually(lambda: api.find(f"{PODNETWORKS}/{ns}.dataplane") is None, "the migrated PodNetwork is deleted")
    assert api.find(f"{attachments(ns)}/deployment-db-0") is None


def test_a_live_pod_auto_populated_with_default_is_migrated_and_the_bridge_gives_it_back_its_selection(
        api: Api, made: Made, control_plane: Cluster, ns: str, tmp_path: Path) -> None:
    made.create(nads(ns), nad_body("dataplane"))
    made.objects.append(f"{PODNETWORKS}/{ns}.dataplane")
    created = made.pod(ns, pod_manifest("legacy", annotations={NPWG_SELECTION: "dataplane@net1"},
                                        schedulingGates=[HOLD]))
    # the controller's admission names the default network on every pod that names none
    assert json.loads(created["metadata"]["annotations"][NETWORKS]) == [{"podNetworkName": "default"}]
    plan = tmp_path / "plan.yaml"
    run = _migrate(control_plane, "-n", ns, "-o", str(plan), "--apply")
    assert run.returncode == 0, run.stdout + run.stderr
    annotations = api.get(f"{pods(ns)}/legacy")["metadata"]["annotations"]
    assert json.loads(annotations[NETWORKS]) == [
        {"podNetworkName": "default"}, {"podNetworkName": f"{ns}.dataplane", "interfaceName": "net1"}]

    # migrate removed the hand-written selection; the bridge translates the new networks into the same one
    def bridge_selection() -> list[dict[str, Any]] | None:
        now = api.get(f"{pods(ns)}/legacy")["metadata"]["annotations"]
        return json.loads(now[NPWG_SELECTION]) if now.get(MARKER) and NPWG_SELECTION in now else None

    assert eventually(bridge_selection, "the bridge writes the selection") == [
        {"name": "dataplane", "namespace": ns, "interface": "net1"}]

    back = _migrate(control_plane, "--rollback", str(plan))
    assert back.returncode == 0, back.stdout + back.stderr
    restored = api.get(f"{pods(ns)}/legacy")["metadata"]["annotations"]
    assert restored[NPWG_SELECTION] == "dataplane@net1"
    assert json.loads(restored[NETWORKS]) == [{"podNetworkName": "default"}]
    assert MARKER not in restored
