"""Requests for one container are serialized; different containers run in parallel (NPWG 7.3)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from bridge.agent.daemon import agent
from bridge.agent.kube import objects

POD_ARGS = "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"


class SlowExec:
    """Answers like a plugin after a pause, and records how many calls overlap."""

    def __init__(self) -> None:
        self.active: Counter[str] = Counter()
        self.most_per_container = 0
        self.most_overall = 0

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        cid = env["CNI_CONTAINERID"]
        self.active[cid] += 1
        self.most_per_container = max(self.most_per_container, self.active[cid])
        self.most_overall = max(self.most_overall, sum(self.active.values()))
        try:
            await asyncio.sleep(0.05)
        finally:
            self.active[cid] -= 1
        if env["CNI_COMMAND"] == "ADD":
            return 0, json.dumps({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}).encode(), b""
        return 0, b"", b""


def make_agent(tmp_path: Path, objs: objects.MemoryObjects, executor: SlowExec) -> agent.Agent:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "bridge").write_text("#!/bin/sh\n")
    (bin_dir / "bridge").chmod(0o755)
    config = agent.AgentConfig(
        socket_path=tmp_path / "a.sock",
        cache_dir=tmp_path / "cache",
        bin_dirs=(bin_dir,),
        default_network={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"},
    )
    return agent.Agent(objs, config, executor=executor)


def env(command: str, cid: str) -> dict[str, str]:
    return {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0", "CNI_ARGS": POD_ARGS}


async def test_one_containers_operations_never_overlap_while_other_containers_proceed(tmp_path: Path) -> None:
    executor = SlowExec()
    a = make_agent(tmp_path, objects.MemoryObjects([{"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}]), executor)
    conf = b'{"cniVersion": "1.0.0"}'
    await asyncio.gather(
        a.handle(env("ADD", "c1"), conf),
        a.handle(env("DEL", "c1"), conf),
        a.handle(env("ADD", "c1"), conf),
        a.handle(env("ADD", "c2"), conf),
        a.handle(env("ADD", "c3"), conf),
    )
    assert executor.most_per_container == 1
    assert executor.most_overall >= 2
    assert sorted(a.cache.container_ids()) == ["c1", "c2", "c3"]
    assert a.records.locked() == [], "locks of idle containers are dropped"


class PodGoneMidAdd(objects.MemoryObjects):
    async def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str | None], *,
                                    uid: str | None = None) -> None:
        raise objects.NotFound("Pod", namespace, name)


async def test_an_add_whose_pod_vanished_before_the_status_patch_still_succeeds(tmp_path: Path) -> None:
    a = make_agent(tmp_path, PodGoneMidAdd([{"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}]), SlowExec())
    result = await a.handle(env("ADD", "c9"), b'{"cniVersion": "1.0.0"}')
    assert result == {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    record = a.cache.load("c9")
    assert record is not None and record.complete


class UnsortedExec(SlowExec):
    """A plugin whose result keys are not in alphabetical order, as the real bridge plugin's are."""

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        code, out, err = await super().run(plugin, env, stdin, timeout)
        if env["CNI_COMMAND"] != "ADD":
            return code, out, err
        result = {"cniVersion": "1.0.0",
                  "interfaces": [{"name": "eth0", "mac": "0a:58:0a:00:00:02", "sandbox": env["CNI_NETNS"]}],
                  "ips": [{"interface": 0, "address": "10.0.0.2/24", "gateway": "10.0.0.1"}],
                  "routes": [{"dst": "0.0.0.0/0"}], "dns": {}}
        return 0, json.dumps(result).encode(), b""


async def test_thirty_concurrent_adds_of_one_container_all_answer_the_same_text_as_the_first(tmp_path: Path) -> None:
    """NPWG 7.3 serializes them: one attaches, the others find it attached and answer its recorded
    result. The runtime reads the answer's text (the server sends `json.dumps` of it), so that text
    is the same for all 30, the plugin's key order included."""
    executor = UnsortedExec()
    a = make_agent(tmp_path, objects.MemoryObjects([{"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}]),
                   executor)
    conf = b'{"cniVersion": "1.0.0"}'
    results = await asyncio.gather(*(a.handle(env("ADD", "c1"), conf) for _ in range(30)))
    answers = Counter(json.dumps(r) for r in results)
    assert len(answers) == 1, answers
    (answer,) = answers
    assert json.loads(answer)["ips"] == [{"interface": 0, "address": "10.0.0.2/24", "gateway": "10.0.0.1"}]
    assert executor.most_per_container == 1
    assert list(a.cache.container_ids()) == ["c1"] and a.records.locked() == []
