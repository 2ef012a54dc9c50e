"""Run the PodNetwork controller (real kopf, real HTTP) against kmock's Kubernetes emulator.

kmock stores objects as given: it has no status subresource semantics, no
resourceVersion checks, and merges lists by replacing them. The tests assert
the requests the operator sent (URL, content type, body) and the stored
result, which is what a real API server would also receive.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from typing import Any

import kmock
import kopf

from podnetwork import constants, controller

PN = f"{constants.GROUP}/{constants.VERSION}/{constants.PODNETWORK_PLURAL}"
PNA = f"{constants.GROUP}/{constants.VERSION}/{constants.ATTACHMENT_PLURAL}"
PODS = "v1/pods"
NODES = "v1/nodes"


class Emulator(kmock.KubernetesEmulator):
    """kmock's emulator plus the two API-server behaviours the controller relies on.

    Every create or patch bumps `metadata.resourceVersion` (a counter, as etcd's
    revision is), and a patch that carries a stale `resourceVersion` is refused
    with 409 Conflict, as a real API server refuses it.
    """

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._revision = 0
        self.failures: dict[str, int] = {}
        """Path suffix -> how many more writes there answer 503 without storing anything."""

    async def _handle(self, request: Any) -> Any:
        for suffix, left in self.failures.items():
            if left and request.method.value != "GET" and str(request.url.path).endswith(suffix):
                self.failures[suffix] = left - 1
                raise kmock.KubernetesError(status=503, reason="ServiceUnavailable", message="try again")
        if request.resource is None or not isinstance(request.data, dict) or request.method.value not in (
                "POST", "PATCH"):
            return await super()._handle(request)
        sent = copy.deepcopy(request.data)
        meta = request.data.setdefault("metadata", {})
        if request.method.value == "PATCH" and meta.get("resourceVersion"):
            key = (request.resource, request.namespace, request.name)
            try:
                current = self.objects[key].get("metadata", {}).get("resourceVersion")
            except KeyError:
                current = None
            if current and current != meta["resourceVersion"]:
                request.data.clear()
                request.data.update(sent)
                raise kmock.KubernetesError(status=409, reason="Conflict",
                                            message="the object has been modified")
        self._revision += 1
        meta["resourceVersion"] = str(self._revision)
        try:
            return await super()._handle(request)
        finally:
            # kmock records the request as sent, and the tests assert on that.
            request.data.clear()
            request.data.update(sent)


def declare_resources(k: kmock.KubernetesEmulator) -> None:
    k.resources[PN] = kmock.ResourceInfo(
        kind="PodNetwork", namespaced=False, shortnames={"pn"}, subresources={"status"},
        verbs={"list", "watch", "get", "create", "patch", "delete"})
    k.resources[PNA] = kmock.ResourceInfo(
        kind="PodNetworkAttachment", namespaced=True, shortnames={"pna"}, subresources={"status"},
        verbs={"list", "watch", "get", "create", "patch", "delete"})
    k.resources[PODS] = kmock.ResourceInfo(
        kind="Pod", namespaced=True, subresources={"status"}, verbs={"list", "watch", "get", "patch"})
    # kopf's resource and namespace observers watch these; they stay empty here.
    k.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs={"list", "watch"})
    k.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"list", "watch", "get"})
    k.resources[NODES] = kmock.ResourceInfo(
        kind="Node", namespaced=False, subresources={"status"}, verbs={"list", "watch", "get", "patch"})


class _ForeignTasks(Collection[asyncio.Task[Any]]):
    """Tasks that kopf must not wait for at exit: kmock's server and the test's own.

    kopf.operator() treats every task created after its start as its own and
    waits 5 s for them at exit; kmock's connection handlers are among them.
    """

    def __contains__(self, task: object) -> bool:
        coro = task.get_coro() if isinstance(task, asyncio.Task) else None
        filename = getattr(getattr(coro, "cr_code", None), "co_filename", "")
        return "/kopf/" not in filename and "/podnetwork/" not in filename

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(())

    def __len__(self) -> int:
        return 0


@contextlib.asynccontextmanager
async def running(k: kmock.KubernetesEmulator, config: controller.ControllerSettings
                  ) -> AsyncIterator[controller.Controller]:
    """The operator in a task of this loop; stopped (and awaited) on exit."""
    registry = kopf.OperatorRegistry()
    # kmock 0.8 cannot parse GET /api/v1/namespaces (it reads "namespaces" as a namespace).
    config = dataclasses.replace(config, namespace_profiles=False)
    ctl = controller.Controller(config=config)
    controller.register(registry, ctl)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=str(k.url).rstrip("/"), insecure=True)

    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0.1
    settings.networking.error_backoffs = [0.1]
    # Per-object workers linger `idle_timeout` s; at exit they get `exit_timeout` s.
    settings.batching.idle_timeout = 0.5
    settings.batching.exit_timeout = 0.5
    stop = asyncio.Event()
    ready = asyncio.Event()

    async def operator() -> None:
        tasks = await kopf.spawn_tasks(registry=registry, settings=settings, standalone=True,
                                       clusterwide=True, stop_flag=stop, ready_flag=ready)
        await kopf.run_tasks(tasks, ignored=_ForeignTasks())

    task = asyncio.create_task(operator())
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield ctl
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


async def eventually(check: Callable[[], Any], timeout: float = 8.0) -> Any:
    """Poll `check` until it returns a truthy value or raise its last AssertionError."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            result = check()
            if result or result is None:
                return result
        except (AssertionError, KeyError, IndexError, TypeError):
            if asyncio.get_running_loop().time() > deadline:
                raise
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met in {timeout}s")
        await asyncio.sleep(0.05)


def requests_to(k: kmock.KubernetesEmulator, method: str, path_suffix: str) -> list[Any]:
    """Bodies of the requests the operator sent with `method` to a path ending in `path_suffix`."""
    found = []
    for req in list(k):
        if req.method.value == method and str(req.url.path).endswith(path_suffix):
            found.append(req.data)
    return found


def content_types(k: kmock.KubernetesEmulator, method: str, path_suffix: str) -> list[str]:
    return [req.headers.get("Content-Type", "") for req in list(k)
            if req.method.value == method and str(req.url.path).endswith(path_suffix)]


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


def condition(obj: Any, type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    raise KeyError(type_)


def node(name: str, override: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-node-{name}", "resourceVersion": "0"}
    if override:
        meta["annotations"] = {constants.NODE_DEFAULT_PODNETWORK_ANNOTATION: override}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
