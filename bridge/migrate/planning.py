"""Planning the move from NPWG selection annotations to PodNetwork objects.

Pure: objects in, a `Plan` out. `bridge.migrate.apply` reads a cluster and
applies plans; `bridge.migrate.command` is the `podnetwork migrate` shell.

What a plan holds (docs/migration.md has the user's view):

- one PodNetwork per NAD a pod selects (provider `multinetwork.x-k8s.io/npwg-bridge`,
  `parametersRefs` -> that NAD), named `<nad-namespace>.<nad-name>`;
- per selection element that carries per-pod keys (NPWG v1.3 4.1.2.1.3 to
  4.1.2.1.11: ips, mac, cni-args, portMappings, bandwidth, default-route,
  infiniband-guid, ipam-claim-reference, and reverse-domain extension keys), a
  NetworkSelectionOptions with those keys and a PodNetworkAttachment pointing at
  it, so the keys survive the trip;
- per workload, the `multinetwork.x-k8s.io/networks` list that replaces the
  `k8s.v1.cni.cncf.io/networks` annotation of its pod template: the `default`
  PodNetwork first (NPWG 2.2: the cluster-wide default attachment always comes
  first), then one entry per selection element in the original order, with the
  original interface names;
- what cannot be migrated and why. A workload is migrated whole or not at all:
  migrating part of a selection would change what its pods get.

The same NAD twice in one pod (NPWG 4.2) cannot be one PodNetwork twice (KEP
"Static validations": a pod references a given PodNetwork only once, also
through attachments, KEP "Active validations"). The k-th use of a NAD inside one
pod therefore gets its own PodNetwork, `<namespace>.<nad>.<k>`, on the same NAD.

Every workload's plan is checked before it is accepted: the bridge's translation
(`bridge.translate`) of the planned networks must give back the original
selection, element for element; when it does not, the workload is reported
(`RoundTripMismatch`) instead of being changed.

Names are deterministic and collision-free: a name already taken by an object
with a different spec (in the cluster, the input files or the plan itself) is
replaced by a truncated name plus a hash of the object's origin; an object that
already exists with the same spec is reused, which makes a second run plan
nothing.
"""

from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import ipaddress
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml
from pydantic import ValidationError

from bridge import npwg, translate
from podnetwork.ground import constants, excerpts
from podnetwork.kep import networks as kep_networks
from podnetwork.kep import validation
from podnetwork.kep.api import Network

# --- names of the objects involved -------------------------------------------------------------

NPWG_NETWORKS_ANNOTATION = npwg.NETWORKS_ANNOTATION
#: Multus's per-pod replacement of the cluster default network: no KEP equivalent here.
MULTUS_DEFAULT_NETWORK_ANNOTATION = "v1.multus-cni.io/default-network"
NAD_GROUP = npwg.NAD_GROUP
NAD_KIND = npwg.NAD_KIND
NAD_PLURAL = npwg.NAD_PLURAL

OPTIONS_GROUP = translate.OPTIONS_GROUP
OPTIONS_VERSION = translate.OPTIONS_VERSION
OPTIONS_API_VERSION = translate.OPTIONS_API_VERSION
OPTIONS_KIND = translate.OPTIONS_KIND
OPTIONS_PLURAL = translate.OPTIONS_PLURAL

FIELD_MANAGER = "podnetwork-migrate"
#: Label on every object a migration creates; rollback selects by it.
MIGRATED_BY_LABEL = f"{OPTIONS_GROUP}/migrated-by"
#: Annotation on every created object: JSON naming what it was made from.
ORIGIN_ANNOTATION = f"{OPTIONS_GROUP}/migrated-from"

PLAN_API_VERSION = OPTIONS_API_VERSION
PLAN_KIND = "MigrationPlan"

#: Keys of a selection element that the PodNetworkAttachment entry itself carries.
_ENTRY_KEYS = frozenset({"name", "namespace", "interface"})


class WorkloadKind(StrEnum):
    """The workload kinds whose pod template can carry the selection annotation."""

    POD = "Pod"
    DEPLOYMENT = "Deployment"
    STATEFULSET = "StatefulSet"
    DAEMONSET = "DaemonSet"
    REPLICASET = "ReplicaSet"
    JOB = "Job"
    CRONJOB = "CronJob"


