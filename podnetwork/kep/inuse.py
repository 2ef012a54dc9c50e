"""Who uses which PodNetwork or attachment: the reverse index behind InUse and its finalizer.

KEP-3698 "InUse state": a PodNetwork may not be deleted while a pod or a
PodNetworkAttachment references it, an attachment while a pod references it;
pods in phase Succeeded or Failed do not count. The controller enforces it with
the finalizer `multinetwork.x-k8s.io/in-use`.

`Index` keeps, in memory, for each consumer (pod or attachment) the references
it holds and for each referenced object the set of its consumers. One pod
event costs O(networks of that pod): the old references are looked up by the
pod's key, never by scanning other pods. The controller feeds it from watch
events; the demo feeds it from its in-process store; both read `usage()`.

Everything here is pure data and decisions; nothing talks to an API. Pods are
read through the `podnetwork.ground.core.Pod` view, PodNetworks and attachments
through the models of `podnetwork.kep.api`, parsed by the caller where they enter.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from podnetwork.ground import constants
from podnetwork.ground.core import HasMetadata, PartialObjectMetadata, Pod
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import conditions, networks
from podnetwork.kep.api import KepObject, Network, PodNetworkAttachment

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class Ref(NamedTuple):
    """A referenced object: kind, namespace ("" for the cluster-scoped PodNetwork), name."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


def podnetwork_ref(name: str) -> Ref:
    return Ref(constants.PODNETWORK_KIND, "", name)


def attachment_ref(namespace: str, name: str) -> Ref:
    return Ref(constants.ATTACHMENT_KIND, namespace, name)


def ref_of(obj: KepObject | PartialObjectMetadata) -> Ref:
    """The Ref naming a PodNetwork or PodNetworkAttachment object (or its metadata, by kind)."""
    meta = obj.metadata
    if obj.kind == constants.ATTACHMENT_KIND:
        return attachment_ref(meta.namespace or "", meta.name or "")
    return podnetwork_ref(meta.name or "")


def key_of(obj: HasMetadata) -> str:
    """`namespace/name` of a namespaced object (the consumer key in messages)."""
    return obj.metadata.key


def is_terminal(pod: Pod) -> bool:
    """Pods that Succeeded or Failed no longer hold their networks (KEP "InUse state")."""
    return pod.status.phase in TERMINAL_PHASES


def is_unscheduled(pod: Pod) -> bool:
    return not pod.spec.node_name and not is_terminal(pod)


def network_refs(namespace: str, nets: Iterable[Network]) -> frozenset[Ref]:
    refs = set()
    for net in nets:
        if net.pod_network_attachment_name:
            refs.add(attachment_ref(namespace, net.pod_network_attachment_name))
        elif net.pod_network_name:
            refs.add(podnetwork_ref(net.pod_network_name))
    return frozenset(refs)


def networks_fields(pod: Pod) -> dict[str, Any]:
    """The fields of `pod` that `networks.effective` reads, in the wire form it takes."""
    return {
        "metadata": {"annotations": pod.metadata.annotations or {}},
        "spec": {"hostNetwork": pod.spec.host_network},
    }


def pod_references(pod: Pod, namespace_default: Sequence[Network] | None = None) -> frozenset[Ref]:
    """What a pod references, after auto-population; empty when it holds nothing.

    Terminal and deleted pods hold nothing. A pod whose annotation cannot be
    parsed holds nothing either: admission rejects such pods, and counting a
    guess would keep a finalizer for a reference that does not exist.
    """
    if is_terminal(pod):
        return frozenset()
    try:
        nets = networks.effective(networks_fields(pod), namespace_default)
    except InvalidObject:
        return frozenset()
    return network_refs(pod.metadata.namespace or "", nets)


def attachment_references(pna: PodNetworkAttachment) -> frozenset[Ref]:
    """An attachment references its PodNetwork (KEP "Resources relations")."""
    name = pna.spec.pod_network_name
    return frozenset({podnetwork_ref(name)}) if name else frozenset()


@dataclass
class _Consumers:
    pods: set[str] = field(default_factory=set)
    attachments: set[str] = field(default_factory=set)
    unscheduled: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.pods or self.attachments)


