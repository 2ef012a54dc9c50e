"""The agent's HTTP API on a unix socket (HTTP/1.1 on asyncio streams), speaking the protocol
of `bridge.agent.shim.protocol` (defined there once, for the shims and this server):

    POST /v1/cni    body: "CNI_X=value\\n" per CNI variable, an empty line, then the
                    network configuration (the runtime's stdin) verbatim
                    200 body: the CNI result (empty when the command has none)
                    4xx/5xx body: the CNI error {"cniVersion", "code", "msg", "details"}
    GET  /v1/ready  200 {"ready": true} | 503 {"ready": false, "problem": "..."}

The socket is bound and set to mode 0600 before it listens, so only root (the
runtime, through the shim) can ever connect. Handlers are not cancelled when a
client goes away: an ADD or DEL that started runs to its end and stays recorded.

Connections are bounded, and a connection that sends nothing never costs a request its
place:

- a request's head and body must arrive within `read_timeout` seconds of the connection
  (the shim sends them at once); a connection that has not sent them by then is answered
  HTTP 408 with CNI error 11 ("try again later") and closed;
- at most `max_connections` connections wait for their request. One more closes the
  oldest waiting one that has sent nothing yet, or has waited `EVICT_SECONDS` (answered
  408, error 11), and takes its place: idle connections evict each other, not the
  runtime's (the shim writes its whole request the moment it connects, and a connection
  that sent anything is closed only after `EVICT_SECONDS`; one closed in that moment
  anyway gets error 11, which the runtime retries). When none may be closed, it waits as
  well, up to twice the limit;
- at most `max_connections` requests are served at once (each is one CNI request in
  flight); a complete request beyond that is answered HTTP 503 with error 11;
- at most three times the limit are open in all; one more is closed unanswered.

Each kind of refusal is logged, at most once per `LOG_EVERY` seconds with the count since.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import socket
import stat
import termios
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, SupportsIndex

from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.shim import protocol

if TYPE_CHECKING:  # prometheus_client only where --metrics-port asks for it
    from bridge.agent.daemon.metrics import AgentMetrics

log = logging.getLogger(__name__)

API_PATH = protocol.API_PATH
READY_PATH = protocol.READY_PATH


def _error_body(exc: CNIError, version: str = protocol.LATEST_VERSION) -> bytes:
    return json.dumps(exc.to_json(version)).encode()


def parse_body(body: bytes) -> tuple[dict[str, str], bytes]:
    """A request body -> (CNI environment, stdin); CNIError 6 when it is not framed as the
    protocol frames it (`protocol.unframe`)."""
    try:
        return protocol.unframe(body)
    except protocol.Malformed as exc:
        raise CNIError(ErrorCode.DECODING_FAILURE, "malformed request to the agent", str(exc)) from None


class Handler(Protocol):
    """What the server needs of whoever answers CNI requests (the agent; a fake in tests)."""

    async def handle(self, env: Mapping[str, str], stdin: bytes) -> dict[str, Any] | None:
        """The CNI result of one request (None when the command has none); raises `CNIError`."""

    async def readiness_problem(self) -> str | None:
        """Why a pod could not attach now (GET /v1/ready answers 503 with it), or None."""


_REASONS = protocol.REASONS
#: The request line and headers may take this much; the shim sends ~150 bytes.
MAX_HEAD_BYTES = protocol.MAX_HEAD_BYTES
#: Seconds the server reads (and drops) what a client still sends after its answer.
DRAIN_SECONDS = 10.0
#: Seconds a stopping server gives requests in flight (an ADD runs to its end, see above).
SHUTDOWN_SECONDS = 60.0
#: Connections served at once (each is one CNI request in flight): more than the pods a node
#: runs (the kubelet's default is 110), so only a runaway client meets it.
MAX_CONNECTIONS = 128
#: Seconds a client has to send its whole request, from the moment it connected.
READ_SECONDS = 10.0
#: Seconds a connection over the limit is kept after its answer (reading what the client still
#: sends, so that closing does not reset the connection before it reads the answer).
BUSY_SECONDS = 1.0
#: Seconds between two log lines about the same kind of refused connection.
LOG_EVERY = 10.0
#: Seconds after which a connection still waiting for its request may be closed for a new one,
#: even if it has sent part of it (a slow client): the shim sends its whole request at once.
EVICT_SECONDS = 1.0


class _Refused(Exception):
    """A request this server does not take, answered with `status` and a CNI error."""

    def __init__(self, status: int, error: CNIError) -> None:
        super().__init__(error.msg)
        self.status, self.error = status, error


class _Tally:
    """Counts one kind of refused connection; logs at most once per `LOG_EVERY` seconds."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self.total = 0
        self._last: float | None = None

    def note(self) -> None:
        self.count += 1
        self.total += 1
        now = time.monotonic()
        if self._last is None or now - self._last >= LOG_EVERY:
            log.warning("%s (%d since the last such line)", self.what, self.count)
            self.count, self._last = 0, now


