"""MultiNetworkPolicy on this node: each local pod's nftables table kept to what policies say.

The decision is pure (`enforcement.decide` over `policystate.PolicyState.world`); this is the
edge that applies it (`nftables.apply`, `nftables.remove`, in the pod's network namespace):

- **On ADD** (`added`, called by the ADD after every attachment is made and before the answer):
  if a policy selects the pod, its table is written before the runtime hears of the pod.
  Failing to write it fails the ADD (CNI error 107) and the ADD is rolled back: the agent
  fails closed, a pod that a policy isolates never starts open. The ADD waits for the
  policies to be read first (`Settings.ready_timeout`, else error 11, try again later).
- **On every change** of a policy, a pod (labels, addresses, a new pod), a namespace's labels
  or the networks, the state pokes the enforcer; after a short quiet time (`Settings.quiet`,
  at most `max_delay` after the first change: a burst is one pass) one pass decides every local
  container and writes the tables that changed, at most `concurrency` at once. A table is
  written only when its document changed (the last written is kept per container), and
  removed when no policy applies any longer.
- **On start** every recorded container counts as unknown: once the policies are read, each
  gets its table written or removed. Until then the tables stay as the last agent left them.
- **On DEL** (`deleted`) the table is removed (the namespace usually goes too).
- A write that fails is logged with the pod, the namespace and nft's message, and retried
  with backoff (`retry_first` doubling to `retry_max`) until it passes or the container goes;
  a namespace that is gone is not retried (its DEL comes). Nothing here ends the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from bridge.agent import enforcement, nftables, watchcache
from bridge.agent.cache import Record
from bridge.agent.enforcement import UNKNOWN, Applied, Local, Step
from bridge.agent.invoke import CNIError, ErrorCode
from bridge.agent.policystate import KINDS, PolicyState
from bridge.policy import scope
from bridge.policy.world import PodInfo, World, pod_info
from podnetwork.ground.core import Pod

log = logging.getLogger(__name__)

Apply = Callable[..., Awaitable[None]]


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
    """Seconds an ADD waits for the policies, pods and namespaces to be listed (then error 11)."""
    nft_timeout: float = nftables.DEFAULT_TIMEOUT


class Enforcer:
    """Keeps the tables of this node's containers (module docstring)."""

    def __init__(self, state: PolicyState, settings: Settings | None = None, *,
                 apply: Apply = nftables.apply, remove: Apply = nftables.remove) -> None:
        self.state = state
        self.settings = settings or Settings()
        self.apply, self.remove = apply, remove
        self.locals: dict[str, Local] = {}
        self.read_at_add: dict[str, PodInfo] = {}
        """Local pods as their ADD read them, by pod key: for those the watch has not delivered."""
        self.applied: dict[str, Applied] = {}
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

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self, records: Iterable[Record] = ()) -> None:
        """Every complete record is this node's (its table unknown); the loop starts."""
        for record in records:
            if record.complete:
                self.track(record)
        if self._task is None:
            self.poke()
            self._task = asyncio.create_task(self._run(), name="policy enforcement")
            self._feeds = [asyncio.create_task(watchcache.follow(api, kind, self.state),
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

    # --- this node's containers ----------------------------------------------------------------

    def track(self, record: Record, applied: Applied = UNKNOWN) -> None:
        local = enforcement.local_of(record)
        self.locals[record.container_id] = local
        self.applied.setdefault(record.container_id, applied)
        self.state.keep(local.pod)
        self.poke()

    @contextlib.asynccontextmanager
    async def _lock(self, container_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(container_id, asyncio.Lock())
        async with lock:
            yield

    def _local_infos(self, extra: Local | None = None, fresh: PodInfo | None = None) -> dict[str, PodInfo]:
        """This node's pods as decisions see them; `extra` (an ADD's container) as read (`fresh`)."""
        by_nad = self.state.by_nad()
        infos = {local.pod: enforcement.pod_info_of(
                     local, self.state.pods.get(local.pod) or self.read_at_add.get(local.pod), by_nad)
                 for local in self.locals.values()}
        if extra is not None:
            infos[extra.pod] = enforcement.pod_info_of(extra, fresh, by_nad)
        return infos

    def world(self) -> World:
        """The world of a pass: every kept pod, this node's as their records have them."""
        return self.state.world(self._local_infos())

    async def added(self, record: Record, pod: Pod, *, fail_closed: bool = True) -> None:
        """The container of `record` has its interfaces: write its table now if a policy selects
        the pod, before the runtime hears of it. Raises CNIError (fail closed) unless not
        `fail_closed` (a hot-plug: then the loop retries)."""
        local = enforcement.local_of(record)
        key = local.pod
        read = pod_info(pod.metadata.namespace or "", pod.metadata.name or "", pod.metadata.labels)
        if self.state.ready:
            self._ready.set()
        try:
            await asyncio.wait_for(self._ready.wait(), self.settings.ready_timeout)
        except TimeoutError:
            if fail_closed:
                raise CNIError(ErrorCode.TRY_AGAIN_LATER,
                               "the agent has not read the MultiNetworkPolicies yet, so it cannot protect "
                               "the pod",
                               f"still listing: {', '.join(self.missing_kinds())}; try again later") from None
        async with self._lock(record.container_id):
            watched = self.state.pods.get(key)
            # The labels as this ADD read them (fresher than the watch's); the ports as watched
            # (the API's answer to the ADD is read into a view without containers).
            fresh = read if watched is None else PodInfo(
                watched.namespace, watched.name, read.labels, watched.node, watched.ports, watched.interfaces)
            self.read_at_add[key] = fresh
            step = self._step_for(local, fresh)
            try:
                if step.document is not None:
                    await self.apply(local.netns, step.document, timeout=self.settings.nft_timeout)
            except (nftables.NftablesError, ValueError) as exc:
                self.failures += 1
                log.error("policies: pod %s (container %s, netns %s): writing its table failed: %s",
                          key, record.container_id[:12], local.netns, exc)
                if fail_closed:
                    raise CNIError(ErrorCode.POLICY_NOT_ENFORCED,
                                   f"MultiNetworkPolicies select pod {key} but its rules could not be "
                                   "written, so it is not started (the agent fails closed)",
                                   str(exc)[:1000]) from None
                self.locals[record.container_id] = local  # the loop retries
                self.applied[record.container_id] = UNKNOWN
                self.state.keep(key)
                self.poke()
                return
            self.writes += step.document is not None
            self.locals[record.container_id] = local
            self.applied[record.container_id] = step.document
            self.state.keep(key)
            self.poke()  # its addresses are new peers of the other local pods

    def _step_for(self, local: Local, fresh: PodInfo) -> Step:
        infos = self._local_infos(local, fresh)
        if not enforcement.selected(self.state.policies.values(), infos[local.pod]):
            return Step(local.container_id, local.pod, local.netns, None)  # no world to build
        world = self.state.world(infos)
        steps = enforcement.decide(world, scope.scopes(world), [local], {})
        return steps[0] if steps else Step(local.container_id, local.pod, local.netns, None)

    async def deleted(self, container_id: str, netns: str) -> None:
        """The container goes: its table goes first (never an error: the namespace goes too)."""
        async with self._lock(container_id):
            local = self.locals.pop(container_id, None)
            applied = self.applied.pop(container_id, None)
            self.retries.pop(container_id, None)
            self.gone.discard(container_id)
            if local is not None and not any(other.pod == local.pod for other in self.locals.values()):
                self.state.keep(local.pod, False)
                self.read_at_add.pop(local.pod, None)
            if applied is not None and netns:
                try:
                    await self.remove(netns, timeout=self.settings.nft_timeout)
                except nftables.NftablesError as exc:
                    log.warning("policies: container %s (netns %s): removing its table failed: %s; it goes "
                                "with the namespace", container_id[:12], netns, exc)
        self._locks.pop(container_id, None)

    def missing_kinds(self) -> list[str]:
        """The kinds not listed yet."""
        return [k.name for k in KINDS if k.name not in self.state.synced]

    # --- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self.state.ready:
            await self._poked.wait()
            self._poked.clear()
        log.info("policies: read %d MultiNetworkPolicies, %d pods, %d namespaces, %d networks; enforcing on "
                 "%d local containers", len(self.state.policies), len(self.state.pods),
                 len(self.state.namespaces), len(self.state.networks()), len(self.locals))
        while True:
            self._poked.clear()
            try:
                await self.reconcile()
            except Exception:  # a bug must not end enforcement: logged, tried again on the next change
                log.exception("policies: a reconcile pass failed")
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

    async def reconcile(self) -> list[Step]:
        """One pass: every local container's table as policies say now; the steps taken."""
        self.passes += 1
        world = self.world()
        scope_of = scope.scopes(world)
        self.state.note(scope_of)
        now = time.monotonic()
        locals_ = [local for cid, local in self.locals.items()
                   if cid not in self.gone and self.retries.get(cid, (0, 0.0))[1] <= now]
        steps = enforcement.decide(world, scope_of, locals_, self.applied)
        limit = asyncio.Semaphore(self.settings.concurrency)

        async def bounded(step: Step) -> None:
            async with limit:
                await self._write(step)

        await asyncio.gather(*(bounded(s) for s in steps))
        return steps

    async def _write(self, step: Step) -> None:
        async with self._lock(step.container_id):
            local = self.locals.get(step.container_id)
            if local is None or local.netns != step.netns:
                return  # deleted, or another sandbox, meanwhile
            for problem in step.unenforced:
                log.warning("policies: pod %s: %s", step.pod, problem)
            try:
                if step.document is None:
                    await self.remove(step.netns, timeout=self.settings.nft_timeout)
                else:
                    await self.apply(step.netns, step.document, timeout=self.settings.nft_timeout)
            except nftables.NetnsGone:
                log.info("policies: pod %s (container %s): its netns %s is gone; its DEL will come",
                         step.pod, step.container_id[:12], step.netns)
                self.gone.add(step.container_id)
                return
            except (nftables.NftablesError, ValueError) as exc:
                self._failed(step, str(exc))
                return
            self.writes += 1
            self.applied[step.container_id] = step.document
            self.retries.pop(step.container_id, None)

    def _failed(self, step: Step, message: str) -> None:
        self.failures += 1
        attempts = self.retries.get(step.container_id, (0, 0.0))[0] + 1
        delay = min(self.settings.retry_max, self.settings.retry_first * 2 ** (attempts - 1))
        self.retries[step.container_id] = (attempts, time.monotonic() + delay)
        what = "removing" if step.document is None else "writing"
        log.error("policies: pod %s (container %s, netns %s): %s its table failed (attempt %d, next in "
                  "%.1f s): %s",
                  step.pod, step.container_id[:12], step.netns, what, attempts, delay, message)


__all__ = ["Enforcer", "Settings"]
