"""`podnetwork explain` and `podnetwork graph` from manifests: the chain, its first broken link, DOT."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from podnetwork import cli, constants, explain, graph

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
