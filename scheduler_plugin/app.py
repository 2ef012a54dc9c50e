"""The extender's HTTP face: a thin FastAPI shell around `decision.filter_nodes`.

Routes: `POST /filter` and `POST /prioritize` (the extender v1 verbs; configure
`filterVerb: filter`; `prioritizeVerb: prioritize` only adds neutral scores, see
docs/benchmarks.md), `GET /healthz` (the process
serves), `GET /readyz` (the cache is synced), `GET /metrics` (Prometheus text).
No route talks to the API server: every answer comes from the cache snapshot.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pydantic
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from podnetwork.cli import metrics as kube_metrics
from scheduler_plugin import cache as cache_mod
from scheduler_plugin import decision, wire
from scheduler_plugin.settings import Settings

logger = logging.getLogger(__name__)

_JSON = "application/json"
#: Seconds; kube-scheduler's default extender httpTimeout is 5 s, so the top buckets matter.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _CacheCollector(Collector):
    """Reads the cache's sizes at scrape time, so writers pay nothing for metrics."""

    def __init__(self, cache: cache_mod.Cache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily]:
        objects = GaugeMetricFamily(
            "podnetwork_extender_cache_objects", "Objects held in the extender's cache, by kind.",
            labels=["kind"],
        )
        for kind, count in self._cache.sizes().items():
            objects.add_metric([kind], count)
        yield objects
        yield GaugeMetricFamily(
            "podnetwork_extender_cache_synced", "1 once every watched kind was listed in full.",
            value=1 if self._cache.synced else 0,
        )


class _Metrics:
    def __init__(self, cache: cache_mod.Cache) -> None:
        # One registry per app: several apps (tests, the demo) may live in one process.
        self.registry = kube_metrics.registry()
        self.requests = Counter(
            "podnetwork_extender_requests", "Extender HTTP requests, by verb and status code.",
            ["verb", "code"], registry=self.registry,
        )
        self.latency = Histogram(
            "podnetwork_extender_request_duration_seconds", "Time to answer, by verb.",
            ["verb"], buckets=_BUCKETS, registry=self.registry,
        )
        self.nodes = Counter(
            "podnetwork_extender_filtered_nodes", "Candidate nodes judged by /filter, by outcome.",
            ["outcome"], registry=self.registry,
        )
        self.registry.register(_CacheCollector(cache))
        # Children bound once: `labels()` costs a lock and a dict lookup per call.
        self.outcomes = {o: self.nodes.labels(o) for o in ("passed", "failed", "unresolvable")}

    def observe(self, verb: str, code: int, started: float) -> None:
        self.requests.labels(verb, str(code)).inc()
        self.latency.labels(verb).observe(time.perf_counter() - started)


def _declared_too_long(declared: str | None, limit: int) -> HTTPException | None:
    """The refusal a declared Content-Length earns before any byte of the body is read."""
    if declared is None:
        return None
    if not declared.isdigit():
        return HTTPException(400, f"invalid Content-Length header {wire.readable(declared, 40)!r}")
    if int(declared) > limit:
        return HTTPException(
            413, f"request body of {declared} bytes exceeds the limit of {limit} bytes (--max-body-bytes)",
        )
    return None


def _too_long(limit: int) -> HTTPException:
    return HTTPException(413, f"request body exceeds the limit of {limit} bytes (--max-body-bytes)")


async def _read_body(request: Request, limit: int) -> bytearray:
    """The request body, refused with 413 as soon as it is known to exceed `limit` bytes.

    A declared Content-Length over the limit is refused before any byte of the body is
    read; a chunked body as soon as the bytes received pass the limit. (A body longer
    than its Content-Length is cut there by the HTTP parser: the rest is not this body.)
    The connection stays open: uvicorn reads the rest of a refused body and drops it, so
    the client, still sending, gets the 413 rather than a reset connection.
    """
    refusal = _declared_too_long(request.headers.get("content-length"), limit)
    if refusal is not None:
        raise refusal
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:  # chunked bodies announce no length
            raise _too_long(limit)
    return body


def _args(body: bytes | bytearray) -> tuple[wire.ExtenderArgs, list[str]]:
    try:
        args = wire.parse_args(body)
        names = args.candidate_names()
    except pydantic.ValidationError as exc:
        raise HTTPException(400, f"not an extender v1 ExtenderArgs body: {wire.describe(exc)}") from None
    except ValueError as exc:
        raise HTTPException(400, f"not an extender v1 ExtenderArgs body: {exc}") from None
    return args, names


