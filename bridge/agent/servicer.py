"""The Services' ClusterIPs in this node's pods: each client pod's table and routes kept to the Services.

The decision is pure (`serving.decide` over `servicestate.ServiceState` and the agent's records);
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

When an endpoint leaves a pod's rules (an update, or the table removed), the conntrack entries
of the UDP flows the pod sent to it through a ClusterIP are flushed (`clusterips.flush_udp`), as
kube-proxy does: TCP connections end by themselves (the endpoint resets or times out), a UDP
flow would keep going to the old endpoint until its entry expires. After a restart the agent
does not know what the last agent translated to (`UNKNOWN`), so nothing is flushed then.
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.agent import clusterips, enforcement, nftables, serving
from bridge.agent.cache import Record
from bridge.agent.enforcement import Local, Step
from bridge.agent.reconciler import Reconciler, Settings, Written
from bridge.agent.servicestate import KINDS, ServiceState
from bridge.agent.serving import Tables

log = logging.getLogger(__name__)


class ClusterIPs(Reconciler[Tables]):
    """Keeps the Services' table and routes of this node's containers (module docstring)."""

    label = "services"
    what = "its ClusterIP rules"
    kinds = KINDS

    def __init__(self, state: ServiceState, settings: Settings | None = None, *,
                 apply: Any = clusterips.apply, remove: Any = clusterips.remove,
                 flush: Any = clusterips.flush_udp, conntrack: str = "conntrack") -> None:
        """`apply(netns, ruleset, timeout=)`, `remove(netns, timeout=)`, `flush(netns, pairs, timeout=,
        conntrack=)`: `clusterips`' by default (a test's recorder otherwise)."""
        super().__init__(state, settings)
        self.state: ServiceState = state
        self.apply, self.remove, self.flush = apply, remove, flush
        self.conntrack = conntrack
        self.flushed = 0
        """conntrack runs made (pairs flushed), for tests and benchmarks."""

    def decide(self, locals_: list[Local]) -> list[Step[Tables]]:
        services = list(self.state.services.values())
        return serving.decide(services, self.state.endpoints(), self.state.by_nad(), locals_, self.applied)

    async def put(self, netns: str, document: Tables, before: Written) -> None:
        await self.apply(netns, document.ruleset, timeout=self.settings.nft_timeout)
        await self._flush(netns, serving.stale_udp(before, document))

    async def drop(self, netns: str, before: Written) -> None:
        await self.remove(netns, timeout=self.settings.nft_timeout)
        await self._flush(netns, serving.stale_udp(before, None))

    async def _flush(self, netns: str, pairs: list[serving.Pair]) -> None:
        if not pairs:
            return
        try:
            self.flushed += await self.flush(netns, pairs, timeout=self.settings.nft_timeout,
                                             conntrack=self.conntrack)
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
        local = enforcement.local_of(record)
        if not await self._wait_ready():
            log.warning("services: pod %s (container %s) starts before the Services are read (still "
                        "listing: %s); its ClusterIPs follow when they are", local.pod,
                        record.container_id[:12],
                        ", ".join(self.missing_kinds()))
            self.track(record, None)  # a new namespace holds no table of ours
            return

        def step() -> Step[Tables]:
            steps = serving.decide(list(self.state.services.values()), self.state.endpoints(),
                                   self.state.by_nad(), [local], {local.container_id: None})
            return steps[0] if steps else Step(local.container_id, local.pod, local.netns, None)

        failed = await self._write_at_add(local, step, retry=True)
        if failed is not None:
            log.warning("services: pod %s starts without its ClusterIPs (the agent fails open for Services); "
                        "retrying", local.pod)


__all__ = ["ClusterIPs", "Settings"]
