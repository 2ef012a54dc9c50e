"""MultiNetworkPolicy on this node: each local pod's nftables table kept to what policies say.

The decision is pure (`decide.decide` over `state.PolicyState.world`); this is the
edge that applies it (`nftables.apply`, `nftables.remove`, in the pod's network namespace):

- **On ADD** (`added`, which the ADD starts beside its delegates and awaits before the answer):
  if a policy selects the pod, its table is written before the runtime hears of the pod.
  Failing to write it fails the ADD (CNI error 107) and the ADD is rolled back: the agent
  fails closed, a pod that a policy isolates never starts open. The ADD waits for the
  policies to be read first (`Settings.ready_timeout`, else error 11, try again later).
  The table is compiled from the planned interfaces (names and networks, no address yet:
  `local.planned_local`) and written while the delegates run, so its `nsenter` + `nft`
  costs the ADD little (docs/benchmarks.md); a pod's own addresses are in none of its own
  sets, so the table is the one later passes compile. Once attached, `attached` gives the
  pod's addresses to the other local pods' rules.
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

The loop, the debounce, the retries and the bounded concurrency are `reconciler.Reconciler`'s,
shared with the Services' ClusterIPs (`servicer.ClusterIPs`, which fail open at ADD).
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.agent.delegates.cache import Record
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.netns import nftables
from bridge.agent.netns.local import UNKNOWN, Local, Step, local_of
from bridge.agent.netns.reconciler import Reconciler, Settings, Written
from bridge.agent.policy import decide
from bridge.agent.policy.decide import Document
from bridge.agent.policy.state import KINDS, PolicyState
from bridge.policy import scope
from bridge.policy.world import PodInfo, World, pod_info
from podnetwork.ground.core import Pod

log = logging.getLogger(__name__)

Apply = Any
"""`nftables.apply(netns, document, timeout=...)` or `nftables.remove(netns, timeout=...)`."""


class Enforcer(Reconciler[Document]):
    """Keeps the policy tables of this node's containers (module docstring)."""

    label = "policies"
    what = "its policy table"
    kinds = KINDS

    def __init__(self, state: PolicyState, settings: Settings | None = None, *,
                 apply: Apply = nftables.apply, remove: Apply = nftables.remove) -> None:
        super().__init__(state, settings)
        self.state: PolicyState = state
        self.apply, self.remove = apply, remove
        self.read_at_add: dict[str, PodInfo] = {}
        """Local pods as their ADD read them, by pod key: for those the watch has not delivered."""
        self.last: decide.Pass | None = None
        """The last pass's world and tables: the next recompiles only what its change reaches."""
        self.infos: dict[str, tuple[Local, PodInfo | None, PodInfo]] = {}
        """By container: its pod as the last pass saw it (`decide.pod_info_of`) and what that
        was made of (the record's view, the watched pod), for `infos_by`. While both are the same
        objects, the pod is the same object too: a pass neither rebuilds it nor compares it."""
        self.infos_by: dict[str, str] = {}

    # --- the reconciler's hooks ------------------------------------------------------------------

    async def put(self, netns: str, document: Document, before: Written) -> None:
        await self.apply(netns, document, timeout=self.settings.nft_timeout)

    async def drop(self, netns: str, before: Written) -> None:
        await self.remove(netns, timeout=self.settings.nft_timeout)

    def kept(self, pod: str, keep: bool) -> None:
        self.state.keep(pod, keep)
        if not keep:
            self.read_at_add.pop(pod, None)

    def started(self) -> None:
        log.info("policies: read %d MultiNetworkPolicies, %d pods, %d namespaces, %d networks; enforcing on "
                 "%d local containers", len(self.state.policies), len(self.state.pods),
                 len(self.state.namespaces), len(self.state.networks()), len(self.locals))

    def decide(self, locals_: list[Local]) -> list[Step[Document]]:
        if not self.state.policies:
            # No MultiNetworkPolicy anywhere (most clusters): no pod is isolated, so no pod has a
            # table, and a pass needs no world of every watched pod to say so. Same steps as the
            # full pass below.
            self.state.note({})
            self.last = None  # the first pass with a policy compiles every local pod
            self.state.forget_world()  # and keys every watched pod again: nothing kept for passes
            return [Step(local.container_id, local.pod, local.netns, None) for local in locals_
                    if self.applied.get(local.container_id, UNKNOWN) is not None]
        local = self._local_infos()
        world = self.state.world(local)
        scope_of = scope.scopes(world)
        self.state.note(scope_of)
        # The next pass compares its world with this one: the pods in it are those the state
        # keeps keyed between passes (`PolicyState.keyed_pods`), so keeping it costs one mapping.
        steps, self.last = decide.decide_from(world, scope_of, locals_, self.applied, self.last)
        return steps

    # --- this node's containers ----------------------------------------------------------------

    def _local_infos(self, extra: Local | None = None, fresh: PodInfo | None = None) -> dict[str, PodInfo]:
        """This node's pods as decisions see them; `extra` (an ADD's container) as read (`fresh`)."""
        by_nad = self.state.by_nad()
        if by_nad != self.infos_by:
            self.infos, self.infos_by = {}, by_nad
        kept: dict[str, tuple[Local, PodInfo | None, PodInfo]] = {}
        infos: dict[str, PodInfo] = {}
        for local in self.locals.values():
            watched = self.state.pods.get(local.pod) or self.read_at_add.get(local.pod)
            last = self.infos.get(local.container_id)
            info = last[2] if last is not None and last[0] is local and last[1] is watched \
                else decide.pod_info_of(local, watched, by_nad)
            kept[local.container_id] = (local, watched, info)
            infos[local.pod] = info
        self.infos = kept
        if extra is not None:
            infos[extra.pod] = decide.pod_info_of(extra, fresh, by_nad)
        return infos

    def world(self) -> World:
        """The world of a pass: every kept pod, this node's as their records have them."""
        return self.state.world(self._local_infos())

    async def added(self, record: Record, pod: Pod, *, fail_closed: bool = True,
                    local: Local | None = None) -> None:
        """The container of `record` has its interfaces, or will have `local`'s (an ADD's plan):
        write its table now if a policy selects the pod, before the runtime hears of it. Raises
        CNIError (fail closed) unless not `fail_closed` (a hot-plug: then the loop retries)."""
        local = local or local_of(record)
        key = local.pod
        read = pod_info(pod.metadata.namespace or "", pod.metadata.name or "", pod.metadata.labels)
        if not await self._wait_ready() and fail_closed:
            raise CNIError(ErrorCode.TRY_AGAIN_LATER,
                           "the agent has not read the MultiNetworkPolicies yet, so it cannot protect "
                           "the pod",
                           f"still listing: {', '.join(self.missing_kinds())}; try again later")

        def step() -> Step[Document]:
            watched = self.state.pods.get(key)
            # The labels as this ADD read them (fresher than the watch's); the ports as watched
            # (the API's answer to the ADD is read into a view without containers).
            fresh = read if watched is None else PodInfo(
                watched.namespace, watched.name, read.labels, watched.node, watched.ports, watched.interfaces)
            self.read_at_add[key] = fresh
            return self._step_for(local, fresh)

        failed = await self._write_at_add(local, step, retry=not fail_closed)
        if failed is not None and fail_closed:
            raise CNIError(ErrorCode.POLICY_NOT_ENFORCED,
                           f"MultiNetworkPolicies select pod {key} but its rules could not be written, so it "
                           "is not started (the agent fails closed)", failed[:1000])

    async def attached(self, record: Record) -> None:
        """The ADD's delegates answered: the container's interfaces as its record has them now
        (with their addresses, which other local pods' rules may name)."""
        async with self._lock(record.container_id):
            if record.container_id in self.locals:
                self.locals[record.container_id] = local_of(record)
                self.poke()

    def _step_for(self, local: Local, fresh: PodInfo) -> Step[Document]:
        infos = self._local_infos(local, fresh)
        if not decide.selected(self.state.policies.values(), infos[local.pod]):
            return Step(local.container_id, local.pod, local.netns, None)  # no world to build
        world = self.state.world(infos)
        steps = decide.decide(world, scope.scopes(world), [local], {})
        return steps[0] if steps else Step(local.container_id, local.pod, local.netns, None)


__all__ = ["Enforcer", "Settings"]
