"""The HTTP app serving the bridge's pod webhooks (and `/healthz`), as its command runs it.

The decisions are `bridge.operator.admission`'s (mutating) and `bridge.operator.selectionuse`'s
(validating, `--enforce-use-permission`), over what the bridge controller knows now, and for
the validating one what the API lists when that memory cannot vouch for a NAD
(`PodNetworkListing`); the body is parsed at the edge by `podnetwork.kep.admissionreview.answer`
(400 for a body that is not an AdmissionReview, a refusal naming the fields for a pod of the
wrong shape, 503 with the reason when a SubjectAccessReview cannot be asked or the PodNetworks
cannot be listed).
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations
# at runtime, and `Request` is imported inside `app`.
import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge import translate
from bridge.operator import admission, selectionuse
from podnetwork.kep import admissionreview
from podnetwork.kep.admissionreview import AdmissionReview
from podnetwork.kep.usepermission import USE_CHECK_SECONDS, MayUse, UseUnavailable
from podnetwork.kube import client as kube
from podnetwork.kube import writes

_WHAT = (f"cannot check the permission to use the PodNetworks of the pod's NPWG selection "
         f"({selectionuse.SELECTION})")
_UNCONFIRMED = ("the bridge could not confirm which PodNetworks back the NetworkAttachmentDefinitions "
                "the selection names")
#: Seconds the validating webhook waits for its LIST of PodNetworks (its retries included), within
#: the `USE_CHECK_SECONDS` of the whole check: the SubjectAccessReviews keep the rest.
PODNETWORK_LIST_SECONDS = 1.5

logger = logging.getLogger(__name__)


@dataclass
class PodNetworkListing:
    """`selectionuse.ListPodNetworks` over the bridge's API client: a LIST of PodNetworks, without
    resourceVersion, so the API server answers a consistent read (what etcd holds now), not its
    watch cache, which lags as the bridge's memory does."""

    api: writes.Api | None
    timeout: float = PODNETWORK_LIST_SECONDS
    on_read: Callable[[str], None] | None = None
    """Told of every LIST once it ended: `listed` or `failed` (the bridge's metrics count them)."""

    async def podnetworks(self) -> translate.Objects:
        """The PodNetworks as the API lists them now. Raises `UseUnavailable` saying why not."""
        try:
            items = await self._list()
        except UseUnavailable:
            self._count("failed")
            raise
        self._count("listed")
        logger.debug("listed %d PodNetworks for the validating webhook", len(items))
        return translate.Objects.from_objects(items)

    async def _list(self) -> list[dict[str, Any]]:
        if self.api is None:
            raise UseUnavailable(f"{_UNCONFIRMED}: the bridge has not connected to the API yet")
        try:
            async with asyncio.timeout(self.timeout):
                return (await self.api.list(kube.PodNetwork)).items
        except TimeoutError:
            raise UseUnavailable(f"{_UNCONFIRMED}: the API server did not answer a LIST of PodNetworks "
                                 f"within {self.timeout:g}s") from None
        except kube.ApiError as exc:
            raise UseUnavailable(f"{_UNCONFIRMED}: {exc}") from None

    def _count(self, outcome: str) -> None:
        if self.on_read is not None:
            self.on_read(outcome)


async def authorize(body: AdmissionReview, objects: translate.Objects, may_use: MayUse | None,
                    podnetworks: selectionuse.ListPodNetworks | None = None) -> dict[str, Any]:
    """The validating webhook's answer: allowed, or the refusal of a selection reaching a
    PodNetwork neither the requester nor the pod's ServiceAccount may use. Without `may_use`
    (the flag off, a configuration left registered) everything is allowed. `podnetworks` lists
    them when `objects` cannot vouch for a NAD (`selectionuse.authorize`). Raises
    `admissionreview.Unavailable` when the API cannot answer within `USE_CHECK_SECONDS`."""
    request = body.request
    if may_use is None:
        return admissionreview.allowed(request.uid)
    try:
        async with asyncio.timeout(USE_CHECK_SECONDS):
            refusal = await selectionuse.authorize(request, objects, may_use, podnetworks)
    except TimeoutError:
        raise admissionreview.Unavailable(f"{_WHAT}: the API server did not answer within "
                                          f"{USE_CHECK_SECONDS:g}s; retry the request") from None
    except UseUnavailable as exc:
        raise admissionreview.Unavailable(f"{_WHAT}: {exc}; retry the request") from None
    return refusal if refusal is not None else admissionreview.allowed(request.uid)


def app(objects: Callable[[], translate.Objects], *, may_use: MayUse | None = None,
        podnetworks: selectionuse.ListPodNetworks | None = None, dra_driver: str | None = None) -> Any:
    """The FastAPI application serving the mutating webhook on `admission.MUTATE_PATH`, the
    validating one on `admission.VALIDATE_PATH`, and `/healthz`.

    `objects()` returns what the bridge controller knows now (its watch-fed memory); `may_use`
    (`--enforce-use-permission`) asks the API server's SubjectAccessReviews
    (`podnetwork.kep.admissionreads.UseReviews.may_use`), and `podnetworks` lists the
    PodNetworks for a NAD that memory cannot vouch for (`PodNetworkListing.podnetworks`);
    `dra_driver` (`--dra-claims`) adds DRA claims to new pods (`bridge.operator.pods.claims`).
    """
    from fastapi import FastAPI, Request, Response

    api = FastAPI(title="podnetwork bridge admission", docs_url=None, redoc_url=None, openapi_url=None)

    async def decide(body: AdmissionReview) -> dict[str, Any]:
        return admission.review(body, objects(), dra_driver=dra_driver)

    async def validate(body: AdmissionReview) -> dict[str, Any]:
        return await authorize(body, objects(), may_use, podnetworks)

    @api.post(admission.MUTATE_PATH)
    async def mutating(request: Request) -> Response:
        return await admissionreview.answer(request, decide)

    @api.post(admission.VALIDATE_PATH)
    async def validating(request: Request) -> Response:
        return await admissionreview.answer(request, validate)

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return api


__all__ = ["PODNETWORK_LIST_SECONDS", "PodNetworkListing", "app", "authorize"]
