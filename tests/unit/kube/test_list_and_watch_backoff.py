"""`podnetwork.kube.lite.list_and_watch` (the watch cache's and hot-plug's loop) against an API
server on loopback that ends or breaks every watch at once: failures back off with jitter, a
successful list alone does not reset the delay, a watch that lived does. Attempts are counted
(the loop's `sleep` and `clock` are the test's), never timed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any, cast

from bridge.agent.daemon import hotplug
from podnetwork.kube import credentials, lite
from tests.unit.hostile_api_support import HostileApi, listing, ok, pod, query_of


class Recorded:
    """The loop's sleep: records each delay, and stops the loop after `stop_after` of them."""

    def __init__(self, stop_after: int) -> None:
        self.delays: list[float] = []
        self.stop_after = stop_after
        self.done = asyncio.Event()

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        if len(self.delays) >= self.stop_after:
            self.done.set()
            await asyncio.Event().wait()  # until cancelled
        await asyncio.sleep(0)


async def run_loop(server: HostileApi, sleep: Recorded, **kwargs: Any) -> list[Exception]:
    errors: list[Exception] = []
    api = lite.LiteApi(credentials.Credentials(server=server.url))
    kwargs.setdefault("on_event", lambda kind, obj: None)
    task = asyncio.create_task(lite.list_and_watch(
        api, "/api/v1/pods", on_list=lambda items: None, on_error=errors.append,
        retry_first=0.5, retry_max=30.0, sleep=sleep, **kwargs))
    try:
        async with asyncio.timeout(30):
            await sleep.done.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
        server.close()
    return errors


def within_jitter(delays: list[float], ceilings: list[float]) -> bool:
    return len(delays) == len(ceilings) and all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))


def lists_and_watches(server: HostileApi) -> tuple[int, int]:
    watches = server.count(lambda path, query: "watch" in query)
    return len(server.requests) - watches, watches


def test_the_backoff_doubles_to_its_maximum_with_jitter_and_starts_over_after_reset() -> None:
    for rand in (lambda: 0.0, lambda: 0.999, lambda: 0.5):
        backoff = lite.Backoff(0.5, 30.0, rand=rand)
        delays = [backoff.next() for _ in range(10)]
        assert within_jitter(delays, [0.5, 1, 2, 4, 8, 16, 30, 30, 30, 30])
        backoff.reset()
        assert backoff.next() <= 0.5
    draws = {round(lite.Backoff(1, 1).next(), 6) for _ in range(50)}
    assert len(draws) > 10 and min(draws) >= 0.5 and max(draws) <= 1, "jitter spreads the agents"
    many = lite.Backoff(0.5, 30.0)
    for _ in range(5000):
        many.next()  # no overflow after a long outage
    assert many.next() <= 30


async def test_a_watch_the_server_ends_at_once_is_a_failure_that_backs_off() -> None:
    server = HostileApi(lambda line: [ok(b"")] if "watch=true" in line else [ok(listing([pod()]))])
    sleep = Recorded(stop_after=7)
    errors = await run_loop(server, sleep)
    assert within_jitter(sleep.delays, [0.5, 1, 2, 4, 8, 16, 30])
    assert lists_and_watches(server) == (7, 7), "one list and one watch per attempt"
    assert all(isinstance(e, lite.WatchEnded) for e in errors) and len(errors) == 7
    assert "the server ended the watch after" in str(errors[0])


async def test_a_watch_that_fails_right_after_a_good_list_does_not_reset_the_delay() -> None:
    refused = b'HTTP/1.1 500 Oops\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}'
    server = HostileApi(lambda line: [refused] if "watch=true" in line else [ok(listing([pod()]))])
    sleep = Recorded(stop_after=6)
    errors = await run_loop(server, sleep)
    assert within_jitter(sleep.delays, [0.5, 1, 2, 4, 8, 16])
    assert lists_and_watches(server) == (6, 6)
    assert all(isinstance(e, lite.ApiError) and e.status == 500 for e in errors)


async def test_a_failing_list_backs_off_the_same_way() -> None:
    server = HostileApi(lambda line: [b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"])
    sleep = Recorded(stop_after=5)
    await run_loop(server, sleep)
    assert within_jitter(sleep.delays, [0.5, 1, 2, 4, 8])
    assert lists_and_watches(server) == (5, 0)


async def test_a_watch_that_lived_resets_the_delay_and_the_next_watch_follows_at_once() -> None:
    now = [1000.0]
    watches = [0]

    def sends(line: str) -> Iterable[bytes]:
        if "watch=true" not in line:
            return [ok(listing([pod()], version="5"))]
        watches[0] += 1
        if watches[0] == 3:  # this one delivers an event, during which the clock moves on 20 s
            event = json.dumps({"type": "MODIFIED", "object": pod(version="6")}).encode() + b"\n"
            return [ok(event)]
        return [ok(b"")]

    def on_event(kind: str, obj: dict[str, Any]) -> None:
        now[0] += 20

    server = HostileApi(sends)
    sleep = Recorded(stop_after=4)
    await run_loop(server, sleep, on_event=on_event, clock=lambda: now[0], lived=10.0)
    # Watches 1 and 2 end at once (0.5, 1); watch 3 lives 20 s: the next watch follows at once
    # from its version, ends at once, and the delay starts over (0.5, 1).
    assert within_jitter(sleep.delays, [0.5, 1, 0.5, 1])
    versions = [query_of(line)["resourceVersion"][0] for line in server.requests if "watch=true" in line]
    assert versions[:5] == ["5", "5", "5", "6", "5"]


async def test_hot_plugs_pod_watch_paces_itself_against_a_server_that_ends_every_watch() -> None:
    server = HostileApi(lambda line: [ok(b"")] if "watch=true" in line else [ok(listing([]))])

    class Pods:
        def pod_changed(self, obj: dict[str, Any]) -> None:
            pass

        def pod_deleted(self, obj: dict[str, Any]) -> None:
            pass

    api = lite.LiteApi(credentials.Credentials(server=server.url))
    task = asyncio.create_task(hotplug.watch_node_pods(api, "node-1", cast(hotplug.HotPlug, Pods())))
    async with asyncio.timeout(30):
        while not lists_and_watches(server)[1]:
            await asyncio.sleep(0.01)
    await asyncio.sleep(2.0)  # a window to count requests in, from the first watch; not a timing
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await api.close()
    server.close()
    _lists, watches = lists_and_watches(server)
    assert 1 <= watches <= 4, f"{watches} watches in 2 s: the delay is 0.25-0.5 s, then 0.5-1 s, then 1-2 s"
    assert all("fieldSelector=spec.nodeName%3Dnode-1" in line for line in server.requests)
