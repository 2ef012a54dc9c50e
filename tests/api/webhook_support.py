"""The pod webhooks served as the commands serve them (`podnetwork.kube.webhooks.server`: uvicorn, HTTPS with a
self-signed certificate, the body limit), and a raw HTTP/1.1 client for what httpx will not send
(a Content-Length that lies, a body streamed until the server answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge import translate
from bridge.operator import admission as bridge_admission
from bridge.operator import admissionapp as bridge_admissionapp
from podnetwork.cli import operatorshell
from podnetwork.commands import admissionapp
from podnetwork.ground import constants
from podnetwork.kep import admission
from podnetwork.kube import certificates, webhooks
from tests.api import bridge_api_support as bs
from tests.unit.ports_support import free_port as free_port

ANN = constants.NETWORKS_ANNOTATION
NS = bs.NS


@dataclass(frozen=True)
class Hook:
    """One webhook endpoint: a name for test ids, its app factory and its path."""

    name: str
    path: str
    bridge: bool

    def app(self) -> Any:
        if self.bridge:
            return bridge_admissionapp.app(lambda: WORLD)
        return admissionapp.app({NS: PROFILED_NAMESPACE}.get)


CONTROLLER_MUTATING = Hook("controller-mutating", admission.MUTATE_PATH, bridge=False)
CONTROLLER_VALIDATING = Hook("controller-validating", admission.VALIDATE_PATH, bridge=False)
BRIDGE = Hook("bridge", bridge_admission.MUTATE_PATH, bridge=True)
HOOKS = (CONTROLLER_MUTATING, CONTROLLER_VALIDATING, BRIDGE)

#: A Ready bridge PodNetwork with its NAD: a pod naming it gets its selection from the bridge.
WORLD = translate.Objects.from_objects([bs.podnetwork("dataplane"), bs.nad("dataplane")])
PROFILED_NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
    "name": NS, "annotations": {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: '[{"podNetworkName":"dataplane"}]'}}}


def pod(networks: list[dict[str, Any]] | None = None, annotations: dict[str, str] | None = None
        ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": NS}
    annotations = dict(annotations or {})
    if networks is not None:
        annotations[ANN] = json.dumps(networks)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "x"}]}}


def review(obj: dict[str, Any] | None = None, *, uid: Any = "u-1", operation: str = "CREATE") -> dict[str, Any]:
    """An AdmissionReview as the API server sends it for a pod in namespace `NS`."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": NS, "operation": operation, "userInfo": {"username": "kubernetes-admin"},
        "object": obj if obj is not None else pod([{"podNetworkName": "dataplane"}])}}


def certificate(directory: Path) -> certificates.Certificate:
    return certificates.self_signed(directory, "127.0.0.1")


@contextlib.asynccontextmanager
async def serving(app: Any, cert: certificates.Certificate, **options: Any) -> AsyncIterator[int]:
    """`app` served by `podnetwork.kube.webhooks.server` on 127.0.0.1 in this loop; yields the port."""
    server = webhooks.server(app, cert, host="127.0.0.1", port=0,
                             **{"max_body_bytes": operatorshell.MAX_BODY_BYTES, **options})
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn stopped before it started"
            await asyncio.sleep(0.01)
        yield int(server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        await task


@contextlib.contextmanager
def serving_in_thread(app: Any, cert: certificates.Certificate, **options: Any) -> Iterator[int]:
    """`serving` in a thread of its own, for synchronous tests (hypothesis); yields the port."""
    port: list[int] = []
    ready, stop = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    async def run() -> None:
        async with serving(app, cert, **options) as p:
            port.append(p)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.02)

    def main() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    ready.wait(30)
    try:
        assert port and not failure, f"the webhook server did not start: {failure}"
        yield port[0]
    finally:
        stop.set()
        thread.join(30)
    assert not failure, failure


def client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the self-signed certificate the server made
    return context


#: `Reply.status` when the server closed the connection before its answer could be read: a
#: server that refuses a body it has not read closes with bytes unread, so its kernel resets
#: the connection, and the client's kernel may drop the answer that came just before.
RESET = 0


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int
    """Body bytes the client wrote before it read the answer (or the connection was reset)."""

    def json(self) -> Any:
        return json.loads(self.body)


async def raw_post(port: int, path: str, headers: dict[str, str], chunks: Iterable[bytes] = (), *,
                   until_answered: bool = False) -> Reply:
    """POST over TLS with exactly these headers and then `chunks`, as written, and read the answer.

    By default every chunk is written before the answer is read: a test ends the
    body where the server must answer (the headers alone, or the chunk that
    passes the limit), so that the server has read all that was sent and its
    answer cannot be lost to a reset. With `until_answered`, writing goes on
    while the answer is awaited and stops when it comes; a reset then gives
    `RESET` (for load, where the answer matters less than the server's memory).
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls())
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    answer = asyncio.create_task(_read_reply(reader))
    sent = 0
    try:
        writer.write(head.encode())
        for chunk in chunks:
            if until_answered and answer.done():
                break
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)
        status, reply_headers, body = await asyncio.wait_for(answer, 120)
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        if not until_answered:
            raise
        try:
            status, reply_headers, body = await asyncio.wait_for(answer, 120)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            status, reply_headers, body = RESET, {}, b""
    finally:
        answer.cancel()
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    return Reply(status, reply_headers, body, sent)


async def _read_reply(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers, body


def chunked(chunks: Iterable[bytes], *, last: bool = True) -> Iterator[bytes]:
    """`chunks` in HTTP/1.1 chunked transfer coding, ended by the last chunk unless `last` is False
    (a body refused before its end: nothing is sent after the chunk that passes the limit)."""
    for chunk in chunks:
        yield f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    if last:
        yield b"0\r\n\r\n"


def pieces(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i:i + size]


def past_the_limit(limit: int) -> Iterator[bytes]:
    """`limit` bytes of body, then a small piece that passes it: the server reads it all before it
    can know, and the piece that decides arrives in one TLS record (module docstring of `raw_post`)."""
    yield from repeated(limit)
    yield b" " * 1024


def repeated(total: int, size: int = 1024 * 1024, byte: bytes = b" ") -> Iterator[bytes]:
    """`total` bytes in pieces of `size`, made as they are sent (never held whole)."""
    piece = byte * size
    while total > 0:
        yield piece[:total]
        total -= size
