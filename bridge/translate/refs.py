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

The decisions read the models (`podnetwork.kep.api`, `npwg.NetworkAttachmentDefinition`,
`NetworkSelectionOptions`); `Objects.from_objects` and `read` are where API
objects (dicts, kopf bodies) become them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bridge import npwg
from podnetwork.ground import constants
from podnetwork.ground.constants import OPTIONS_API_VERSION as OPTIONS_API_VERSION
from podnetwork.ground.constants import OPTIONS_GROUP as OPTIONS_GROUP
from podnetwork.ground.constants import OPTIONS_KIND as OPTIONS_KIND
from podnetwork.ground.constants import OPTIONS_PLURAL as OPTIONS_PLURAL
from podnetwork.ground.constants import OPTIONS_VERSION as OPTIONS_VERSION
from podnetwork.ground.core import ObjectMeta, PartialObjectMetadata
from podnetwork.kep.api import ParametersRef, PodNetwork, PodNetworkAttachment

#: The singular of NetworkSelectionOptions, accepted as a kind in parametersRefs.
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
    """Why a translation failed. PARAMETERS_NOT_FOUND, INVALID_PARAMETERS and
    UNSUPPORTED_PARAMETERS_KIND are also ParamsReady=False reasons."""

    PODNETWORK_NOT_FOUND = "PodNetworkNotFound"
    ATTACHMENT_NOT_FOUND = "PodNetworkAttachmentNotFound"
    NOT_BRIDGE_PROVIDER = "NotBridgeProvider"
    PARAMETERS_NOT_FOUND = "ParametersNotFound"
    INVALID_PARAMETERS = "InvalidParameters"
    UNSUPPORTED_PARAMETERS_KIND = "UnsupportedParametersKind"
    ATTACHMENT_CHANGED = "PodNetworkAttachmentChanged"
    """An attachment names another PodNetwork than the one admission recorded for the pod."""
    INVALID_RECORD = "InvalidAdmissionRecord"
    """The pod's admission record (`multinetwork.x-k8s.io/attachment-networks`) cannot be read."""


class TranslationError(ValueError):
    """A pod's networks cannot be translated; `reason` says why, the message names the object."""

    def __init__(self, reason: Reason, message: str) -> None:
        self.reason = reason
        super().__init__(message)



Obj = Mapping[str, Any]
Key = tuple[str, str]
InvalidKey = tuple[str, str, str]
"""(kind, namespace, name) of an object that does not fit its model."""


class NetworkSelectionOptions(BaseModel):
    """The bridge's NetworkSelectionOptions: the per-pod keys of one selection element.

    `spec` stays a mapping on purpose: it *is* the per-pod part of an NPWG
    selection element (4.1.2.1), which `npwg.parse_selection` validates with
    messages naming the spec's section; a second schema here would only drift
    from it. The view checks the shape (an object); `problem` says whether the
    keys are valid, once, when the view is built.
    """

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    api_version: str = Field(OPTIONS_API_VERSION, alias="apiVersion")
    kind: str = OPTIONS_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: dict[str, Any] = Field(default_factory=dict)

    @property
    def problem(self) -> str | None:
        """Why the spec is not a valid set of per-pod keys, or None."""
        return options_problem(self.spec)


#: What `Objects` holds, and what `Objects.from_objects` accepts already read.
Typed = PodNetwork | PodNetworkAttachment | npwg.NetworkAttachmentDefinition | NetworkSelectionOptions


