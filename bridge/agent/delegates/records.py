"""The agent's records of its containers, and who may touch one now.

`Records` wraps the on-disk cache (`bridge.agent.delegates.cache`) with what one agent process knows
beside it:

- which records this process wrote (for any other, a delegate of an earlier agent process
  may still be running, and is stopped before tear-down: `runner.Runner.stop_orphans`);
- a lock per container: operations on one container are serialized, different containers run
  in parallel (NPWG 7.3); ADD, DEL, CHECK, GC, hot-plug and the write of a status mark take it;
- a gate between ADDs and GC: no delegate ADD runs while GC is forwarded to the delegates, so
  no plugin frees a reservation an ADD has just made (`add_slot`, `no_adds`);
- the order in which requests arrived, so that GC keeps a container whose ADD arrived after
  the GC request (a counter: no clock can go backwards).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from bridge.agent.delegates import cache
from bridge.agent.delegates.cache import Attachment, Record, State
from bridge.agent.delegates.invoke import CNIError, ErrorCode


def unfinished(record: Record) -> list[Attachment]:
    """The attachments of a complete record that are not attached: a hot-plug (which records
    its intent in the running pod's record, then runs the delegate) cut short by a crash."""
    if not record.complete:
        return []
    return [a for a in record.attachments if a.state is not State.ATTACHED]


def shape(record: Record) -> list[tuple[str, str, bool]]:
    """What a network-status is made of: each attachment's network, interface and state."""
    return [(a.name, a.ifname, a.state is State.ATTACHED) for a in record.attachments] + [
        ("", "", record.complete)
    ]


class Records:
    """The records of one agent (see the module docstring)."""

    def __init__(self, store: cache.Cache) -> None:
        self.cache = store
        self._written: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiters: dict[str, int] = {}
        self._gate = asyncio.Condition()
        self._adds_running = 0
        self._gc_forwarding = False
        self._arrivals = itertools.count()
        self._add_arrival: dict[str, int] = {}

    # --- reading and writing ---

    def load(self, container_id: str) -> Record | None:
        """The container's record, for ADD, CHECK and hot-plug; an unreadable one is CNI error 5.

        Only DEL moves an unreadable record aside (`move_aside`): the runtime DELs after a failed ADD.
        """
        try:
            return self.cache.load(container_id)
        except cache.CacheError as exc:
            raise CNIError(
                ErrorCode.IO_FAILURE,
                f"the agent's record of container {container_id} is unreadable",
                f"{exc}; DEL this container: the agent then moves the file aside and starts afresh",
            ) from None

    def readable(self) -> Iterator[Record]:
        """Every record that can be read (an unreadable one is its DEL's to deal with)."""
        for container_id in list(self.cache.container_ids()):
            with contextlib.suppress(cache.CacheError):
                record = self.cache.load(container_id)
                if record is not None:
                    yield record

    def save(self, record: Record) -> None:
        self.cache.save(record)
        self._written.add(record.container_id)

    def remove(self, container_id: str) -> None:
        self.cache.remove(container_id)
        self._written.discard(container_id)

    def move_aside(self, container_id: str) -> Path:
        """Keeps an unreadable record for a human (`cache.Cache.move_aside`); the new path."""
        self._written.discard(container_id)
        return self.cache.move_aside(container_id)

    def wrote(self, container_id: str) -> bool:
        """Whether this process wrote the container's record on disk."""
        return container_id in self._written

    # --- who may touch a container now ---

    @contextlib.asynccontextmanager
    async def lock(self, container_id: str) -> AsyncIterator[None]:
        """Held while one operation works on the container; the lock is dropped once idle."""
        lock = self._locks.setdefault(container_id, asyncio.Lock())
        self._waiters[container_id] = self._waiters.get(container_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._waiters[container_id] -= 1
            if not self._waiters[container_id]:
                del self._waiters[container_id]
                del self._locks[container_id]

    def busy(self, container_id: str) -> bool:
        """Whether an operation holds the container's lock or waits for it."""
        return container_id in self._waiters

    def locked(self) -> list[str]:
        """The containers whose lock is held or awaited now (none once the agent is idle)."""
        return sorted(self._locks)

    @contextlib.asynccontextmanager
    async def add_slot(self) -> AsyncIterator[None]:
        """Held by each delegate ADD (a CNI ADD, a hot-plug); none starts while GC is forwarded."""
        async with self._gate:
            await self._gate.wait_for(lambda: not self._gc_forwarding)
            self._adds_running += 1
        try:
            yield
        finally:
            async with self._gate:
                self._adds_running -= 1
                self._gate.notify_all()

    @contextlib.asynccontextmanager
    async def no_adds(self) -> AsyncIterator[None]:
        """Waits for running ADDs to finish and holds new ones back (one GC at a time)."""
        async with self._gate:
            await self._gate.wait_for(lambda: not self._gc_forwarding)
            self._gc_forwarding = True
            await self._gate.wait_for(lambda: self._adds_running == 0)
        try:
            yield
        finally:
            async with self._gate:
                self._gc_forwarding = False
                self._gate.notify_all()

    # --- the order of requests (for GC) ---

    def arrived(self, container_id: str, *, adding: bool) -> int:
        """A request's place in the order of arrival; an ADD's is remembered for its container."""
        arrival = next(self._arrivals)
        if adding:
            self._add_arrival[container_id] = arrival
        return arrival

    def added_since(self, container_id: str, arrival: int) -> bool:
        """Whether the container's latest ADD arrived after the request that arrived at `arrival`."""
        return self._add_arrival.get(container_id, -1) > arrival

    def forget(self, container_id: str) -> None:
        """The container is torn down: its ADD's arrival no longer matters."""
        self._add_arrival.pop(container_id, None)


__all__ = ["Records", "shape", "unfinished"]
