"""A small asyncio HTTP/1.1 client of the Kubernetes API, for a process that must stay small.

The CNI agent runs on every node and only ever GETs objects by name, merge-patches
pod annotations, and lists and watches the few kinds it caches. `podnetwork.kube.client`
(lightkube over httpx, with HTTP/2, anyio and their models) costs such a process
~10 MB of RSS and ~1 ms of CPU per request; this module is the same credentials
(`podnetwork.kube.credentials`: TLS as the kubeconfig says, tokens, token files
re-read, exec plugins, a retry after a 401 when they can be renewed) over asyncio
streams, with kept-alive connections. Objects stay the dicts the API server sent.
No retries otherwise: the caller decides.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from podnetwork.kube import credentials as credentials_mod

#: Idle connections kept for the next requests (the agent's requests come in bursts per ADD).
MAX_IDLE = 4
#: Largest response accepted, bytes (an object is at most ~1.5 MB in etcd).
MAX_BODY = 16 * 1024 * 1024


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


class Gone(ApiError):
    """HTTP 410: a watch's resourceVersion is too old; list again."""


_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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
            try:
                decoded = json.loads(answer) if answer else {}
            except ValueError as exc:
                raise ApiError(what, status, f"the answer is not JSON: {exc}") from None
            return decoded if isinstance(decoded, dict) else {}
        message, reason = answer[:500].decode("utf-8", "replace"), ""
        try:
            decoded = json.loads(answer)
            if isinstance(decoded, dict):
                message, reason = str(decoded.get("message", message)), str(decoded.get("reason", ""))
        except ValueError:
            pass
        raise (NotFound if status == 404 else ApiError)(what, status, message, reason=reason)

    async def _exchange(
        self, what: str, method: str, path: str, payload: bytes, content_type: str
    ) -> tuple[int, bytes]:
        header = await self._auth.aheader()
        head = (f"{method} {self._prefix}{path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
                "Accept: application/json\r\nUser-Agent: podnetwork-cni-agent\r\n")
        if header:
            head += f"Authorization: {header}\r\n"
        if payload or method in ("PATCH", "POST", "PUT"):
            head += f"Content-Type: {content_type or 'application/json'}\r\n"
            head += f"Content-Length: {len(payload)}\r\n"
        request = head.encode() + b"\r\n" + payload
        try:
            async with asyncio.timeout(self.timeout):
                while self._idle:  # a kept connection the server may have closed meanwhile
                    conn = self._idle.pop()
                    try:
                        return await self._send(conn, request)
                    except (ConnectionError, asyncio.IncompleteReadError, _Closed):
                        continue
                return await self._send(await self._connect(), request)
        except TimeoutError:
            raise Unreachable(what, 0, f"no answer within {self.timeout:g} s") from None
        except (OSError, asyncio.IncompleteReadError, _Closed) as exc:
            raise Unreachable(what, 0, f"{type(exc).__name__}: {exc}") from None

    async def _connect(self) -> _Connection:
        if self._tls is None:
            return await asyncio.open_connection(self._host, self._port)
        server_name = self.credentials.tls_server_name or self._host
        return await asyncio.open_connection(
            self._host, self._port, ssl=self._tls, server_hostname=server_name
        )

    async def _send(self, conn: _Connection, request: bytes) -> tuple[int, bytes]:
        try:
            return await self._send_on(conn, request)
        except BaseException:
            conn[1].close()  # mid-answer: the connection cannot carry another request
            raise

    async def _send_on(self, conn: _Connection, request: bytes) -> tuple[int, bytes]:
        reader, writer = conn
        writer.write(request)
        await writer.drain()
        status, headers = await _read_head(reader)
        body = await _read_body(reader, headers)
        if headers.get(b"connection", b"").lower() == b"close" or len(self._idle) >= MAX_IDLE:
            writer.close()
        else:
            self._idle.append(conn)
        return status, body

    async def watch(self, path: str, resource_version: str, *, timeout_seconds: int = 300,
                    params: Mapping[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """The events (`{"type", "object"}`) of a collection from `resource_version`, until the server
        ends the watch (after about `timeout_seconds`); `params` are further query parameters (a
        field selector). A refusal is an `ApiError` (410: `Gone`, list
        again); a broken stream ends with `Unreachable`."""
        what = f"WATCH {path}"
        query = urllib.parse.urlencode({
            **(params or {}),
            "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds)})
        header = await self._auth.aheader()
        head = (f"GET {self._prefix}{path}?{query} HTTP/1.1\r\nHost: {self._host_header}\r\n"
                "Accept: application/json\r\nUser-Agent: podnetwork-cni-agent\r\n")
        if header:
            head += f"Authorization: {header}\r\n"
        try:
            async with asyncio.timeout(self.timeout):
                reader, writer = await self._connect()
        except (OSError, TimeoutError) as exc:
            raise Unreachable(what, 0, f"{type(exc).__name__}: {exc}") from None
        try:
            writer.write(head.encode() + b"\r\n")
            async with asyncio.timeout(self.timeout):
                status, headers = await _read_head(reader)
            if status != 200:
                body = await _read_body(reader, headers)
                if status == 401:
                    self._auth.invalidate()
                message = body[:500].decode("utf-8", "replace")
                raise (Gone if status == 410 else ApiError)(what, status, message)
            chunked = headers.get(b"transfer-encoding", b"").lower() == b"chunked"
            buffer = b""
            # Read with a deadline: a watch the server keeps open without a word past its own
            # timeout (and a bookmark a minute) is a dead connection.
            while True:
                async with asyncio.timeout(timeout_seconds + 60):
                    # Chunked, as the API server streams; else the body ends with the connection.
                    chunk = await _read_chunk(reader) if chunked else (await reader.read(65536) or None)
                if chunk is None:
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError, _Closed) as exc:
            raise Unreachable(what, 0, f"{type(exc).__name__}: {exc}") from None
        finally:
            writer.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()


class _Closed(Exception):
    """The connection cannot carry the answer (closed, or not HTTP)."""


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes]]:
    status_line = await reader.readline()
    if not status_line:
        raise _Closed("the server closed the connection")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise _Closed(f"not an HTTP answer: {status_line[:80]!r}")
    headers: dict[bytes, bytes] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[bytes, bytes]) -> bytes:
    if headers.get(b"transfer-encoding", b"").lower() != b"chunked":
        length = int(headers.get(b"content-length", b"0"))
        if length > MAX_BODY:
            raise _Closed(f"an answer of {length} bytes")
        return await reader.readexactly(length)
    chunks: list[bytes] = []
    total = 0
    while (chunk := await _read_chunk(reader)) is not None:
        total += len(chunk)
        if total > MAX_BODY:
            raise _Closed(f"an answer of more than {MAX_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_chunk(reader: asyncio.StreamReader) -> bytes | None:
    """The next chunk of a chunked body; None after the last (its trailers read)."""
    size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
    if size == 0:
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass  # trailers
        return None
    if size > MAX_BODY:
        raise _Closed(f"a chunk of {size} bytes")
    chunk = await reader.readexactly(size)
    await reader.readexactly(2)
    return chunk


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
) -> None:
    """List the collection at `path`, then watch it from the list's resourceVersion, again and
    again, until cancelled (the API conventions' list+watch).

    `on_list` gets every object after each listing (to replace what the caller holds: objects
    deleted while no watch was open go too); `on_event` gets ADDED, MODIFIED and DELETED with
    the object; `on_error` hears why a list or watch failed (a 410 included), after which the
    collection is listed again, `retry_first` seconds later, doubling up to `retry_max`.
    `params` (a field selector) apply to the list and the watch alike.
    """
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    delay = retry_first
    while True:
        try:
            listed = await api.get(path + query)
            on_list([obj for obj in listed.get("items") or [] if isinstance(obj, dict)])
            version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
            delay = retry_first
            while True:  # the server ends each watch after a while: watch on from where it was
                async for event in api.watch(path, version, params=params):
                    kind, obj = event.get("type"), event.get("object")
                    if not isinstance(obj, dict):
                        continue
                    if kind == "ERROR":
                        raise ApiError(f"WATCH {path}", int(obj.get("code") or 0),
                                       str(obj.get("message", "")))
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        on_event(str(kind), obj)
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if on_error is not None:
                on_error(exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, retry_max)


def object_path(group: str, version: str, plural: str, name: str, namespace: str | None = None) -> str:
    """The API path of one object (`group` "" for the core group)."""
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    where = f"/namespaces/{urllib.parse.quote(namespace, safe='')}" if namespace else ""
    return f"{base}{where}/{plural}/{urllib.parse.quote(name, safe='')}"


__all__ = ["ApiError", "Gone", "LiteApi", "NotFound", "Unreachable", "list_and_watch", "object_path"]
