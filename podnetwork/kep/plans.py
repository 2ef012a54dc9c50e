"""What the PodNetwork controller does, decided from what it knows: planners that return actions.

Each planner is a pure function of the controller's memory (the objects it has seen,
the in-use index, the nodes) and returns a value that lists what to write;
`podnetwork.kep.controller.Controller` applies it (on a cluster, under kopf; in the
demo, over its store) and reports each applied action. The rules are the KEP's, in
`conditions` (Ready, InUse), `inuse` (the finalizer) and `defaultnet` (the `default`
PodNetwork, node readiness); this module says which of them applies next.

- `object_action`: the next write for one PodNetwork or attachment: its in-use
  finalizer first, then its conditions; or a deferral, when only InUse's message would
  change on a pod event (written at the next flush).
- `follow_ups`: what a change of one object's Ready moves: its attachments, the nodes
  whose default it is, and the requeue nudge of the pods waiting for it.
- `node_patch`, `default_podnetwork`, `nudge`: a node's condition, the `default`
  PodNetwork to create, the nudge of waiting pods.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.actions import Create, Patch
from podnetwork.ground.core import Node
from podnetwork.kep import conditions, defaultnet, inuse
from podnetwork.kep.api import KepObject, PodNetwork, PodNetworkAttachment
from podnetwork.kep.inuse import Ref

NODE_KIND = "Node"

# --- one PodNetwork or attachment ----------------------------------------------------------


@dataclass(frozen=True)
class SetFinalizer:
    """Add (`adding`) or remove the in-use finalizer; decided from the object's resourceVersion."""

    ref: Ref
    patch: Patch
    adding: bool


@dataclass(frozen=True)
class WriteConditions:
    """Write the object's Ready and InUse conditions (status subresource), from its resourceVersion."""

    ref: Ref
    patch: Patch
    conditions: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class Defer:
    """Only InUse's message may change (the consumers' count or names): the next flush writes it."""

    ref: Ref


@dataclass(frozen=True)
class Settled:
    """Nothing to write: the object is as it should be, or its PodNetwork's first status write is
    coming, which re-evaluates it (`waits_for_network`)."""

    ref: Ref
    waits_for_network: bool = False


ObjectAction = SetFinalizer | WriteConditions | Defer | Settled


def unevaluated(network: KepObject) -> bool:
    """A PodNetwork this controller has not written Ready on yet (just created)."""
    return conditions.find(network, constants.ConditionType.READY) is None


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _patch(ref: Ref, body: Mapping[str, Any], *, status: bool = False) -> Patch:
    return Patch(ref.kind, ref.name, ref.namespace or None, body, status=status)


def only_inuse_message_may_change(ref: Ref, obj: KepObject, index: inuse.Index,
                                  network: PodNetwork | None) -> bool:
    """Whether Ready and InUse's status are right, in O(1): only InUse's message may be stale.

    `network` is the attachment's PodNetwork (unused for a PodNetwork).
    """
    want = "True" if index.in_use(ref) else "False"
    inuse_cond = conditions.find(obj, constants.ConditionType.IN_USE)
    if inuse_cond is None or inuse_cond.status != want:
        return False
    if isinstance(obj, PodNetworkAttachment):
        ready = conditions.attachment_ready(obj, network)
    else:
        ready = conditions.podnetwork_ready(obj)
    existing = conditions.find(obj, constants.ConditionType.READY)
    return conditions.holds(existing, ready, generation=obj.metadata.generation)


def object_action(ref: Ref, obj: KepObject, index: inuse.Index, network: PodNetwork | None, *,
                  urgent: bool, now: str) -> ObjectAction:
    """The next write for a PodNetwork or attachment (`network`: an attachment's PodNetwork).

    The finalizer comes first: once it is written, the caller plans again from the
    object the API returned (its resourceVersion moved). Unless `urgent` (a pod event
    changed only consumers), a change of InUse's message alone is deferred: the consumers'
    names for it cost O(consumers), O(every pod) for `default`.
    """
    in_use = index.in_use(ref)
    finalizer = inuse.finalizer_patch(obj, in_use=in_use)
    if finalizer is not None:
        return SetFinalizer(ref, _patch(ref, finalizer), adding=in_use)
    if not urgent and only_inuse_message_may_change(ref, obj, index, network):
        return Defer(ref)
    usage = index.usage(ref)
    if isinstance(obj, PodNetworkAttachment):
        if network is not None and unevaluated(network):
            return Settled(ref, waits_for_network=True)
        new = conditions.attachment_conditions(obj, network, usage, now=now)
    else:
        new = conditions.podnetwork_conditions(obj, usage, now=now)
    if new is None:
        return Settled(ref)
    return WriteConditions(ref, _patch(ref, conditions.status_patch(obj, new), status=True), tuple(new))


