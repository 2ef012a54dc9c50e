"""An in-process object store with the Kubernetes API server's semantics.

`podnetwork demo` runs every component on one machine with no cluster; this
store stands in for the API server. It keeps what the components rely on, so
code that works here works against a real server (and code that would only work
against a naive fake fails here):

- objects keyed by (apiVersion, kind, namespace, name), cluster-scoped kinds
  without a namespace; every read returns a copy;
- `metadata.resourceVersion` from one global counter, changing on every write;
  an update or patch carrying a stale resourceVersion fails with 409 Conflict
  (optimistic concurrency, API conventions "Concurrency Control and Consistency");
- `metadata.generation` starts at 1 and increases only when something outside
  `metadata` and `status` changes;
- the status subresource: create drops `status`, update and patch of the main
  resource ignore `status`, `update_status` / `patch(..., subresource="status")`
  change nothing but `status` (and the resourceVersion);
- finalizers: deleting an object that has finalizers sets
  `metadata.deletionTimestamp` and keeps it; removing the last finalizer then
  completes the delete; no finalizer may be added to an object being deleted;
- garbage collection: once an object is gone, each object whose `ownerReferences` all
  name objects that are gone is deleted too (the garbage collector's background
  propagation, the default of a delete), at once rather than a moment later;
- JSON merge patch (RFC 7386): `null` removes a key, objects merge, lists replace;
- admission: mutating then validating hooks per kind on create and update, as
  the API server calls webhooks;
- watches: subscribers get ADDED / MODIFIED / DELETED events in write order,
  after the write, never re-entrantly (a subscriber that writes in its callback
  has its own events delivered after the current ones; so do writes in `batch`).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import itertools
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podnetwork.ground import constants

Obj = dict[str, Any]
log = logging.getLogger(__name__)


class EventType(StrEnum):
    """The watch event types of the Kubernetes API."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class Event:
    """One watch event: what happened, and the object after it happened."""

    type: EventType
    object: Obj

    @property
    def key(self) -> tuple[str, str, str | None, str]:
        return key_of(self.object)


class ApiError(Exception):
    """An error the API server would return: HTTP code, reason and message."""

    code: int = 500
    reason: str = "InternalError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"


class Conflict(ApiError):
    code = 409
    reason = "Conflict"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


@dataclass(frozen=True)
class Resource:
    """What the store knows of a kind: its plural name and its scope."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool
    unconditional_update: bool = True
    """Whether an update may omit `metadata.resourceVersion` (true for core kinds; custom
    resources require it, as the API server's custom-resource strategy does)."""

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0] if "/" in self.api_version else ""

    @property
    def qualified(self) -> str:
        """`plural.group` as the API server names a resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


#: The kinds the demo uses. Others can be added with `Store.register`.
BUILTIN_RESOURCES: tuple[Resource, ...] = (
    Resource("v1", "Pod", "pods", True),
    Resource("v1", "Node", "nodes", False),
    Resource("v1", "Namespace", "namespaces", False),
    Resource("v1", "Event", "events", True),
    Resource("v1", "Service", "services", True),
    Resource(f"{constants.ENDPOINTSLICE_GROUP}/{constants.ENDPOINTSLICE_VERSION}", "EndpointSlice",
             constants.ENDPOINTSLICE_PLURAL, True),
    Resource(constants.API_VERSION, constants.PODNETWORK_KIND, constants.PODNETWORK_PLURAL, False, False),
    Resource(constants.API_VERSION, constants.ATTACHMENT_KIND, constants.ATTACHMENT_PLURAL, True, False),
    Resource(constants.NAD_API_VERSION, constants.NAD_KIND, constants.NAD_PLURAL, True, False),
    Resource(constants.OPTIONS_API_VERSION, constants.OPTIONS_KIND, constants.OPTIONS_PLURAL, True, False),
    Resource(constants.POLICY_API_VERSION, constants.POLICY_KIND, constants.POLICY_PLURAL, True, False),
)

Key = tuple[str, str, str | None, str]
Watcher = Callable[[Event], None]
#: A mutating hook gets (operation, new object, old object or None) and returns the object to store.
Mutator = Callable[[str, Obj, Obj | None], Obj]
#: A validating hook gets (operation, new object, old object or None) and raises `Invalid` to refuse.
Validator = Callable[[str, Obj, Obj | None], None]

CREATE = "CREATE"
UPDATE = "UPDATE"


class Names(BaseModel):
    """What the store reads of any kind's metadata before its schema: the name, the namespace and
    the resourceVersion, spelled as `metav1.ObjectMeta` spells them. Only these three: a merge
    patch's metadata carries nulls elsewhere (an annotation being removed), and the rest of an
    object is kept as it was sent, not as a view would rewrite it."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    name: str | None = None
    namespace: str | None = None
    resource_version: str | None = Field(None, alias="resourceVersion")


class _Head(BaseModel):
    """Any object as the store meets it: its type and the `Names` of its metadata (null: absent)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: str = Field("", alias="apiVersion")
    kind: str = ""
    metadata: Names | None = None


def _head(obj: Mapping[str, Any]) -> _Head:
    """`obj`'s type and names; BadRequest when they are not text, as the API server refuses to decode
    such a body (the store then keeps nothing)."""
    try:
        return _Head.model_validate(obj)
    except ValidationError as exc:
        where = ".".join(str(part) for part in exc.errors()[0]["loc"])
        raise BadRequest(f"the object does not decode: {where}: {exc.errors()[0]['msg']}") from None


def names_of(obj: Mapping[str, Any]) -> Names:
    """The name, namespace and resourceVersion of any kind's object or merge patch."""
    return _head(obj).metadata or Names()


def key_of(obj: Mapping[str, Any]) -> Key:
    head = _head(obj)
    meta = head.metadata or Names()
    return (head.api_version, head.kind, meta.namespace, meta.name or "")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: returns a new value; neither argument is changed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def rfc3339(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_SERVER_META = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Everything that counts for `metadata.generation`: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Store:
    """The in-process API server. Thread-safe; callbacks run on the writer's thread."""

    def __init__(self, clock: Callable[[], datetime.datetime] = _utcnow) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._objects: dict[Key, Obj] = {}
        self._resources: dict[tuple[str, str], Resource] = {}
        self._versions = itertools.count(1)
        self._watchers: dict[int, tuple[Watcher, str | None, str | None]] = {}
        self._watch_ids = itertools.count(1)
        self._pending: deque[tuple[Event, list[Watcher]]] = deque()
        self._dispatching = False
        self.callback_errors: list[str] = []
        """Exceptions raised by watch callbacks (logged, and kept for the demo's checks)."""
        self._mutators: dict[tuple[str, str], list[Mutator]] = {}
        self._validators: dict[tuple[str, str], list[Validator]] = {}
        for res in BUILTIN_RESOURCES:
            self.register(res)

    # -- schema -------------------------------------------------------------------

    def register(self, resource: Resource) -> None:
        """Make a kind known (as installing a CRD does)."""
        self._resources[(resource.api_version, resource.kind)] = resource

    def resource(self, api_version: str, kind: str) -> Resource:
        try:
            return self._resources[(api_version, kind)]
        except KeyError:
            raise NotFound(
                f'the server could not find the requested resource: no kind "{kind}" '
                f'is registered for version "{api_version}"'
            ) from None

    def resources(self) -> list[Resource]:
        """Every registered kind."""
        return list(self._resources.values())

    def add_admission(
        self, api_version: str, kind: str, *, mutate: Mutator | None = None, validate: Validator | None = None
    ) -> None:
        """Register admission hooks for a kind: all mutators run before all validators."""
        if mutate is not None:
            self._mutators.setdefault((api_version, kind), []).append(mutate)
        if validate is not None:
            self._validators.setdefault((api_version, kind), []).append(validate)

    # -- reads ----------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        res = self.resource(api_version, kind)
        key = self._key(res, name, namespace)
        with self._lock:
            obj = self._objects.get(key)
            if obj is None:
                raise NotFound(f'{res.qualified} "{name}" not found')
            return copy.deepcopy(obj)

    def find(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """Like `get`, but None when the object does not exist."""
        try:
            return self.get(api_version, kind, name, namespace)
        except NotFound:
            return None

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[Obj]:
        """Objects of a kind, in one namespace or (namespace None) in all, ordered by key."""
        res = self.resource(api_version, kind)
        with self._lock:
            found = [
                copy.deepcopy(obj)
                for (av, k, ns, _), obj in sorted(self._objects.items(), key=lambda kv: _sort_key(kv[0]))
                if av == res.api_version and k == res.kind and (namespace is None or ns == namespace)
            ]
        return found

    @property
    def resource_version(self) -> str:
        """The latest resourceVersion handed out (as a list's `metadata.resourceVersion`)."""
        with self._lock:
            return str(self._last_version)

    _last_version = 0

    # -- writes ---------------------------------------------------------------------

    def create(self, obj: Mapping[str, Any]) -> Obj:
        res, name, namespace = self._identify(obj)
        new = copy.deepcopy(dict(obj))
        meta = new.setdefault("metadata", {})
        if meta.get("resourceVersion"):
            raise BadRequest("resourceVersion should not be set on objects to be created")
        with self._lock:
            key = self._key(res, name, namespace)
            if key in self._objects:
                raise AlreadyExists(f'{res.qualified} "{name}" already exists')
            new = self._admit(res, CREATE, new, None)
            if key_of(new)[2:] != key_of(obj)[2:]:
                raise Invalid("admission may not change an object's name or namespace")
            new.pop("status", None)
            meta = new["metadata"]
            for field in _SERVER_META:
                meta.pop(field, None)
            if not meta.get("finalizers"):
                meta.pop("finalizers", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = rfc3339(self._clock())
            meta["generation"] = 1
            meta["resourceVersion"] = self._next_version()
            self._objects[key] = new
            self._queue(EventType.ADDED, new)
            stored = copy.deepcopy(new)
        self._dispatch()
        return stored

    def update(self, obj: Mapping[str, Any]) -> Obj:
        """Replace an object (PUT). `status` in the body is ignored (status subresource)."""
        res, name, namespace = self._identify(obj)
        self._require_version(res, name, obj)
        with self._lock:
            current = self._existing(res, name, namespace)
            self._check_version(res, obj, current)
            new = self._admit(res, UPDATE, copy.deepcopy(dict(obj)), copy.deepcopy(current))
            result = self._replace(res, current, new, status_only=False)
        self._dispatch()
        return result

    def update_status(self, obj: Mapping[str, Any]) -> Obj:
        """Replace only `status` (PUT on the status subresource)."""
        res, name, namespace = self._identify(obj)
        self._require_version(res, name, obj)
        with self._lock:
            current = self._existing(res, name, namespace)
            self._check_version(res, obj, current)
            result = self._replace(res, current, copy.deepcopy(dict(obj)), status_only=True)
        self._dispatch()
        return result

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Obj:
        """Apply a JSON merge patch. `subresource="status"` patches only `status`.

        A `metadata.resourceVersion` in the patch is a precondition, as on a real server.
        """
        if subresource not in (None, "status"):
            raise NotFound(f"the server could not find the requested subresource {subresource!r}")
        if not isinstance(patch, Mapping):
            raise BadRequest("a merge patch must be a JSON object")
        res = self.resource(api_version, kind)
        with self._lock:
            current = self._existing(res, name, namespace)
            self._check_version(res, patch, current)
            merged = merge_patch(current, dict(patch))
            if subresource == "status":
                result = self._replace(res, current, merged, status_only=True)
            else:
                merged = self._admit(res, UPDATE, merged, copy.deepcopy(current))
                result = self._replace(res, current, merged, status_only=False)
        self._dispatch()
        return result

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """Delete; with finalizers, mark it (deletionTimestamp) and return it, else return None."""
        res = self.resource(api_version, kind)
        with self._lock:
            current = self._existing(res, name, namespace)
            result = self._delete(self._key(res, name, namespace), current)
        self._dispatch()
        return result

    # -- watches --------------------------------------------------------------------

    def subscribe(
        self,
        callback: Watcher,
        api_version: str | None = None,
        kind: str | None = None,
        *,
        replay: bool = True,
    ) -> Callable[[], None]:
        """Call `callback(event)` for every change of the kind (all kinds when None).

        With `replay`, existing objects arrive first as ADDED (list-then-watch, as an
        informer does), so a subscriber never misses an object created before it.
        Returns a function that cancels the subscription.
        """
        if api_version is not None and kind is not None:
            self.resource(api_version, kind)
        with self._lock:
            wid = next(self._watch_ids)
            self._watchers[wid] = (callback, api_version, kind)
            if replay:
                for key in sorted(self._objects, key=_sort_key):
                    obj = self._objects[key]
                    if _matches(obj, api_version, kind):
                        self._pending.append((Event(EventType.ADDED, copy.deepcopy(obj)), [callback]))
        self._dispatch()

        def cancel() -> None:
            with self._lock:
                self._watchers.pop(wid, None)

        return cancel

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Writes made inside the block deliver their events after it, as the writes of a watch
        callback are delivered after the callback returns (a watcher that handles what it
        listed before watching works as it would in its own callback)."""
        with self._lock:
            outer = self._dispatching
            self._dispatching = True
        try:
            yield
        finally:
            if not outer:
                with self._lock:
                    self._dispatching = False
                self._dispatch()

    # -- internals ------------------------------------------------------------------

    def _key(self, res: Resource, name: str, namespace: str | None) -> Key:
        if res.namespaced and not namespace:
            raise BadRequest(f"{res.qualified} is namespaced: a namespace is required")
        if not res.namespaced and namespace:
            raise BadRequest(f"{res.qualified} is cluster-scoped: no namespace may be given")
        if not name:
            raise Invalid(f"{res.qualified}: metadata.name: Required value")
        return (res.api_version, res.kind, namespace if res.namespaced else None, name)

    def _identify(self, obj: Mapping[str, Any]) -> tuple[Resource, str, str | None]:
        if not isinstance(obj, Mapping):
            raise BadRequest("an object must be a JSON object")
        head = _head(obj)
        res = self.resource(head.api_version, head.kind)
        meta = head.metadata or Names()
        return res, meta.name or "", meta.namespace

    def _existing(self, res: Resource, name: str, namespace: str | None) -> Obj:
        obj = self._objects.get(self._key(res, name, namespace))
        if obj is None:
            raise NotFound(f'{res.qualified} "{name}" not found')
        return obj

    @staticmethod
    def _require_version(res: Resource, name: str, body: Mapping[str, Any]) -> None:
        if not res.unconditional_update and not names_of(body).resource_version:
            raise Invalid(
                f'{res.qualified} "{name}" is invalid: metadata.resourceVersion: Invalid value: 0: '
                "must be specified for an update"
            )

    @staticmethod
    def _check_version(res: Resource, body: Mapping[str, Any], current: Obj) -> None:
        wanted = names_of(body).resource_version
        have = current["metadata"]["resourceVersion"]
        if wanted and wanted != have:
            name = current["metadata"]["name"]
            raise Conflict(
                f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again"
            )

    def _admit(self, res: Resource, operation: str, obj: Obj, old: Obj | None) -> Obj:
        for mutate in self._mutators.get((res.api_version, res.kind), []):
            obj = mutate(operation, obj, old)
        for validate in self._validators.get((res.api_version, res.kind), []):
            validate(operation, obj, old)
        return obj

    def _replace(self, res: Resource, current: Obj, new: Obj, *, status_only: bool) -> Obj:
        """Store `new` over `current` (lock held), keeping what the caller may not change."""
        key = key_of(current)
        if status_only:
            stored = copy.deepcopy(current)
            if "status" in new:
                stored["status"] = copy.deepcopy(new["status"])
            else:
                stored.pop("status", None)
        else:
            stored = copy.deepcopy(new)
            stored["apiVersion"], stored["kind"] = current["apiVersion"], current["kind"]
            if "status" in current:
                stored["status"] = copy.deepcopy(current["status"])
            else:
                stored.pop("status", None)
            meta = stored.setdefault("metadata", {})
            for field in _SERVER_META:
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
                else:
                    meta.pop(field, None)
            meta["name"] = current["metadata"]["name"]
            if res.namespaced:
                meta["namespace"] = current["metadata"]["namespace"]
            deleting = bool(current["metadata"].get("deletionTimestamp"))
            added = set(meta.get("finalizers") or []) - set(current["metadata"].get("finalizers") or [])
            if deleting and added:
                raise Forbidden(
                    f'{res.qualified} "{meta["name"]}" is being deleted: no new finalizers can be '
                    f"added ({', '.join(sorted(added))})"
                )
            if not meta.get("finalizers"):
                meta.pop("finalizers", None)
            if _spec_part(stored) != _spec_part(current):
                meta["generation"] = current["metadata"].get("generation", 1) + 1
        if stored == current:
            # A write that changes nothing is a no-op on a real server: same resourceVersion, no event.
            return copy.deepcopy(current)
        if (
            not status_only
            and stored["metadata"].get("deletionTimestamp")
            and not stored["metadata"].get("finalizers")
        ):
            self._remove(key, stored)
            result = copy.deepcopy(stored)
        else:
            stored["metadata"]["resourceVersion"] = self._next_version()
            self._objects[key] = stored
            self._queue(EventType.MODIFIED, stored)
            result = copy.deepcopy(stored)
        return result

    def _delete(self, key: Key, current: Obj) -> Obj | None:
        """Delete (lock held): with finalizers, mark it and return it; else remove it, return None."""
        meta = current["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(current)
            updated = copy.deepcopy(current)
            updated["metadata"]["deletionTimestamp"] = rfc3339(self._clock())
            updated["metadata"]["deletionGracePeriodSeconds"] = 0
            updated["metadata"]["resourceVersion"] = self._next_version()
            self._objects[key] = updated
            self._queue(EventType.MODIFIED, updated)
            return copy.deepcopy(updated)
        self._remove(key, current)
        return None

    def _remove(self, key: Key, last: Obj) -> None:
        del self._objects[key]
        gone = copy.deepcopy(last)
        gone["metadata"]["resourceVersion"] = self._next_version()
        self._queue(EventType.DELETED, gone)
        self._collect(last["metadata"].get("uid"))

    def _collect(self, owner_uid: str | None) -> None:
        """The garbage collector (lock held): the dependents of `owner_uid` whose owners are all gone
        are deleted, as background propagation deletes them (their finalizers, if any, hold them)."""
        if not owner_uid:
            return
        uids = {obj["metadata"].get("uid") for obj in self._objects.values()}
        for key, obj in list(self._objects.items()):
            owners = [ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or []
                      if isinstance(ref, Mapping)]
            if owner_uid in owners and not any(uid in uids for uid in owners) and key in self._objects:
                self._delete(key, self._objects[key])

    def _next_version(self) -> str:
        self._last_version = next(self._versions)
        return str(self._last_version)

    def _queue(self, type_: EventType, obj: Obj) -> None:
        watchers = [cb for cb, av, k in self._watchers.values() if _matches(obj, av, k)]
        if watchers:
            self._pending.append((Event(type_, copy.deepcopy(obj)), watchers))

    def _dispatch(self) -> None:
        """Deliver queued events outside the lock; a nested call (a callback that writes) returns
        at once and the outer loop delivers the new events after the current ones."""
        with self._lock:
            if self._dispatching:
                return
            self._dispatching = True
        try:
            while True:
                with self._lock:
                    if not self._pending:
                        self._dispatching = False
                        return
                    event, watchers = self._pending.popleft()
                for cb in watchers:
                    try:
                        cb(Event(event.type, copy.deepcopy(event.object)))
                    except Exception as exc:
                        # A watcher's bug must not fail the write that triggered it (an
                        # informer's handler cannot fail an API call either); keep it visible.
                        log.exception("watch callback %r failed on %s", cb, event.type)
                        self.callback_errors.append(
                            f"{getattr(cb, '__qualname__', cb)}: {type(exc).__name__}: {exc}"
                        )
        except BaseException:
            with self._lock:
                self._dispatching = False
            raise


def _matches(obj: Mapping[str, Any], api_version: str | None, kind: str | None) -> bool:
    return (api_version is None or obj.get("apiVersion") == api_version) and (
        kind is None or obj.get("kind") == kind
    )


def _sort_key(key: Key) -> tuple[str, str, str, str]:
    av, k, ns, name = key
    return (av, k, ns or "", name)
