"""The extender's filter decision: a pure function of (pod, candidate nodes, cache snapshot).

Rules (KEP-3698 "Active validations", "Scheduler changes", Phase II req. 18):

1. A pod that names no networks, and every pod while the `MultiNetwork` gate is
   off, passes on every node: nothing changes for clusters that do not use the KEP.
   (A pod without the annotation gets `[default]` by auto-population, and the
   default PodNetwork is available on every node; its readiness is the kubelet's
   node Ready condition, KEP "Kubelet changes", not a reason to hold every pod.)
2. A pod whose networks fail static validation, or whose references cannot be
   resolved (not found, not Ready, one PodNetwork reached twice), fails on every
   node as *unresolvable*: no node can help, so kube-scheduler does not try
   preemption (`FailedAndUnresolvableNodes`).
3. Otherwise a node that lists the PodNetworks it offers (node annotation
   `multinetwork.x-k8s.io/podnetworks`) must list each of the pod's networks but
   `default`; nodes without the annotation offer every network. Such a node is
   only *failed*: it may come to offer the network later.

Messages are the same on every node for the same cause, so kube-scheduler's
FailedScheduling event aggregates them ("0/3 nodes are available: 3 podnetwork
"x" is not available on this node."). They quote at most 60 characters of a
value, name at most 5 problems and stop at 1024 characters (`wire.readable`):
an annotation may hold 256 KiB, and kube-scheduler keeps 1 KiB of a message.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import Any, TypeVar

import orjson
import pydantic_core

from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.ground.fielderrors import FieldError
from podnetwork.kep import activevalidation, networks, validation
from podnetwork.kep.api import Network
from scheduler_plugin import wire
from scheduler_plugin.cache import InvalidOffer, NodeOffer, Snapshot, parse_node_offer

NOT_SYNCED = "the podnetwork scheduler extender is starting: its cache is not synced yet"
UNKNOWN_NODE = "node is not yet known to the podnetwork scheduler extender"


@dataclass(frozen=True)
class FilterResult:
    """Which of the candidate nodes the pod may go to, and why each other one may not."""

    passed: list[str] = field(default_factory=list)
    """Candidate names that pass, in request order."""
    failed: dict[str, str] = field(default_factory=dict)
    """Node -> reason, for nodes that may pass later (preemption cannot help either, but
    the node itself can change)."""
    unresolvable: dict[str, str] = field(default_factory=dict)
    """Node -> reason, when no node can help until the pod's networks change."""


not_found = activevalidation.not_found
not_ready = activevalidation.not_ready


def not_available(name: str) -> str:
    return f'podnetwork "{name}" is not available on this node'


def _resolve(
    namespace: str, nets: Sequence[Network], snapshot: Snapshot
) -> tuple[list[str], list[str]]:
    """The PodNetwork names a pod of `namespace` needs, in its order, and every problem with them
    (`podnetwork.kep.activevalidation.resolve`: the bridge holding a gated pod says the same)."""
    return activevalidation.resolve(namespace, nets, snapshot.podnetworks, snapshot.attachments)


#: Longest value quoted in a field error, in characters (an annotation may hold 256 KiB).
MAX_VALUE_CHARS = 60


def _judge_offer(offer: NodeOffer, needed: Sequence[str]) -> str:
    """Why a node with `offer` fails the pod ("" when it passes)."""
    if isinstance(offer, InvalidOffer):
        return wire.readable(offer.message)
    if offer is None:
        return ""
    return next((not_available(n) for n in needed if n not in offer), "")


class _Verdicts(dict[NodeOffer, str]):
    """Offer -> why a node with it fails the pod ("" when it passes), judged on first use."""

    def __init__(self, needed: Sequence[str]) -> None:
        super().__init__()
        self._needed = needed

    def __missing__(self, offer: NodeOffer) -> str:
        reason = self[offer] = _judge_offer(offer, self._needed)
        return reason


