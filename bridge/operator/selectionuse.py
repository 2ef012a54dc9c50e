"""The permission to use a PodNetwork, for a hand-written NPWG selection (`--enforce-use-permission`).

The PodNetwork controller refuses a pod naming, in `multinetwork.x-k8s.io/networks`, a
PodNetwork that neither its requester nor its ServiceAccount may `use` (KEP Phase II
requirement 16; `podnetwork.kep.usepermission`). A bridge PodNetwork is one
NetworkAttachmentDefinition, though, and Multus (or `podnetwork cni-agent`) attaches
whatever NAD `k8s.v1.cni.cncf.io/networks` names: a pod writing `nets/dataplane` there would
reach PodNetwork `dataplane` unchecked. The controller cannot see that (it knows nothing of
NPWG: .importlinter), so the bridge's validating webhook does:

- An entry of the selection needs `use` when its NAD backs a bridge PodNetwork (provider
  `multinetwork.x-k8s.io/npwg-bridge`, a parametersRef naming that NAD) other than `default`,
  unless the pod names one of those PodNetworks in its KEP annotation, directly or through a
  PodNetworkAttachment (resolved by the admission record `multinetwork.x-k8s.io/attachment-networks`,
  else by the bridge's memory): those the controller checked, and they are how the bridge's own
  selections (its mutating webhook's, its controller's PATCH) name their NADs.
- On CREATE every entry; on UPDATE (of the pod or of `pods/status`) the NADs the update adds;
  a Binding (`pods/binding`, whose annotations the API server copies onto the pod) every entry,
  asked of its sender only: it carries no pod, so no ServiceAccount and no KEP networks.
- A NAD that backs several PodNetworks needs `use` of any one of them (any would reach it
  through the KEP annotation).

The selection is read leniently (`references`): every (namespace, name) any reader could take
from it, in either format, whether or not the spec calls it valid. Multus reads more than
`bridge.npwg.parse_selection` accepts (JSON keys in any case, values the spec refuses), so a
strict read would leave it a way around; a reference no one would attach is only asked about.

Which PodNetworks back a NAD is read from the bridge's watch-fed memory only for the NADs of
the PodNetworks the pod names in its KEP annotation (its own selections); memory lags the API
(a PodNetwork created a moment ago; all of them while peering pauses the replica), so for any
other NAD (`unvouched`) `authorize` lists the PodNetworks once and decides over that listing
(`listed`): a permission check must not pass a pod because memory has not caught up.

`uses` is the pure decision; `authorize` asks through the `MayUse` and the `ListPodNetworks`
it is given and words the refusal with `podnetwork.kep.usepermission.use_refusal`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge import npwg, translate
from podnetwork.ground import constants
from podnetwork.ground.fielderrors import InvalidObject, forbidden
from podnetwork.kep import admissionreview, networks, usepermission
from podnetwork.kep.admissionreview import AdmissionRequest, InvalidPod
from podnetwork.kep.usepermission import MayUse, Subject, UseRequest

Key = tuple[str, str]
SELECTION = npwg.NETWORKS_ANNOTATION
SELECTION_FIELD = f"metadata.annotations[{SELECTION}]"
#: Multus's own annotation (not NPWG's): the NAD, `name` or `namespace/name`, that Multus takes
#: as the pod's cluster default network instead of its configured one. `podnetwork cni-agent`
#: ignores it; Multus attaches it, so it is checked as a selection of one entry.
MULTUS_DEFAULT_NETWORK = "v1.multus-cni.io/default-network"
#: The annotations whose NADs a pod is attached to, checked alike.
CHECKED = (SELECTION, MULTUS_DEFAULT_NETWORK)
_JSON_MARKS = "[{\""
#: `podnetworks()`: the PodNetworks the API holds now (a consistent LIST), read into their models
#: (`translate.Objects`, its PodNetworks and those that do not fit). Raises
#: `usepermission.UseUnavailable` when it cannot tell.
ListPodNetworks = Callable[[], Awaitable[translate.Objects]]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NadUse:
    """One entry of a selection that needs `use`: element `index` names `nad`, which backs the
    bridge PodNetworks `podnetworks` (sorted; `use` of any one suffices)."""

    index: int
    nad: Key
    podnetworks: tuple[str, ...]
    annotation: str = SELECTION
    """Where the pod names it: `SELECTION`, or `MULTUS_DEFAULT_NETWORK` (one entry, index 0)."""


# --- reading the selection, leniently -----------------------------------------------------


def _pairs_hook(pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return pairs  # every key as written, duplicates kept: Go's decoder takes the last, in any case


def _json_references(text: str, namespace: str) -> list[tuple[int, Key]]:
    try:
        data = json.loads(text, object_pairs_hook=_pairs_hook)
    except (ValueError, RecursionError):
        return []
    if isinstance(data, list) and data and isinstance(data[0], tuple):
        data = [data]  # one object, not a list: `{"name": ...}`
    if not isinstance(data, list):
        return []
    found: list[tuple[int, Key]] = []
    for index, element in enumerate(data):
        if not isinstance(element, list) or not all(isinstance(p, tuple) for p in element):
            continue
        names = [v for k, v in element if k.lower() == "name" and isinstance(v, str)]
        spaces = [v for k, v in element if k.lower() == "namespace" and isinstance(v, str) and v]
        for name in names:
            for space in spaces or [namespace]:
                found.append((index, (space.strip(), name.strip())))
    return found


def _comma_references(text: str, namespace: str) -> list[tuple[int, Key]]:
    found: list[tuple[int, Key]] = []
    for index, item in enumerate(text.split(",")):
        ref = item.strip().split("@", 1)[0]
        space, _, name = ref.rpartition("/")
        found.append((index, ((space.strip() or namespace), name.strip())))
    return found


def default_network_reference(text: Any, namespace: str) -> list[tuple[int, Key]]:
    """The NAD of Multus's `v1.multus-cni.io/default-network` (`name` or `namespace/name`), as a
    one-entry list, or none when it names nothing an object could be called. Never raises."""
    if not isinstance(text, str):
        return []
    space, _, name = text.strip().rpartition("/")
    key = ((space.strip() or namespace), name.strip())
    return [] if any(npwg.subdomain_problem(part) for part in key) else [(0, key)]


def references(text: str, namespace: str) -> list[tuple[int, Key]]:
    """(element index, (namespace, name)) of every NAD the selection `text` could name, for a pod
    in `namespace`: read as the JSON format (any key spelled `name`/`namespace` in any case,
    duplicates too, as Go's decoder in Multus matches them) and as the comma format
    (`ns/name@if`), both, whatever the text looks like; only what a Kubernetes object could be
    named. Never raises."""
    if not isinstance(text, str) or not text.strip():
        return []
    found = _json_references(text, namespace) if any(mark in text for mark in _JSON_MARKS) else []
    found += _comma_references(text, namespace)
    seen: set[tuple[int, Key]] = set()
    unique = []
    for ref in found:
        # What no object can be named (the comma reading of a JSON text) names no NAD.
        if any(npwg.subdomain_problem(part) for part in ref[1]):
            continue
        if ref not in seen:
            seen.add(ref)
            unique.append(ref)
    return unique


# --- what backs what ----------------------------------------------------------------------


def backing(objects: translate.Objects) -> dict[Key, tuple[str, ...]]:
    """NAD key -> the bridge PodNetworks whose parametersRefs name it (sorted). Every NAD
    reference with a namespace counts, valid PodNetwork or not, NAD there or not: a pod created
    before either is fixed would be attached once it is."""
    found: dict[Key, set[str]] = {}
    for name, podnetwork in objects.podnetworks.items():
        if not translate.is_bridge(podnetwork):
            continue
        for ref in podnetwork.spec.parameters_refs or []:
            if ref.group == npwg.NAD_GROUP and ref.kind in translate.NAD_KINDS and ref.namespace:
                found.setdefault((ref.namespace, ref.name), set()).add(name)
    return {key: tuple(sorted(names)) for key, names in found.items()}


def declared(annotations: Mapping[str, Any], namespace: str, objects: translate.Objects) -> set[str]:
    """The PodNetworks the pod names in its KEP annotation, directly or through an attachment
    (its PodNetwork as the admission record says, else as the bridge knows it). None of them
    when the annotation cannot be read: the controller refuses such a pod; nothing is exempt."""
    text = annotations.get(constants.NETWORKS_ANNOTATION)
    if not isinstance(text, str):
        return set()
    try:
        nets = networks.parse(text)
    except InvalidObject:
        return set()
    record: dict[str, str] = {}
    recorded = annotations.get(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    if isinstance(recorded, str):
        try:
            record = networks.parse_attachment_networks(recorded)
        except InvalidObject:
            record = {}
    names: set[str] = set()
    for net in nets:
        if net.pod_network_name:
            names.add(net.pod_network_name)
        elif net.pod_network_attachment_name:
            attachment = net.pod_network_attachment_name
            if attachment in record:
                names.add(record[attachment])
            elif (known := objects.attachments.get((namespace, attachment))) is not None:
                names.add(known.spec.pod_network_name)
    return names


# --- the decision -------------------------------------------------------------------------


def _annotations(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def is_binding(request: AdmissionRequest) -> bool:
    return (request.sub_resource == "binding" and request.kind.kind == "Binding"
            and not request.kind.group and request.operation == "CREATE")


def _added(request: AdmissionRequest) -> tuple[list[tuple[str, int, Key]], str]:
    """(annotation, element index, NAD) of every NAD the request adds to the pod's selections, each
    NAD once, at its first entry; and the pod's namespace. Nothing for a request the webhook
    does not judge."""
    binding = is_binding(request)
    if not binding and (not request.is_pod or request.operation not in ("CREATE", "UPDATE")
                        or request.sub_resource not in ("", "status")):
        return [], ""
    new = _annotations(request.object)
    namespace = request.namespace or str(_annotations_namespace(request.object))
    if not any(isinstance(new.get(a), str) for a in CHECKED):
        return [], namespace
    old = _annotations(request.old_object) if request.operation == "UPDATE" and request.old_object else {}
    added: list[tuple[str, int, Key]] = []
    seen: set[Key] = set()
    for annotation in CHECKED:
        read = references if annotation == SELECTION else default_network_reference
        text = new.get(annotation)
        if not isinstance(text, str):
            continue
        before = old.get(annotation)
        had = {key for _, key in read(before, namespace)} if isinstance(before, str) else set()
        for index, key in read(text, namespace):
            if key not in had and key not in seen:
                seen.add(key)
                added.append((annotation, index, key))
    return added, namespace


def _exempt(request: AdmissionRequest, namespace: str, objects: translate.Objects) -> set[str]:
    exempt = set() if is_binding(request) else declared(_annotations(request.object), namespace, objects)
    exempt.add(constants.DEFAULT_PODNETWORK)
    return exempt


def uses(request: AdmissionRequest, objects: translate.Objects) -> list[NadUse]:
    """The entries of the pod's NPWG selection that need `use` (module docstring), in order.
    Never raises: objects of the wrong shape are read as far as they go."""
    added, namespace = _added(request)
    backed = backing(objects) if added else {}
    if not backed:
        return []
    exempt = _exempt(request, namespace, objects)
    needed: list[NadUse] = []
    for annotation, index, key in added:
        podnetworks = backed.get(key)
        if podnetworks is not None and not exempt.intersection(podnetworks):
            needed.append(NadUse(index, key, podnetworks, annotation))
    return needed


def unvouched(request: AdmissionRequest, objects: translate.Objects) -> list[Key]:
    """The NADs the request adds whose decision `objects` (the bridge's watch-fed memory) cannot
    vouch for, in order: every one but those backing a PodNetwork the pod names in its KEP
    annotation. Memory lags the API (a PodNetwork created a moment ago; every PodNetwork, while
    peering pauses this replica and its watches are closed), so a NAD it knows no PodNetwork of
    might back one now, and one it knows might back another now (deleted and created again over
    the same NAD: parametersRefs are immutable): `authorize` confirms those with the API. The
    NADs of KEP-named PodNetworks are the bridge's own selections, exempt without a read (the
    module docstring; "Known limits" in docs/bridge.md). Never raises."""
    added, namespace = _added(request)
    if not added:
        return []
    backed = backing(objects)
    exempt = _exempt(request, namespace, objects)
    return [key for _, _, key in added if not exempt.intersection(backed.get(key, ()))]


def listed(objects: translate.Objects, api: translate.Objects) -> translate.Objects:
    """`objects` with its PodNetworks replaced by those the API listed (`api`): a consistent LIST
    is newer than anything the watches delivered, so a PodNetwork it lacks is gone. One the API
    listed that does not fit its model (`api.invalid`; a real API server validates them) keeps
    the body memory has of it. Attachments, NADs and options stay memory's: which PodNetworks
    back a NAD depends on the PodNetworks alone, and the NAD need not exist."""
    podnetworks = dict(api.podnetworks)
    for kind, _, name in api.invalid:
        if kind == constants.PODNETWORK_KIND and name not in podnetworks and name in objects.podnetworks:
            podnetworks[name] = objects.podnetworks[name]
    return translate.Objects(podnetworks, objects.attachments, objects.nads, objects.options, objects.invalid)


def _annotations_namespace(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    space = meta.get("namespace") if isinstance(meta, Mapping) else None
    return space if isinstance(space, str) else ""


# --- asking, and the answer ---------------------------------------------------------------


def _via(use: NadUse) -> str:
    namespace, name = use.nad
    via = f'named through NetworkAttachmentDefinition "{namespace}/{name}" in {use.annotation}'
    others = use.podnetworks[1:]
    if others:
        listed = ", ".join(f'"{p}"' for p in others)
        via += f"; it also backs PodNetwork {listed}, whose use would do as well"
    return via


def refusal(request: AdmissionRequest, use: NadUse, requester: Subject | None,
            account: Subject | None) -> dict[str, Any]:
    """403 Forbidden on the selection's entry, worded as the controller's refusal
    (`usepermission.use_refusal`) plus how the network was named."""
    field = (f"{SELECTION_FIELD}[{use.index}]" if use.annotation == SELECTION
             else f"metadata.annotations[{use.annotation}]")
    namespace = request.namespace
    if account is None:  # a Binding: no pod, so no ServiceAccount to ask
        name = admissionreview.name_of(request.object)
        who = requester.user if requester is not None else "(unknown)"
        return admissionreview.refused(request.uid, name, [forbidden(
            field,
            f'the user "{who}" may not use PodNetwork "{use.podnetworks[0]}" ({_via(use)}), and a '
            "Binding's annotations are copied onto the pod it binds: set the selection when the pod is "
            f'created or updated, or grant verb "{usepermission.USE_VERB}" on resource '
            f'"{usepermission.USE_RESOURCE}" with resourceName "{use.podnetworks[0]}" in namespace '
            f'"{namespace}" (docs/controller.md "Permission to use a PodNetwork")')], what="is forbidden",
            code=403)
    pod = request.pod()
    return usepermission.use_refusal(request.uid, pod, namespace or pod.namespace,
                                     UseRequest(use.index, use.podnetworks[0]), requester, account,
                                     field=field, via=_via(use))


async def authorize(request: AdmissionRequest, objects: translate.Objects, may_use: MayUse,
                    podnetworks: ListPodNetworks | None = None) -> dict[str, Any] | None:
    """The refusal of a pod whose NPWG selection reaches a PodNetwork that neither its requester
    nor its ServiceAccount may use, or None. `objects` is the bridge's memory; with
    `podnetworks`, a NAD it cannot vouch for (`unvouched`) is decided over the PodNetworks the
    API lists now (`listed`), read once per request. Raises `usepermission.UseUnavailable`."""
    if podnetworks is not None and (doubted := unvouched(request, objects)):
        logger.debug("listing PodNetworks for %s: memory cannot vouch for which back %s", _describe(request),
                     ", ".join(f"{ns}/{name}" for ns, name in doubted))
        objects = listed(objects, await podnetworks())
    needed = uses(request, objects)
    if not needed:
        return None
    requester = usepermission.requester(request.user_info) if request.user_info is not None else None
    account: Subject | None = None
    if is_binding(request):
        subjects = [requester] if requester is not None and requester.user else []
    else:
        try:
            pod = request.pod()
        except InvalidPod as exc:
            return admissionreview.refused(request.uid, exc.name, exc.errors)
        namespace = request.namespace or pod.namespace
        requester, account, subjects = usepermission.subjects_of(request, pod, namespace)
    namespace = request.namespace or _annotations_namespace(request.object)
    for use in needed:
        if not await _anyone_may_use_any(subjects, use.podnetworks, namespace, may_use):
            return refusal(request, use, requester, account)
    return None


def _describe(request: AdmissionRequest) -> str:
    name = admissionreview.name_of(request.object) or "(generated name)"
    what = "Binding" if is_binding(request) else "pod"
    return f"{request.operation} of {what} {request.namespace or '?'}/{name}"


async def _anyone_may_use_any(subjects: list[Subject], podnetworks: Iterable[str], namespace: str,
                              may_use: MayUse) -> bool:
    for podnetwork in podnetworks:
        if await usepermission.anyone_may_use(subjects, podnetwork, namespace, may_use):
            return True
    return False


__all__ = [
    "CHECKED",
    "MULTUS_DEFAULT_NETWORK",
    "SELECTION",
    "ListPodNetworks",
    "NadUse",
    "authorize",
    "backing",
    "declared",
    "default_network_reference",
    "is_binding",
    "listed",
    "references",
    "refusal",
    "unvouched",
    "uses",
]
