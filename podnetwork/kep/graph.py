"""The object graph of KEP-3698: pods, attachments, PodNetworks, parameter objects, nodes.

Built with networkx from plain objects (from a cluster or from manifest files),
so `explain` and `graph` share one reading of the references (KEP "Resources
relations"):

    Pod --(spec.networks[i])--> PodNetwork | PodNetworkAttachment
    PodNetworkAttachment --(spec.podNetworkName)--> PodNetwork
    PodNetwork, PodNetworkAttachment --(spec.parametersRefs[i])--> parameters object
    Pod --(spec.nodeName)--> Node --(default)--> its default PodNetwork
    RoleBinding, ClusterRoleBinding --(roleRef)--> Role | ClusterRole --(use)--> PodNetwork

The last line is who may attach pods to a PodNetwork (KEP "controlled via RBAC
configuration"; `podnetwork controller --enforce-use-permission` asks for verb
`use` on `podnetworks`): a role whose rule grants it points at each PodNetwork
its `resourceNames` list (at every PodNetwork of the graph when it lists none),
and a binding carries its subjects and where they may use it (the binding's
namespace, or every namespace for a ClusterRoleBinding).

Every node of the graph is keyed `Kind/namespace/name` (`Kind//name` when
cluster-scoped) and carries `kind`, `namespace`, `name`, `obj` (None when the
object is referenced but was not found: a broken link) and, for PodNetworks
and attachments, `ready` and `reason` (from status, or computed by the
controller's own rules when the input has no status).

`build` is where the objects enter: `obj` is the object read into its model
(`podnetwork.kep.api`) or view (`podnetwork.ground.core`; other kinds as
`PartialObjectMetadata`). An object that does not fit its model is kept as
`PartialObjectMetadata` with `errors` naming every field that does not fit (a
PodNetwork or attachment is then not Ready, reason `Invalid`); one whose
metadata cannot be read at all (a name that is not a string) is left out of
the graph with a warning.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

import networkx as nx
import pydantic

from podnetwork.ground import constants, excerpts
from podnetwork.ground.core import Node, PartialObjectMetadata, Pod, head_of
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import api, conditions, defaultnet, networks, validation

logger = logging.getLogger(__name__)

#: A graph node's `obj`: a KEP model, a core view, or any other kind's type and metadata.
Object = api.PodNetwork | api.PodNetworkAttachment | Pod | Node | PartialObjectMetadata
#: Reason of the Ready a PodNetwork or attachment is given when it does not fit its model.
INVALID_REASON = "Invalid"

RBAC_GROUP = "rbac.authorization.k8s.io"
ROLE_KINDS = ("ClusterRole", "Role")
BINDING_KINDS = ("ClusterRoleBinding", "RoleBinding")
USE_VERB = constants.USE_VERB
#: Subjects a binding's label names; the rest are counted.
SHOWN_SUBJECTS = 5


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


def _field_errors(exc: pydantic.ValidationError) -> list[str]:
    out = []
    for err in exc.errors(include_url=False):
        loc = ""
        for part in err["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        out.append(f"{loc or '<root>'}: {err['msg']}")
    return out


def _read(raw: Mapping[str, Any]) -> tuple[Object, list[str]] | None:
    """`raw` in its model or view, with what does not fit; None when even its metadata cannot be read."""
    try:
        head = PartialObjectMetadata.model_validate(raw)
    except pydantic.ValidationError as exc:
        logger.warning("left out of the graph: its metadata cannot be read: %s",
                       "; ".join(_field_errors(exc)))
        return None
    try:
        if head.kind == constants.PODNETWORK_KIND:
            return api.PodNetwork.model_validate(raw), []
        if head.kind == constants.ATTACHMENT_KIND:
            return api.PodNetworkAttachment.model_validate(raw), []
        if head.kind == "Pod":
            return Pod.model_validate(raw), []
        if head.kind == "Node":
            return Node.model_validate(raw), []
    except pydantic.ValidationError as exc:
        return head, _field_errors(exc)
    return head, []


def _strings(value: Any) -> set[str]:
    return {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()


def is_rbac(raw: Mapping[str, Any], kinds: Iterable[str]) -> bool:
    """Whether `raw` is an RBAC object of one of `kinds` (not another group's `Role`)."""
    version, kind = raw.get("apiVersion"), raw.get("kind")
    return (isinstance(kind, str) and kind in set(kinds) and isinstance(version, str)
            and version.startswith(f"{RBAC_GROUP}/"))


def use_grants(role: Mapping[str, Any]) -> list[str | None]:
    """The PodNetworks a Role or ClusterRole lets its subjects `use`, in rule order: names,
    and None for a rule without `resourceNames` (every PodNetwork). Wildcards count, as RBAC
    counts them: `*` in apiGroups, resources or verbs."""
    grants: list[str | None] = []
    rules = role.get("rules")
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, Mapping):
            continue
        if not (_strings(rule.get("apiGroups")) & {constants.GROUP, "*"}
                and _strings(rule.get("resources")) & {constants.PODNETWORK_PLURAL, "*"}
                and _strings(rule.get("verbs")) & {USE_VERB, "*"}):
            continue
        names = sorted(_strings(rule.get("resourceNames")))
        grants += names if names else [None]
    return grants