#: Stands for "no such node in the request" among annotation texts.
_NO_NODE = object()


class _TextVerdicts(dict[object, str]):
    """Annotation text -> why a node carrying it fails the pod, judged on first use.

    Keyed by the text objects of the request rather than by parsed offers, so a
    request never holds more than one parse of a long annotation at a time.
    """

    def __init__(self, needed: Sequence[str]) -> None:
        super().__init__({_NO_NODE: UNKNOWN_NODE})
        self._needed = needed

    def __missing__(self, text: object) -> str:
        offer = parse_node_offer(text) if isinstance(text, str) else None
        reason = self[text] = _judge_offer(offer, self._needed)
        return reason


class _ClusterVerdicts:
    """Every cached node judged for one list of networks.

    The tables are keyed by node name. A lookup whose key is the very object it
    looks for skips comparing characters, and that comparison (with a key object
    far away in memory) is most of a lookup's cost. pydantic's JSON parser hands
    out one str object per repeated short string (`cache_strings`, see
    `wire.ExtenderArgs`), so kube-scheduler's node names come back as the same
    objects request after request: `adopt` re-keys both tables by the objects of a
    request, and later requests match on identity. The tables' contents never
    change, so a lookup is right whichever objects it meets.
    """

    __slots__ = ("_adopted", "codes", "passing", "reasons")

    def __init__(self, passing: frozenset[str], codes: dict[str, int], reasons: tuple[str, ...]) -> None:
        self.passing = passing
        self.codes: Mapping[str, int] = codes
        """Node -> index of its reason in `reasons`; 0 (the empty reason) passes."""
        self.reasons = reasons
        """The distinct reasons, `""` first: a handful (one per missing network or bad
        annotation), each one string object shared by every node it applies to."""
        self._adopted = 0

    def adopt(self, names: Sequence[str]) -> None:
        """Key the tables by the objects of `names` where they name cached nodes.

        O(cached nodes), so it runs only when a request is at least twice as large
        as the last one adopted: a handful of times per table.
        """
        if len(names) < 2 * self._adopted or len(names) < 2:
            return
        rekeyed: dict[str, int] = dict.fromkeys(filter(self.codes.__contains__, names), 0)
        # update() keeps a key's first object and sets every value: the request's objects,
        # the cache's facts, and the cache's objects for nodes this request did not name.
        rekeyed.update(self.codes)
        # A reader may meet the new set and the old map (or the reverse): both hold the same facts.
        self.passing = frozenset(name for name, code in rekeyed.items() if not code)
        self.codes = rekeyed
        self._adopted = len(names)


#: Entries remembered per snapshot in each family (node verdicts per list of networks,
#: pod verdicts per networks annotation); a bound, not a tuning knob.
_MEMO_LIMIT = 64
#: Longest key remembered, in characters: the networks annotation and the other fields a
#: pod verdict reads, or the names of a list of networks (the API server allows 256 KiB).
#: Longer ones are judged afresh and never kept, so each family holds at most 64 x 4 KiB of keys.
_MEMO_TEXT_LIMIT = 4096
#: Reason codes travel as bytes (below), so at most 256 distinct reasons take the fast path.
_BYTE_CODES = 256

_T = TypeVar("_T")


def _remembered(snapshot: Snapshot, family: str, key: Hashable, compute: Callable[[], _T]) -> _T:
    """`compute()`, kept in the snapshot's memo under (family, key) for the next request.

    Each family is bounded on its own, so many distinct pods never evict the node verdicts.
    """
    memo: dict[Hashable, _T] | None = snapshot.memo.get(family)
    if memo is None:
        memo = snapshot.memo.setdefault(family, {})
    found = memo.get(key)
    if found is None:
        found = compute()
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = found
    return found