def field_errors(exc: ValidationError) -> str:
    """A pydantic error on one line: `spec.config: Input should be a valid string; ...`."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(object)'}: {err['msg']}" for err in exc.errors()
    )


@dataclass(frozen=True)
class Objects:
    """The objects a translation may read, keyed the way pods reference them, read into their models."""

    podnetworks: Mapping[str, PodNetwork] = field(default_factory=dict)
    """PodNetwork by name (cluster-scoped)."""
    attachments: Mapping[Key, PodNetworkAttachment] = field(default_factory=dict)
    """PodNetworkAttachment by (namespace, name)."""
    nads: Mapping[Key, npwg.NetworkAttachmentDefinition] = field(default_factory=dict)
    """NetworkAttachmentDefinition by (namespace, name)."""
    options: Mapping[Key, NetworkSelectionOptions] = field(default_factory=dict)
    """NetworkSelectionOptions by (namespace, name)."""
    invalid: Mapping[InvalidKey, str] = field(default_factory=dict)
    """Objects that do not fit their model, by (kind, namespace, name): the fields that do not fit.
    A reference to one fails with InvalidParameters naming them, not with "does not exist"."""

    @classmethod
    def from_objects(cls, objs: Iterable[Obj | Typed]) -> Objects:
        """Sort objects by `kind`, reading API objects (mappings) into their models.

        The edge of the translation: an object that does not fit is kept in
        `invalid`; one whose metadata cannot be read, and other kinds, are ignored.
        """
        pns: dict[str, PodNetwork] = {}
        pnas: dict[Key, PodNetworkAttachment] = {}
        nads: dict[Key, npwg.NetworkAttachmentDefinition] = {}
        opts: dict[Key, NetworkSelectionOptions] = {}
        invalid: dict[InvalidKey, str] = {}
        for obj in objs:
            typed = obj if isinstance(obj, BaseModel) else _read(obj, invalid)
            if isinstance(typed, PodNetwork):
                pns[typed.metadata.name or ""] = typed
            elif isinstance(typed, PodNetworkAttachment):
                pnas[_key(typed)] = typed
            elif isinstance(typed, npwg.NetworkAttachmentDefinition):
                nads[_key(typed)] = typed
            elif isinstance(typed, NetworkSelectionOptions):
                opts[_key(typed)] = typed
        return cls(pns, pnas, nads, opts, invalid)

    @classmethod
    def from_keyed(
        cls,
        podnetworks: Mapping[str, Obj] | None = None,
        attachments: Mapping[Key, Obj] | None = None,
        nads: Mapping[Key, Obj] | None = None,
        options: Mapping[Key, Obj] | None = None,
    ) -> Objects:
        """Like `from_objects`, for API objects already keyed by the caller (a manifest's
        objects without namespace take the one given on the command line): the keys are kept."""
        invalid: dict[InvalidKey, str] = {}

        def read_all(kind: str, objs: Mapping[Any, Obj] | None) -> dict[Any, Any]:
            out: dict[Any, Any] = {}
            for key, obj in (objs or {}).items():
                try:
                    out[key] = _READERS[kind](obj)
                except ValidationError as exc:
                    ns, name = ("", key) if kind == constants.PODNETWORK_KIND else key
                    invalid[(kind, ns, name)] = field_errors(exc)
            return out

        return cls(
            read_all(constants.PODNETWORK_KIND, podnetworks),
            read_all(constants.ATTACHMENT_KIND, attachments),
            read_all(npwg.NAD_KIND, nads),
            read_all(OPTIONS_KIND, options),
            invalid,
        )

    def problem(self, kind: str, namespace: str, name: str) -> str | None:
        """Why the object named does not fit its model, or None (it fits, or does not exist)."""
        return self.invalid.get((kind, namespace, name))


_READERS: dict[str, Any] = {
    constants.PODNETWORK_KIND: PodNetwork.model_validate,
    constants.ATTACHMENT_KIND: PodNetworkAttachment.model_validate,
    npwg.NAD_KIND: npwg.NetworkAttachmentDefinition.model_validate,
    OPTIONS_KIND: NetworkSelectionOptions.model_validate,
}


def read(obj: Obj) -> Typed:
    """An API object of one of the four kinds the translation reads, into its model.

    Raises `ValueError` (a `pydantic.ValidationError` naming the fields) when it
    does not fit, or for another kind.
    """
    reader = _READERS.get(obj.get("kind") or "")
    if reader is None:
        raise ValueError(f"expected one of {sorted(_READERS)}, not kind {obj.get('kind')!r}")
    typed: Typed = reader(obj)
    return typed


def _read(obj: Obj, invalid: dict[InvalidKey, str]) -> Typed | None:
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in _READERS:
        return None
    try:
        return read(obj)
    except ValidationError as exc:
        try:
            meta = PartialObjectMetadata.model_validate(obj).metadata
        except ValidationError:
            return None
        namespace = "" if kind == constants.PODNETWORK_KIND else meta.namespace or ""
        invalid[(kind, namespace, meta.name or "")] = field_errors(exc)
        return None


def _key(obj: Typed) -> Key:
    return (obj.metadata.namespace or "", obj.metadata.name or "")


# --- References ----------------------------------------------------------------------------


def describe(kind: str, name: str, namespace: str | None = None) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _is_nad(ref: ParametersRef) -> bool:
    return ref.group == npwg.NAD_GROUP and ref.kind in NAD_KINDS


def _is_options(ref: ParametersRef) -> bool:
    return ref.group == OPTIONS_GROUP and ref.kind in OPTIONS_KINDS


def is_bridge(podnetwork: PodNetwork) -> bool:
    """The PodNetwork is provided by this bridge."""
    return podnetwork.spec.provider == constants.BRIDGE_PROVIDER


def nad_config_problem(nad: npwg.NetworkAttachmentDefinition) -> str | None:
    """Why a NAD's `spec.config` cannot be executed, or None (an absent config is fine, 3.2.4)."""
    config = nad.spec.config
    if config is None or not config.strip():
        return None
    try:
        npwg.load_cni_config(config, "spec.config")
    except npwg.DelegationError as exc:
        return str(exc)
    return None


