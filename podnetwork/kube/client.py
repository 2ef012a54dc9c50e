"""lightkube clients made from `credentials`, our calls, retries and list+watch.

Every API call this project makes itself goes through here: the operators'
writes and side watches (`AsyncApi`), the agent's reads, the extender's
list+watch (`list_and_watch`), migrate and explain/graph (`Api`). kopf keeps
its own aiohttp client for its watches, logged in from the same credentials
(`credentials.kopf_login`).

- TLS and authentication are ours, not lightkube's: lightkube is given a
  transport (its public `transport=` parameter) that presents the client
  certificate, verifies the server as the kubeconfig says and sets the
  Authorization header of every request (token files re-read, exec plugins
  re-run on expiry or on a 401). lightkube's own kubeconfig reading would
  support one file, no v1 exec plugin and no contexts without a user.
- Objects stay plain dicts as the API server sent them: every resource is a
  lightkube generic resource (a dict), also the core kinds, whose typed models
  would drop fields they do not know and reshape the rest.
- Errors become `ApiError` (`NotFound` 404, `Conflict` 409, `Unreachable`
  when no answer came, `Malformed` when the answer is not the JSON asked for), each
  naming the request.

This module is what callers import: it re-exports its parts, the resources
(`podnetwork.kube.resources`), the errors (`apierrors`) and the clients with our
transport (`transport`).
- `AsyncApi` retries what may pass (no answer, 429, 5xx) with `BACKOFFS`,
  the operators' shared policy; `podnetwork.kube.writes.write` is the operators'
  one way to write: a 404 or 409 is an answer, not an error.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import httpx2
import lightkube
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import APIGroup, ObjectMeta
from lightkube.types import OnErrorAction, OnErrorResult, PatchType

from podnetwork.kube.apierrors import (
    FAILURES,
    MALFORMED,
    ApiError,
    Conflict,
    Gone,
    Malformed,
    NotFound,
    Unreachable,
    error_of,
    unwrap,
)
from podnetwork.kube.credentials import Authenticator, Credentials
from podnetwork.kube.resources import (
    BY_KIND,
    ClusterKopfPeering,
    ClusterRole,
    ClusterRoleBinding,
    CronJob,
    DaemonSet,
    Deployment,
    EndpointSlice,
    Event,
    Job,
    MultiNetworkPolicy,
    MutatingWebhookConfiguration,
    Namespace,
    NetworkAttachmentDefinition,
    NetworkSelectionOptions,
    Node,
    Pod,
    PodNetwork,
    PodNetworkAttachment,
    ReplicaSet,
    Resource,
    Role,
    RoleBinding,
    Secret,
    Service,
    StatefulSet,
    SubjectAccessReview,
    ValidatingWebhookConfiguration,
    api_version_of,
    kind_of,
    namespaced,
    path_of,
    plural_of,
)
from podnetwork.kube.transport import AsyncTransport, Transport, async_client, sync_client

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _any(resource: Resource) -> Any:
    """A resource for lightkube's calls, whose overloads do not take our union of generic kinds."""
    return resource


# --- the calls -------------------------------------------------------------------------------------

#: Seconds between the attempts of a call that may pass (no answer, 429, 5xx): kopf's default
#: `error_backoffs`, the retries the operators' writes had when they went through kopf's client.
#: A 429's Retry-After, when longer, wins.
BACKOFFS: tuple[float, ...] = (1, 1, 2, 3, 5, 8, 13, 21)

PATCH_TYPES = {"merge": PatchType.MERGE, "strategic": PatchType.STRATEGIC, "json": PatchType.JSON,
               "apply": PatchType.APPLY}


@dataclass(frozen=True)
class Listing:
    items: list[dict[str, Any]]
    resource_version: str


def _plain(obj: Any) -> dict[str, Any]:
    return dict(obj.to_dict() if hasattr(obj, "to_dict") else obj)


