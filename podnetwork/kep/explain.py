"""Why is this pod Pending, this network not Ready? The chain of references and its first broken link.

Works on the graph of `podnetwork.kep.graph` (from a cluster or from manifests):
it walks from the subject along its references (pod -> attachment ->
PodNetwork -> parameters objects, pod -> node) and checks each object on the
way: present, statically valid, Ready (KEP "Status Conditions"). The first
failing check in walk order is the first broken link: the thing to fix first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from podnetwork.ground import constants
from podnetwork.ground.core import Node, Pod
from podnetwork.kep import defaultnet
from podnetwork.kep import graph as graphs

KINDS = {
    "pod": "Pod", "po": "Pod", "pods": "Pod",
    "podnetwork": constants.PODNETWORK_KIND, "pn": constants.PODNETWORK_KIND,
    constants.PODNETWORK_PLURAL: constants.PODNETWORK_KIND,
    "pna": constants.ATTACHMENT_KIND, "podnetworkattachment": constants.ATTACHMENT_KIND,
    constants.ATTACHMENT_PLURAL: constants.ATTACHMENT_KIND,
}


@dataclass(frozen=True)
class Problem:
    """One failed check: on which object, and why."""

    subject: str
    reason: str
    depth: int = 0

    def __str__(self) -> str:
        return f"{graphs.label(self.subject)}: {self.reason}"


@dataclass
class Explanation:
    subject: str
    lines: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def first_broken(self) -> Problem | None:
        return self.problems[0] if self.problems else None

    @property
    def root_cause(self) -> Problem | None:
        """The deepest problem under the first broken link (what broke it)."""
        if not self.problems:
            return None
        root = self.problems[0]
        for problem in self.problems[1:]:
            if problem.depth <= root.depth:
                break
            root = problem
        return root

    def render(self) -> str:
        text = "\n".join(self.lines)
        broken = self.first_broken
        if broken:
            text += f"\n\nfirst broken link: {broken}"
            root = self.root_cause
            if root is not None and root != broken:
                text += f"\nroot cause: {root}"
        else:
            text += "\n\nno broken link: every reference is present and Ready"
        return text + "\n"


def subject_key(kind: str, ref: str) -> str:
    """`pod NS/NAME`, `podnetwork NAME`, `pna NS/NAME` as a graph key. Raises ValueError."""
    real = KINDS.get(kind.lower())
    if real is None:
        raise ValueError(f"unknown kind {kind!r}: use pod NS/NAME, podnetwork NAME or pna NS/NAME")
    if real == constants.PODNETWORK_KIND:
        if "/" in ref:
            raise ValueError(f"a PodNetwork is cluster-scoped: give its NAME, not {ref!r}")
        return graphs.key(real, "", ref)
    namespace, sep, name = ref.partition("/")
    if not sep or not namespace or not name:
        raise ValueError(f"give a {real} as NAMESPACE/NAME, not {ref!r}")
    return graphs.key(real, namespace, name)


def _check(graph: nx.DiGraph[str], node_key: str) -> tuple[str, str | None]:
    """(status text, problem or None) for one object of the chain."""
    data = graph.nodes[node_key]
    obj: graphs.Object | None = data.get("obj")
    if obj is None:
        return "NOT FOUND", "not found" + (" in the input" if data["kind"] != "Pod" else "")
    if data.get("errors"):
        return "INVALID", "; ".join(data["errors"])
    if data["kind"] in (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND):
        computed = " (computed: no status in the input)" if data.get("computed") else ""
        if obj.metadata.deletion_timestamp:
            return "BEING DELETED", "being deleted (waits for the in-use finalizer)"
        if data.get("ready"):
            return "Ready" + computed, None
        why = f"{data.get('reason')}: {data.get('message')}"
        return f"NOT READY ({data.get('reason')}){computed}", f"not Ready: {why}"
    if isinstance(obj, Node):
        cond = obj.condition(defaultnet.NODE_CONDITION)
        if cond is not None and cond.status != "True":
            return f"{defaultnet.NODE_CONDITION}=False", f"{cond.reason}: {cond.message}"
        if obj.spec.unschedulable:
            return "cordoned", None
        return "ok", None
    if isinstance(obj, Pod):
        return obj.status.phase or "Pending", None
    return "present", None


def explain(graph: nx.DiGraph[str], subject: str) -> Explanation:
    """The chain from `subject` (a graph key) with every object checked. Raises KeyError if absent."""
    if subject not in graph or graph.nodes[subject].get("obj") is None:
        raise KeyError(f"{graphs.label(subject)} not found")
    out = Explanation(subject)
    seen: set[str] = set()

    def visit(node_key: str, relation: str, depth: int) -> None:
        status, problem = _check(graph, node_key)
        arrow = f"{relation} -> " if relation else ""
        out.lines.append(f"{'  ' * depth}{arrow}{graphs.label(node_key)}: {status}")
        if problem:
            out.problems.append(Problem(node_key, problem, depth))
        if node_key in seen:
            return
        seen.add(node_key)
        for nxt in sorted(graph.successors(node_key), key=lambda n: graph.edges[node_key, n]["relation"]):
            if graph.nodes[node_key]["kind"] == "Node":
                continue  # a node's default network is another story (`explain podnetwork NAME`)
            visit(nxt, graph.edges[node_key, nxt]["relation"], depth + 1)

    visit(subject, "", 0)
    users = sorted(graph.predecessors(subject))
    if graph.nodes[subject]["kind"] != "Pod" and users:
        pods = [u for u in users if graph.nodes[u]["kind"] == "Pod"]
        pnas = [u for u in users if graph.nodes[u]["kind"] == constants.ATTACHMENT_KIND]
        nodes = [u for u in users if graph.nodes[u]["kind"] == "Node"]
        roles = [u for u in users if graph.nodes[u]["kind"] in graphs.ROLE_KINDS]
        parts = []
        if pnas:
            parts.append(f"{len(pnas)} attachment(s)")
        if pods:
            parts.append(f"{len(pods)} pod(s)")
        if nodes:
            parts.append(f"default of {len(nodes)} node(s)")
        names = ", ".join(graphs.label(u) for u in (pnas + pods)[:5])
        if parts:
            out.lines.append(f"referenced by {' and '.join(parts)}" + (f": {names}" if names else ""))
        if roles:
            out.lines.append(f"use granted by {len(roles)} role(s): "
                             + ", ".join(graphs.label(u) for u in roles[:5]))
    return out


__all__ = ["KINDS", "Explanation", "Problem", "explain", "subject_key"]
