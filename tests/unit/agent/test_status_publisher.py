"""`bridge.agent.pods.publisher.StatusPublisher` over the in-memory object source: the latest status
of a pod wins, a DEL drops its own pending write only, a vanished pod drops its write, and
the counts the metrics export (pending, failed) say what happened. And the agent's repairs:
a record whose status was never written gets it from the next CHECK or ADD."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from bridge import npwg
from bridge.agent.daemon import agent
from bridge.agent.delegates import cache
from bridge.agent.kube.objects import MemoryObjects
from bridge.agent.pods.publisher import StatusPublisher


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

    async def patch(self, namespace: str, name: str, annotations: Mapping[str, str | None], *,
                    uid: str | None = None) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the API server did not answer")
        await self.objects.patch_pod_annotations(namespace, name, annotations, uid=uid)


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


# --- the agent's repairs ---------------------------------------------------------------------

CONF = {"cniVersion": "0.3.1", "name": "kubenet", "type": "bridge"}  # 0.3.1: no CHECK to run
RESULT = {"cniVersion": "0.3.1", "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
          "ips": [{"version": "4", "address": "10.0.0.2/24", "interface": 0}]}


class NoPlugins:
    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        raise AssertionError("no plugin runs for this")


@pytest.mark.parametrize("command", ["CHECK", "ADD"])
async def test_a_record_whose_status_was_never_written_gets_it_from_the_next_check_or_add(
    tmp_path: Path, command: str
) -> None:
    store = MemoryObjects([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}])
    config = agent.AgentConfig(socket_path=tmp_path / "s", cache_dir=tmp_path / "cache", bin_dirs=(tmp_path,),
                               conf_dir=tmp_path / "net.d", default_network=CONF, patch_status=True)
    a = agent.Agent(store, config, executor=NoPlugins())
    record = cache.Record(container_id="c1", netns="/var/run/netns/x", ifname="eth0", pod_namespace="ns",
                          pod_name="p", complete=True, result=RESULT, status_published=False)
    record.attachments.append(cache.Attachment(name="kubenet", ifname="eth0", config=CONF, default=True,
                                               state=cache.State.ATTACHED, result=RESULT))
    a.cache.save(record)  # as an agent killed before its write left it
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
           "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=uid-1"}
    await a.handle(env, json.dumps({"cniVersion": "0.4.0" if command == "CHECK" else "0.3.1",
                                    "name": "multinetwork"}).encode())
    await a.status.idle()
    assert [entry["interface"] for entry in written(store, "p")] == ["eth0"]  # type: ignore[union-attr]
    saved = a.cache.load("c1")
    # The record had no UID (its ADD had no K8S_POD_UID): it takes the runtime's, and the write is bound to it.
    assert saved is not None and saved.status_published and saved.pod_uid == "uid-1"
    await a.stop()


class HeldWrites(MemoryObjects):
    """The memory source, whose pod writes wait until `release` is set (an API answering slowly)."""

    def __init__(self, objects: list[dict[str, object]]) -> None:
        super().__init__(objects)
        self.release = asyncio.Event()

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, uid: str | None = None
    ) -> None:
        await self.release.wait()
        await super().patch_pod_annotations(namespace, name, annotations, uid=uid)


async def test_a_record_made_unreadable_before_its_status_lands_is_logged_in_one_line_not_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = HeldWrites([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}])
    config = agent.AgentConfig(socket_path=tmp_path / "s", cache_dir=tmp_path / "cache", bin_dirs=(tmp_path,),
                               conf_dir=tmp_path / "net.d", default_network=CONF, patch_status=True)
    a = agent.Agent(store, config, executor=NoPlugins())
    record = cache.Record(container_id="c1", netns="/var/run/netns/x", ifname="eth0", pod_namespace="ns",
                          pod_name="p", complete=True, result=RESULT, status_published=False)
    record.attachments.append(cache.Attachment(name="kubenet", ifname="eth0", config=CONF, default=True,
                                               state=cache.State.ATTACHED, result=RESULT))
    a.cache.save(record)
    env = {"CNI_COMMAND": "CHECK", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
           "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=uid-1"}
    await a.handle(env, json.dumps({"cniVersion": "0.4.0", "name": "multinetwork"}).encode())
    a.cache.path("c1").write_bytes(b"\x00 not a record")  # a disk error, or a hand edit, meanwhile
    store.release.set()
    await asyncio.wait_for(a.status.idle(), 10)
    assert [entry["interface"] for entry in written(store, "p")] == ["eth0"]  # type: ignore[union-attr]
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
    (line,) = [r.getMessage() for r in caplog.records if "c1" in r.getMessage() and r.levelname == "WARNING"]
    assert "network-status written, but the record of container c1 cannot be marked" in line
    assert "holds no readable record" in line and "the next ADD or CHECK writes the status again" in line
    assert a.cache.path("c1").read_bytes() == b"\x00 not a record", "left for the runtime's DEL to move aside"
    await a.stop()
