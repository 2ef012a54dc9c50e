"""`podnetwork bridge --webhook` as a process: the webhook over real HTTPS (self-signed), fed by the controller,
registered with --manage-webhooks."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import ssl
import sys
from pathlib import Path

import httpx
import kmock as kmock_lib
import pytest

from bridge.operator import admission, pods
from tests.api import bridge_api_support as bs
from tests.api.kube_emulator import write_kubeconfig
from tests.unit.ports_support import free_port as free_port

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

PODNETWORK = [sys.executable, "-m", "podnetwork"]
MWC = "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


async def test_podnetwork_bridge_serves_the_webhook_over_https_with_a_self_signed_certificate(
    kmock: bs.Emulator, tmp_path: Path
) -> None:
    bs.declare_resources(kmock)
    kmock.resources[MWC] = kmock_lib.ResourceInfo(
        kind="MutatingWebhookConfiguration", namespaced=False, verbs={"create", "get", "list", "patch"})
    kmock.objects[bs.PN, None, "dataplane"] = bs.podnetwork("dataplane", ready=False)
    kmock.objects[bs.NAD, "nets", "dataplane"] = bs.nad("dataplane")
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "bridge", "--kubeconfig", str(config), "--webhook",
        "--webhook-host", "127.0.0.1", "--webhook-port", str(port), "--manage-webhooks",
        "--webhook-url", f"https://localhost:{port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": ""},
    )
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-9", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": bs.NS,
        "operation": "CREATE", "object": bs.pod("web", [{"podNetworkName": "dataplane"}])}}
    try:
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=False) as client:
            async def answered() -> httpx.Response:
                for _ in range(300):
                    try:
                        return await client.post(admission.MUTATE_PATH, json=review)
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
                raise AssertionError("the webhook never answered")
            resp = await answered()
        assert resp.status_code == 200
        response = resp.json()["response"]
        ops = json.loads(base64.b64decode(response["patch"]))
        assert ops == [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": pods.SCHEDULING_GATE}]}]
        # --manage-webhooks registered the configuration with the serving certificate as CA bundle.
        registered = await bs.eventually(lambda: kmock.objects[MWC, None, admission.CONFIGURATION_NAME].raw)
        client_config = registered["webhooks"][0]["clientConfig"]
        assert client_config["url"] == f"https://localhost:{port}{admission.MUTATE_PATH}"
        # The certificate is valid for the name the API server dials: verify with the registered CA bundle.
        ca = tmp_path / "ca.pem"
        ca.write_bytes(base64.b64decode(client_config["caBundle"]))
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(ca))) as client:
            health = await client.get(f"https://localhost:{port}/healthz")
        assert health.json() == {"status": "ok"}
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--webhook", "--webhook-cert", "c.pem"], "go together", id="a certificate without a key"),
        pytest.param(["--webhook-cert", "c.pem", "--webhook-key", "k.pem"], "add --webhook",
                     id="certificates without --webhook"),
        pytest.param(["--manage-webhooks"], "add --webhook", id="registering a webhook not served"),
        pytest.param(["--webhook", "--webhook-cert", "/nonexistent.pem", "--webhook-key", "/nonexistent.key"],
                     "not a readable file", id="a missing certificate file"),
        pytest.param(["--webhook", "--no-selection"], "drop one of them", id="a gate nobody would remove"),
        pytest.param(["--webhook", "--manage-webhooks"], "the API server cannot call",
                     id="registering the wildcard listen address"),
    ],
)
async def test_podnetwork_bridge_refuses_unusable_webhook_flags_before_touching_the_cluster(
    args: list[str], message: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "bridge", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert message in err.decode()


async def test_podnetwork_bridge_says_which_webhook_port_is_taken(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            *PODNETWORK, "bridge", "--kubeconfig", str(config), "--webhook", "--webhook-host", "127.0.0.1",
            "--webhook-port", str(port), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KUBECONFIG": ""})
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in err.decode()
