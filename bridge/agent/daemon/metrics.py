"""The agent's Prometheus metrics (docs/metrics.md), and the loopback HTTP server that shows them.

The agent's API is a root-only unix socket the runtime talks to; a scraper is
another client with other rights, so the metrics get their own TCP listener,
on 127.0.0.1 unless told otherwise (`--metrics-host`), and only when
`--metrics-port` is given: the agent runs in the host's network namespace,
where any fixed default port may already be taken.

The listener is HTTP/1.1 on asyncio's streams, framed by h11 (which the agent's API client
loads anyway, `podnetwork.kube.lite`): aiohttp's server cost the agent ~11 MB of RSS for one
GET (docs/benchmarks.md, "The agent's RSS: where it goes, what was tried"). Each connection
gets `READ_TIMEOUT` seconds per request head, at most `MAX_CONNECTIONS` are open at once (one
more is closed unanswered), and a request may not carry a body: a scraper sends a GET.

Status writes (pending, failed) belong to whoever publishes network-status:
`AgentMetrics.watch_status_writes` takes two callables and exposes them; until
it is called those two metrics are not exposed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus

import h11
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge.agent.delegates.invoke import Command
from podnetwork.cli import metrics as kube_metrics

log = logging.getLogger(__name__)

#: Seconds: from a VERSION (sub-millisecond) to a plugin at the default --plugin-timeout (60 s).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_COMMANDS = frozenset(Command)
#: Seconds a connection has to send a request's head (a scraper sends it at once).
READ_TIMEOUT = 10.0
#: Connections open at once: a scraper or two, with room for a stuck one.
MAX_CONNECTIONS = 16
#: Bytes of a request's head: a GET's line and a few headers.
MAX_HEAD_BYTES = 16 * 1024


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
    """GET /metrics over plain HTTP on `host`:`port`, in the agent's event loop (asyncio streams, h11)."""

    def __init__(self, metrics: AgentMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._connection, self.host, self.port)
        except OSError as exc:
            raise OSError(f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}; "
                          "pick another --metrics-host or --metrics-port") from None
        log.info("agent metrics on http://%s:%d%s", self.host, self.port, kube_metrics.METRICS_PATH)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):  # a scraper's kept-alive connection must not hold the stop
            writer.close()
        if self._handlers:  # each sees its connection closed and ends (3.11's wait_closed does not wait)
            await asyncio.wait(list(self._handlers), timeout=READ_TIMEOUT)
        await self._server.wait_closed()
        self._server = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._writers) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._writers.add(writer)
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while True:
                request = await _next_request(conn, reader)
                if request is None:
                    break
                writer.write(self._answer(conn, request))
                await writer.drain()
                if set(conn.states.values()) != {h11.DONE}:
                    break  # h11's verdict: this connection must close (HTTP/1.0, Connection: close)
                conn.start_next_cycle()
        except (h11.ProtocolError, OSError, TimeoutError) as exc:
            log.debug("metrics connection closed: %s", exc)
        finally:
            self._writers.discard(writer)
            if handler is not None:
                self._handlers.discard(handler)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _answer(self, conn: h11.Connection, request: h11.Request) -> bytes:
        """The bytes of the answer to `request`: the exposition for GET (or HEAD) /metrics."""
        path = request.target.split(b"?", 1)[0]
        if path != kube_metrics.METRICS_PATH.encode():
            status, body, kind = 404, b"404: Not Found", "text/plain; charset=utf-8"
        elif request.method not in (b"GET", b"HEAD"):
            status, body, kind = 405, b"405: Method Not Allowed", "text/plain; charset=utf-8"
        else:
            status, body, kind = 200, *kube_metrics.exposition(self.metrics.registry)
        headers = [("Content-Type", kind), ("Content-Length", str(len(body)))]
        if status == 405:
            headers.append(("Allow", "GET, HEAD"))
        out = conn.send(h11.Response(status_code=status, headers=headers,
                                     reason=HTTPStatus(status).phrase.encode())) or b""
        if request.method != b"HEAD":
            out += conn.send(h11.Data(data=body)) or b""
        return out + (conn.send(h11.EndOfMessage()) or b"")


async def _next_request(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """The next request on `conn` once it was read whole (a body is refused), or None when the
    client closed the connection between requests."""
    request: h11.Request | None = None
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await asyncio.wait_for(reader.read(MAX_HEAD_BYTES), READ_TIMEOUT)
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            raise h11.RemoteProtocolError("a scrape carries no body")
        elif isinstance(event, h11.EndOfMessage):
            return request
        else:  # ConnectionClosed, or PAUSED after a request h11 cannot go on from
            return None


__all__ = ["BUCKETS", "AgentMetrics", "MetricsServer", "command_label"]
