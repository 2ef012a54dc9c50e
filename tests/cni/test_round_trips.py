"""What one ADD and one DEL cost in round trips, counted (issue 35: ADD of one attachment within
1.3x the plugins run directly, DEL within 1.0x, where the agent's fixed cost is its round trips).

The agent runs as `podnetwork cni-agent --kubeconfig` wires it (`command.object_source` and
`command.node_agent`: the watch cache, MultiNetworkPolicy enforcement and the Services' ClusterIPs
on), reading a kmock emulator over real HTTP; the runtime's side is the shim executed as a runtime
does; the plugins are the real `bridge` and `host-local`, each behind a wrapper that logs its exec
and execs the real binary, in a network namespace the test made. Counted per CNI call:

- API requests other than the watches' own lists and watches: an ADD reads its pod (always fresh:
  its annotations may change until its sandbox starts) and nothing else, NADs coming from the watch
  cache; network-status is one merge-patch after the answer; a DEL reads nothing, and its one
  merge-patch (network-status `[]`, as Multus writes on DEL) is queued after its answer too.
- Processes: one exec of each plugin of each attachment's chain, and nothing else from the plugins'
  directories (host-local is `bridge`'s own child, found through CNI_PATH).
- Socket round trips: one request per CNI call reaches the agent (`podnetwork_agent_request_duration_seconds`).

A count that grows fails here before it shows in `benchmarks/bench_agent.py`'s ratios.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kmock
import pytest

from bridge.agent.daemon import command
from bridge.agent.daemon.running import Running
from bridge.agent.kube import watchcache
from podnetwork.cli import build_parser
from tests.api.controller_support import free_port
from tests.api.kube_emulator import Emulator, write_kubeconfig
from tests.api.metrics_support import scrape, total
from tests.cni.agent_support import NOTHING_LEFT, NPWG_NETWORKS, NPWG_STATUS, World

pytestmark = pytest.mark.cni

WATCHED = (*watchcache.KINDS, watchcache.POD, watchcache.NAMESPACE, watchcache.POLICY,
           watchcache.SERVICE, watchcache.ENDPOINTSLICE)
"""Every kind the agent lists and watches with the watch cache, policies and Services on."""
PODS, NADS = "v1/pods", "k8s.cni.cncf.io/v1/network-attachment-definitions"
WRAPPED = ("bridge", "host-local")


def resource(kind: watchcache.Kind) -> str:
    return "/".join(part for part in (kind.group, kind.version, kind.plural) if part)


def wrap_plugins(world: World, log: Path) -> Path:
    """A plugin directory whose `bridge` and `host-local` log each exec (the command and the
    plugin), then exec the real binary: the processes the agent and its plugins really spawn."""
    wrappers = world.root / "wrapped-bin"
    wrappers.mkdir()
    for plugin in WRAPPED:
        real = next(d / plugin for d in world.bin_dirs if (d / plugin).is_file())
        script = wrappers / plugin
        script.write_text(f'#!/bin/sh\necho "$CNI_COMMAND {plugin}" >> {log}\nexec {real} "$@"\n')
        script.chmod(0o755)
    return wrappers


def execs(log: Path) -> list[str]:
    """The wrappers' log, one `COMMAND plugin` per exec, in order."""
    return log.read_text().splitlines() if log.exists() else []


COLLECTIONS = {kind.path for kind in WATCHED}


def api_calls(k: Emulator) -> list[str]:
    """Every request but the watches' lists and watches (a GET of a collection), as METHOD path."""
    return [f"{req.method.value} {req.url.path}" for req in list(k)
            if not (req.method.value == "GET" and is_collection(str(req.url.path)))]


def is_collection(path: str) -> bool:
    """A collection across namespaces, or in one (/api/v1/namespaces/NS/pods, /apis/G/V/namespaces/NS/P)."""
    parts = path.strip("/").split("/")
    return path in COLLECTIONS or ("namespaces" in parts and len(parts) == parts.index("namespaces") + 3)


@pytest.fixture
async def cluster(world: World) -> AsyncIterator[Emulator]:
    async with Emulator() as k, kmock.Server(k):
        for kind in WATCHED:
            k.resources[resource(kind)] = kmock.ResourceInfo(
                kind=kind.name, namespaced=kind.namespaced, verbs={"get", "list", "watch", "patch"})
        k.resources["v1/events"] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create"})
        yield k


def put(k: Emulator, res: str, obj: dict[str, Any]) -> None:
    obj["metadata"].setdefault("resourceVersion", "1")
    k.objects[res, obj["metadata"].get("namespace"), obj["metadata"]["name"]] = obj


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(400):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within 20 s: {what}")


async def test_an_add_reads_only_its_pod_a_del_reads_nothing_each_writes_once_after_its_answer_one_exec_per_plugin(
        world: World, cluster: Emulator) -> None:
    await world.stop_agent()  # the World's own agent reads MemoryObjects; this one reads the API
    log = world.root / "execs.log"
    wrappers = wrap_plugins(world, log)
    put(cluster, NADS, world.nad("blue", world.network("blue", 1)))
    put(cluster, PODS, world.pod("web", {NPWG_NETWORKS: "blue"}))
    put(cluster, PODS, world.pod("solo"))
    kubeconfig = write_kubeconfig(world.root / "kubeconfig", str(cluster.url))
    args = build_parser({"cni-agent": command.command}).parse_args(
        ["cni-agent", "--kubeconfig", str(kubeconfig), "--socket", str(world.socket)])
    config = world.agent_config(bin_dirs=(wrappers, *world.bin_dirs))
    objects = await asyncio.to_thread(command.object_source, args)
    assert isinstance(objects, watchcache.CachedObjects), "the agent as deployed reads behind its watch cache"
    agent, beside = command.node_agent(args, objects, config)
    assert beside is None and agent.enforcer is not None and agent.services is not None
    port = free_port()
    world.agent, world.running = agent, Running(agent, metrics_port=port)
    objects.start()
    try:
        await world.running.start()
        # The watches have listed (the NAD is served from the cache from now on).
        await until(lambda: any(str(r.url.path) == watchcache.NAD.path for r in list(cluster)), "the NAD listing")
        await until(lambda: objects.mirrors[watchcache.NAD.name].synced, "the watch cache synced")
        netns = world.make_netns()

        async def counted(cni: str, container: str, pod: str) -> tuple[list[str], list[str], int]:
            calls, spawned = len(api_calls(cluster)), len(execs(log))
            served = total(await scrape(f"http://127.0.0.1:{port}/metrics"),
                           "podnetwork_agent_request_duration_seconds_count")
            answer = await world.cni(cni, container, netns, pod)  # waits for network-status's write
            assert answer.returncode == 0, answer.stdout
            after = total(await scrape(f"http://127.0.0.1:{port}/metrics"),
                          "podnetwork_agent_request_duration_seconds_count")
            return api_calls(cluster)[calls:], sorted(execs(log)[spawned:]), int(after - served)

        pod_path = "/api/v1/namespaces/default/pods/{}"
        calls, spawned, served = await counted("ADD", "ctr1", "web")
        assert calls == [f"GET {pod_path.format('web')}", f"PATCH {pod_path.format('web')}"]
        assert spawned == ["ADD bridge", "ADD bridge", "ADD host-local", "ADD host-local"]
        assert served == 1
        status = json.loads(cluster.objects[PODS, "default", "web"].raw["metadata"]["annotations"][NPWG_STATUS])
        assert [entry["interface"] for entry in status] == ["eth0", "net1"]

        calls, spawned, served = await counted("DEL", "ctr1", "web")
        assert calls == [f"PATCH {pod_path.format('web')}"]
        assert spawned == ["DEL bridge", "DEL bridge", "DEL host-local", "DEL host-local"]
        assert served == 1

        # One attachment (the cluster default network alone): what the 1.3x target is about.
        calls, spawned, served = await counted("ADD", "ctr2", "solo")
        assert calls == [f"GET {pod_path.format('solo')}", f"PATCH {pod_path.format('solo')}"]
        assert spawned == ["ADD bridge", "ADD host-local"]
        assert served == 1
        calls, spawned, served = await counted("DEL", "ctr2", "solo")
        assert calls == [f"PATCH {pod_path.format('solo')}"]
        assert (spawned, served) == (["DEL bridge", "DEL host-local"], 1)
        assert not any(r.method.value == "GET" and "network-attachment-definitions/" in str(r.url.path)
                       for r in list(cluster)), "NADs are read from the watch cache, never by name"
    finally:
        with contextlib.suppress(Exception):
            await world.stop_agent()
        await objects.close()
    assert world.leftovers() == NOTHING_LEFT
