"""`podnetwork controller` over HTTPS: a pod of a namespace the cache has not seen gets its profile.

The webhook runs in uvicorn's tasks, outside kopf's; the namespace GET goes through the
controller's own client, made from the same credentials as kopf's login.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from pathlib import Path

import httpx
import pytest
from kube_emulator import declare_resources

from podnetwork import admission, cli, constants
from podnetwork.commands import controller as command

pytestmark = pytest.mark.timeout(60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_command_reads_an_unseen_namespace_with_its_own_credentials(kmock, tmp_path: Path):
    declare_resources(kmock)
    kmock["get /api/v1/namespaces/team"] << {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "team", "annotations": {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION:
                                        '[{"podNetworkName":"tenant-a"}]'}}}
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": str(kmock.url).rstrip("/")}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "secret-token"}}]}))
    port = free_port()
    stop = asyncio.Event()
    argv = ["controller", "--kubeconfig", str(kubeconfig), "--disable-default-podnetwork-creation",
            "--webhook-host", "127.0.0.1", "--webhook-port", str(port)]
    task = asyncio.create_task(command.serve(
        cli.build_parser({"controller": command.command}).parse_args(argv), stop=stop))
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "team",
        "operation": "CREATE", "object": {"metadata": {"name": "p", "namespace": "team"}, "spec": {}}}}
    try:
        async with httpx.AsyncClient(verify=False) as client:  # self-signed, made by the command
            for _ in range(200):
                try:
                    resp = await client.post(f"https://127.0.0.1:{port}{admission.MUTATE_PATH}", json=review)
                    if resp.status_code == 200:
                        break
                except httpx.ConnectError:
                    pass
                await asyncio.sleep(0.05)  # webhook starting, or kopf not logged in yet (503)
            else:
                raise AssertionError("webhook did not admit the pod")
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0
    ops = json.loads(base64.b64decode(resp.json()["response"]["patch"]))
    assert ops == [{"op": "add", "path": "/metadata/annotations",
                    "value": {constants.NETWORKS_ANNOTATION: '[{"podNetworkName":"tenant-a"}]'}}]
    gets = [r for r in list(kmock) if r.method.value == "GET" and str(r.url.path) == "/api/v1/namespaces/team"]
    assert len(gets) == 1 and gets[0].headers.get("Authorization") == "Bearer secret-token"
