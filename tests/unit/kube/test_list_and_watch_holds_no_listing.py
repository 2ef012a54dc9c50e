"""`podnetwork.kube.lite.list_and_watch` hands each listing to `on_list` and keeps none of it while
it watches: the agent lists every pod of the cluster (policies) and of its node (hot-plug), and a
listing held for the watch's lifetime was two copies of every pod in its memory (docs/benchmarks.md,
"Agent RSS, every feature on"). Against an API server on loopback (`HostileApi`)."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

from podnetwork.kube import credentials, lite
from tests.unit.hostile_api_support import HostileApi, listing, ok, pod


def holders(value: Any, *mine: Any) -> list[str]:
    """The frames and containers that refer to `value`, other than the test's own `mine`."""
    gc.collect()
    found = []
    for referrer in gc.get_referrers(value):
        if any(referrer is m for m in mine):
            continue
        code = getattr(referrer, "f_code", None)
        found.append(code.co_name if code is not None else type(referrer).__name__)
    return found


async def test_the_listed_objects_are_not_held_while_the_watch_runs() -> None:
    event = json.dumps({"type": "ADDED", "object": pod("late", version="2")}).encode() + b"\n"
    server = HostileApi(lambda line: [ok(event)] if "watch=true" in line else
                        [ok(listing([pod(f"p{i}") for i in range(3)]))])
    api = lite.LiteApi(credentials.Credentials(server=server.url))
    listed: list[list[dict[str, Any]]] = []
    held: list[list[str]] = []
    watched = asyncio.Event()

    def on_event(kind: str, obj: dict[str, Any]) -> None:
        if listed and not watched.is_set():
            held.append(holders(listed[0], listed))
            watched.set()

    task = asyncio.create_task(lite.list_and_watch(api, "/api/v1/pods", on_list=listed.append,
                                                   on_event=on_event, sleep=lambda _: asyncio.sleep(0.01)))
    try:
        async with asyncio.timeout(30):
            await watched.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
        server.close()
    assert [p["metadata"]["name"] for p in listed[0]] == ["p0", "p1", "p2"]
    assert held == [[]], "list_and_watch keeps the listing while it watches"