def _with_kind(resource: Resource, item: Mapping[str, Any]) -> dict[str, Any]:
    # Items of a list carry no apiVersion/kind on a real API server.
    return {"apiVersion": api_version_of(resource), "kind": kind_of(resource), **item}


def _scope(resource: Resource, namespace: str | None) -> str | None:
    if not namespaced(resource):
        return None
    return namespace if namespace else lightkube.ALL_NS


def _delete_options(uid: str | None) -> bytes:
    body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
    if uid:
        body["preconditions"] = {"uid": uid}
    return json.dumps(body).encode()


def _what(verb: str, resource: Resource, namespace: str | None, name: str | None) -> str:
    scope = f"in {namespace}" if namespace else ""
    where = f"{namespace}/{name}" if namespace and name else (name or scope)
    return f"{verb} {kind_of(resource)} {where}".rstrip()


class Api:
    """Blocking calls for the one-shot commands (migrate, explain/graph); no retries."""

    def __init__(self, credentials: Credentials, *, timeout: float = 30.0, page_size: int = 500) -> None:
        self.credentials = credentials
        self.timeout = timeout
        self.page_size = page_size
        self._client: lightkube.Client | None = None
        self._raw: httpx2.Client | None = None

    @property
    def client(self) -> lightkube.Client:
        if self._client is None:
            self._client = sync_client(self.credentials, timeout=self.timeout)
        return self._client

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except FAILURES as exc:
            raise error_of(unwrap(exc), what) from None

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = self._call(_what("get", resource, namespace, name),
                         lambda: self.client.get(_any(resource), name, namespace=_scope(resource, namespace)))
        return _with_kind(resource, _plain(obj))

    def list(self, resource: Resource, namespace: str | None = None) -> Listing:
        """Every object (of a namespace, or everywhere), following pagination."""

        def run() -> Listing:
            pages = self.client.list(_any(resource), namespace=_scope(resource, namespace),
                                     chunk_size=self.page_size)
            items = [_with_kind(resource, _plain(item)) for item in pages]
            return Listing(items, _list_version(pages))

        return self._call(f"list {plural_of(resource)}", run)

    def patch(self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None,
              patch_type: str = "merge", field_manager: str | None = None, force: bool = False,
              status: bool = False) -> dict[str, Any]:
        target = resource.Status if status else resource
        verb = "apply" if patch_type == "apply" else "patch"
        obj = self._call(_what(verb, resource, namespace, name), lambda: self.client.patch(
            target, name, patch, namespace=namespace, patch_type=PATCH_TYPES[patch_type],
            field_manager=field_manager, force=force))
        return _plain(obj)

    def _raw_request(self, what: str, method: str, path: str, **kwargs: Any) -> httpx2.Response:
        """A request lightkube cannot make, through an httpx client over the same transport
        (credentials, TLS). Raises `ApiError` for an error status."""
        if self._raw is None:
            self._raw = httpx2.Client(base_url=self.credentials.server, timeout=self.timeout,
                                      transport=Transport(self.credentials, Authenticator(self.credentials)))
        raw = self._raw
        response = self._call(what, lambda: raw.request(method, path, **kwargs))
        if response.status_code >= 400:
            try:
                response.raise_for_status()
            except httpx2.HTTPStatusError as exc:
                raise error_of(exc, what) from None
        return response

    def delete(self, resource: Resource, name: str, namespace: str | None = None, *,
               uid: str | None = None) -> None:
        """Delete; with `uid`, only the object of that uid (a recreated one is left alone).
        lightkube's delete sends no DeleteOptions, hence the raw request."""
        self._raw_request(_what("delete", resource, namespace, name), "DELETE",
                          path_of(resource, namespace, name), content=_delete_options(uid),
                          headers={"Content-Type": "application/json"})

    def discover(self, group: str, name: str) -> Resource | None:
        """The resource of API group `group` whose kind or plural is `name` (a parametersRef may
        give either), from ours or else from the API's discovery documents; None if none."""
        for resource in BY_KIND.values():
            version = api_version_of(resource)
            if (version.rpartition("/")[0] == group) and name in (kind_of(resource), plural_of(resource)):
                return resource
        what = f"discover {name} in API group {group or 'core'}"
        if group:
            # lightkube's APIGroup model (from_dict is typed as returning its base class)
            document = self._raw_request(what, "GET", f"/apis/{group}").json()
            preferred = cast(APIGroup, APIGroup.from_dict(document)).preferredVersion
            version = preferred.version if preferred is not None else ""
            path = f"/apis/{group}/{version}"
        else:
            version, path = "v1", "/api/v1"
        for item in self._raw_request(what, "GET", path).json().get("resources") or []:
            plural, kind = str(item.get("name") or ""), str(item.get("kind") or "")
            if "/" in plural or name not in (plural, kind):
                continue  # a subresource, or another kind
            create = create_namespaced_resource if item.get("namespaced") else create_global_resource
            found: Resource = create(group, version, kind, plural)
            return found
        return None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._raw is not None:
            self._raw.close()
            self._raw = None


