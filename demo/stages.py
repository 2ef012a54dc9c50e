"""What the stages after the pods are attached (`demo.policy`, `demo.services`) use of the demo,
and waiting for the node agents' reconcilers after a change."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from bridge.agent.daemon.agent import Agent
from bridge.agent.daemon.running import Running
from bridge.agent.netns.reconciler import Reconciler
from demo.kubelet import Kubelet
from demo.report import Report
from demo.store import Store
from podnetwork.ground.service import ObjectReference

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


class Servers:
    """TCP servers in pods' namespaces (`demo.tcpprobe serve`), stopped by `stop`."""

    def __init__(self) -> None:
        self.procs: list[asyncio.subprocess.Process] = []

    async def start(self, netns: str, address: str, port: int, *, name: str | None = None) -> None:
        """A server on `address`:`port` in `netns`, answering each connection with `name` when given."""
        named = ["--name", name] if name else []
        proc = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", netns, sys.executable, "-m", "demo.tcpprobe", "serve", address, str(port),
            *named, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        self.procs.append(proc)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=10)
        if line.strip() != b"listening":
            raise RuntimeError(f"the TCP server {name or ''} on {address}:{port} in {netns} did not start")

    async def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self.procs.clear()


class EventView(BaseModel):
    """An Event as a stage reads it back: about which object, why, and what it says."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    involved_object: ObjectReference = Field(default_factory=ObjectReference, alias="involvedObject")
    reason: str | None = None
    message: str | None = None


def events_about(api: Store, ns: str, kind: str | None, name: str) -> list[EventView]:
    """The Events of namespace `ns` about the object `kind` (None: any kind) `name`, as stored."""
    events = (EventView.model_validate(e) for e in api.list("v1", "Event", ns))
    return [e for e in events if kind in (None, e.involved_object.kind) and e.involved_object.name == name]


__all__ = ["SETTLE_TIMEOUT", "Demo", "EventView", "Servers", "events_about", "settle"]
