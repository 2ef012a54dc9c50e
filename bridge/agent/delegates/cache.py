"""What the agent attached, per container, on disk.

The agent writes an attachment's record (its effective configuration, interface
and runtime arguments) *before* executing its delegate ADD, and the result after.
So DEL needs neither the pod nor the NetworkAttachmentDefinition, and works after
the agent was killed half-way through an ADD: every attachment that may have left
something behind is in the record (NPWG spec 7.2: "all network attachments that
were attempted during pod network setup must be torn down").

A record is a journal, one file per container (`<container ID>.jsonl`, mode 0600; IDs
are at most `invoke.CONTAINER_ID_MAX` characters so that the name fits 255 bytes):
each write appends the whole record as one JSON line with a single write(2), and
a read takes the last complete line. A killed agent therefore leaves either the
old or the new record, never a torn one (the page cache outlives the process,
and the kernel finishes a write(2) to a regular file before a SIGKILL lands).
Appending, rather than renaming a new file over the old one, matters for speed:
ext4 flushes data on every rename-over (auto_da_alloc), about 10 ms per write.
With `durable=True` each append is also fsync'd, so records survive a power loss
(a torn last line is then skipped); the agent does not need it by default: after
a node crash the pods' namespaces are gone, and host-local does not fsync its own
reservations either.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from bridge.agent.delegates import invoke

FORMAT_VERSION = 1
SUFFIX = ".jsonl"
#: Linux file systems' limit on one file name, in bytes; `invoke.CONTAINER_ID_MAX` keeps
#: `<ID>.jsonl` within it.
NAME_MAX = 255


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
    """The attachment on the runtime's interface (`plan.Planned.default`): the cluster default
    network, or the first network of an explicit list (`Record.explicit`)."""
    runtime_config: dict[str, Any] | None = None
    default_route: list[str] | None = None
    state: State = State.INTENT
    result: dict[str, Any] | None = None
    podnetwork: str | None = None
    """The PodNetwork it attaches (`selection.Selected.sources`); None for an NPWG selection and
    the cluster default network. What node access is decided by (`bridge.agent.access.apply`)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "podnetwork": self.podnetwork,
            "name": self.name,
            "ifname": self.ifname,
            "config": self.config,
            "default": self.default,
            "runtime_config": self.runtime_config,
            "default_route": self.default_route,
            "state": self.state.value,
            "result": self.result,
        }

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
            podnetwork=data.get("podnetwork") if isinstance(data.get("podnetwork"), str) else None,
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
    status_published: bool = True
    """False from the end of an ADD until its network-status is written (`bridge.agent.pods.publisher`):
    an agent that starts finds the writes its predecessor left pending. Records of agents
    that wrote the status before answering lack the key, and count as published."""
    pod_uid: str = ""
    """The pod's UID (the runtime's K8S_POD_UID, else the pod's as read at ADD): status writes
    land on that pod only, never on a pod re-created under the same name."""
    explicit: bool = False
    """The pod's KEP networks left out `default` (KEP-3698: the list is explicit): its first
    attachment is the first listed network, and no cluster default network was attached.
    Records of earlier agents lack the key: they always attached the default network."""
    claimed: bool = False
    """The networks came from the pod's ResourceClaims of the DRA driver (`bridge.agent.cni.claims`):
    the agent writes the pod's `multinetwork.x-k8s.io/pod-ips` with its network-status, since
    the bridge writes it only for pods whose annotation it translates."""

    def to_json(self) -> dict[str, Any]:
        # By hand rather than dataclasses.asdict: that deep-copies every config and result,
        # two thirds of the cost of a save, and the line is written at once (docs/benchmarks.md).
        return {
            "container_id": self.container_id,
            "netns": self.netns,
            "ifname": self.ifname,
            "cni_args": self.cni_args,
            "pod_namespace": self.pod_namespace,
            "pod_name": self.pod_name,
            "pod_uid": self.pod_uid,
            "complete": self.complete,
            "result": self.result,
            "attachments": [a.to_json() for a in self.attachments],
            "status_published": self.status_published,
            "explicit": self.explicit,
            "claimed": self.claimed,
            "format": FORMAT_VERSION,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        return cls(
            container_id=data["container_id"],
            netns=data.get("netns", ""),
            ifname=data.get("ifname", ""),
            cni_args=[list(p) for p in data.get("cni_args", [])],
            pod_namespace=data.get("pod_namespace", ""),
            pod_name=data.get("pod_name", ""),
            # Records of earlier agents lack it: the runtime's K8S_POD_UID, when it passed one.
            pod_uid=data.get("pod_uid") or _arg(data.get("cni_args", []), "K8S_POD_UID"),
            complete=bool(data.get("complete", False)),
            result=data.get("result"),
            attachments=[Attachment.from_json(a) for a in data.get("attachments", [])],
            status_published=bool(data.get("status_published", True)),
            explicit=bool(data.get("explicit", False)),
            claimed=bool(data.get("claimed", False)),
        )


def _arg(cni_args: Any, key: str) -> str:
    for pair in cni_args if isinstance(cni_args, list) else []:
        if isinstance(pair, list) and len(pair) == 2 and pair[0] == key:
            return str(pair[1])
    return ""


class CacheError(Exception):
    pass


class Cache:
    """The records of one agent, one JSON file per container in `directory`."""

    def __init__(self, directory: Path, *, durable: bool = False) -> None:
        self.directory = Path(directory)
        self.durable = durable

    def ensure(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def path(self, container_id: str) -> Path:
        # The ID is validated to a safe file name (no '/', not starting with '.').
        return self.directory / f"{invoke.check_container_id(container_id)}{SUFFIX}"

    def load(self, container_id: str) -> Record | None:
        path = self.path(container_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        problem = "it is empty"
        for line in reversed(data.splitlines()):
            try:
                return Record.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                problem = str(exc)  # a torn last line (power loss): the previous one stands
        raise CacheError(f"cache file {path} holds no readable record: {problem}")

    def save(self, record: Record) -> None:
        self.ensure()
        path = self.path(record.container_id)
        # Keys in the order given, not sorted: a repeated ADD answers the recorded result, and it
        # must be the very text the first ADD answered (the plugin's order; docs/agent.md).
        line = json.dumps(record.to_json(), separators=(",", ":")).encode() + b"\n"
        created = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise CacheError(f"short write to {path}: {written} of {len(line)} bytes")
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            self._sync_dir()

    def move_aside(self, container_id: str) -> Path:
        """Renames a container's unreadable record to `<file>.corrupt-<UTC time>`; the new path.

        The file is kept for a human to inspect, and no longer counts as a record
        (`container_ids` and `load` only see `<ID>.jsonl`).
        """
        path = self.path(container_id)
        tail = f".corrupt-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S.%fZ')}"
        # The longest IDs leave no room for the tail within a file name: cut the ID instead
        # (the agent logs the exact path), keeping room for a "-<n>" counter.
        stem = path.name[: NAME_MAX - len(tail) - 8]
        aside = path.with_name(f"{stem}{tail}")
        n = 1
        while aside.exists():  # never rename over an earlier one
            aside = path.with_name(f"{stem}{tail}-{n}")
            n += 1
        path.rename(aside)
        self._sync_dir()
        return aside

    def remove(self, container_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(container_id).unlink()
            self._sync_dir()

    def container_ids(self) -> Iterator[str]:
        if not self.directory.is_dir():
            return
        for p in sorted(self.directory.glob(f"*{SUFFIX}")):
            if not p.name.startswith("."):
                yield p.name[: -len(SUFFIX)]

    def _sync_dir(self) -> None:
        if not self.durable:
            return
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
