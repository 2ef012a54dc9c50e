"""What the agent keeps of the cluster for MultiNetworkPolicy, and only that. No I/O.

`PolicyState` is a `watchcache.Listener`: the list + watch of five kinds feeds it (Pods and
Namespaces, NetworkAttachmentDefinitions and PodNetworks, MultiNetworkPolicies; the NAD and
PodNetwork watches are the watch cache's own, `watchcache.Mirror.listeners`). Of each object it
keeps what a policy decision reads (`bridge.policy.world`), so that an agent following every
pod of a large cluster stays small (docs/benchmarks.md):

- a Pod: namespace, name, labels, node, named container ports, and its secondary interfaces
  with their addresses as its annotations report them (network-status, pod-ips; networks
  named as reported, `views.reported_interfaces`, and keyed for a `World`, so a PodNetwork
  created after the pod still finds it: the pods keyed are kept from pass to pass, `world`,
  so that a pass keys only what changed). A pod with no secondary address is a peer
  of nothing: it is kept only if it is on this node or is one of this node's pods
  (`keep`). Pods that ended (Succeeded, Failed) are dropped: their addresses are reused;
- a Namespace: its labels; a NAD: its `namespace/name`; a PodNetwork: its name and, for the
  NPWG bridge's, its NAD (`views.network_of`);
- a MultiNetworkPolicy: the parsed policy (`parse_policy`). One that does not parse is logged
  once per change and applies to nothing, except that a policy which was valid and is then
  changed into one that does not parse stays in force as it last parsed: a typo never opens
  a pod the policy isolated (docs/network-policy.md, "Enforcement on the node").

A kind whose list answers 404 (its CRD is not installed) counts as listed and empty, said once
in the log; it is listed again from time to time (the watch's backoff, up to 30 s), and found,
it is said again. `ready` is true once every kind has been listed (or found missing): before
that no decision is made.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import sys
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, TypeVar

from pydantic import ValidationError

from bridge import translate
from bridge.agent.kube.watchcache import NAD, NAMESPACE, POD, PODNETWORK, POLICY, KeptKinds, Kind
from bridge.policy import views
from bridge.policy.model import MultiNetworkPolicy, PolicyError, Protocol, parse_policy
from bridge.policy.scope import Finding, Scope
from bridge.policy.world import (
    ContainerPort,
    NamespaceInfo,
    NetworkInfo,
    PodInfo,
    PodInterface,
    World,
    namespace_info,
)
from podnetwork.ground import constants
from podnetwork.ground.core import ObjectMeta

log = logging.getLogger(__name__)

KINDS = (POD, NAMESPACE, NAD, PODNETWORK, POLICY)
"""What policies read, each listed and watched cluster-wide."""
ENDED_PHASES = frozenset({"Succeeded", "Failed"})


def _own(text: str) -> str:
    """`text` interned, as a string of its own if it was not interned yet.

    Interning `text` itself would keep the list's memory alive: CPython's small-object
    allocator returns an arena to the system only when nothing in it lives, and the object a
    list or event decoded sits among that object's other strings. A copy made here sits with
    what is kept instead (docs/benchmarks.md, "MultiNetworkPolicy on the node", Memory)."""
    return sys.intern("".join((text, "")))


def _interned(labels: Mapping[str, Any] | None) -> dict[str, str]:
    """Labels with shared strings: thousands of pods carry the same few keys and values."""
    return {_own(k): _own(v) for k, v in (labels or {}).items() if isinstance(k, str) and isinstance(v, str)}


class _Meta(NamedTuple):
    """What is read of an object's metadata, valid as `ObjectMeta` reads it."""

    name: str
    namespace: str | None
    labels: Mapping[str, str] | None
    annotations: Mapping[str, str] | None


