"""Serving an admission webhook over HTTPS: the certificate, the registration, the server,
its body limit, and the HTTP face of an AdmissionReview endpoint.

Shared by `podnetwork controller` and `podnetwork bridge`, which serve different
apps with the same --webhook-* flags. uvicorn and starlette are imported where a
server or a response is made, so importing this module stays cheap for
`podnetwork --help`.

What a request gets (docs/controller.md "Limits"):
- a body over --webhook-max-body-bytes (default 3 MiB, the API server's own cap
  on a request body): 413, before the app runs, from Content-Length alone when
  the header tells, else once the bytes read pass the limit (chunked, or a
  Content-Length that lies low); the connection is closed;
- a body that is not an AdmissionReview v1 request: 400 with what is wrong;
- a read the answer depends on failing (`Unavailable`): 503 with the reason;
- otherwise 200 and an AdmissionReview answer (allowed, or refused with a message).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import shutil
import signal
import subprocess
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podnetwork import admissionreview

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

#: Listen addresses that name no host the API server could dial.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
#: The API server refuses request bodies over 3 MiB (its MaxRequestBodyBytes), so the
#: AdmissionReviews it sends stay near that; larger ones come from elsewhere.
MAX_BODY_BYTES = 3 * 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path
    ca_bundle: str
    """Base64 PEM of the CA that signed `cert` (the cert itself when self-signed)."""


def _san(host: str) -> str:
    if host in WILDCARD_HOSTS:
        return "IP:127.0.0.1,DNS:localhost"
    try:
        return f"IP:{ipaddress.ip_address(host.strip('[]'))}"
    except ValueError:
        return f"DNS:{host}"


def self_signed(directory: Path, host: str, *also: str) -> Certificate:
    """A self-signed serving certificate for `host` and the hosts `also` (DNS names or IPs),
    made with openssl. The API server checks the name it dials (--webhook-url's host)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("openssl is not installed: install it, or pass --webhook-cert and --webhook-key")
    san = ",".join(dict.fromkeys(_san(h) for h in (host, *also) if h))
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=podnetwork-admission",
         "-addext", f"subjectAltName={san}"],
        check=True, capture_output=True,
    )
    return Certificate(cert, key, base64.b64encode(cert.read_bytes()).decode())


def certificate(cert: Path | None, key: Path | None, directory: Path, host: str,
                url: str | None) -> Certificate:
    """The given --webhook-cert/--webhook-key, else a self-signed one made in `directory` for
    --webhook-host and the host of --webhook-url (the name the API server dials)."""
    if cert is not None and key is not None:
        return Certificate(cert, key, base64.b64encode(cert.read_bytes()).decode())
    url_host = urllib.parse.urlsplit(url or "").hostname or ""
    return self_signed(directory, host, url_host)


def unreachable_registration(manage_webhooks: bool, url: str | None, host: str) -> bool:
    """Whether --manage-webhooks would register a wildcard listen address, which the API
    server cannot call (and a fail-closed webhook would then refuse every pod it covers)."""
    return manage_webhooks and not url and host in WILDCARD_HOSTS


def client_config(url: str | None, host: str, port: int, cert: Certificate) -> dict[str, str]:
    """The clientConfig a webhook configuration registers: --webhook-url (default
    https://HOST:PORT) with the serving certificate's CA bundle."""
    return {"url": url or f"https://{host}:{port}", "caBundle": cert.ca_bundle}


def byte_count(text: str) -> int:
    """`--webhook-max-body-bytes`: a whole number of bytes, 1 or more."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid byte count {text!r}: expected a whole number, 1 or more")
    return value


class BodyLimit:
    """ASGI middleware: HTTP request bodies over `max_bytes` get 413 and never reach `app`.

    The body is read here, at most `max_bytes` of it, and handed to `app` whole:
    the webhooks read it whole anyway. A Content-Length over the limit is refused
    before any byte of the body is read; without one (chunked), or with one that
    lies low, the count of bytes actually received decides. The 413 closes the
    connection, so the rest of an upload is not read.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(
                send, f"request body of {declared} bytes exceeds the limit of {self.max_bytes} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, f"request body exceeds the limit of {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, detail: str) -> None:
        body = admissionreview.encode({"detail": f"{detail} (--webhook-max-body-bytes)"})
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server's parser refuses it before we see it
    return None


class Unavailable(Exception):
    """The answer depends on something that cannot be read now: HTTP 503 with this message,
    and the webhook's failurePolicy decides."""


def json_response(document: Any, status: int = 200) -> Response:
    """A starlette Response of `document` as ASCII JSON (`admissionreview.encode`)."""
    from starlette.responses import Response

    return Response(admissionreview.encode(document), status_code=status, media_type="application/json")


async def answer(request: Request,
                 decide: Callable[[admissionreview.AdmissionReview], Awaitable[Any]]) -> Response:
    """The HTTP face of an AdmissionReview endpoint: the body parsed at the edge, `decide`d,
    and answered (the status codes are in the module docstring)."""
    try:
        review = admissionreview.parse(await request.body())
        return json_response(await decide(review))
    except admissionreview.BadReview as exc:
        return json_response({"detail": str(exc)}, 400)
    except Unavailable as exc:
        return json_response({"detail": str(exc)}, 503)


def server(app: Any, cert: Certificate, *, max_body_bytes: int = MAX_BODY_BYTES, **config: Any) -> Any:
    """A uvicorn server of `app` over HTTPS with `cert`, request bodies limited to
    `max_body_bytes` (`BodyLimit`), leaving SIGINT/SIGTERM to the caller, which stops it
    with `should_exit` together with its other tasks."""
    import uvicorn

    served = uvicorn.Server(uvicorn.Config(
        BodyLimit(app, max_body_bytes), log_level="warning", ssl_certfile=str(cert.cert),
        ssl_keyfile=str(cert.key), **config))
    served.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    return served


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set `stop` on SIGINT/SIGTERM (where this loop can take signals: not off the main thread)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


async def run_until_stopped(tasks: list[asyncio.Task[Any]], stop: asyncio.Event, server: Any) -> None:
    """Wait for `stop` or the end of any task, then end them all (kopf by its stop flag, the
    uvicorn `server`, if any, by `should_exit`) and re-raise the first task's failure."""
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    stop.set()  # whichever ended first, the others follow
    if server is not None:
        server.should_exit = True
    results = await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result