#: kind -> (API group, path of the pod template's metadata inside the object).
WORKLOAD_KINDS: dict[WorkloadKind, tuple[str, tuple[str, ...]]] = {
    WorkloadKind.POD: ("", ("metadata",)),
    WorkloadKind.DEPLOYMENT: ("apps", ("spec", "template", "metadata")),
    WorkloadKind.STATEFULSET: ("apps", ("spec", "template", "metadata")),
    WorkloadKind.DAEMONSET: ("apps", ("spec", "template", "metadata")),
    WorkloadKind.REPLICASET: ("apps", ("spec", "template", "metadata")),
    WorkloadKind.JOB: ("batch", ("spec", "template", "metadata")),
    WorkloadKind.CRONJOB: ("batch", ("spec", "jobTemplate", "spec", "template", "metadata")),
}
_KIND_NAMES = frozenset(str(k) for k in WorkloadKind)


class Reason(StrEnum):
    """Why a workload cannot be migrated (each comes with a detail message)."""

    INVALID_ANNOTATION = "InvalidAnnotation"
    MISSING_NAD = "MissingNetworkAttachmentDefinition"
    INVALID_NAD = "InvalidNetworkAttachmentDefinition"
    INVALID_NAME = "InvalidName"
    INVALID_RESULT = "InvalidResult"
    ALREADY_HAS_NETWORKS = "AlreadyHasNetworks"
    HOST_NETWORK = "HostNetwork"
    DEFAULT_NETWORK_OVERRIDE = "DefaultNetworkOverride"
    MISSING_NAMESPACE = "MissingNamespace"
    UNSUPPORTED_KEY = "UnsupportedKey"
    ROUND_TRIP = "RoundTripMismatch"


class Action(StrEnum):
    CREATE = "create"
    REUSE = "reuse"


# --- inputs ------------------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], path: Sequence[str]) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


@dataclass(frozen=True)
class ObjectRef:
    """Kind, namespace and name of an object; prints as `Kind namespace/name`."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        # Names come from the input; one too long to be valid is cut, not printed whole.
        name, namespace = excerpts.cut(self.name), excerpts.cut(self.namespace)
        where = f"{namespace}/{name}" if namespace else name
        return f"{excerpts.cut(str(self.kind))} {where}"


@dataclass(frozen=True)
class Workload:
    """An object with a pod template (or a Pod), as found in the input."""

    kind: WorkloadKind
    api_version: str
    namespace: str
    name: str
    template_path: tuple[str, ...]
    """Path of the pod template's `metadata` inside the object."""
    annotations: Mapping[str, str]
    host_network: bool = False
    finished: bool = False
    """A Pod in phase Succeeded or Failed: nothing will attach it again."""
    owner: ObjectRef | None = None
    """The controller that manages this object, when it is itself a workload kind."""
    resource_version: str | None = None
    source: str = ""
    """Where it was read: `file:doc N` or `cluster`."""

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(str(self.kind), self.namespace, self.name)

    @property
    def annotations_path(self) -> str:
        return ".".join((*self.template_path, "annotations"))


def workload_of(
    obj: Mapping[str, Any], *, default_namespace: str = "default", source: str = ""
) -> Workload | None:
    """The workload view of an object, or None when it is not a workload kind."""
    kind_text = obj.get("kind")
    api_version = obj.get("apiVersion")
    if not isinstance(kind_text, str) or not isinstance(api_version, str):
        return None
    try:
        kind = WorkloadKind(kind_text)
    except ValueError:
        return None
    group, template_path = WORKLOAD_KINDS[kind]
    if _group_of(api_version) != group:
        return None
    meta = obj.get("metadata") or {}
    template_meta = _get(obj, template_path) or {}
    annotations = template_meta.get("annotations") or {} if isinstance(template_meta, Mapping) else {}
    spec_path = (*template_path[:-1], "spec")
    namespace = str(meta.get("namespace") or default_namespace)
    owner = None
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") in _KIND_NAMES:
            owner = ObjectRef(str(ref["kind"]), namespace, str(ref.get("name")))
    if not isinstance(annotations, Mapping):
        annotations = {}
    return Workload(
        kind=kind,
        api_version=api_version,
        namespace=namespace,
        name=str(meta.get("name") or ""),
        template_path=template_path,
        annotations={str(k): str(v) for k, v in annotations.items()},
        host_network=bool(_get(obj, (*spec_path, "hostNetwork"))),
        finished=kind == WorkloadKind.POD and _get(obj, ("status", "phase")) in ("Succeeded", "Failed"),
        owner=owner,
        resource_version=meta.get("resourceVersion"),
        source=source,
    )


def is_nad(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == NAD_KIND and _group_of(str(obj.get("apiVersion", ""))) == NAD_GROUP


@dataclass
class Inventory:
    """Everything the planner looks at: workloads, NADs, and objects that already exist."""

    workloads: list[Workload] = field(default_factory=list)
    nads: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Every NetworkAttachmentDefinition known, by (namespace, name)."""
    podnetworks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Existing PodNetworks by name."""
    attachments: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Existing PodNetworkAttachments by (namespace, name)."""
    options: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Existing NetworkSelectionOptions by (namespace, name)."""

    def add(self, obj: Mapping[str, Any], *, default_namespace: str = "default", source: str = "") -> None:
        """Sort one object into the inventory; other kinds are ignored."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        namespace = str(meta.get("namespace") or default_namespace)
        group, kind = _group_of(str(obj.get("apiVersion", ""))), obj.get("kind")
        if is_nad(obj):
            self.nads[(namespace, name)] = dict(obj)
        elif group == constants.GROUP and kind == constants.PODNETWORK_KIND:
            self.podnetworks[name] = dict(obj)
        elif group == constants.GROUP and kind == constants.ATTACHMENT_KIND:
            self.attachments[(namespace, name)] = dict(obj)
        elif group == OPTIONS_GROUP and kind == OPTIONS_KIND:
            self.options[(namespace, name)] = dict(obj)
        else:
            wl = workload_of(obj, default_namespace=default_namespace, source=source)
            if wl is not None:
                self.workloads.append(wl)

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]], *, default_namespace: str = "default") -> Inventory:
        inv = cls()
        for obj in objects:
            inv.add(obj, default_namespace=default_namespace)
        return inv


# --- names -------------------------------------------------------------------------------------

_NAME_MAX = validation.DNS1123_SUBDOMAIN_MAX
_HASH_LEN = 10


def _digest(origin: Mapping[str, Any]) -> str:
    text = json.dumps(origin, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LEN]


def _valid_name(name: str) -> bool:
    return not validation.dns1123_subdomain_errors("metadata.name", name)


def _hashed(base: str, origin: Mapping[str, Any]) -> str:
    """`base` cut to fit, then `-<hash of origin>`; the cut never ends in `-` or `.`."""
    keep = base[: _NAME_MAX - _HASH_LEN - 1].rstrip("-.")
    return f"{keep}-{_digest(origin)}" if keep else _digest(origin)


def network_name(nad_namespace: str, nad_name: str, occurrence: int = 1) -> str:
    """The natural PodNetwork name of the k-th use of a NAD in one pod.

    Namespaces and NAD names are DNS-1123 labels (NPWG 3.3) and never contain a
    dot, so `ns.nad` and `ns.nad.k` are distinct for distinct (ns, nad, k).
    """
    base = f"{nad_namespace}.{nad_name}"
    return base if occurrence == 1 else f"{base}.{occurrence}"


def attachment_name(kind: str, workload_name: str, index: int) -> str:
    """The natural name of the attachment (and options) of element `index` of a workload.

    `kind-name-index`: the index is the last `-`-separated part and kinds have no
    dash, so distinct (kind, name, index) never share a name.
    """
    return f"{kind.lower()}-{workload_name}-{index}"


# --- the plan ----------------------------------------------------------------------------------


@dataclass
class PlannedObject:
    """A PodNetwork, PodNetworkAttachment or NetworkSelectionOptions the plan needs."""

    action: Action
    obj: dict[str, Any]

    @property
    def ref(self) -> ObjectRef:
        meta = self.obj.get("metadata") or {}
        return ObjectRef(str(self.obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


@dataclass
class WorkloadChange:
    """The annotation change of one workload's pod template."""

    workload: Workload
    before: str
    """The NPWG selection annotation as found."""
    after: str
    """The KEP networks annotation that replaces it."""
    networks: list[Network]
    notes: list[str] = field(default_factory=list)
    """What the migration drops on purpose: reserved keys the NPWG spec does not define
    (4.1.2.1), e.g. the pre-spec `interfaceRequest`, which no implementation acts on."""

    def new_annotations(self) -> dict[str, str]:
        out = {k: v for k, v in self.workload.annotations.items() if k != NPWG_NETWORKS_ANNOTATION}
        out[constants.NETWORKS_ANNOTATION] = self.after
        return out


@dataclass(frozen=True)
class Unmigratable:
    """A workload left as it is, and why."""

    ref: ObjectRef
    reason: Reason
    message: str
    source: str = ""

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        # The message quotes parsers (npwg, translate) that may quote the input.
        return f"{where}{self.ref}: {self.reason}: {excerpts.cut(self.message, excerpts.LINE_LIMIT)}"


@dataclass(frozen=True)
class Skipped:
    """A workload not touched on purpose (not an error), and why."""

    ref: ObjectRef
    message: str
    source: str = ""


@dataclass
class Plan:
    networks: list[PlannedObject] = field(default_factory=list)
    options: list[PlannedObject] = field(default_factory=list)
    attachments: list[PlannedObject] = field(default_factory=list)
    workloads: list[WorkloadChange] = field(default_factory=list)
    unmigratable: list[Unmigratable] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def objects(self, action: Action | None = Action.CREATE) -> list[PlannedObject]:
        """Objects in apply order: networks, then options, then attachments."""
        every = [*self.networks, *self.options, *self.attachments]
        return [p for p in every if action is None or p.action == action]

    @property
    def empty(self) -> bool:
        """True when applying would change nothing."""
        return not self.objects() and not self.workloads


def _origin_nad(namespace: str, name: str, occurrence: int) -> dict[str, Any]:
    return {"kind": NAD_KIND, "namespace": namespace, "name": name, "occurrence": occurrence}


def _origin_element(workload: Workload, index: int) -> dict[str, Any]:
    return {
        "kind": str(workload.kind),
        "namespace": workload.namespace,
        "name": workload.name,
        "element": index,
    }


def _meta(name: str, namespace: str | None, origin: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {MIGRATED_BY_LABEL: FIELD_MANAGER}
    meta["annotations"] = {ORIGIN_ANNOTATION: json.dumps(dict(origin), sort_keys=True, separators=(",", ":"))}
    return meta


def nad_ref(namespace: str, name: str) -> dict[str, str]:
    return {"group": NAD_GROUP, "kind": NAD_KIND, "name": name, "namespace": namespace}


def podnetwork_object(
    name: str, nad_namespace: str, nad_name: str, origin: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.PODNETWORK_KIND,
        "metadata": _meta(name, None, origin),
        "spec": {
            "enabled": True,
            "provider": constants.BRIDGE_PROVIDER,
            "parametersRefs": [nad_ref(nad_namespace, nad_name)],
        },
    }


def options_object(
    name: str, namespace: str, keys: Mapping[str, Any], origin: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": OPTIONS_API_VERSION,
        "kind": OPTIONS_KIND,
        "metadata": _meta(name, namespace, origin),
        "spec": copy.deepcopy(dict(keys)),
    }


def attachment_object(
    name: str, namespace: str, podnetwork: str, options_name: str, origin: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.ATTACHMENT_KIND,
        "metadata": _meta(name, namespace, origin),
        "spec": {
            "podNetworkName": podnetwork,
            "parametersRefs": [
                {"group": OPTIONS_GROUP, "kind": OPTIONS_KIND, "name": options_name, "namespace": namespace}
            ],
        },
    }


def _same_spec(existing: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    if existing is None:
        return False
    have = dict(existing.get("spec") or {})
    want = dict(wanted.get("spec") or {})
    # `enabled` defaults to true on the API server (KEP "Enabled").
    if wanted.get("kind") == constants.PODNETWORK_KIND:
        have.setdefault("enabled", True)
    return have == want


class _Names:
    """Hands out names of one kind in one scope: natural when free, else hashed."""

    def __init__(self, existing: Mapping[str, Mapping[str, Any]]) -> None:
        self._existing = existing
        self._planned: dict[str, dict[str, Any]] = {}
        self._by_origin: dict[str, str] = {}

        self._journal: list[tuple[str, str]] = []

    def begin(self) -> None:
        """Start recording claims, so `undo` can return them (one workload at a time)."""
        self._journal = []

    def undo(self) -> None:
        for name, key in reversed(self._journal):
            self._planned.pop(name, None)
            self._by_origin.pop(key, None)
        self._journal = []

    def claim(
        self, natural: str, origin: Mapping[str, Any], build: Callable[[str], dict[str, Any]]
    ) -> tuple[str, Action] | None:
        """The name for `origin` and whether it exists already; None when no valid name exists."""
        key = json.dumps(dict(origin), sort_keys=True)
        if key in self._by_origin:
            return self._by_origin[key], Action.REUSE
        candidates = [natural] if len(natural) <= _NAME_MAX and _valid_name(natural) else []
        candidates.append(_hashed(natural, origin))
        for name in candidates:
            if not _valid_name(name):
                continue
            wanted = build(name)
            if name in self._planned:
                if _same_spec(self._planned[name], wanted):
                    self._by_origin[key] = name
                    return name, Action.REUSE
                continue
            existing = self._existing.get(name)
            if existing is not None and not _same_spec(existing, wanted):
                continue
            self._planned[name] = wanted
            self._by_origin[key] = name
            self._journal.append((name, key))
            return name, (Action.REUSE if existing is not None else Action.CREATE)
        return None


class _CannotMigrate(Exception):
    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def per_pod_keys(element: npwg.NetworkSelectionElement) -> dict[str, Any]:
    """The keys of a selection element that only a NetworkSelectionOptions can carry."""
    return {k: v for k, v in element.to_json().items() if k not in _ENTRY_KEYS}


written_by_bridge = translate.written_by_bridge


def plan(inventory: Inventory) -> Plan:
    """Plan the migration of every workload in `inventory`. Pure and deterministic."""
    result = Plan()
    pn_names = _Names(inventory.podnetworks)
    namespaced: dict[str, dict[str, _Names]] = {}

    def names_in(kind: str, namespace: str) -> _Names:
        existing_all = inventory.attachments if kind == constants.ATTACHMENT_KIND else inventory.options
        scope = namespaced.setdefault(kind, {})
        if namespace not in scope:
            scope[namespace] = _Names({n: o for (ns, n), o in existing_all.items() if ns == namespace})
        return scope[namespace]

    planned_objects: dict[tuple[str, str, str], PlannedObject] = {}

    def keep(kind_list: list[PlannedObject], obj: dict[str, Any], action: Action) -> None:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        if key not in planned_objects:
            planned_objects[key] = PlannedObject(action, obj)
            kind_list.append(planned_objects[key])

    workloads = sorted(inventory.workloads, key=lambda w: (w.namespace, str(w.kind), w.name))
    for wl in workloads:
        text = wl.annotations.get(NPWG_NETWORKS_ANNOTATION)
        if text is None or written_by_bridge(wl.annotations):
            continue
        if wl.owner is not None:
            result.skipped.append(
                Skipped(wl.ref, f"managed by {excerpts.cut(str(wl.owner))}: migrate that instead", wl.source)
            )
            continue
        if wl.finished:
            result.skipped.append(Skipped(wl.ref, "finished pod: nothing will attach it again", wl.source))
            continue
        # Stage into a scratch plan so a workload that fails half-way claims no names.
        touched = [
            pn_names,
            names_in(constants.ATTACHMENT_KIND, wl.namespace),
            names_in(OPTIONS_KIND, wl.namespace),
        ]
        for names in touched:
            names.begin()
        scratch = Plan()
        try:
            change = _plan_workload(wl, text, inventory, pn_names, names_in, scratch)
        except _CannotMigrate as exc:
            for names in touched:
                names.undo()
            result.unmigratable.append(Unmigratable(wl.ref, exc.reason, exc.message, wl.source))
            continue
        for p in scratch.networks:
            keep(result.networks, p.obj, p.action)
        for p in scratch.options:
            keep(result.options, p.obj, p.action)
        for p in scratch.attachments:
            keep(result.attachments, p.obj, p.action)
        result.workloads.append(change)
    return result


def _gateway_flags(default_route: list[str] | None) -> tuple[bool | None, bool | None]:
    """isDefaultGW4/6 for an element's `default-route` (NPWG 4.1.2.1.9).

    The translation emits `default-route` only for an entry with one of the flags
    set, taking the gateways from the options; an empty list means "the default
    route goes here", so it claims both families.
    """
    if default_route is None:
        return None, None
    if not default_route:
        return True, True
    families = {ipaddress.ip_address(gw).version for gw in default_route}
    return (True if 4 in families else None), (True if 6 in families else None)


def _nad_problem(obj: Mapping[str, Any]) -> str | None:
    """Why a NAD of the inventory cannot be used: it does not fit the NAD schema, or its config."""
    try:
        nad = npwg.NetworkAttachmentDefinition.model_validate(obj)
    except ValidationError as exc:
        return f"it does not fit the NetworkAttachmentDefinition schema: {translate.field_errors(exc)}"
    return translate.nad_config_problem(nad)


def _check_round_trip(
    wl: Workload,
    elements: Sequence[npwg.NetworkSelectionElement],
    entries: Sequence[Network],
    inventory: Inventory,
    scratch: Plan,
) -> None:
    """Translate the planned networks back with the bridge: they must give the original selection."""
    objects = translate.Objects.from_keyed(
        podnetworks={**inventory.podnetworks, **{p.obj["metadata"]["name"]: p.obj for p in scratch.networks}},
        attachments={
            **inventory.attachments,
            **{(wl.namespace, p.obj["metadata"]["name"]): p.obj for p in scratch.attachments},
        },
        nads=inventory.nads,
        options={
            **inventory.options,
            **{(wl.namespace, p.obj["metadata"]["name"]): p.obj for p in scratch.options},
        },
    )
    try:
        back = translate.translate(entries, wl.namespace, objects)
    except translate.TranslationError as exc:
        raise _CannotMigrate(Reason.ROUND_TRIP, f"the bridge cannot translate the result: {exc}") from None
    want = [e.to_json() for e in elements]
    got = [e.to_json() for e in back.elements]
    if got != want:
        raise _CannotMigrate(
            Reason.ROUND_TRIP,
            f"the bridge would translate the result to "
            f"{excerpts.cut(npwg.format_selection(back.elements))}, "
            f"not the original {excerpts.cut(npwg.format_selection(elements))}",
        )


def _plan_workload(
    wl: Workload,
    text: str,
    inventory: Inventory,
    pn_names: _Names,
    names_in: Callable[[str, str], _Names],
    scratch: Plan,
) -> WorkloadChange:
    if not wl.namespace:
        raise _CannotMigrate(Reason.MISSING_NAMESPACE, "the object has no namespace; pass --namespace")
    if wl.host_network:
        raise _CannotMigrate(
            Reason.HOST_NETWORK,
            "a hostNetwork pod may not name networks (KEP-3698 \"Static validations\"); "
            "remove the NPWG annotation, it has no effect on hostNetwork pods",
        )
    if MULTUS_DEFAULT_NETWORK_ANNOTATION in wl.annotations:
        raise _CannotMigrate(
            Reason.DEFAULT_NETWORK_OVERRIDE,
            f"{MULTUS_DEFAULT_NETWORK_ANNOTATION} replaces the cluster default network per pod; "
            "a PodNetwork list always starts with the cluster's `default` PodNetwork",
        )
    try:
        elements = npwg.parse_selection(text, wl.namespace)
    except npwg.InvalidSelection as exc:
        raise _CannotMigrate(Reason.INVALID_ANNOTATION, str(exc)) from None
    except ValueError as exc:  # the object's own namespace is not a valid name
        raise _CannotMigrate(Reason.INVALID_NAME, str(exc)) from None
    seen_ifnames: dict[str, int] = {}
    for index, element in enumerate(elements):
        if element.interface is None:
            continue
        if element.interface in seen_ifnames:
            raise _CannotMigrate(
                Reason.INVALID_ANNOTATION,
                f"elements {seen_ifnames[element.interface]} and {index} both ask for interface "
                f"{excerpts.value(element.interface)}: the second attachment fails "
                "(NPWG multi-net spec 4.1.2.1.5) "
                "and a PodNetwork list needs unique interface names (KEP-3698 \"Static validations\")",
            )
        seen_ifnames[element.interface] = index

    entries: list[Network] = [Network(pod_network_name=constants.DEFAULT_PODNETWORK)]
    uses: Counter[tuple[str, str]] = Counter()
    for index, element in enumerate(elements):
        nad_ns = element.namespace or wl.namespace
        nad = (nad_ns, element.name)
        nad_ref = f"{excerpts.cut(nad_ns)}/{excerpts.cut(element.name)}"
        if nad not in inventory.nads:
            raise _CannotMigrate(
                Reason.MISSING_NAD,
                f"element {index} selects NetworkAttachmentDefinition {nad_ref}, "
                "which does not exist; create it or fix the annotation",
            )
        if problem := _nad_problem(inventory.nads[nad]):
            raise _CannotMigrate(
                Reason.INVALID_NAD,
                f"element {index} selects NetworkAttachmentDefinition {nad_ref}, "
                f"whose configuration cannot be used: {excerpts.cut(problem, excerpts.LINE_LIMIT)}",
            )
        uses[nad] += 1
        occurrence = uses[nad]
        origin = _origin_nad(nad_ns, element.name, occurrence)
        claimed = pn_names.claim(
            network_name(nad_ns, element.name, occurrence),
            origin,
            functools.partial(podnetwork_object, nad_namespace=nad_ns, nad_name=element.name, origin=origin),
        )
        if claimed is None:
            raise _CannotMigrate(
                Reason.INVALID_NAME,
                f"no valid, free PodNetwork name for NetworkAttachmentDefinition {nad_ref}",
            )
        pn, action = claimed
        scratch.networks.append(PlannedObject(action, podnetwork_object(pn, nad_ns, element.name, origin)))
        keys = per_pod_keys(element)
        unsupported = sorted(set(keys) - set(translate.OPTIONS_KEYS))
        if unsupported:
            raise _CannotMigrate(
                Reason.UNSUPPORTED_KEY,
                f"element {index} has key(s) {excerpts.value(unsupported)}, "
                f"which a {OPTIONS_KIND} cannot carry "
                f"(it holds {', '.join(translate.OPTIONS_KEYS)})",
            )
        if not keys:
            entries.append(Network(pod_network_name=pn, interface_name=element.interface))
            continue
        eorigin = _origin_element(wl, index)
        natural = attachment_name(str(wl.kind), wl.name, index)
        opt = names_in(OPTIONS_KIND, wl.namespace).claim(
            natural, eorigin,
            functools.partial(options_object, namespace=wl.namespace, keys=keys, origin=eorigin),
        )
        if opt is None:
            raise _CannotMigrate(
                Reason.INVALID_NAME, f"no valid, free {OPTIONS_KIND} name for element {index}"
            )
        opt_name, opt_action = opt
        pna = names_in(constants.ATTACHMENT_KIND, wl.namespace).claim(
            natural,
            eorigin,
            functools.partial(attachment_object, namespace=wl.namespace, podnetwork=pn,
                              options_name=opt_name, origin=eorigin),
        )
        if pna is None:
            raise _CannotMigrate(
                Reason.INVALID_NAME, f"no valid, free {constants.ATTACHMENT_KIND} name for element {index}"
            )
        pna_name, pna_action = pna
        scratch.options.append(
            PlannedObject(opt_action, options_object(opt_name, wl.namespace, keys, eorigin))
        )
        scratch.attachments.append(
            PlannedObject(pna_action, attachment_object(pna_name, wl.namespace, pn, opt_name, eorigin))
        )
        gw4, gw6 = _gateway_flags(element.default_route)
        entries.append(
            Network(
                pod_network_attachment_name=pna_name,
                interface_name=element.interface,
                is_default_gw4=gw4,
                is_default_gw6=gw6,
            )
        )

    _check_round_trip(wl, elements, entries, inventory, scratch)
    errors = validation.validate_networks(entries)
    if errors:
        raise _CannotMigrate(Reason.INVALID_RESULT, "; ".join(str(e) for e in errors))
    after = kep_networks.format(entries)
    existing = wl.annotations.get(constants.NETWORKS_ANNOTATION)
    if existing is not None and existing != after:
        raise _CannotMigrate(
            Reason.ALREADY_HAS_NETWORKS,
            f"also has {constants.NETWORKS_ANNOTATION}={excerpts.cut(existing)}; "
            "keep one of the two annotations",
        )
    return WorkloadChange(
        workload=wl, before=text, after=after, networks=entries, notes=npwg.ignored_key_warnings(elements)
    )


# --- output ------------------------------------------------------------------------------------


def _workload_record(change: WorkloadChange) -> dict[str, Any]:
    wl = change.workload
    record: dict[str, Any] = {
        "apiVersion": wl.api_version,
        "kind": str(wl.kind),
        "namespace": wl.namespace,
        "name": wl.name,
        "annotationsPath": wl.annotations_path,
        "before": {NPWG_NETWORKS_ANNOTATION: change.before},
        "after": {constants.NETWORKS_ANNOTATION: change.after},
    }
    if wl.resource_version:
        record["resourceVersion"] = wl.resource_version
    if wl.source:
        record["source"] = wl.source
    return record


def plan_header(p: Plan) -> dict[str, Any]:
    """The first document of a plan file: what changes on workloads, what does not migrate."""
    return {
        "apiVersion": PLAN_API_VERSION,
        "kind": PLAN_KIND,
        "fieldManager": FIELD_MANAGER,
        "workloads": [_workload_record(c) for c in p.workloads],
        "reused": [str(o.ref) for o in p.objects(Action.REUSE)],
        "unmigratable": [
            {
                "object": str(u.ref),
                "reason": str(u.reason),
                "message": u.message,
                **({"source": u.source} if u.source else {}),
            }
            for u in p.unmigratable
        ],
        "skipped": [{"object": str(s.ref), "message": s.message} for s in p.skipped],
    }


# libyaml's emitter when present: a plan of thousands of workloads is megabytes of YAML.
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(documents: Iterable[Mapping[str, Any]]) -> str:
    return yaml.dump_all(
        [dict(d) for d in documents], Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )


def to_yaml(p: Plan) -> str:
    """The plan file: the MigrationPlan document, then the objects to create in apply order."""
    return dump_yaml([plan_header(p), *(o.obj for o in p.objects())])


def _annotation_lines(annotations: Mapping[str, str]) -> list[str]:
    return [f"{k}: {v}\n" for k, v in sorted(annotations.items())]


def problems(p: Plan) -> str:
    """One line per workload that cannot be migrated (`!`) or is left to its owner (`~`),
    and per note of a migrated one (`i`: a key it drops)."""
    lines = [f"! {u}\n" for u in p.unmigratable]
    lines += [
        f"i {c.workload.source + ': ' if c.workload.source else ''}{c.workload.ref}: "
        f"{excerpts.cut(note, excerpts.LINE_LIMIT)}\n"
        for c in p.workloads
        for note in c.notes
    ]
    lines += [f"~ {s.source + ': ' if s.source else ''}{s.ref}: {s.message}\n" for s in p.skipped]
    return "".join(lines)


def diff(p: Plan) -> str:
    """What the plan changes, for a human: new objects, then a unified diff per workload."""
    out: list[str] = []
    for o in p.objects(None):
        mark = "+" if o.action == Action.CREATE else "="
        spec = o.obj.get("spec") or {}
        detail = ""
        if o.obj["kind"] == constants.PODNETWORK_KIND:
            ref = (spec.get("parametersRefs") or [{}])[0]
            detail = f" -> {NAD_KIND} {ref.get('namespace')}/{ref.get('name')}"
        elif o.obj["kind"] == constants.ATTACHMENT_KIND:
            detail = f" -> PodNetwork {spec.get('podNetworkName')}"
        elif o.obj["kind"] == OPTIONS_KIND:
            detail = " " + json.dumps(spec, sort_keys=True, separators=(",", ":"))
        verb = "" if o.action == Action.CREATE else " (exists, reused)"
        out.append(f"{mark} {o.ref}{detail}{verb}\n")
    for change in p.workloads:
        wl = change.workload
        label = f"{wl.ref} {wl.annotations_path}"
        out.extend(
            difflib.unified_diff(
                _annotation_lines(wl.annotations),
                _annotation_lines(change.new_annotations()),
                fromfile=f"{label} (before)",
                tofile=f"{label} (after)",
                n=0,
            )
        )
    return "".join(out)


def rewrite(obj: Mapping[str, Any], change: WorkloadChange) -> dict[str, Any]:
    """The workload object with its pod template annotations replaced as planned."""
    out = copy.deepcopy(dict(obj))
    cur: dict[str, Any] = out
    for key in change.workload.template_path:
        cur = cur.setdefault(key, {})
    cur["annotations"] = change.new_annotations()
    return out


__all__ = [
    "FIELD_MANAGER",
    "Action",
    "Inventory",
    "Plan",
    "PlannedObject",
    "Reason",
    "Unmigratable",
    "Workload",
    "WorkloadChange",
    "WorkloadKind",
    "attachment_name",
    "diff",
    "network_name",
    "plan",
    "plan_header",
    "problems",
    "rewrite",
    "to_yaml",
    "workload_of",
]
