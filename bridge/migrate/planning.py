"""Planning the move from NPWG selection annotations to PodNetwork objects.

Pure: an `Inventory` in, a `Plan` out. `bridge.migrate.apply` reads a cluster and
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
(`RoundTripMismatch`) instead of being changed. Names are `bridge.migrate.names`'.
"""

from __future__ import annotations

import functools
import ipaddress
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from bridge import npwg, translate
from bridge.migrate.inventory import Inventory
from bridge.migrate.names import Names, attachment_name, network_name
from bridge.migrate.objects import (
    MULTUS_DEFAULT_NETWORK_ANNOTATION,
    NPWG_NETWORKS_ANNOTATION,
    OPTIONS_KIND,
    Action,
    PlannedObject,
    attachment_object,
    options_object,
    origin_element,
    origin_nad,
    per_pod_keys,
    podnetwork_object,
)
from podnetwork.ground import constants, excerpts
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.ground.findings import Finding
from podnetwork.ground.workloads import InvalidWorkload, Workload
from podnetwork.kep import networks as kep_networks
from podnetwork.kep import validation
from podnetwork.kep.api import DEFAULT_NETWORKS, Network


class Reason(StrEnum):
    """Why a workload cannot be migrated (each comes with a detail message)."""

    INVALID_OBJECT = "InvalidObject"
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
    replaced: str | None = None
    """The KEP networks annotation the workload already had and `after` extends: only the
    `default` PodNetwork alone (what auto-population writes on every new pod), else None.
    The rollback puts it back."""

    def new_annotations(self) -> dict[str, str]:
        out = {k: v for k, v in self.workload.annotations.items() if k != NPWG_NETWORKS_ANNOTATION}
        out[constants.NETWORKS_ANNOTATION] = self.after
        return out


@dataclass
class Plan:
    networks: list[PlannedObject] = field(default_factory=list)
    options: list[PlannedObject] = field(default_factory=list)
    attachments: list[PlannedObject] = field(default_factory=list)
    workloads: list[WorkloadChange] = field(default_factory=list)
    unmigratable: list[Finding] = field(default_factory=list)
    """Workloads left as they are, each with its `Reason`."""
    skipped: list[Finding] = field(default_factory=list)
    """Workloads not touched on purpose (not an error), and why."""

    def objects(self, action: Action | None = Action.CREATE) -> list[PlannedObject]:
        """Objects in apply order: networks, then options, then attachments."""
        every = [*self.networks, *self.options, *self.attachments]
        return [p for p in every if action is None or p.action == action]

    @property
    def empty(self) -> bool:
        """True when applying would change nothing."""
        return not self.objects() and not self.workloads


class _CannotMigrate(Exception):
    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class _Scopes:
    """The names handed out so far: PodNetworks cluster-wide, attachments and options per namespace."""

    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory
        self.podnetworks = Names(inventory.existing(constants.PODNETWORK_KIND))
        self._namespaced: dict[tuple[str, str], Names] = {}

    def names(self, kind: str, namespace: str) -> Names:
        key = (kind, namespace)
        if key not in self._namespaced:
            self._namespaced[key] = Names(self._inventory.existing(kind, namespace))
        return self._namespaced[key]

    def of(self, namespace: str) -> list[Names]:
        """Every scope a workload of `namespace` claims names in."""
        return [
            self.podnetworks,
            self.names(constants.ATTACHMENT_KIND, namespace),
            self.names(OPTIONS_KIND, namespace),
        ]


written_by_bridge = translate.written_by_bridge


def _skip_reason(wl: Workload) -> str | None:
    """Why a workload with the NPWG annotation is left to something else, or None."""
    if wl.owner is not None:
        return f"managed by {excerpts.cut(str(wl.owner))}: migrate that instead"
    if wl.finished:
        return "finished pod: nothing will attach it again"
    return None


def _keep(result: Plan, scratch: Plan, planned: dict[tuple[str, str, str], PlannedObject]) -> None:
    """Move a workload's objects into the plan, each object once."""
    for into, staged in (
        (result.networks, scratch.networks),
        (result.options, scratch.options),
        (result.attachments, scratch.attachments),
    ):
        for p in staged:
            meta = p.obj["metadata"]
            key = (p.obj["kind"], meta.get("namespace", ""), meta["name"])
            if key not in planned:
                planned[key] = PlannedObject(p.action, p.obj)
                into.append(planned[key])


