"""SIGTERM stops each server command cleanly: one log line, its servers and kopf stopped, exit 0.

Each command runs as a process against kmock's emulator (the cluster of its
kubeconfig), serving on loopback; the test waits until it serves and its
operator or watches run, then sends SIGTERM as the kubelet does. (`podnetwork
cni-agent`: tests/cni/test_sigterm.py, as it needs the CNI plugins.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import kmock
import pytest

from tests.api import bridge_api_support as bs
from tests.api.extender_support import node, podnetwork
from tests.api.kube_emulator import NODES, PN, PNA, Emulator, declare_resources, eventually, write_kubeconfig
from tests.unit.ports_support import free_port as free_port

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(120)]

PODNETWORK = [sys.executable, "-m", "podnetwork", "-v"]  # -v: the servers' INFO lines too


def crashed(out: str) -> bool:
    """Whether the process printed a traceback of its own (kmock's 500 answers quote theirs)."""
    return any(line.startswith("Traceback (most recent call last)") for line in out.splitlines())


async def answers(url: str, proc: asyncio.subprocess.Process) -> None:
    """Wait until `url` answers 200 (self-signed HTTPS is fine), while `proc` runs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    async with httpx.AsyncClient(verify=False, timeout=5) as client:
        while True:
            assert proc.returncode is None, "the command exited before serving"
            assert loop.time() < deadline, f"{url} never answered"
            try:
                if (await client.get(url)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)


async def terminated(args: list[str], ready: Callable[[asyncio.subprocess.Process], Awaitable[None]]
                     ) -> tuple[int, str]:
    """Run `podnetwork ARGS`, wait for `ready`, send SIGTERM; its exit status and output."""
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": ""})
    try:
        await ready(proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_the_controller_with_webhooks_stops_kopf_and_the_webhooks_on_sigterm(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    declare_resources(kmock)
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    port = free_port()

    async def ready(proc: asyncio.subprocess.Process) -> None:
        await answers(f"https://127.0.0.1:{port}/healthz", proc)
        await eventually(lambda: kmock.objects[PN, None, "default"], timeout=30)  # kopf runs

    code, out = await terminated(
        ["controller", "--kubeconfig", str(config), "--webhook-host", "127.0.0.1", "--webhook-port", str(port)],
        ready)
    assert code == 0, out
    assert "podnetwork controller: SIGTERM received, stopping" in out
    assert f"podnetwork controller: stopped serving https://127.0.0.1:{port}" in out
    assert "Stop-flag is set to True. Operator is stopping." in out, out  # kopf: by the shell's flag, not its own signal handler
    assert not crashed(out), out


async def test_the_bridge_with_its_webhook_stops_kopf_and_the_webhook_on_sigterm(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    bs.declare_resources(kmock)
    kmock.objects[PN, None, "dataplane"] = bs.podnetwork("dataplane")
    kmock.objects[bs.NAD, "nets", "dataplane"] = bs.nad("dataplane")
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    port = free_port()

    async def ready(proc: asyncio.subprocess.Process) -> None:
        await answers(f"https://127.0.0.1:{port}/healthz", proc)
        await eventually(lambda: bs.condition(kmock.objects[PN, None, "dataplane"].raw, "ParamsReady"),
                         timeout=30)  # kopf runs

    code, out = await terminated(
        ["bridge", "--kubeconfig", str(config), "--webhook", "--webhook-host", "127.0.0.1",
         "--webhook-port", str(port)], ready)
    assert code == 0, out
    assert "podnetwork bridge: SIGTERM received, stopping" in out
    assert f"podnetwork bridge: stopped serving https://127.0.0.1:{port}" in out
    assert "Stop-flag is set to True. Operator is stopping." in out, out
    assert not crashed(out), out


async def test_the_scheduler_extender_stops_serving_on_sigterm(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    verbs = {"list", "watch", "get"}
    kmock.resources[PN] = kmock.ResourceInfo(kind="PodNetwork", namespaced=False, verbs=verbs)
    kmock.resources[PNA] = kmock.ResourceInfo(kind="PodNetworkAttachment", namespaced=True, verbs=verbs)
    kmock.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs=verbs)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[NODES, None, "node-a"] = {**node("node-a", ["blue"]), "apiVersion": "v1", "kind": "Node"}
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    port = free_port()

    async def ready(proc: asyncio.subprocess.Process) -> None:
        await answers(f"http://127.0.0.1:{port}/readyz", proc)  # ready: its watches listed

    code, out = await terminated(
        ["scheduler-extender", "--kubeconfig", str(config), "--host", "127.0.0.1", "--port", str(port),
         "--watch-timeout", "2"], ready)
    assert code == 0, out
    assert "podnetwork scheduler-extender: SIGTERM received, stopping" in out
    assert f"podnetwork scheduler-extender: stopped serving http://127.0.0.1:{port}" in out
    assert not crashed(out), out
