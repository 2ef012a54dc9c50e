"""Planning the migration from NPWG annotations to PodNetwork objects (bridge.migrate)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge import migrate, translate
from bridge.operator import pods
from podnetwork.cli import manifests
from podnetwork.ground import constants, workloads
from podnetwork.ground.workloads import WorkloadKind
from podnetwork.kep import networks, validation
from tests.unit.crd_support import crd, schema_errors

FIXTURES = Path(__file__).parents[2] / "fixtures" / "migrate"
NPWG = "k8s.v1.cni.cncf.io/networks"


def load(*names: str) -> list[dict[str, Any]]:
    return [d.obj for d in manifests.load([FIXTURES / n for n in names])]


def plan_of(objects: list[dict[str, Any]]) -> migrate.Plan:
    return migrate.plan(migrate.Inventory.of(objects))


def change_of(p: migrate.Plan, kind: str, name: str) -> migrate.WorkloadChange:
    [change] = [c for c in p.workloads if str(c.workload.kind) == kind and c.workload.name == name]
    return change


def created(p: migrate.Plan, kind: str) -> dict[str, dict[str, Any]]:
    return {
        (o.obj["metadata"].get("namespace", "") + "/" if o.obj["metadata"].get("namespace") else "")
        + o.obj["metadata"]["name"]: o.obj
        for o in p.objects()
        if o.obj["kind"] == kind
    }


def kep(change: migrate.WorkloadChange) -> list[dict[str, Any]]:
    return json.loads(change.after)


@pytest.fixture(scope="module")
def cluster_plan() -> migrate.Plan:
    return plan_of(load("cluster"))


def nad(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"config": '{"cniVersion": "1.0.0", "type": "bridge"}'},
    }


def pod(namespace: str, name: str, selection: str | None, **extra: str) -> dict[str, Any]:
    annotations = dict(extra)
    if selection is not None:
        annotations[NPWG] = selection
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "annotations": annotations}}


# --- discovery ---------------------------------------------------------------------------------


def test_every_workload_kind_with_the_annotation_is_planned(cluster_plan: migrate.Plan) -> None:
    kinds = sorted((str(c.workload.kind), c.workload.name) for c in cluster_plan.workloads)
    assert kinds == [
        ("CronJob", "report"),
        ("DaemonSet", "probe"),
        ("Deployment", "web"),
        ("Job", "backup"),
        ("Pod", "client"),
        ("ReplicaSet", "legacy"),
        ("StatefulSet", "db"),
    ]


def test_cronjob_annotation_is_read_from_the_job_templates_pod_template(cluster_plan: migrate.Plan) -> None:
    change = change_of(cluster_plan, "CronJob", "report")
    assert change.workload.annotations_path == "spec.jobTemplate.spec.template.metadata.annotations"


def test_a_pod_managed_by_a_workload_is_skipped_and_names_its_owner(cluster_plan: migrate.Plan) -> None:
    [skipped] = cluster_plan.skipped
    assert str(skipped.ref) == "Pod app/legacy-x7k2p"
    assert "ReplicaSet app/legacy" in skipped.message
    assert not cluster_plan.unmigratable


def test_objects_of_other_kinds_or_groups_are_not_workloads() -> None:
    fake = {"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "x"}}
    assert workloads.read(fake) is None
    assert workloads.read({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}) is None


# --- networks ----------------------------------------------------------------------------------


def test_one_podnetwork_per_nad_named_after_namespace_and_nad(cluster_plan: migrate.Plan) -> None:
    pns = created(cluster_plan, constants.PODNETWORK_KIND)
    assert sorted(pns) == ["app.bridge-net", "app.bridge-net.2", "app.macvlan-conf", "infra.storage"]
    storage = pns["infra.storage"]
    assert storage["spec"] == {
        "enabled": True,
        "provider": constants.BRIDGE_PROVIDER,
        "parametersRefs": [
            {"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "storage", "namespace": "infra"}
        ],
    }
    assert "metadata" in storage and "namespace" not in storage["metadata"]


def test_created_objects_record_their_origin(cluster_plan: migrate.Plan) -> None:
    for planned in cluster_plan.objects():
        meta = planned.obj["metadata"]
        assert meta["labels"][migrate.MIGRATED_BY_LABEL] == migrate.FIELD_MANAGER
        origin = json.loads(meta["annotations"][migrate.ORIGIN_ANNOTATION])
        assert origin["kind"] in {"NetworkAttachmentDefinition", *(str(k) for k in WorkloadKind)}
    origin = json.loads(
        created(cluster_plan, constants.PODNETWORK_KIND)["app.bridge-net.2"]["metadata"]["annotations"][
            migrate.ORIGIN_ANNOTATION
        ]
    )
    assert origin == {"kind": "NetworkAttachmentDefinition", "namespace": "app", "name": "bridge-net", "occurrence": 2}


def test_every_planned_object_passes_the_static_validation(cluster_plan: migrate.Plan) -> None:
    for planned in cluster_plan.objects():
        if planned.obj["kind"] == constants.PODNETWORK_KIND:
            assert validation.validate_podnetwork(planned.obj) == []
        elif planned.obj["kind"] == constants.ATTACHMENT_KIND:
            assert validation.validate_attachment(planned.obj) == []


def test_the_same_nad_twice_in_one_pod_gets_two_podnetworks_on_that_nad(cluster_plan: migrate.Plan) -> None:
    change = change_of(cluster_plan, "DaemonSet", "probe")
    assert kep(change) == [
        {"podNetworkName": "default"},
        {"podNetworkName": "app.bridge-net"},
        {"podNetworkName": "app.bridge-net.2"},
    ]
    pns = created(cluster_plan, constants.PODNETWORK_KIND)
    assert pns["app.bridge-net"]["spec"]["parametersRefs"] == pns["app.bridge-net.2"]["spec"]["parametersRefs"]
    assert validation.validate_networks(change.networks) == []


def test_workloads_share_the_podnetwork_of_a_nad(cluster_plan: migrate.Plan) -> None:
    uses = [
        entry.get("podNetworkName")
        for change in cluster_plan.workloads
        for entry in kep(change)
        if entry.get("podNetworkName") == "app.bridge-net"
    ]
    assert len(uses) == 3  # client, web, probe
    assert len([o for o in cluster_plan.networks if o.obj["metadata"]["name"] == "app.bridge-net"]) == 1


# --- the new annotation -------------------------------------------------------------------------


def test_default_comes_first_then_elements_in_order_with_interface_names(cluster_plan: migrate.Plan) -> None:
    assert kep(change_of(cluster_plan, "Pod", "client")) == [
        {"podNetworkName": "default"},
        {"podNetworkName": "app.bridge-net", "interfaceName": "eth1"},
        {"podNetworkName": "infra.storage"},
    ]
    assert kep(change_of(cluster_plan, "StatefulSet", "db")) == [
        {"podNetworkName": "default"},
        {"podNetworkName": "infra.storage", "interfaceName": "stor0"},
    ]


def test_the_npwg_annotation_is_replaced_and_other_annotations_kept(cluster_plan: migrate.Plan) -> None:
    change = change_of(cluster_plan, "Deployment", "web")
    assert change.new_annotations() == {
        "example.com/keep-me": "yes",
        constants.NETWORKS_ANNOTATION: '[{"podNetworkName":"default"},{"podNetworkName":"app.bridge-net","interfaceName":"net1"}]',
    }
    assert networks.parse(change.after)[1].interface_name == "net1"


def test_per_pod_ips_and_mac_go_to_options_behind_an_attachment(cluster_plan: migrate.Plan) -> None:
    change = change_of(cluster_plan, "ReplicaSet", "legacy")
    assert kep(change) == [
        {"podNetworkName": "default"},
        {"podNetworkAttachmentName": "replicaset-legacy-0", "interfaceName": "mv0"},
    ]
    pna = created(cluster_plan, constants.ATTACHMENT_KIND)["app/replicaset-legacy-0"]
    assert pna["spec"] == {
        "podNetworkName": "app.macvlan-conf",
        "parametersRefs": [
            {
                "group": "bridge.multinetwork.x-k8s.io",
                "kind": "NetworkSelectionOptions",
                "name": "replicaset-legacy-0",
                "namespace": "app",
            }
        ],
    }
    options = created(cluster_plan, migrate.OPTIONS_KIND)["app/replicaset-legacy-0"]
    assert options["spec"] == {"ips": ["192.168.1.200/24", "2001:db8::200/64"], "mac": "c2:b0:57:49:47:f1"}


def test_every_per_pod_key_is_carried_to_the_options(cluster_plan: migrate.Plan) -> None:
    options = created(cluster_plan, migrate.OPTIONS_KIND)
    assert options["app/job-backup-1"]["spec"] == {"cni-args": {"spoofchk": "on"}, "default-route": ["10.10.0.1"]}
    assert options["app/cronjob-report-0"]["spec"] == {
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1000000, "egressRate": 2000000},
    }
    # default-route needs isDefaultGW4/6 on the entry: the bridge emits it only for such entries.
    assert kep(change_of(cluster_plan, "Job", "backup"))[2] == {
        "podNetworkAttachmentName": "job-backup-1",
        "isDefaultGW4": True,
    }
    # The element without per-pod keys in the same Job stays a plain PodNetwork reference.
    assert kep(change_of(cluster_plan, "Job", "backup"))[1] == {"podNetworkName": "infra.storage"}


# --- what cannot be migrated -------------------------------------------------------------------


def test_a_pod_whose_networks_are_the_auto_populated_default_alone_is_migrated_and_the_plan_keeps_them() -> None:
    # the controller's admission writes [{"podNetworkName": "default"}] on every new pod that names none,
    # so a live pod with an NPWG selection carries both (seen on a real cluster: tests/real/test_migrate.py)
    populated = networks.format([*networks.parse('[{"podNetworkName": "default"}]')])
    p = plan_of([nad("edge", "net-a"), pod("edge", "live", "net-a", **{constants.NETWORKS_ANNOTATION: populated})])
    assert not p.unmigratable
    change = change_of(p, "Pod", "live")
    assert kep(change) == [{"podNetworkName": "default"}, {"podNetworkName": "edge.net-a"}]
    assert change.replaced == populated
    [record] = migrate.plan_header(p)["workloads"]
    assert record["before"] == {NPWG: "net-a", constants.NETWORKS_ANNOTATION: populated}


def test_a_pod_with_other_networks_beside_its_npwg_selection_is_not_migrated() -> None:
    for other in ('[{"podNetworkName": "default", "interfaceName": "eth0"}]', '[{"podNetworkName": "x"}]', "[]"):
        p = plan_of([nad("edge", "net-a"), pod("edge", "both", "net-a", **{constants.NETWORKS_ANNOTATION: other})])
        assert [u.reason for u in p.unmigratable] == [migrate.Reason.ALREADY_HAS_NETWORKS], other


def test_each_unmigratable_workload_has_its_reason() -> None:
    inventory = migrate.Inventory()
    for doc in manifests.load([FIXTURES / "invalid"]):
        inventory.add(doc.obj, source=doc.source)
    p = migrate.plan(inventory)
    reasons = {u.ref.name: u.reason for u in p.unmigratable}
    assert reasons == {
        "broken-json": migrate.Reason.INVALID_ANNOTATION,
        "no-such-nad": migrate.Reason.MISSING_NAD,
        "same-interface-twice": migrate.Reason.INVALID_ANNOTATION,
        "host": migrate.Reason.HOST_NETWORK,
        "both": migrate.Reason.ALREADY_HAS_NETWORKS,
    }
    missing = next(u for u in p.unmigratable if u.ref.name == "no-such-nad")
    assert "elsewhere/missing" in missing.message
    assert missing.source.endswith("workloads.yaml:doc 3")
    assert [c.workload.name for c in p.workloads] == ["ok"]


def test_a_workload_that_fails_half_way_claims_nothing() -> None:
    # Element 0 would create a PodNetwork, element 1 names a missing NAD: no PodNetwork at all.
    p = plan_of([nad("ns", "a"), pod("ns", "p", "a,b")])
    assert p.objects() == []
    assert [u.reason for u in p.unmigratable] == [migrate.Reason.MISSING_NAD]


def test_the_multus_default_network_override_is_not_migrated() -> None:
    p = plan_of([nad("ns", "a"), pod("ns", "p", "a", **{"v1.multus-cni.io/default-network": "calico"})])
    assert [u.reason for u in p.unmigratable] == [migrate.Reason.DEFAULT_NETWORK_OVERRIDE]


def test_a_nad_whose_config_cannot_be_used_is_reported() -> None:
    broken = nad("ns", "a")
    broken["spec"]["config"] = "{not json"
    p = plan_of([broken, pod("ns", "p", "a")])
    [problem] = p.unmigratable
    assert problem.reason == migrate.Reason.INVALID_NAD
    assert "ns/a" in problem.message


def test_extension_keys_that_options_cannot_carry_are_reported() -> None:
    p = plan_of([nad("ns", "a"), pod("ns", "p", '[{"name": "a", "org.example.color": "blue"}]')])
    [problem] = p.unmigratable
    assert problem.reason == migrate.Reason.UNSUPPORTED_KEY
    assert "org.example.color" in problem.message


def test_pre_spec_keys_do_not_stop_the_migration_and_are_reported_as_dropped() -> None:
    # NPWG 4.1.2.1 reserves keys without a period; the spec does not define these, no
    # implementation acts on them, so the workload migrates and the user is told what goes.
    selection = '[{"name": "a", "interface": "net5", "interfaceRequest": "eth9", "ipRequest": ["10.0.0.5"]}]'
    p = plan_of([nad("ns", "a"), pod("ns", "p", selection)])
    assert p.unmigratable == []
    [change] = p.workloads
    assert kep(change) == [{"podNetworkName": "default"}, {"podNetworkName": "ns.a", "interfaceName": "net5"}]
    assert change.before == selection, "the plan keeps the original, so --rollback restores the keys"
    [note] = change.notes
    assert "'interfaceRequest'" in note and "'ipRequest'" in note and "4.1.2.1" in note
    assert migrate.problems(p) == f"i Pod ns/p: {note}\n"


def test_an_empty_selection_becomes_the_default_network_alone() -> None:
    p = plan_of([pod("ns", "p", "")])
    assert kep(p.workloads[0]) == [{"podNetworkName": "default"}]


# --- names -------------------------------------------------------------------------------------


def test_a_name_taken_by_a_different_podnetwork_gets_a_hashed_name() -> None:
    squatter = {
        "apiVersion": constants.API_VERSION,
        "kind": "PodNetwork",
        "metadata": {"name": "ns.a"},
        "spec": {"provider": "example.com/other"},
    }
    p = plan_of([nad("ns", "a"), pod("ns", "p", "a"), squatter])
    [pn] = p.objects()
    name = pn.obj["metadata"]["name"]
    assert name != "ns.a" and name.startswith("ns.a-")
    assert validation.dns1123_subdomain_errors("metadata.name", name) == []
    assert kep(p.workloads[0])[1] == {"podNetworkName": name}
    assert plan_of([nad("ns", "a"), pod("ns", "p2", "a"), squatter]).objects()[0].obj["metadata"]["name"] == name


def test_an_existing_identical_podnetwork_is_reused_not_created() -> None:
    first = plan_of([nad("ns", "a"), pod("ns", "p", "a")])
    existing = first.objects()[0].obj
    p = plan_of([nad("ns", "a"), pod("ns", "q", "a"), existing])
    assert p.objects() == []
    assert [str(o.ref) for o in p.objects(migrate.Action.REUSE)] == ["PodNetwork ns.a"]
    assert kep(p.workloads[0])[1] == {"podNetworkName": "ns.a"}


def test_names_too_long_for_kubernetes_are_cut_and_hashed_apart() -> None:
    long_a, long_b = "a" * 200 + "-x", "a" * 200 + "-y"
    ns = "n" * 63
    p = plan_of([nad(ns, long_a), nad(ns, long_b), pod(ns, "p", f"{long_a},{long_b}")])
    names = [o.obj["metadata"]["name"] for o in p.networks]
    assert len(set(names)) == 2
    for name in names:
        assert validation.dns1123_subdomain_errors("metadata.name", name) == []


def test_natural_names_of_distinct_origins_differ() -> None:
    assert migrate.network_name("a", "b-c") != migrate.network_name("a-b", "c")
    assert migrate.network_name("a", "b") != migrate.network_name("a", "b", 2)
    assert migrate.attachment_name("Pod", "web-1", 2) != migrate.attachment_name("Pod", "web", 12)


# --- determinism, idempotence, output ----------------------------------------------------------


def test_the_plan_does_not_depend_on_input_order() -> None:
    objects = load("cluster", "invalid")
    expected = migrate.to_yaml(plan_of(objects))
    for seed in range(3):
        shuffled = objects[:]
        random.Random(seed).shuffle(shuffled)
        assert migrate.to_yaml(plan_of(shuffled)) == expected


def test_planning_again_after_the_plan_is_applied_plans_nothing(cluster_plan: migrate.Plan) -> None:
    objects = load("cluster")
    changes = {(str(c.workload.kind), c.workload.name): c for c in cluster_plan.workloads}
    after = []
    for obj in objects:
        change = changes.get((obj["kind"], obj["metadata"]["name"]))
        after.append(migrate.rewrite(obj, change) if change else obj)
    after += [o.obj for o in cluster_plan.objects()]
    again = plan_of(after)
    assert again.empty
    assert again.unmigratable == []


def test_the_plan_file_is_a_migration_plan_followed_by_the_objects(cluster_plan: migrate.Plan) -> None:
    docs = [d.obj for d in manifests.load_text(migrate.to_yaml(cluster_plan), "plan.yaml").documents]
    header, objects = docs[0], docs[1:]
    assert (header["apiVersion"], header["kind"]) == ("bridge.multinetwork.x-k8s.io/v1alpha1", "MigrationPlan")
    assert header["fieldManager"] == "podnetwork-migrate"
    assert [o["kind"] for o in objects] == (
        ["PodNetwork"] * 4 + ["NetworkSelectionOptions"] * 3 + ["PodNetworkAttachment"] * 3
    )
    web = next(w for w in header["workloads"] if w["name"] == "web")
    assert web["before"] == {NPWG: '[{"name": "bridge-net", "interface": "net1"}]'}
    assert web["annotationsPath"] == "spec.template.metadata.annotations"
    assert header["skipped"][0]["object"] == "Pod app/legacy-x7k2p"


def test_the_diff_shows_new_objects_and_annotation_lines(cluster_plan: migrate.Plan) -> None:
    text = migrate.diff(cluster_plan)
    assert "+ PodNetwork infra.storage -> NetworkAttachmentDefinition infra/storage\n" in text
    assert "--- Deployment app/web spec.template.metadata.annotations (before)\n" in text
    assert "-k8s.v1.cni.cncf.io/networks: [{\"name\": \"bridge-net\", \"interface\": \"net1\"}]\n" in text
    assert "+example.com/keep-me" not in text  # unchanged annotations are not shown


def test_rewrite_changes_only_the_template_annotations(cluster_plan: migrate.Plan) -> None:
    [cron] = [o for o in load("cluster") if o["kind"] == "CronJob"]
    out = migrate.rewrite(cron, change_of(cluster_plan, "CronJob", "report"))
    template = out["spec"]["jobTemplate"]["spec"]["template"]
    assert NPWG not in template["metadata"]["annotations"]
    assert constants.NETWORKS_ANNOTATION in template["metadata"]["annotations"]
    assert out["spec"]["schedule"] == cron["spec"]["schedule"]
    assert NPWG in cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["annotations"]  # input untouched
    assert yaml.safe_load(migrate.dump_yaml([out]))["kind"] == "CronJob"


def test_finished_pods_are_skipped() -> None:
    done = pod("ns", "p", "a")
    done["status"] = {"phase": "Succeeded"}
    p = plan_of([nad("ns", "a"), done])
    assert p.workloads == [] and p.unmigratable == []
    assert [s.message for s in p.skipped] == ["finished pod: nothing will attach it again"]


def test_every_planned_object_passes_its_crd_schema(cluster_plan: migrate.Plan) -> None:
    crds = {
        "PodNetwork": crd("podnetworks.yaml"),
        "PodNetworkAttachment": crd("podnetworkattachments.yaml"),
        "NetworkSelectionOptions": crd("networkselectionoptions.yaml"),
    }
    for planned in cluster_plan.objects():
        assert schema_errors(crds[planned.obj["kind"]], planned.obj) == [], planned.ref
        if planned.obj["kind"] == migrate.OPTIONS_KIND:
            assert translate.options_problem(planned.obj["spec"]) is None


def test_a_selection_the_bridge_wrote_from_podnetworks_is_not_migrated_again() -> None:
    first = plan_of([nad("ns", "a"), pod("ns", "p", "a")])
    text = '[{"name":"a","namespace":"ns"}]'
    bridged = pod("ns", "p", text, **{
        constants.NETWORKS_ANNOTATION: first.workloads[0].after,
        pods.WRITTEN_ANNOTATION: pods.digest(text),
    })
    again = plan_of([nad("ns", "a"), bridged, *(o.obj for o in first.objects())])
    assert again.empty and again.unmigratable == [] and again.skipped == []
    # A hand-written selection beside the KEP one is still looked at.
    hand = pod("ns", "p", "a", **{constants.NETWORKS_ANNOTATION: first.workloads[0].after})
    assert len(plan_of([nad("ns", "a"), hand, *(o.obj for o in first.objects())]).workloads) == 1
