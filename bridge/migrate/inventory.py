"""What the planner looks at: the workloads, the NADs, and the objects that already exist.

The edge of the planning: objects (from files or a cluster) are sorted by kind here,
and workloads read into the shared view (`podnetwork.ground.workloads`). A workload
that does not fit that view is kept with the fields at fault, and the plan reports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from bridge.migrate.objects import NAD_GROUP, NAD_KIND, OPTIONS_GROUP, OPTIONS_KIND
from podnetwork.ground import constants, workloads
from podnetwork.ground.workloads import InvalidWorkload, Workload


class _Spec(BaseModel):
    """An existing object of the kinds a migration creates, seen as its spec."""

    model_config = ConfigDict(extra="ignore")

    spec: dict[str, Any] | None = None


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The spec of an existing object (an empty one when it has none); None when it is not an object."""
    try:
        return _Spec.model_validate(obj).spec or {}
    except ValidationError:
        return None


def is_nad(obj: Mapping[str, Any]) -> bool:
    kind, group = workloads.type_meta(obj)
    return kind == NAD_KIND and group == NAD_GROUP


@dataclass
class Inventory:
    """Everything the planner looks at: workloads, NADs, and objects that already exist."""

    workloads: list[Workload] = field(default_factory=list)
    invalid: list[InvalidWorkload] = field(default_factory=list)
    """Objects of a workload kind that do not fit the workload view."""
    nads: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Every NetworkAttachmentDefinition known, by (namespace, name)."""
    podnetworks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Existing PodNetworks by name."""
    attachments: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Existing PodNetworkAttachments by (namespace, name)."""
    options: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Existing NetworkSelectionOptions by (namespace, name)."""
    specs: dict[tuple[str, str, str], dict[str, Any] | None] = field(default_factory=dict)
    """The spec of each existing PodNetwork, attachment and options, by (kind, namespace, name)
    (namespace empty for PodNetworks); None for one whose spec is not an object."""

    def add(self, obj: Mapping[str, Any], *, default_namespace: str = "default", source: str = "") -> None:
        """Sort one object into the inventory; other kinds are ignored."""
        kind, group = workloads.type_meta(obj)
        namespace, name = workloads.identity(obj, default_namespace)
        if kind == NAD_KIND and group == NAD_GROUP:
            self.nads[(namespace, name)] = dict(obj)
        elif group == constants.GROUP and kind == constants.PODNETWORK_KIND:
            self.podnetworks[name] = dict(obj)
            self.specs[(kind, "", name)] = _spec_of(obj)
        elif group == constants.GROUP and kind == constants.ATTACHMENT_KIND:
            self.attachments[(namespace, name)] = dict(obj)
            self.specs[(kind, namespace, name)] = _spec_of(obj)
        elif group == OPTIONS_GROUP and kind == OPTIONS_KIND:
            self.options[(namespace, name)] = dict(obj)
            self.specs[(kind, namespace, name)] = _spec_of(obj)
        else:
            try:
                wl = workloads.read(obj, default_namespace=default_namespace, source=source)
            except InvalidWorkload as exc:
                self.invalid.append(exc)
                return
            if wl is not None:
                self.workloads.append(wl)

    def existing(self, kind: str, namespace: str = "") -> dict[str, dict[str, Any] | None]:
        """The specs of the existing objects of `kind` in `namespace`, by name."""
        return {n: spec for (k, ns, n), spec in self.specs.items() if k == kind and ns == namespace}

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]], *, default_namespace: str = "default") -> Inventory:
        inv = cls()
        for obj in objects:
            inv.add(obj, default_namespace=default_namespace)
        return inv


__all__ = ["Inventory", "is_nad"]
