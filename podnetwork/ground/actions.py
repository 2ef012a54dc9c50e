"""What an operator asks of the API server, as values: planners return them, appliers send them.

The operators decide in pure planners (`podnetwork.kep.plans`, `bridge.operator.plans`)
from what they know, and get back these values; `podnetwork.kube.writes.apply` sends
one with the operators' write policy, over any `podnetwork.kube.writes.Api` (the
operators' client, or the demo's store). Kinds are named as on the wire. A patch
carries the resourceVersion it was decided from when the decision read more than the
fields it writes (`decided_from`), so that a real API server refuses it (409) when the
object changed in between, and the next event decides again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Patch:
    """A patch of one object (`status`: of its status subresource)."""

    kind: str
    name: str
    namespace: str | None
    body: Mapping[str, Any]
    status: bool = False
    patch_type: str = "merge"
    """`merge` (RFC 7386) or `strategic` (Kubernetes' strategic merge, for core kinds)."""

    @property
    def decided_from(self) -> str | None:
        """The resourceVersion the patch requires (decided from), or None when it requires none."""
        meta = self.body.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        return str(version) if version else None

    @property
    def key(self) -> str:
        """`namespace/name`, or `name` for a cluster-scoped object."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True)
class Create:
    """The creation of one object; `body` names its kind."""

    body: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind") or "")


@dataclass(frozen=True)
class Delete:
    """The deletion of one object."""

    kind: str
    name: str
    namespace: str | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


__all__ = ["Create", "Delete", "Patch"]
