"""Serving an admission webhook over HTTPS: the certificate, the registration and the server.

Shared by `podnetwork controller` and `podnetwork bridge`, which serve different
apps with the same --webhook-* flags. uvicorn is imported where a server is made,
so importing this module stays cheap for `podnetwork --help`.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Listen addresses that name no host the API server could dial.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


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


def server(app: Any, cert: Certificate, **config: Any) -> Any:
    """A uvicorn server of `app` over HTTPS with `cert`, leaving SIGINT/SIGTERM to the caller,
    which stops it with `should_exit` together with its other tasks."""
    import uvicorn

    served = uvicorn.Server(uvicorn.Config(
        app, log_level="warning", ssl_certfile=str(cert.cert), ssl_keyfile=str(cert.key), **config))
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
