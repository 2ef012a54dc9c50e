"""The agent's readiness as its node's operators see it: one log line and one Node Event per change.

Whether the agent can attach a pod now (`Agent.readiness_problem`) is asked by the DaemonSet's
readiness probe (`bridge.agent.shim.probe`, GET /v1/ready) and by the agent's own loop that waits
to write its conflist (NPWG 6.1) and keeps watching after. Each answer goes through `Reporter`,
which says nothing while it does not change, and on a change logs it (WARNING when the agent
is not ready, with the reason; INFO when it is ready again) and, given a node and an `EventSink`,
posts a core/v1 Event on the Node (`kubectl describe node` shows it). Nothing here runs on the
ADD path.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

log = logging.getLogger(__name__)

#: The Node Events' reasons and their component.
REASON_NOT_READY = "MultiNetworkAgentNotReady"
REASON_READY = "MultiNetworkAgentReady"
COMPONENT = "podnetwork-cni-agent"
_UNKNOWN = object()


class EventSink(Protocol):
    """Where the Events go (`bridge.agent.daemon.hotplug.KubernetesEvents` posts them to the API)."""

    async def post_event(self, body: Mapping[str, Any]) -> None: ...


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_event(node: str, reason: str, message: str, *, type_: str, now: str) -> dict[str, Any]:
    """A core/v1 Event about the Node `node`, from its agent. Events of cluster-scoped objects live
    in the `default` namespace (as the kubelet's do); the name is the node's and a digest of what
    was said and when, so a report is posted once."""
    key = hashlib.sha256(f"{reason}\0{message}\0{now}".encode()).hexdigest()[:16]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{node[: 253 - len(key) - 1]}.{key}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT,
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class Reporter:
    """Reports each change of the agent's readiness once (see the module docstring)."""

    def __init__(self, node: str | None = None, events: EventSink | None = None, *,
                 now: Callable[[], str] = _now) -> None:
        self.node = node
        self.events = events
        self._now = now
        self._last: object = _UNKNOWN
        self._posting: set[asyncio.Task[None]] = set()

    @property
    def problem(self) -> str | None:
        """The last problem reported (None: ready, or nothing reported yet)."""
        return self._last if isinstance(self._last, str) else None

    def update(self, problem: str | None) -> None:
        """The agent's readiness now: None when it can attach pods, else why not."""
        if problem == self._last:
            return
        first = self._last is _UNKNOWN
        self._last = problem
        if problem is not None:
            log.warning("not ready: %s", problem)
        elif not first:
            log.info("ready again: pods can be attached")
        else:
            log.info("ready: pods can be attached")
        if self.events is not None and self.node:
            reason, type_ = (REASON_NOT_READY, "Warning") if problem is not None else (REASON_READY, "Normal")
            message = problem if problem is not None else "the CNI agent can attach pods"
            body = node_event(self.node, reason, message, type_=type_, now=self._now())
            task = asyncio.get_running_loop().create_task(self._post(body), name="cni-agent-readiness-event")
            self._posting.add(task)
            task.add_done_callback(self._posting.discard)

    async def _post(self, body: Mapping[str, Any]) -> None:
        assert self.events is not None
        try:
            await self.events.post_event(body)
        except Exception as exc:  # a report: readiness itself is the probe's answer
            log.warning("node %s: readiness Event not posted: %s", self.node, exc)

    async def close(self) -> None:
        """Waits for the Events being posted (briefly), then drops them."""
        if self._posting:
            await asyncio.wait(set(self._posting), timeout=5)
        for task in list(self._posting):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = ["COMPONENT", "REASON_NOT_READY", "REASON_READY", "EventSink", "Reporter", "node_event"]
