"""A small asyncio HTTP/1.1 client of the Kubernetes API, for a process that must stay small.

The CNI agent runs on every node and only ever GETs objects by name, merge-patches
pod annotations, and lists and watches the few kinds it caches. `podnetwork.kube.client`
(lightkube over httpx, with HTTP/2, anyio and their models) costs such a process
~10 MB of RSS and ~1 ms of CPU per request; this module is the same credentials
(`podnetwork.kube.credentials`: TLS as the kubeconfig says, tokens, token files
re-read, exec plugins, a retry after a 401 when they can be renewed) over asyncio
streams, with kept-alive connections. Objects stay the dicts the API server sent.
No retries otherwise: the caller decides.

HTTP/1.1 is framed by `h11` (strict, and bounded: no answer can make this process hold
more than the limits below, whatever the server sends). Every answer that is not what an
API server sends (not HTTP, over a limit, a body that is not one JSON object) is
`Malformed`, which is transient: a broken proxy or server, worth trying again later.
docs/limits.md lists the limits with their messages.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import h11

from podnetwork.kube import credentials as credentials_mod

#: Idle connections kept for the next requests (the agent's requests come in bursts per ADD).
MAX_IDLE = 4
#: Largest body of one answer, bytes (a list page; an object is at most ~1.5 MB in etcd).
MAX_BODY = 16 * 1024 * 1024
#: Largest status line and headers of one answer, bytes; also the longest chunk-size line and
#: trailer section. An API server's head is under 2 KiB (its Warning headers under 4 KiB).
MAX_HEAD = 64 * 1024
#: Most header fields in one answer (an API server sends about ten).
MAX_HEADERS = 100
#: Longest watch event (one line of the stream), bytes: one object and its envelope.
MAX_LINE = 4 * 1024 * 1024
#: Objects asked per page when listing (`limit`); a page too large is asked again smaller.
PAGE = 500


class ApiError(Exception):
    """The API server refused a request (`status`), or gave no answer (`status` 0)."""

    def __init__(self, what: str, status: int, message: str, *, reason: str = "") -> None:
        super().__init__(f"{what}: HTTP {status}: {message}" if status else f"{what}: {message}")
        self.what, self.status, self.message, self.reason = what, status, message, reason

    @property
    def transient(self) -> bool:
        """Worth retrying: no answer, throttled (429) or a server error (5xx)."""
        return self.status == 0 or self.status == 429 or self.status >= 500


class NotFound(ApiError):
    """HTTP 404."""


class Unreachable(ApiError):
    """No answer: the connection failed, broke, or the request timed out."""


class Malformed(ApiError):
    """An answer that is not what an API server sends: not HTTP/1.1, over a limit of this module,
    or a success whose body is not one JSON object. `status` 0: transient."""

    def __init__(self, what: str, message: str, *, too_large: bool = False) -> None:
        super().__init__(what, 0, f"the API server's answer is malformed: {message}")
        self.too_large = too_large
        """The answer was refused for its size only (a list can be asked again in smaller pages)."""


class Gone(ApiError):
    """HTTP 410: a watch's resourceVersion is too old; list again."""


class _Connection:
    """One connection and its HTTP/1.1 state."""

    __slots__ = ("http", "reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.reused = False


class _Stale(Exception):
    """A kept-alive connection the server had closed before this request: nothing was answered."""


class _Answer:
    """The events of one answer on a connection, within the module's limits."""

    def __init__(self, conn: _Connection, what: str) -> None:
        self.conn, self.what = conn, what
        self.wire = 0
        """Bytes received for this answer."""
        self.data = 0
        """Bytes of body delivered."""
        self.eof = False

    async def _event(self) -> Any:
        http = self.conn.http
        while True:
            try:
                event = http.next_event()
            except h11.RemoteProtocolError as exc:
                if self.wire == 0:  # closed before a byte of the answer
                    if self.conn.reused:
                        raise _Stale() from None
                    raise ConnectionResetError("the server closed the connection without answering") from None
                if self.eof:
                    raise ConnectionResetError(f"the connection closed mid-answer: {str(exc)[:200]}"
                                               ) from None
                if str(exc) == "Receive buffer too long":
                    raise Malformed(self.what, f"a head or chunk line of more than {MAX_HEAD} bytes"
                                    ) from None
                raise Malformed(self.what, f"not HTTP/1.1: {str(exc)[:200]}") from None
            if event is not h11.NEED_DATA:
                return event
            try:
                received = await self.conn.reader.read(65536)
            except ConnectionError:
                if self.wire == 0 and self.conn.reused:
                    raise _Stale() from None
                raise
            self.eof = not received
            self.wire += len(received)
            # Framing (chunk sizes, extensions, interim answers) may not outweigh the data it frames:
            # a body in 1-byte chunks costs six times its size to receive, and the CPU to parse it.
            if self.wire > 2 * self.data + 2 * MAX_HEAD:
                raise Malformed(self.what, f"{self.wire - self.data} bytes of framing for {self.data} "
                                "bytes of data (chunks that small are not an API server's)")
            http.receive_data(received)

    async def head(self) -> h11.Response:
        """The status line and headers (interim 1xx answers skipped)."""
        while True:
            event = await self._event()
            if isinstance(event, h11.Response):
                break
            if not isinstance(event, h11.InformationalResponse):
                raise Malformed(self.what, f"{type(event).__name__} instead of an answer")
        if len(event.headers) > MAX_HEADERS:
            raise Malformed(self.what, f"{len(event.headers)} header fields, more than {MAX_HEADERS}")
        # h11 bounds a head still arriving; one that came whole in a single read is measured here.
        size = len(event.reason) + 15 + sum(len(name) + len(value) + 4 for name, value in event.headers)
        if size > MAX_HEAD:
            raise Malformed(self.what, f"a head or chunk line of more than {MAX_HEAD} bytes")
        return event

    async def chunk(self) -> bytes | bytearray | None:
        """The next piece of the body (at most what one read brought); None at its end."""
        while True:
            event = await self._event()
            if isinstance(event, h11.Data):
                self.data += len(event.data)
                data: bytes | bytearray = event.data
                return data
            if isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return None

    async def body(self, head: h11.Response) -> bytearray:
        """The whole body, refused past MAX_BODY (from Content-Length before reading it)."""
        for name, value in head.headers:
            if name == b"content-length" and int(value) > MAX_BODY:
                raise Malformed(self.what, f"a body of {int(value)} bytes, more than {MAX_BODY}",
                                too_large=True)
        body = bytearray()
        while (piece := await self.chunk()) is not None:
            body += piece
            if len(body) > MAX_BODY:
                raise Malformed(self.what, f"a body of more than {MAX_BODY} bytes", too_large=True)
        return body


_JSON_TYPES = {list: "a JSON list", str: "a JSON string", int: "a JSON number", float: "a JSON number",
               bool: "JSON true or false", type(None): "JSON null"}


def _decode(what: str, text: bytes | bytearray, part: str = "the body") -> dict[str, Any]:
    """`text` that must be one JSON object (every answer and event the agent asks for is)."""
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
        raise Malformed(what, f"{part} is not JSON: {str(exc)[:200]}") from None
    if not isinstance(decoded, dict):
        raise Malformed(what, f"{part} is {_JSON_TYPES.get(type(decoded), 'JSON')}, not an object")
    return decoded


class LiteApi:
    """GET and merge-PATCH of single objects, by API path."""

    def __init__(self, creds: credentials_mod.Credentials, *, timeout: float = 10.0) -> None:
        url = urllib.parse.urlsplit(creds.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise credentials_mod.CredentialsError(f"{creds.describe}: the server {creds.server!r} is not an "
                                                   "http(s) URL")
        if creds.proxy_url:
            raise credentials_mod.CredentialsError(f"{creds.describe}: proxy-url is not supported by the CNI "
                                                   "agent; reach the API server directly")
        self.credentials = creds
        self.timeout = timeout
        self._auth = credentials_mod.Authenticator(creds)
        self._tls = credentials_mod.ssl_context(creds, self._auth) if url.scheme == "https" else None
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        self._host_header = url.netloc.rsplit("@", 1)[-1]
        self._idle: list[_Connection] = []

    async def get(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json")

    async def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, *, content_type: str = ""
    ) -> dict[str, Any]:
        what = f"{method} {path}"
        payload = json.dumps(body).encode() if body is not None else b""
        for attempt in (1, 2):
            status, answer = await self._exchange(what, method, path, payload, content_type)
            if status == 401 and attempt == 1 and self._auth.renewable:
                self._auth.invalidate()  # a rotated token or an expired exec credential: once more
                continue
            break
        if 200 <= status < 300:
            return _decode(what, answer) if answer else {}
        message, reason = answer[:500].decode("utf-8", "replace"), ""
        try:
            decoded = json.loads(answer)
            if isinstance(decoded, dict):
                message = str(decoded.get("message", message))[:500]
                reason = str(decoded.get("reason", ""))[:100]
        except (ValueError, RecursionError):
            pass
        raise (NotFound if status == 404 else ApiError)(what, status, message, reason=reason)

    def _request(self, method: str, target: str, header: str | None, payload: bytes,
                 content_type: str) -> h11.Request:
        headers = [("Host", self._host_header), ("Accept", "application/json"),
                   ("User-Agent", "podnetwork-cni-agent")]
        if header:
            headers.append(("Authorization", header))
        if payload or method in ("PATCH", "POST", "PUT"):
            headers.append(("Content-Type", content_type or "application/json"))
            headers.append(("Content-Length", str(len(payload))))
        return h11.Request(method=method, target=f"{self._prefix}{target}", headers=headers)

    async def _exchange(
        self, what: str, method: str, path: str, payload: bytes, content_type: str
    ) -> tuple[int, bytes | bytearray]:
        header = await self._auth.aheader()
        request = self._request(method, path, header, payload, content_type)
        try:
            async with asyncio.timeout(self.timeout):
                while self._idle:  # a kept connection the server may have closed meanwhile
                    try:
                        return await self._send(self._idle.pop(), what, request, payload)
                    except _Stale:
                        continue
                return await self._send(await self._connect(), what, request, payload)
        except TimeoutError:
            raise Unreachable(what, 0, f"no answer within {self.timeout:g} s") from None
        except (OSError, _Stale) as exc:
            raise Unreachable(what, 0, f"{type(exc).__name__}: {exc}") from None

    async def _connect(self) -> _Connection:
        if self._tls is None:
            return _Connection(*await asyncio.open_connection(self._host, self._port))
        server_name = self.credentials.tls_server_name or self._host
        return _Connection(*await asyncio.open_connection(
            self._host, self._port, ssl=self._tls, server_hostname=server_name))

    async def _send(
        self, conn: _Connection, what: str, request: h11.Request, payload: bytes
    ) -> tuple[int, bytes | bytearray]:
        try:
            sent = conn.http.send(request) + (conn.http.send(h11.Data(data=payload)) if payload else b"")
            conn.writer.write(sent + conn.http.send(h11.EndOfMessage()))
            try:
                await conn.writer.drain()
            except ConnectionError:
                if conn.reused:
                    raise _Stale() from None
                raise
            answer = _Answer(conn, what)
            head = await answer.head()
            body = await answer.body(head)
        except BaseException:
            conn.writer.close()  # mid-answer: the connection cannot carry another request
            raise
        http = conn.http
        if (http.our_state is h11.DONE and http.their_state is h11.DONE and not http.trailing_data[0]
                and len(self._idle) < MAX_IDLE):
            http.start_next_cycle()
            conn.reused = True
            self._idle.append(conn)
        else:
            conn.writer.close()
        return head.status_code, body

    async def watch(self, path: str, resource_version: str, *, timeout_seconds: int = 300,
                    params: Mapping[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """The events (`{"type", "object"}`) of a collection from `resource_version`, until the server
        ends the watch (after about `timeout_seconds`); `params` are further query parameters (a
        field selector). A refusal is an `ApiError` (410: `Gone`, list
        again); a broken stream ends with `Unreachable`, one that breaks a limit with `Malformed`."""
        what = f"WATCH {path}"
        query = urllib.parse.urlencode({
            **(params or {}),
            "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds)})
        request = self._request("GET", f"{path}?{query}", await self._auth.aheader(), b"", "")
        try:
            async with asyncio.timeout(self.timeout):
                conn = await self._connect()
        except (OSError, TimeoutError) as exc:
            raise Unreachable(what, 0, f"{type(exc).__name__}: {exc}") from None
        try:
            conn.writer.write(conn.http.send(request) + conn.http.send(h11.EndOfMessage()))
            answer = _Answer(conn, what)
            async with asyncio.timeout(self.timeout):
                head = await answer.head()
            if head.status_code != 200:
                async with asyncio.timeout(self.timeout):
                    body = await answer.body(head)
                if head.status_code == 401:
                    self._auth.invalidate()
                message = body[:500].decode("utf-8", "replace")
                raise (Gone if head.status_code == 410 else ApiError)(what, head.status_code, message)
            buffer = bytearray()
            # Read with a deadline: a watch the server keeps open without a word past its own
            # timeout (and a bookmark a minute) is a dead connection.
            while True:
                async with asyncio.timeout(timeout_seconds + 60):
                    piece = await answer.chunk()
                if piece is None:
                    return
                buffer += piece
                if b"\n" in piece:
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if len(line) > MAX_LINE:
                            raise Malformed(what, f"a watch event of {len(line)} bytes, more than {MAX_LINE}")
                        if line.strip():
                            yield _decode(what, line, "a watch event")
                if len(buffer) > MAX_LINE:
                    raise Malformed(what, f"a watch event of more than {MAX_LINE} bytes without a line end")
        except (OSError, TimeoutError) as exc:
            raise Unreachable(what, 0, f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.writer.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.writer.close()


class Backoff:
    """Delays between attempts after failures: `first` seconds, doubling per failure up to `maximum`,
    each drawn at random between half and all of that (jitter: the agents of a cluster that failed
    together do not all come back in the same instant). `reset` after a success that lasted."""

    def __init__(self, first: float, maximum: float, *, rand: Callable[[], float] = random.random) -> None:
        self.first, self.maximum, self.rand = first, maximum, rand
        self.failures = 0

    def next(self) -> float:
        ceiling = min(self.maximum, self.first * 2.0 ** min(self.failures, 60))
        self.failures += 1
        return ceiling * (0.5 + 0.5 * self.rand())

    def reset(self) -> None:
        self.failures = 0


class WatchEnded(Exception):
    """The server ended a watch soon after it began: as good as a failure for pacing the next."""


async def _list(
    api: LiteApi, path: str, params: Mapping[str, str] | None
) -> tuple[list[dict[str, Any]], str]:
    """Every object of the collection, in pages of at most PAGE (a page the server sends too large
    for MAX_BODY is asked again in smaller ones); and the list's resourceVersion."""
    items: list[dict[str, Any]] = []
    page, token, version = PAGE, "", ""
    while True:
        query = {**(params or {}), "limit": str(page), **({"continue": token} if token else {})}
        try:
            listed = await api.get(f"{path}?{urllib.parse.urlencode(query)}")
        except Malformed as exc:
            if not exc.too_large or page == 1:
                raise
            page = max(1, page // 4)
            continue
        items.extend(obj for obj in listed.get("items") or [] if isinstance(obj, dict))
        meta = listed.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        version = str(meta.get("resourceVersion") or version)
        token = str(meta.get("continue") or "")
        if not token:
            return items, version


async def list_and_watch(
    api: LiteApi,
    path: str,
    *,
    on_list: Callable[[list[dict[str, Any]]], None],
    on_event: Callable[[str, dict[str, Any]], None],
    on_error: Callable[[Exception], None] | None = None,
    params: Mapping[str, str] | None = None,
    retry_first: float = 0.5,
    retry_max: float = 30.0,
    lived: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> None:
    """List the collection at `path`, then watch it from the list's resourceVersion, again and
    again, until cancelled (the API conventions' list+watch).

    `on_list` gets every object after each listing (to replace what the caller holds: objects
    deleted while no watch was open go too); `on_event` gets ADDED, MODIFIED and DELETED with
    the object; `on_error` hears why a list or watch failed (a 410 included, and a watch the
    server ended less than `lived` seconds after it began: `WatchEnded`), after which the
    collection is listed again. Failures back off (`Backoff`: `retry_first` seconds doubling up
    to `retry_max`, with jitter) and the delay starts over only after a watch that lived
    `lived` seconds: a successful list alone does not count, or a server that breaks every
    watch at once would be listed twice a second for ever. A watch that lived and ended is
    followed at once by the next, from where it was. `params` (a field selector) apply to the
    list and the watch alike. `clock`, `sleep` and `rand` are the time and chance it runs on.
    """
    backoff = Backoff(retry_first, retry_max, rand=rand)
    while True:
        try:
            items, version = await _list(api, path, params)
            on_list(items)
            # Not held while watching: a listing of every pod would stay in memory for hours.
            del items
            while True:  # the server ends each watch after a while: watch on from where it was
                began = clock()
                try:
                    async for event in api.watch(path, version, params=params):
                        kind, obj = event.get("type"), event.get("object")
                        if not isinstance(obj, dict):
                            continue
                        if kind == "ERROR":
                            code = obj.get("code")
                            raise ApiError(f"WATCH {path}", code if isinstance(code, int) else 0,
                                           str(obj.get("message", ""))[:500])
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            on_event(str(kind), obj)
                        meta = obj.get("metadata")
                        if isinstance(meta, dict) and meta.get("resourceVersion"):
                            version = str(meta["resourceVersion"])
                finally:
                    lasted = clock() - began
                    if lasted >= lived:
                        backoff.reset()
                if lasted < lived:
                    raise WatchEnded(f"WATCH {path}: the server ended the watch after {lasted:.1f} s")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if on_error is not None:
                on_error(exc)
            await sleep(backoff.next())


def object_path(group: str, version: str, plural: str, name: str, namespace: str | None = None) -> str:
    """The API path of one object (`group` "" for the core group)."""
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    where = f"/namespaces/{urllib.parse.quote(namespace, safe='')}" if namespace else ""
    return f"{base}{where}/{plural}/{urllib.parse.quote(name, safe='')}"


__all__ = ["ApiError", "Backoff", "Gone", "LiteApi", "Malformed", "NotFound", "Unreachable", "WatchEnded",
           "list_and_watch", "object_path"]