def _role_ref(binding: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of a binding's role, when it names an RBAC role."""
    ref = binding.get("roleRef")
    if not isinstance(ref, Mapping) or ref.get("apiGroup", RBAC_GROUP) != RBAC_GROUP:
        return None
    kind, name = ref.get("kind"), ref.get("name")
    if kind not in ROLE_KINDS or not isinstance(name, str) or not name:
        return None
    return kind, name


def _subjects(binding: Mapping[str, Any], namespace: str) -> list[str]:
    """`ServiceAccount ns/name`, `User alice`, `Group g` for people (a ServiceAccount without
    a namespace is the RoleBinding's, as RBAC reads it)."""
    out = []
    subjects = binding.get("subjects")
    for s in subjects if isinstance(subjects, list) else []:
        if not isinstance(s, Mapping) or not isinstance(s.get("name"), str):
            continue
        kind = s.get("kind") if isinstance(s.get("kind"), str) else "?"
        name = excerpts.cut(s["name"], 63)
        if kind == "ServiceAccount":
            sa_ns = s.get("namespace") if isinstance(s.get("namespace"), str) else namespace
            name = f"{excerpts.cut(sa_ns or '', 63)}/{name}"
        out.append(f"{excerpts.cut(str(kind), 20)} {name}")
    return out


def referenced_roles(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Of RBAC objects, those that matter to PodNetworks: roles granting `use` of one, and the
    bindings to them (what a cluster read keeps of every role and binding)."""
    objs = [(raw, head) for raw in objects if (head := head_of(raw)) is not None]
    granting = set()
    for raw, head in objs:
        if is_rbac(raw, ROLE_KINDS) and use_grants(raw):
            granting.add((head.kind, head.metadata.namespace or "", head.metadata.name))
    kept: list[Mapping[str, Any]] = []
    for raw, head in objs:
        if is_rbac(raw, ROLE_KINDS):
            if (head.kind, head.metadata.namespace or "", head.metadata.name) in granting:
                kept.append(raw)
        elif is_rbac(raw, BINDING_KINDS) and (ref := _role_ref(raw)) is not None:
            role_ns = head.metadata.namespace or "" if ref[0] == "Role" else ""
            if (ref[0], role_ns, ref[1]) in granting:
                kept.append(raw)
    return kept


def _readiness(graph: nx.DiGraph[str], node_key: str) -> None:
    data = graph.nodes[node_key]
    obj = data.get("obj")
    if obj is None or data["kind"] not in (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND):
        return
    if not isinstance(obj, api.PodNetwork | api.PodNetworkAttachment):
        data.update(ready=False, reason=INVALID_REASON, message="; ".join(data.get("errors") or []),
                    computed=True)
        return
    written = conditions.find(obj, constants.ConditionType.READY)
    if written is not None:
        data["ready"] = written.status == "True"
        data["reason"] = written.reason
        data["message"] = written.message
        data["computed"] = False
        return
    if isinstance(obj, api.PodNetwork):
        desired = conditions.podnetwork_ready(obj)
    else:
        target = next((t for t in graph.successors(node_key)
                       if graph.nodes[t]["kind"] == constants.PODNETWORK_KIND), None)
        view = graph.nodes[target] if target else {}
        pn = view.get("obj")
        if not isinstance(pn, api.PodNetwork):
            pn = None
        if "ready" in view and (pn is None or conditions.find(pn, constants.ConditionType.READY) is None):
            # the PodNetwork's readiness was computed too: give the attachment the same view
            ready = api.Condition.model_construct(
                type=constants.ConditionType.READY, status="True" if view["ready"] else "False",
                reason=view["reason"], message="", last_transition_time="", observed_generation=None)
            pn = (pn or api.PodNetwork()).model_copy(update={"status": api.Status(conditions=[ready])})
        desired = conditions.attachment_ready(obj, pn)
    data["ready"] = desired.status == "True"
    data["reason"] = str(desired.reason)
    data["message"] = desired.message
    data["computed"] = True


def build(objects: Iterable[Mapping[str, Any]]) -> nx.DiGraph[str]:
    """The reference graph of `objects`; referenced but absent objects are nodes with obj=None."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    objs: list[tuple[Mapping[str, Any], Object]] = []
    aliases: dict[tuple[str, str, str], str] = {}
    for raw in objects:
        read = _read(raw)
        if read is None:
            continue
        obj, errors = read
        objs.append((raw, obj))
        kind, namespace, name = obj.kind, obj.metadata.namespace or "", obj.metadata.name or ""
        graph.add_node(key(kind, namespace, name), kind=kind, namespace=namespace, name=name, obj=obj)
        if errors:
            graph.nodes[key(kind, namespace, name)]["errors"] = errors
        aliases[(_kind_alias(kind), namespace, name)] = key(kind, namespace, name)
    every_podnetwork: list[str] = []
    for raw, obj in objs:
        _add_references(graph, raw, obj, aliases, every_podnetwork)
    # After the loop: "every PodNetwork" means those the input has.
    present = [n for n, d in graph.nodes(data=True)
               if d["kind"] == constants.PODNETWORK_KIND and d.get("obj") is not None]
    for src in every_podnetwork:
        for dst in present:
            graph.add_edge(src, dst, relation=f"{USE_VERB} (every PodNetwork)", permission=True)
    # PodNetworks first: an attachment's computed readiness needs its PodNetwork's.
    for kind in (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND):
        for node_key in [n for n, d in graph.nodes(data=True) if d["kind"] == kind]:
            _readiness(graph, node_key)
    return graph


def _target(graph: nx.DiGraph[str], kind: str, namespace: str, name: str) -> str:
    """The node of a referenced object, added (obj=None) when the input does not have it."""
    k = key(kind, namespace, name)
    if k not in graph:
        graph.add_node(k, kind=kind, namespace=namespace, name=name, obj=None)
    return k


def _add_references(graph: nx.DiGraph[str], raw: Mapping[str, Any], obj: Object,
                    aliases: Mapping[tuple[str, str, str], str], every_podnetwork: list[str]) -> None:
    """The edges from one object to what it references; a role granting `use` on every
    PodNetwork is added to `every_podnetwork` instead."""
    kind, namespace = obj.kind, obj.metadata.namespace or ""
    src = key(kind, namespace, obj.metadata.name or "")
    if isinstance(obj, api.PodNetwork | api.PodNetworkAttachment):
        for i, ref in enumerate(obj.spec.parameters_refs or []):
            ref_ns = ref.namespace or ""
            found = aliases.get((_kind_alias(ref.kind), ref_ns, ref.name))
            dst = found or _target(graph, ref.kind, ref_ns, ref.name)
            graph.nodes[dst].setdefault("group", ref.group)
            graph.add_edge(src, dst, relation=f"parametersRefs[{i}]")
    if isinstance(obj, api.PodNetworkAttachment):
        graph.add_edge(src, _target(graph, constants.PODNETWORK_KIND, "", obj.spec.pod_network_name),
                       relation="podNetworkName")
    if kind == "Pod":
        _add_pod_references(graph, raw, obj, src, namespace)
    if kind == "Node":
        graph.add_edge(src, _target(graph, constants.PODNETWORK_KIND, "", defaultnet.node_default_name(obj)),
                       relation="default")
    if is_rbac(raw, ROLE_KINDS):
        for granted in use_grants(raw):
            if granted is not None:
                graph.add_edge(src, _target(graph, constants.PODNETWORK_KIND, "", granted), relation=USE_VERB,
                               permission=True)
            else:
                every_podnetwork.append(src)
    if is_rbac(raw, BINDING_KINDS):
        if (role_ref := _role_ref(raw)) is not None:
            role_kind, role_name = role_ref
            role = _target(graph, role_kind, namespace if role_kind == "Role" else "", role_name)
            graph.add_edge(src, role, relation="roleRef", permission=True)
        where = f"in namespace {namespace}" if kind == "RoleBinding" else "in every namespace"
        graph.nodes[src]["grants"] = (_subjects(raw, namespace), where)


def _add_pod_references(graph: nx.DiGraph[str], raw: Mapping[str, Any], obj: Object, src: str,
                        namespace: str) -> None:
    """A pod's networks (its field errors on its node) and its node."""
    # The networks rules read the pod as served: they report field errors on it.
    problems: list[str] = graph.nodes[src].get("errors") or []
    try:
        nets = networks.effective(raw)
    except InvalidObject as exc:
        problems += [str(e) for e in exc.errors]
        nets = []
    else:
        problems += [str(e) for e in validation.validate_pod(raw)]
    if problems:
        graph.nodes[src]["errors"] = problems
    for i, net in enumerate(nets):
        if net.pod_network_attachment_name:
            dst = _target(graph, constants.ATTACHMENT_KIND, namespace, net.pod_network_attachment_name)
        else:
            dst = _target(graph, constants.PODNETWORK_KIND, "", net.pod_network_name or "")
        relation = f"networks[{i}]" + (f" {net.interface_name}" if net.interface_name else "")
        graph.add_edge(src, dst, relation=relation)
    if isinstance(obj, Pod) and obj.spec.node_name:
        graph.add_edge(src, _target(graph, "Node", "", obj.spec.node_name), relation="nodeName")


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_SHAPES = {"Pod": "box", constants.PODNETWORK_KIND: "ellipse", constants.ATTACHMENT_KIND: "hexagon",
           "Node": "box3d", "ClusterRole": "component", "Role": "component",
           "ClusterRoleBinding": "cds", "RoleBinding": "cds"}


def _grant_lines(grants: tuple[list[str], str]) -> str:
    subjects, where = grants
    shown = subjects[:SHOWN_SUBJECTS]
    more = len(subjects) - len(shown)
    lines = [f"to {s}" for s in shown] or ["to no subject"]
    if more:
        lines.append(f"and {more} more")
    return "\n".join([*lines, where])


def to_dot(graph: nx.DiGraph[str]) -> str:
    """Graphviz DOT text: missing objects dashed red, not-Ready networks orange."""
    lines = ["digraph podnetwork {", "  rankdir=LR;", '  node [fontname="Helvetica"];',
             '  edge [fontname="Helvetica", fontsize=10];']
    for node_key, data in sorted(graph.nodes.items()):
        attrs = {"label": label(node_key), "shape": _SHAPES.get(data["kind"], "note")}
        if data.get("obj") is None:
            attrs.update(style="dashed", color="red", label=label(node_key) + "\n(not found)")
        elif data.get("ready") is False or data.get("errors"):
            reason = data.get("reason") or "invalid"
            attrs.update(color="orange", label=f"{label(node_key)}\n({reason})")
        elif data.get("ready") is True:
            attrs["color"] = "darkgreen"
        if data.get("grants") is not None:
            attrs["label"] += "\n" + _grant_lines(data["grants"])
        text = ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())
        lines.append(f"  {_quote(node_key)} [{text}];")
    for (src, dst), edge in sorted(graph.edges.items()):
        style = ', style="dashed", color="blue", fontcolor="blue"' if edge.get("permission") else ""
        lines.append(f"  {_quote(src)} -> {_quote(dst)} [label={_quote(edge.get('relation', ''))}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dot_available() -> bool:
    return shutil.which("dot") is not None


def to_svg(dot_text: str) -> bytes:
    """Render DOT as SVG with Graphviz's `dot`. Raises RuntimeError when it is not installed or fails."""
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("Graphviz `dot` is not installed (apt-get install graphviz); write DOT instead")
    done = subprocess.run([exe, "-Tsvg"], input=dot_text.encode(), check=False, capture_output=True)
    if done.returncode != 0:
        said = excerpts.cut(done.stderr.decode(errors="replace").strip(), excerpts.LINE_LIMIT)
        raise RuntimeError(f"Graphviz `dot` failed (exit status {done.returncode}): {said}; "
                           "write DOT (--format dot) instead")
    return done.stdout


__all__ = ["INVALID_REASON", "Object", "build", "dot_available", "is_rbac", "key", "label",
           "referenced_roles", "to_dot", "to_svg", "use_grants"]
