"""Keeps a `Cache` fed from the API server: list, then watch, per kind (the informer pattern).

One daemon thread per kind (PodNetworks, PodNetworkAttachments in every
namespace, Nodes) runs the official `kubernetes` client's list and watch. A
full list replaces that kind in the cache, so objects deleted while a watch was
down disappear too; once every kind has been listed, the cache is marked
synced and `/readyz` turns ready. A watch that ends or expires (HTTP 410 Gone)
is resumed from the last resourceVersion or, failing that, relisted.

Why threads and not kopf: kopf's watch-streams offer no "initial listing
done" signal to mark the cache synced, and its state-keeping handlers must not
run on every Node; the plain client's list gives that signal by construction.
Requests never wait for these threads: they read the latest snapshot.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from podnetwork import constants
from scheduler_plugin.cache import NODE_KIND, Cache

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Kind:
    kind: str
    list_call: Callable[..., Any]


class Feeder:
    """Watches PodNetworks, PodNetworkAttachments and Nodes into `cache` until `stop()`."""

    def __init__(
        self,
        cache: Cache,
        api: client.ApiClient,
        *,
        watch_timeout: int = 300,
        read_timeout: float = 330.0,
        retry_delay: float = 2.0,
    ) -> None:
        """`watch_timeout`: seconds the server keeps one watch open (then we resume it).
        `read_timeout`: seconds without a byte after which the client gives up on a
        connection (longer than `watch_timeout`, so only dead connections hit it).
        `retry_delay`: seconds between attempts after an error."""
        self._cache = cache
        self._watch_timeout = watch_timeout
        self._read_timeout = read_timeout
        self._retry_delay = retry_delay
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._listed: set[str] = set()
        self._watches: dict[str, watch.Watch] = {}
        self._threads: list[threading.Thread] = []
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)

        def custom_list(plural: str) -> Callable[..., Any]:
            def call(**kwargs: Any) -> Any:
                return custom.list_cluster_custom_object(
                    constants.GROUP, constants.VERSION, plural, **kwargs
                )

            # kubernetes.watch finds the name of the `watch` argument in the docstring.
            call.__doc__ = custom.list_cluster_custom_object.__doc__
            return call

        self._kinds = [
            _Kind(constants.PODNETWORK_KIND, custom_list(constants.PODNETWORK_PLURAL)),
            _Kind(constants.ATTACHMENT_KIND, custom_list(constants.ATTACHMENT_PLURAL)),
            _Kind(NODE_KIND, core.list_node),
        ]

    def start(self) -> None:
        for kind in self._kinds:
            thread = threading.Thread(target=self._run, args=(kind,), name=f"watch-{kind.kind}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            for w in self._watches.values():
                w.stop()
        for thread in self._threads:
            thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _run(self, kind: _Kind) -> None:
        while not self._stop.is_set():
            try:
                version = self._list(kind)
                while version is not None and not self._stop.is_set():
                    version = self._watch(kind, version)
            except ApiException as exc:
                logger.warning("listing or watching %ss failed: %s %s", kind.kind, exc.status, exc.reason)
                self._stop.wait(self._retry_delay)
            except Exception as exc:  # connection errors, timeouts: retry, never die
                logger.warning("listing or watching %ss failed: %s", kind.kind, exc)
                self._stop.wait(self._retry_delay)

    def _list(self, kind: _Kind) -> str:
        response = kind.list_call(_preload_content=False, _request_timeout=(10, self._read_timeout))
        data = json.loads(response.data)
        self._cache.replace(kind.kind, [{**item, "kind": kind.kind} for item in data.get("items") or []])
        with self._lock:
            self._listed.add(kind.kind)
            if len(self._listed) == len(self._kinds) and not self._cache.synced:
                self._cache.mark_synced()
                logger.info("cache synced")
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, kind: _Kind, version: str) -> str | None:
        """Apply one watch's events; the version to resume from, or None to relist."""
        w = watch.Watch()
        with self._lock:
            self._watches[kind.kind] = w
        try:
            for event in w.stream(
                kind.list_call,
                resource_version=version,
                timeout_seconds=self._watch_timeout,
                allow_watch_bookmarks=True,
                _request_timeout=(10, self._read_timeout),
            ):
                version = self._apply(kind, event) or version
                if self._stop.is_set():
                    break
        except ApiException as exc:
            if exc.status == 410:  # our resourceVersion is too old: start over
                return None
            raise
        finally:
            with self._lock:
                self._watches.pop(kind.kind, None)
        return version

    def _apply(self, kind: _Kind, event: Mapping[str, Any]) -> str | None:
        kind_of_event, obj = event.get("type"), event.get("raw_object") or {}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        # ERROR events never reach here: kubernetes.watch raises them as ApiException.
        if kind_of_event in ("ADDED", "MODIFIED"):
            self._cache.upsert({**obj, "kind": kind.kind})
        elif kind_of_event == "DELETED":
            self._cache.delete({**obj, "kind": kind.kind})
        return str(version) if version else None
