"""`podnetwork explain` and `podnetwork graph` from manifests: the chain, its first broken link, DOT."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from podnetwork import cli
from podnetwork.ground import constants
from podnetwork.kep import explain, graph

ROOT = Path(__file__).resolve().parents[3]
NAD_REF = {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": "nad", "namespace": "ns"}


def pn(name: str, *, refs: list[dict[str, str]] | None = None, ready: str | None = None,
       enabled: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": constants.API_VERSION, "kind": "PodNetwork", "metadata": {"name": name},
                           "spec": {"enabled": enabled, **({"parametersRefs": refs} if refs else {})}}
    if ready is not None:
        obj["status"] = {"conditions": [{"type": "Ready", "status": ready, "reason": "Ready" if ready == "True"
                                         else "ParamsNotReady", "message": "m", "lastTransitionTime": "t"}]}
    return obj


def pna(name: str, network: str) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": "PodNetworkAttachment",
            "metadata": {"name": name, "namespace": "ns"}, "spec": {"podNetworkName": network}}


def pod(name: str, nets: Any, node: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if nets is not None:
        meta["annotations"] = {constants.NETWORKS_ANNOTATION: nets if isinstance(nets, str) else json.dumps(nets)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"phase": "Pending"}}


NAD = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
       "metadata": {"name": "nad", "namespace": "ns"}, "spec": {"config": "{}"}}


def run(objects: list[dict[str, Any]], subject: str) -> explain.Explanation:
    return explain.explain(graph.build(objects), subject)


def test_healthy_pod_has_no_broken_link():
    objs = [pn("default", ready="True"), pn("blue"), pna("fast", "blue"),
            pod("a", [{"podNetworkName": "default"}, {"podNetworkAttachmentName": "fast"}])]
    result = run(objs, explain.subject_key("pod", "ns/a"))
    assert result.first_broken is None
    assert result.lines == [
        "Pod ns/a: Pending",
        "  networks[0] -> PodNetwork default: Ready",
        "  networks[1] -> PodNetworkAttachment ns/fast: Ready (computed: no status in the input)",
        "    podNetworkName -> PodNetwork blue: Ready (computed: no status in the input)",
    ]


def test_missing_attachment_is_the_first_broken_link():
    result = run([pod("a", [{"podNetworkAttachmentName": "nope"}])], "Pod/ns/a")
    assert str(result.first_broken) == "PodNetworkAttachment ns/nope: not found in the input"


def test_root_cause_is_the_deepest_problem_under_the_first_broken_link():
    objs = [pn("blue", refs=[NAD_REF], ready="False"), pna("fast", "blue"), pod("a", [{"podNetworkAttachmentName": "fast"}])]
    result = run(objs, "Pod/ns/a")
    assert result.first_broken is not None and result.first_broken.subject == "PodNetworkAttachment/ns/fast"
    assert result.root_cause is not None
    assert str(result.root_cause) == "network-attachment-definitions ns/nad: not found in the input"
    assert "root cause: network-attachment-definitions ns/nad" in result.render()


def test_parameters_ref_by_resource_name_finds_the_object_by_kind():
    objs = [pn("blue", refs=[NAD_REF], ready="True"), NAD]
    g = graph.build(objs)
    assert list(g.successors("PodNetwork//blue")) == ["NetworkAttachmentDefinition/ns/nad"]


def test_invalid_pod_annotation_is_reported_with_field_errors():
    result = run([pod("a", [{"podNetworkName": "x"}, {"podNetworkName": "x"}])], "Pod/ns/a")
    assert str(result.first_broken) == 'Pod ns/a: spec.networks[1].podNetworkName: Duplicate value: "x"'


def test_podnetwork_explanation_lists_its_consumers():
    objs = [pn("blue", enabled=False), pna("fast", "blue"), pod("a", [{"podNetworkName": "blue"}])]
    result = run(objs, explain.subject_key("pn", "blue"))
    assert result.lines[0] == "PodNetwork blue: NOT READY (AdministrativelyDisabled) (computed: no status in the input)"
    assert result.lines[-1] == "referenced by 1 attachment(s) and 1 pod(s): PodNetworkAttachment ns/fast, Pod ns/a"


def test_pod_on_a_node_whose_default_is_missing():
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {"conditions": [
        {"type": "DefaultPodNetworkReady", "status": "False", "reason": "DefaultPodNetworkNotFound",
         "message": "default PodNetwork not found in API"}]}}
    result = run([pn("blue", ready="True"), pod("a", [{"podNetworkName": "blue"}], node="n1"), node], "Pod/ns/a")
    assert str(result.first_broken) == "Node n1: DefaultPodNetworkNotFound: default PodNetwork not found in API"


@pytest.mark.parametrize(("kind", "ref", "message"), [
    ("deployment", "ns/a", "unknown kind"), ("pod", "a", "NAMESPACE/NAME"), ("pn", "ns/a", "cluster-scoped")])
def test_bad_subjects_are_refused_with_a_hint(kind, ref, message):
    with pytest.raises(ValueError, match=message):
        explain.subject_key(kind, ref)


def test_dot_marks_missing_and_unready_objects():
    dot = graph.to_dot(graph.build([pn("blue", ready="False"), pod("a", [{"podNetworkAttachmentName": "gone"}])]))
    assert dot.startswith("digraph podnetwork {")
    assert '"PodNetworkAttachment/ns/gone" [label="PodNetworkAttachment ns/gone\\n(not found)", shape="hexagon", style="dashed", color="red"];' in dot
    assert '"PodNetwork//blue" [label="PodNetwork blue\\n(ParamsNotReady)", shape="ellipse", color="orange"];' in dot
    assert '"Pod/ns/a" -> "PodNetworkAttachment/ns/gone" [label="networks[0]"];' in dot


# --- the commands, from files ----------------------------------------------------------------

def write(tmp_path: Path, objs: list[dict[str, Any]]) -> str:
    path = tmp_path / "objs.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    return str(path)


def test_explain_exits_0_for_an_unbroken_chain_1_for_a_broken_link_and_2_for_bad_input(tmp_path, capsys):
    path = write(tmp_path, [pn("blue", ready="True"), pod("a", [{"podNetworkName": "blue"}]),
                            pod("b", [{"podNetworkName": "red"}])])
    assert cli.main(["explain", "pod", "ns/a", "-f", path]) == 0
    assert "no broken link" in capsys.readouterr().out
    assert cli.main(["explain", "pod", "ns/b", "-f", path]) == 1
    assert "first broken link: PodNetwork red: not found in the input" in capsys.readouterr().out
    assert cli.main(["explain", "pod", "ns/zzz", "-f", path]) == 2
    assert "Pod ns/zzz not found in the input files" in capsys.readouterr().err
    assert cli.main(["explain", "pod", "ns/a", "-f", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_graph_command_writes_dot(tmp_path, capsys):
    path = write(tmp_path, [pn("blue", ready="True"), pod("a", [{"podNetworkName": "blue"}])])
    out = tmp_path / "g.dot"
    assert cli.main(["graph", "-f", path, "-o", str(out)]) == 0
    assert '"Pod/ns/a" -> "PodNetwork//blue"' in out.read_text()


def test_graph_command_refuses_svg_without_graphviz(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without `dot`
    path = write(tmp_path, [pn("blue")])
    assert cli.main(["graph", "-f", path, "-o", str(tmp_path / "g.svg")]) == 2
    assert "SVG needs Graphviz" in capsys.readouterr().err
    assert not (tmp_path / "g.svg").exists()


def test_graph_command_checks_its_output_before_reading_anything(tmp_path, capsys):
    for target, words in [("", "-o: an empty path; give a file name"),
                          (str(tmp_path), "is a directory; give a file name inside it"),
                          (str(tmp_path / "missing" / "g.dot"), f"the directory {tmp_path / 'missing'} does not exist")]:
        assert cli.main(["graph", "-f", str(tmp_path / "no-such.yaml"), "-o", target]) == 2
        err = capsys.readouterr().err
        assert words in err and "no-such.yaml" not in err and "Traceback" not in err


def test_graph_command_writes_through_a_link_to_a_device(tmp_path, capsys):
    path = write(tmp_path, [pn("blue", ready="True")])
    sink = tmp_path / "sink.dot"
    sink.symlink_to("/dev/null")
    assert cli.main(["graph", "-f", path, "-o", str(sink)]) == 0
    assert sink.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_graph_command_renders_svg_with_graphviz_as_make_setup_installs_it(tmp_path, capsys):
    # `make setup` (system-deps) installs graphviz as root: README's `podnetwork graph -o graph.svg`.
    if shutil.which("dot") is None:
        if os.environ.get("CI"):
            pytest.fail("Graphviz's `dot` is missing in CI: `make setup` as root installs it")
        pytest.skip("Graphviz's `dot` is not installed: run `make setup` as root")
    out = tmp_path / "graph.svg"
    assert cli.main(["graph", "-f", str(ROOT / "examples"), "-o", str(out)]) == 0
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "ClusterRole podnetwork&#45;use&#45;dataplane" in svg and "roleRef" in svg


@pytest.mark.parametrize(
    ("uid", "have_dot", "installed", "note"),
    [
        ("0", False, ["update", "install -y graphviz"], ""),
        ("0", True, [], ""),
        ("1000", False, [], "note: not root, so graphviz were not installed"),
    ],
    ids=["root without dot", "root with dot", "not root"],
)
def test_make_setup_installs_graphviz_as_root_only_when_dot_is_missing(tmp_path, uid, have_dot, installed, note):
    # The Makefile's own recipe, run by make, against stand-ins for apt-get, id and the tools it looks for.
    bin_dir, cni_dir, calls = tmp_path / "bin", tmp_path / "cni", tmp_path / "apt-calls"
    bin_dir.mkdir()
    cni_dir.mkdir()
    # Everything else system-deps looks for is there: nft, conntrack, cc with a static libc, and the
    # real tier's containerd, runc, openssl, curl and xz, and mmdebstrap (the image the real tier packs).
    libc = tmp_path / "libc.a"
    libc.write_text("")
    stubs = {"apt-get": f'echo "$*" >> {calls}', "id": f"echo {uid}", "ip": "exit 0", "nft": "exit 0",
             "conntrack": "exit 0", "cc": f"echo {libc}", "containerd": "exit 0", "runc": "exit 0",
             "openssl": "exit 0", "curl": "exit 0", "xz": "exit 0", "mmdebstrap": "exit 0", **({"dot": "exit 0"} if have_dot else {})}
    for name, body in [*stubs.items(), ("bridge", "exit 0"), ("host-local", "exit 0")]:
        stub = (cni_dir if name in ("bridge", "host-local") else bin_dir) / name
        stub.write_text(f"#!/bin/sh\n{body}\n")
        stub.chmod(0o755)
    make = shutil.which("make")
    assert make is not None, "make runs the project's setup"
    done = subprocess.run([make, "-s", "-C", str(ROOT), "system-deps", f"CNI_BIN={cni_dir}"],
                          env={"PATH": str(bin_dir)}, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (calls.read_text().splitlines() if calls.exists() else []) == installed
    assert note in done.stdout


def test_rbac_that_grants_use_points_at_the_podnetworks_it_grants(capsys):
    objects = [
        pn("blue"), pn("red"),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "use-blue"},
         "rules": [{"apiGroups": ["multinetwork.x-k8s.io"], "resources": ["podnetworks"],
                    "resourceNames": ["blue", "gone"], "verbs": ["use"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "all", "namespace": "ns"},
         "rules": [{"apiGroups": ["*"], "resources": ["podnetworks"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"},
         "rules": [{"apiGroups": ["multinetwork.x-k8s.io"], "resources": ["podnetworks"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b", "namespace": "ns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "use-blue"},
         "subjects": [{"kind": "ServiceAccount", "name": "app"}, {"kind": "User", "name": "alice"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "cb"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "missing"},
         "subjects": [{"kind": "Group", "name": "devs"}]},
        {"apiVersion": "example.com/v1", "kind": "Role", "metadata": {"name": "not-rbac", "namespace": "ns"},
         "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
    ]
    g = graph.build(objects)
    edges = {(s, d): e["relation"] for (s, d), e in g.edges.items()}
    assert edges == {
        ("ClusterRole//use-blue", "PodNetwork//blue"): "use",
        ("ClusterRole//use-blue", "PodNetwork//gone"): "use",
        ("Role/ns/all", "PodNetwork//blue"): "use (every PodNetwork)",
        ("Role/ns/all", "PodNetwork//red"): "use (every PodNetwork)",
        ("RoleBinding/ns/b", "ClusterRole//use-blue"): "roleRef",
        ("ClusterRoleBinding//cb", "ClusterRole//missing"): "roleRef",
    }
    dot = graph.to_dot(g)
    assert ('"RoleBinding/ns/b" [label="RoleBinding ns/b\\nto ServiceAccount ns/app\\nto User alice\\n'
            'in namespace ns", shape="cds"];') in dot
    assert '"ClusterRoleBinding//cb" [label="ClusterRoleBinding cb\\nto Group devs\\nin every namespace"' in dot
    assert ('"ClusterRole//use-blue" -> "PodNetwork//blue" [label="use", style="dashed", color="blue", '
            'fontcolor="blue"];') in dot
    explained = explain.explain(g, "PodNetwork//blue").render()
    assert "use granted by 2 role(s): ClusterRole use-blue, Role ns/all" in explained
    # What a cluster read keeps of every role and binding: those about PodNetworks.
    kept = [(o["kind"], o["metadata"]["name"]) for o in graph.referenced_roles(objects)]
    assert kept == [("ClusterRole", "use-blue"), ("Role", "all"), ("RoleBinding", "b")]


def test_the_examples_rbac_for_use_is_drawn_granting_dataplane(capsys):
    assert cli.main(["graph", "-f", str(ROOT / "examples")]) == 0
    dot = capsys.readouterr().out
    assert '"RoleBinding/default/podnetwork-use-dataplane" -> "ClusterRole//podnetwork-use-dataplane" [label="roleRef"' in dot
    assert '"ClusterRole//podnetwork-use-dataplane" -> "PodNetwork//dataplane" [label="use"' in dot
    assert "to ServiceAccount default/default\\nin namespace default" in dot
