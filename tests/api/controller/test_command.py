"""`podnetwork controller` as a process would run it: kubeconfig, HTTPS admission, feature gate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from podnetwork import cli
from podnetwork.commands import controller as command
from podnetwork.ground import constants
from podnetwork.kep import admission
from tests.api.controller_support import free_port
from tests.api.kube_emulator import write_kubeconfig

pytestmark = pytest.mark.timeout(60)


def args(*argv: str):
    return cli.build_parser({"controller": command.command}).parse_args(["controller", *argv])


async def test_gate_off_watches_nothing_and_admission_allows_everything(kmock, tmp_path: Path):
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"), token="t")
    port = free_port()
    stop = asyncio.Event()
    task = asyncio.create_task(command.serve(args(
        "--kubeconfig", str(kubeconfig), "--feature-gates", "MultiNetwork=false",
        "--webhook-host", "127.0.0.1", "--webhook-port", str(port)), stop=stop))
    try:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "ns",
            "operation": "CREATE", "object": {"metadata": {"name": "p", "annotations": {
                constants.NETWORKS_ANNOTATION: "not json"}}}}}
        async with httpx.AsyncClient(verify=False) as client:  # self-signed, made by the command
            for _ in range(100):
                try:
                    resp = await client.post(f"https://127.0.0.1:{port}{admission.VALIDATE_PATH}", json=review)
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("webhook did not start")
        assert resp.json()["response"] == {"uid": "u-1", "allowed": True}
        await asyncio.sleep(0.3)
        assert list(kmock) == []  # not one request to the API: no watch, no default PodNetwork
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0