class _TimedOut(Exception):
    """The client did not send its whole request within the read timeout."""


class _Reader(asyncio.StreamReader):
    """A stream reader that knows whether the client sent anything."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)
        self.heard = False

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        self.heard = True
        super().feed_data(data)


class _Waiting:
    """A connection whose request has not fully arrived."""

    __slots__ = ("evicted", "reader", "since", "writer")

    def __init__(self, reader: _Reader, writer: asyncio.StreamWriter, since: float) -> None:
        self.reader, self.writer, self.since = reader, writer, since
        self.evicted = False

    def sent_nothing(self) -> bool:
        """Nothing read from the client, and nothing in the socket yet for the loop to read."""
        if self.reader.heard:
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return True
        pending = array.array("i", [0])
        try:
            fcntl.ioctl(sock.fileno(), termios.FIONREAD, pending)
        except OSError:
            return True  # closed meanwhile: nothing will come
        return pending[0] == 0


class Server:
    """The unix-socket HTTP API in front of a `Handler`.

    HTTP/1.1 on asyncio streams, one request per connection (the shim sends
    `Connection: close`), a body only with `Content-Length`. A framework would cost
    the agent's every process ~13 MB of RSS for what fits here (docs/benchmarks.md).
    """

    def __init__(self, handler: Handler, socket_path: Path, max_request_bytes: int,
                 metrics: AgentMetrics | None = None, *, max_connections: int = MAX_CONNECTIONS,
                 read_timeout: float = READ_SECONDS) -> None:
        self.handler = handler
        self.metrics = metrics
        self.socket_path = socket_path
        self._limit = max_request_bytes
        self.max_connections = max_connections
        self.read_timeout = read_timeout
        self._server: asyncio.AbstractServer | None = None
        self._sock: socket.socket | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._open = 0
        """Connections open now, in any state."""
        self._waiting: dict[_Waiting, None] = {}
        """Connections whose request has not fully arrived, the oldest first."""
        self._serving = 0
        """Requests being answered."""
        self.busy = _Tally(
            f"CNI agent: {max_connections} requests are being served, its limit (--max-connections); "
            "answered one more with CNI error 11 (try again later)")
        self.evicted = _Tally(
            f"CNI agent: {max_connections} connections are waiting for their request, its limit "
            "(--max-connections); closed the oldest idle one for a new one (CNI error 11)")
        self.overflow = _Tally(
            f"CNI agent: too many connections (over {max_connections} waiting for their request that may not "
            "be closed yet, or three times --max-connections in all); closed one more without an answer")
        self.timed_out = _Tally(
            f"CNI agent: a client sent no complete request within {read_timeout:g} s of connecting; "
            "answered CNI error 11 and closed the connection")

    @property
    def open_connections(self) -> int:
        """Connections open now, served or being turned away."""
        return self._open

    @property
    def waiting_connections(self) -> int:
        """Connections whose request has not fully arrived."""
        return len(self._waiting)

    async def start(self) -> None:
        path = self.socket_path
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                if _listening(path):
                    raise OSError(f"another agent is already listening on {path}")
                path.unlink()  # a previous agent's socket; nobody listens on it any more
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            os.chmod(path, 0o600)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._server = await asyncio.get_running_loop().create_unix_server(self._protocol, sock=sock)
        log.info("CNI agent listening on %s", path)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # no new connections; the ones in flight finish
            if self._in_flight:
                await asyncio.wait(set(self._in_flight), timeout=SHUTDOWN_SECONDS)
            for task in self._in_flight:
                task.cancel()
            self._server = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()

    def _protocol(self) -> asyncio.StreamReaderProtocol:
        # As asyncio.start_unix_server makes it, with a reader that counts what arrived.
        return asyncio.StreamReaderProtocol(_Reader(MAX_HEAD_BYTES), self._connection)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert isinstance(reader, _Reader)
        limit = self.max_connections
        full = len(self._waiting) >= limit and not self._evict()
        if self._open >= 3 * limit or (full and len(self._waiting) >= 2 * limit):
            self.overflow.note()
            writer.transport.abort()
            return
        waiting = _Waiting(reader, writer, time.monotonic())
        self._waiting[waiting] = None
        self._open += 1
        try:
            await self._serve(reader, writer, waiting)
        finally:
            self._waiting.pop(waiting, None)
            self._open -= 1

    def _evict(self) -> bool:
        """Closes the oldest waiting connection that has sent nothing, or has waited `EVICT_SECONDS`,
        answering it 408 with error 11; False when none may be closed."""
        now = time.monotonic()
        for waiting in self._waiting:
            if now - waiting.since >= EVICT_SECONDS or waiting.sent_nothing():
                break
        else:
            return False
        del self._waiting[waiting]
        waiting.evicted = True
        self.evicted.note()
        error = CNIError(
            ErrorCode.TRY_AGAIN_LATER,
            "closed while waiting for a request: try again",
            f"{self.max_connections} connections were waiting for their request, the agent's limit "
            "(--max-connections), and this one had sent none",
        )
        with contextlib.suppress(ConnectionError, RuntimeError):
            waiting.writer.write(_head(408, _error_body(error)))
        # Its task, reading, meets the end of the stream and ends.
        waiting.writer.close()
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     waiting: _Waiting) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
        try:
            try:
                status, body = await self._answer(reader, waiting)
            except _TimedOut:
                self.timed_out.note()
                error = CNIError(
                    ErrorCode.TRY_AGAIN_LATER,
                    f"no complete request within {self.read_timeout:g} s of connecting: try again",
                    "the agent reads the whole request (head and body) within that time",
                )
                # No draining: a client this slow may go on sending one byte at a time.
                await self._reply(writer, 408, _error_body(error))
                return
            # A refused request's body may still be on its way: closing now would reset the
            # connection under the sender, who would never read the answer. So: our end, then
            # what is left of theirs, discarded.
            await self._reply(writer, status, body, drain_from=reader,
                              drain_seconds=BUSY_SECONDS if status == 503 else DRAIN_SECONDS)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away (or was evicted); what it asked for ran to its end (see above)
        finally:
            self._in_flight.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes, *,
                     drain_from: asyncio.StreamReader | None = None, drain_seconds: float = 0.0) -> None:
        writer.write(_head(status, body))
        await writer.drain()
        if drain_from is not None:
            writer.write_eof()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(drain_seconds):
                    await _discard(drain_from)

    async def _answer(self, reader: asyncio.StreamReader, waiting: _Waiting) -> tuple[int, bytes]:
        """The answer to the connection's request; `_TimedOut` if it did not arrive in time."""
        try:
            body = b""
            try:
                # One deadline for the head and the body (only their reading: the request itself,
                # an ADD of many networks, takes what it takes).
                async with asyncio.timeout(self.read_timeout):
                    method, target, length = await self._read_head(reader)
                    if target == API_PATH and method == "POST":
                        body = await reader.readexactly(length)
            except TimeoutError:
                raise _TimedOut from None
            finally:
                self._waiting.pop(waiting, None)  # arrived (or refused): no longer evictable
            if self._serving >= self.max_connections:
                self.busy.note()
                raise _Refused(503, CNIError(
                    ErrorCode.TRY_AGAIN_LATER,
                    "the CNI agent is busy: try again",
                    f"{self.max_connections} requests are being served, the agent's limit "
                    "(--max-connections)",
                ))
            self._serving += 1
            try:
                return await self._dispatch(method, target, body)
            finally:
                self._serving -= 1
        except _Refused as refused:
            return refused.status, _error_body(refused.error)

    async def _dispatch(self, method: str, target: str, body: bytes) -> tuple[int, bytes]:
        """The answer to a request that arrived whole; `_Refused` for a path or method not served."""
        if target == API_PATH:
            if method != "POST":
                raise _Refused(405, CNIError(ErrorCode.DECODING_FAILURE, f"{API_PATH} takes POST"))
            return await self._cni(body)
        if target == READY_PATH:
            if method != "GET":
                raise _Refused(405, CNIError(ErrorCode.DECODING_FAILURE, f"{READY_PATH} takes GET"))
            return await self._ready()
        raise _Refused(404, CNIError(ErrorCode.DECODING_FAILURE, f"no such path {target[:80]!r}",
                                     f"the agent serves POST {API_PATH} and GET {READY_PATH}"))

    async def _read_head(self, reader: asyncio.StreamReader) -> tuple[str, str, int]:
        """(method, path, Content-Length) of the request; `_Refused` when it cannot be served."""
        malformed = CNIError(ErrorCode.DECODING_FAILURE, "malformed HTTP request to the agent")
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise _Refused(400, malformed) from None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _Refused(400, malformed)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, colon, value = line.partition(":")
                if not colon:
                    raise _Refused(400, malformed)
                headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise _Refused(411, CNIError(ErrorCode.DECODING_FAILURE, "the agent needs a Content-Length",
                                         "send the body with Content-Length, as the shim does"))
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise _Refused(400, malformed) from None
        if length < 0:
            raise _Refused(400, malformed)
        # Room for the environment lines around the configuration.
        if length > self._limit + protocol.ENVIRONMENT_BYTES:
            raise _Refused(413, self._too_large())
        return parts[0], parts[1].split("?", 1)[0], length

    def _too_large(self) -> CNIError:
        return CNIError(
            ErrorCode.REQUEST_TOO_LARGE,
            "request too large",
            f"the agent accepts network configurations up to {self._limit} bytes",
        )

    async def _ready(self) -> tuple[int, bytes]:
        problem = await self.handler.readiness_problem()
        answer = {"ready": problem is None, "problem": problem}
        return 200 if problem is None else 503, json.dumps(answer).encode()

    async def _cni(self, body: bytes) -> tuple[int, bytes]:
        if self.metrics is None:
            return await self._cni_answer(body, {})
        started = self.metrics.started()
        code: int = ErrorCode.IO_FAILURE  # what the shim reports when no answer comes
        env: dict[str, str] = {}
        try:
            status, answer = await self._cni_answer(body, env)
            code = _code_of(status, answer)
            return status, answer
        finally:
            self.metrics.finished(env.get("CNI_COMMAND"), code, started)

    async def _cni_answer(self, body: bytes, seen: dict[str, str]) -> tuple[int, bytes]:
        """The answer to one CNI request; `seen` gets its CNI environment once parsed."""
        try:
            env, raw = parse_body(body)
        except CNIError as exc:
            return 400, _error_body(exc)
        seen.update(env)
        if len(raw) > self._limit:
            return 413, _error_body(self._too_large())
        version = _requested_version(raw)
        try:
            result = await self.handler.handle(env, raw)
        except CNIError as exc:
            # %r: the values are the runtime's, not yet known to be printable.
            log.info("%r %r: %s", env.get("CNI_COMMAND"), env.get("CNI_CONTAINERID"), exc)
            return protocol.answer_status(exc.code), _error_body(exc, version)
        except Exception as exc:
            log.exception("unexpected failure handling %r", env.get("CNI_COMMAND"))
            internal = CNIError(ErrorCode.IO_FAILURE, "internal agent error", repr(exc))
            return 500, _error_body(internal, version)
        return 200, b"" if result is None else json.dumps(result).encode()


def _head(status: int, body: bytes) -> bytes:
    """The answer's status line, headers and body."""
    return (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


async def _discard(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass


def _code_of(status: int, answer: bytes) -> int:
    """The CNI result code of an answer: 0 for success, else the error's `code`."""
    if status == 200:
        return 0
    try:
        code = json.loads(answer)["code"]
    except (TypeError, ValueError, KeyError):
        return int(ErrorCode.IO_FAILURE)
    return code if isinstance(code, int) else int(ErrorCode.IO_FAILURE)


def _listening(path: os.PathLike[str]) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1)
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _requested_version(stdin: bytes) -> str:
    try:
        conf: Any = json.loads(stdin)
        version = conf.get("cniVersion") if isinstance(conf, dict) else None
    except (ValueError, RecursionError):
        version = None
    return version if isinstance(version, str) and version else protocol.LATEST_VERSION