async def _parse(request: Request, settings: Settings) -> tuple[wire.ExtenderArgs, list[str]]:
    return _args(await _read_body(request, settings.max_body_bytes))


def _reply(args: wire.ExtenderArgs, result: decision.FilterResult) -> wire.ExtenderFilterResult:
    """Answer in the request's shape, naming only nodes the request named."""
    # model_construct: these values are ours and already well-typed; validating
    # thousands of node names again would double the cost of the reply.
    if args.node_names is not None:
        return wire.ExtenderFilterResult.model_construct(
            nodes=None,
            node_names=result.passed,
            failed_nodes=result.failed,
            failed_and_unresolvable_nodes=result.unresolvable,
            error="",
        )
    by_name: dict[str, dict[str, Any]] = {}
    for node in args.node_items():
        by_name.setdefault(node["metadata"]["name"], node)
    return wire.ExtenderFilterResult.model_construct(
        nodes={"metadata": {}, "items": [by_name[n] for n in result.passed]},
        node_names=None,
        failed_nodes=result.failed,
        failed_and_unresolvable_nodes=result.unresolvable,
        error="",
    )


class _Gone(Exception):
    """The client went away before its request body was complete."""


class _Filter:
    """`POST /filter` as a plain ASGI application.

    kube-scheduler calls it once per pod, inside its scheduling cycle, which runs one pod
    at a time: whatever this costs, every pod of the cluster waits for it. FastAPI's
    request machinery (dependency solving, the Request object, the exception handlers)
    cost about as much as the whole decision, so this route reads the body, answers and
    counts by itself, with the same limits, messages and metrics as the other routes.
    """

    def __init__(self, cache: cache_mod.Cache, settings: Settings, metrics: _Metrics) -> None:
        self._cache, self._settings, self._metrics = cache, settings, metrics
        self._ok = metrics.requests.labels("filter", "200")
        self._latency = metrics.latency.labels("filter")
        self._outcomes = [metrics.outcomes[o] for o in ("passed", "failed", "unresolvable")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        try:
            body = await self._body(scope, receive)
            content = self._answer_fast(body)
            if content is None:
                content = self._answer_long(body)
        except HTTPException as exc:
            self._metrics.requests.labels("filter", str(exc.status_code)).inc()
            message = json.dumps({"message": wire.readable(str(exc.detail))}, ensure_ascii=False,
                                 separators=(",", ":")).encode()
            await _send(send, exc.status_code, message)
            return
        except _Gone:
            return
        self._ok.inc()
        self._latency.observe(time.perf_counter() - started)
        await _send(send, 200, content)

    async def _body(self, scope: Scope, receive: Receive) -> bytes | bytearray:
        """The body, with `_read_body`'s limits (413 before reading a declared length over it)."""
        limit = self._settings.max_body_bytes
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        refusal = _declared_too_long(None if declared is None else declared.decode("latin-1"), limit)
        if refusal is not None:
            raise refusal
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone
        first: bytes = message.get("body", b"")
        if len(first) > limit:
            raise _too_long(limit)
        if not message.get("more_body", False):
            return first  # the whole body in one message: no copy
        body = bytearray(first)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            body += message.get("body", b"")
            if len(body) > limit:  # chunked bodies announce no length
                raise _too_long(limit)
            if not message.get("more_body", False):
                return body

    def _answer_fast(self, body: bytes | bytearray) -> bytes | None:
        """The answer to kube-scheduler's own body, written straight from its bytes (None:
        not such a body, or a name the snapshot lacks: `_answer` then decides).

        kube-scheduler waits for this in every pod's scheduling cycle: the candidates
        are never read as strings, and the reply is joined from per-snapshot pieces
        (`decision.filter_encoded`). Same answers as `_answer`, byte for byte once
        decoded (tests/unit/extender/test_wire.py compares them).
        """
        try:
            raw = wire.scheduler_body(body)
            if raw is None:
                return None
            result = decision.filter_encoded(raw.pod, raw.names, self._cache.snapshot(),
                                             enabled=self._settings.multi_network)
        except Exception:  # the long way answers, or says it in the Error field
            logger.exception("filter failed on the short way; answering the long way")
            return None
        if result is None:
            return None
        outcomes = self._outcomes
        if result.passed:
            outcomes[0].inc(result.passed)
        if result.failed:
            outcomes[1].inc(result.failed)
        if result.unresolvable:
            outcomes[2].inc(result.unresolvable)
        return result.content

    def _answer_long(self, body: bytes | bytearray) -> bytes:
        """The answer to any body (raises HTTPException for a bad one)."""
        return self._answer(*_args(body))

    def _answer(self, args: wire.ExtenderArgs, names: list[str]) -> bytes:
        metrics = self._metrics
        try:
            # kube-scheduler's copy of each node is fresher than ours: decide with it.
            annotations = args.node_annotations() if args.node_names is None else None
            result = decision.filter_nodes(
                args.pod, names, self._cache.snapshot(),
                enabled=self._settings.multi_network, node_annotations=annotations,
            )
            content = _reply(args, result).to_json()
        except Exception as exc:  # the protocol's Error field, never a 500 the scheduler cannot read
            logger.exception("filter failed")
            error = wire.readable(f"podnetwork extender failed: {exc}")
            return wire.ExtenderFilterResult(error=error).to_json()
        metrics.outcomes["passed"].inc(len(result.passed))
        metrics.outcomes["failed"].inc(len(result.failed))
        metrics.outcomes["unresolvable"].inc(len(result.unresolvable))
        return content


async def _send(send: Send, status: int, content: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", b"%d" % len(content))]})
    await send({"type": "http.response.body", "body": content})


class ExtenderApp(FastAPI):
    """The FastAPI application, with `POST /filter` handed straight to its endpoint."""

    filter_endpoint: _Filter | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The one call per pod skips the framework's middleware and routing (about a
        # tenth of a millisecond); every other request goes the usual way.
        if (self.filter_endpoint is not None and scope["type"] == "http"
                and scope["path"] == "/filter" and scope["method"] == "POST"):
            await self.filter_endpoint(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(cache: cache_mod.Cache, settings: Settings) -> ExtenderApp:
    """The extender application over `cache`; the caller keeps the cache fed."""
    app = ExtenderApp(title="podnetwork scheduler extender", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = _Metrics(cache)
    app.state.cache = cache
    app.state.settings = settings
    app.state.metrics = metrics

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        verb = request.url.path.strip("/") or "root"
        metrics.requests.labels(verb, str(exc.status_code)).inc()
        return JSONResponse(
            {"message": wire.readable(str(exc.detail))}, status_code=exc.status_code, headers=exc.headers
        )

    endpoint = _Filter(cache, settings, metrics)
    app.router.routes.append(Route("/filter", endpoint, methods=["POST"]))
    app.filter_endpoint = endpoint

    @app.post("/prioritize")
    async def prioritize(request: Request) -> Response:
        # Network availability is a yes/no question: every passing node scores the same.
        # deploy/scheduler no longer configures this verb (a second call per pod that
        # changes no ranking, docs/benchmarks.md); it stays for configurations that do.
        started = time.perf_counter()
        _, names = await _parse(request, settings)
        content = wire.neutral_scores(names)
        metrics.observe("prioritize", 200, started)
        return Response(content, media_type=_JSON)

    if settings.baseline_endpoint:

        @app.post("/baseline/filter")
        async def baseline_filter(request: Request) -> Response:
            """The protocol alone: parse like /filter, pass every node (benchmarks only)."""
            started = time.perf_counter()
            args, names = await _parse(request, settings)
            reply = _reply(args, decision.FilterResult(passed=names))
            metrics.observe("baseline_filter", 200, started)
            return Response(reply.to_json(), media_type=_JSON)

    _add_probes(app, cache)

    @app.get("/metrics")
    async def metrics_() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _add_probes(app: FastAPI, cache: cache_mod.Cache) -> None:
    @app.get("/healthz")
    async def healthz() -> Response:
        return PlainTextResponse("ok\n")

    @app.get("/readyz")
    async def readyz() -> Response:
        if cache.synced:
            return PlainTextResponse("ok\n")
        return PlainTextResponse(
            "not ready: the cache of PodNetworks, PodNetworkAttachments and Nodes is not synced yet\n",
            status_code=503,
        )


def create_probe_app(cache: cache_mod.Cache) -> FastAPI:
    """`GET /healthz` and `GET /readyz` alone, as `create_app` answers them, for the kubelet.

    The extender listens on loopback, for the kube-scheduler beside it; the kubelet probes
    the pod's address, so the probes get an address of their own (`--probe-port`), where
    nothing else is served (controller-runtime's health-probe address does the same).
    """
    app = FastAPI(title="podnetwork scheduler extender probes", docs_url=None, redoc_url=None,
                  openapi_url=None)
    _add_probes(app, cache)
    return app