def answer_problem(credentials: Credentials, *, timeout: float = 10.0) -> str | None:
    """Why the server of `credentials` is no Kubernetes API server, from one GET /version: an
    answer that is not HTTP, or a success that is not a JSON object. None when it answers as
    one, and when it does not answer at all (an operator then waits for it, as kopf does).

    The operators ask before kopf starts: kopf's first discovery request would end them with
    a traceback on such an answer."""
    with httpx2.Client(base_url=credentials.server, timeout=timeout,
                       transport=Transport(credentials, Authenticator(credentials))) as raw:
        try:
            response = raw.get("/version")
        except httpx2.RemoteProtocolError as exc:
            reason = f"not HTTP: {str(exc)[:200]}"
        except (httpx2.HTTPError, OSError):
            return None
        else:
            if not response.is_success:
                return None
            try:
                body = response.json()
            except MALFORMED as exc:
                body, reason = None, f"GET /version: not JSON ({str(exc)[:200]})"
            else:
                reason = f"GET /version: a JSON {type(body).__name__}, not an object"
            if isinstance(body, dict):
                return None
    return (f"the server at {credentials.server} does not answer as a Kubernetes API server ({reason}); "
            "check the server of --kubeconfig (and --context)")


def _list_version(pages: Any) -> str:
    try:
        return str(pages.resourceVersion or "")
    except lightkube.NotReadyError:  # an empty list that was never iterated
        return ""