def _resolve_nad(ref: ParametersRef, namespace: str, owner: str) -> Key:
    name = ref.name
    if problem := npwg.name_problem(name):
        raise TranslationError(
            Reason.INVALID_PARAMETERS,
            f"{owner}: NetworkAttachmentDefinition name {name!r} {problem} (NPWG 3.3)",
        )
    return (namespace, name)


def _unfit(kind: str, key: Key, objects: Objects, owner: str) -> TranslationError:
    """The error for a referenced object that is missing, or there but not fitting its model."""
    what = describe(kind, key[1], key[0])
    if problem := objects.problem(kind, *key):
        return TranslationError(
            Reason.INVALID_PARAMETERS, f"{owner}: {what} does not fit the {kind} schema: {problem}"
        )
    return TranslationError(Reason.PARAMETERS_NOT_FOUND, f"{owner}: {what} does not exist")


def _check_nad(key: Key, objects: Objects, owner: str) -> npwg.NetworkAttachmentDefinition:
    nad = objects.nads.get(key)
    if nad is None:
        raise _unfit(npwg.NAD_KIND, key, objects, owner)
    if problem := nad_config_problem(nad):
        what = describe(npwg.NAD_KIND, key[1], key[0])
        raise TranslationError(Reason.INVALID_PARAMETERS, f"{owner}: {what}: {problem}")
    return nad


def _ref_text(ref: ParametersRef) -> str:
    return f"{ref.group}/{ref.kind} {ref.name!r}"


def podnetwork_nad(
    podnetwork: PodNetwork, objects: Objects
) -> tuple[Key, npwg.NetworkAttachmentDefinition]:
    """The one NAD of a bridge PodNetwork: its key and view. Raises `TranslationError`."""
    owner = describe(constants.PODNETWORK_KIND, podnetwork.metadata.name or "")
    refs = podnetwork.spec.parameters_refs or []
    for ref in refs:
        if not _is_nad(ref):
            raise TranslationError(
                Reason.UNSUPPORTED_PARAMETERS_KIND,
                f"{owner}: parametersRefs may only name {npwg.NAD_GROUP} network-attachment-definitions, "
                f"not {_ref_text(ref)}",
            )
    if len(refs) != 1:
        raise TranslationError(
            Reason.INVALID_PARAMETERS,
            f"{owner}: a PodNetwork with provider {constants.BRIDGE_PROVIDER} needs exactly one "
            f"NetworkAttachmentDefinition in parametersRefs, found {len(refs)}",
        )
    ref = refs[0]
    if not ref.namespace:
        raise TranslationError(
            Reason.INVALID_PARAMETERS,
            f"{owner}: parametersRefs[0].namespace is required: a PodNetwork is cluster-scoped "
            "and a NetworkAttachmentDefinition is namespaced",
        )
    key = _resolve_nad(ref, ref.namespace, owner)
    return key, _check_nad(key, objects, owner)


