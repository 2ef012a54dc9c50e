"""The agent's cache of the objects a pod's networks name: list + watch, per kind, on each node.

An ADD reads the pod, then the NetworkAttachmentDefinitions, PodNetworks,
PodNetworkAttachments and NetworkSelectionOptions its networks name: one GET each,
the API server's time on the pod's start-up path. `CachedObjects` keeps those four
kinds, cluster-wide, by list + watch (as an informer does), and answers from them.

Rules (docs/benchmarks.md, "watch cache"):

- **The pod is always read fresh** (a GET per ADD): its annotations can change until
  the moment its sandbox starts (KEP "Pod spec": the networks are set at creation, but
  the NPWG annotation is a plain annotation).
- **Staleness**: an object is answered from the cache only while its kind's watch is
  connected and has caught up with its list; between a broken watch and the next list,
  every read is a GET. An answer is therefore as old as the watch's delivery delay, the
  same as any informer's: an object changed or deleted a moment before the ADD may be
  read as it was.
- **A miss is never an answer**: an object not in the cache is read by GET (created a
  moment ago and not yet delivered, or beyond the bound), and a 404 is a 404.
- **Bounded** by count and by memory (docs/limits.md): at most `max_objects` objects per
  kind (`MAX_OBJECTS`), holding at most `max_bytes` together (`MAX_KIND_BYTES`), none
  larger than `max_object_bytes` (`MAX_OBJECT_BYTES`); "bytes" are what the object holds
  as Python objects (`held_bytes`), so a NAD a tenant made of a megabyte of config, or
  of a thousand tiny labels, costs what it really costs. What does not fit is left to a
  GET each time an ADD names it: the object is valid, and an ADD needs it, so it is read
  (its memory is the ADD's while it runs) but never kept. The objects are kept as the API
  server sent them, without `managedFields`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from bridge import npwg, translate
from bridge.agent.kube.objects import KubernetesObjects, read_object
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.kube import lite

log = logging.getLogger(__name__)

#: Objects kept per kind. A NAD is ~1-2 KB as a dict: 4 kinds x 1,000 stay within a few MB.
MAX_OBJECTS = 1000
#: Memory one kept object may hold, bytes (`held_bytes`); a typical NAD holds 3-4 KiB.
MAX_OBJECT_BYTES = 256 * 1024
#: Memory the kept objects of one kind may hold together, bytes: 4 kinds stay within 32 MiB.
MAX_KIND_BYTES = 8 * 1024 * 1024
#: Seconds between attempts to list again after a watch failed (doubling up to RETRY_MAX).
RETRY_FIRST = 0.5
RETRY_MAX = 30.0


@dataclass(frozen=True)
class Kind:
    name: str
    group: str
    version: str
    plural: str
    namespaced: bool
    selector: str = ""
    """A label selector the list and the watch carry (the API server filters: less to hear)."""

    @property
    def path(self) -> str:
        """The collection across namespaces (`group` "" for the core group)."""
        if not self.group:
            return f"/api/{self.version}/{self.plural}"
        return f"/apis/{self.group}/{self.version}/{self.plural}"


NAD = Kind(constants.NAD_KIND, constants.NAD_GROUP, constants.NAD_VERSION, constants.NAD_PLURAL, True)
PODNETWORK = Kind(constants.PODNETWORK_KIND, constants.GROUP, constants.VERSION,
                  constants.PODNETWORK_PLURAL, False)
ATTACHMENT = Kind(constants.ATTACHMENT_KIND, constants.GROUP, constants.VERSION,
                  constants.ATTACHMENT_PLURAL, True)
OPTIONS = Kind(constants.OPTIONS_KIND, constants.OPTIONS_GROUP, constants.OPTIONS_VERSION,
               constants.OPTIONS_PLURAL, True)
KINDS = (NAD, PODNETWORK, ATTACHMENT, OPTIONS)
"""The kinds `CachedObjects` keeps whole (bounded)."""
#: Kinds MultiNetworkPolicy enforcement follows (`bridge.agent.policy.state`), beside NAD and
#: PODNETWORK: never kept whole, only what policies read of them.
POD = Kind("Pod", "", "v1", "pods", True)
NAMESPACE = Kind("Namespace", "", "v1", "namespaces", False)
POLICY = Kind(constants.POLICY_KIND, constants.POLICY_GROUP, constants.POLICY_VERSION,
              constants.POLICY_PLURAL, True)
#: Kinds the Services' ClusterIPs follow (`bridge.agent.services.state`), beside PODNETWORK: only the
#: Services that tell kube-proxy to leave them to us, and only our EndpointSlices.
SERVICE = Kind("Service", "", "v1", "services", True,
               f"{constants.SERVICE_PROXY_NAME_LABEL}={constants.SERVICE_PROXY_NAME}")
ENDPOINTSLICE = Kind("EndpointSlice", "discovery.k8s.io", "v1", "endpointslices", True,
                     f"{constants.ENDPOINTSLICE_MANAGED_BY_LABEL}={constants.ENDPOINTSLICE_MANAGED_BY}")


class Listener(Protocol):
    """Hears one list + watch: every object after each listing, each event, each failure."""

    def listed(self, kind: Kind, items: list[dict[str, Any]]) -> None: ...

    def changed(self, kind: Kind, event: str, obj: dict[str, Any]) -> None: ...

    def failed(self, kind: Kind, exc: Exception) -> None: ...


class KeptKinds(abc.ABC):
    """A `Listener` that keeps what it needs of `kinds` (the policies' state, the Services' state).

    `ready` once every kind was listed, or found missing (a 404: no CRD, nothing of it).
    `version` grows and `on_change` is called after each change that can change a decision: an
    event that changes nothing kept does neither. A failed watch keeps what was read (the
    watch lists again); a missing kind is said once, and again when it is served.
    """

    kinds: tuple[Kind, ...] = ()
    label: str = ""
    """What the log lines start with ("policies", "services")."""
    log: logging.Logger = log

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self.on_change = on_change
        self.synced: set[str] = set()
        """Kinds listed at least once (or found missing)."""
        self.missing: set[str] = set()
        """Kinds whose list answered 404 the last time."""
        self.version = 0

    @property
    def ready(self) -> bool:
        return all(kind.name in self.synced for kind in self.kinds)

    def _changed(self) -> None:
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    # --- what a subclass keeps ---------------------------------------------------------------------

    @abc.abstractmethod
    def _clear(self, kind: Kind) -> bool:
        """Forgets every object of `kind`; whether there was any."""

    @abc.abstractmethod
    def _put(self, kind: Kind, obj: dict[str, Any]) -> bool:
        """Keeps what is needed of `obj`; whether that changed anything kept."""

    @abc.abstractmethod
    def _delete(self, kind: Kind, obj: dict[str, Any]) -> bool:
        """Forgets `obj`; whether anything was kept of it."""

    def _missing_said(self, kind: Kind) -> str:
        """What the log says, once, when `kind` answers 404."""
        return (f"{kind.path} answered 404 (no {kind.name} kind served): there are none; looking again "
                "every 30 s at most")

    # --- Listener ----------------------------------------------------------------------------------

    def listed(self, kind: Kind, items: list[dict[str, Any]]) -> None:
        if kind.name in self.missing:
            self.missing.discard(kind.name)
            self.log.warning("%s: the %s kind is served now (%s); following it", self.label, kind.name,
                             kind.path)
        self._clear(kind)
        for obj in items:
            self._put(kind, obj)
        self.synced.add(kind.name)
        self._changed()

    def changed(self, kind: Kind, event: str, obj: dict[str, Any]) -> None:
        if self._delete(kind, obj) if event == "DELETED" else self._put(kind, obj):
            self._changed()

    def failed(self, kind: Kind, exc: Exception) -> None:
        if getattr(exc, "status", None) != 404:
            self.log.info("%s: the watch of %ss ended (%s); keeping what was read, listing them again",
                          self.label, kind.name, exc)
            return
        if kind.name not in self.missing:
            self.missing.add(kind.name)
            self.log.warning("%s: %s", self.label, self._missing_said(kind))
        had = kind.name not in self.synced or self._clear(kind)
        self.synced.add(kind.name)
        if had:
            self._changed()


async def follow(api: Any, kind: Kind, listener: Listener) -> None:
    """List and watch `kind` cluster-wide for `listener` until cancelled (`lite.list_and_watch`:
    a failure is heard, then the kind is listed again after a backoff of up to RETRY_MAX)."""
    await lite.list_and_watch(
        api, kind.path, on_list=lambda items: listener.listed(kind, items),
        on_event=lambda event, obj: listener.changed(kind, event, obj),
        on_error=lambda exc: listener.failed(kind, exc),
        params={"labelSelector": kind.selector} if kind.selector else None,
        retry_first=RETRY_FIRST, retry_max=RETRY_MAX)

_Key = tuple[str | None, str]


def held_bytes(value: Any, limit: int) -> int:
    """The memory a JSON-shaped value holds: `sys.getsizeof` summed over its dicts, lists,
    strings and numbers (shared ones counted each time: an upper bound). Counting stops once
    past `limit`, so measuring a huge object costs no more than measuring a small one."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        total += sys.getsizeof(item)
        if total > limit:
            break
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


