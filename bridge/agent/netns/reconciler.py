"""The machinery that keeps one table per local container to what a pure decision says.

Two tables live in each pod's network namespace, each kept by a sibling built on this one
class: MultiNetworkPolicy's (`enforcer.Enforcer`, `inet podnetwork_policy`) and the Services'
ClusterIPs (`servicer.ClusterIPs`, `inet podnetwork_services` and its routes). What differs is
the decision (`decide`), what is written (`put`, `drop`) and what an ADD does when the write
fails; the rest is here, once:

- **On every change** of what the decision reads, the state pokes the reconciler; after a short
  quiet time (`Settings.quiet`, at most `max_delay` after the first change: a burst is one
  pass) one pass decides every local container and writes what changed, at most
  `concurrency` at once. A table is written only when its content changed (the last written
  is kept per container), and removed when nothing applies any longer.
- **On start** every recorded container counts as `UNKNOWN` (a table may be there or not):
  once the state is listed, each gets its table written or removed. Until then the tables
  stay as the last agent left them.
- **At ADD** (`_write_at_add`, from the subclass's `added`) the container's table is written
  before the answer, under the container's lock; the subclass says whether a failure fails the
  ADD (policies) or is retried by the loop (Services).
- **On DEL** (`deleted`) the table goes (the namespace usually goes too; never an error).
- A write that fails is logged with the pod, the namespace and the program's message, and
  retried with backoff (`retry_first` doubling to `retry_max`) until it passes or the container
  goes; a namespace that is gone is not retried (its DEL comes). Nothing here ends the agent.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from bridge.agent.delegates.cache import Record
from bridge.agent.kube import watchcache
from bridge.agent.netns import nftables
from bridge.agent.netns.local import UNKNOWN, Local, Step, local_of

log = logging.getLogger(__name__)

T = TypeVar("T")
Written = Any
"""What was last written in a container's namespace: a table's content, None (none), or UNKNOWN."""


@dataclass(frozen=True)
class Settings:
    quiet: float = 0.05
    """Seconds without a change before a pass (a burst of events is one pass)."""
    max_delay: float = 0.25
    """But no longer than this after the first change a pass has not seen."""
    concurrency: int = 8
    """Tables written at once (one `nsenter` + `nft` process each)."""
    retry_first: float = 0.2
    retry_max: float = 10.0
    """A failed write is tried again after retry_first seconds, doubling up to retry_max."""
    ready_timeout: float = 10.0
    """Seconds an ADD waits for the state to be listed (then: policies fail, Services go on)."""
    nft_timeout: float = nftables.DEFAULT_TIMEOUT


class State(Protocol):
    """What a reconciler needs of its state: whether every kind is listed, who hears a change."""

    on_change: Callable[[], None] | None
    synced: set[str]

    @property
    def ready(self) -> bool: ...


class Reconciler(abc.ABC, Generic[T]):
    """Keeps one table per local container (module docstring). Subclasses give `decide`, `put`,
    `drop`, `label` (the log's prefix), `what` (the table, for messages) and `kinds`."""

    label = "tables"
    what = "its table"
    kinds: tuple[watchcache.Kind, ...] = ()

    def __init__(self, state: State, settings: Settings | None = None) -> None:
        self.state = state
        self.settings = settings or Settings()
        self.locals: dict[str, Local] = {}
        self.applied: dict[str, T | Literal["unknown"] | None] = {}
        self.retries: dict[str, tuple[int, float]] = {}
        """Container ID -> (failed attempts, when the next may start: time.monotonic())."""
        self.gone: set[str] = set()
        self.passes = 0
        self.writes = 0
        self.failures = 0
        self._poked = asyncio.Event()
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task[None] | None = None
        self._feeds: list[asyncio.Task[None]] = []
        self._sources: list[tuple[Any, watchcache.Kind]] = []
        state.on_change = self.poke

    # --- what a subclass gives ---------------------------------------------------------------------

    @abc.abstractmethod
    def decide(self, locals_: list[Local]) -> list[Step[T]]:
        """A step for each of `locals_` whose table differs from `self.applied` (pure)."""

    @abc.abstractmethod
    async def put(self, netns: str, document: T, before: Written) -> None:
        """Writes `document` in the namespace (`before`: what was there, as last written)."""

    @abc.abstractmethod
    async def drop(self, netns: str, before: Written) -> None:
        """Removes the table from the namespace (idempotent)."""

    def kept(self, pod: str, keep: bool) -> None:
        """The pod `namespace/name` is one of this node's (`keep`) or no longer."""

    def started(self) -> None:
        """The state is listed: the loop begins (a log line of what was read)."""

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self, records: Iterable[Record] = ()) -> None:
        """Every complete record is this node's (its table unknown); the loop starts."""
        for record in records:
            if record.complete:
                self.track(record)
        if self._task is None:
            self.poke()
            self._task = asyncio.create_task(self._run(), name=f"{self.label} reconciler")
            self._feeds = [asyncio.create_task(watchcache.follow(api, kind, self.state),  # type: ignore[arg-type]
                                               name=f"watch {kind.name}") for api, kind in self._sources]

    def follow(self, api: Any, kinds: Iterable[watchcache.Kind]) -> None:
        """List and watch `kinds` cluster-wide into the state, with the agent's client, from `start`
        (the kinds no `watchcache.Mirror` of the agent watches already)."""
        self._sources.extend((api, kind) for kind in kinds)

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._feeds) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task, self._feeds = None, []

    def poke(self) -> None:
        """Something a decision reads changed: a pass follows (debounced)."""
        self._idle.clear()
        self._poked.set()
        if self.state.ready:
            self._ready.set()

    async def idle(self) -> None:
        """Until a pass has seen every change and no write waits for a retry (tests, benchmarks)."""
        await self._idle.wait()

    def missing_kinds(self) -> list[str]:
        """The kinds not listed yet."""
        return [k.name for k in self.kinds if k.name not in self.state.synced]

    # --- this node's containers ----------------------------------------------------------------

    def track(self, record: Record, applied: T | Literal["unknown"] | None = UNKNOWN) -> None:
        local = local_of(record)
        self.locals[record.container_id] = local
        self.applied.setdefault(record.container_id, applied)
        self.kept(local.pod, True)
        self.poke()

    @contextlib.asynccontextmanager
    async def _lock(self, container_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(container_id, asyncio.Lock())
        async with lock:
            yield

    async def _wait_ready(self) -> bool:
        """Whether the state is listed, waiting `Settings.ready_timeout` at most."""
        if self.state.ready:
            self._ready.set()
        try:
            await asyncio.wait_for(self._ready.wait(), self.settings.ready_timeout)
        except TimeoutError:
            return False
        return True

    async def _write_at_add(self, local: Local, step_of: Callable[[], Step[T]], *, retry: bool) -> str | None:
        """Under the container's lock, makes its table what `step_of()` says now; None when done,
        else the failure's message. After a failure the container is tracked as `UNKNOWN` for the
        loop to retry when `retry`; otherwise the caller fails the ADD (whose rollback deletes)."""
        cid = local.container_id
        async with self._lock(cid):
            step = step_of()
            before = self.applied.get(cid)  # a new container: nothing there yet
            try:
                if step.document != before:
                    if step.document is None:
                        await self.drop(local.netns, before)
                    else:
                        await self.put(local.netns, step.document, before)
                    self.writes += 1
            except (nftables.NftablesError, ValueError) as exc:
                self.failures += 1
                log.error("%s: pod %s (container %s, netns %s): writing %s failed: %s", self.label,
                          local.pod, cid[:12], local.netns, self.what, exc)
                if not retry:
                    return str(exc)
                self.locals[cid] = local
                self.applied[cid] = UNKNOWN
                self.kept(local.pod, True)
                self.poke()
                return str(exc)
            self.locals[cid] = local
            self.applied[cid] = step.document
            self.kept(local.pod, True)
            self.poke()  # its addresses may concern the other local pods
            return None

    async def deleted(self, container_id: str, netns: str) -> None:
        """The container goes: its table goes first (never an error: the namespace goes too)."""
        async with self._lock(container_id):
            local = self.locals.pop(container_id, None)
            applied = self.applied.pop(container_id, None)
            self.retries.pop(container_id, None)
            self.gone.discard(container_id)
            if local is not None and not any(other.pod == local.pod for other in self.locals.values()):
                self.kept(local.pod, False)
            if applied is not None and netns:
                try:
                    await self.drop(netns, applied)
                except nftables.NftablesError as exc:
                    log.warning("%s: container %s (netns %s): removing %s failed: %s; it goes with the "
                                "namespace", self.label, container_id[:12], netns, self.what, exc)
        self._locks.pop(container_id, None)

    # --- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self.state.ready:
            await self._poked.wait()
            self._poked.clear()
        self.started()
        while True:
            self._poked.clear()
            try:
                await self.reconcile()
            except Exception:  # a bug must not end the loop: logged, tried again on the next change
                log.exception("%s: a reconcile pass failed", self.label)
            if not self._poked.is_set() and not self.retries:
                self._idle.set()
            await self._wait()

    async def _wait(self) -> None:
        """Until a change (then a quiet time, bounded by max_delay) or the next retry is due."""
        due = min((when for _, when in self.retries.values()), default=None)
        timeout = None if due is None else max(0.0, due - time.monotonic())
        try:
            await asyncio.wait_for(self._poked.wait(), timeout)
        except TimeoutError:
            return
        first = time.monotonic()
        while (left := self.settings.max_delay - (time.monotonic() - first)) > 0:
            self._poked.clear()
            try:
                await asyncio.wait_for(self._poked.wait(), min(self.settings.quiet, left))
            except TimeoutError:
                return

    def due(self) -> list[Local]:
        """The local containers a pass decides: not gone, and not waiting for a retry."""
        now = time.monotonic()
        return [local for cid, local in self.locals.items()
                if cid not in self.gone and self.retries.get(cid, (0, 0.0))[1] <= now]

    async def reconcile(self) -> list[Step[T]]:
        """One pass: every local container's table as the state says now; the steps taken."""
        self.passes += 1
        steps = self.decide(self.due())
        limit = asyncio.Semaphore(self.settings.concurrency)

        async def bounded(step: Step[T]) -> None:
            async with limit:
                await self._write(step)

        await asyncio.gather(*(bounded(s) for s in steps))
        return steps

    async def _write(self, step: Step[T]) -> None:
        async with self._lock(step.container_id):
            local = self.locals.get(step.container_id)
            if local is None or local.netns != step.netns:
                return  # deleted, or another sandbox, meanwhile
            for problem in step.unenforced:
                log.warning("%s: pod %s: %s", self.label, step.pod, problem)
            before = self.applied.get(step.container_id, UNKNOWN)
            try:
                if step.document is None:
                    await self.drop(step.netns, before)
                else:
                    await self.put(step.netns, step.document, before)
            except nftables.NetnsGone:
                log.info("%s: pod %s (container %s): its netns %s is gone; its DEL will come", self.label,
                         step.pod, step.container_id[:12], step.netns)
                self.gone.add(step.container_id)
                return
            except (nftables.NftablesError, ValueError) as exc:
                self._failed(step, str(exc))
                return
            self.writes += 1
            self.applied[step.container_id] = step.document
            self.retries.pop(step.container_id, None)

    def _failed(self, step: Step[T], message: str) -> None:
        self.failures += 1
        attempts = self.retries.get(step.container_id, (0, 0.0))[0] + 1
        delay = min(self.settings.retry_max, self.settings.retry_first * 2 ** (attempts - 1))
        self.retries[step.container_id] = (attempts, time.monotonic() + delay)
        what = "removing" if step.document is None else "writing"
        log.error("%s: pod %s (container %s, netns %s): %s %s failed (attempt %d, next in %.1f s): %s",
                  self.label, step.pod, step.container_id[:12], step.netns, what, self.what, attempts, delay,
                  message)


__all__ = ["Reconciler", "Settings", "State", "Written"]
