"""The agent's Prometheus metrics (docs/metrics.md), and the loopback HTTP server that shows them.

The agent's API is a root-only unix socket the runtime talks to; a scraper is
another client with other rights, so the metrics get their own TCP listener,
on 127.0.0.1 unless told otherwise (`--metrics-host`), and only when
`--metrics-port` is given: the agent runs in the host's network namespace,
where any fixed default port may already be taken.

Status writes (pending, failed) belong to whoever publishes network-status:
`AgentMetrics.watch_status_writes` takes two callables and exposes them; until
it is called those two metrics are not exposed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from aiohttp import web
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge.agent.delegates.invoke import Command
from podnetwork.cli import metrics as kube_metrics

log = logging.getLogger(__name__)

#: Seconds: from a VERSION (sub-millisecond) to a plugin at the default --plugin-timeout (60 s).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_COMMANDS = frozenset(Command)


def command_label(value: str | None) -> str:
    """A CNI_COMMAND as a label: one of the spec's commands, else `invalid` (labels stay few)."""
    return value if value in _COMMANDS else "invalid"


class _StatusWrites(Collector):
    def __init__(self, pending: Callable[[], int], failed: Callable[[], int]) -> None:
        self.pending = pending
        self.failed = failed

    def describe(self) -> Iterator[Metric]:
        yield from self._families(0, 0)

    def collect(self) -> Iterator[Metric]:
        try:
            pending, failed = self.pending(), self.failed()
        except Exception:
            return
        yield from self._families(pending, failed)

    @staticmethod
    def _families(pending: int, failed: int) -> Iterator[Metric]:
        yield GaugeMetricFamily("podnetwork_agent_status_writes_pending",
                                "network-status writes (NPWG 5) answered to the runtime but not yet "
                                "written to the pod.", value=pending)
        yield CounterMetricFamily("podnetwork_agent_status_writes_failed",
                                  "network-status write attempts that failed (each is retried).",
                                  value=failed)


class AgentMetrics:
    """What the agent measures: requests at its socket, plugin executions, its cache."""

    def __init__(self, cache_records: Callable[[], int]) -> None:
        self.registry = kube_metrics.registry()
        self.requests = Histogram(
            "podnetwork_agent_request_duration_seconds",
            "Time to answer one CNI request at the agent's socket, by CNI command and result "
            "code (0: success, else the CNI error code).",
            ["command", "code"], buckets=BUCKETS, registry=self.registry)
        self.errors = Counter(
            "podnetwork_agent_errors", "CNI errors answered, by CNI error code.",
            ["code"], registry=self.registry)
        self.in_flight = Gauge(
            "podnetwork_agent_requests_in_flight", "CNI requests being handled now.",
            registry=self.registry)
        self.plugin_execs = Histogram(
            "podnetwork_agent_plugin_exec_duration_seconds",
            "Time of one delegate plugin execution, by plugin type, CNI command and result "
            "(ok: exit status 0).",
            ["plugin", "command", "result"], buckets=BUCKETS, registry=self.registry)
        self.registry.register(kube_metrics.CallbackGauge(
            "podnetwork_agent_cache_records",
            "Containers the agent holds a record of (files in --cache-dir).", cache_records))

    def watch_status_writes(self, pending: Callable[[], int], failed: Callable[[], int]) -> None:
        """Expose the network-status publisher's queue: `pending()` writes not done yet and
        `failed()` attempts that failed so far (a count that only grows), read at each scrape."""
        self.registry.register(_StatusWrites(pending, failed))

    def observe_exec(self, plugin: str, command: str, ok: bool, seconds: float) -> None:
        """`invoke.Measured`'s callback."""
        self.plugin_execs.labels(plugin, command_label(command), "ok" if ok else "failed").observe(seconds)

    def started(self) -> float:
        self.in_flight.inc()
        return time.perf_counter()

    def finished(self, command: str | None, code: int, started: float) -> None:
        self.in_flight.dec()
        self.requests.labels(command_label(command), str(code)).observe(time.perf_counter() - started)
        if code:
            self.errors.labels(str(code)).inc()


class MetricsServer:
    """GET /metrics over plain HTTP on `host`:`port`, in the agent's event loop."""

    def __init__(self, metrics: AgentMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(kube_metrics.METRICS_PATH, self._scrape)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}; "
                          "pick another --metrics-host or --metrics-port") from None
        self._runner = runner
        log.info("agent metrics on http://%s:%d%s", self.host, self.port, kube_metrics.METRICS_PATH)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _scrape(self, request: web.Request) -> web.Response:
        body, kind = kube_metrics.exposition(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": kind})


__all__ = ["BUCKETS", "AgentMetrics", "MetricsServer", "command_label"]
