"""The agent's socket bounds what clients can hold: a connection that sends no complete request
in time is closed, and over the connection limit the runtime (through the real shim) is told to
try again (CNI error 11), with a log line that says why. Once the hogs are gone, the real plugins
attach and detach the pod as usual.

The agent once kept 3,000 idle and 300 slow-loris connections open forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cni.agent_support import NOTHING_LEFT, World

pytestmark = pytest.mark.cni

#: Small limits, so that the test fills them quickly (the defaults: 128 and 10 s).
LIMIT = 8
READ_SECONDS = 1.0
#: Far beyond READ_SECONDS: only a connection the agent never closes fails the test.
DEADLINE = 30.0


@pytest.fixture
async def world(cni_host: list[Path]) -> AsyncIterator[World]:
    w = World(cni_host)
    try:
        await w.start_agent(max_connections=LIMIT, read_timeout=READ_SECONDS)
        yield w
    finally:
        await w.cleanup()


async def trickle(writer: asyncio.StreamWriter) -> None:
    """A slow-loris client: a request head, one byte at a time, never finished."""
    writer.write(b"POST /v1/cni HTTP/1.1\r\n")
    with contextlib.suppress(ConnectionError):
        while True:
            writer.write(b"X")
            await writer.drain()
            await asyncio.sleep(0.1)


async def test_idle_and_slow_connections_are_closed_and_over_the_limit_the_runtime_is_told_to_try_again(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bridge.agent.server")
    world.pod("web")
    netns = world.make_netns()
    assert world.running is not None
    server = world.running.server

    idle = [await asyncio.open_unix_connection(str(world.socket)) for _ in range(LIMIT // 2)]
    slow = [await asyncio.open_unix_connection(str(world.socket)) for _ in range(LIMIT // 2)]
    tricklers = [asyncio.create_task(trickle(writer)) for _, writer in slow]
    try:
        for _ in range(200):
            if server.open_connections >= LIMIT:
                break
            await asyncio.sleep(0.01)

        busy = await world.cni("ADD", "ctr-sock", netns, "web")
        assert busy.returncode == 1, busy.stdout
        assert busy.json["code"] == 11 and "try again" in busy.json["msg"], busy.json
        assert f"{LIMIT} connections are open" in busy.json["details"], busy.json
        assert world.leftovers() == NOTHING_LEFT, "a request turned away changed something"
        assert any("its limit (--max-connections)" in r.getMessage() for r in caplog.records)

        for reader, _ in idle + slow:  # each is answered (408, try again) and closed by the agent
            answer = await asyncio.wait_for(reader.read(), DEADLINE)
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
            assert b'"code": 11' in answer, answer
        assert any("no complete request within 1 s" in r.getMessage() for r in caplog.records)
    finally:
        for task in tricklers:
            task.cancel()
        await asyncio.gather(*tricklers, return_exceptions=True)
        for _, writer in idle + slow:
            writer.close()

    added = await world.cni("ADD", "ctr-sock", netns, "web")
    assert added.returncode == 0, added.stdout + added.stderr
    deleted = await world.cni("DEL", "ctr-sock", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT
