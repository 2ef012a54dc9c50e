"""CNI 1.1 GC (CNI spec "GC: Clean up any stale resources").

(b) GC must not tear down a container whose ADD began after the GC request
arrived: the runtime built its list of valid attachments before that ADD.
(a) GC is forwarded to the delegate networks the agent knows from its cache,
each with that network's valid attachments, so their plugins (IPAM) can release
what leaked. Plugins are a recording `Exec` here: the reference plugins installed
for the CNI tier speak at most CNI 1.0.0, which has no GC.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.daemon import agent
from bridge.agent.delegates import cache
from bridge.agent.delegates.invoke import CNIError
from bridge.agent.kube import objects

DEFAULT = {"cniVersion": "1.1.0", "name": "kubenet", "type": "bridge"}
STDIN = json.dumps({"cniVersion": "1.1.0", "name": "multinetwork"}).encode()


class Recording:
    """A delegate that succeeds, records each call, and can hold DELs of one container."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str, dict[str, Any]]] = []
        self.hold_del_of: str | None = None
        self.hold_gc = False
        self.fail_gc_of: str | None = None
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        command, cid = env["CNI_COMMAND"], env.get("CNI_CONTAINERID", "")
        conf = json.loads(stdin)
        self.calls.append((command, plugin.name, cid, env.get("CNI_IFNAME", ""), conf))
        if (command == "DEL" and cid == self.hold_del_of) or (command == "GC" and self.hold_gc):
            self.holding.set()
            await self.release.wait()
        if command == "GC" and conf["name"] == self.fail_gc_of:
            return 1, json.dumps({"code": 5, "msg": "cannot list reservations"}).encode(), b""
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


def _nad(name: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "NetworkAttachmentDefinition", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"config": json.dumps(config)}}


BLUE = _nad("blue", {"cniVersion": "1.1.0", "name": "blue", "plugins": [
    {"type": "macvlan", "master": "dummy0", "ipam": {"type": "host-local", "subnet": "10.9.0.0/24"}},
    {"type": "bridge"}]})
OLD = _nad("old", {"cniVersion": "1.0.0", "name": "old", "type": "macvlan", "master": "dummy0"})


def _valid(conf: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((v["containerID"], v["ifname"]) for v in conf["cni.dev/valid-attachments"])


async def test_gc_is_forwarded_to_each_known_network_with_that_networks_valid_attachments(tmp_path: Path) -> None:
    rec = Recording()
    a = _agent(tmp_path, rec, [BLUE, OLD])
    for cid in ("x", "y", "z"):
        await a.handle(_env("ADD", cid), STDIN)
    rec.calls.clear()
    await a.handle(_env("GC"), _gc_stdin(("x", "eth0"), ("x", "net1"), ("x", "net2"), ("y", "eth0")))
    assert a.cache.load("z") is None
    assert {c[2] for c in rec.of("DEL")} == {"z"}, "first the stale container is torn down"
    gcs = rec.of("GC")
    assert rec.calls[-len(gcs):] == gcs, "then GC is forwarded"
    assert [(c[1], c[4]["name"]) for c in gcs] == [("bridge", "kubenet"), ("macvlan", "blue"), ("bridge", "blue")], (
        "each plugin of each 1.1.0 list in order; the 1.0.0 network has no GC")
    assert all(c[2] == "" and c[3] == "" for c in gcs), "GC names no container or interface"
    # the agent's cache is the truth: y's record still holds net1 and net2, whatever the runtime listed
    assert _valid(gcs[0][4]) == [("x", "eth0"), ("y", "eth0")]
    assert _valid(gcs[1][4]) == _valid(gcs[2][4]) == [("x", "net1"), ("y", "net1")]
    assert gcs[1][4]["ipam"] == {"type": "host-local", "subnet": "10.9.0.0/24"}, "the plugin forwards to its IPAM"


async def test_gc_is_not_forwarded_to_a_network_that_disables_it(tmp_path: Path) -> None:
    rec = Recording()
    off = _nad("off", {"cniVersion": "1.1.0", "name": "off", "disableGC": True, "plugins": [{"type": "macvlan"}]})
    a = _agent(tmp_path, rec, [off])
    await a.handle(_env("ADD", "x"), STDIN)
    await a.handle(_env("GC"), _gc_stdin(("x", "eth0"), ("x", "net1")))
    assert [c[4]["name"] for c in rec.of("GC")] == ["kubenet"]


async def test_a_failing_delegate_gc_does_not_stop_the_others_and_is_reported(tmp_path: Path) -> None:
    rec = Recording()
    rec.fail_gc_of = "kubenet"
    a = _agent(tmp_path, rec, [BLUE])
    await a.handle(_env("ADD", "x"), STDIN)
    with pytest.raises(CNIError) as caught:
        await a.handle(_env("GC"), _gc_stdin(("x", "eth0"), ("x", "net1")))
    assert "kubenet" in str(caught.value) and "cannot list reservations" in str(caught.value)
    assert [c[4]["name"] for c in rec.of("GC")] == ["kubenet", "blue", "blue"]


async def test_an_add_arriving_while_gc_is_forwarded_waits_so_no_plugin_frees_what_it_just_reserved(tmp_path: Path) -> None:
    rec = Recording()
    a = _agent(tmp_path, rec, [BLUE])
    await a.handle(_env("ADD", "x"), STDIN)
    rec.hold_gc = True
    gc = asyncio.create_task(a.handle(_env("GC"), _gc_stdin(("x", "eth0"), ("x", "net1"))))
    await asyncio.wait_for(rec.holding.wait(), 5)
    add = asyncio.create_task(a.handle(_env("ADD", "y"), STDIN))
    await asyncio.sleep(0.1)
    assert [c for c in rec.of("ADD") if c[2] == "y"] == [], "no delegate ADD while delegates collect garbage"
    rec.release.set()
    await asyncio.wait_for(asyncio.gather(gc, add), 5)
    record = a.cache.load("y")
    assert record is not None and record.complete