class AsyncApi:
    """asyncio calls over one lightkube client, made when first used (in the loop that uses it).

    Calls that may pass are retried with `backoffs` (default `BACKOFFS`; the
    agent passes none: the runtime retries a CNI call).
    """

    def __init__(self, credentials: Credentials, *, timeout: float = 30.0,
                 backoffs: Sequence[float] = BACKOFFS, page_size: int = 500) -> None:
        self.credentials = credentials
        self.timeout = timeout
        self.backoffs = tuple(backoffs)
        self.page_size = page_size
        self._client: lightkube.AsyncClient | None = None
        self.on_write: Callable[[str, str, str], None] | None = None
        """Told of every create and patch, once it ended (retries included): the kind, the verb
        (`create`, `patch`, `patch_status`) and the outcome (`written`, `conflict`, `not_found`,
        `failed`). The operators count their writes with it (`podnetwork.cli.metrics`)."""

    @property
    def client(self) -> lightkube.AsyncClient:
        if self._client is None:
            self._client = async_client(self.credentials, timeout=self.timeout)
        return self._client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def call(self, what: str, fn: Callable[[lightkube.AsyncClient], Awaitable[T]]) -> T:
        """`fn(client)`, retried while it fails in a way that may pass. Raises `ApiError`."""
        attempt = 0
        while True:
            try:
                return await fn(self.client)
            except FAILURES as exc:
                error = error_of(unwrap(exc), what)
            if not error.transient or attempt >= len(self.backoffs):
                raise error
            delay = self.backoffs[attempt]
            if error.retry_after is not None and error.retry_after > delay:
                delay = error.retry_after
            attempt += 1
            logger.debug("%s; attempt %d of %d in %ss", error, attempt + 1, len(self.backoffs) + 1, delay)
            await asyncio.sleep(delay)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = await self.call(_what("get", resource, namespace, name),
                              lambda c: c.get(_any(resource), name, namespace=_scope(resource, namespace)))
        return _with_kind(resource, _plain(obj))

    async def list(self, resource: Resource, namespace: str | None = None, *,
                   fields: Mapping[str, str] | None = None,
                   labels: Mapping[str, str] | None = None) -> Listing:
        """Every object of `resource` (in `namespace`), those matching the field selector `fields`
        (`{"spec.nodeName": "node-a"}`) and the label selector `labels` when given."""
        async def run(client: lightkube.AsyncClient) -> Listing:
            pages = client.list(_any(resource), namespace=_scope(resource, namespace),
                                chunk_size=self.page_size, fields=dict(fields) if fields else None,
                                labels=dict(labels) if labels else None)
            items = [_with_kind(resource, _plain(item)) async for item in pages]
            return Listing(items, _list_version(pages))

        return await self.call(f"list {plural_of(resource)}", run)

    async def patch(self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None,
                    patch_type: str = "merge", status: bool = False) -> dict[str, Any]:
        target = resource.Status if status else resource
        what = _what("patch", resource, namespace, name) + ("/status" if status else "")
        verb = "patch_status" if status else "patch"
        obj = await self._written(resource, verb, self.call(what, lambda c: c.patch(
            target, name, patch, namespace=namespace, patch_type=PATCH_TYPES[patch_type])))
        return _plain(obj)

    async def create(self, resource: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        obj = _any(resource)(dict(body))
        meta = obj.metadata or ObjectMeta()  # lightkube's typed view of the generic body's metadata
        what = _what("create", resource, meta.namespace, meta.name)
        return _plain(await self._written(resource, "create", self.call(what, lambda c: c.create(obj))))

    async def _written(self, resource: Resource, verb: str, request: Awaitable[T]) -> T:
        if self.on_write is None:
            return await request
        outcome = "failed"
        try:
            result = await request
            outcome = "written"
            return result
        except NotFound:
            outcome = "not_found"
            raise
        except Conflict:
            outcome = "conflict"
            raise
        finally:
            self.on_write(kind_of(resource), verb, outcome)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, *,
                     dry_run: bool = False) -> None:
        """Delete (the API server may keep the object while finalizers remain); with `dry_run`, only
        ask whether the API server (its admission included) would. Raises `ApiError`."""
        await self.call(_what("delete", resource, namespace, name),
                        lambda c: c.delete(_any(resource), name, namespace=_scope(resource, namespace),
                                           dry_run=dry_run))

    async def get_path(self, path: str) -> Any:
        """The JSON at `path` for what lightkube has no call for (`/version`, discovery), over the
        same transport (credentials, TLS). Raises `ApiError`."""
        what = f"get {path}"

        async def run(_: lightkube.AsyncClient) -> Any:
            transport = AsyncTransport(self.credentials, Authenticator(self.credentials))
            async with httpx2.AsyncClient(base_url=self.credentials.server, timeout=self.timeout,
                                          transport=transport) as raw:
                response = await raw.get(path)
                response.raise_for_status()
                return response.json()

        return await self.call(what, run)


# --- list+watch ------------------------------------------------------------------------------------


def _raise(_: Exception, __: int) -> OnErrorResult:
    return OnErrorResult(OnErrorAction.RAISE)


