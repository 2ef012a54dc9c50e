"""`podnetwork validate` and `podnetwork migrate` on hostile files, through the CLI.

Each command runs as a subprocess with bounded memory and time (files_support):
alias bombs, deep nesting, symlink loops, FIFOs, devices and oversized files
must end in a short, clear refusal naming the file (and line), never in a
traceback, a hang, or gigabytes of output.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from podnetwork import cli
from tests.unit.files_support import (
    DEPLOYMENT,
    NAD,
    PN_HEAD,
    SMALL_OUTPUT,
    Run,
    bomb,
    first_refused_alias,
    nested,
    podnetwork,
)

ALIAS_REFUSAL = "YAML aliases here expand the input to more than 10000 nodes"
DEPTH_REFUSAL = "nested more than 100 levels deep"
#: The default of --max-file-size, documented in docs/api.md and docs/migration.md.
LIMIT = 4 * 1024 * 1024


def assert_refused(run: Run, code: int, *expected: str) -> None:
    assert run.code == code, run.output[-2000:]
    assert "Traceback" not in run.output, run.output[-2000:]
    assert len(run.output) < SMALL_OUTPUT, f"{len(run.output)} characters of output"
    for text in expected:
        assert text in run.output, run.output


# --- 10. alias bombs ----------------------------------------------------------------------------

BOMBS = {
    "provider": PN_HEAD + "spec:\n  provider:\n" + bomb(indent=4),
    "parametersRefs": PN_HEAD + "spec:\n  parametersRefs:\n" + bomb(indent=4),
    "networks annotation": (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ns\n  annotations:\n"
        "    multinetwork.x-k8s.io/networks:\n" + bomb(indent=6)
        + "spec:\n  containers: [{name: c, image: x}]\n"
    ),
    "workload template": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\nspec:\n  template:\n"
        "    metadata:\n      annotations: {k8s.v1.cni.cncf.io/networks: blue}\n      labels:\n"
        "        bomb:\n" + bomb(indent=10) + "    spec:\n      containers: [{name: c, image: x}]\n"
    ),
}


@pytest.mark.parametrize("where", list(BOMBS))
def test_validate_refuses_an_alias_bomb_at_the_alias_that_exceeds_the_bound(tmp_path: Path, where: str) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMBS[where])
    line, column = first_refused_alias(BOMBS[where])
    run = podnetwork("validate", "-f", path)
    assert_refused(run, 1, f"{path}:doc 1: line {line} column {column}: {ALIAS_REFUSAL}", "write the values out")


@pytest.mark.parametrize("where", ["workload template", "networks annotation"])
def test_migrate_refuses_an_alias_bomb_and_plans_nothing(tmp_path: Path, where: str) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMBS[where])
    (tmp_path / "nad.yaml").write_text(NAD)
    plan, out_dir = tmp_path / "plan.yaml", tmp_path / "out"
    line, column = first_refused_alias(BOMBS[where])
    run = podnetwork("migrate", "-f", tmp_path, "-o", plan, "--write-manifests", out_dir)
    assert_refused(
        run, 2, f"podnetwork migrate: {path}:doc 1: line {line} column {column}: {ALIAS_REFUSAL}", "nothing planned"
    )
    assert not plan.exists()
    assert not out_dir.exists()


def test_the_alias_budget_spans_the_documents_of_a_file(tmp_path: Path) -> None:
    # Each document alone stays under the bound; together they would not.
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c%d}\ndata:\n  x:\n" + bomb(levels=4, indent=4)
    path = tmp_path / "many.yaml"
    path.write_text("---\n".join(doc % i for i in range(3)))
    run = podnetwork("validate", "-f", path)
    assert_refused(run, 1, f"{path}:doc 2: line ", ALIAS_REFUSAL)


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cycle.yaml"
    line = "  parametersRefs: &loop [*loop]"
    path.write_text(PN_HEAD + "spec:\n" + line + "\n")
    run = podnetwork("validate", "-f", path)
    column = line.index("*") + 1
    assert_refused(run, 1, f"{path}:doc 1: line 6 column {column}: alias *loop is inside the node of its own anchor &loop")


def test_a_few_small_aliases_and_merges_are_read_as_kubernetes_reads_them(tmp_path: Path) -> None:
    # Merge keys: the mapping's own keys override merged ones (not a duplicate key).
    path = tmp_path / "anchors.yaml"
    path.write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: v1, kind: ConfigMap, metadata: &meta {name: base, namespace: ns}, data: &data {a: x}}\n"
        "- {apiVersion: v1, kind: ConfigMap, metadata: {<<: *meta, name: derived}, data: *data}\n"
    )
    run = podnetwork("validate", "-v", "-f", path)
    assert run.code == 0, run.output
    assert "doc 1 items[0] ConfigMap ns/base: skipped" in run.stdout
    assert "doc 1 items[1] ConfigMap ns/derived: skipped" in run.stdout


# --- 11. deep nesting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        pytest.param(nested(100_000), 1, 101, id="flow lists 100000 deep"),
        pytest.param("- " * 100_000 + "x\n", 1, 201, id="block lists 100000 deep"),
        pytest.param("{a: " * 100_000 + "1" + "}" * 100_000, 1, 401, id="flow mappings 100000 deep"),
        pytest.param(PN_HEAD + "spec:\n  provider: " + nested(100_000), 6, len("  provider: ") + 99, id="in a field"),
    ],
)
def test_validate_refuses_deep_nesting_with_file_and_line(tmp_path: Path, text: str, line: int, column: int) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    run = podnetwork("validate", "-f", path)
    assert_refused(run, 1, f"{path}:doc 1: line {line} column {column}: {DEPTH_REFUSAL}", "check the brackets")


def test_nesting_that_aliases_expand_beyond_the_bound_is_refused_at_the_alias(tmp_path: Path) -> None:
    inner, outer = nested(60), "[" * 45
    path = tmp_path / "deep-alias.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n"
        f"  a: &deep {inner}\n  b: {outer}*deep{']' * 45}\n"
    )
    run = podnetwork("validate", "-f", path)
    # 2 mappings + 45 lists + 60 behind the alias: 107 levels.
    assert_refused(run, 1, f"{path}:doc 1: line 6 column {len('  b: ') + 45 + 1}: {DEPTH_REFUSAL}")


def test_migrate_refuses_deep_nesting_and_plans_nothing(tmp_path: Path) -> None:
    (tmp_path / "deep.yaml").write_text(DEPLOYMENT.format(name="d") + "  extra: " + nested(100_000) + "\n")
    (tmp_path / "nad.yaml").write_text(NAD)
    run = podnetwork("migrate", "-f", tmp_path, "-o", tmp_path / "plan.yaml")
    assert_refused(run, 2, f"{tmp_path / 'deep.yaml'}:doc 1: line 10 column {len('  extra: ') + 99}: {DEPTH_REFUSAL}")
    assert not (tmp_path / "plan.yaml").exists()


def test_deep_json_is_refused_like_deep_yaml(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"apiVersion": "v1", "kind": "ConfigMap", "data": ' + nested(150) + "}")
    run = podnetwork("validate", "-f", path)
    assert_refused(run, 1, f"{path}:doc 1: nested more than 100 levels deep")


# --- 12. what is read: regular files, bounded, each directory once ------------------------------


def pn_file(path: Path, name: str = "pn") -> Path:
    path.write_text(PN_HEAD.replace("name: pn", f"name: {name}") + "spec:\n  provider: example.com/p\n")
    return path


def test_a_directory_with_symlinks_to_itself_is_read_once(tmp_path: Path) -> None:
    root = tmp_path / "loop"
    root.mkdir()
    pn_file(root / "pn.yaml")
    (root / "a").symlink_to(".")
    (root / "b").symlink_to(".")
    (root / "sub").mkdir()
    pn_file(root / "sub" / "pn2.yaml", "pn2")
    (root / "sub" / "up").symlink_to("..")
    run = podnetwork("validate", "-R", "-v", "-f", root, timeout=30)
    assert run.code == 0, run.output
    assert run.stdout.count("PodNetwork pn: valid") == 1
    assert run.stdout.count("PodNetwork pn2: valid") == 1
    assert "2 objects checked" in run.stderr


def test_a_directory_given_twice_or_inside_another_input_is_read_once(tmp_path: Path) -> None:
    pn_file(tmp_path / "pn.yaml")
    (tmp_path / "sub").mkdir()
    pn_file(tmp_path / "sub" / "pn2.yaml", "pn2")
    run = podnetwork("validate", "-R", "-f", tmp_path / "sub", "-f", tmp_path, "-f", tmp_path)
    assert run.code == 0, run.output
    assert "2 objects checked" in run.stderr


def test_a_fifo_named_like_a_manifest_is_refused_and_the_rest_is_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    pn_file(tmp_path / "pn.yaml")
    run = podnetwork("validate", "-f", tmp_path, timeout=30)
    assert_refused(
        run, 2, f"{tmp_path / 'pipe.yaml'}: is a FIFO (named pipe), not a regular file", "pipe it to -f -",
        "1 object checked",
    )
    run = podnetwork("validate", "-f", tmp_path / "pipe.yaml", timeout=30)
    assert_refused(run, 2, f"{tmp_path / 'pipe.yaml'}: is a FIFO (named pipe), not a regular file")


def test_migrate_refuses_a_fifo_and_plans_nothing(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "nad.yaml").write_text(NAD)
    run = podnetwork("migrate", "-f", tmp_path, "-o", tmp_path / "plan.yaml", timeout=30)
    assert_refused(run, 2, f"{tmp_path / 'pipe.yaml'}: is a FIFO (named pipe), not a regular file", "nothing planned")
    assert not (tmp_path / "plan.yaml").exists()


@pytest.mark.parametrize("command", [["validate"], ["migrate", "-q"]])
def test_a_device_is_refused_without_reading_it(command: list[str]) -> None:
    run = podnetwork(*command, "-f", "/dev/zero")
    assert_refused(run, 2, "/dev/zero: is a character device, not a regular file")


def test_a_dangling_symlink_named_like_a_manifest_is_reported(tmp_path: Path) -> None:
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    pn_file(tmp_path / "pn.yaml")
    run = podnetwork("validate", "-f", tmp_path)
    assert_refused(run, 2, f"{tmp_path / 'gone.yaml'}: a symbolic link to {tmp_path / 'nowhere.yaml'}, which cannot be read")


def padded(size: int) -> bytes:
    head = (PN_HEAD + "spec:\n  provider: example.com/p\n").encode()
    return head + b"#" * (size - len(head) - 1) + b"\n"


@pytest.mark.parametrize("command", [["validate"], ["migrate", "-q"]])
def test_a_file_larger_than_the_limit_is_refused_naming_the_limit_and_the_flag(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(padded(LIMIT + 1))
    run = podnetwork(*command, "-f", path)
    assert_refused(
        run, 2,
        f"{path}: is {LIMIT + 1} bytes, more than the 4 MiB ({LIMIT} bytes) a manifest file may have",
        "raise the limit with --max-file-size",
    )


def test_the_size_limit_is_inclusive_and_the_flag_raises_it(tmp_path: Path) -> None:
    exact, bigger = tmp_path / "exact.yaml", tmp_path / "bigger.yaml"
    exact.write_bytes(padded(LIMIT))
    bigger.write_bytes(padded(6 * 1024 * 1024))
    assert podnetwork("validate", "-f", exact).code == 0
    run = podnetwork("validate", "--max-file-size", "8Mi", "-f", bigger)
    assert run.code == 0, run.output
    run = podnetwork("validate", "--max-file-size", "5Mi", "-f", bigger)
    assert_refused(run, 2, "more than the 5 MiB (5242880 bytes) a manifest file may have")


def test_stdin_larger_than_the_limit_is_refused(tmp_path: Path) -> None:
    run = podnetwork("validate", "--max-file-size", "1Ki", "-f", "-", stdin=padded(2048))
    assert_refused(run, 2, "<stdin>: is more than the 1 KiB (1024 bytes) a manifest file may have")


def test_a_size_that_is_not_a_size_is_a_usage_error() -> None:
    run = podnetwork("validate", "--max-file-size", "lots", "-f", "examples")
    assert_refused(run, 2, "'lots' is not a size; write bytes, or e.g. 512Ki, 8Mi, 1Gi")


# --- 13. libyaml parses when installed ----------------------------------------------------------


def pure_python_parser_calls(argv: list[str]) -> tuple[int, int]:
    """(exit status, calls into PyYAML's pure-Python reader, scanner and parser) of one run."""
    parts = (f"yaml{os.sep}reader.py", f"yaml{os.sep}scanner.py", f"yaml{os.sep}parser.py")
    calls = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call" and frame.f_code.co_filename.endswith(parts):  # type: ignore[attr-defined]
            calls += 1

    sys.setprofile(profile)
    try:
        code = cli.main(argv)
    finally:
        sys.setprofile(None)
    return code, calls


def test_libyaml_parses_the_manifests_when_it_is_installed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert yaml.__with_libyaml__, "PyYAML's wheels include libyaml; this environment should have it"
    path = tmp_path / "many.yaml"
    path.write_text("---\n".join(
        PN_HEAD.replace("name: pn", f"name: pn-{i}") + "spec:\n  provider: example.com/p\n" for i in range(300)
    ))
    code, calls = pure_python_parser_calls(["validate", "-f", str(path)])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert "300 objects checked" in err
    assert calls == 0


def test_migrate_reads_with_libyaml_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nad.yaml").write_text(NAD)
    (tmp_path / "apps.yaml").write_text("---\n".join(DEPLOYMENT.format(name=f"d{i}") for i in range(100)))
    code, calls = pure_python_parser_calls(["migrate", "-q", "-f", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert "change 100 workload(s)" in err
    assert calls == 0


# --- values in messages are cut -----------------------------------------------------------------


def test_validate_cuts_a_megabyte_long_value_and_name(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    name = "n" * 1_000_000
    path.write_text(f"{PN_HEAD.replace('name: pn', f'name: {name}')}spec:\n  provider: {'p' * 1_000_000}\n")
    run = podnetwork("validate", "-f", path)
    assert_refused(run, 1, "spec.provider: Invalid value: \"ppp", "(1000000 characters, cut)", "PodNetwork nnnn")


def test_migrate_cuts_a_megabyte_long_network_name(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(DEPLOYMENT.format(name="d").replace("networks: blue", "networks: " + "n" * 1_000_000))
    run = podnetwork("migrate", "-f", path)
    assert_refused(run, 1, "Deployment ns/d: InvalidAnnotation: ", "characters, cut)")


# --- the plan file of --rollback goes through the same reader -----------------------------------


@pytest.fixture()
def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A cluster on a loopback port nothing listens on: reaching it would fail loudly."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "c", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
    }))
    return path


def rollback(plan: Path | str, kubeconfig: Path) -> Run:
    return podnetwork("migrate", "--kubeconfig", kubeconfig, "--rollback", plan, timeout=30)


def test_a_rollback_plan_with_an_alias_bomb_is_refused_before_connecting(
    tmp_path: Path, unreachable_kubeconfig: Path
) -> None:
    plan = tmp_path / "plan.yaml"
    text = "apiVersion: bridge.multinetwork.x-k8s.io/v1alpha1\nkind: MigrationPlan\nworkloads:\n" + bomb(indent=2)
    plan.write_text(text)
    line, column = first_refused_alias(text)
    run = rollback(plan, unreachable_kubeconfig)
    assert_refused(run, 2, f"{plan}:doc 1: line {line} column {column}: {ALIAS_REFUSAL}", "nothing rolled back")
    assert "cannot reach" not in run.output


@pytest.mark.parametrize("kind", ["fifo", "device", "too large"])
def test_a_rollback_plan_that_is_not_a_bounded_regular_file_is_refused(
    tmp_path: Path, unreachable_kubeconfig: Path, kind: str
) -> None:
    plan: Path | str = tmp_path / "plan.yaml"
    if kind == "fifo":
        os.mkfifo(plan)
        expected = "is a FIFO (named pipe), not a regular file"
    elif kind == "device":
        plan, expected = "/dev/zero", "is a character device, not a regular file"
    else:
        Path(plan).write_bytes(padded(LIMIT + 1))
        expected = f"is {LIMIT + 1} bytes, more than the 4 MiB"
    run = rollback(plan, unreachable_kubeconfig)
    assert_refused(run, 2, f"podnetwork migrate: {plan}: {expected}", "nothing rolled back")
    assert "-f -" not in run.output  # --rollback reads no stdin: no such hint
    assert "cannot reach" not in run.output
