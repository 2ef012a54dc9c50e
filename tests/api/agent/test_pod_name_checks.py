"""Hardening: the pod named in CNI_ARGS is checked before the agent asks the API about it.

The agent reads the pod with the `kubernetes` client, which puts K8S_POD_NAMESPACE
and K8S_POD_NAME into the URL path. `..` there made the HTTP client collapse the path:
the agent fetched the Namespace and attached the networks named in *its*
annotations; `.` fetched the pod list; a name that is not UTF-8 gave "internal agent
error" and a traceback. Here the runtime's requests go through the real shim to the
agent's socket, and the agent reads a kmock API server over HTTP: a name that is not
a Kubernetes name is refused with CNI error 4, and no request reaches the API.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import kmock
import pytest

from bridge.agent.daemon import agent, command
from bridge.agent.daemon.running import Running
from bridge.agent.kube import objects
from tests.api.kube_emulator import write_kubeconfig

CNI_VERSION = "1.0.0"


@pytest.fixture()
def cluster(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources["v1/pods"] = {"kind": "Pod", "namespaced": True, "verbs": ["get", "patch"]}
    kmock.resources["v1/namespaces"] = {"kind": "Namespace", "namespaced": False, "verbs": ["get", "list"]}
    # What `..` used to fetch in place of a pod: a Namespace whose annotation selects a network.
    kmock.objects["v1/namespaces", None, "default"] = {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "default", "resourceVersion": "1", "annotations": {"k8s.v1.cni.cncf.io/networks": "blue"}},
    }
    return kmock


class Runtime:
    """Executes the installed shim the way a container runtime does, with raw bytes."""

    def __init__(self, shim: Path, socket: Path) -> None:
        self.shim = shim
        self.socket = socket

    async def add(self, cni_args: bytes) -> tuple[int, dict, bytes]:
        env = {
            b"PATH": os.environb.get(b"PATH", b"/usr/bin:/bin"),
            b"CNI_COMMAND": b"ADD",
            b"CNI_CONTAINERID": b"ctr-names",
            b"CNI_NETNS": b"/var/run/netns/never-used",
            b"CNI_IFNAME": b"eth0",
            b"CNI_PATH": str(self.shim.parent).encode(),
            b"CNI_ARGS": cni_args,
        }
        stdin = json.dumps({"cniVersion": CNI_VERSION, "name": "multinetwork", "type": "multinetwork",
                            "socketPath": str(self.socket)}).encode()
        proc = await asyncio.to_thread(subprocess.run, [str(self.shim)], input=stdin, env=env, capture_output=True)
        return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.fixture()
async def runtime(cluster: kmock.KubernetesEmulator, tmp_path: Path) -> AsyncIterator[Runtime]:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(cluster.url), token="t0ken")
    source = await asyncio.to_thread(objects.KubernetesObjects, str(kubeconfig))
    config = agent.AgentConfig(
        socket_path=tmp_path / "agent.sock",
        cache_dir=tmp_path / "cache",
        bin_dirs=(tmp_path / "bin",),
        default_network={"cniVersion": CNI_VERSION, "name": "kubenet", "type": "bridge"},
    )
    shim = command.install_shim(tmp_path / "bin", sys.executable)
    a = Running(agent.Agent(source, config))
    await a.start()
    try:
        yield Runtime(shim, config.socket_path)
    finally:
        await a.stop()
        await source.close()


BAD = {
    "name ..": (b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=..", "K8S_POD_NAME"),
    "name .": (b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=.", "K8S_POD_NAME"),
    "name with a path": (b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web/../../x", "K8S_POD_NAME"),
    "name with a percent escape": (b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=%2e%2e", "K8S_POD_NAME"),
    "name not UTF-8": (b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\xff\xfe", "K8S_POD_NAME"),
    "name in upper case": (b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=Web", "K8S_POD_NAME"),
    "name of 254 characters": (b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + b"a" * 254, "K8S_POD_NAME"),
    "namespace ..": (b"K8S_POD_NAMESPACE=..;K8S_POD_NAME=web", "K8S_POD_NAMESPACE"),
    "namespace with a dot": (b"K8S_POD_NAMESPACE=a.b;K8S_POD_NAME=web", "K8S_POD_NAMESPACE"),
    "namespace not UTF-8": (b"K8S_POD_NAMESPACE=\xc3\x28;K8S_POD_NAME=web", "K8S_POD_NAMESPACE"),
    "namespace of 64 characters": (b"K8S_POD_NAMESPACE=" + b"n" * 64 + b";K8S_POD_NAME=web", "K8S_POD_NAMESPACE"),
}


@pytest.mark.parametrize("case", list(BAD))
async def test_a_pod_reference_that_is_not_a_kubernetes_name_is_refused_before_any_api_call(
    cluster: kmock.KubernetesEmulator, runtime: Runtime, case: str
) -> None:
    cni_args, var = BAD[case]
    code, answer, stderr = await runtime.add(b"IgnoreUnknown=1;" + cni_args)

    assert code == 1 and stderr == b""
    assert answer["code"] == 4, answer
    assert answer["msg"] == f"invalid {var} in CNI_ARGS"
    assert f"is not a {'namespace' if var.endswith('NAMESPACE') else 'pod'} name: it must be" in answer["details"]
    assert "Kubernetes API" in answer["details"]
    assert list(cluster) == [], "no request reached the API server"
    assert not (runtime.socket.parent / "cache").exists() or not any((runtime.socket.parent / "cache").iterdir())


async def test_a_valid_pod_reference_is_looked_up_by_name(cluster: kmock.KubernetesEmulator, runtime: Runtime) -> None:
    code, answer, _ = await runtime.add(b"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0.a")
    assert code == 1 and answer["code"] == 104, answer  # kmock has no such pod
    (request,) = list(cluster)
    assert request.method == kmock.method.GET and str(request.url.path) == "/api/v1/namespaces/default/pods/web-0.a"