async def _events(api: AsyncApi, resource: Resource, namespace: str | None, version: str,
                  watch_timeout: int, fields: Mapping[str, str] | None = None,
                  ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    stream = api.client.watch(_any(resource), namespace=_scope(resource, namespace),
                              resource_version=version or None, server_timeout=watch_timeout, on_error=_raise,
                              fields=dict(fields) if fields else None)
    async for kind, obj in stream:
        yield kind, _with_kind(resource, _plain(obj))


async def list_and_watch(api: AsyncApi, resource: Resource, *,
                         on_list: Callable[[list[dict[str, Any]]], None],
                         on_event: Callable[[str, dict[str, Any]], None],
                         namespace: str | None = None, watch_timeout: int = 300,
                         idle_timeout: float | None = None, retry_delay: float = 2.0,
                         fields: Mapping[str, str] | None = None) -> None:
    """Keep a consumer equal to the API's objects of `resource`, until cancelled (the informer pattern).

    `on_list` gets every object after each (re-)listing, to replace what it holds
    as a whole (objects deleted while no watch was open go too); `on_event` gets
    each ADDED, MODIFIED or DELETED after it. A watch the server ends (after
    `watch_timeout` s) resumes from the last resourceVersion; one that says 410
    Gone, fails or stays silent for `idle_timeout` s (default `watch_timeout` + 30:
    only a dead connection does) is replaced by a new listing after `retry_delay`
    s on errors. Errors are logged, never raised. `fields` is a field selector both the
    listing and the watch carry (`{"spec.nodeName": node}`: a node agent's own pods).
    """
    idle = idle_timeout if idle_timeout is not None else watch_timeout + 30.0
    what = f"listing or watching {plural_of(resource)}"
    while True:
        try:
            listing = await api.list(resource, namespace, fields=fields)
            on_list(listing.items)
            version = listing.resource_version
            while True:
                events = _events(api, resource, namespace, version, watch_timeout, fields)
                try:
                    while True:
                        try:
                            # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a
                            # cancellation that comes as the watch fails, and this loop would
                            # then outlive the operator that cancelled it (a hang at SIGTERM).
                            async with asyncio.timeout(idle):
                                kind, obj = await anext(events)
                        except StopAsyncIteration:
                            break
                        except TimeoutError:
                            break  # silent for too long: a dead connection; resume from `version`
                        except FAILURES as exc:
                            raise error_of(unwrap(exc), f"watch {plural_of(resource)}") from None
                        # why: one key of each raw event, read before the consumer parses the body its way
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            on_event(kind, obj)
                finally:
                    await events.aclose()
        except asyncio.CancelledError:
            raise
        except Gone:
            logger.debug("%s: resourceVersion expired, listing again", what)
            continue
        except Exception as exc:  # logged, then listed again: a watcher must outlive API trouble
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError from None  # cancelled while the call failed
            logger.warning("%s failed: %s; again in %ss", what, exc, retry_delay)
        await asyncio.sleep(retry_delay)


__all__ = [
    "BACKOFFS",
    "BY_KIND",
    "Api",
    "ApiError",
    "AsyncApi",
    "ClusterKopfPeering",
    "ClusterRole",
    "ClusterRoleBinding",
    "Conflict",
    "CronJob",
    "DaemonSet",
    "Deployment",
    "EndpointSlice",
    "Event",
    "Gone",
    "Job",
    "Listing",
    "Malformed",
    "MultiNetworkPolicy",
    "MutatingWebhookConfiguration",
    "Namespace",
    "NetworkAttachmentDefinition",
    "NetworkSelectionOptions",
    "Node",
    "NotFound",
    "Pod",
    "PodNetwork",
    "PodNetworkAttachment",
    "ReplicaSet",
    "Resource",
    "Role",
    "RoleBinding",
    "Secret",
    "Service",
    "StatefulSet",
    "SubjectAccessReview",
    "Unreachable",
    "ValidatingWebhookConfiguration",
    "answer_problem",
    "api_version_of",
    "async_client",
    "error_of",
    "kind_of",
    "list_and_watch",
    "namespaced",
    "path_of",
    "plural_of",
    "sync_client",
]
