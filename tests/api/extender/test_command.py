"""`podnetwork scheduler-extender` as a process: kubeconfig -> kmock, HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import httpx
import kmock
import pytest

from podnetwork import constants
from tests.api.extender_support import by_names, node, pod, podnetwork
from tests.api.kube_emulator import write_kubeconfig

PN = f"{constants.GROUP}/{constants.VERSION}/{constants.PODNETWORK_PLURAL}"
PNA = f"{constants.GROUP}/{constants.VERSION}/{constants.ATTACHMENT_PLURAL}"
NODES = "v1/nodes"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run_cli(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podnetwork", "scheduler-extender", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def test_the_command_serves_decisions_from_the_cluster_it_watches(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    verbs = {"list", "watch", "get", "create", "patch", "delete"}
    kmock.resources[PN] = kmock.ResourceInfo(kind="PodNetwork", namespaced=False, verbs=verbs)
    kmock.resources[PNA] = kmock.ResourceInfo(kind="PodNetworkAttachment", namespaced=True, verbs=verbs)
    kmock.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs=verbs)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[NODES, None, "node-a"] = {**node("node-a", ["blue"]), "apiVersion": "v1", "kind": "Node"}
    kmock.objects[NODES, None, "node-b"] = {**node("node-b", []), "apiVersion": "v1", "kind": "Node"}
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podnetwork", "scheduler-extender",
        "--kubeconfig", str(config), "--host", "127.0.0.1", "--port", str(port), "--watch-timeout", "5",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while True:
                assert proc.returncode is None, "the extender exited"
                assert loop.time() < deadline, "the extender never became ready"
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            body = by_names(pod([{"podNetworkName": "blue"}]), ["node-a", "node-b"])
            reply = (await client.post("/filter", content=json.dumps(body))).json()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    assert reply["NodeNames"] == ["node-a"]
    assert reply["FailedNodes"] == {"node-b": 'podnetwork "blue" is not available on this node'}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--feature-gates", "Other=true"], "--feature-gates: unknown feature gate 'Other'; known gates: MultiNetwork"),
        (["--max-body-bytes", "0"], "--max-body-bytes must be a positive number of bytes"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "cannot load a cluster configuration"),
    ],
)
async def test_bad_arguments_say_what_was_wrong(args: list[str], expected: str) -> None:
    code, out = await run_cli(*args)
    assert code != 0
    assert expected in out
