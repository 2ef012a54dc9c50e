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
from podnetwork.kube.apierrors import Conflict, NotFound

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


def leads(status: Mapping[str, Any], identity: str, priority: int,
          now: datetime.datetime | None = None) -> bool:
    """This replica is the active one by kopf's rule, and knows it: its own keep-alive is in
    `status`, alive, and no other live peer has the same or a higher priority. An empty status
    (no keep-alive written yet, by anyone) leads nobody: a replica that read it before an older
    one wrote would otherwise act, and then be outranked a moment later."""
    now = now or datetime.datetime.now(datetime.UTC)
    own = any(p.identity == identity and p.alive(now) for p in peers(status, now))
    return own and not outranked(status, identity, priority, now)


def arrival_priority(status: Mapping[str, Any], identity: str, base: int,
                     now: datetime.datetime | None = None) -> int:
    """The priority of a replica joining a peering whose `status` it read: `base` when no other
    peer is alive, else one below the lowest live one, so that every replica already there, the
    active one first, keeps outranking it (`join`)."""
    now = now or datetime.datetime.now(datetime.UTC)
    others = [p.priority for p in peers(status, now) if p.identity != identity and p.alive(now)]
    return min(base, min(others) - 1) if others else base


class PeeringMissing(Exception):
    """The peering object (or its kind) does not exist: deploy/peering/ is not applied yet."""


async def join(api: client.AsyncApi, name: str, identity: str, priority: int, *, by_arrival: bool,
               lifetime: int = DEFAULT_LIFETIME) -> int:
    """Write this replica's keep-alive into the ClusterKopfPeering `name` before kopf starts, and
    return the priority it joined with: `priority` itself, or with `by_arrival` the rank of its
    arrival (`arrival_priority`), decided from the status it read and written only if nobody
    wrote in between (the patch carries that resourceVersion; a 409 reads again). Replicas
    starting together are thus ordered by the API server: the first to write leads, every later
    one sees it and waits behind it, and kopf (which pauses a peering replica until it has read
    the object) never resumes the wrong one, not even for a moment. Raises `PeeringMissing`."""
    while True:
        try:
            body = await api.get(client.ClusterKopfPeering, name)
        except NotFound as exc:
            raise PeeringMissing(str(exc)) from exc
        peering = _PeeringObject.model_validate(body)
        status = peering.status or {}
        # A plain int: the priority may be a marked one (`--priority start-time`), which no
        # encoder of a request body knows.
        chosen = int(arrival_priority(status, identity, priority) if by_arrival else priority)
        now = datetime.datetime.now(datetime.UTC)
        entry = {"priority": chosen, "lifetime": lifetime, "lastseen": now.isoformat()}
        patch: dict[str, Any] = {"status": {identity: entry}}
        if by_arrival and peering.metadata.resource_version:
            patch["metadata"] = {"resourceVersion": peering.metadata.resource_version}
        try:
            await api.patch(client.ClusterKopfPeering, name, patch)
        except Conflict:
            await asyncio.sleep(random.uniform(0.05, 0.25))  # another replica wrote: read again
            continue
        except NotFound as exc:
            raise PeeringMissing(str(exc)) from exc
        return chosen


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
        status = peering.status or {}
        if leads(status, identity, priority):
            active = True
        elif active and outranked(status, identity, priority):
            demoted.set()  # not when only its own keep-alive is gone: kopf drops it on the way out

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


__all__ = ["Peer", "PeeringMissing", "arrival_priority", "guard_demotion", "identity", "join", "leads",
           "outranked", "peers"]
