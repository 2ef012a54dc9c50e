"""The HTTP app serving the bridge's pod webhook (and `/healthz`), as its command runs it.

The decision is `bridge.operator.admission`'s, over what the bridge controller
knows now; the body is parsed at the edge by `podnetwork.kep.admissionreview.answer`
(400 for a body that is not an AdmissionReview, a refusal naming the fields for a
pod of the wrong shape).
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations
# at runtime, and `Request` is imported inside `app`.
from collections.abc import Callable
from typing import Any

from bridge import translate
from bridge.operator import admission
from podnetwork.kep import admissionreview
from podnetwork.kep.admissionreview import AdmissionReview


def app(objects: Callable[[], translate.Objects]) -> Any:
    """The FastAPI application serving the webhook on `admission.MUTATE_PATH` (and `/healthz`).

    `objects()` returns what the bridge controller knows now (its watch-fed memory).
    """
    from fastapi import FastAPI, Request, Response

    api = FastAPI(title="podnetwork bridge admission", docs_url=None, redoc_url=None, openapi_url=None)

    async def decide(body: AdmissionReview) -> dict[str, Any]:
        return admission.review(body, objects())

    @api.post(admission.MUTATE_PATH)
    async def mutating(request: Request) -> Response:
        return await admissionreview.answer(request, decide)

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return api


__all__ = ["app"]
