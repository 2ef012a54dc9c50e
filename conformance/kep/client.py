"""The suite's one way to reach the cluster: lightkube (through `podnetwork.kube.client`), an
explicit timeout on every request, and polling with an explicit deadline.

The suite only talks to the Kubernetes API, so it can test any implementation: nothing
here knows how the components under test are built.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from conformance.kep import views
from podnetwork.kube import client as kube
from podnetwork.kube.credentials import Credentials

T = TypeVar("T")

Resource = kube.Resource
PodNetwork = kube.PodNetwork
PodNetworkAttachment = kube.PodNetworkAttachment
Pod = kube.Pod
Node = kube.Node
Namespace = kube.Namespace
Event = kube.Event
NetworkAttachmentDefinition = kube.NetworkAttachmentDefinition
MultiNetworkPolicy = kube.MultiNetworkPolicy
Service = kube.Service
EndpointSlice = kube.EndpointSlice
ApiError = kube.ApiError
NotFound = kube.NotFound
# Dynamic Resource Allocation (resource.k8s.io/v1, GA in Kubernetes v1.34), for DRAPlacement: the
# suite's own resources, as no layer of podnetwork reads these kinds.
DRA_GROUP = "resource.k8s.io"
DeviceClass = create_global_resource(DRA_GROUP, "v1", "DeviceClass", "deviceclasses")
ResourceSlice = create_global_resource(DRA_GROUP, "v1", "ResourceSlice", "resourceslices")
ResourceClaim = create_namespaced_resource(DRA_GROUP, "v1", "ResourceClaim", "resourceclaims")
ResourceClaimTemplate = create_namespaced_resource(DRA_GROUP, "v1", "ResourceClaimTemplate",
                                                   "resourceclaimtemplates")


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `settle` bounds waiting for a controller to act; `schedule` for a pod to be bound
    (or held back); `request` bounds each API request."""

    request: float = 10.0
    settle: float = 30.0
    schedule: float = 30.0
    poll: float = 0.2


class TimedOut(AssertionError):
    """A condition was not met before its deadline; the message says what and the last state seen."""


class Client:
    """Requests with a timeout and no retry but one (a test must see a refusal as it is)."""

    def __init__(self, credentials: Credentials, timeouts: Timeouts) -> None:
        self.timeouts = timeouts
        # One retry after 1 s for what may pass (no answer, 429, 5xx): a shaky connection should
        # not fail a test, and a refusal (4xx) is never retried.
        self.api = kube.AsyncApi(credentials, timeout=timeouts.request, backoffs=(1.0,))

    async def close(self) -> None:
        await self.api.close()

    async def create(self, resource: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.api.create(resource, body)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when the API answers 404."""
        try:
            return await self.api.get(resource, name, namespace)
        except kube.NotFound:
            return None

    async def list(self, resource: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        return (await self.api.list(resource, namespace)).items

    async def patch(self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None,
                    status: bool = False) -> dict[str, Any]:
        return await self.api.patch(resource, name, patch, namespace=namespace, status=status)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        """Delete; an object already gone is fine."""
        with contextlib.suppress(kube.NotFound):
            await self.api.delete(resource, name, namespace)

    async def get_path(self, path: str) -> Any:
        return await self.api.get_path(path)

    async def served(self, resource: Resource) -> bool:
        """Whether the API serves `resource` (its group version lists its plural)."""
        version = kube.api_version_of(resource)
        path = f"/apis/{version}" if "/" in version else f"/api/{version}"
        try:
            listed = await self.get_path(path)
        except kube.ApiError as exc:
            if exc.status == 404:
                return False
            raise
        names = {str(r.get("name")) for r in (listed.get("resources") or []) if isinstance(r, dict)}
        return kube.plural_of(resource) in names

    async def eventually(self, what: str, check: Callable[[], Awaitable[T | None]], *,
                         timeout: float | None = None) -> T:
        """Poll `check` until it returns something other than None (or False); `TimedOut` naming
        `what` and the last thing `check` said at the deadline. `check` may raise `Unmet(state)`
        to say why it is not met yet."""
        loop = asyncio.get_running_loop()
        seconds = self.timeouts.settle if timeout is None else timeout
        deadline = loop.time() + seconds
        last = "nothing checked yet"
        while True:
            try:
                result = await check()
                if result is not None and result is not False:
                    return result
                last = "not yet"
            except Unmet as exc:
                last = str(exc)
            if loop.time() >= deadline:
                raise TimedOut(f"{what}: not met in {seconds:g}s (last seen: {last})")
            await asyncio.sleep(self.timeouts.poll)

    async def never(self, what: str, check: Callable[[], Awaitable[str | None]], *,
                    for_seconds: float) -> None:
        """Poll `check` for `for_seconds`; it returns None while all is well, or what went wrong, which
        fails at once. For "stays Pending", "is not deleted"."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + for_seconds
        while loop.time() < deadline:
            problem = await check()
            if problem is not None:
                raise AssertionError(f"{what}: {problem}")
            await asyncio.sleep(self.timeouts.poll)


class Unmet(Exception):
    """Raised by an `eventually` check: not met yet, and why (shown if the deadline passes)."""


def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The condition `type_` in `status.conditions`, or None."""
    if not obj:
        return None
    return views.read(obj).condition(type_)


def shown(obj: Any) -> str:
    """An object or condition in a message: compact JSON, cut at 300 characters."""
    text = json.dumps(obj, sort_keys=True, default=str)
    return text if len(text) <= 300 else text[:297] + "..."