def plan(inventory: Inventory) -> Plan:
    """Plan the migration of every workload in `inventory`. Pure and deterministic."""
    result = Plan()
    scopes = _Scopes(inventory)
    planned: dict[tuple[str, str, str], PlannedObject] = {}
    # In a stable order whatever order the inputs came in; unreadable workloads among the others.
    items: list[Workload | InvalidWorkload] = [*inventory.workloads, *inventory.invalid]
    for wl in sorted(items, key=lambda w: (w.ref.namespace, w.ref.kind, w.ref.name)):
        if isinstance(wl, InvalidWorkload):
            result.unmigratable.append(Finding(wl.ref, wl.message, Reason.INVALID_OBJECT, wl.source))
            continue
        text = wl.annotations.get(NPWG_NETWORKS_ANNOTATION)
        if text is None or written_by_bridge(wl.annotations):
            continue
        if (why := _skip_reason(wl)) is not None:
            result.skipped.append(Finding(wl.ref, why, source=wl.source))
            continue
        # Stage into a scratch plan so a workload that fails half-way claims no names.
        touched = scopes.of(wl.namespace)
        for names in touched:
            names.begin()
        scratch = Plan()
        try:
            change = _plan_workload(wl, text, inventory, scopes, scratch)
        except _CannotMigrate as exc:
            for names in touched:
                names.undo()
            result.unmigratable.append(Finding(wl.ref, exc.message, exc.reason, wl.source))
            continue
        _keep(result, scratch, planned)
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


def _nad_problem(obj: dict[str, Any]) -> str | None:
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


def _check_workload(wl: Workload) -> None:
    """What stops a workload before its selection is read."""
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


def _elements(wl: Workload, text: str) -> list[npwg.NetworkSelectionElement]:
    """The workload's selection, parsed; each interface name asked for once."""
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
    return elements


@dataclass
class _Element:
    """One selection element of a workload being planned, and what its plan needs."""

    wl: Workload
    index: int
    element: npwg.NetworkSelectionElement
    inventory: Inventory
    scopes: _Scopes
    scratch: Plan


def _podnetwork_for(e: _Element, uses: Counter[tuple[str, str]]) -> str:
    """The PodNetwork of the element's NAD (the k-th use of that NAD in the pod gets the k-th)."""
    nad_ns = e.element.namespace or e.wl.namespace
    nad = (nad_ns, e.element.name)
    nad_ref = f"{excerpts.cut(nad_ns)}/{excerpts.cut(e.element.name)}"
    if nad not in e.inventory.nads:
        raise _CannotMigrate(
            Reason.MISSING_NAD,
            f"element {e.index} selects NetworkAttachmentDefinition {nad_ref}, "
            "which does not exist; create it or fix the annotation",
        )
    if problem := _nad_problem(e.inventory.nads[nad]):
        raise _CannotMigrate(
            Reason.INVALID_NAD,
            f"element {e.index} selects NetworkAttachmentDefinition {nad_ref}, "
            f"whose configuration cannot be used: {excerpts.cut(problem, excerpts.LINE_LIMIT)}",
        )
    uses[nad] += 1
    origin = origin_nad(nad_ns, e.element.name, uses[nad])
    claimed = e.scopes.podnetworks.claim(
        network_name(nad_ns, e.element.name, uses[nad]),
        origin,
        functools.partial(podnetwork_object, nad_namespace=nad_ns, nad_name=e.element.name, origin=origin),
    )
    if claimed is None:
        raise _CannotMigrate(
            Reason.INVALID_NAME,
            f"no valid, free PodNetwork name for NetworkAttachmentDefinition {nad_ref}",
        )
    pn, action = claimed
    e.scratch.networks.append(PlannedObject(action, podnetwork_object(pn, nad_ns, e.element.name, origin)))
    return pn


