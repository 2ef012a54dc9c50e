"""`podnetwork bridge` as a process: kubeconfig -> kmock's emulator over HTTP, stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.api import bridge_api_support as bs
from tests.api.kube_emulator import write_kubeconfig

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

PODNETWORK = [sys.executable, "-m", "podnetwork"]


async def test_podnetwork_bridge_runs_the_handlers_against_the_cluster_of_its_kubeconfig(
    kmock: bs.Emulator, tmp_path: Path
) -> None:
    bs.declare_resources(kmock)
    kmock.objects[bs.PN, None, "dataplane"] = bs.podnetwork("dataplane")
    kmock.objects[bs.NAD, "nets", "dataplane"] = bs.nad("dataplane")
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "bridge", "--kubeconfig", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": ""},
    )
    try:
        def params_ready() -> dict:
            return bs.condition(kmock.objects[bs.PN, None, "dataplane"].raw, "ParamsReady")
        cond = await bs.eventually(params_ready, timeout=30)
        assert (cond["status"], cond["reason"]) == ("True", "ParametersReady")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()


async def test_podnetwork_bridge_refuses_an_unusable_kubeconfig_with_a_hint(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "bridge", "--kubeconfig", str(tmp_path / "missing"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert b"cannot reach a cluster" in err and b"--kubeconfig" in err
