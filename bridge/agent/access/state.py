"""What the agent keeps for node access, and only that: the node's paths as it made them, in
`node-access.json` of its cache dir, so that a path is removed exactly as it was made even when its
NAD changed since. No decision and no network I/O (`decide` decides, `apply` makes).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STATE_FILE = "node-access.json"


@dataclass
class Made:
    """One node path as it was made (the state file's entry)."""

    path: dict[str, Any]
    """`Path.key()`, plus what a removal needs."""
    addresses: list[str]
    """The node's addresses (CIDR) on the path's interface."""
    api: bool
    reservation: dict[str, Any] | None = None
    """A sub-interface's IPAM reservation: `config` (the network's name, version, IPAM) and
    `container_id`, to release it with a DEL."""

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "addresses": self.addresses, "api": self.api,
                "reservation": self.reservation}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Made:
        return cls(dict(data["path"]), list(data["addresses"]), bool(data.get("api")),
                   data.get("reservation"))


def load(state_file: Path) -> dict[str, Made]:
    """PodNetwork -> its path as made; nothing when the file is missing or unreadable (said)."""
    try:
        data = json.loads(state_file.read_text())
        return {name: Made.from_json(entry) for name, entry in data.items()}
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.error("node access: %s is unreadable (%s); starting from nothing (what it named may be "
                  "left on the node: remove it by hand)", state_file, exc)
        return {}


def save(state_file: Path, made: Mapping[str, Made]) -> None:
    """Writes `made` whole (replacing the file at once); an agent that never made a path leaves no file."""
    if not made and not state_file.exists():
        return
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: v.to_json() for k, v in sorted(made.items())}, indent=1))
    os.replace(tmp, state_file)


__all__ = ["STATE_FILE", "Made", "load", "save"]