# --- what a change of Ready moves ----------------------------------------------------------


def ready_of(obj: KepObject | None) -> tuple[Any, ...] | None:
    """What dependents read of an object's Ready condition."""
    ready = conditions.find(obj, constants.ConditionType.READY)
    return None if ready is None else (ready.status, ready.reason, ready.message)


@dataclass(frozen=True)
class FollowUps:
    """What follows a PodNetwork's or attachment's change."""

    ready: bool
    """Its Ready now (the controller remembers it, to see the next change)."""
    attachments: tuple[Ref, ...] = ()
    """Attachments of a PodNetwork, re-evaluated (their Ready follows it)."""
    nodes_of: str | None = None
    """The PodNetwork whose nodes re-evaluate DefaultPodNetworkReady."""
    nudge: bool = False
    """The object turned Ready: nudge the pods waiting for it (`nudge`)."""


def follow_ups(ref: Ref, obj: KepObject | None, was_ready: bool | None, index: inuse.Index) -> FollowUps:
    """Follow-ups of a change of `ref` (`obj`: as it is now, None when gone); `was_ready`: what the
    controller saw of its Ready before (None: never seen)."""
    ready = conditions.is_ready(obj)
    attachments: tuple[Ref, ...] = ()
    nodes_of = None
    if ref.kind == constants.PODNETWORK_KIND:
        attachments = tuple(inuse.attachment_ref(*_split(key)) for key in sorted(index.attachments_of(ref)))
        nodes_of = ref.name
    return FollowUps(ready, attachments, nodes_of, nudge=ready and not was_ready)


def moves_dependents(ref: Ref, seen: bool, ready_before: tuple[Any, ...] | None,
                     obj: KepObject | None) -> bool:
    """Whether a reconcile of `ref` must run its follow-ups: first seen, or its Ready changed.

    Attachments, nodes and the nudge read only Ready: an InUse-only write (a busy
    network's consumer count, every flush) must not walk every node and attachment.
    """
    return not seen or ready_of(obj) != ready_before


@dataclass(frozen=True)
class Nudge:
    """Touch an unscheduled pod waiting for `ref` (`requeued-at`): kube-scheduler retries it."""

    ref: Ref
    pod: str
    """`namespace/name`."""
    patch: Patch


def nudge(ref: Ref, index: inuse.Index, *, now: str) -> list[Nudge]:
    """Requeue nudge (issue #3 item 5): a patch of each unscheduled pod waiting for `ref`.

    kube-scheduler does not retry a pod its extender rejected when only a PodNetwork
    changed; an annotation change is a pod update, which moves the pod back to the
    active queue at once.
    """
    out = []
    for key in sorted(index.unscheduled_pods(ref)):
        namespace, _, name = key.partition("/")
        body = {"metadata": {"annotations": {constants.REQUEUED_AT_ANNOTATION: now}}}
        out.append(Nudge(ref, key, Patch("Pod", name, namespace, body)))
    return out


def node_offers(node: Node) -> frozenset[str] | None:
    """The PodNetworks a node offers by its `multinetwork.x-k8s.io/podnetworks` annotation, as the
    scheduler extender reads it (docs/scheduler-extender.md): None for every one (no annotation),
    no name for an annotation that is not a JSON list of names (the extender then offers only
    `default`)."""
    text = node.metadata.annotation(constants.NODE_PODNETWORKS_ANNOTATION)
    if text is None:
        return None
    try:
        names = json.loads(text)
    except (ValueError, RecursionError):
        return frozenset()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return frozenset()
    return frozenset(names)


def newly_offered(before: Node | None, after: Node, known: Iterable[str]) -> frozenset[str]:
    """The PodNetworks `after` offers that `before` did not (`known`: every PodNetwork, for a node
    that drops the annotation and so comes to offer all). None for a node seen for the first time:
    kube-scheduler retries its pods on a new node by itself. A heartbeat, which leaves the annotation
    as it was, costs one comparison of texts."""
    if before is None:
        return frozenset()
    key = constants.NODE_PODNETWORKS_ANNOTATION
    if before.metadata.annotation(key) == after.metadata.annotation(key):
        return frozenset()
    old, new = node_offers(before), node_offers(after)
    if old is None:
        return frozenset()
    return (frozenset(known) if new is None else new) - old


