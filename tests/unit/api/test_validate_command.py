"""`podnetwork validate`: offline checks of manifests, one line per problem, and
exit status 0 (valid), 1 (invalid), 2 (unreadable input or bad arguments)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from podnetwork.commands import validate
from tests.unit.crd_support import EXAMPLES, ROOT

PN = "apiVersion: multinetwork.x-k8s.io/v1alpha1\nkind: PodNetwork\nmetadata:\n  name: {name}\n"
POD = (
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ns\n  annotations:\n"
    "    multinetwork.x-k8s.io/networks: '{nets}'\nspec:\n  containers: [{{name: c, image: x}}]\n"
)


def podnetwork(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "podnetwork", *args],
        capture_output=True, text=True, input=stdin, cwd=ROOT, timeout=60, check=False,
    )


def run(inputs: list[str], **kwargs: object) -> tuple[int, list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    code = validate.check(inputs, out=out, err=err, **kwargs)  # type: ignore[arg-type]
    return code, out.getvalue().splitlines(), err.getvalue()


def test_examples_directory_is_valid():
    result = podnetwork("validate", "-f", "examples/")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    # Skipped: the NAD, and the ClusterRole and RoleBinding of examples/rbac-use-dataplane.yaml.
    assert "0 problems; 5 objects checked, 0 invalid, 3 skipped" in result.stderr


def test_invalid_examples_give_one_clear_line_per_problem():
    result = podnetwork("validate", "-f", "examples/invalid/")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "examples/invalid/pod-duplicate-interface.yaml:doc 1 Pod default/duplicate-interface: "
        'spec.networks[1].interfaceName: Duplicate value: "eth0"',
        "examples/invalid/pod-host-network.yaml:doc 1 Pod default/host-network: "
        "spec.networks: Forbidden: may not be set when `spec.hostNetwork` is true",
        "examples/invalid/pod-long-interface-name.yaml:doc 1 Pod default/long-interface-name: "
        "spec.networks[0].interfaceName: Too long: may not be more than 15 bytes",
    ]


def test_examples_pass_and_invalid_ones_fail_when_read_recursively():
    result = podnetwork("validate", "-R", "-f", "examples")
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == 3


def test_stdin_and_verbose_list_skipped_and_valid_objects():
    text = (EXAMPLES / "nad-dataplane.yaml").read_text() + "---\n" + PN.format(name="default")
    result = podnetwork("validate", "-v", "-f", "-", stdin=text)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "<stdin>:doc 1 NetworkAttachmentDefinition default/dataplane: "
        "skipped: kind NetworkAttachmentDefinition (k8s.cni.cncf.io/v1) is not checked",
        "<stdin>:doc 2 PodNetwork default: valid",
    ]


def test_help_describes_the_command():
    result = podnetwork("validate", "--help")
    assert result.returncode == 0
    assert "-f FILE_OR_DIR" in result.stdout
    assert "exit status: 0 valid, 1 invalid, 2 unreadable input or bad arguments" in result.stdout


def test_missing_argument_is_a_usage_error():
    result = podnetwork("validate")
    assert result.returncode == 2
    assert "the following arguments are required: -f/--filename" in result.stderr


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_every_problem_of_every_object_is_reported(tmp_path):
    nets = '[{"podNetworkName": "a", "interfaceName": "net1"}, {"podNetworkName": "a", "interfaceName": "net1"}]'
    path = write(tmp_path, "m.yaml", POD.format(name="p", nets=nets) + "---\n" + PN.format(name="Bad"))
    code, lines, err = run([path])
    assert code == 1
    assert lines == [
        f'{path}:doc 1 Pod ns/p: spec.networks[1].podNetworkName: Duplicate value: "a"',
        f'{path}:doc 1 Pod ns/p: spec.networks[1].interfaceName: Duplicate value: "net1"',
        f'{path}:doc 2 PodNetwork Bad: metadata.name: Invalid value: "Bad": a lowercase RFC 1123 subdomain '
        "must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an "
        "alphanumeric character",
    ]
    assert "3 problems; 2 objects checked, 2 invalid, 0 skipped" in err


def test_malformed_annotation_json_says_where(tmp_path):
    path = write(tmp_path, "p.yaml", POD.format(name="p", nets='[{"podNetworkName": }]'))
    code, lines, _ = run([path])
    assert code == 1
    (line,) = lines
    assert line.startswith(f"{path}:doc 1 Pod ns/p: metadata.annotations[multinetwork.x-k8s.io/networks]: ")
    assert "not valid JSON: Expecting value at line 1 column 21" in line


def test_podnetwork_schema_problems_are_reported(tmp_path):
    text = PN.format(name="n") + "  namespace: ns\nspec:\n  provider: ''\n  primary: true\n"
    path = write(tmp_path, "pn.yaml", text)
    code, lines, _ = run([path])
    assert code == 1
    assert [line.split(": ", 2)[1] for line in lines] == ["spec.provider", "spec.primary", "metadata.namespace"]


def test_attachment_without_podnetworkname_is_reported(tmp_path):
    text = "apiVersion: multinetwork.x-k8s.io/v1alpha1\nkind: PodNetworkAttachment\n" \
           "metadata: {name: a, namespace: ns}\nspec: {}\n"
    code, lines, _ = run([write(tmp_path, "a.yaml", text)])
    assert code == 1
    assert [line.split(": ", 1)[1] for line in lines] == ["spec.podNetworkName: Required value"]


def test_unknown_kind_of_our_group_fails_but_other_kinds_are_skipped(tmp_path):
    text = "apiVersion: multinetwork.x-k8s.io/v1alpha1\nkind: PodNetworks\nmetadata: {name: x}\n---\n" \
           "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\n"
    path = write(tmp_path, "k.yaml", text)
    code, lines, err = run([path])
    assert code == 1
    assert lines == [
        f'{path}:doc 1 PodNetworks x: kind: Invalid value: "PodNetworks": not a kind of '
        "multinetwork.x-k8s.io; known kinds are PodNetwork, PodNetworkAttachment",
    ]
    assert "1 skipped" in err
    code, lines, _ = run([path], verbose=1)
    assert lines[1] == f"{path}:doc 2 Deployment ns/d: skipped: kind Deployment (apps/v1) is not checked"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [\n", "invalid YAML at line 2 column 1"),
        ("", "empty file: no Kubernetes objects in it"),
        ("- just\n- a list\n", "a document must be a Kubernetes object (a mapping), not a list"),
    ],
)
def test_unreadable_manifest_is_one_line_and_exit_1(tmp_path, text, message):
    path = write(tmp_path, "bad.yaml", text)
    code, lines, _ = run([path])
    assert code == 1
    assert len(lines) == 1
    assert lines[0].startswith(f"{path}") and message in lines[0]


def test_missing_file_is_exit_2_on_stderr_and_other_inputs_are_still_checked(tmp_path):
    code, lines, err = run([str(tmp_path / "nope.yaml"), str(EXAMPLES / "invalid" / "pod-host-network.yaml")])
    assert code == 2
    assert len(lines) == 1 and "Forbidden" in lines[0]
    assert f"{tmp_path / 'nope.yaml'}: no such file or directory" in err


def test_quiet_prints_no_summary(tmp_path):
    code, lines, err = run([str(EXAMPLES)], quiet=True)
    assert (code, lines, err) == (0, [], "")


def test_the_three_invalid_pods_in_one_file_give_three_lines(tmp_path):
    parts = sorted((EXAMPLES / "invalid").glob("*.yaml"))
    path = write(tmp_path, "all.yaml", "---\n".join(p.read_text() for p in parts))
    code, lines, _ = run([path])
    assert code == 1
    assert [line.split(": ", 1)[1] for line in lines] == [
        'spec.networks[1].interfaceName: Duplicate value: "eth0"',
        "spec.networks: Forbidden: may not be set when `spec.hostNetwork` is true",
        "spec.networks[0].interfaceName: Too long: may not be more than 15 bytes",
    ]
    assert [line.split(" Pod ", 1)[0] for line in lines] == [f"{path}:doc {i}" for i in (1, 2, 3)]
