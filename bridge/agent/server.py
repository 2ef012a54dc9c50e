"""The agent's HTTP API on a unix socket (aiohttp, which kopf already brings in).

    POST /v1/cni    body: "CNI_X=value\\n" per CNI variable, an empty line, then the
                    network configuration (the runtime's stdin) verbatim
                    200 body: the CNI result (empty when the command has none)
                    4xx/5xx body: the CNI error {"cniVersion", "code", "msg", "details"}
    GET  /v1/ready  200 {"ready": true} | 503 {"ready": false, "problem": "..."}

The framing keeps the shim free of a JSON encoder (see `bridge.agent.shim`). The
socket is bound and set to mode 0600 before it listens, so only root (the
runtime, through the shim) can ever connect. Handlers are not cancelled when a
client goes away: an ADD or DEL that started runs to its end and stays recorded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from bridge.agent.invoke import CNIError, ErrorCode
from bridge.agent.metrics import AgentMetrics

log = logging.getLogger(__name__)

API_PATH = "/v1/cni"
READY_PATH = "/v1/ready"


def _error(exc: CNIError, status: int, version: str = "1.1.0") -> web.Response:
    return web.json_response(exc.to_json(version), status=status)


def parse_body(body: bytes) -> tuple[dict[str, str], bytes]:
    """A request body -> (CNI environment, stdin); CNIError 6 when it is not framed as above."""
    head, sep, stdin = body.partition(b"\n\n")
    if not sep and body.startswith(b"\n"):
        head, sep, stdin = b"", b"\n", body[1:]
    if not sep:
        raise CNIError(
            ErrorCode.DECODING_FAILURE,
            "malformed request to the agent",
            "expected CNI_*=value lines, an empty line, then the network configuration",
        )
    env: dict[str, str] = {}
    for line in head.decode("utf-8", "surrogateescape").split("\n") if head else []:
        name, eq, value = line.partition("=")
        if not eq or not name.startswith("CNI_"):
            raise CNIError(
                ErrorCode.DECODING_FAILURE, "malformed request to the agent", f"bad line {line[:80]!r}"
            )
        env[name] = value
    return env, stdin


class Handler(Protocol):
    """What the server needs of whoever answers CNI requests (the agent; a fake in tests)."""

    async def handle(self, env: Mapping[str, str], stdin: bytes) -> dict[str, Any] | None:
        """The CNI result of one request (None when the command has none); raises `CNIError`."""

    async def default_network_problem(self) -> str | None:
        """Why a pod could not attach now (GET /v1/ready answers 503 with it), or None."""


class Server:
    """The unix-socket HTTP API in front of a `Handler`."""

    def __init__(self, handler: Handler, socket_path: Path, max_request_bytes: int,
                 metrics: AgentMetrics | None = None) -> None:
        self.handler = handler
        self.metrics = metrics
        self.socket_path = socket_path
        self._limit = max_request_bytes
        self._runner: web.AppRunner | None = None
        self._sock: socket.socket | None = None

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
        # Room for the environment lines around a configuration of the allowed size.
        app = web.Application(client_max_size=self._limit + 64 * 1024)
        app.router.add_post(API_PATH, self._cni)
        app.router.add_get(READY_PATH, self._ready)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.SockSite(self._runner, sock)
        await site.start()
        log.info("CNI agent listening on %s", path)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()

    async def _ready(self, request: web.Request) -> web.Response:
        problem = await self.handler.default_network_problem()
        return web.json_response(
            {"ready": problem is None, "problem": problem}, status=200 if problem is None else 503
        )

    async def _cni(self, request: web.Request) -> web.Response:
        if self.metrics is None:
            return await self._answer(request, {})
        started = self.metrics.started()
        code: int = ErrorCode.IO_FAILURE  # what the shim reports when no answer comes
        env: dict[str, str] = {}
        try:
            response = await self._answer(request, env)
            code = _code_of(response)
            return response
        finally:
            self.metrics.finished(env.get("CNI_COMMAND"), code, started)

    async def _answer(self, request: web.Request, seen: dict[str, str]) -> web.Response:
        """The answer to one CNI request; `seen` gets its CNI environment once parsed."""
        too_large = CNIError(
            ErrorCode.REQUEST_TOO_LARGE,
            "request too large",
            f"the agent accepts network configurations up to {self._limit} bytes",
        )
        if request.content_length is not None and request.content_length > self._limit + 64 * 1024:
            return _error(too_large, 413)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(too_large, 413)
        try:
            env, raw = parse_body(body)
        except CNIError as exc:
            return _error(exc, 400)
        seen.update(env)
        if len(raw) > self._limit:
            return _error(too_large, 413)
        version = _requested_version(raw)
        try:
            result = await self.handler.handle(env, raw)
        except CNIError as exc:
            # %r: the values are the runtime's, not yet known to be printable.
            log.info("%r %r: %s", env.get("CNI_COMMAND"), env.get("CNI_CONTAINERID"), exc)
            return _error(exc, 400 if exc.code < 100 else 500, version)
        except Exception as exc:
            log.exception("unexpected failure handling %r", env.get("CNI_COMMAND"))
            return _error(CNIError(ErrorCode.IO_FAILURE, "internal agent error", repr(exc)), 500, version)
        if result is None:
            return web.Response(status=200)
        return web.json_response(result)


def _code_of(response: web.Response) -> int:
    """The CNI result code of an answer: 0 for success, else the error's `code`."""
    if response.status == 200:
        return 0
    try:
        code = json.loads(response.body)["code"]  # type: ignore[arg-type]
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
    return version if isinstance(version, str) and version else "1.1.0"
