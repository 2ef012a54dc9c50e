"""Keeps a `Cache` fed from the API server: list, then watch, per kind (the informer pattern).

One daemon thread runs an event loop with one list+watch per kind
(PodNetworks, PodNetworkAttachments in every namespace, Nodes), through
`podnetwork.kube.client.list_and_watch`. A full list replaces that kind in the
cache, so objects deleted while a watch was down disappear too; once every kind
has been listed, the cache is marked synced and `/readyz` turns ready. A watch
that ends, or stays silent past `read_timeout` (a dead connection), is resumed
from the last resourceVersion; one that expires (HTTP 410 Gone) or fails leads
to a new listing.

Why not kopf: kopf's watch-streams offer no "initial listing done" signal to
mark the cache synced, and its state-keeping handlers must not run on every
Node; a list gives that signal by construction. Requests never wait for this
thread: they read the latest snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from podnetwork.kube import client as kube
from scheduler_plugin.cache import Cache

logger = logging.getLogger(__name__)

KINDS: tuple[kube.Resource, ...] = (kube.PodNetwork, kube.PodNetworkAttachment, kube.Node)


class Feeder:
    """Watches PodNetworks, PodNetworkAttachments and Nodes into `cache` until `stop()`."""

    def __init__(
        self,
        cache: Cache,
        api: kube.AsyncApi,
        *,
        watch_timeout: int = 300,
        read_timeout: float = 330.0,
        retry_delay: float = 2.0,
    ) -> None:
        """`api`: the client to list and watch with (its client is made in the feeder's loop).
        `watch_timeout`: seconds the server keeps one watch open (then we resume it).
        `read_timeout`: seconds without an event after which a watch counts as dead and is
        opened again (longer than `watch_timeout`, so only dead connections hit it).
        `retry_delay`: seconds between attempts after an error."""
        self._cache = cache
        self._api = api
        self._watch_timeout = watch_timeout
        self._read_timeout = read_timeout
        self._retry_delay = retry_delay
        self._lock = threading.Lock()
        self._listed: set[str] = set()
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        started = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(started),), name="feeder",
                                        daemon=True)
        self._thread.start()
        started.wait(10)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            # The loop may be closing already; then the thread is ending anyway.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    async def _main(self, started: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        started.set()
        tasks = [asyncio.create_task(self._feed(kind)) for kind in KINDS]
        try:
            if not self._stopped.is_set():
                await self._stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._api.close()

    def _listed_one(self, kind: str) -> None:
        with self._lock:
            self._listed.add(kind)
            if len(self._listed) == len(KINDS) and not self._cache.synced:
                self._cache.mark_synced()
                logger.info("cache synced")

    async def _feed(self, resource: kube.Resource) -> None:
        kind = kube.kind_of(resource)

        def on_list(items: list[dict[str, Any]]) -> None:
            self._cache.replace(kind, [{**item, "kind": kind} for item in items])
            self._listed_one(kind)

        def on_event(event: str, obj: dict[str, Any]) -> None:
            if event == "DELETED":
                self._cache.delete({**obj, "kind": kind})
            else:
                self._cache.upsert({**obj, "kind": kind})

        await kube.list_and_watch(self._api, resource, on_list=on_list, on_event=on_event,
                                  watch_timeout=self._watch_timeout, idle_timeout=self._read_timeout,
                                  retry_delay=self._retry_delay)