def offer_nudges(networks: Iterable[str], index: inuse.Index, *, now: str) -> list[Nudge]:
    """Requeue nudge for a node that came to offer `networks`: a patch of each unscheduled pod
    naming one of them, directly or through an attachment, once.

    kube-scheduler retries a pod on a node update only when a plugin that rejected it says the
    update may help; the extender is no plugin, so when another plugin rejected other nodes (a
    nodeSelector's NodeAffinity), a node's new offer alone would leave the pod waiting for the
    unschedulable queue's flush (5 minutes). Seen with kube-scheduler v1.36: tests/real/test_scheduling.py.
    """
    out: list[Nudge] = []
    seen: set[str] = set()
    for name in sorted(networks):
        ref = inuse.podnetwork_ref(name)
        waiting = set(index.unscheduled_pods(ref))
        for key in index.attachments_of(ref):
            waiting |= index.unscheduled_pods(inuse.attachment_ref(*_split(key)))
        for key in sorted(waiting - seen):
            seen.add(key)
            namespace, _, pod = key.partition("/")
            body = {"metadata": {"annotations": {constants.REQUEUED_AT_ANNOTATION: now}}}
            out.append(Nudge(ref, key, Patch("Pod", pod, namespace, body)))
    return out


# --- nodes and the default PodNetwork -------------------------------------------------------


@dataclass(frozen=True)
class WriteNodeCondition:
    """DefaultPodNetworkReady on a node, by strategic merge (the kubelet's conditions stay)."""

    name: str
    patch: Patch
    conditions: tuple[Mapping[str, Any], ...]


def node_action(name: str, node: Node, network: PodNetwork | None, *, now: str) -> WriteNodeCondition | None:
    """The node's condition to write, or None when it is right or its default PodNetwork's first
    status write is coming (which re-evaluates the nodes)."""
    if network is not None and unevaluated(network):
        return None
    body = defaultnet.node_condition_patch(node, network, now=now)
    if body is None:
        return None
    conds = tuple(body.get("status", {}).get("conditions", []))
    patch = Patch(NODE_KIND, name, None, body, status=True, patch_type="strategic")
    return WriteNodeCondition(name, patch, conds)


def nodes_of(nodes: Mapping[str, Node], podnetwork: str) -> list[str]:
    """The nodes whose default PodNetwork is `podnetwork`."""
    return [name for name, node in nodes.items() if defaultnet.node_default_name(node) == podnetwork]


@dataclass(frozen=True)
class CreateDefault:
    """Create the `default` PodNetwork (KEP "Automatic creation"); `again` after it was deleted."""

    create: Create
    again: bool = False


def default_podnetwork(create_default: bool, provider: str | None, *,
                       again: bool = False) -> CreateDefault | None:
    """The `default` PodNetwork to create, unless creation is off (KEP "Manual creation")."""
    if not create_default:
        return None
    return CreateDefault(Create(defaultnet.podnetwork(provider)), again)


# --- after a re-listing ---------------------------------------------------------------------


def older(a: str, b: str) -> bool:
    """Whether resourceVersion `a` is older than `b` (etcd's revision, a counter, wherever
    Kubernetes runs on etcd; opaque otherwise: then neither is older)."""
    return a.isdigit() and b.isdigit() and int(a) < int(b)


def gone_after_listing(cached: Iterable[tuple[Ref, KepObject]], kind: str, present: set[Ref],
                       listed_at: str) -> list[Ref]:
    """Cached objects of `kind` a listing (at `listed_at`) no longer has, unless they changed after it."""
    return [ref for ref, obj in cached
            if ref.kind == kind and ref not in present
            and not older(listed_at, obj.metadata.resource_version or "")]


def conditions_line(conds: Sequence[Mapping[str, Any]]) -> str:
    """`Ready=True (Ready), InUse=False (NotInUse)`: one log line says what a write set."""
    return ", ".join(f"{c.get('type')}={c.get('status')} ({c.get('reason')})" for c in conds)


__all__ = [
    "CreateDefault",
    "Defer",
    "FollowUps",
    "Nudge",
    "ObjectAction",
    "SetFinalizer",
    "Settled",
    "WriteConditions",
    "WriteNodeCondition",
    "conditions_line",
    "default_podnetwork",
    "follow_ups",
    "gone_after_listing",
    "moves_dependents",
    "newly_offered",
    "node_action",
    "node_offers",
    "nodes_of",
    "nudge",
    "object_action",
    "offer_nudges",
    "older",
    "only_inuse_message_may_change",
    "ready_of",
    "unevaluated",
]
