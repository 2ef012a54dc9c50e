"""The agent's socket bounds what clients can hold, and what they hold never costs the runtime its
request: a connection that sends no complete request in time is closed; idle connections beyond
the limit close each other, never the runtime's request; and over the limit of requests served at
once the runtime (through the real shim) is told to try again (CNI error 11), with a log line that
says why. The real plugins attach and detach the pod throughout.

The agent once kept 3,000 idle and 300 slow-loris connections open forever; then 3,000 idle
connections held all its slots, and the next ADD and DEL were refused as "busy".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from bridge.agent.delegates import invoke
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


async def test_idle_and_slow_connections_are_closed_in_time_and_never_keep_the_runtime_out(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bridge.agent.daemon.server")
    await world.start_agent(max_connections=LIMIT, read_timeout=READ_SECONDS)
    world.pod("web")
    netns = world.make_netns()
    assert world.running is not None
    server = world.running.server

    idle = [await asyncio.open_unix_connection(str(world.socket)) for _ in range(LIMIT // 2)]
    slow = [await asyncio.open_unix_connection(str(world.socket)) for _ in range(LIMIT // 2)]
    tricklers = [asyncio.create_task(trickle(writer)) for _, writer in slow]
    try:
        for _ in range(200):
            if server.waiting_connections >= LIMIT:
                break
            await asyncio.sleep(0.01)
        assert server.waiting_connections == LIMIT

        added = await world.cni("ADD", "ctr-sock", netns, "web")
        assert added.returncode == 0, added.stdout + added.stderr

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

    deleted = await world.cni("DEL", "ctr-sock", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


async def test_idle_connections_far_beyond_the_limit_close_each_other_and_the_runtime_still_adds_and_deletes(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """25 times the limit, as 3,000 were to the default 128; the read timeout is far away, so only
    the limit can free their places."""
    caplog.set_level(logging.WARNING, logger="bridge.agent.daemon.server")
    await world.start_agent(max_connections=LIMIT, read_timeout=DEADLINE * 4)
    world.pod("web")
    netns = world.make_netns()
    assert world.running is not None
    server = world.running.server

    idle = [await asyncio.open_unix_connection(str(world.socket)) for _ in range(25 * LIMIT)]
    try:
        for _ in range(200):
            if server.open_connections <= LIMIT:
                break
            await asyncio.sleep(0.01)
        assert server.waiting_connections == server.open_connections == LIMIT

        added = await world.cni("ADD", "ctr-idle", netns, "web")
        assert added.returncode == 0, added.stdout + added.stderr
        assert world.interfaces(netns) == ["eth0"]
        deleted = await world.cni("DEL", "ctr-idle", netns, "web")
        assert deleted.returncode == 0, deleted.stdout + deleted.stderr
        assert world.leftovers() == NOTHING_LEFT

        # The oldest were closed for newer ones, each with an answer that says try again.
        for reader, _ in idle[: 24 * LIMIT]:
            answer = await asyncio.wait_for(reader.read(), DEADLINE)
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
            assert b'"code": 11' in answer and b"closed while waiting for a request" in answer, answer
        assert server.waiting_connections <= LIMIT
        assert any("closed the oldest idle one for a new one" in r.getMessage() for r in caplog.records)
    finally:
        for _, writer in idle:
            writer.close()


class Held:
    """Runs the plugins, except that the ADD of a container named held-* waits for `release`."""

    def __init__(self) -> None:
        self.real = invoke.SubprocessExec()
        self.release = asyncio.Event()
        self.holding = 0

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        if env.get("CNI_COMMAND") == "ADD" and env.get("CNI_CONTAINERID", "").startswith("held-"):
            self.holding += 1
            await self.release.wait()
        return await self.real.run(plugin, env, stdin, timeout)


async def test_over_the_limit_of_requests_in_flight_the_runtime_is_told_to_try_again(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bridge.agent.daemon.server")
    held = Held()
    limit = 2
    await world.start_agent(max_connections=limit, executor=held)
    pods = [f"held-{i}" for i in range(limit)] + ["web"]
    namespaces = {}
    for pod in pods:
        world.pod(pod)
        namespaces[pod] = world.make_netns()

    in_flight = [asyncio.create_task(world.cni("ADD", pod, namespaces[pod], pod)) for pod in pods[:limit]]
    try:
        for _ in range(1000):
            if held.holding == limit:
                break
            await asyncio.sleep(0.01)
        assert held.holding == limit

        busy = await world.cni("ADD", "ctr-busy", namespaces["web"], "web")
        assert busy.returncode == 1, busy.stdout
        assert busy.json["code"] == 11 and "try again" in busy.json["msg"], busy.json
        assert f"{limit} requests are being served" in busy.json["details"], busy.json
        assert world.interfaces(namespaces["web"]) == [], "a request turned away changed something"
        assert any("its limit (--max-connections)" in r.getMessage() for r in caplog.records)
    finally:
        held.release.set()
        answers = await asyncio.gather(*in_flight)
    assert [a.returncode for a in answers] == [0] * limit, [a.stdout for a in answers]

    added = await world.cni("ADD", "ctr-busy", namespaces["web"], "web")
    assert added.returncode == 0, added.stdout + added.stderr
    for pod, container in [*((p, p) for p in pods[:limit]), ("web", "ctr-busy")]:
        deleted = await world.cni("DEL", container, namespaces[pod], pod)
        assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT
