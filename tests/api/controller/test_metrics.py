"""`podnetwork controller --metrics-port`: its metrics scraped over real HTTP while the command
reconciles PodNetworks in kmock's emulator and answers its admission webhook over HTTPS."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from podnetwork import cli
from podnetwork.commands import controller as command
from podnetwork.ground import constants
from podnetwork.kep import admission
from tests.api.controller_support import free_port, pod, podnetwork
from tests.api.kube_emulator import (
    PN,
    PODS,
    Emulator,
    condition,
    declare_resources,
    eventually,
    write_kubeconfig,
)
from tests.api.metrics_support import Samples, scrape, total, value

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(60)]

WRITES = "podnetwork_controller_api_writes_total"


def review(annotation: str) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "ns",
        "operation": "CREATE", "object": {"metadata": {"name": "p", "namespace": "ns", "annotations": {
            constants.NETWORKS_ANNOTATION: annotation}}, "spec": {"containers": [{"name": "c"}]}}}}


async def test_handler_runs_api_writes_webhook_answers_and_index_sizes_move_and_a_steady_cluster_writes_nothing(
    kmock: Emulator, tmp_path: Path
) -> None:
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "web"] = pod("web", [{"podNetworkName": "blue"}])
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"), token="t")
    webhook_port, metrics_port = free_port(), free_port()
    argv = ["controller", "--kubeconfig", str(kubeconfig), "--webhook-host", "127.0.0.1",
            "--webhook-port", str(webhook_port), "--metrics-port", str(metrics_port),
            "--inuse-message-interval", "0.2", "--disable-default-podnetwork-creation"]
    stop = asyncio.Event()
    task = asyncio.create_task(command.serve(
        cli.build_parser({"controller": command.command}).parse_args(argv), stop=stop))
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        await eventually(lambda: condition(dict(kmock.objects[PN, None, "blue"]), "InUse")["status"] == "True")
        async with httpx.AsyncClient(verify=False) as client:  # self-signed, made by the command
            refused = await client.post(f"https://127.0.0.1:{webhook_port}{admission.VALIDATE_PATH}",
                                        json=review("not json"))
            allowed = await client.post(f"https://127.0.0.1:{webhook_port}{admission.VALIDATE_PATH}",
                                        json=review('[{"podNetworkName": "blue"}]'))
        assert refused.json()["response"]["allowed"] is False
        assert allowed.json()["response"]["allowed"] is True

        samples = await scrape(url)
        runs = "podnetwork_controller_handler_runs_total"
        assert value(samples, runs, handler="podnetworks", resource="podnetworks") >= 1
        assert value(samples, runs, handler="pod_refs", resource="pods") >= 1
        # Every event handler is counted too; here kmock cannot list namespaces (its path parser),
        # so kopf, waiting for every index's first listing, runs none of them: they stay at 0.
        assert (runs, frozenset({("handler", "podnetwork_event"), ("resource", "podnetworks")})) in samples
        assert total(samples, "podnetwork_controller_handler_failures_total") == 0
        assert value(samples, WRITES, kind="PodNetwork", verb="patch_status", outcome="written") >= 1
        assert value(samples, WRITES, kind="PodNetwork", verb="patch", outcome="written") >= 1  # the finalizer
        path = admission.VALIDATE_PATH
        assert value(samples, "podnetwork_controller_webhook_request_duration_seconds_count", path=path) == 2
        assert value(samples, "podnetwork_controller_webhook_rejections_total", path=path) == 1
        assert value(samples, "podnetwork_controller_inuse_index_entries", part="pods") == 1
        assert value(samples, "podnetwork_controller_inuse_index_entries", part="used") == 1

        # Steady: nothing changes, several flushes and sweeps pass, and nothing is written.
        async def writes() -> float:
            return total(await scrape(url), WRITES)

        settled = await writes()
        await asyncio.sleep(1.5)
        later: Samples = await scrape(url)
        assert total(later, WRITES) == settled
        assert total(later, "podnetwork_controller_handler_runs_total") >= total(
            samples, "podnetwork_controller_handler_runs_total")
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0


async def test_without_metrics_port_no_metrics_are_served(kmock: Emulator, tmp_path: Path) -> None:
    parsed = cli.build_parser({"controller": command.command}).parse_args(["controller"])
    assert parsed.metrics_port is None
    refused = cli.build_parser({"controller": command.command})
    with pytest.raises(SystemExit):
        refused.parse_args(["controller", "--metrics-port", "70000"])