@dataclass(frozen=True)
class AttachmentParams:
    """What a PodNetworkAttachment's own parametersRefs resolve to."""

    nad: Key | None
    """The per-pod NAD override, or None (use the PodNetwork's)."""
    options: dict[str, Any]
    """The NetworkSelectionOptions spec (validated), or {}."""
    options_key: Key | None = None


def options_problem(spec: Any) -> str | None:
    """Why a NetworkSelectionOptions spec is invalid (per NPWG 4.1.2.1), or None.

    Takes the spec as written (a manifest's, `podnetwork migrate`'s), so anything.
    """
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


def attachment_params(attachment: PodNetworkAttachment, objects: Objects) -> AttachmentParams:
    """Resolve a PodNetworkAttachment's parametersRefs. Raises `TranslationError`."""
    namespace = attachment.metadata.namespace or ""
    owner = describe(constants.ATTACHMENT_KIND, attachment.metadata.name or "", namespace)
    nad_refs: list[ParametersRef] = []
    option_refs: list[ParametersRef] = []
    for ref in attachment.spec.parameters_refs or []:
        if _is_nad(ref):
            nad_refs.append(ref)
        elif _is_options(ref):
            option_refs.append(ref)
        else:
            raise TranslationError(
                Reason.UNSUPPORTED_PARAMETERS_KIND,
                f"{owner}: parametersRefs may name {npwg.NAD_GROUP} network-attachment-definitions "
                f"or {OPTIONS_GROUP} {OPTIONS_PLURAL}, not {_ref_text(ref)}",
            )
    if len(nad_refs) > 1 or len(option_refs) > 1:
        raise TranslationError(
            Reason.INVALID_PARAMETERS,
            f"{owner}: parametersRefs may name at most one NetworkAttachmentDefinition and one "
            f"NetworkSelectionOptions, found {len(nad_refs)} and {len(option_refs)}",
        )
    nad_key = None
    if nad_refs:
        nad_key = _resolve_nad(nad_refs[0], nad_refs[0].namespace or namespace, owner)
        _check_nad(nad_key, objects, owner)
    options: dict[str, Any] = {}
    options_key = None
    if option_refs:
        ref = option_refs[0]
        options_key = (ref.namespace or namespace, ref.name)
        found = objects.options.get(options_key)
        if found is None:
            raise _unfit(OPTIONS_KIND, options_key, objects, owner)
        if problem := found.problem:
            what = describe(OPTIONS_KIND, options_key[1], options_key[0])
            raise TranslationError(Reason.INVALID_PARAMETERS, f"{owner}: {what}: {problem}")
        options = dict(found.spec)
    return AttachmentParams(nad_key, options, options_key)


def references(obj: PodNetwork | PodNetworkAttachment) -> tuple[set[Key], set[Key]]:
    """The (NAD keys, NetworkSelectionOptions keys) an object's parametersRefs name.

    For following changes: a NAD or options event re-evaluates the objects that
    name it. References without a namespace take the object's own (attachments);
    a PodNetwork's are recorded as written, so a missing namespace matches nothing.
    """
    own_ns = obj.metadata.namespace or ""
    nads: set[Key] = set()
    options: set[Key] = set()
    for ref in obj.spec.parameters_refs or []:
        key = (ref.namespace or own_ns, ref.name)
        if _is_nad(ref):
            nads.add(key)
        elif _is_options(ref):
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
    "InvalidKey",
    "Key",
    "NetworkSelectionOptions",
    "Obj",
    "Objects",
    "Reason",
    "TranslationError",
    "Typed",
    "attachment_params",
    "describe",
    "field_errors",
    "is_bridge",
    "nad_config_problem",
    "options_problem",
    "podnetwork_nad",
    "read",
    "references",
]
