"""What the stages after the pods are attached (`demo.policy`, `demo.services`) use of the demo,
and waiting for the node agents' reconcilers after a change."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from bridge.agent.agent import Agent
from bridge.agent.reconciler import Reconciler
from bridge.agent.running import Running
from demo.kubelet import Kubelet
from demo.report import Report
from demo.store import Store

#: Seconds each agent may take to bring its pods' tables up to date after a change.
SETTLE_TIMEOUT = 30.0


class Demo(Protocol):
    """What a stage uses of `demo.demo.Demo` (which imports the stages, not the reverse)."""

    report: Report
    api: Store
    kubelets: dict[str, Kubelet]
    agents: list[Running]

    def _flush_notes(self) -> None: ...

    def _sandbox(self, pod: str) -> Any: ...

    def _ip_on(self, pod: str, network: str) -> str | None: ...

    def _pod_ips(self, pod: str) -> list[dict[str, Any]]: ...

    async def _create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]: ...


async def settle(demo: Demo, reconciler: Callable[[Agent], Reconciler[Any] | None], tables: str) -> None:
    """Until every node agent's `reconciler` (its enforcer, its ClusterIPs) has brought its pods'
    `tables` ("policy tables", "ClusterIP rules") to what the store says."""
    demo._flush_notes()
    for running in demo.agents:
        kept = reconciler(running.agent)
        if kept is None:
            continue
        try:
            await asyncio.wait_for(kept.idle(), SETTLE_TIMEOUT)
        except TimeoutError:
            raise RuntimeError(
                f"the agent of {running.agent.config.socket_path.stem} did not bring its pods' {tables} "
                f"up to date within {SETTLE_TIMEOUT:.0f}s ({kept.failures} failed writes, each logged "
                "above with nft's or ip's message)") from None


__all__ = ["SETTLE_TIMEOUT", "Demo", "settle"]