_OPTIONAL_TEXT = ("namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
_FIELD_NAMES = ("resource_version", "creation_timestamp", "deletion_timestamp")
"""`ObjectMeta`'s Python names, which it accepts too: an object using one is read by the model."""


def _texts(value: Any) -> bool:
    return value is None or (
        type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items()))


def _plain(raw: Mapping[str, Any]) -> bool:
    """Whether `ObjectMeta` accepts `raw` as it is, seen without building the model: each field it
    reads of the type an API server sends. Anything else is left to the model (`_meta`)."""
    generation, finalizers = raw.get("generation"), raw.get("finalizers")
    return (
        all(raw.get(key) is None or type(raw.get(key)) is str for key in _OPTIONAL_TEXT)
        and (generation is None or type(generation) is int)
        and _texts(raw.get("labels")) and _texts(raw.get("annotations"))
        and (finalizers is None or (type(finalizers) is list and all(type(f) is str for f in finalizers)))
        and not any(key in raw for key in _FIELD_NAMES)
    )


def _meta(obj: Mapping[str, Any]) -> _Meta | None:
    """The object's metadata, or None when `ObjectMeta` refuses it (the object is then ignored).

    Building the pydantic model for each of a cluster's pods costs time and leaves garbage
    among the kept values (`_own`), so the model is built only for metadata of unusual types,
    to decide exactly as it would."""
    raw = obj.get("metadata")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        return None
    if type(raw["name"]) is str and _plain(raw):
        return _Meta(raw["name"], raw.get("namespace"), raw.get("labels"), raw.get("annotations"))
    try:
        meta = ObjectMeta.model_validate(raw)
    except ValidationError:
        return None
    return _Meta(meta.name or "", meta.namespace, meta.labels, meta.annotations)


_PortsKey = tuple[tuple[str, Protocol, int], ...]
_K = TypeVar("_K")
_V = TypeVar("_V")


class _Shared(Generic[_K, _V]):
    """One value for many pods alike (labels, named ports): pods of one workload carry the same.

    Values only the pool still holds are dropped when it has doubled since the last time, so
    label sets that pods no longer carry (an old ReplicaSet's `pod-template-hash`) go too."""

    __slots__ = ("_limit", "_values")

    def __init__(self) -> None:
        self._values: dict[_K, _V] = {}
        self._limit = 256

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: _K, make: Callable[[], tuple[_K, _V]]) -> _V:
        """The value kept for `key`; `make` gives a new key (of strings of its own, `_own`) and value."""
        value = self._values.get(key)
        if value is None:
            own, value = make()
            self._values[own] = value
            if len(self._values) > self._limit:
                self.prune()
        return value

    def prune(self) -> None:
        for key in list(self._values):
            value = self._values[key]
            # A value no pod holds is referred to by the pool, `value` and getrefcount's argument.
            if sys.getrefcount(value) <= 3:
                del self._values[key]
        self._limit = max(256, 2 * len(self._values))

    def clear(self) -> None:
        self._values.clear()
        self._limit = 256


class PolicyState(KeptKinds):
    """The cluster as policies see it (module docstring). `on_change` is called after each change
    that can change a decision (not after an event that changes nothing a policy reads)."""

    kinds = KINDS
    label = "policies"
    log = log

    def __init__(self, node: str | None = None, on_change: Callable[[], None] | None = None) -> None:
        super().__init__(on_change)
        self.node = node
        self.pods: dict[str, PodInfo] = {}
        """By `namespace/name`; interfaces' networks as the pod reports them (module docstring)."""
        self.namespaces: dict[str, NamespaceInfo] = {}
        self.nads: set[str] = set()
        self.podnetworks: dict[str, NetworkInfo] = {}
        self.policies: dict[str, MultiNetworkPolicy] = {}
        self.invalid: dict[str, str] = {}
        """Policy key -> why it does not parse (logged once per change)."""
        self.findings: dict[str, tuple[Finding, ...]] = {}
        """Policy key -> what its scope found wrong, as last logged."""
        self.local: set[str] = set()
        """Pods of this node's containers: kept even with no secondary address (`keep`)."""
        self.shared_labels: _Shared[tuple[tuple[str, str], ...], Mapping[str, str]] = _Shared()
        """Pods' label sets, each kept once (`_labels`)."""
        self.shared_ports: _Shared[_PortsKey, tuple[ContainerPort, ...]] = _Shared()
        """Pods' named ports, each set kept once (`_ports`)."""
        self.keyed_pods: dict[str, PodInfo] | None = None
        """`pods` as a pass's world has them, their networks keyed for `keyed_by` (`_keyed`), in
        the same order: kept from pass to pass and changed with `pods`, so that a pass keys only
        the pods that changed (`world`). None until a pass needs them (a cluster without a policy
        never does), after a relist of the pods, and when no policy is left (`forget_world`)."""
        self.keyed_by: dict[str, str] = {}
        """The `by_nad` that `keyed_pods` were keyed for: when the networks change it, `world` keys
        every pod again."""

    def keep(self, pod: str, keep: bool = True) -> None:
        """Whether the pod `namespace/name` is one of this node's (kept whatever it reports)."""
        if keep:
            self.local.add(pod)
        else:
            self.local.discard(pod)

    def _missing_said(self, kind: Kind) -> str:
        if kind is POLICY:
            return (f"the {kind.name} CRD is not installed ({kind.path} answered 404): enforcing no "
                    "policies; looking for it again every 30 s at most")
        return (f"{kind.path} answered 404 (no {kind.name} CRD): there are none; looking again every "
                "30 s at most")

    # --- keeping ---------------------------------------------------------------------------------

    def _clear(self, kind: Kind) -> bool:
        """Forgets every object of `kind`; whether there was any."""
        stores: dict[str, dict[str, Any] | set[str]] = {
            POD.name: self.pods, NAMESPACE.name: self.namespaces, NAD.name: self.nads,
            PODNETWORK.name: self.podnetworks, POLICY.name: self.policies}
        store = stores[kind.name]
        had = bool(store)
        store.clear()
        if kind is POD:
            self.shared_labels.clear()
            self.shared_ports.clear()
            self.keyed_pods = None
        if kind is POLICY:
            self.invalid.clear()
            self.findings.clear()
        return had

    def _put(self, kind: Kind, obj: dict[str, Any]) -> bool:
        meta = _meta(obj)
        if meta is None:
            return False
        if kind is POD:
            return self._put_pod(meta, obj)
        if kind is NAMESPACE:
            return self._set(self.namespaces, meta.name or "",
                             namespace_info(_own(meta.name or ""), _interned(meta.labels)))
        if kind is NAD:
            key = f"{meta.namespace}/{meta.name}"
            if key in self.nads:
                return False
            self.nads.add(key)
            return True
        if kind is PODNETWORK:
            return self._put_podnetwork(meta, obj)
        return self._put_policy(meta, obj)

    def _delete(self, kind: Kind, obj: dict[str, Any]) -> bool:
        meta = _meta(obj)
        if meta is None:
            return False
        name = meta.name or ""
        key = f"{meta.namespace}/{name}"
        if kind is POD:
            return self._drop_pod(f"{meta.namespace or ''}/{name}")
        if kind is NAMESPACE:
            return self.namespaces.pop(name, None) is not None
        if kind is NAD:
            had = key in self.nads
            self.nads.discard(key)
            return had
        if kind is PODNETWORK:
            return self.podnetworks.pop(name, None) is not None
        self.invalid.pop(key, None)
        self.findings.pop(key, None)
        return self.policies.pop(key, None) is not None

    @staticmethod
    def _set(store: dict[str, Any], key: str, value: Any) -> bool:
        if store.get(key) == value:
            return False
        store[key] = value
        return True

    def _put_pod(self, meta: _Meta, obj: Mapping[str, Any]) -> bool:
        key = f"{meta.namespace or ''}/{meta.name}"  # the kept `PodInfo.key` (a world's key)
        status, spec = obj.get("status"), obj.get("spec")
        phase = status.get("phase") if isinstance(status, Mapping) else None
        node = spec.get("nodeName") if isinstance(spec, Mapping) else None
        interfaces = self._interfaces(meta)
        mine = key in self.local or (self.node is not None and node == self.node)
        if phase in ENDED_PHASES or not (interfaces or mine):
            return self._drop_pod(key)
        # The key (an f-string) and the name are new strings: the object's own would keep its
        # memory (`_own`).
        info = PodInfo(_own(meta.namespace or ""), "".join((meta.name, "")), self._labels(meta.labels),
                       node=_own(node) if isinstance(node, str) else None,
                       ports=self._ports(views.container_ports(obj)), interfaces=interfaces)
        if self.pods.get(key) == info:
            return False
        self.pods[key] = info
        if self.keyed_pods is not None:  # in place if it was there, last if not: as in `pods`
            self.keyed_pods[key] = self._keyed(info, self.keyed_by)
        return True

    def _drop_pod(self, key: str) -> bool:
        if self.pods.pop(key, None) is None:
            return False
        if self.keyed_pods is not None:
            del self.keyed_pods[key]
        return True

    @staticmethod
    def _interfaces(meta: _Meta) -> tuple[PodInterface, ...]:
        """`views.reported_interfaces`, with the networks' and interfaces' names interned."""
        annotations = meta.annotations or {}
        if not (annotations.get(constants.NPWG_NETWORK_STATUS_ANNOTATION)
                or annotations.get(constants.POD_IPS_ANNOTATION)):
            return ()  # what reported_interfaces finds in a pod without either annotation
        reported = views.reported_interfaces(ObjectMeta.model_construct(
            namespace=meta.namespace, annotations=dict(annotations)))
        return tuple(PodInterface(_own(i.network), None if i.interface is None else _own(i.interface),
                                  i.addresses) for i in reported)

    def _labels(self, labels: Mapping[str, str] | None) -> Mapping[str, str]:
        """The pod's labels as a read-only mapping, one for all the pods that carry the same."""
        items = tuple((labels or {}).items())

        def make() -> tuple[tuple[tuple[str, str], ...], Mapping[str, str]]:
            own = _interned(labels)
            return tuple(own.items()), MappingProxyType(own)
        return self.shared_labels.get(items, make)

    def _ports(self, ports: list[ContainerPort]) -> tuple[ContainerPort, ...]:
        """The pod's named ports, one tuple for all the pods that have the same."""
        key = tuple((p.name, p.protocol, p.port) for p in ports)

        def make() -> tuple[_PortsKey, tuple[ContainerPort, ...]]:
            own = tuple(ContainerPort(_own(p.name), p.protocol, p.port) for p in ports)
            return tuple((p.name, p.protocol, p.port) for p in own), own
        return self.shared_ports.get(key, make)

    def _put_podnetwork(self, meta: _Meta, obj: Mapping[str, Any]) -> bool:
        name = meta.name or ""
        if name == constants.DEFAULT_PODNETWORK:
            return False  # the cluster default network is not a policy's (views.networks_of)
        try:
            network = views.network_of(translate.PodNetwork.model_validate(obj))
        except (ValidationError, ValueError) as exc:
            log.warning("policies: PodNetwork %s does not fit its schema (%s); a policy naming it applies "
                        "to nothing until it is fixed", name, str(exc)[:300])
            return self.podnetworks.pop(name, None) is not None
        return self._set(self.podnetworks, name, network)

    def _put_policy(self, meta: _Meta, obj: Mapping[str, Any]) -> bool:
        key = f"{meta.namespace}/{meta.name}"
        try:
            policy = parse_policy(obj)
        except PolicyError as exc:
            message = str(exc)
            if self.invalid.get(key) != message:
                self.invalid[key] = message
                kept = " (its last valid version stays in force until it is fixed or deleted)" \
                    if key in self.policies else " (it applies to nothing)"
                log.warning("policies: %s %s is invalid%s: %s", constants.POLICY_KIND, key, kept,
                            message[:2000])
            return False
        if self.invalid.pop(key, None) is not None:
            log.warning("policies: %s %s is valid again; enforcing it", constants.POLICY_KIND, key)
        return self._set(self.policies, key, policy)

    # --- what decisions read ---------------------------------------------------------------------

    def networks(self) -> list[NetworkInfo]:
        """Every network: each PodNetwork (with its NAD if bridge-backed), then each NAD no
        PodNetwork is backed by (`views.networks_of`)."""
        out = list(self.podnetworks.values())
        backing = {n.nad for n in out if n.nad}
        out.extend(NetworkInfo(nad=key) for key in sorted(self.nads) if key not in backing)
        return out

    def by_nad(self, networks: Iterable[NetworkInfo] | None = None) -> dict[str, str]:
        """A NAD's `namespace/name` -> its network's key (a bridge-backed PodNetwork's name)."""
        return {n.nad: n.key for n in (self.podnetworks.values() if networks is None else networks) if n.nad}

    def world(self, local: Mapping[str, PodInfo] | None = None) -> World:
        """The `World` of a decision: every kept pod, with `local` (keyed interfaces, from this
        node's records; by each one's `key`) in place of the watched pods of the same keys.

        The pods keyed are kept between passes (`keyed_pods`): a pass keys again only the pods
        that changed since the last, or every pod when the networks changed how NADs are keyed.
        The world's pods are its own mapping (a copy of references): it does not change when the
        state does after it. tests/unit/agent/test_policy_state_keeping.py checks that it is the
        world built afresh, after any sequence of changes."""
        networks = self.networks()
        by_nad = self.by_nad(networks)
        if self.keyed_pods is None or by_nad != self.keyed_by:
            self.keyed_pods = {key: self._keyed(pod, by_nad) for key, pod in self.pods.items()}
            self.keyed_by = by_nad
        pods = dict(self.keyed_pods)
        pods.update(local or {})
        return World(pods, {n.name: n for n in self.namespaces.values()}, {n.key: n for n in networks},
                     tuple(self.policies.values()))

    def forget_world(self) -> None:
        """Lets the pods keyed for passes go (no policy is left: passes need no world); the next
        pass that needs one keys every pod again."""
        self.keyed_pods = None

    @staticmethod
    def _keyed(pod: PodInfo, by_nad: Mapping[str, str]) -> PodInfo:
        """`pod` with its networks keyed (`views.keyed`); `pod` itself when that changes nothing (a
        network that is only a NAD is keyed by its own name): kept pods cost no copy then."""
        if not any(i.network in by_nad for i in pod.interfaces):
            return pod
        interfaces = views.keyed(pod.interfaces, by_nad)
        if len(interfaces) == len(pod.interfaces) and all(map(operator.is_, interfaces, pod.interfaces)):
            return pod
        return dataclasses.replace(pod, interfaces=interfaces)

    def note(self, scope_of: Mapping[str, Scope]) -> None:
        """Logs each policy's findings (`scope`) once per change: a policy naming no network, one
        that does not exist, or garbage. Events on the policy are the bridge operator's."""
        for key, found in scope_of.items():
            if self.findings.get(key, ()) == found.findings:
                continue
            self.findings[key] = found.findings
            for finding in found.findings:
                log.warning("policies: %s %s: %s: %s", constants.POLICY_KIND, key, finding.reason.value,
                            finding.message)
        for key in set(self.findings) - set(scope_of):
            del self.findings[key]


__all__ = ["ENDED_PHASES", "KINDS", "PolicyState"]
