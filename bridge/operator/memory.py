"""What the bridge holds in memory: the objects its translations read, and who references which NAD.

Fed by kopf's index handlers (`bridge.operator.controller.register`), which kopf runs for
every object before any event handler, and by the demo's store feed the same way; and
by the API's answers to the bridge's own writes. An older body never replaces a newer
one (a watch event queued behind the bridge's own write would undo it), and a body
that does not fit its model is ignored with a warning: the last good one stays.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pydantic

from bridge import npwg, translate
from bridge.operator.plans import Ref
from podnetwork.ground import constants
from podnetwork.ground import core as kube_core

# The bridge controller's logger: "ignored ..." lines keep the name they always had.
logger = logging.getLogger("bridge.operator.controller")

Key = tuple[str, str]


@dataclass
class Memory:
    """PodNetworks, attachments, NADs and options by key, and the reverse index of their references."""

    podnetworks: dict[str, translate.PodNetwork] = field(default_factory=dict)
    attachments: dict[Key, translate.PodNetworkAttachment] = field(default_factory=dict)
    nads: dict[Key, npwg.NetworkAttachmentDefinition] = field(default_factory=dict)
    options: dict[Key, translate.NetworkSelectionOptions] = field(default_factory=dict)
    nad_users: dict[Key, set[Ref]] = field(default_factory=dict)
    """NAD key -> the PodNetworks and attachments whose parametersRefs name it."""
    options_users: dict[Key, set[Ref]] = field(default_factory=dict)

    def objects(self) -> translate.Objects:
        # The memory holds only objects that fit their models (`_read`): nothing is invalid.
        return translate.Objects(self.podnetworks, self.attachments, self.nads, self.options)

    def _index_refs(
        self, ref: Ref, obj: translate.PodNetwork | translate.PodNetworkAttachment | None
    ) -> None:
        for users in (*self.nad_users.values(), *self.options_users.values()):
            users.discard(ref)
        if obj is None:
            return
        nad_keys, option_keys = translate.references(obj)
        for key in nad_keys:
            self.nad_users.setdefault(key, set()).add(ref)
        for key in option_keys:
            self.options_users.setdefault(key, set()).add(ref)

    def remember_podnetwork(self, body: Mapping[str, Any]) -> Ref | None:
        """Caches a PodNetwork body; None (logged) when it does not fit the model."""
        obj = _read(translate.PodNetwork, body)
        if obj is None:
            return None
        name = obj.metadata.name or ""
        obj = _newest(self.podnetworks.get(name), obj)
        self.podnetworks[name] = obj
        ref = (constants.PODNETWORK_KIND, "", name)
        self._index_refs(ref, obj)
        return ref

    def remember_attachment(self, body: Mapping[str, Any]) -> Ref | None:
        """Caches a PodNetworkAttachment body; None (logged) when it does not fit the model."""
        obj = _read(translate.PodNetworkAttachment, body)
        if obj is None:
            return None
        key = _key_of(obj)
        obj = _newest(self.attachments.get(key), obj)
        self.attachments[key] = obj
        ref = (constants.ATTACHMENT_KIND, *key)
        self._index_refs(ref, obj)
        return ref

    def remember_nad(self, body: Mapping[str, Any]) -> Key | None:
        obj = _read(npwg.NetworkAttachmentDefinition, body)
        if obj is None:
            return None
        key = _key_of(obj)
        self.nads[key] = _newest(self.nads.get(key), obj)
        return key

    def remember_options(self, body: Mapping[str, Any]) -> Key | None:
        obj = _read(translate.NetworkSelectionOptions, body)
        if obj is None:
            return None
        key = _key_of(obj)
        self.options[key] = _newest(self.options.get(key), obj)
        return key

    def forget(self, ref: Ref) -> None:
        kind, namespace, name = ref
        if kind == constants.PODNETWORK_KIND:
            self.podnetworks.pop(name, None)
        else:
            self.attachments.pop((namespace, name), None)
        self._index_refs(ref, None)

    def holds(self, kind: str, body: Mapping[str, Any]) -> bool:
        """Whether the memory holds this body of `kind`, or a newer one: false when the body did
        not fit its model (the index handler ignored it), so the event is ignored too."""
        key = key_of(body)
        cached: kube_core.HasMetadata | None
        if kind == constants.PODNETWORK_KIND:
            cached = self.podnetworks.get(key[1])
        elif kind == constants.ATTACHMENT_KIND:
            cached = self.attachments.get(key)
        elif kind == constants.NAD_KIND:
            cached = self.nads.get(key)
        else:
            cached = self.options.get(key)
        if cached is None:
            return False
        mine, theirs = cached.metadata.resource_version or "", _version(body)
        return mine == theirs or _older(theirs, mine)

    def attachments_of(self, podnetwork: str) -> set[Ref]:
        return {
            (constants.ATTACHMENT_KIND, ns, name)
            for (ns, name), pna in self.attachments.items()
            if pna.spec.pod_network_name == podnetwork
        }


_T = TypeVar("_T", bound=kube_core.HasMetadata)
_M = TypeVar("_M", bound=pydantic.BaseModel)


def _older(a: str, b: str) -> bool:
    """resourceVersion `a` is older than `b` (etcd's revision; opaque otherwise: neither is)."""
    return a.isdigit() and b.isdigit() and int(a) < int(b)


def _newest(cached: _T | None, obj: _T) -> _T:
    """The newer of a cached object and an incoming one (resourceVersion is etcd's revision)."""
    if cached is None:
        return obj
    newer = _older(obj.metadata.resource_version or "", cached.metadata.resource_version or "")
    return cached if newer else obj


def read(model: type[_M], body: Mapping[str, Any]) -> _M | None:
    """`body` read into its model or view; None (logged) when it does not fit.

    As `podnetwork.kep.controller` does: an API server serving the CRDs never sends
    one; a mismatched CRD or an emulator can. The last good object stays cached.
    """
    try:
        return model.model_validate(body)
    except pydantic.ValidationError as exc:
        logger.warning("ignored %s %s: it does not fit its model: %s", model.__name__, _show_key(body),
                       translate.field_errors(exc))
        return None


_read = read


def _key_of(obj: kube_core.HasMetadata) -> Key:
    return (obj.metadata.namespace or "", obj.metadata.name or "")


def _show_key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    return f"{meta.get('namespace') or ''}/{meta.get('name')}" if isinstance(meta, Mapping) else "?"


def _version(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def key_of(body: Mapping[str, Any]) -> Key:
    """(namespace, name) of a watched body (`("", "")` for one whose metadata does not parse,
    which the API server never sends)."""
    head = kube_core.head_of(body)
    meta = head.metadata if head is not None else kube_core.ObjectMeta()
    return (meta.namespace or "", meta.name or "")


__all__ = ["Key", "Memory", "key_of", "read"]
