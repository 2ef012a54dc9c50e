"""Prometheus metrics as every component exposes them: one registry per component, one
set of name rules, one exposition, and the instruments the two operators share.

Name rules (docs/metrics.md), checked by `problems` and by the tests for every
component's registry:

- every name starts with `podnetwork_<component>_`;
- a counter is exposed as `..._total` (prometheus_client adds the suffix: declare
  counters without it);
- a histogram or a gauge of a measured quantity names its unit (`_seconds`, `_bytes`);
  a gauge of a count names what it counts (`_objects`, `_records`, `_requests`...).

Each component gets its own `CollectorRegistry`, never prometheus_client's global one:
several components (the demo, the tests) may live in one process, and the process's own
collectors (GC, platform) are not ours to document.

Operators (`podnetwork controller`, `podnetwork bridge`) serve `asgi_app` on
`--metrics-port` (`arguments.add_metrics_arguments`), plain HTTP; the extender
serves `/metrics` on its own port; the agent on `--metrics-port` of its own (asyncio streams and h11,
`bridge.agent.daemon.metrics`).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar, cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger(__name__)

PREFIX = "podnetwork_"
#: Units a histogram's name may end with.
UNITS = ("_seconds", "_bytes")
#: Seconds, for calls answered within a scheduler's or an API server's patience: the API
#: server waits 10 s for a webhook by default (ours ask for 5), kube-scheduler 5 s for an extender.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
METRICS_PATH = "/metrics"

Labels = tuple[str, ...]


def registry() -> CollectorRegistry:
    """A registry of one component (never the process-global one)."""
    return CollectorRegistry(auto_describe=True)


def families(reg: CollectorRegistry) -> dict[str, str]:
    """Every metric family `reg` exposes, as exposed name -> type (`counter` names with `_total`)."""
    found: dict[str, str] = {}
    for metric in reg.collect():
        name = f"{metric.name}_total" if metric.type == "counter" else metric.name
        found[name] = metric.type
    return found


def problems(reg: CollectorRegistry, component: str) -> list[str]:
    """What in `reg` breaks the name rules above (empty when nothing does)."""
    prefix = f"{PREFIX}{component}_"
    found = []
    for name, kind in sorted(families(reg).items()):
        if not name.startswith(prefix):
            found.append(f"{name}: does not start with {prefix}")
        if kind != "counter" and name.endswith("_total"):
            found.append(f"{name}: only counters end with _total ({kind})")
        if kind == "histogram" and not name.endswith(UNITS):
            found.append(f"{name}: a histogram names its unit ({', '.join(UNITS)})")
    return found


def exposition(reg: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition of `reg`, and its content type."""
    return generate_latest(reg), CONTENT_TYPE_LATEST


class CallbackGauge(Collector):
    """A gauge read at scrape time from `read`, so the code it watches pays nothing per change.

    `read` returns the value, or with `labels` a mapping of label values -> value. A `read`
    that raises leaves the gauge out of that scrape (the error is not the scraper's).
    """

    def __init__(self, name: str, documentation: str, read: Callable[[], float | Mapping[Labels, float]],
                 labels: Iterable[str] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = list(labels)
        self.read = read

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.name, self.documentation, labels=self.labels or None)

    def collect(self) -> Iterator[Metric]:
        try:
            value = self.read()
        except Exception:
            return
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labels or None)
        if isinstance(value, Mapping):
            for key, number in value.items():
                family.add_metric(list(key), number)
        else:
            family.add_metric([], value)
        yield family


# --- serving -------------------------------------------------------------------------------

