"""`podnetwork scheduler-extender` as a process: kubeconfig -> kmock, HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import kmock
import pytest

from podnetwork.ground import constants
from tests.api.extender_support import (
    by_names,
    declare_extender_resources,
    extender_process,
    node,
    pod,
    podnetwork,
)

PN = f"{constants.GROUP}/{constants.VERSION}/{constants.PODNETWORK_PLURAL}"
NODES = "v1/nodes"


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
    declare_extender_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[NODES, None, "node-a"] = {**node("node-a", ["blue"]), "apiVersion": "v1", "kind": "Node"}
    kmock.objects[NODES, None, "node-b"] = {**node("node-b", []), "apiVersion": "v1", "kind": "Node"}
    async with extender_process(kmock, tmp_path) as (_, client):
        body = by_names(pod([{"podNetworkName": "blue"}]), ["node-a", "node-b"])
        reply = (await client.post("/filter", content=json.dumps(body))).json()
    assert reply["NodeNames"] == ["node-a"]
    assert reply["FailedNodes"] == {"node-b": 'podnetwork "blue" is not available on this node'}


async def test_a_connection_beyond_max_connections_gets_503_until_one_closes(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    declare_extender_resources(kmock)
    async with extender_process(kmock, tmp_path, "--max-connections", "1") as (_, client):
        await client.aclose()  # readiness was answered on one connection: one is served
        port = client.base_url.port
        # A request whose body never comes: its connection stays open and in progress.
        _, busy = await asyncio.open_connection("127.0.0.1", port)
        busy.write(b"POST /filter HTTP/1.1\r\nHost: extender\r\nContent-Length: 100\r\n\r\n{")
        await busy.drain()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as other:
            refused = await other.get("/healthz")
        busy.close()
        await busy.wait_closed()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as other:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while (await other.get("/healthz", headers={"Connection": "close"})).status_code != 200:
                assert loop.time() < deadline, "the extender kept refusing after the other connection closed"
                await asyncio.sleep(0.1)
    assert refused.status_code == 503


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--feature-gates", "Other=true"], "--feature-gates: unknown feature gate 'Other'; known gates: MultiNetwork"),
        (["--max-body-bytes", "0"], "--max-body-bytes: invalid byte count '0': expected a whole number, 1 or more"),
        (["--max-connections", "0"], "--max-connections: invalid number '0': expected a whole number, 1 or more"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "cannot load a cluster configuration"),
    ],
)
async def test_bad_arguments_say_what_was_wrong(args: list[str], expected: str) -> None:
    code, out = await run_cli(*args)
    assert code != 0
    assert expected in out
