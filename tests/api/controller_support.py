"""Run the PodNetwork controller (real kopf, real HTTP) against kube_emulator.Emulator.

The tests assert the requests the operator sent (URL, content type, body) and
the stored result, which is what a real API server would also receive.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import kmock
import kopf

from podnetwork import cli
from podnetwork.commands import controller as command
from podnetwork.ground import constants
from podnetwork.kep import controller
from tests.api import kube_emulator
from tests.unit.ports_support import free_port as free_port


@contextlib.asynccontextmanager
async def running(k: kmock.KubernetesEmulator, config: controller.ControllerSettings
                  ) -> AsyncIterator[controller.Controller]:
    """The controller in an operator task of this loop; stopped (and awaited) on exit."""
    registry = kopf.OperatorRegistry()
    # kmock 0.8 cannot parse GET /api/v1/namespaces (it reads "namespaces" as a namespace).
    config = dataclasses.replace(config, namespace_profiles=False)
    ctl = controller.Controller(config=config, api=kube_emulator.api(k))
    controller.register(registry, ctl)
    async with kube_emulator.operator(k, registry):
        yield ctl


def pod(name: str, nets: list[dict[str, str]] | None = None, *, ns: str = "ns",
        node: str | None = "n1", phase: str = "Running") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "resourceVersion": "0"}
    if nets is not None:
        meta["annotations"] = {constants.NETWORKS_ANNOTATION: json.dumps(nets)}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def podnetwork(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": "PodNetwork",
            "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1, "resourceVersion": "0"},
            "spec": {"enabled": True, **spec}}


def attachment(name: str, network: str, ns: str = "ns") -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": "PodNetworkAttachment",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-pna-{name}", "generation": 1,
                         "resourceVersion": "0"},
            "spec": {"podNetworkName": network}}


def node(name: str, override: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-node-{name}", "resourceVersion": "0"}
    if override:
        meta["annotations"] = {constants.NODE_DEFAULT_PODNETWORK_ANNOTATION: override}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


async def ask_the_command(k: kmock.KubernetesEmulator, tmp_path: Path, path: str, review: Any,
                          *flags: str, token: str = "secret-token") -> httpx.Response:
    """Run `podnetwork controller FLAGS` (its serve(), in this loop) against `k` with a bearer
    `token`, post `review` to its webhook at `path` over HTTPS until it answers 200 (the
    webhook starting, or kopf not logged in yet, answers otherwise), stop the command (it
    must exit 0) and return the answer."""
    kubeconfig = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig", str(k.url).rstrip("/"), token=token)
    port = free_port()
    stop = asyncio.Event()
    argv = ["controller", "--kubeconfig", str(kubeconfig), "--webhook-host", "127.0.0.1",
            "--webhook-port", str(port), *flags]
    task = asyncio.create_task(command.serve(
        cli.build_parser({"controller": command.command}).parse_args(argv), stop=stop))
    try:
        async with httpx.AsyncClient(verify=False) as client:  # self-signed, made by the command
            for _ in range(200):
                try:
                    resp = await client.post(f"https://127.0.0.1:{port}{path}", json=review)
                    if resp.status_code == 200:
                        return resp
                except httpx.ConnectError:
                    pass
                await asyncio.sleep(0.05)
            raise AssertionError(f"the webhook at {path} did not answer 200")
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0