ASGIScope = MutableMapping[str, Any]
ASGIReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
ASGISend = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def asgi_app(reg: CollectorRegistry) -> Callable[[ASGIScope, ASGIReceive, ASGISend], Awaitable[None]]:
    """A plain ASGI app: `GET /metrics` answers the exposition of `reg`, anything else 404."""

    async def app(scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != METRICS_PATH or scope["method"] not in ("GET", "HEAD"):
            status, body, kind = 404, b"not found: the metrics are at GET /metrics\n", "text/plain"
        else:
            body, kind = exposition(reg)
            status = 200
        headers = [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    return app


# --- what the two operators share ------------------------------------------------------------


class OperatorMetrics:
    """Handler runs and failures, API writes, webhook latency and rejections of one operator.

    `component` is `controller` or `bridge`: it is part of every name. Components add
    their own gauges with `gauge`.
    """

    def __init__(self, component: str) -> None:
        self.component = component
        self.registry = registry()
        name = f"{PREFIX}{component}"
        self.handler_runs = Counter(
            f"{name}_handler_runs", "kopf handler runs, by handler and the resource it watches.",
            ["handler", "resource"], registry=self.registry)
        self.handler_failures = Counter(
            f"{name}_handler_failures", "kopf handler runs that raised, by handler and resource.",
            ["handler", "resource"], registry=self.registry)
        self.api_writes = Counter(
            f"{name}_api_writes", "Writes to the API server, by kind, verb (create, patch, "
            "patch_status) and outcome (written, conflict, not_found, failed). A steady cluster "
            "adds none.",
            ["kind", "verb", "outcome"], registry=self.registry)
        self.webhook_latency = Histogram(
            f"{name}_webhook_request_duration_seconds", "Time to answer an admission request, by path.",
            ["path"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.webhook_rejections = Counter(
            f"{name}_webhook_rejections", "AdmissionReviews answered with allowed: false, by path.",
            ["path"], registry=self.registry)

    def gauge(self, suffix: str, documentation: str, read: Callable[[], float | Mapping[Labels, float]],
              labels: Iterable[str] = ()) -> None:
        name = f"{PREFIX}{self.component}_{suffix}"
        self.registry.register(CallbackGauge(name, documentation, read, labels))

    def counter(self, suffix: str, documentation: str, labels: Iterable[str] = ()) -> Counter:
        """A component's own counter, named as the others (`_total` added by the client)."""
        return Counter(f"{PREFIX}{self.component}_{suffix}", documentation, list(labels),
                       registry=self.registry)

    def on_write(self, kind: str, verb: str, outcome: str) -> None:
        """`podnetwork.kube.client.AsyncApi.on_write`."""
        self.api_writes.labels(kind, verb, outcome).inc()

    def counted(self, fn: F, handler: str, resource: str) -> F:
        """`fn` counting its runs and failures (`podnetwork.cli.handlers` applies it)."""
        runs = self.handler_runs.labels(handler, resource)
        failures = self.handler_failures.labels(handler, resource)
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def counted_async(*args: Any, **kwargs: Any) -> Any:
                runs.inc()
                try:
                    return await fn(*args, **kwargs)
                except Exception:
                    failures.inc()
                    raise
            return cast(F, counted_async)

        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            runs.inc()
            try:
                return fn(*args, **kwargs)
            except Exception:
                failures.inc()
                raise
        return cast(F, counted)

    def webhook(self, app: Callable[[ASGIScope, ASGIReceive, ASGISend], Awaitable[None]]
                ) -> Callable[[ASGIScope, ASGIReceive, ASGISend], Awaitable[None]]:
        """`app` (an admission webhook, ASGI) timed per path, its refusals counted.

        A refusal is an answer whose AdmissionReview says `allowed: false`; the body is
        read only when it is JSON and small (the answers are: a few hundred bytes).
        """

        async def timed(scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            path = str(scope.get("path", ""))
            started = time.perf_counter()
            body = bytearray()

            async def watching(message: MutableMapping[str, Any]) -> None:
                if message["type"] == "http.response.body" and len(body) < _REVIEW_BYTES:
                    body.extend(message.get("body", b""))
                await send(message)

            try:
                await app(scope, receive, watching)
            finally:
                self.webhook_latency.labels(path).observe(time.perf_counter() - started)
            if _refused(bytes(body)):
                self.webhook_rejections.labels(path).inc()

        return timed


#: Answers longer than this are not AdmissionReviews of ours; their bodies are not kept.
_REVIEW_BYTES = 64 * 1024


def _refused(body: bytes) -> bool:
    try:
        review = json.loads(body)
    except ValueError:
        return False
    response = review.get("response") if isinstance(review, dict) else None
    return isinstance(response, dict) and response.get("allowed") is False


__all__ = [
    "LATENCY_BUCKETS",
    "METRICS_PATH",
    "PREFIX",
    "CallbackGauge",
    "OperatorMetrics",
    "asgi_app",
    "exposition",
    "families",
    "problems",
    "registry",
]
