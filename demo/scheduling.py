"""The scheduler extender over real HTTP, and a small kube-scheduler stand-in that calls it.

`Extender` serves `scheduler_plugin.app.create_app` with uvicorn on 127.0.0.1
(an ephemeral port) and keeps its `Cache` fed from the store's watch events, as
the extender's watches do on a cluster. `Scheduler` plays kube-scheduler's part
for the demo: for each pod without a node it narrows the nodes by
`spec.nodeSelector` (kube-scheduler's own filter), asks the extender
`POST /filter` with the extender v1 body (`{"Pod": ..., "NodeNames": [...]}`,
i.e. `nodeCacheCapable: true`), binds the pod to a passing node, or leaves it
Pending with a `PodScheduled=False` condition whose message aggregates the
extender's reasons the way kube-scheduler's FailedScheduling event does.
Like kube-scheduler, it retries a rejected pod only when the pod changes (the
controller's requeue nudge makes that happen when a network turns Ready).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import Field

from demo.store import Event, EventType, Store
from podnetwork.ground import constants, core
from podnetwork.kube import webhooks
from scheduler_plugin import app as extender_app
from scheduler_plugin import cache as extender_cache
from scheduler_plugin.settings import Settings
from scheduler_plugin.wire import ExtenderFilterResult

log = logging.getLogger(__name__)

WATCHED = (
    (constants.API_VERSION, constants.PODNETWORK_KIND),
    (constants.API_VERSION, constants.ATTACHMENT_KIND),
    ("v1", "Node"),
)


class Extender:
    """The extender app on loopback, its cache fed by store events."""

    def __init__(self, api: Store, settings: Settings | None = None) -> None:
        self.api = api
        self.cache = extender_cache.Cache()
        self.settings = settings or Settings()
        self._server: webhooks.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._cancel: list[Callable[[], None]] = []
        self.url = ""

    def _feed(self, event: Event) -> None:
        if event.type == EventType.DELETED:
            self.cache.delete(event.object)
        else:
            self.cache.upsert(event.object)

    async def start(self) -> str:
        for coords in WATCHED:
            # subscribe() replays what exists before returning: the list of list-then-watch.
            self._cancel.append(self.api.subscribe(self._feed, *coords))
        self.cache.mark_synced()
        sockets = webhooks.listen("127.0.0.1", 0)
        host, port = sockets[0].getsockname()[:2]
        # A server that installs no signal handlers: SIGINT/SIGTERM are the demo's.
        self._server = webhooks.server(
            extender_app.create_app(self.cache, self.settings), access_log=False)
        self._task = asyncio.create_task(self._server.serve(sockets=sockets))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the extender stopped while starting")
            await asyncio.sleep(0.01)
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        for cancel in self._cancel:
            cancel()
        self._cancel.clear()
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.wait_for(self._task, 10)
        self._server = self._task = None


class _ConditionedStatus(core.PodStatus):
    conditions: list[core.Condition] = Field(default_factory=list)


class _ConditionedPod(core.Pod):
    """The pod as the scheduler's status write reads it: its phase and conditions."""

    status: _ConditionedStatus = Field(default_factory=_ConditionedStatus)


class _SchedulingSpec(core.PodSpec):
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")


class _SchedulingPod(core.Pod):
    """The pod as kube-scheduler's own filters read it (the view, plus its nodeSelector)."""

    spec: _SchedulingSpec = Field(default_factory=_SchedulingSpec)

    @property
    def waiting(self) -> bool:
        """Whether the pod still needs a node: unbound, not ended, not being deleted."""
        return (not self.spec.node_name and self.status.phase not in ("Succeeded", "Failed")
                and not self.metadata.deletion_timestamp)


@dataclass
class Decision:
    """What the scheduler did with one attempt for one pod."""

    pod: str
    candidates: list[str]
    request: dict[str, Any]
    reply: ExtenderFilterResult
    node: str | None = None
    message: str = ""


