"""The object graph of KEP-3698: pods, attachments, PodNetworks, parameter objects, nodes.

Built with networkx from plain objects (from a cluster or from manifest files),
so `explain` and `graph` share one reading of the references (KEP "Resources
relations"):

    Pod --(spec.networks[i])--> PodNetwork | PodNetworkAttachment
    PodNetworkAttachment --(spec.podNetworkName)--> PodNetwork
    PodNetwork, PodNetworkAttachment --(spec.parametersRefs[i])--> parameters object
    Pod --(spec.nodeName)--> Node --(default)--> its default PodNetwork

Every node of the graph is keyed `Kind/namespace/name` (`Kind//name` when
cluster-scoped) and carries `kind`, `namespace`, `name`, `obj` (None when the
object is referenced but was not found: a broken link) and, for PodNetworks
and attachments, `ready` and `reason` (from status, or computed by the
controller's own rules when the input has no status).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

import networkx as nx

from podnetwork import conditions, constants, defaultnet, networks, validation
from podnetwork.fielderrors import InvalidObject


def key(kind: str, namespace: str | None, name: str) -> str:
    return f"{kind}/{namespace or ''}/{name}"


def label(node_key: str) -> str:
    """`Kind ns/name` or `Kind name`, for people."""
    kind, namespace, name = node_key.split("/", 2)
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _kind_alias(kind: str) -> str:
    """parametersRefs may name a kind (`NetworkAttachmentDefinition`) or a resource
    (`network-attachment-definitions`); both reduce to `networkattachmentdefinition`."""
    alias = kind.lower().replace("-", "").replace("_", "")
    return alias[:-1] if alias.endswith("s") else alias


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _readiness(graph: nx.DiGraph, node_key: str) -> None:
    data = graph.nodes[node_key]
    obj = data.get("obj")
    if obj is None or data["kind"] not in (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND):
        return
    written = conditions.find(obj, constants.ConditionType.READY)
    if written is not None:
        data["ready"] = written.get("status") == "True"
        data["reason"] = written.get("reason") or ""
        data["message"] = written.get("message") or ""
        data["computed"] = False
        return
    if data["kind"] == constants.PODNETWORK_KIND:
        desired = conditions.podnetwork_ready(obj)
    else:
        target = next((t for t in graph.successors(node_key)
                       if graph.nodes[t]["kind"] == constants.PODNETWORK_KIND), None)
        pn = graph.nodes[target].get("obj") if target else None
        if pn is not None and "ready" in graph.nodes[target] and conditions.find(pn, "Ready") is None:
            # the PodNetwork's readiness was computed too: give the attachment the same view
            view = graph.nodes[target]
            status = "True" if view["ready"] else "False"
            ready = {"type": "Ready", "status": status, "reason": view["reason"]}
            pn = {**pn, "status": {"conditions": [ready]}}
        desired = conditions.attachment_ready(obj, pn)
    data["ready"] = desired.status == "True"
    data["reason"] = str(desired.reason)
    data["message"] = desired.message
    data["computed"] = True


def build(objects: Iterable[Mapping[str, Any]]) -> nx.DiGraph:
    """The reference graph of `objects`; referenced but absent objects are nodes with obj=None."""
    graph: nx.DiGraph = nx.DiGraph()
    objs = list(objects)
    aliases: dict[tuple[str, str, str], str] = {}
    for obj in objs:
        kind = obj.get("kind") or ""
        namespace, name = _meta(obj)
        graph.add_node(key(kind, namespace, name), kind=kind, namespace=namespace, name=name, obj=dict(obj))
        aliases[(_kind_alias(kind), namespace, name)] = key(kind, namespace, name)

    def target(kind: str, namespace: str, name: str) -> str:
        k = key(kind, namespace, name)
        if k not in graph:
            graph.add_node(k, kind=kind, namespace=namespace, name=name, obj=None)
        return k

    for obj in objs:
        kind = obj.get("kind") or ""
        namespace, name = _meta(obj)
        src = key(kind, namespace, name)
        spec = obj.get("spec") or {}
        if kind in (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND):
            for i, ref in enumerate(spec.get("parametersRefs") or []):
                if isinstance(ref, Mapping) and ref.get("kind") and ref.get("name"):
                    ref_ns = ref.get("namespace") or ""
                    found = aliases.get((_kind_alias(ref["kind"]), ref_ns, ref["name"]))
                    dst = found or target(ref["kind"], ref_ns, ref["name"])
                    graph.nodes[dst].setdefault("group", ref.get("group") or "")
                    graph.add_edge(src, dst, relation=f"parametersRefs[{i}]")
        if kind == constants.ATTACHMENT_KIND and spec.get("podNetworkName"):
            graph.add_edge(src, target(constants.PODNETWORK_KIND, "", spec["podNetworkName"]),
                           relation="podNetworkName")
        if kind == "Pod":
            try:
                nets = networks.effective(obj)
            except InvalidObject as exc:
                graph.nodes[src]["errors"] = [str(e) for e in exc.errors]
                nets = []
            else:
                errors = validation.validate_pod(obj)
                if errors:
                    graph.nodes[src]["errors"] = [str(e) for e in errors]
            for i, net in enumerate(nets):
                if net.pod_network_attachment_name:
                    dst = target(constants.ATTACHMENT_KIND, namespace, net.pod_network_attachment_name)
                else:
                    dst = target(constants.PODNETWORK_KIND, "", net.pod_network_name or "")
                relation = f"networks[{i}]" + (f" {net.interface_name}" if net.interface_name else "")
                graph.add_edge(src, dst, relation=relation)
            node_name = spec.get("nodeName")
            if node_name:
                graph.add_edge(src, target("Node", "", node_name), relation="nodeName")
        if kind == "Node":
            graph.add_edge(src, target(constants.PODNETWORK_KIND, "", defaultnet.node_default_name(obj)),
                           relation="default")
    # PodNetworks first: an attachment's computed readiness needs its PodNetwork's.
    for kind in (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND):
        for node_key in [n for n, d in graph.nodes(data=True) if d["kind"] == kind]:
            _readiness(graph, node_key)
    return graph


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_SHAPES = {"Pod": "box", constants.PODNETWORK_KIND: "ellipse", constants.ATTACHMENT_KIND: "hexagon",
           "Node": "box3d"}


def to_dot(graph: nx.DiGraph) -> str:
    """Graphviz DOT text: missing objects dashed red, not-Ready networks orange."""
    lines = ["digraph podnetwork {", "  rankdir=LR;", '  node [fontname="Helvetica"];',
             '  edge [fontname="Helvetica", fontsize=10];']
    for node_key, data in sorted(graph.nodes(data=True)):
        attrs = {"label": label(node_key), "shape": _SHAPES.get(data["kind"], "note")}
        if data.get("obj") is None:
            attrs.update(style="dashed", color="red", label=label(node_key) + "\n(not found)")
        elif data.get("ready") is False or data.get("errors"):
            reason = data.get("reason") or "invalid"
            attrs.update(color="orange", label=f"{label(node_key)}\n({reason})")
        elif data.get("ready") is True:
            attrs["color"] = "darkgreen"
        text = ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())
        lines.append(f"  {_quote(node_key)} [{text}];")
    for src, dst, data in sorted(graph.edges(data=True)):
        lines.append(f"  {_quote(src)} -> {_quote(dst)} [label={_quote(data.get('relation', ''))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dot_available() -> bool:
    return shutil.which("dot") is not None


def to_svg(dot_text: str) -> bytes:
    """Render DOT as SVG with Graphviz's `dot`. Raises RuntimeError when it is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("Graphviz `dot` is not installed (apt-get install graphviz); write DOT instead")
    return subprocess.run([exe, "-Tsvg"], input=dot_text.encode(), check=True, capture_output=True).stdout


__all__ = ["build", "dot_available", "key", "label", "to_dot", "to_svg"]
