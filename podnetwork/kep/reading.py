"""The controller's objects, read where they enter: into their model or view, or ignored with a warning.

The API server's schemas are the models', so only a mismatched CRD or a foreign
emulator can send what does not fit; the controller then keeps its last good copy
(`podnetwork.kep.controller`, `podnetwork.kep.missed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from podnetwork.ground.core import Node
from podnetwork.kep import api as models
from podnetwork.kep import plans
from podnetwork.kep.api import KepObject

# The controller's logger: these lines keep the name they always had.
logger = logging.getLogger("podnetwork.kep.controller")

_T = TypeVar("_T")


def read(model: Callable[[Mapping[str, Any]], _T], body: Mapping[str, Any], what: str) -> _T | None:
    """`body` read into its model or view; None (logged) when it does not fit."""
    try:
        return model(body)
    except ValueError as exc:  # pydantic.ValidationError, or models.parse's unknown kind
        logger.warning("ignored %s: it does not fit its model: %s", what, exc)
        return None


def read_kep(body: Mapping[str, Any], kind: str) -> KepObject | None:
    return read(lambda b: models.parse(b, kind), body, f"{kind} {show(body)}")


def show(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    return f"{meta.get('namespace') or ''}/{meta.get('name')}" if isinstance(meta, Mapping) else "?"


def key(body: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a watched object; "" for a part that is absent, as kopf's kwargs give."""
    meta = body.get("metadata")
    if not isinstance(meta, Mapping):
        return "", ""
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def older(body: Mapping[str, Any] | Node | KepObject, than: Node | KepObject) -> bool:
    """Whether `body` (as served, or read) is older than the cached `than` (`plans.older`)."""
    if isinstance(body, Mapping):
        meta = body.get("metadata")
        mine = str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
    else:
        mine = body.metadata.resource_version or ""
    return plans.older(mine, than.metadata.resource_version or "")


__all__ = ["key", "older", "read", "read_kep", "show"]
