"""What PodNetworks and PodNetworkAttachments name in `parametersRefs`, resolved.

The only code of this project that reads `parametersRefs` (KEP-3698 "PodNetwork",
"PodNetworkAttachment"): the translation, ParamsReady, the bridge operator's
indexes and the CNI agent all ask this module.

- A PodNetwork whose provider is `multinetwork.x-k8s.io/npwg-bridge` names exactly
  one NetworkAttachmentDefinition (group `k8s.cni.cncf.io`, kind
  `network-attachment-definitions` as in the KEP's example, or `NetworkAttachmentDefinition`),
  with a namespace (a PodNetwork is cluster-scoped, a NAD is not).
- A PodNetworkAttachment may name one NAD (a per-pod override; the namespace
  defaults to the attachment's) and at most one `NetworkSelectionOptions` (group
  `bridge.multinetwork.x-k8s.io`), which gives the per-pod keys of the element.

Objects are plain dicts as the API server returns them (kopf bodies work too).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bridge import npwg
from podnetwork import constants

#: The bridge's own API group, for NetworkSelectionOptions.
OPTIONS_GROUP = f"bridge.{constants.GROUP}"
OPTIONS_VERSION = "v1alpha1"
OPTIONS_API_VERSION = f"{OPTIONS_GROUP}/{OPTIONS_VERSION}"
OPTIONS_KIND = "NetworkSelectionOptions"
OPTIONS_PLURAL = "networkselectionoptions"
OPTIONS_SINGULAR = "networkselectionoption"


#: Kind spellings accepted in parametersRefs (the KEP's example uses the plural resource name).
NAD_KINDS = frozenset({npwg.NAD_KIND, npwg.NAD_PLURAL, npwg.NAD_SINGULAR})
OPTIONS_KINDS = frozenset({OPTIONS_KIND, OPTIONS_PLURAL, OPTIONS_SINGULAR})

#: The keys a NetworkSelectionOptions `spec` may carry: the per-pod keys of a
#: selection element (4.1.2.1), plus `default-route` so explicit gateways survive
#: a migration from NPWG annotations.
OPTIONS_KEYS: tuple[str, ...] = (
    "ips",
    "mac",
    "cni-args",
    "portMappings",
    "bandwidth",
    "infiniband-guid",
    "ipam-claim-reference",
    "default-route",
)



class Reason(StrEnum):
    """Why a translation failed. The last three are also ParamsReady=False reasons."""

    PODNETWORK_NOT_FOUND = "PodNetworkNotFound"
    ATTACHMENT_NOT_FOUND = "PodNetworkAttachmentNotFound"
    NOT_BRIDGE_PROVIDER = "NotBridgeProvider"
    PARAMETERS_NOT_FOUND = "ParametersNotFound"
    INVALID_PARAMETERS = "InvalidParameters"
    UNSUPPORTED_PARAMETERS_KIND = "UnsupportedParametersKind"


class TranslationError(ValueError):
    """A pod's networks cannot be translated; `reason` says why, the message names the object."""

    def __init__(self, reason: Reason, message: str) -> None:
        self.reason = reason
        super().__init__(message)



Obj = Mapping[str, Any]
Key = tuple[str, str]



@dataclass(frozen=True)
class Objects:
    """The objects a translation may read, keyed the way pods reference them."""

    podnetworks: Mapping[str, Obj] = field(default_factory=dict)
    """PodNetwork by name (cluster-scoped)."""
    attachments: Mapping[Key, Obj] = field(default_factory=dict)
    """PodNetworkAttachment by (namespace, name)."""
    nads: Mapping[Key, Obj] = field(default_factory=dict)
    """NetworkAttachmentDefinition by (namespace, name)."""
    options: Mapping[Key, Obj] = field(default_factory=dict)
    """NetworkSelectionOptions by (namespace, name)."""

    @classmethod
    def from_objects(cls, objs: Iterable[Obj]) -> Objects:
        """Sort API objects by `kind`; other kinds are ignored."""
        pns: dict[str, Obj] = {}
        pnas: dict[Key, Obj] = {}
        nads: dict[Key, Obj] = {}
        opts: dict[Key, Obj] = {}
        for obj in objs:
            meta = obj.get("metadata") or {}
            name, ns = meta.get("name", ""), meta.get("namespace", "")
            kind = obj.get("kind")
            if kind == constants.PODNETWORK_KIND:
                pns[name] = obj
            elif kind == constants.ATTACHMENT_KIND:
                pnas[(ns, name)] = obj
            elif kind == npwg.NAD_KIND:
                nads[(ns, name)] = obj
            elif kind == OPTIONS_KIND:
                opts[(ns, name)] = obj
        return cls(pns, pnas, nads, opts)



