"""The HTTP app serving the bridge's pod webhooks (and `/healthz`), as its command runs it.

The decisions are `bridge.operator.admission`'s (mutating) and `bridge.operator.selectionuse`'s
(validating, `--enforce-use-permission`), over what the bridge controller knows now; the body
is parsed at the edge by `podnetwork.kep.admissionreview.answer` (400 for a body that is not
an AdmissionReview, a refusal naming the fields for a pod of the wrong shape, 503 with the
reason when a SubjectAccessReview cannot be asked).
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations
# at runtime, and `Request` is imported inside `app`.
import asyncio
from collections.abc import Callable
from typing import Any

from bridge import translate
from bridge.operator import admission, selectionuse
from podnetwork.kep import admissionreview
from podnetwork.kep.admissionreview import AdmissionReview
from podnetwork.kep.usepermission import USE_CHECK_SECONDS, MayUse, UseUnavailable

_WHAT = (f"cannot check the permission to use the PodNetworks of the pod's NPWG selection "
         f"({selectionuse.SELECTION})")


async def authorize(body: AdmissionReview, objects: translate.Objects,
                    may_use: MayUse | None) -> dict[str, Any]:
    """The validating webhook's answer: allowed, or the refusal of a selection reaching a
    PodNetwork neither the requester nor the pod's ServiceAccount may use. Without `may_use`
    (the flag off, a configuration left registered) everything is allowed. Raises
    `admissionreview.Unavailable` when the API cannot answer within `USE_CHECK_SECONDS`."""
    request = body.request
    if may_use is None:
        return admissionreview.allowed(request.uid)
    try:
        async with asyncio.timeout(USE_CHECK_SECONDS):
            refusal = await selectionuse.authorize(request, objects, may_use)
    except TimeoutError:
        raise admissionreview.Unavailable(f"{_WHAT}: the API server did not answer within "
                                          f"{USE_CHECK_SECONDS:g}s; retry the request") from None
    except UseUnavailable as exc:
        raise admissionreview.Unavailable(f"{_WHAT}: {exc}; retry the request") from None
    return refusal if refusal is not None else admissionreview.allowed(request.uid)


def app(objects: Callable[[], translate.Objects], *, may_use: MayUse | None = None) -> Any:
    """The FastAPI application serving the mutating webhook on `admission.MUTATE_PATH`, the
    validating one on `admission.VALIDATE_PATH`, and `/healthz`.

    `objects()` returns what the bridge controller knows now (its watch-fed memory); `may_use`
    (`--enforce-use-permission`) asks the API server's SubjectAccessReviews
    (`podnetwork.kep.admissionreads.UseReviews.may_use`).
    """
    from fastapi import FastAPI, Request, Response

    api = FastAPI(title="podnetwork bridge admission", docs_url=None, redoc_url=None, openapi_url=None)

    async def decide(body: AdmissionReview) -> dict[str, Any]:
        return admission.review(body, objects())

    async def validate(body: AdmissionReview) -> dict[str, Any]:
        return await authorize(body, objects(), may_use)

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


__all__ = ["app", "authorize"]
