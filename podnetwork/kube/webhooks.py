"""Serving an app over HTTP(S) with uvicorn on a socket bound in advance, beside other tasks.

Shared by `podnetwork controller` and `podnetwork bridge` (admission webhooks over
HTTPS) and `podnetwork scheduler-extender` (plain HTTP). The socket is bound by the
command before anything starts, so a taken port is a clear refusal rather than
uvicorn exiting the process from inside a task. Signals are the command's: the
server here never installs handlers (see `Server`) and stops when its
`should_exit` is set. Import this module where a server is made: it imports uvicorn.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

from podnetwork.kube.certificates import WILDCARD_HOSTS, Certificate

#: Seconds a stopping server waits for requests in flight before cancelling them;
#: the API server gives a webhook call at most 30 s (10 s by default).
GRACEFUL_SHUTDOWN_SECONDS = 10


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


def server(app: Any, certificate: Certificate | None = None, **config: Any) -> Server:
    """A server of `app`, over HTTPS with `certificate` when given; `config` goes to
    `uvicorn.Config` (defaults: warnings only, no lifespan events)."""
    options: dict[str, Any] = {"log_level": "warning", "lifespan": "off",
                               "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECONDS, **config}
    if certificate is not None:
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
