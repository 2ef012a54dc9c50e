"""kopf's peering objects, read without kopf: the one place that knows kopf's private format.

kopf's public API lets an operator take part in peering (`kopf.operator(
peering_name=..., priority=..., identity=...)`) but not ask whether it is the
active replica. The controller must know when it has been demoted (its memory
is stale then, see `guard_demotion`), so it reads the ClusterKopfPeering object
itself. The object's `status` is kopf's wire format, not its API: one entry per
operator identity, `{"priority": int, "lifetime": seconds, "lastseen": ISO 8601}`
(`Peer.as_dict` in kopf/_core/engines/peering.py), and a peer is alive until
`lastseen + lifetime`. kopf pauses an operator while a live peer has the same
or a higher priority. tests/api/kube/test_peering_adapter.py runs kopf's own peering
against the emulator and compares this reading with kopf's, so a kopf upgrade
that changes the format fails there, not in a cluster.
"""

from __future__ import annotations

import asyncio
import datetime
import getpass
import os
import random
import socket
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from podnetwork.ground.core import ObjectMeta
from podnetwork.kube import client

#: kopf's defaults when an entry lacks a field (`Peer.__init__`).
DEFAULT_LIFETIME = 60
DEFAULT_PRIORITY = 0


def identity() -> str:
    """An operator identity as kopf makes one: $POD_ID in a pod, else user@host/start time/3 random
    characters. Passed to `kopf.operator(identity=...)`, so both sides know it, and so kopf never
    makes its own: kopf asks `getpass.getuser()`, which raises for a uid without a passwd entry
    (a container's `runAsUser: 65532` has none), and the operator would die at start."""
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d%H%M%S")
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=3))
    return f"{_user()}@{socket.gethostname()}/{now}/{suffix}"


def _user() -> str:
    """The login name ($LOGNAME, $USER... or the passwd entry), else the uid as a number."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


class _PeeringObject(BaseModel):
    """A ClusterKopfPeering: its name, and its status as kopf writes it (read by `peers`)."""

    model_config = ConfigDict(extra="ignore")

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    status: dict[str, Any] | None = None


@dataclass(frozen=True)
class Peer:
    identity: str
    priority: int
    lifetime: datetime.timedelta
    lastseen: datetime.datetime

    @property
    def deadline(self) -> datetime.datetime:
        return self.lastseen + self.lifetime

    def alive(self, now: datetime.datetime) -> bool:
        return self.deadline > now


def _parse_time(text: str) -> datetime.datetime:
    parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def peers(status: Mapping[str, Any], now: datetime.datetime | None = None) -> list[Peer]:
    """The entries of a peering object's `status`; removed (null) and malformed entries are skipped."""
    now = now or datetime.datetime.now(datetime.UTC)
    found = []
    for ident, info in status.items():
        if not isinstance(info, Mapping):
            continue
        try:
            lastseen = _parse_time(str(info["lastseen"])) if info.get("lastseen") is not None else now
            lifetime = datetime.timedelta(seconds=int(info.get("lifetime", DEFAULT_LIFETIME)))
            found.append(Peer(identity=str(ident), priority=int(info.get("priority", DEFAULT_PRIORITY)),
                              lifetime=lifetime, lastseen=lastseen))
        except (TypeError, ValueError):
            continue
    return found


def outranked(status: Mapping[str, Any], identity: str, priority: int,
              now: datetime.datetime | None = None) -> bool:
    """kopf's pausing rule: some live peer other than `identity` has the same or a higher priority."""
    now = now or datetime.datetime.now(datetime.UTC)
    return any(p.identity != identity and p.alive(now) and p.priority >= priority for p in peers(status, now))


async def guard_demotion(api: client.AsyncApi, name: str, identity: str, priority: int,
                         on_demoted: Callable[[], None], *, watch_timeout: int = 300) -> None:
    """Call `on_demoted` once this replica is outranked after it has been the active one, then return.

    Follows the ClusterKopfPeering `name` with a list+watch of its own (re-listed
    on 410, reconnected on errors), which kopf's pausing does not stop.
    """
    active = False
    demoted = asyncio.Event()

    def seen(body: Mapping[str, Any]) -> None:
        nonlocal active
        try:
            peering = _PeeringObject.model_validate(body)
        except ValueError:
            return  # not a peering object kopf would have written
        if peering.metadata.name != name or demoted.is_set():
            return
        if not outranked(peering.status or {}, identity, priority):
            active = True
        elif active:
            demoted.set()

    def on_list(items: list[dict[str, Any]]) -> None:
        for item in items:
            seen(item)

    def on_event(kind: str, body: dict[str, Any]) -> None:
        if kind != "DELETED":
            seen(body)

    watcher = asyncio.create_task(client.list_and_watch(
        api, client.ClusterKopfPeering, on_list=on_list, on_event=on_event, watch_timeout=watch_timeout))
    try:
        await demoted.wait()
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    on_demoted()


__all__ = ["Peer", "guard_demotion", "identity", "outranked", "peers"]
