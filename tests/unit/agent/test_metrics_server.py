"""The agent's metrics listener (`--metrics-port`) on asyncio streams and h11: what a scraper
gets, what else is answered, and that a kept-alive connection neither breaks a second scrape nor
holds the agent's stop."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from bridge.agent.daemon import metrics
from bridge.agent.daemon.metrics import AgentMetrics, MetricsServer
from tests.api.controller_support import free_port


async def _exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 30)  # to the server's close
    except ConnectionResetError:  # closed with our request unread: no answer either
        return b""
    finally:
        writer.close()


@pytest.fixture
async def server() -> AsyncIterator[MetricsServer]:
    served = MetricsServer(AgentMetrics(cache_records=lambda: 7), "127.0.0.1", free_port())
    await served.start()
    try:
        yield served
    finally:
        await served.stop()


async def test_a_get_of_metrics_is_the_exposition_and_a_closing_client_is_closed(server: MetricsServer) -> None:
    answer = await _exchange(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert f"content-type: {CONTENT_TYPE_LATEST}".encode() in head.lower()
    assert b"podnetwork_agent_cache_records 7.0" in body


async def test_other_paths_and_methods_are_refused_and_head_has_no_body(server: MetricsServer) -> None:
    missing = await _exchange(server.port, b"GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert missing.startswith(b"HTTP/1.1 404 ")
    posted = await _exchange(server.port, b"DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert posted.startswith(b"HTTP/1.1 405 ") and b"allow: get, head" in posted.lower()
    head = await _exchange(server.port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")


async def test_a_request_with_a_body_or_garbage_is_closed_unanswered(server: MetricsServer) -> None:
    body = await _exchange(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
    assert body == b""
    garbage = await _exchange(server.port, b"not http at all\r\n\r\n")
    assert garbage == b""


async def test_two_scrapes_on_one_kept_alive_connection_and_stop_closes_it() -> None:
    served = MetricsServer(AgentMetrics(cache_records=lambda: 0), "127.0.0.1", free_port())
    await served.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    try:
        for _ in range(2):
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert head.startswith(b"HTTP/1.1 200 ")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            assert b"podnetwork_agent_cache_records 0.0" in await reader.readexactly(length)
        await asyncio.wait_for(served.stop(), 30)
        assert await asyncio.wait_for(reader.read(), 30) == b"", "the kept-alive connection was closed"
    finally:
        writer.close()
        await served.stop()


async def test_connections_beyond_the_bound_are_closed_unanswered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_CONNECTIONS", 1)
    served = MetricsServer(AgentMetrics(cache_records=lambda: 0), "127.0.0.1", free_port())
    await served.start()
    _idle, idle_writer = await asyncio.open_connection("127.0.0.1", served.port)
    try:
        await asyncio.sleep(0)  # accepted: the server now holds one connection
        for _ in range(100):
            if served._writers:
                break
            await asyncio.sleep(0.05)
        assert len(served._writers) == 1
        assert await _exchange(served.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == b""
    finally:
        idle_writer.close()
        await served.stop()


def test_the_metrics_listener_loads_no_http_framework() -> None:
    """With --metrics-port the agent adds prometheus_client only: aiohttp's server was ~11 MB of
    its RSS (docs/benchmarks.md, "The agent's RSS in a cluster")."""
    probe = ("import json, sys; import bridge.agent.daemon.metrics, bridge.agent.daemon.running; "
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    assert "prometheus_client" in loaded and "h11" in loaded, "the probe loaded the listener"
    assert not loaded & {"aiohttp", "uvicorn", "starlette", "fastapi", "httpx"}