def _attachment_for(e: _Element, pn: str, keys: dict[str, Any]) -> str:
    """The PodNetworkAttachment (and its NetworkSelectionOptions) that carry the element's per-pod keys."""
    wl, index = e.wl, e.index
    origin = origin_element(wl, index)
    natural = attachment_name(str(wl.kind), wl.name, index)
    opt = e.scopes.names(OPTIONS_KIND, wl.namespace).claim(
        natural, origin,
        functools.partial(options_object, namespace=wl.namespace, keys=keys, origin=origin),
    )
    if opt is None:
        raise _CannotMigrate(Reason.INVALID_NAME, f"no valid, free {OPTIONS_KIND} name for element {index}")
    opt_name, opt_action = opt
    pna = e.scopes.names(constants.ATTACHMENT_KIND, wl.namespace).claim(
        natural,
        origin,
        functools.partial(attachment_object, namespace=wl.namespace, podnetwork=pn,
                          options_name=opt_name, origin=origin),
    )
    if pna is None:
        raise _CannotMigrate(
            Reason.INVALID_NAME, f"no valid, free {constants.ATTACHMENT_KIND} name for element {index}"
        )
    pna_name, pna_action = pna
    e.scratch.options.append(PlannedObject(opt_action, options_object(opt_name, wl.namespace, keys, origin)))
    e.scratch.attachments.append(
        PlannedObject(pna_action, attachment_object(pna_name, wl.namespace, pn, opt_name, origin))
    )
    return pna_name


def _entry_for(e: _Element, uses: Counter[tuple[str, str]]) -> Network:
    """The KEP networks entry of one selection element, with the objects it needs staged."""
    pn = _podnetwork_for(e, uses)
    keys = per_pod_keys(e.element)
    unsupported = sorted(set(keys) - set(translate.OPTIONS_KEYS))
    if unsupported:
        raise _CannotMigrate(
            Reason.UNSUPPORTED_KEY,
            f"element {e.index} has key(s) {excerpts.value(unsupported)}, "
            f"which a {OPTIONS_KIND} cannot carry "
            f"(it holds {', '.join(translate.OPTIONS_KEYS)})",
        )
    if not keys:
        return Network(pod_network_name=pn, interface_name=e.element.interface)
    pna = _attachment_for(e, pn, keys)
    gw4, gw6 = _gateway_flags(e.element.default_route)
    return Network(
        pod_network_attachment_name=pna,
        interface_name=e.element.interface,
        is_default_gw4=gw4,
        is_default_gw6=gw6,
    )


def _plan_workload(
    wl: Workload, text: str, inventory: Inventory, scopes: _Scopes, scratch: Plan
) -> WorkloadChange:
    _check_workload(wl)
    elements = _elements(wl, text)
    entries: list[Network] = [Network(pod_network_name=constants.DEFAULT_PODNETWORK)]
    uses: Counter[tuple[str, str]] = Counter()
    for index, element in enumerate(elements):
        entries.append(_entry_for(_Element(wl, index, element, inventory, scopes, scratch), uses))
    _check_round_trip(wl, elements, entries, inventory, scratch)
    errors = validation.validate_networks(entries)
    if errors:
        raise _CannotMigrate(Reason.INVALID_RESULT, "; ".join(str(e) for e in errors))
    after = kep_networks.format(entries)
    existing = wl.annotations.get(constants.NETWORKS_ANNOTATION)
    if existing is not None and existing != after and not _default_alone(existing):
        raise _CannotMigrate(
            Reason.ALREADY_HAS_NETWORKS,
            f"also has {constants.NETWORKS_ANNOTATION}={excerpts.cut(existing)}; "
            "keep one of the two annotations",
        )
    return WorkloadChange(
        workload=wl, before=text, after=after, networks=entries, notes=npwg.ignored_key_warnings(elements),
        replaced=existing if existing is not None and existing != after else None,
    )


def _default_alone(text: str) -> bool:
    """Whether a KEP networks annotation names the `default` PodNetwork alone, as the controller's
    admission writes it on every new pod that names no networks (KEP "Auto-population"). Beside an
    NPWG selection it adds nothing: NPWG attaches the cluster default network first anyway (2.2),
    and the migrated list starts with it, so a live Pod is not left unmigratable by it."""
    try:
        return kep_networks.parse(text) == list(DEFAULT_NETWORKS)
    except InvalidObject:
        return False


__all__ = ["Plan", "Reason", "WorkloadChange", "plan", "written_by_bridge"]
