"""A webhook operator killed with SIGKILL leaves no file behind: the self-signed certificate it
serves, and its key, live in its memory only (`podnetwork.kube.certificates.load_chain`).

`podnetwork controller` (feature gate off, so no cluster is needed) and `podnetwork bridge`
(against kmock's emulator) run as processes with a TMPDIR of their own, serve their webhooks
over HTTPS on loopback, and are killed the way the kubelet kills a container that outlives
its grace period. Their TMPDIR must be as empty as it was.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
from pathlib import Path

import kmock
import pytest

from tests.api import bridge_api_support as bs
from tests.api.kube_emulator import Emulator, write_kubeconfig
from tests.api.shell.test_sigterm import answers, free_port

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(120)]

PODNETWORK = [sys.executable, "-m", "podnetwork"]


async def killed_while_serving(args: list[str], port: int, tmp: Path) -> None:
    """Run `podnetwork ARGS` with TMPDIR `tmp` until its webhook answers over TLS, then SIGKILL it."""
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "KUBECONFIG": "", "TMPDIR": str(tmp)})
    try:
        await answers(f"https://127.0.0.1:{port}/healthz", proc)
        # The certificate it serves is the one it made: a real handshake hands it over.
        pem = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", port))
        assert "BEGIN CERTIFICATE" in pem
    finally:
        proc.kill()
        await proc.wait()


async def test_the_controller_killed_while_serving_its_webhooks_leaves_no_key_on_disk(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    port = free_port()
    await killed_while_serving(["controller", "--feature-gates", "MultiNetwork=false",
                                "--webhook-host", "127.0.0.1", "--webhook-port", str(port)], port, tmp)
    assert sorted(tmp.iterdir()) == []


async def test_the_bridge_killed_while_serving_its_webhook_leaves_no_key_on_disk(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    bs.declare_resources(kmock)
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    port = free_port()
    await killed_while_serving(["bridge", "--kubeconfig", str(config), "--webhook", "--webhook-host", "127.0.0.1",
                                "--webhook-port", str(port)], port, tmp)
    assert sorted(tmp.iterdir()) == []