class Mirror:
    """One kind's objects as the API has them, by list, then watch from the list's version."""

    def __init__(self, api: Any, kind: Kind, max_objects: int = MAX_OBJECTS, *,
                 max_bytes: int = MAX_KIND_BYTES, max_object_bytes: int = MAX_OBJECT_BYTES) -> None:
        self.api, self.kind, self.max_objects = api, kind, max_objects
        self.max_bytes, self.max_object_bytes = max_bytes, max_object_bytes
        self.objects: dict[_Key, dict[str, Any]] = {}
        self.sizes: dict[_Key, int] = {}
        self.bytes = 0
        """What the kept objects hold together (`held_bytes`)."""
        self.synced = False
        """True while the watch runs from a complete list: only then is `get` answered."""
        self.relists = 0
        self.left_out: set[_Key] = set()
        """Objects not kept because a bound was reached (read by GET); at most `max_objects` of
        them are named here, so that the names cannot grow past a bound either."""
        self.listeners: list[Listener] = []
        """Others that hear this kind's list and watch (one watch per kind, whoever reads it):
        added before `run`, they hear every object, kept within the bounds or not."""

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        if not self.synced:
            return None
        return self.objects.get((namespace if self.kind.namespaced else None, name))

    def _key(self, obj: Mapping[str, Any]) -> _Key | None:
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            return None
        namespace = meta.get("namespace") if self.kind.namespaced else None
        return (namespace if isinstance(namespace, str) else None, meta["name"])

    def _drop(self, key: _Key) -> None:
        self.objects.pop(key, None)
        self.bytes -= self.sizes.pop(key, 0)

    def _put(self, obj: dict[str, Any], *, listing: bool = False) -> None:
        key = self._key(obj)
        if key is None:
            return
        obj["metadata"].pop("managedFields", None)
        size = held_bytes(obj, self.max_object_bytes)
        if size > self.max_object_bytes:
            why = f"holds more than {self.max_object_bytes} bytes"
        elif key not in self.objects and len(self.objects) >= self.max_objects:
            why = f"is beyond the bound of {self.max_objects} objects"
        elif self.bytes - self.sizes.get(key, 0) + size > self.max_bytes:
            why = f"is beyond the bound of {self.max_bytes} bytes for the kind"
        else:
            self.bytes += size - self.sizes.get(key, 0)
            self.objects[key], self.sizes[key] = obj, size
            return
        self._drop(key)  # never serve an older version of what is no longer kept
        if len(self.left_out) < self.max_objects:
            self.left_out.add(key)
        if not listing:
            where = "/".join(part for part in key if part)
            log.info("watch cache: %s %s %s: read from the API when an ADD names it", self.kind.name,
                     where[:300], why)

    async def run(self) -> None:
        """Lists and watches until cancelled; a failure unsyncs the kind until the next list."""
        def listed(items: list[dict[str, Any]]) -> None:
            self.objects.clear()
            self.sizes.clear()
            self.bytes = 0
            self.left_out.clear()
            for obj in items:
                self._put(obj, listing=True)
            if self.left_out:
                log.warning("watch cache: %d %ss beyond the bounds (%d objects, %d bytes, %d bytes each) "
                            "are read from the API", len(self.left_out), self.kind.name, self.max_objects,
                            self.max_bytes, self.max_object_bytes)
            self.relists += 1
            self.synced = True
            for listener in self.listeners:
                listener.listed(self.kind, items)

        def event(kind: str, obj: dict[str, Any]) -> None:
            if kind in ("ADDED", "MODIFIED"):
                self._put(obj)
            elif (key := self._key(obj)) is not None:
                self._drop(key)
                self.left_out.discard(key)
            for listener in self.listeners:
                listener.changed(self.kind, kind, obj)

        def failed(exc: Exception) -> None:
            self.synced = False
            log.info("watch cache: %s watch ended (%s); reading them from the API until listed again",
                     self.kind.name, exc)
            for listener in self.listeners:
                listener.failed(self.kind, exc)

        try:
            await lite.list_and_watch(self.api, self.kind.path, on_list=listed, on_event=event,
                                      on_error=failed, retry_first=RETRY_FIRST, retry_max=RETRY_MAX)
        finally:
            self.synced = False


