"""Publishing `k8s.v1.cni.cncf.io/network-status` off the CNI request's critical path.

NPWG 5: the delegating plugin "may publish" the status of a pod's attachments in
this annotation; nothing in the runtime waits for it, while the kubelet waits for
every millisecond of an ADD. So the agent answers the runtime first and hands the
status to a `StatusPublisher`, which writes it in the background:

- one write per pod at a time; a newer status for the same pod replaces one not
  yet written (the latest report wins: an address change or a hot-plug after the
  ADD must not be overwritten by the older ADD status);
- every write names the pod's UID (`metadata.uid` in the merge patch), so it lands on the
  pod it reports on or nowhere: a pod deleted and re-created under the same name (while
  the API was down, or before an agent restart republished what was pending) is another
  pod, and the API server refuses the write (`objects.Replaced`);
- a failed write (API down, 5xx, 409, timeout) is retried with exponential backoff
  (`RETRY_FIRST` doubling to `RETRY_MAX` seconds), for as long as the agent runs;
  only a pod that no longer exists (404), or exists as another pod, drops its write:
  there is nothing left to report on;
- `cancel` (the container's DEL) drops what its container queued, the write in flight
  included: that one is not retried, and its `on_written` does not run. It may still land
  (the API server took it and answered late), so the DEL then publishes the pod's status as
  it leaves it (`reports.Reports.withdraw`): queued behind the write in flight, it is the
  pod's last write;
- `on_written` runs after a write succeeded, so the caller can record that it is
  done (the agent marks the container's cache record). After a restart, the agent
  republishes every complete record not so marked (`Agent.start`), which is how a
  write that was pending when the agent died is recovered.

Other parts of the agent (hot-plug, address changes) call `publish` with the pod
and its whole new status. `pending` and `failed` are the counts the metrics export.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bridge import npwg
from bridge.agent.kube.objects import NotFound, Replaced

log = logging.getLogger(__name__)

#: Seconds before the first retry of a failed write; doubled per failure up to `RETRY_MAX`.
RETRY_FIRST = 0.2
RETRY_MAX = 10.0

class PatchAnnotations(Protocol):
    """Merge-patches `metadata.annotations` of the pod of that UID (`ObjectSource.patch_pod_annotations`)."""

    def __call__(self, namespace: str, name: str, annotations: Mapping[str, str | None], *,
                 uid: str | None = None) -> Awaitable[None]: ...


Written = Callable[[], Awaitable[None]]


@dataclass
class _Pending:
    status: str
    """The annotation's value, JSON text."""
    owner: str
    """Who asked (a container ID): `cancel` drops a write only for the same owner."""
    on_written: Written | None
    since: float
    uid: str = ""
    """The pod's UID: the write lands on that pod only. Empty: any pod of that name (a record
    of an agent that did not keep the UID, without K8S_POD_UID)."""
    cancelled: bool = False
    """Set by `cancel` while the write is in flight: not retried, not recorded as written."""
    also: Mapping[str, str] | None = None
    """Other annotations written in the same patch (a claimed pod's pod-ips, `reports.Reports.publish`)."""


class StatusPublisher:
    """Writes pods' network-status in the background, retrying until it is written.

    `publish` never blocks and never raises for the API's sake; `idle()` waits until
    nothing is pending (tests, the demo, an orderly stop).
    """

    def __init__(
        self, patch: PatchAnnotations, *, retry_first: float = RETRY_FIRST, retry_max: float = RETRY_MAX
    ) -> None:
        self._patch = patch
        self.retry_first = retry_first
        self.retry_max = retry_max
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._writing: dict[tuple[str, str], _Pending] = {}
        """The write in flight per pod (taken from `_pending`)."""
        self._workers: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self.failed = 0
        """Write attempts that failed (each retry counts), since the agent started."""
        self.written = 0
        """Writes that succeeded."""
        self.last_write_seconds = 0.0
        """How long the latest successful write took, from `publish` to the API's answer."""

    @property
    def pending(self) -> int:
        """Pods whose status waits to be written (or is being written)."""
        return len(self._workers)

    def publish(
        self,
        namespace: str,
        name: str,
        status: Sequence[Mapping[str, Any]] | str,
        *,
        owner: str = "",
        on_written: Written | None = None,
        uid: str = "",
        also: Mapping[str, str] | None = None,
    ) -> None:
        """Queues the pod's whole network-status (entries, or their JSON text), for the pod of
        `uid` (when given), and `also` these annotations in the same write."""
        text = status if isinstance(status, str) else json.dumps(list(status))
        key = (namespace, name)
        self._pending[key] = _Pending(text, owner, on_written, time.monotonic(), uid, also=also)
        if key not in self._workers:
            self._idle.clear()
            task = asyncio.create_task(self._work(key), name=f"network-status {namespace}/{name}")
            self._workers[key] = task

    def cancel(self, namespace: str, name: str, owner: str) -> bool:
        """Drops what `owner` queued for the pod (its DEL came): the write not yet made, and the
        one in flight, which is then neither retried nor recorded. True if it dropped anything."""
        key = (namespace, name)
        dropped = False
        pending = self._pending.get(key)
        if pending is not None and pending.owner == owner:
            del self._pending[key]
            dropped = True
        writing = self._writing.get(key)
        if writing is not None and writing.owner == owner and not writing.cancelled:
            writing.cancelled = True
            dropped = True
        return dropped

    async def idle(self) -> None:
        """Until every queued write is written (or dropped)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Stops writing. What was still pending is lost to this process only: the
        cache records it, and the next agent republishes it (`Agent.start`)."""
        workers = list(self._workers.values())
        for task in workers:
            task.cancel()
        for task in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers.clear()
        self._pending.clear()
        self._writing.clear()
        self._idle.set()

    async def _work(self, key: tuple[str, str]) -> None:
        delay = self.retry_first
        try:
            while (item := self._pending.pop(key, None)) is not None:
                self._writing[key] = item
                try:
                    await self._patch(key[0], key[1], {**(item.also or {}),
                                                       npwg.NETWORK_STATUS_ANNOTATION: item.status},
                                      uid=item.uid or None)
                except Replaced as exc:
                    log.info("pod %s/%s: its network-status is not written: %s (the pod it reports on "
                             "was deleted)", *key, exc)
                    continue
                except NotFound:
                    log.info("pod %s/%s is gone; its network-status is not written", *key)
                    continue
                except Exception as exc:
                    self.failed += 1
                    if item.cancelled:
                        log.info("pod %s/%s: network-status not written (%s); its container was deleted "
                                 "meanwhile, so it is not retried", *key, exc)
                        continue
                    # Unless a newer status arrived meanwhile, this one is written on the next try.
                    self._pending.setdefault(key, item)
                    log.warning(
                        "pod %s/%s: network-status not written (%s); retrying in %.1f s", *key, exc, delay
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.retry_max)
                    continue
                finally:
                    self._writing.pop(key, None)
                delay = self.retry_first
                self.written += 1
                self.last_write_seconds = time.monotonic() - item.since
                log.info("pod %s/%s: network-status written in %.1f ms", *key, self.last_write_seconds * 1000)
                if item.on_written is not None and key not in self._pending and not item.cancelled:
                    try:
                        await item.on_written()
                    except Exception:
                        log.exception("pod %s/%s: recording the written network-status failed", *key)
        finally:
            if self._workers.get(key) is asyncio.current_task():
                del self._workers[key]
            if not self._workers:
                self._idle.set()


__all__ = ["RETRY_FIRST", "RETRY_MAX", "StatusPublisher"]
