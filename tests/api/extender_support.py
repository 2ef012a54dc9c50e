"""Fixtures for the extender's tests: request bodies in the exact shape kube-scheduler sends.

kube-scheduler marshals `extenderv1.ExtenderArgs` with Go's encoding/json: the
struct has no json tags, so the keys are `Pod`, `Nodes`, `NodeNames`, and the
pointer it does not set is `null`. The pod and nodes inside are `v1.Pod` and
`v1.NodeList` from its informer cache, so they carry json-tagged lower-case keys
and no `kind`/`apiVersion` (informer objects have an empty TypeMeta).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import kmock
import uvicorn
from fastapi import FastAPI

from podnetwork.ground import constants
from scheduler_plugin import cache
from tests.api.kube_emulator import write_kubeconfig
from tests.unit.ports_support import free_port

NETWORKS = "multinetwork.x-k8s.io/networks"
NODE_NETWORKS = "multinetwork.x-k8s.io/podnetworks"

# A pod as kube-scheduler sends it (nodeCacheCapable: true): NodeNames set, Nodes null.
FILTER_BY_NAMES = r"""
{"Pod":{"metadata":{"name":"web-0","namespace":"shop","uid":"6f1c2b1e-8d1e-4c59-9b43-2f3a1c0d9e11",
"resourceVersion":"48213","creationTimestamp":"2026-11-21T10:00:00Z","labels":{"app":"web"},
"annotations":{"multinetwork.x-k8s.io/networks":"[{\"podNetworkName\":\"default\"},{\"podNetworkName\":\"blue\",\"interfaceName\":\"net1\"}]"},
"managedFields":[{"manager":"kubectl-client-side-apply","operation":"Update","apiVersion":"v1","time":"2026-11-21T10:00:00Z"}]},
"spec":{"volumes":[{"name":"kube-api-access-x2k9p","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}}],"defaultMode":420}}],
"containers":[{"name":"web","image":"nginx:1.27","resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],
"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","serviceAccount":"default",
"securityContext":{},"schedulerName":"default-scheduler","tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],
"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},
"status":{"phase":"Pending","qosClass":"BestEffort"}},
"Nodes":null,
"NodeNames":["node-a","node-b","node-c"]}
"""

# A node as it appears in `Nodes.items` (nodeCacheCapable: false).
NODE_ITEM = r"""
{"metadata":{"name":"node-x","uid":"0d5e7c3a-1b2c-4d5e-8f90-a1b2c3d4e5f6","resourceVersion":"47001",
"creationTimestamp":"2026-11-20T08:00:00Z","labels":{"kubernetes.io/hostname":"node-x","kubernetes.io/os":"linux"},
"annotations":{"node.alpha.kubernetes.io/ttl":"0"}},
"spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24"]},
"status":{"capacity":{"cpu":"4","memory":"16Gi","pods":"110"},"allocatable":{"cpu":"4","memory":"16Gi","pods":"110"},
"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2026-11-21T10:00:00Z","lastTransitionTime":"2026-11-20T08:01:00Z","reason":"KubeletReady","message":"kubelet is posting ready status"}],
"addresses":[{"type":"InternalIP","address":"172.18.0.3"},{"type":"Hostname","address":"node-x"}],
"nodeInfo":{"kubeletVersion":"v1.31.0","operatingSystem":"linux","architecture":"amd64"}}}
"""


def pod(networks: list[dict[str, Any]] | str | None, *, namespace: str = "shop") -> dict[str, Any]:
    """The captured pod with its networks annotation replaced (a list, raw text, or removed)."""
    body = json.loads(FILTER_BY_NAMES)["Pod"]
    body["metadata"]["namespace"] = namespace
    annotations = body["metadata"]["annotations"]
    if networks is None:
        del annotations[NETWORKS]
    else:
        annotations[NETWORKS] = networks if isinstance(networks, str) else json.dumps(networks)
    return body


def by_names(the_pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """ExtenderArgs as sent with nodeCacheCapable: true."""
    return {"Pod": the_pod, "Nodes": None, "NodeNames": names}


def node(name: str, offers: list[str] | str | None = None) -> dict[str, Any]:
    """A captured node, renamed, with its podnetworks annotation (list, raw text or absent)."""
    item = json.loads(NODE_ITEM)
    item["metadata"]["name"] = name
    item["metadata"]["labels"]["kubernetes.io/hostname"] = name
    if offers is not None:
        item["metadata"]["annotations"][NODE_NETWORKS] = offers if isinstance(offers, str) else json.dumps(offers)
    return item


def by_nodes(the_pod: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """ExtenderArgs as sent with nodeCacheCapable: false."""
    return {"Pod": the_pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}


def condition(ready: bool, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": "Ready", "status": "True" if ready else "False", "reason": reason, "message": message,
        "lastTransitionTime": "2026-11-21T09:00:00Z", "observedGeneration": 1,
    }


def podnetwork(name: str, ready: bool = True, reason: str = "Ready", message: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork",
        "metadata": {"name": name, "generation": 1, "resourceVersion": "100"},
        "spec": {"enabled": True, "provider": "example.com/bridge"},
        "status": {"conditions": [condition(ready, reason, message)]},
    }


def attachment(name: str, network: str, ready: bool = True, reason: str = "Ready", message: str = "",
               namespace: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetworkAttachment",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"podNetworkName": network},
        "status": {"conditions": [condition(ready, reason, message)]},
    }


RED_MESSAGE = 'NetworkAttachmentDefinition "shop/red-nad" not found'


def world(*, synced: bool = True) -> cache.Cache:
    """A small cluster: networks default, blue (Ready), red (not Ready); three nodes.

    node-a offers blue, node-b offers nothing but default, node-c has no annotation
    (offers every network).
    """
    c = cache.Cache()
    for obj in (
        podnetwork("default"),
        podnetwork("blue"),
        podnetwork("green"),
        podnetwork("red", False, "ParamsNotReady", RED_MESSAGE),
        attachment("blue-fast", "blue"),
        attachment("blue-slow", "blue"),
        attachment("green-fast", "green"),
        attachment("red-fast", "red", False, "PodNetworkNotReady", 'podnetwork "red" is not Ready'),
        {**node("node-a", ["blue", "green"]), "kind": "Node"},
        {**node("node-b", []), "kind": "Node"},
        {**node("node-c"), "kind": "Node"},
    ):
        c.upsert(obj)
    if synced:
        c.mark_synced()
    return c


# --- serving the extender over real HTTP --------------------------------------------------------

@contextlib.contextmanager
def served(application: FastAPI) -> Iterator[str]:
    """`application` served by uvicorn on 127.0.0.1 (a free port) in a thread; yields its base URL.

    A thread rather than a task, so that synchronous tests (hypothesis) can call it too.
    """
    server = uvicorn.Server(uvicorn.Config(application, host="127.0.0.1", port=0,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="extender-under-test", daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "uvicorn stopped before it started"
            thread.join(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "uvicorn did not stop"


def declare_extender_resources(k: kmock.KubernetesEmulator) -> None:
    """The three kinds the extender lists and watches."""
    verbs = {"list", "watch", "get", "create", "patch", "delete"}
    group = f"{constants.GROUP}/{constants.VERSION}"
    k.resources[f"{group}/{constants.PODNETWORK_PLURAL}"] = kmock.ResourceInfo(
        kind="PodNetwork", namespaced=False, verbs=verbs)
    k.resources[f"{group}/{constants.ATTACHMENT_PLURAL}"] = kmock.ResourceInfo(
        kind="PodNetworkAttachment", namespaced=True, verbs=verbs)
    k.resources["v1/nodes"] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs=verbs)


@contextlib.asynccontextmanager
async def extender_process(
    k: kmock.KubernetesEmulator, tmp_path: Path, *args: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, httpx.AsyncClient]]:
    """`podnetwork scheduler-extender` in a subprocess, watching `k`, once its /readyz says ready.

    Yields the process and a client of its HTTP port; terminates it afterwards.
    """
    config = write_kubeconfig(tmp_path / "kubeconfig", str(k.url).rstrip("/"))
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podnetwork", "scheduler-extender",
        "--kubeconfig", str(config), "--host", "127.0.0.1", "--port", str(port), "--watch-timeout", "5", *args,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while True:
                assert proc.returncode is None, "the extender exited"
                assert loop.time() < deadline, "the extender never became ready"
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            yield proc, client
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


def rss_bytes(pid: int) -> tuple[int, int]:
    """The resident set of process `pid` now and at its peak (VmRSS, VmHWM), in bytes."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    now, peak = (int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM"))
    return now, peak
