"""What the agent attached, per container, on disk.

The agent writes an attachment's record (its effective configuration, interface
and runtime arguments) *before* executing its delegate ADD, and the result after.
So DEL needs neither the pod nor the NetworkAttachmentDefinition, and works after
the agent was killed half-way through an ADD: every attachment that may have left
something behind is in the record (NPWG spec 7.2: "all network attachments that
were attempted during pod network setup must be torn down").

Each write replaces the whole file atomically (write a temporary file in the same
directory, fsync, rename, fsync the directory), so a crash leaves either the old
or the new record, never a torn one. One file per container, mode 0600.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from bridge.cni import invoke

FORMAT_VERSION = 1


class State(StrEnum):
    INTENT = "intent"
    """The delegate ADD is about to run, or ran and its outcome was not recorded."""
    ATTACHED = "attached"
    """The delegate ADD succeeded; `result` holds its result."""
    FAILED = "failed"
    """The delegate ADD returned an error. CNI plugins undo their own partial work on a
    failed ADD, so the agent's DEL of it is a courtesy: its failure is not kept."""


@dataclass
class Attachment:
    """One delegate attachment: the [container ID, network name, CNI_IFNAME] tuple and how to undo it."""

    name: str
    """The network-status name: `namespace/nad` or the default network's name."""
    ifname: str
    config: dict[str, Any]
    """The effective CNI configuration (single or list) executed for this attachment."""
    default: bool = False
    runtime_config: dict[str, Any] | None = None
    default_route: list[str] | None = None
    state: State = State.INTENT
    result: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attachment:
        return cls(
            name=data["name"],
            ifname=data["ifname"],
            config=data["config"],
            default=bool(data.get("default", False)),
            runtime_config=data.get("runtime_config"),
            default_route=data.get("default_route"),
            state=State(data.get("state", State.INTENT)),
            result=data.get("result"),
        )


@dataclass
class Record:
    """Everything the agent knows about one container's attachments."""

    container_id: str
    netns: str
    ifname: str
    cni_args: list[list[str]] = field(default_factory=list)
    pod_namespace: str = ""
    pod_name: str = ""
    complete: bool = False
    """True once the whole ADD succeeded; `result` is what the runtime got."""
    result: dict[str, Any] | None = None
    attachments: list[Attachment] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["format"] = FORMAT_VERSION
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        return cls(
            container_id=data["container_id"],
            netns=data.get("netns", ""),
            ifname=data.get("ifname", ""),
            cni_args=[list(p) for p in data.get("cni_args", [])],
            pod_namespace=data.get("pod_namespace", ""),
            pod_name=data.get("pod_name", ""),
            complete=bool(data.get("complete", False)),
            result=data.get("result"),
            attachments=[Attachment.from_json(a) for a in data.get("attachments", [])],
        )


class CacheError(Exception):
    pass


class Cache:
    """The records of one agent, one JSON file per container in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def ensure(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def path(self, container_id: str) -> Path:
        # The ID is validated to a safe file name (no '/', not starting with '.').
        return self.directory / f"{invoke.check_container_id(container_id)}.json"

    def load(self, container_id: str) -> Record | None:
        path = self.path(container_id)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            return Record.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise CacheError(f"cache file {path} is unreadable: {exc}") from exc

    def save(self, record: Record) -> None:
        self.ensure()
        path = self.path(record.container_id)
        data = json.dumps(record.to_json(), indent=1, sort_keys=True).encode()
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self._sync_dir()

    def remove(self, container_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(container_id).unlink()
            self._sync_dir()

    def container_ids(self) -> Iterator[str]:
        if not self.directory.is_dir():
            return
        for p in sorted(self.directory.glob("*.json")):
            if not p.name.startswith("."):
                yield p.name[: -len(".json")]

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
