"""The API server's answers that are errors, as ours: `ApiError` and its kinds, each naming the request.

lightkube's and httpx2's exceptions become one of them (`error_of`): `NotFound` 404,
`Conflict` 409, `Gone` 410, `Unreachable` when no answer came; `transient` says
which are worth retrying (no answer, 429, 5xx), with the Retry-After the server gave.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import httpx2
import lightkube
import msgspec


class ApiError(Exception):
    """The API server refused a request (`status`), or gave no answer (`status` 0)."""

    def __init__(self, what: str, status: int, message: str, *, reason: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(f"{what}: HTTP {status}: {message}" if status else f"{what}: {message}")
        self.what = what
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """Worth retrying: no answer, throttled (429) or a server error (5xx)."""
        return self.status == 0 or self.status == 429 or self.status >= 500


class NotFound(ApiError):
    """HTTP 404: the object (or its kind) does not exist."""


class Conflict(ApiError):
    """HTTP 409: a stale resourceVersion, or the object exists already."""


class Gone(ApiError):
    """HTTP 410: a watch's resourceVersion is too old; list again."""


class Unreachable(ApiError):
    """No answer: connection refused or reset, timeout, TLS failure."""


class Malformed(ApiError):
    """A success whose body is not what an API server sends (not JSON, a list for an object):
    a proxy's page, or a server that is no Kubernetes API server. `status` 0: transient, as
    `podnetwork.kube.lite` says of the same answers."""


def _retry_after(headers: Mapping[str, str] | None, details: Mapping[str, Any] | None) -> float | None:
    value = (headers or {}).get("Retry-After") or (details or {}).get("retryAfterSeconds")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def error_of(exc: BaseException, what: str) -> ApiError:
    """`exc` (lightkube's or httpx2's) as one of our `ApiError`s."""
    status, message, reason, retry_after = 0, str(exc) or type(exc).__name__, "", None
    if isinstance(exc, lightkube.ApiError):
        status = int(exc.status.code or 0)
        message, reason = str(exc.status.message or ""), str(exc.status.reason or "")
        details = exc.status.details.to_dict() if exc.status.details is not None else None
        response = getattr(exc, "response", None)
        retry_after = _retry_after(response.headers if response is not None else None, details)
    elif isinstance(exc, httpx2.HTTPStatusError):
        response = exc.response
        status, reason, message = response.status_code, response.reason_phrase, response.text[:500]
        with contextlib.suppress(ValueError, AttributeError):
            message = str(response.json().get("message") or message)
        retry_after = _retry_after(response.headers, None)
    elif isinstance(exc, httpx2.HTTPError | OSError):
        message = f"no answer from the API server ({type(exc).__name__}: {exc})"
    elif isinstance(exc, MALFORMED):
        return Malformed(what, 0, f"the API server's answer is malformed ({str(exc)[:200]}): does the "
                         "kubeconfig's server name a Kubernetes API server?")
    cls = {404: NotFound, 409: Conflict, 410: Gone, 0: Unreachable}.get(status, ApiError)
    return cls(what, status, message, reason=reason, retry_after=retry_after)


#: What lightkube (msgspec) and httpx2's `Response.json` raise for a body that is not the JSON asked for.
MALFORMED = (msgspec.DecodeError, json.JSONDecodeError)
#: What a lightkube call raises that `error_of` turns into an `ApiError` (after `unwrap`).
FAILURES = (lightkube.ApiError, httpx2.HTTPError, OSError, KeyError, *MALFORMED)


def unwrap(exc: BaseException) -> BaseException:
    """lightkube reads the Content-Type of an error answer without checking it is there: an
    error without a body (e.g. a bare 503) surfaces as a KeyError raised while it handled the
    HTTPStatusError. Any other KeyError is a bug, and raised as such."""
    if isinstance(exc, KeyError):
        if isinstance(exc.__context__, httpx2.HTTPStatusError):
            return exc.__context__
        raise exc
    return exc


__all__ = ["FAILURES", "MALFORMED", "ApiError", "Conflict", "Gone", "Malformed", "NotFound", "Unreachable",
           "error_of", "unwrap"]
