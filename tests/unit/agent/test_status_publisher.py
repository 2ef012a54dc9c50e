"""`bridge.agent.publisher.StatusPublisher` over the in-memory object source: the latest status
of a pod wins, a DEL drops its own pending write only, a vanished pod drops its write, and
the counts the metrics export (pending, failed) say what happened."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

from bridge import npwg
from bridge.agent.objects import MemoryObjects
from bridge.agent.publisher import StatusPublisher


def pod(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}}


def written(objects: MemoryObjects, name: str) -> object:
    annotations = objects.get("Pod", "ns", name)["metadata"].get("annotations") or {}
    text = annotations.get(npwg.NETWORK_STATUS_ANNOTATION)
    return json.loads(text) if text is not None else None


class Flaky:
    """The memory source, whose first `failures` writes raise (an API answering 503)."""

    def __init__(self, objects: MemoryObjects, failures: int) -> None:
        self.objects, self.failures = objects, failures

    async def patch(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the API server did not answer")
        await self.objects.patch_pod_annotations(namespace, name, annotations)


async def test_a_newer_status_replaces_one_not_yet_written_and_only_the_latest_lands() -> None:
    objects = MemoryObjects([pod("p")])
    publisher = StatusPublisher(objects.patch_pod_annotations)
    publisher.publish("ns", "p", [{"name": "a"}], owner="c1")
    publisher.publish("ns", "p", [{"name": "b"}], owner="c1")
    assert publisher.pending == 1
    await publisher.idle()
    assert written(objects, "p") == [{"name": "b"}]
    assert len(objects.patches) == 1 and publisher.pending == 0 and publisher.written == 1


async def test_failed_writes_are_retried_until_one_lands_and_each_failure_is_counted() -> None:
    objects = MemoryObjects([pod("p")])
    flaky = Flaky(objects, failures=3)
    publisher = StatusPublisher(flaky.patch, retry_first=0.001, retry_max=0.004)
    marked: list[str] = []

    async def on_written() -> None:
        marked.append("p")

    publisher.publish("ns", "p", [{"name": "a"}], owner="c1", on_written=on_written)
    await asyncio.wait_for(publisher.idle(), 10)
    assert written(objects, "p") == [{"name": "a"}]
    assert publisher.failed == 3 and publisher.pending == 0 and marked == ["p"]


async def test_a_del_drops_the_pending_write_of_its_own_container_only() -> None:
    objects = MemoryObjects([pod("p")])
    flaky = Flaky(objects, failures=1)
    publisher = StatusPublisher(flaky.patch, retry_first=0.01)
    publisher.publish("ns", "p", [{"name": "old"}], owner="c1")
    await asyncio.sleep(0)  # the first attempt fails; the write waits for its retry
    assert not publisher.cancel("ns", "p", owner="c2"), "another container's DEL keeps it"
    assert publisher.cancel("ns", "p", owner="c1")
    await asyncio.wait_for(publisher.idle(), 10)
    assert written(objects, "p") is None and objects.patches == []


async def test_the_write_for_a_pod_that_is_gone_is_dropped_not_retried() -> None:
    objects = MemoryObjects([])
    publisher = StatusPublisher(objects.patch_pod_annotations, retry_first=0.001)
    publisher.publish("ns", "gone", [{"name": "a"}])
    await asyncio.wait_for(publisher.idle(), 10)
    assert publisher.pending == 0 and publisher.failed == 0 and publisher.written == 0


async def test_close_stops_a_write_that_keeps_failing() -> None:
    objects = MemoryObjects([pod("p")])
    publisher = StatusPublisher(Flaky(objects, failures=1_000_000).patch, retry_first=0.001, retry_max=0.001)
    publisher.publish("ns", "p", [{"name": "a"}])
    while publisher.failed < 3:
        await asyncio.sleep(0.001)
    assert publisher.pending == 1
    await publisher.close()
    assert publisher.pending == 0 and written(objects, "p") is None