def _cluster_verdicts(snapshot: Snapshot, needed: tuple[str, ...]) -> _ClusterVerdicts:
    """The verdicts for every node of the snapshot, computed once per snapshot and list.

    kube-scheduler asks about the replicas of one workload in a row, with the same
    networks, and node annotations rarely change (heartbeats publish no new snapshot):
    most requests find this ready, and then cost a few C-level passes over the candidates.
    """
    if sum(map(len, needed)) > _MEMO_TEXT_LIMIT:
        return _judge_nodes(snapshot, needed)
    return _remembered(snapshot, "node-verdicts", needed, lambda: _judge_nodes(snapshot, needed))


def _judge_nodes(snapshot: Snapshot, needed: tuple[str, ...]) -> _ClusterVerdicts:
    verdicts = _Verdicts(needed)
    code_of: dict[str, int] = {"": 0}
    codes: dict[str, int] = {}
    for node, offer in snapshot.nodes.items():
        codes[node] = code_of.setdefault(verdicts[offer], len(code_of))
    codes = _parser_keyed(codes)
    passing = frozenset(node for node, code in codes.items() if not code)
    return _ClusterVerdicts(passing, codes, tuple(code_of))


def _parser_keyed(codes: dict[str, int]) -> dict[str, int]:
    """`codes` keyed by the JSON parser's own objects for its names.

    pydantic's JSON parser keeps one process-wide cache of short strings
    (`cache_strings`, which `wire.ExtenderArgs` uses), so passing the names through it
    once gives the very objects every later request's node names will be: a request's
    first lookups then match on identity, without waiting for `adopt`. Names the
    parser does not cache (long ones, or a slot shared with another string) keep
    working, by comparing characters.
    """
    try:
        shared = pydantic_core.from_json(orjson.dumps(list(codes)), cache_strings=True)
    except (orjson.JSONEncodeError, ValueError):  # a name no JSON can carry: keep ours
        return codes
    return dict(zip(shared, codes.values(), strict=True))


@functools.lru_cache(maxsize=_BYTE_CODES)
def _selector(code: int) -> bytes:
    """A `bytes.translate` table that turns `code` into 1 and every other byte into 0."""
    return bytes(int(i == code) for i in range(256))


def _split(known: _ClusterVerdicts, names: Sequence[str]) -> FilterResult:
    """Sort the candidates into passed and failed, with constant work per candidate.

    The per-node work stays in C: one dict lookup per candidate gives its reason code,
    the codes become one byte each, and `compress` with a translated copy of those
    bytes picks the passing names, then the names failing for each reason, which share
    one message string. Python-level work is per distinct reason, not per node.
    """
    if len(known.reasons) > _BYTE_CODES:
        return _split_one_by_one(known, names)
    try:
        found = operator.itemgetter(*names)(known.codes)
    except KeyError:  # a candidate the cache does not know (yet)
        return _split_one_by_one(known, names)
    verdicts = bytes(found) if len(names) > 1 else bytes((found,))
    passed = list(compress(names, verdicts.translate(_selector(0))))
    failed: dict[str, str] = {}
    for code in range(1, len(known.reasons)):
        if code in verdicts:
            failing = compress(names, verdicts.translate(_selector(code)))
            if failed:
                failed.update(dict.fromkeys(failing, known.reasons[code]))
            else:  # the first (often the only) reason: no second copy of the dict
                failed = dict.fromkeys(failing, known.reasons[code])
    return FilterResult(passed=passed, failed=failed)


def _split_one_by_one(known: _ClusterVerdicts, names: Sequence[str]) -> FilterResult:
    """`_split` for the rare request that names a node the cache lacks, or brings >256 reasons."""
    code_of, reasons = known.codes.get, known.reasons
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        code = code_of(name)
        if code == 0:
            passed.append(name)
        else:
            failed[name] = UNKNOWN_NODE if code is None else reasons[code]
    return FilterResult(passed=passed, failed=failed)


@dataclass(frozen=True, slots=True)
class EncodedResult:
    """A `/filter` reply already written as JSON, and how many candidates it puts where."""

    content: bytes
    passed: int
    failed: int
    unresolvable: int


def _plain(name: str) -> bool:
    """Whether JSON writes `name` as it is, with no escape (orjson and Go's encoder alike)."""
    return name.isascii() and name.isprintable() and '"' not in name and "\\" not in name and bool(name)


class _OfferClasses:
    """The snapshot's node names that JSON writes without escapes, as bytes, each mapped to
    the index of its node's offer among the snapshot's distinct offers.

    Nodes of one pool carry the same annotation, so a cluster has a handful of distinct
    offers: one table per snapshot serves every pod (and stays in the CPU's caches), and
    a list of networks needs only a verdict per offer (`_EncodedVerdicts`).
    """

    __slots__ = ("class_of", "offers")

    def __init__(self, class_of: dict[bytes, int], offers: tuple[NodeOffer, ...]) -> None:
        self.class_of = class_of
        self.offers = offers
        """The distinct offers; empty when there are more than `_MAX_CLASSES` (no short way)."""


#: Offer indexes travel as bytes, and so do reason codes (at most one per offer, plus "").
_MAX_CLASSES = _BYTE_CODES - 1


def _offer_classes(snapshot: Snapshot) -> _OfferClasses:
    def build() -> _OfferClasses:
        index: dict[NodeOffer, int] = {}
        class_of = {name.encode(): index.setdefault(offer, len(index))
                    for name, offer in snapshot.nodes.items() if _plain(name)}
        if len(index) > _MAX_CLASSES:
            return _OfferClasses({}, ())
        return _OfferClasses(class_of, tuple(index))

    return _remembered(snapshot, "offer-classes", None, build)


class _EncodedVerdicts:
    """The snapshot's distinct offers judged for one list of networks."""

    __slots__ = ("codes", "reasons")

    def __init__(self, codes: bytes, reasons: tuple[bytes, ...]) -> None:
        self.codes = codes
        """A `bytes.translate` table: offer index -> index of its reason in `reasons` (0 passes)."""
        self.reasons = reasons
        """Each reason written as a JSON string, the empty one first."""


def _encoded_verdicts(
    snapshot: Snapshot, classes: _OfferClasses, needed: tuple[str, ...]
) -> _EncodedVerdicts:
    def build() -> _EncodedVerdicts:
        # The long way's judge (`_Verdicts`), so both ways give every node the same reason.
        verdicts = _Verdicts(needed)
        code_of: dict[str, int] = {"": 0}
        codes = bytes(code_of.setdefault(verdicts[offer], len(code_of)) for offer in classes.offers)
        return _EncodedVerdicts(codes.ljust(_BYTE_CODES, b"\0"), tuple(map(orjson.dumps, code_of)))

    if sum(map(len, needed)) > _MEMO_TEXT_LIMIT:
        return build()
    return _remembered(snapshot, "encoded-verdicts", needed, build)


_OPEN = b'{"Nodes":null,"NodeNames":['
_FAILED = b'],"FailedNodes":{'
_UNRESOLVABLE = b'},"FailedAndUnresolvableNodes":{'
_CLOSE = b'},"Error":""}'


def _entries(parts: list[bytes], names: Iterable[bytes], reason: bytes) -> None:
    """Append `"name":reason` for each of `names`, separated by commas, to `parts` (with a
    comma first unless `parts` ends by opening the object)."""
    joined = (b'":' + reason + b',"').join(names)
    if joined:
        if not parts[-1].endswith(b"{"):
            parts.append(b",")
        parts += (b'"', joined, b'":', reason)


def filter_encoded(
    pod: wire.PodFields, names: list[bytes], snapshot: Snapshot, *, enabled: bool = True
) -> EncodedResult | None:
    """`filter_nodes` for names given as bytes (`wire.SchedulerBody`), answered as JSON bytes.

    The reply decodes to exactly what `filter_nodes` answers, written by `bytes.join`
    from the names themselves and one JSON text per reason: the per-candidate work is one
    table lookup, in C. None when a name is not a plain name of a cached node (or the
    snapshot has more than 255 distinct node offers): then the caller takes the long way.
    """
    text = pod.networks
    verdict = _PASS if not enabled or text is None else _pod_verdict(pod, text, snapshot)
    classes = _offer_classes(snapshot)
    class_of, count = classes.class_of, len(names)
    try:  # the lookup also proves each name a plain name of a cached node
        found = operator.itemgetter(*names)(class_of) if count > 1 else [class_of[n] for n in names]
    except KeyError:
        return None
    parts = [_OPEN]
    if verdict.unresolvable:  # every node, in FailedAndUnresolvableNodes
        parts += (_FAILED, _UNRESOLVABLE)
        _entries(parts, names, orjson.dumps(verdict.unresolvable))
        parts.append(_CLOSE)
        return EncodedResult(b"".join(parts), 0, 0, count)
    if verdict.failed:  # every node, in FailedNodes
        parts.append(_FAILED)
        _entries(parts, names, orjson.dumps(verdict.failed))
        parts += (_UNRESOLVABLE, _CLOSE)
        return EncodedResult(b"".join(parts), 0, count, 0)
    if verdict.needed:
        known = _encoded_verdicts(snapshot, classes, verdict.needed)
        codes, reasons = bytes(found).translate(known.codes), known.reasons
    else:  # every node passes
        codes, reasons = bytes(count), (b'""',)
    passing = codes.count(0)
    if passing:
        passed = names if passing == count else compress(names, codes.translate(_selector(0)))
        parts += (b'"', b'","'.join(passed), b'"')
    parts.append(_FAILED)
    if passing < count:
        for code, reason in enumerate(reasons):
            if code and code in codes:
                _entries(parts, compress(names, codes.translate(_selector(code))), reason)
    parts += (_UNRESOLVABLE, _CLOSE)
    return EncodedResult(b"".join(parts), passing, count - passing, 0)


@dataclass(frozen=True, slots=True)
class _PodVerdict:
    """What the pod's networks mean on every node, before looking at any node."""

    unresolvable: str = ""
    """Why no node can take the pod (invalid networks, unresolved references)."""
    failed: str = ""
    """Why no node can take it yet (the cache is not synced)."""
    needed: tuple[str, ...] = ()
    """The PodNetworks each node must offer (never `default`)."""


_PASS = _PodVerdict()


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _shortened(error: FieldError) -> FieldError:
    """`error` with its value cut to MAX_VALUE_CHARS characters of text (or JSON text), and
    its path to twice that (an unknown key is part of the path)."""
    value = error.value
    if isinstance(value, list | dict):
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError, RecursionError):
            value = "(nested too deeply to show)"
        else:
            if len(text) > MAX_VALUE_CHARS:
                value = _cut(text, MAX_VALUE_CHARS)
    elif isinstance(value, str):
        value = _cut(value, MAX_VALUE_CHARS)
    path = _cut(error.path, 2 * MAX_VALUE_CHARS)
    if value is error.value and path is error.path:
        return error
    return dataclasses.replace(error, path=path, value=value)


def _summary(problems: Sequence[str | FieldError]) -> str:
    """The first few problems in one message, as `readable` as the wire needs."""
    first = problems[: wire.MAX_PROBLEMS_SHOWN]
    shown = [str(_shortened(p) if isinstance(p, FieldError) else p) for p in first]
    return wire.readable(wire.summary(shown, len(problems)))


