"""`podnetwork migrate -f`: the offline command, end to end through the CLI entry point."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from podnetwork import cli
from podnetwork.cli import manifests
from podnetwork.ground import constants
from podnetwork.kep import validation

FIXTURES = Path(__file__).parents[2] / "fixtures" / "migrate"
NPWG = "k8s.v1.cni.cncf.io/networks"


def run(*argv: str) -> int:
    return cli.main(["migrate", *argv])


def test_help_describes_both_modes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "podnetwork", "migrate", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    for flag in ("--filename", "--kubeconfig", "--context", "--all-namespaces", "--apply", "--rollback", "--output"):
        assert flag in done.stdout


def test_offline_plan_prints_the_diff_and_writes_the_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    assert run("-f", str(FIXTURES / "cluster"), "-o", str(plan)) == 0
    out, err = capsys.readouterr()
    assert "+ PodNetwork app.bridge-net -> NetworkAttachmentDefinition app/bridge-net" in out
    assert "+multinetwork.x-k8s.io/networks: " in out
    assert "plan: create 4 PodNetwork, 3 PodNetworkAttachment, 3 NetworkSelectionOptions; change 7 workload(s); 1 skipped" in err
    docs = list(yaml.safe_load_all(plan.read_text()))
    assert docs[0]["kind"] == "MigrationPlan"
    assert len(docs) == 11


def test_plan_to_stdout_sends_the_diff_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("-f", str(FIXTURES / "cluster"), "-o", "-") == 0
    out, err = capsys.readouterr()
    assert next(yaml.safe_load_all(out))["kind"] == "MigrationPlan"
    assert "+ PodNetwork" in err


def test_unmigratable_workloads_make_exit_status_1_and_are_listed_even_when_quiet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run("-f", str(FIXTURES / "invalid"), "-q") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "Pod edge/no-such-nad: MissingNetworkAttachmentDefinition: " in err
    assert err.count("\n! ") + err.startswith("! ") == 5


def test_rewritten_manifests_are_valid_and_plan_nothing_more(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "migrated"
    assert run("-f", str(FIXTURES / "cluster"), "--write-manifests", str(out_dir), "-q") == 0
    capsys.readouterr()
    docs = manifests.load([out_dir])
    kinds = [d.kind for d in docs]
    assert kinds.count("PodNetwork") == 4 and kinds.count("PodNetworkAttachment") == 3
    for doc in docs:
        if doc.kind == "PodNetwork":
            assert validation.validate_podnetwork(doc.obj) == []
        if doc.kind == "Pod" and doc.name == "client":
            assert NPWG not in doc.obj["metadata"]["annotations"]
            assert validation.validate_pod(doc.obj) == []
            assert constants.NETWORKS_ANNOTATION in doc.obj["metadata"]["annotations"]

    assert run("-f", str(out_dir), "-q") == 0
    _, err = capsys.readouterr()
    assert "create 0 PodNetwork, 0 PodNetworkAttachment, 0 NetworkSelectionOptions; change 0 workload(s)" in err


def test_unreadable_input_changes_nothing_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\n  metadata: [\n")
    plan = tmp_path / "plan.yaml"
    assert run("-f", str(bad), "-f", str(FIXTURES / "cluster"), "-o", str(plan)) == 2
    _, err = capsys.readouterr()
    assert f"{bad}:doc 1: invalid YAML" in err
    assert not plan.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-f", "x.yaml", "--apply"], "-f reads manifests offline"),
        (["-f", "x.yaml", "--rollback", "plan.yaml"], "-f reads manifests offline"),
        ([], "say what to migrate"),
        (["-A", "--write-manifests", "out"], "--write-manifests works offline only"),
        (["--rollback", "p.yaml", "--apply"], "--rollback PLAN takes no --apply"),
    ],
)
def test_contradictory_arguments_are_refused_with_the_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(*argv) == 2
    _, err = capsys.readouterr()
    assert message in err


def test_objects_without_a_namespace_take_the_namespace_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: n}\n"
        "spec: {config: '{\"cniVersion\": \"1.0.0\", \"type\": \"bridge\"}'}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {k8s.v1.cni.cncf.io/networks: n}}\n"
    )
    assert run("-f", str(manifest), "-n", "team-a") == 0
    out, _ = capsys.readouterr()
    assert "+ PodNetwork team-a.n -> NetworkAttachmentDefinition team-a/n" in out


# --- what is written, and where (docs/migration.md "Offline") ---------------------------------


def _kinds(directory: Path) -> list[str]:
    return sorted(d.kind for d in manifests.load([directory]))


def test_an_input_named_like_the_generated_objects_file_is_written_beside_it_not_over_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As when re-running over a previous output: the inputs hold a 00-podnetwork-migration.yaml.
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "00-podnetwork-migration.yaml").write_text((FIXTURES / "cluster" / "workloads.yaml").read_text())
    (inputs / "nads.yaml").write_text((FIXTURES / "cluster" / "nads.yaml").read_text())
    out_dir = tmp_path / "out"
    assert run("-f", str(inputs), "--write-manifests", str(out_dir), "-q") == 0
    err = capsys.readouterr().err
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "00-podnetwork-migration-2.yaml", "00-podnetwork-migration.yaml", "nads.yaml"]
    generated = [d.kind for d in manifests.load([out_dir / "00-podnetwork-migration.yaml"])]
    assert generated.count("PodNetwork") == 4 and generated.count("PodNetworkAttachment") == 3
    rewritten = manifests.load([out_dir / "00-podnetwork-migration-2.yaml"])
    assert [d.kind for d in rewritten] == [d.kind for d in manifests.load([inputs / "00-podnetwork-migration.yaml"])]
    assert f"i {inputs / '00-podnetwork-migration.yaml'}: written as {out_dir / '00-podnetwork-migration-2.yaml'}" in err


def test_inputs_whose_names_collide_each_get_a_file_of_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a/x.yaml, b/x.yaml and c/x-2.yaml: the second x.yaml must not take x-2.yaml from the third.
    for sub, name in (("a", "x.yaml"), ("b", "x.yaml"), ("c", "x-2.yaml")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / name).write_text(
            f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {sub}, namespace: default}}\n")
    out_dir = tmp_path / "out"
    assert run("-f", str(tmp_path / "a"), "-f", str(tmp_path / "b"), "-f", str(tmp_path / "c"),
               "--write-manifests", str(out_dir), "-q") == 0
    capsys.readouterr()
    names = {p.name: manifests.load([p])[0].name for p in out_dir.iterdir() if p.name != "00-podnetwork-migration.yaml"}
    assert sorted(names.values()) == ["a", "b", "c"], names


@pytest.mark.parametrize(
    ("flag", "target", "message"),
    [
        ("-o", "{tmp}/missing/plan.yaml", "-o {tmp}/missing/plan.yaml: the directory {tmp}/missing does not exist"),
        ("-o", "{tmp}", "-o {tmp}: is a directory; give a file name inside it"),
        ("-o", "", "-o: an empty path; give a file name"),
        ("--write-manifests", "{tmp}/file.txt", "--write-manifests {tmp}/file.txt: is not a directory"),
        ("--write-manifests", "", "--write-manifests: an empty path; give a directory"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_planning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, target: str, message: str
) -> None:
    (tmp_path / "file.txt").write_text("")
    assert run("-f", str(FIXTURES / "cluster"), flag, target.format(tmp=tmp_path)) == 2
    out, err = capsys.readouterr()
    assert message.format(tmp=tmp_path) in err
    assert out == "" and "plan:" not in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_the_plan_goes_through_a_link_to_a_device_which_stays_a_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = tmp_path / "sink"
    sink.symlink_to("/dev/null")
    assert run("-f", str(FIXTURES / "cluster"), "-o", str(sink), "-q") == 0
    assert sink.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_malformed_workload_is_reported_with_its_fields_and_the_rest_is_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Deployment the API server would refuse (ownerReferences not a list) is read by the
    # shared workload view once, and refused naming the field, whatever else it holds.
    nad = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
           "metadata": {"name": "a", "namespace": "app"}, "spec": {"config": '{"cniVersion": "1.0.0", "type": "bridge"}'}}
    fine = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fine", "namespace": "app", "annotations": {NPWG: "a"}}}
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad", "namespace": "app", "ownerReferences": 5},
           "spec": {"template": {"metadata": {"annotations": {NPWG: "a"}}}}}
    inputs = tmp_path / "in.yaml"
    inputs.write_text(yaml.safe_dump_all([nad, fine, bad]))
    plan = tmp_path / "plan.yaml"
    assert run("-f", str(inputs), "-q", "-o", str(plan)) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert (f"! {inputs}:doc 3: Deployment app/bad: InvalidObject: does not fit its schema: "
            "metadata.ownerReferences: Input should be a valid list\n") in err
    assert "Traceback" not in err
    assert "change 1 workload(s); 1 cannot be migrated" in err
    header = next(yaml.safe_load_all(plan.read_text()))
    assert [w["name"] for w in header["workloads"]] == ["fine"]
    assert [(u["object"], u["reason"]) for u in header["unmigratable"]] == [("Deployment app/bad", "InvalidObject")]