class CachedObjects:
    """`KubernetesObjects` whose NADs, PodNetworks, attachments and options come from `Mirror`s."""

    def __init__(self, source: KubernetesObjects, *, max_objects: int = MAX_OBJECTS,
                 max_bytes: int = MAX_KIND_BYTES, max_object_bytes: int = MAX_OBJECT_BYTES) -> None:
        self.source = source
        self.mirrors = {kind.name: Mirror(source.api, kind, max_objects, max_bytes=max_bytes,
                                          max_object_bytes=max_object_bytes) for kind in KINDS}
        self._tasks: list[asyncio.Task[None]] = []
        self.hits = 0
        self.misses = 0

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(mirror.run(), name=f"watch {name}")
                           for name, mirror in self.mirrors.items()]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.source.close()

    def _cached(self, kind: str, namespace: str | None, name: str) -> Any:
        obj = self.mirrors[kind].get(namespace, name)
        if obj is None:
            self.misses += 1
            return None
        self.hits += 1
        return read_object(kind, namespace, name, obj)

    async def get_pod(self, namespace: str, name: str) -> Pod:
        return await self.source.get_pod(namespace, name)  # always fresh (module docstring)

    async def get_nad(self, namespace: str, name: str) -> npwg.NetworkAttachmentDefinition:
        nad: npwg.NetworkAttachmentDefinition | None = self._cached(constants.NAD_KIND, namespace, name)
        return nad if nad is not None else await self.source.get_nad(namespace, name)

    async def get_podnetwork(self, name: str) -> translate.PodNetwork:
        pn: translate.PodNetwork | None = self._cached(constants.PODNETWORK_KIND, None, name)
        return pn if pn is not None else await self.source.get_podnetwork(name)

    async def get_attachment(self, namespace: str, name: str) -> translate.PodNetworkAttachment:
        pna: translate.PodNetworkAttachment | None = self._cached(constants.ATTACHMENT_KIND, namespace, name)
        return pna if pna is not None else await self.source.get_attachment(namespace, name)

    async def get_selection_options(self, namespace: str, name: str) -> translate.NetworkSelectionOptions:
        opts: translate.NetworkSelectionOptions | None = self._cached(
            constants.OPTIONS_KIND, namespace, name)
        return opts if opts is not None else await self.source.get_selection_options(namespace, name)

    async def get_service(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.source.get_service(namespace, name)  # read when node access reconciles: rare

    async def list_endpoint_slices(self, namespace: str, service: str) -> list[dict[str, Any]]:
        return await self.source.list_endpoint_slices(namespace, service)

    async def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        # Only for a pod's claim the DRA driver did not record: rare, never cached.
        return await self.source.get_resource_claim(namespace, name)

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, uid: str | None = None
    ) -> None:
        await self.source.patch_pod_annotations(namespace, name, annotations, uid=uid)


__all__ = ["ENDPOINTSLICE", "KINDS", "MAX_KIND_BYTES", "MAX_OBJECTS", "MAX_OBJECT_BYTES", "NAMESPACE", "POD",
           "POLICY", "SERVICE",
           "CachedObjects", "KeptKinds", "Kind", "Listener", "Mirror", "follow", "held_bytes"]