class Index:
    """The in-memory reverse index: consumer -> references, reference -> consumers.

    Updates return the references whose consumer set changed, so the caller
    re-evaluates exactly those objects and nothing else.
    """

    def __init__(self) -> None:
        self._pods: dict[str, tuple[frozenset[Ref], bool]] = {}
        self._attachments: dict[str, frozenset[Ref]] = {}
        self._by_ref: dict[Ref, _Consumers] = {}

    def __len__(self) -> int:
        return len(self._pods) + len(self._attachments)

    def sizes(self) -> dict[str, int]:
        """Entries held: consumers (`pods`, `attachments`) and the networks and attachments
        they use (`used`); what the controller's metrics show."""
        return {"pods": len(self._pods), "attachments": len(self._attachments), "used": len(self._by_ref)}

    def _slot(self, ref: Ref) -> _Consumers:
        slot = self._by_ref.get(ref)
        if slot is None:
            slot = self._by_ref[ref] = _Consumers()
        return slot

    def _release(self, ref: Ref) -> None:
        slot = self._by_ref.get(ref)
        if slot is not None and not slot and not slot.unscheduled:
            del self._by_ref[ref]

    def set_pod(self, pod: Pod, namespace_default: Sequence[Network] | None = None) -> set[Ref]:
        """Record a pod's current state (added or modified); returns the refs that changed."""
        key = key_of(pod)
        refs = pod_references(pod, namespace_default)
        unscheduled = bool(refs) and is_unscheduled(pod)
        return self._put_pod(key, refs, unscheduled)

    def remove_pod(self, key: str) -> set[Ref]:
        """Forget a deleted pod (`namespace/name`); returns the refs that changed."""
        return self._put_pod(key, frozenset(), False)

    def _put_pod(self, key: str, refs: frozenset[Ref], unscheduled: bool) -> set[Ref]:
        old_refs, old_unscheduled = self._pods.get(key, (frozenset(), False))
        if old_refs == refs and old_unscheduled == unscheduled:
            return set()
        for ref in old_refs - refs:
            slot = self._slot(ref)
            slot.pods.discard(key)
            slot.unscheduled.discard(key)
            self._release(ref)
        for ref in refs:
            slot = self._slot(ref)
            slot.pods.add(key)
            if unscheduled:
                slot.unscheduled.add(key)
            else:
                slot.unscheduled.discard(key)
        if refs:
            self._pods[key] = (refs, unscheduled)
        else:
            self._pods.pop(key, None)
        return set(old_refs ^ refs)

    def set_attachment(self, pna: PodNetworkAttachment) -> set[Ref]:
        """Record an attachment (it consumes its PodNetwork); returns the refs that changed."""
        return self._put_attachment(key_of(pna), attachment_references(pna))

    def remove_attachment(self, key: str) -> set[Ref]:
        return self._put_attachment(key, frozenset())

    def _put_attachment(self, key: str, refs: frozenset[Ref]) -> set[Ref]:
        old = self._attachments.get(key, frozenset())
        if old == refs:
            return set()
        for ref in old - refs:
            self._slot(ref).attachments.discard(key)
            self._release(ref)
        for ref in refs - old:
            self._slot(ref).attachments.add(key)
        if refs:
            self._attachments[key] = refs
        else:
            self._attachments.pop(key, None)
        return set(old ^ refs)

    def in_use(self, ref: Ref) -> bool:
        return bool(self._by_ref.get(ref))

    def usage(self, ref: Ref) -> conditions.Usage:
        """Counts and the first few consumer names (sorted) for the InUse condition.

        Costs O(consumers of `ref`) for the sample; call it when writing a
        condition, not per pod event.
        """
        slot = self._by_ref.get(ref)
        if not slot:
            return conditions.NOT_IN_USE
        names = [f"pna {a}" for a in heapq.nsmallest(conditions.MESSAGE_SAMPLE, slot.attachments)]
        room = conditions.MESSAGE_SAMPLE - len(names)
        if room > 0:
            names += heapq.nsmallest(room, slot.pods)
        return conditions.Usage(
            pods=len(slot.pods), attachments=len(slot.attachments), sample=tuple(names)
        )

    def some_consumers(self, ref: Ref, limit: int) -> tuple[list[str], list[str]]:
        """Up to `limit` consumers of `ref`, attachments then pods, in O(limit)."""
        slot = self._by_ref.get(ref)
        if not slot or limit <= 0:
            return [], []
        attachments = list(itertools.islice(slot.attachments, limit))
        return attachments, list(itertools.islice(slot.pods, limit - len(attachments)))

    def pods_of(self, ref: Ref) -> frozenset[str]:
        slot = self._by_ref.get(ref)
        return frozenset(slot.pods) if slot else frozenset()

    def attachments_of(self, ref: Ref) -> frozenset[str]:
        slot = self._by_ref.get(ref)
        return frozenset(slot.attachments) if slot else frozenset()

    def unscheduled_pods(self, ref: Ref) -> frozenset[str]:
        """Pods referencing `ref` that have no node yet (targets of the requeue nudge)."""
        slot = self._by_ref.get(ref)
        return frozenset(slot.unscheduled) if slot else frozenset()

    def references_of_pod(self, key: str) -> frozenset[Ref]:
        return self._pods.get(key, (frozenset(), False))[0]


def finalizer_patch(obj: KepObject, *, in_use: bool) -> dict[str, Any] | None:
    """The merge patch that puts the in-use finalizer where it belongs; None when it is right.

    Added while `in_use` (but never to an object already being deleted: the API
    server forbids new finalizers then), removed as soon as nothing references
    the object, so a pending delete completes. The cluster `default` PodNetwork
    is never kept waiting with a deletionTimestamp (KEP "Default PodNetwork" >
    "Availability"): if it is deleted anyway its finalizer goes, and the
    controller re-creates it. The patch lists all finalizers (a merge patch
    replaces lists) and carries `resourceVersion`, so a real API server rejects
    it with 409 rather than dropping someone else's concurrent finalizer.
    """
    meta = obj.metadata
    current = list(meta.finalizers or [])
    has = constants.IN_USE_FINALIZER in current
    deleting = bool(meta.deletion_timestamp)
    is_default = not isinstance(obj, PodNetworkAttachment) and meta.name == constants.DEFAULT_PODNETWORK
    want = in_use and not (deleting and is_default)
    if want and not has and not deleting:
        new = [*current, constants.IN_USE_FINALIZER]
    elif not want and has:
        new = [f for f in current if f != constants.IN_USE_FINALIZER]
    else:
        return None
    patch_meta: dict[str, Any] = {"finalizers": new}
    if meta.resource_version:
        patch_meta["resourceVersion"] = meta.resource_version
    return {"metadata": patch_meta}


__all__ = [
    "TERMINAL_PHASES",
    "Index",
    "Ref",
    "attachment_ref",
    "attachment_references",
    "finalizer_patch",
    "is_terminal",
    "is_unscheduled",
    "key_of",
    "networks_fields",
    "pod_references",
    "podnetwork_ref",
    "ref_of",
]
