"""The extender's in-memory view of the cluster: what `/filter` needs, fed by watches.

Only the facts the decision reads are kept (a PodNetwork's readiness, an
attachment's PodNetwork and readiness, the networks a node offers), never whole
objects. Writers (the watch threads, or the demo's object store) and readers
(request handlers) share it safely: every published mapping is frozen, and a
write replaces the one mapping it changes (copy on write) under a lock.
`snapshot()` is therefore O(1) and a request never copies anything; a write
that changes nothing the decision reads (a node's heartbeat) publishes nothing.

The cache is where watched objects enter the extender: each is read into its
model (`podnetwork.kep.api`) or view (`podnetwork.ground.core`) once, on write. An
object that does not fit its model, which the API server's schemas prevent,
is kept as not Ready (reason `Invalid`, the message names the fields), or, for
a node, as offering nothing but the default PodNetwork.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import pydantic

from podnetwork.ground import constants, jsontype
from podnetwork.ground.core import Node
from podnetwork.kep import activevalidation, api
from scheduler_plugin import wire

NODE_KIND = "Node"


# What the decision reads of PodNetworks and attachments: the KEP layer's active validations,
# which the bridge shares (`podnetwork.kep.activevalidation`).
Readiness = activevalidation.Readiness
AttachmentState = activevalidation.AttachmentState
readiness_of = activevalidation.readiness_of


@dataclass(frozen=True, slots=True)
class InvalidOffer:
    """A node whose podnetworks annotation cannot be read: it offers nothing but `default`."""

    message: str


#: What a node offers: None (no annotation: every network, KEP Phase II req. 18 is
#: opt-in per node), the set of PodNetwork names it lists, or an unreadable annotation.
NodeOffer = frozenset[str] | InvalidOffer | None

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable view of the cache at one instant; the decision's only input besides the pod."""

    podnetworks: Mapping[str, Readiness] = field(default_factory=lambda: _EMPTY)
    """PodNetwork name -> readiness."""
    attachments: Mapping[tuple[str, str], AttachmentState] = field(default_factory=lambda: _EMPTY)
    """(namespace, name) -> attachment."""
    nodes: Mapping[str, NodeOffer] = field(default_factory=lambda: _EMPTY)
    """Node name -> the networks it offers."""
    synced: bool = False
    """True once every watched kind has been listed in full at least once."""
    memo: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    """Values derived from this snapshot by pure functions, kept for the next request
    (the decision's per-node verdicts for one list of networks). A new snapshot starts
    empty, so nothing derived from an older state survives a change."""


#: Reason of the readiness of an object that does not fit its model.
INVALID_REASON = "Invalid"


def _unreadable(kind: str, exc: pydantic.ValidationError) -> Readiness:
    message = f"the object does not fit the {kind} schema: {wire.describe(exc)}"
    return Readiness(False, INVALID_REASON, message)


#: Longest annotation text whose parse is remembered, in characters. A pool's
#: annotation lists a few names (`["dataplane","storage"]`); a longer one is parsed
#: on each use rather than kept.
OFFER_MEMO_TEXT_LIMIT = 4096
#: Characters of annotation text remembered in all, least recently used first out.
#: The parsed sets take a few times the text's size, so the memo stays within a few MiB.
OFFER_MEMO_BUDGET = 1024 * 1024

_WHERE = f"node annotation {constants.NODE_PODNETWORKS_ANNOTATION}"
_EXAMPLE = 'a JSON list of PodNetwork names such as ["dataplane"]'


def _parse(text: str) -> NodeOffer:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return InvalidOffer(
            f"{_WHERE} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"expected {_EXAMPLE}"
        )
    except RecursionError:
        return InvalidOffer(f"{_WHERE} is not valid JSON (nested too deeply); expected {_EXAMPLE}")
    if not isinstance(data, list):
        return InvalidOffer(f"{_WHERE} must be {_EXAMPLE}, not {jsontype.describe(data)}")
    for i, item in enumerate(data):
        if not isinstance(item, str):
            return InvalidOffer(f"{_WHERE} must be {_EXAMPLE}; item {i} is {jsontype.describe(item)}")
    return frozenset(data)


class _OfferMemo:
    """Annotation text -> parsed offer, bounded by the characters of text it keeps.

    Nodes of one pool carry the same text, so a NodeList of thousands of nodes costs
    a handful of parses. A bound in entries alone would let a few thousand 256 KiB
    annotations (the API server's limit) hold gigabytes; this one is in characters.
    Shared by the watch threads and the request handlers, hence the lock.
    """

    def __init__(self, budget: int, text_limit: int) -> None:
        self._budget = budget
        self._text_limit = text_limit
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, NodeOffer] = OrderedDict()
        self.chars = 0
        """Characters of text kept now (at most the budget)."""

    def parse(self, text: str) -> NodeOffer:
        if len(text) > self._text_limit:
            return _parse(text)
        with self._lock:
            found = self._entries.get(text)
            if found is not None:
                self._entries.move_to_end(text)
                return found
        offer = _parse(text)
        with self._lock:
            if text not in self._entries:
                self._entries[text] = offer
                self.chars += len(text)
                while self.chars > self._budget:
                    evicted, _ = self._entries.popitem(last=False)
                    self.chars -= len(evicted)
        return offer

    def __len__(self) -> int:
        return len(self._entries)


OFFER_MEMO = _OfferMemo(OFFER_MEMO_BUDGET, OFFER_MEMO_TEXT_LIMIT)


def parse_node_offer(text: str | None) -> NodeOffer:
    """The networks a node offers, from its `multinetwork.x-k8s.io/podnetworks` annotation.

    Pure; remembered in `OFFER_MEMO` for short texts. Messages never quote the text
    (it may be 256 KiB): they say where and what kind of problem it has.
    """
    return None if text is None else OFFER_MEMO.parse(text)


def node_offer_of(node: Node) -> NodeOffer:
    return parse_node_offer(node.metadata.annotation(constants.NODE_PODNETWORKS_ANNOTATION))


def _podnetwork_state(obj: Mapping[str, Any]) -> Readiness:
    try:
        return readiness_of(api.PodNetwork.model_validate(obj))
    except pydantic.ValidationError as exc:
        return _unreadable(constants.PODNETWORK_KIND, exc)


def _attachment_state(obj: Mapping[str, Any]) -> AttachmentState:
    try:
        pna = api.PodNetworkAttachment.model_validate(obj)
    except pydantic.ValidationError as exc:
        return AttachmentState("", _unreadable(constants.ATTACHMENT_KIND, exc))
    return AttachmentState(pna.spec.pod_network_name, readiness_of(pna))


def _node_state(obj: Mapping[str, Any]) -> NodeOffer:
    try:
        return node_offer_of(Node.model_validate(obj))
    except pydantic.ValidationError as exc:
        return InvalidOffer(f"the Node object cannot be read ({wire.describe(exc)}); {_WHERE} is not used")


class _HeadMeta(pydantic.BaseModel):
    name: str | None = None
    namespace: str | None = None


class _Head(pydantic.BaseModel):
    """What keys an object in the cache: its kind, name and namespace, whatever the rest holds
    (so that an object the decision cannot read is still kept, and forgotten, under its name)."""

    kind: str | None = None
    metadata: _HeadMeta = pydantic.Field(default_factory=_HeadMeta)


def _name(meta: _HeadMeta, kind: str) -> str:
    if not meta.name:
        raise ValueError(f"{kind} without metadata.name cannot be cached")
    return meta.name


def _attachment_key(meta: _HeadMeta, kind: str) -> tuple[str, str]:
    return (meta.namespace or "default", _name(meta, kind))


class _Kind:
    """How the cache keys one kind, what it keeps of an object, and which Snapshot slot holds it."""

    def __init__(
        self,
        key: Callable[[_HeadMeta, str], Hashable],
        state: Callable[[Mapping[str, Any]], object],
        slot: str,
    ) -> None:
        self.key, self.state, self.slot = key, state, slot


class Cache:
    """Thread- and asyncio-safe store of what `/filter` needs. Writes are short and never await."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot = Snapshot()

    _KINDS: Mapping[str, _Kind] = {
        constants.PODNETWORK_KIND: _Kind(_name, _podnetwork_state, "podnetworks"),
        constants.ATTACHMENT_KIND: _Kind(_attachment_key, _attachment_state, "attachments"),
        NODE_KIND: _Kind(_name, _node_state, "nodes"),
    }

    def _kind(self, kind: object) -> _Kind:
        found = self._KINDS.get(kind) if isinstance(kind, str) else None
        if found is None:
            known = ", ".join(self._KINDS)
            raise ValueError(f"cannot cache kind {kind!r}; known kinds: {known}")
        return found

    def _key(self, obj: Mapping[str, Any]) -> tuple[Hashable, _Kind]:
        """The object's key and kind, from its type and metadata alone. Raises ValueError."""
        head = _Head.model_validate(obj)
        kind = self._kind(head.kind)
        return kind.key(head.metadata, head.kind or ""), kind

    def _publish(self, slot: str, mapping: dict[Any, Any]) -> None:
        proxy: Mapping[Any, Any] = MappingProxyType(mapping)
        if slot == "podnetworks":
            self._snapshot = replace(self._snapshot, podnetworks=proxy)
        elif slot == "attachments":
            self._snapshot = replace(self._snapshot, attachments=proxy)
        else:
            self._snapshot = replace(self._snapshot, nodes=proxy)

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Add or update one object (dispatching on `kind`). Raises ValueError without a kind or name."""
        key, kind = self._key(obj)
        state, slot = kind.state(obj), kind.slot
        with self._lock:
            current: Mapping[Any, Any] = getattr(self._snapshot, slot)
            if key in current and current[key] == state:
                return
            updated = dict(current)
            updated[key] = state
            self._publish(slot, updated)

    def delete(self, obj: Mapping[str, Any]) -> None:
        """Forget one object (dispatching on `kind`); forgetting an unknown one is a no-op."""
        key, kind = self._key(obj)
        slot = kind.slot
        with self._lock:
            current: Mapping[Any, Any] = getattr(self._snapshot, slot)
            if key not in current:
                return
            updated = dict(current)
            del updated[key]
            self._publish(slot, updated)

    def replace(self, kind: str, objs: Iterable[Mapping[str, Any]]) -> None:
        """Replace every object of one kind at once: the result of a full (re)list."""
        found = self._kind(kind)
        fresh = {}
        for obj in objs:
            head = _Head.model_validate(obj)
            fresh[found.key(head.metadata, kind)] = found.state(obj)
        with self._lock:
            self._publish(found.slot, fresh)

    def mark_synced(self) -> None:
        """Declare that every kind has been listed in full; `/readyz` turns ready."""
        with self._lock:
            self._snapshot = replace(self._snapshot, synced=True)

    @property
    def synced(self) -> bool:
        return self._snapshot.synced

    def snapshot(self) -> Snapshot:
        """The current immutable view, in O(1): later writes never change it."""
        return self._snapshot

    def sizes(self) -> dict[str, int]:
        """Objects held per kind (for /metrics)."""
        snap = self._snapshot
        return {
            constants.PODNETWORK_KIND: len(snap.podnetworks),
            constants.ATTACHMENT_KIND: len(snap.attachments),
            NODE_KIND: len(snap.nodes),
        }

