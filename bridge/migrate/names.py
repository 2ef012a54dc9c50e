"""Names of the objects a migration creates: natural when free, else cut and hashed.

Names are deterministic and collision-free: a name already taken by an object
with a different spec (in the cluster, the input files or the plan itself) is
replaced by a truncated name plus a hash of the object's origin; an object that
already exists with the same spec is reused, which makes a second run plan
nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from bridge.migrate.objects import Action
from podnetwork.ground import constants
from podnetwork.kep import validation

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


def _same_spec(have: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether an existing object's spec (None: one that is not an object) is the one wanted."""
    if have is None:
        return False
    spec = dict(have)
    # `enabled` defaults to true on the API server (KEP "Enabled").
    if wanted["kind"] == constants.PODNETWORK_KIND:
        spec.setdefault("enabled", True)
    return bool(spec == wanted["spec"])


class Names:
    """Hands out names of one kind in one scope: natural when free, else hashed."""

    def __init__(self, existing: Mapping[str, Mapping[str, Any] | None]) -> None:
        """`existing`: the spec of each object of this kind and scope that exists, by name
        (None for one whose spec is not an object)."""
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
                if _same_spec(self._planned[name]["spec"], wanted):
                    self._by_origin[key] = name
                    return name, Action.REUSE
                continue
            exists = name in self._existing
            if exists and not _same_spec(self._existing[name], wanted):
                continue
            self._planned[name] = wanted
            self._by_origin[key] = name
            self._journal.append((name, key))
            return name, (Action.REUSE if exists else Action.CREATE)
        return None


__all__ = ["Names", "attachment_name", "network_name"]
