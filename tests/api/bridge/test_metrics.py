"""`podnetwork bridge --metrics-port` as a process: its metrics scraped over real HTTP after it wrote
ParamsReady in kmock's emulator and answered its webhook over HTTPS."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest

from bridge.operator import admission
from tests.api import bridge_api_support as bs
from tests.api.controller_support import free_port
from tests.api.kube_emulator import write_kubeconfig
from tests.api.metrics_support import scrape, total, value

pytestmark = [pytest.mark.kmock(cls=bs.Emulator), pytest.mark.timeout(60)]


async def test_handler_runs_api_writes_webhook_answers_and_memory_sizes_move(
    kmock: bs.Emulator, tmp_path: Path
) -> None:
    bs.declare_resources(kmock)
    kmock.objects[bs.PN, None, "dataplane"] = bs.podnetwork("dataplane", ready=False)
    kmock.objects[bs.NAD, "nets", "dataplane"] = bs.nad("dataplane")
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    webhook_port, metrics_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podnetwork", "bridge", "--kubeconfig", str(config), "--webhook",
        "--webhook-host", "127.0.0.1", "--webhook-port", str(webhook_port), "--metrics-port", str(metrics_port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "KUBECONFIG": ""},
    )
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-9", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": bs.NS,
        "operation": "CREATE", "object": bs.pod("web", [{"podNetworkName": "dataplane"}])}}
    try:
        # A process's start: its imports alone take seconds on a loaded machine, more than the 8 s
        # `eventually` gives a handler in-process.
        await bs.eventually(lambda: bs.condition(dict(kmock.objects[bs.PN, None, "dataplane"]), "ParamsReady"),
                            timeout=45)
        async with httpx.AsyncClient(verify=False) as client:  # self-signed, made by the command
            answer = await client.post(f"https://127.0.0.1:{webhook_port}{admission.MUTATE_PATH}", json=review)
        assert answer.json()["response"]["allowed"] is True

        samples = await scrape(f"http://127.0.0.1:{metrics_port}/metrics")
        runs = "podnetwork_bridge_handler_runs_total"
        assert value(samples, runs, handler="bridge_podnetworks", resource="podnetworks") >= 1
        assert value(samples, runs, handler="bridge_nads", resource="network-attachment-definitions") >= 1
        assert total(samples, "podnetwork_bridge_handler_failures_total") == 0
        assert value(samples, "podnetwork_bridge_api_writes_total",
                     kind="PodNetwork", verb="patch_status", outcome="written") >= 1
        assert value(samples, "podnetwork_bridge_webhook_request_duration_seconds_count",
                     path=admission.MUTATE_PATH) == 1
        assert value(samples, "podnetwork_bridge_webhook_rejections_total", path=admission.MUTATE_PATH) == 0
        assert value(samples, "podnetwork_bridge_cached_objects", kind="PodNetwork") == 1
        assert value(samples, "podnetwork_bridge_cached_objects", kind="NetworkAttachmentDefinition") == 1
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()
