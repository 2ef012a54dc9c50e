"""The objects a migration writes: PodNetworks, NetworkSelectionOptions, PodNetworkAttachments.

Every object carries the migration's label (rollback selects by it) and, in an
annotation, JSON naming what it was made from (its origin): a NAD and the k-th use of
it in one pod, or the element of a workload's selection.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bridge import npwg, translate
from podnetwork.ground import constants
from podnetwork.ground.findings import ObjectRef
from podnetwork.ground.workloads import Workload

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

#: Keys of a selection element that the PodNetworkAttachment entry itself carries.
_ENTRY_KEYS = frozenset({"name", "namespace", "interface"})


class Action(StrEnum):
    CREATE = "create"
    REUSE = "reuse"


@dataclass
class PlannedObject:
    """A PodNetwork, PodNetworkAttachment or NetworkSelectionOptions the plan needs."""

    action: Action
    obj: dict[str, Any]
    """Built by this module: `metadata.name` always, `metadata.namespace` when namespaced."""

    @property
    def ref(self) -> ObjectRef:
        meta = self.obj["metadata"]
        return ObjectRef(str(self.obj["kind"]), str(meta.get("namespace", "")), str(meta["name"]))


def origin_nad(namespace: str, name: str, occurrence: int) -> dict[str, Any]:
    return {"kind": NAD_KIND, "namespace": namespace, "name": name, "occurrence": occurrence}


def origin_element(workload: Workload, index: int) -> dict[str, Any]:
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


def per_pod_keys(element: npwg.NetworkSelectionElement) -> dict[str, Any]:
    """The keys of a selection element that only a NetworkSelectionOptions can carry."""
    return {k: v for k, v in element.to_json().items() if k not in _ENTRY_KEYS}


__all__ = [
    "FIELD_MANAGER",
    "MIGRATED_BY_LABEL",
    "MULTUS_DEFAULT_NETWORK_ANNOTATION",
    "NAD_GROUP",
    "NAD_KIND",
    "NAD_PLURAL",
    "NPWG_NETWORKS_ANNOTATION",
    "OPTIONS_API_VERSION",
    "OPTIONS_GROUP",
    "OPTIONS_KIND",
    "OPTIONS_PLURAL",
    "OPTIONS_VERSION",
    "ORIGIN_ANNOTATION",
    "Action",
    "PlannedObject",
    "attachment_object",
    "nad_ref",
    "options_object",
    "origin_element",
    "origin_nad",
    "per_pod_keys",
    "podnetwork_object",
]
