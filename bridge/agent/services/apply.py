"""The Services' ClusterIPs in this node's pods: each client pod's table and routes kept to the Services.

The decision is pure (`decide.decide` over `state.ServiceState` and the agent's records);
this is the edge that applies it (`clusterips.apply`, `clusterips.remove`, in the pod's
namespace), on `reconciler.Reconciler`'s loop, shared with MultiNetworkPolicy (`enforcer`):
applied only on change, debounced, at most `concurrency` at once, retried with backoff, every
recorded pod reconciled at start, removed on DEL.

**At ADD it fails open**, where policies fail closed. The ADD writes the pod's ClusterIPs
before it answers, so a client can use them at once; but if the Services are not read yet
(`Settings.ready_timeout`) or the write fails, the pod starts anyway without them, the failure is
logged, and the loop writes them as soon as it can (retries with backoff). Why: a missing policy
rule lets in traffic the policy forbids (a breach, so the pod must not start), whereas a missing
ClusterIP rule only makes a connection to the ClusterIP fail for a while, as it does on any
node before kube-proxy has caught up; blocking the pod (and every pod of the node, were the API
server slow) would turn a transient Service problem into an outage.

**An update changes the table in place**: from what was last written in a pod to the new table,
only the chains and map elements that differ (`bridge.services.changes`, one nft transaction per
pod, which keeps the table), and the routes only when they differ. The first write, a write
after a restart (`UNKNOWN`: the agent does not know what is there) and a change the in-place
update cannot make (a set's declaration changed) replace the whole table; so does an update
the kernel refuses because the table is not what the agent wrote (`clusterips.update`).

When an endpoint leaves a pod's rules (an update, or the table removed), the conntrack entries
of the UDP flows the pod sent to it through a ClusterIP are flushed (`clusterips.flush_udp`), as
kube-proxy does: TCP connections end by themselves (the endpoint resets or times out), a UDP
flow would keep going to the old endpoint until its entry expires. After a restart the agent
does not know what the last agent translated to (`UNKNOWN`), so nothing is flushed then.
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.agent.delegates.cache import Record
from bridge.agent.netns import clusterips, nftables
from bridge.agent.netns.local import Local, Step, local_of
from bridge.agent.netns.reconciler import Reconciler, Settings, Written
from bridge.agent.services import decide
from bridge.agent.services.decide import Pair, Tables
from bridge.agent.services.state import KINDS, ServiceState
from bridge.services import changes

log = logging.getLogger(__name__)


class ClusterIPs(Reconciler[Tables]):
    """Keeps the Services' table and routes of this node's containers (module docstring)."""

    label = "services"
    what = "its ClusterIP rules"
    kinds = KINDS

    def __init__(self, state: ServiceState, settings: Settings | None = None, *,
                 apply: Any = clusterips.apply, update: Any = clusterips.update,
                 remove: Any = clusterips.remove,
                 flush: Any = clusterips.flush_udp, conntrack: str = "conntrack") -> None:
        """`apply(netns, ruleset, timeout=)`, `update(netns, before, after, changes, timeout=)`,
        `remove(netns, timeout=)`, `flush(netns, pairs, timeout=, conntrack=)`: `clusterips`' by
        default (a test's recorder otherwise)."""
        super().__init__(state, settings)
        self.state: ServiceState = state
        self.apply, self.update, self.remove, self.flush = apply, update, remove, flush
        self.conntrack = conntrack
        self.flushed = 0
        """conntrack runs made (pairs flushed), for tests and benchmarks."""
        self.in_place = 0
        """Tables changed in place (the others were written whole), for tests and benchmarks."""
        self._changes: dict[tuple[int, int], tuple[Any, Any, list[Any] | None]] = {}
        """(id of the old commands, id of the new) -> (both, the changes): pods of one shape share
        their compiled commands (`decide.shape`), so a pass computes each difference once."""

    def decide(self, locals_: list[Local]) -> list[Step[Tables]]:
        services = list(self.state.services.values())
        return decide.decide(services, self.state.endpoints(), self.state.by_nad(), locals_, self.applied)

    async def put(self, netns: str, document: Tables, before: Written) -> None:
        if isinstance(before, Tables):
            delta = self._difference(before.ruleset.commands, document.ruleset.commands)
            timeout = self.settings.nft_timeout
            if await self.update(netns, before.ruleset, document.ruleset, delta, timeout=timeout):
                self.in_place += 1
        else:  # first write, or after a restart (`UNKNOWN`): whatever is there is replaced whole
            await self.apply(netns, document.ruleset, timeout=self.settings.nft_timeout)
        await self._flush(netns, decide.stale_udp(before, document))

    def _difference(self, old: Any, new: Any) -> list[Any] | None:
        key = (id(old), id(new))
        cached = self._changes.get(key)
        if cached is not None and cached[0] is old and cached[1] is new:
            return cached[2]
        if len(self._changes) >= 64:
            self._changes.clear()
        delta = changes.changes(old, new)
        self._changes[key] = (old, new, delta)  # holding both keeps their ids from being reused
        return delta

    async def drop(self, netns: str, before: Written) -> None:
        await self.remove(netns, timeout=self.settings.nft_timeout)
        await self._flush(netns, decide.stale_udp(before, None))

    async def _flush(self, netns: str, pairs: list[Pair]) -> None:
        if not pairs:
            return
        try:
            runs = await self.flush(netns, pairs, timeout=self.settings.nft_timeout, conntrack=self.conntrack)
            self.flushed += runs  # not `+= await`: it reads the count before the await, losing others' runs
        except nftables.NetnsGone:
            raise
        except nftables.NftablesError as exc:
            # The rules are right; only old UDP flows may linger (until their entries expire).
            log.warning("services: netns %s: %s", netns, exc)

    def started(self) -> None:
        log.info("services: read %d Services on PodNetworks with %d EndpointSlices, %d PodNetworks of NADs; "
                 "serving %d local containers", len(self.state.services), len(self.state.slices),
                 len(self.state.nads), len(self.locals))

    async def added(self, record: Record) -> None:
        """The container of `record` has its interfaces: write its ClusterIPs before the ADD answers,
        failing open (module docstring): never raises."""
        local = local_of(record)
        if not await self._wait_ready():
            log.warning("services: pod %s (container %s) starts before the Services are read (still "
                        "listing: %s); its ClusterIPs follow when they are", local.pod,
                        record.container_id[:12],
                        ", ".join(self.missing_kinds()))
            self.track(record, None)  # a new namespace holds no table of ours
            return

        def step() -> Step[Tables]:
            steps = decide.decide(list(self.state.services.values()), self.state.endpoints(),
                                   self.state.by_nad(), [local], {local.container_id: None})
            return steps[0] if steps else Step(local.container_id, local.pod, local.netns, None)

        failed = await self._write_at_add(local, step, retry=True)
        if failed is not None:
            log.warning("services: pod %s starts without its ClusterIPs (the agent fails open for Services); "
                        "retrying", local.pod)


__all__ = ["ClusterIPs", "Settings"]