# --- References ----------------------------------------------------------------------------


def spec_of(obj: Obj) -> Mapping[str, Any]:
    # Objects may come from files (podnetwork migrate): a non-object spec reads as empty.
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def meta_of(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def describe(kind: str, name: str, namespace: str | None = None) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _is_nad(ref: Mapping[str, Any]) -> bool:
    return ref.get("group") == npwg.NAD_GROUP and ref.get("kind") in NAD_KINDS


def _is_options(ref: Mapping[str, Any]) -> bool:
    return ref.get("group") == OPTIONS_GROUP and ref.get("kind") in OPTIONS_KINDS


def is_bridge(podnetwork: Obj) -> bool:
    """The PodNetwork is provided by this bridge."""
    return spec_of(podnetwork).get("provider") == constants.BRIDGE_PROVIDER


def nad_config_problem(nad: Obj) -> str | None:
    """Why a NAD's `spec.config` cannot be executed, or None (an absent config is fine, 3.2.4)."""
    if not isinstance(nad.get("spec") or {}, Mapping):
        return "spec must be an object (NPWG 3.1)"
    config = spec_of(nad).get("config")
    if config is None or (isinstance(config, str) and not config.strip()):
        return None
    if not isinstance(config, str):
        return "spec.config must be a string holding CNI JSON (NPWG 3.2)"
    try:
        npwg.load_cni_config(config, "spec.config")
    except npwg.DelegationError as exc:
        return str(exc)
    return None


def _resolve_nad(ref: Mapping[str, Any], namespace: str, owner: str) -> Key:
    name = ref.get("name") or ""
    if problem := npwg.name_problem(name):
        raise TranslationError(
            Reason.INVALID_PARAMETERS,
            f"{owner}: NetworkAttachmentDefinition name {name!r} {problem} (NPWG 3.3)",
        )
    return (namespace, name)


def _check_nad(key: Key, objects: Objects, owner: str) -> Obj:
    nad = objects.nads.get(key)
    what = describe(npwg.NAD_KIND, key[1], key[0])
    if nad is None:
        raise TranslationError(Reason.PARAMETERS_NOT_FOUND, f"{owner}: {what} does not exist")
    if problem := nad_config_problem(nad):
        raise TranslationError(Reason.INVALID_PARAMETERS, f"{owner}: {what}: {problem}")
    return nad


def podnetwork_nad(podnetwork: Obj, objects: Objects) -> tuple[Key, Obj]:
    """The one NAD of a bridge PodNetwork: its key and object. Raises `TranslationError`."""
    owner = describe(constants.PODNETWORK_KIND, meta_of(podnetwork).get("name", ""))
    refs = list(spec_of(podnetwork).get("parametersRefs") or [])
    for ref in refs:
        if not _is_nad(ref):
            raise TranslationError(
                Reason.UNSUPPORTED_PARAMETERS_KIND,
                f"{owner}: parametersRefs may only name {npwg.NAD_GROUP} network-attachment-definitions, "
                f"not {ref.get('group')}/{ref.get('kind')} {ref.get('name')!r}",
            )
    if len(refs) != 1:
        raise TranslationError(
            Reason.INVALID_PARAMETERS,
            f"{owner}: a PodNetwork with provider {constants.BRIDGE_PROVIDER} needs exactly one "
            f"NetworkAttachmentDefinition in parametersRefs, found {len(refs)}",
        )
    ref = refs[0]
    if not ref.get("namespace"):
        raise TranslationError(
            Reason.INVALID_PARAMETERS,
            f"{owner}: parametersRefs[0].namespace is required: a PodNetwork is cluster-scoped "
            "and a NetworkAttachmentDefinition is namespaced",
        )
    key = _resolve_nad(ref, ref["namespace"], owner)
    return key, _check_nad(key, objects, owner)


@dataclass(frozen=True)
class AttachmentParams:
    """What a PodNetworkAttachment's own parametersRefs resolve to."""

    nad: Key | None
    """The per-pod NAD override, or None (use the PodNetwork's)."""
    options: dict[str, Any]
    """The NetworkSelectionOptions spec (validated), or {}."""
    options_key: Key | None = None


def options_problem(spec: Mapping[str, Any]) -> str | None:
    """Why a NetworkSelectionOptions spec is invalid (per NPWG 4.1.2.1), or None."""
    if not isinstance(spec, Mapping):
        return "spec must be an object"
    unknown = sorted(set(spec) - set(OPTIONS_KEYS))
    if unknown:
        return f"spec has unknown key(s) {unknown}; known keys are {list(OPTIONS_KEYS)}"
    try:
        npwg.parse_selection(json.dumps([{"name": "options", **spec}]), "default")
    except npwg.InvalidSelection as exc:
        return f"spec.{exc.key}: {exc.detail} (NPWG multi-net spec {exc.section})"
    except (TypeError, ValueError) as exc:
        return f"spec is not JSON: {exc}"
    return None


def attachment_params(attachment: Obj, objects: Objects) -> AttachmentParams:
    """Resolve a PodNetworkAttachment's parametersRefs. Raises `TranslationError`."""
    meta = meta_of(attachment)
    namespace = meta.get("namespace") or ""
    owner = describe(constants.ATTACHMENT_KIND, meta.get("name", ""), namespace)
    nad_refs, option_refs = [], []
    for ref in spec_of(attachment).get("parametersRefs") or []:
        if _is_nad(ref):
            nad_refs.append(ref)
        elif _is_options(ref):
            option_refs.append(ref)
        else:
            raise TranslationError(
                Reason.UNSUPPORTED_PARAMETERS_KIND,
                f"{owner}: parametersRefs may name {npwg.NAD_GROUP} network-attachment-definitions "
                f"or {OPTIONS_GROUP} {OPTIONS_PLURAL}, not {ref.get('group')}/{ref.get('kind')} "
                f"{ref.get('name')!r}",
            )
    if len(nad_refs) > 1 or len(option_refs) > 1:
        raise TranslationError(
            Reason.INVALID_PARAMETERS,
            f"{owner}: parametersRefs may name at most one NetworkAttachmentDefinition and one "
            f"NetworkSelectionOptions, found {len(nad_refs)} and {len(option_refs)}",
        )
    nad_key = None
    if nad_refs:
        nad_key = _resolve_nad(nad_refs[0], nad_refs[0].get("namespace") or namespace, owner)
        _check_nad(nad_key, objects, owner)
    options: dict[str, Any] = {}
    options_key = None
    if option_refs:
        ref = option_refs[0]
        options_key = (ref.get("namespace") or namespace, ref.get("name") or "")
        what = describe(OPTIONS_KIND, options_key[1], options_key[0])
        found = objects.options.get(options_key)
        if found is None:
            raise TranslationError(Reason.PARAMETERS_NOT_FOUND, f"{owner}: {what} does not exist")
        spec = found.get("spec") or {}
        if problem := options_problem(spec):
            raise TranslationError(Reason.INVALID_PARAMETERS, f"{owner}: {what}: {problem}")
        options = dict(spec)
    return AttachmentParams(nad_key, options, options_key)



def references(obj: Mapping[str, Any]) -> tuple[set[Key], set[Key]]:
    """The (NAD keys, NetworkSelectionOptions keys) an object's parametersRefs name.

    For following changes: a NAD or options event re-evaluates the objects that
    name it. References without a namespace take the object's own (attachments);
    a PodNetwork's are recorded as written, so a missing namespace matches nothing.
    """
    meta = obj.get("metadata") or {}
    own_ns = meta.get("namespace") or ""
    nads: set[Key] = set()
    options: set[Key] = set()
    for ref in (obj.get("spec") or {}).get("parametersRefs") or []:
        if not isinstance(ref, Mapping):
            continue
        key = (ref.get("namespace") or own_ns, ref.get("name") or "")
        if ref.get("group") == npwg.NAD_GROUP and ref.get("kind") in NAD_KINDS:
            nads.add(key)
        elif ref.get("group") == OPTIONS_GROUP and ref.get("kind") in OPTIONS_KINDS:
            options.add(key)
    return nads, options


__all__ = [
    "NAD_KINDS",
    "OPTIONS_API_VERSION",
    "OPTIONS_GROUP",
    "OPTIONS_KEYS",
    "OPTIONS_KIND",
    "OPTIONS_KINDS",
    "OPTIONS_PLURAL",
    "OPTIONS_SINGULAR",
    "OPTIONS_VERSION",
    "AttachmentParams",
    "Key",
    "Obj",
    "Objects",
    "Reason",
    "TranslationError",
    "attachment_params",
    "describe",
    "is_bridge",
    "meta_of",
    "nad_config_problem",
    "options_problem",
    "podnetwork_nad",
    "references",
    "spec_of",
]
