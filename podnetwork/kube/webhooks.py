"""Serving an app over HTTP(S) with uvicorn on a socket bound in advance, beside other tasks.

Shared by `podnetwork controller` and `podnetwork bridge` (admission webhooks over
HTTPS) and `podnetwork scheduler-extender` (plain HTTP). The socket is bound by the
command before anything starts, so a taken port is a clear refusal rather than
uvicorn exiting the process from inside a task. Signals are the command's: the
server here never installs handlers (see `Server`) and stops when its
`should_exit` is set. Import this module where a server is made: it imports uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import uvicorn

from podnetwork.kube.certificates import WILDCARD_HOSTS, Certificate, load_chain

#: Seconds a stopping server waits for requests in flight before cancelling them;
#: the API server gives a webhook call at most 30 s (10 s by default).
GRACEFUL_SHUTDOWN_SECONDS = 10


class ServingTLS:
    """The TLS context a webhook server serves with, whose certificate `load` replaces.

    New connections get the new certificate; open ones keep theirs. This is how a
    replica takes up a certificate renewed in its Secret (`podnetwork.kube.registration`)
    without a restart. The certificate and key stay in memory (`certificates.load_chain`).
    """

    def __init__(self) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.loaded = asyncio.Event()
        """Set once a certificate is loaded: the server starts serving then."""
        self.fingerprint: str | None = None

    def load(self, cert: bytes, key: bytes) -> bool:
        """Serve `cert` with `key` (PEM) from now on; False when they are what it serves already.
        Raises `ssl.SSLError` when they are not a certificate and its key."""
        fingerprint = hashlib.sha256(cert + b"\0" + key).hexdigest()
        if fingerprint == self.fingerprint:
            return False
        # Loaded into a new context first: a bad pair leaves the one in use untouched.
        load_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert, key)
        load_chain(self.context, cert, key)
        self.fingerprint = fingerprint
        self.loaded.set()
        return True


class ListenError(OSError):
    """The address cannot be listened on; the message names it and says why."""


def listen(host: str, port: int) -> list[socket.socket]:
    """TCP sockets bound to `host`:`port`, not yet listening (the server does that when it
    starts): one per address `host` resolves to (a name may stand for 127.0.0.1 and ::1),
    as asyncio's own servers do; a wildcard listens on every address of its family."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    addresses = list(dict.fromkeys((family, kind, proto, addr) for family, kind, proto, _, addr in infos))
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, address in addresses:
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            # A restarted process can take its port back while old connections linger in TIME_WAIT.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and len(addresses) > 1:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # IPv4 has its own socket
            sock.bind(address)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sockets


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: HTTP request bodies over `max_bytes` get 413 and never reach `app`.

    The body is read here, at most `max_bytes` of it, and handed to `app` whole:
    the webhooks read it whole anyway. A Content-Length over the limit is refused
    before any byte of the body is read; without one (chunked), or with one that
    lies low, the count of bytes actually received decides. The 413 closes the
    connection, so the rest of an upload is not read.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
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
        body = json.dumps({"detail": f"{detail} (--webhook-max-body-bytes)"}).encode("ascii")
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


#: The readiness endpoint every webhook server of the operators answers (`ReadyProbe`).
READY_PATH = "/readyz"


class ReadyProbe:
    """ASGI middleware: `GET /readyz` is 200 once nothing is pending, else 503 saying what is.

    That the server answers at all is half of it (the webhooks are served); `pending()`
    names the rest, e.g. the webhook configuration `--manage-webhooks` has yet to
    register: until the API server calls the webhooks, pods are admitted without them.
    Every other request goes to `app`.
    """

    def __init__(self, app: ASGIApp, pending: Callable[[], list[str]]) -> None:
        self.app = app
        self.pending = pending

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method")
        if scope["type"] != "http" or scope.get("path") != READY_PATH or method not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        waiting = self.pending()
        answer: dict[str, Any] = {"status": "ready"}
        if waiting:
            answer = {"status": "not ready", "waiting": waiting}
        body = json.dumps(answer).encode()
        await send({"type": "http.response.start", "status": 503 if waiting else 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server's parser refuses it before we see it
    return None


class Server(uvicorn.Server):
    """A uvicorn server that leaves SIGINT/SIGTERM to its command.

    `uvicorn.Server.serve` wraps itself in `capture_signals`, which replaces the
    process's handlers while it runs and, once it stops, restores them and raises
    the captured signal again: beside kopf (or inside the demo) that would be a
    second owner of the signals, and the re-raised SIGTERM would kill a process
    that was stopping cleanly. The command stops this server with `should_exit`.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def server(app: Any, certificate: Certificate | ServingTLS | None = None, *,
           max_body_bytes: int | None = None, pending: Callable[[], list[str]] | None = None,
           **config: Any) -> Server:
    """A server of `app`, over HTTPS with `certificate` when given (a `ServingTLS`: whatever it
    has loaded, connection by connection), with request bodies
    limited to `max_body_bytes` (`BodyLimit`) when given, and `/readyz` answered from
    `pending` (`ReadyProbe`) when given; `config` goes to `uvicorn.Config` (defaults:
    warnings only, no lifespan events)."""
    if max_body_bytes is not None:
        app = BodyLimit(app, max_body_bytes)
    if pending is not None:
        app = ReadyProbe(app, pending)
    options: dict[str, Any] = {"log_level": "warning", "lifespan": "off",
                               "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECONDS, **config}
    if isinstance(certificate, ServingTLS):
        tls = certificate
        options.update(ssl_context_factory=lambda _config, _default: tls.context)
    elif certificate is not None:
        options.update(ssl_certfile=str(certificate.cert), ssl_keyfile=str(certificate.key))
    return Server(uvicorn.Config(app, **options))


def unreachable_registration(manage_webhooks: bool, url: str | None, host: str) -> bool:
    """Whether --manage-webhooks would register a wildcard listen address, which the API
    server cannot call (and a fail-closed webhook would then refuse every pod it covers)."""
    return manage_webhooks and not url and host in WILDCARD_HOSTS


def client_config(url: str | None, host: str, port: int, certificate: Certificate) -> dict[str, str]:
    """The clientConfig a webhook configuration registers: --webhook-url (default
    https://HOST:PORT) with the serving certificate's CA bundle."""
    if url is None:
        url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return {"url": url, "caBundle": certificate.ca_bundle}
