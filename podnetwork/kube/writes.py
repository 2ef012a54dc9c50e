"""The operators' writes: the API they need, and the one policy every write follows.

`Api` is what the operators' orchestrations (`podnetwork.kep.controller.Controller`,
`bridge.operator.controller.Bridge`) call. Two things implement it: the operators'
client `podnetwork.kube.client.AsyncApi` (lightkube over HTTP, with retries), and the
demo's adapter over its in-process store (`demo.storeapi`). So one orchestration,
with one applier, runs against a cluster and in the demo.

`write` is the policy both operators follow for a write (`apply` sends a planned
`podnetwork.ground.actions.Patch` through it): a 404 or a 409 is an answer, not an
error, and every outcome is logged once, the same way for both.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from podnetwork.ground.actions import Patch
from podnetwork.kube.client import BY_KIND, ApiError, Conflict, Listing, NotFound, Resource, path_of

logger = logging.getLogger(__name__)


class Api(Protocol):
    """The calls an operator's orchestration makes (`AsyncApi` has these and more)."""

    on_write: Callable[[str, str, str], None] | None
    """Told of every create and patch once it ended: kind, verb, outcome (`AsyncApi.on_write`)."""

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    async def list(self, resource: Resource, namespace: str | None = None) -> Listing: ...

    async def patch(self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None,
                    patch_type: str = "merge", status: bool = False) -> dict[str, Any]: ...

    async def create(self, resource: Resource, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Written:
    """What `write` got: the object as written, or why not."""

    body: dict[str, Any] | None
    failure: ApiError | None = None

    @property
    def conflict(self) -> bool:
        return isinstance(self.failure, Conflict)

    @property
    def gone(self) -> bool:
        return isinstance(self.failure, NotFound)

    @property
    def retry(self) -> bool:
        """Worth writing again later: a conflict (with fresh data) or a failure that is not a 404."""
        return self.failure is not None and not self.gone


async def write(what: str, request: Callable[[], Awaitable[dict[str, Any]]], *, then: str = "") -> Written:
    """The operators' writes: `request()` (its retries included), with 404 and 409 as answers.

    Logged once here, the same way for both operators: a 404 at debug (the object
    is gone, nothing to retry), a conflict at info, a failure as a warning; `then`
    says what the caller does about it (e.g. "retrying in 10s").
    """
    suffix = f"; {then}" if then else ""
    try:
        return Written(await request())
    except NotFound as exc:
        logger.debug("%s: the object is gone", what)
        return Written(None, exc)
    except Conflict as exc:
        logger.info("%s conflicted with a newer change%s", what, suffix)
        return Written(None, exc)
    except ApiError as exc:
        logger.warning("%s failed (%s)%s", what, exc, suffix)
        return Written(None, exc)


def resource_of(kind: str) -> Resource:
    """The resource of a kind the operators write (`podnetwork.kube.client.BY_KIND`)."""
    try:
        return BY_KIND[kind]
    except KeyError:
        raise ValueError(f"no resource is known for kind {kind!r}: add it to podnetwork.kube.client's "
                         "BY_KIND") from None


def what(patch: Patch) -> str:
    """`patch /apis/.../name[/status]`: the request, as the write policy's log lines name it."""
    resource = resource_of(patch.kind)
    return f"patch {path_of(resource, patch.namespace, patch.name)}{'/status' if patch.status else ''}"


async def apply(api: Api, patch: Patch, *, then: str = "") -> Written:
    """Send a planned patch through `write`."""
    resource = resource_of(patch.kind)
    return await write(what(patch), lambda: api.patch(
        resource, patch.name, patch.body, namespace=patch.namespace or None, status=patch.status,
        patch_type=patch.patch_type), then=then)


__all__ = ["Api", "Written", "apply", "resource_of", "what", "write"]