@dataclass
class Scheduler:
    """A kube-scheduler stand-in that delegates network checks to the extender over HTTP."""

    api: Store
    extender_url: str
    on_decision: Callable[[Decision], None] | None = None
    decisions: list[Decision] = field(default_factory=list)
    _queue: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    _queued: set[str] = field(default_factory=set)
    _busy: bool = False
    _task: asyncio.Task[None] | None = None
    _cancel: Callable[[], None] | None = None
    _client: httpx.AsyncClient | None = None
    _idle: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        self._client = httpx.AsyncClient(base_url=self.extender_url, timeout=5.0)
        self._idle.set()
        self._cancel = self.api.subscribe(self._on_pod, "v1", "Pod")
        self._task = asyncio.create_task(self._work())

    async def stop(self) -> None:
        if self._cancel:
            self._cancel()
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client:
            await self._client.aclose()

    def _on_pod(self, event: Event) -> None:
        pod = event.object
        if event.type == EventType.DELETED or not _SchedulingPod.model_validate(pod).waiting:
            return
        if _only_status_changed(pod, self.decisions):
            return
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        if key not in self._queued:
            self._queued.add(key)
            self._idle.clear()
            self._queue.put_nowait(key)

    async def settle(self, timeout: float = 10.0) -> None:
        """Wait until every queued pod has had its scheduling attempt."""
        await asyncio.sleep(0)
        await asyncio.wait_for(self._idle.wait(), timeout)

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            try:
                await self.schedule_one(key)
            except Exception:  # one pod's failure must not stop the scheduler
                log.exception("scheduling %s failed", key)
            if self._queue.empty():
                self._idle.set()

    async def schedule_one(self, key: str) -> Decision | None:
        ns, _, name = key.partition("/")
        pod = self.api.find("v1", "Pod", name, ns)
        if pod is None:
            return None
        view = _SchedulingPod.model_validate(pod)
        if view.spec.node_name:
            return None
        nodes = [core.Node.model_validate(n) for n in self.api.list("v1", "Node")]
        selector = view.spec.node_selector.items()
        candidates = [
            n.metadata.name or "" for n in nodes if selector <= (n.metadata.labels or {}).items()
        ]
        body = {"Pod": pod, "NodeNames": candidates}
        assert self._client is not None
        response = await self._client.post("/filter", json=body)
        response.raise_for_status()
        reply = ExtenderFilterResult.model_validate_json(response.content)
        decision = Decision(pod=key, candidates=candidates, request=body, reply=reply)
        passed = reply.node_names or []
        if reply.error:
            decision.message = f"extender error: {reply.error}"
        elif passed:
            decision.node = self._pick(passed)
        self.decisions.append(decision)
        if decision.node:
            self.api.patch("v1", "Pod", name, {"spec": {"nodeName": decision.node}}, ns)
            self._set_scheduled(name, ns, True, "", "")
        else:
            if not decision.message:
                decision.message = unschedulable_message(
                    len(nodes), len(nodes) - len(candidates), reply.failures)
            self._set_scheduled(name, ns, False, "Unschedulable", decision.message)
        if self.on_decision:
            self.on_decision(decision)
        return decision

    def _pick(self, passed: list[str]) -> str:
        """Spread: the passing node with the fewest pods (then by name)."""
        pods = self.api.list("v1", "Pod")
        load = collections.Counter(core.Pod.model_validate(p).spec.node_name for p in pods)
        return min(passed, key=lambda n: (load[n], n))

    def _set_scheduled(self, name: str, ns: str, ok: bool, reason: str, message: str) -> None:
        pod = self.api.find("v1", "Pod", name, ns)
        if pod is None:
            return
        cond = {"type": "PodScheduled", "status": "True" if ok else "False"}
        if not ok:
            cond.update(reason=reason, message=message)
        current = _ConditionedPod.model_validate(pod).status
        # A merge patch replaces the list whole: the other conditions go back as they were sent.
        others = [c.model_dump(by_alias=True, exclude_unset=True, mode="json")
                  for c in current.conditions if c.type != "PodScheduled"]
        status: dict[str, Any] = {"conditions": [*others, cond]}
        if not ok and current.phase is None:
            status["phase"] = "Pending"
        self.api.patch("v1", "Pod", name, {"status": status}, ns, subresource="status")


def unschedulable_message(total: int, selector_mismatch: int, reasons: dict[str, str]) -> str:
    """`0/N nodes are available: ...` grouped by reason, as kube-scheduler's FailedScheduling says."""
    counts = collections.Counter(reasons.values())
    parts = [f"{n} {reason}" for reason, n in sorted(counts.items())]
    if selector_mismatch:
        parts.insert(0, f"{selector_mismatch} node(s) didn't match Pod's node affinity/selector")
    return f"0/{total} nodes are available: " + ", ".join(parts) + "."


def _only_status_changed(pod: dict[str, Any], decisions: list[Decision]) -> bool:
    """Our own PodScheduled write must not requeue the pod (kube-scheduler ignores it too)."""
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    last = next((d for d in reversed(decisions) if d.pod == key), None)
    return last is not None and _sans_status(pod) == _sans_status(last.request["Pod"])


def _sans_status(pod: dict[str, Any]) -> dict[str, Any]:
    view = {k: v for k, v in pod.items() if k != "status"}
    view["metadata"] = {k: v for k, v in pod["metadata"].items() if k != "resourceVersion"}
    return view
