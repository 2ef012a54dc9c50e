"""Review fix: CNI 1.1 GC (CNI spec "GC: Clean up any stale resources").

(b) GC must not tear down a container whose ADD began after the GC request
arrived: the runtime built its list of valid attachments before that ADD.
(a) GC is forwarded to the delegate networks the agent knows from its cache,
each with that network's valid attachments, so their plugins (IPAM) can release
what leaked. Plugins are a recording `Exec` here; `tests/cni/test_agentfix_gc_cni.py`
runs the real ones.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.cni import agent, cache, objects

DEFAULT = {"cniVersion": "1.1.0", "name": "kubenet", "type": "bridge"}
STDIN = json.dumps({"cniVersion": "1.1.0", "name": "multinetwork"}).encode()


class Recording:
    """A delegate that succeeds, records each call, and can hold DELs of one container."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str, dict[str, Any]]] = []
        self.hold_del_of: str | None = None
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        command, cid = env["CNI_COMMAND"], env.get("CNI_CONTAINERID", "")
        conf = json.loads(stdin)
        self.calls.append((command, plugin.name, cid, env.get("CNI_IFNAME", ""), conf))
        if command == "DEL" and cid == self.hold_del_of:
            self.holding.set()
            await self.release.wait()
        if command == "ADD":
            result = {"cniVersion": conf["cniVersion"], "interfaces": [{"name": env["CNI_IFNAME"]}],
                      "ips": [{"address": "10.9.0.2/24", "interface": 0}]}
            return 0, json.dumps(result).encode(), b""
        return 0, b"", b""

    def of(self, command: str) -> list[tuple[str, str, str, str, dict[str, Any]]]:
        return [c for c in self.calls if c[0] == command]


def _agent(tmp_path: Path, executor: Recording, nads: list[dict[str, Any]] = ()) -> agent.Agent:  # type: ignore[assignment]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("bridge", "macvlan", "host-local"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 1\n")  # found, never run: the Exec records
        (bin_dir / name).chmod(0o755)
    pods = [{"kind": "Pod", "metadata": {"name": f"p-{c}", "namespace": "ns", "annotations": {
        "k8s.v1.cni.cncf.io/networks": ",".join(n["metadata"]["name"] for n in nads)}}} for c in ("x", "y", "z")]
    config = agent.AgentConfig(socket_path=tmp_path / "s", cache_dir=tmp_path / "cache", bin_dirs=(bin_dir,),
                               conf_dir=tmp_path / "net.d", default_network=DEFAULT, patch_status=False)
    return agent.Agent(objects.MemoryObjects([*pods, *nads]), config, executor=executor)


def _env(command: str, cid: str = "") -> dict[str, str]:
    if command == "GC":
        return {"CNI_COMMAND": "GC", "CNI_PATH": "/opt/cni/bin"}
    return {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": f"/var/run/netns/{cid}",
            "CNI_IFNAME": "eth0", "CNI_ARGS": f"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p-{cid}"}


def _gc_stdin(*valid: tuple[str, str]) -> bytes:
    return json.dumps({"cniVersion": "1.1.0", "name": "multinetwork",
                       "cni.dev/valid-attachments": [{"containerID": c, "ifname": i} for c, i in valid]}).encode()


def _stale(a: agent.Agent, cid: str) -> None:
    record = cache.Record(container_id=cid, netns=f"/var/run/netns/{cid}", ifname="eth0",
                          cni_args=[["K8S_POD_NAMESPACE", "ns"], ["K8S_POD_NAME", f"p-{cid}"]],
                          pod_namespace="ns", pod_name=f"p-{cid}")
    record.attachments.append(cache.Attachment(name="kubenet", ifname="eth0", config=DEFAULT, default=True))
    a.cache.save(record)  # an ADD cut short: incomplete


async def test_gc_keeps_a_container_whose_add_began_after_the_gc_request_arrived(tmp_path: Path) -> None:
    rec = Recording()
    a = _agent(tmp_path, rec)
    _stale(a, "a")  # GC tears this one down first, and is held there
    _stale(a, "x")  # the runtime retries x's ADD while GC runs
    rec.hold_del_of = "a"
    gc = asyncio.create_task(a.handle(_env("GC"), _gc_stdin()))
    await asyncio.wait_for(rec.holding.wait(), 5)
    result = await asyncio.wait_for(a.handle(_env("ADD", "x"), STDIN), 5)
    assert result is not None and a.cache.load("x").complete  # type: ignore[union-attr]
    rec.release.set()
    await asyncio.wait_for(gc, 5)
    record = a.cache.load("x")
    assert record is not None and record.complete, "the ADD that began after GC arrived is kept"
    dels_of_x_after_add = [c for c in rec.calls[rec.calls.index(rec.of("ADD")[-1]):] if c[0] == "DEL" and c[2] == "x"]
    assert dels_of_x_after_add == []
    assert a.cache.load("a") is None, "the stale container the runtime did not list is gone"


async def test_gc_still_tears_down_a_container_whose_add_began_before_it_and_is_not_listed(tmp_path: Path) -> None:
    rec = Recording()
    a = _agent(tmp_path, rec)
    await a.handle(_env("ADD", "x"), STDIN)
    await a.handle(_env("ADD", "y"), STDIN)
    await a.handle(_env("GC"), _gc_stdin(("y", "eth0")))
    assert a.cache.load("x") is None
    assert a.cache.load("y") is not None
    assert [(c[2], c[3]) for c in rec.of("DEL")] == [("x", "eth0")]