def _judge_pod(fields: Mapping[str, Any], namespace: str, snapshot: Snapshot) -> _PodVerdict:
    """The verdict on a pod's networks; `fields` holds the pod's fields the networks rules read."""
    errors = validation.validate_pod(fields)
    if errors:
        return _PodVerdict(unresolvable=_summary(errors))
    if not snapshot.synced:
        return _PodVerdict(failed=NOT_SYNCED)
    needed, problems = _resolve(namespace, networks.effective(fields), snapshot)
    if problems:
        return _PodVerdict(unresolvable=_summary(problems))
    # Phase II req. 18: per-node availability does not apply to the default PodNetwork.
    return _PodVerdict(needed=tuple(n for n in needed if n != constants.DEFAULT_PODNETWORK))


def _pod_verdict(pod: wire.PodFields, text: str, snapshot: Snapshot) -> _PodVerdict:
    """`_judge_pod`, remembered per snapshot for the fields it reads.

    The replicas of one workload differ in name only. The verdict is computed from a
    pod made of the key's fields alone, so nothing outside the key can change it: the
    networks annotation `text`, the namespace (attachments are namespaced), and the
    `hostNetwork` and `os` the static rules read.
    """
    namespace, host_network, os_name = pod.namespace, pod.host_network, pod.os_name
    kept = len(text) + len(namespace or "") + len(os_name or "") <= _MEMO_TEXT_LIMIT
    key = (text, namespace, host_network, os_name)
    memo = snapshot.memo.get("pod-verdicts") if kept else None
    found: _PodVerdict | None = None if memo is None else memo.get(key)
    if found is not None:  # most calls: a replica of an earlier pod
        return found
    # validation and networks read a pod as JSON: they get one made of the key's fields.
    fields = {
        "metadata": {"namespace": namespace, "annotations": {constants.NETWORKS_ANNOTATION: text}},
        "spec": {"hostNetwork": host_network, "os": None if os_name is None else {"name": os_name}},
    }
    judge = functools.partial(_judge_pod, fields, namespace or "default", snapshot)
    if not kept:
        return judge()  # huge: judged afresh, never kept (nor hashed)
    return _remembered(snapshot, "pod-verdicts", key, judge)


def filter_nodes(
    pod: Pod,
    node_names: Sequence[str],
    snapshot: Snapshot,
    *,
    enabled: bool = True,
    node_annotations: Mapping[str, str | None] | None = None,
) -> FilterResult:
    """Decide, for each candidate node, whether the pod's networks allow it there.

    `node_annotations` (node name -> its `multinetwork.x-k8s.io/podnetworks`
    annotation, None when it has none), when given, replaces the snapshot's view of
    the nodes: with `nodeCacheCapable: false` kube-scheduler sends the nodes
    themselves, and its copy is the one it decides with; each distinct text is
    parsed once, and only when the pod needs a network. O(len(node_names)) with
    constant work per node, plus, once per snapshot and list of networks,
    O(cached nodes) to judge them all.
    """
    fields = wire.PodFields.of(pod)
    text = fields.networks
    if not enabled or text is None:
        return FilterResult(passed=list(node_names))
    verdict = _pod_verdict(fields, text, snapshot)
    if verdict.unresolvable:
        return FilterResult(unresolvable=dict.fromkeys(node_names, verdict.unresolvable))
    if verdict.failed:
        return FilterResult(failed=dict.fromkeys(node_names, verdict.failed))
    needed = verdict.needed
    if not needed:
        return FilterResult(passed=list(node_names))
    if node_annotations is not None:
        verdicts = _TextVerdicts(needed)
        get = node_annotations.get
        reasons = list(map(verdicts.__getitem__, map(get, node_names, repeat(_NO_NODE, len(node_names)))))
        failed = dict(compress(zip(node_names, reasons, strict=True), reasons))
        passed = list(compress(node_names, map(operator.not_, reasons))) if failed else list(node_names)
        return FilterResult(passed=passed, failed=failed)
    known = _cluster_verdicts(snapshot, needed)
    known.adopt(node_names)
    if known.passing.issuperset(node_names):  # C loop, stops at the first node that fails
        return FilterResult(passed=list(node_names))
    return _split(known, node_names)
