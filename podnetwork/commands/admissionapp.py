"""The HTTP app serving the controller's pod webhooks (and `/healthz`), as its command runs it.

The decisions are `podnetwork.kep.admission`'s; the body is parsed at the edge by
`podnetwork.kep.admissionreview.answer` (400 for a body that is not an
AdmissionReview, a refusal naming the fields for a pod of the wrong shape). What
this app adds is what a decision needs from the cluster, read through the
callables the command gives it: the pod's namespace, the PodNetwork of each
attachment, and SubjectAccessReviews; and, when those reads fail, a 503 with the
reason, so that the webhook's failurePolicy decides.
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations
# at runtime, and `Request` is imported inside `app`.
import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from podnetwork.ground import constants
from podnetwork.kep import admission, admissionreview
from podnetwork.kep.admission import (
    UNSEEN,
    USE_CHECK_SECONDS,
    AttachmentNetwork,
    MayUse,
    NamespaceFetch,
    NamespaceLookup,
    NamespaceUnavailable,
    UseUnavailable,
    Webhook,
)
from podnetwork.kep.admissionreview import AdmissionRequest, AdmissionReview

_SILENT = f"the API server did not answer within {USE_CHECK_SECONDS:g}s; retry the request"


async def _no_attachments(namespace: str, name: str) -> str | None:
    return None


class Webhooks:
    """The two webhooks' decisions, with what they read from the cluster (see `app`)."""

    def __init__(self, namespace_of: NamespaceLookup, *, enabled: bool = True,
                 fetch_namespace: NamespaceFetch | None = None, may_use: MayUse | None = None,
                 attachment_network: AttachmentNetwork | None = None) -> None:
        self.namespace_of = namespace_of
        self.enabled = enabled
        self.fetch_namespace = fetch_namespace
        self.may_use = may_use
        self.attachment_network = attachment_network or _no_attachments

    async def namespace(self, name: str) -> Mapping[str, Any] | None:
        """The namespace from the cache; one never seen is read once. Raises `Unavailable`."""
        found = self.namespace_of(name)
        if found is not UNSEEN:
            return found
        if self.fetch_namespace is None:
            return None
        try:
            return await self.fetch_namespace(name)
        except NamespaceUnavailable as exc:
            raise admissionreview.Unavailable(
                f'cannot read namespace "{name}" to apply its networks profile '
                f"({constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION}): {exc}; retry the request") from None

    async def decide(self, body: AdmissionReview, webhook: Webhook) -> dict[str, Any]:
        """One webhook's answer to one review."""
        on = self.enabled
        may_use = self.may_use if on else None
        ns = body.request.namespace
        found = await self.namespace(ns) if ns and on and admission.needs_namespace(body, webhook) else None
        recorded = None
        if webhook is Webhook.MUTATING and may_use is not None:
            recorded = await self.record(body.request, found)
        answer = admission.review(body, webhook, enabled=on, namespace=found, attachments=recorded)
        if webhook is Webhook.VALIDATING and may_use is not None and answer["response"]["allowed"]:
            refusal = await self.authorize(body.request, may_use)
            if refusal is not None:
                return refusal
        return answer

    async def record(self, request: AdmissionRequest,
                     found: Mapping[str, Any] | None) -> dict[str, str | None]:
        """The PodNetwork each attachment to record names now. Raises `Unavailable`."""
        names = admission.attachments_to_record(request, found)
        what = "cannot read the pod's PodNetworkAttachments to record their PodNetworks"
        try:
            async with asyncio.timeout(USE_CHECK_SECONDS):
                return {name: await self.attachment_network(request.namespace, name) for name in names}
        except TimeoutError:
            raise admissionreview.Unavailable(f"{what}: {_SILENT}") from None
        except UseUnavailable as exc:
            raise admissionreview.Unavailable(f"{what}: {exc}; retry the request") from None

    async def authorize(self, request: AdmissionRequest, check: MayUse) -> dict[str, Any] | None:
        """The refusal of a pod naming a network it may not use, or None. Raises `Unavailable`."""
        what = "cannot check the permission to use the pod's PodNetworks"
        try:
            async with asyncio.timeout(USE_CHECK_SECONDS):
                return await admission.authorize_use(request, check, self.attachment_network)
        except TimeoutError:
            raise admissionreview.Unavailable(f"{what}: {_SILENT}") from None
        except UseUnavailable as exc:
            raise admissionreview.Unavailable(f"{what}: {exc}; retry the request") from None


def app(namespace_of: NamespaceLookup, *, enabled: bool = True,
        fetch_namespace: NamespaceFetch | None = None, may_use: MayUse | None = None,
        attachment_network: AttachmentNetwork | None = None) -> Any:
    """The FastAPI application serving both webhooks (and `/healthz`).

    `namespace_of(name)` answers from the caller's watch-fed cache: the
    Namespace object, or None when it sets no profile, or `UNSEEN` when the
    cache has never seen that namespace. A namespace created by the same
    `kubectl apply` as its pods can reach admission before its watch event, so
    an unseen namespace is read once with `fetch_namespace(name)` (which caches
    it; it raises `NamespaceUnavailable` when it cannot). When that read fails,
    the request fails with 503 and the reason, and the webhook's failurePolicy
    decides: defaulting to `default` instead would pin the pods to the wrong
    networks for good (their networks annotation is immutable).

    With `may_use` (`--enforce-use-permission`), the mutating webhook records the
    PodNetwork of each attachment the pod names (`admission.mutate`, resolved with
    `attachment_network`), and the validating webhook refuses a
    new pod that names a PodNetwork neither its requester nor its ServiceAccount may
    use (`admission.authorize_use`; attachments are resolved with `attachment_network`).
    It runs after every mutating webhook, so networks from a namespace profile are
    checked too. When the API cannot answer, the request fails with 503, as above.

    A body that is not an AdmissionReview gets 400 naming what is wrong; a pod of
    the wrong shape is refused in the answer (`podnetwork.kep.admissionreview`).
    """
    from fastapi import FastAPI, Request, Response

    hooks = Webhooks(namespace_of, enabled=enabled, fetch_namespace=fetch_namespace, may_use=may_use,
                     attachment_network=attachment_network)
    api = FastAPI(title="podnetwork admission", docs_url=None, redoc_url=None, openapi_url=None)

    def decider(webhook: Webhook) -> Callable[[AdmissionReview], Awaitable[dict[str, Any]]]:
        async def decide(body: AdmissionReview) -> dict[str, Any]:
            return await hooks.decide(body, webhook)
        return decide

    mutating_decision, validating_decision = decider(Webhook.MUTATING), decider(Webhook.VALIDATING)

    @api.post(admission.MUTATE_PATH)
    async def mutating(request: Request) -> Response:
        return await admissionreview.answer(request, mutating_decision)

    @api.post(admission.VALIDATE_PATH)
    async def validating(request: Request) -> Response:
        return await admissionreview.answer(request, validating_decision)

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return api


__all__ = ["Webhooks", "app"]
