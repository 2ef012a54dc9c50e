"""An API server on loopback that answers as scripted, byte for byte: what a broken or hostile
server (or a proxy in front of one) can send the agent's client, `podnetwork.kube.lite`.

`HostileApi(answer)` reads each request's head, records its first line, and writes whatever
`answer(request_line)` yields, chunk by chunk, until the generator ends or the client goes
away; the connection is closed after an answer when the request or the answer said
`Connection: close`, as a real server does. Endless answers are generators that never end.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

Answer = Callable[[str], Iterable[bytes]]


class HostileApi:
    """A threaded TCP server on 127.0.0.1; `url` is its address, `requests` the request lines."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[str] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            try:
                while True:  # one request after another on a kept-alive connection
                    while b"\r\n\r\n" not in data:
                        received = conn.recv(65536)
                        if not received:
                            return
                        data += received
                    head, _, data = data.partition(b"\r\n\r\n")
                    line = head.split(b"\r\n", 1)[0].decode("latin-1")
                    self.requests.append(line)
                    length = 0
                    for header in head.split(b"\r\n")[1:]:
                        name, _, value = header.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    while len(data) < length:
                        data += conn.recv(65536)
                    data = data[length:]
                    closing = b"connection: close" in head.lower()
                    for piece in self.answer(line):
                        if self._closed.is_set():
                            return
                        conn.sendall(piece)
                        closing = closing or b"\r\nconnection: close\r\n" in piece[:4096].lower()
                    if closing:
                        return
            except OSError:
                return  # the client went away (as it should, from an endless answer)

    def count(self, predicate: Callable[[str, dict[str, list[str]]], bool]) -> int:
        """Requests whose (path, query) satisfy `predicate`."""
        total = 0
        for line in list(self.requests):
            url = urlsplit(line.split(" ")[1])
            total += predicate(url.path, parse_qs(url.query))
        return total

    def close(self) -> None:
        self._closed.set()
        self._sock.close()


def query_of(line: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(line.split(" ")[1]).query)


def ok(body: bytes, *, close: bool = True) -> bytes:
    """A 200 answer with a Content-Length body."""
    extra = b"Connection: close\r\n" if close else b""
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def chunked_head(status: str = "200 OK") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def endless(piece: bytes) -> Iterator[bytes]:
    """`piece` again and again, 64 KiB at a time."""
    block = piece * max(1, 65536 // len(piece))
    return itertools.repeat(block)


def endless_headers() -> Iterator[bytes]:
    yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    for i in itertools.count():
        yield b"".join(b"X-Header-%d: %d\r\n" % (i * 1000 + j, j) for j in range(1000))


def pod(name: str = "web", namespace: str = "ns", version: str = "1", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": version}, **extra}


def listing(items: list[dict[str, Any]], version: str = "1", token: str = "") -> bytes:
    meta: dict[str, Any] = {"resourceVersion": version}
    if token:
        meta["continue"] = token
    return json.dumps({"kind": "List", "metadata": meta, "items": items}).encode()
