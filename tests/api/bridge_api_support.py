"""Run the bridge controller (real kopf, real HTTP) against kmock's Kubernetes emulator.

kmock stores objects as given and merges patches naively. The emulator below adds
the two API-server behaviours the bridge relies on: every write bumps
`metadata.resourceVersion`, and a patch carrying a stale `resourceVersion` gets
409 Conflict. Changes during a test go through HTTP (`kmock.post/patch/delete`),
so the operator sees them as watch events, as it would on a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock
import kopf

from bridge import controller, npwg, translate
from podnetwork import constants

PN = f"{constants.GROUP}/{constants.VERSION}/{constants.PODNETWORK_PLURAL}"
PNA = f"{constants.GROUP}/{constants.VERSION}/{constants.ATTACHMENT_PLURAL}"
NAD = f"{npwg.NAD_GROUP}/{npwg.NAD_VERSION}/{npwg.NAD_PLURAL}"
NSO = f"{translate.OPTIONS_GROUP}/{translate.OPTIONS_VERSION}/{translate.OPTIONS_PLURAL}"
PODS = "v1/pods"
EVENTS = "v1/events"
NS = "app"

PN_URL = f"/apis/{constants.GROUP}/{constants.VERSION}/{constants.PODNETWORK_PLURAL}"
NAD_URL = f"/apis/{npwg.NAD_GROUP}/{npwg.NAD_VERSION}/namespaces/{{ns}}/{npwg.NAD_PLURAL}"
NSO_URL = f"/apis/{translate.OPTIONS_GROUP}/{translate.OPTIONS_VERSION}/namespaces/{{ns}}/{translate.OPTIONS_PLURAL}"
POD_URL = "/api/v1/namespaces/{ns}/pods/{name}"


class Emulator(kmock.KubernetesEmulator):
    """kmock's emulator with resourceVersion counting and 409 on stale patches."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._revision = 0

    async def _handle(self, request: Any) -> Any:
        if request.resource is None or not isinstance(request.data, dict) or request.method.value not in (
                "POST", "PATCH"):
            return await super()._handle(request)
        sent = copy.deepcopy(request.data)
        meta = request.data.setdefault("metadata", {})
        if request.method.value == "PATCH" and meta.get("resourceVersion"):
            key = (request.resource, request.namespace, request.name)
            stored = self.objects[key] if key in self.objects else None  # noqa: SIM401 (no .get)
            current = (stored or {}).get("metadata", {}).get("resourceVersion")
            if current and current != meta["resourceVersion"]:
                request.data.clear()
                request.data.update(sent)
                raise kmock.KubernetesError(status=409, reason="Conflict", message="the object has been modified")
        self._revision += 1
        meta["resourceVersion"] = str(self._revision)
        try:
            return await super()._handle(request)
        finally:
            request.data.clear()
            request.data.update(sent)


def declare_resources(k: kmock.KubernetesEmulator) -> None:
    verbs = {"list", "watch", "get", "create", "patch", "delete"}
    k.resources[PN] = kmock.ResourceInfo(kind="PodNetwork", namespaced=False, subresources={"status"}, verbs=verbs)
    k.resources[PNA] = kmock.ResourceInfo(kind="PodNetworkAttachment", namespaced=True, subresources={"status"},
                                          verbs=verbs)
    k.resources[NAD] = kmock.ResourceInfo(kind=npwg.NAD_KIND, namespaced=True, verbs=verbs)
    k.resources[NSO] = kmock.ResourceInfo(kind=translate.OPTIONS_KIND, namespaced=True, verbs=verbs)
    k.resources[PODS] = kmock.ResourceInfo(kind="Pod", namespaced=True, subresources={"status"}, verbs=verbs)
    k.resources[EVENTS] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create", "list", "get"})
    k.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs={"list", "watch"})
    k.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", namespaced=False, verbs={"list", "watch", "get"})


@contextlib.asynccontextmanager
async def running(k: kmock.KubernetesEmulator, config: controller.BridgeSettings | None = None
                  ) -> AsyncIterator[controller.Bridge]:
    """The bridge alone in an operator task of this loop; stopped and awaited on exit."""
    registry = kopf.OperatorRegistry()
    bridge = controller.Bridge(config=config or controller.BridgeSettings())
    controller.register(registry, bridge)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=str(k.url).rstrip("/"), insecure=True)

    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0.1
    settings.networking.error_backoffs = [0.1]
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(kopf.operator(
        registry=registry, settings=settings, standalone=True, clusterwide=True, stop_flag=stop, ready_flag=ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield bridge
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


async def eventually(check: Callable[[], Any], timeout: float = 8.0) -> Any:
    """Poll `check` until it returns without AssertionError/KeyError, or re-raise at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return check()
        except (AssertionError, KeyError, IndexError, TypeError):
            if loop.time() > deadline:
                raise
        await asyncio.sleep(0.05)


async def call(k: kmock.KubernetesEmulator, method: str, url: str, body: Any = None) -> Any:
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with k.request(method, url, json=body, headers=headers) as resp:
        assert resp.status < 300, f"{method} {url}: {resp.status} {await resp.text()}"
        return await resp.json()


def requests_to(k: kmock.KubernetesEmulator, method: str, path: str) -> list[Any]:
    return [req.data for req in list(k) if req.method.value == method and str(req.url.path) == path]


# --- objects ---------------------------------------------------------------------------------

def ready_condition() -> dict[str, Any]:
    return {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def podnetwork(name: str, nad: tuple[str, str] | None = ("nets", "dataplane"), *, ready: bool = True,
               provider: str = constants.BRIDGE_PROVIDER) -> dict[str, Any]:
    spec: dict[str, Any] = {"enabled": True, "provider": provider}
    if nad is not None:
        spec["parametersRefs"] = [{"group": npwg.NAD_GROUP, "kind": npwg.NAD_PLURAL, "namespace": nad[0],
                                   "name": nad[1]}]
    obj: dict[str, Any] = {"apiVersion": constants.API_VERSION, "kind": constants.PODNETWORK_KIND,
                           "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1, "resourceVersion": "1"},
                           "spec": spec}
    if ready:
        obj["status"] = {"conditions": [ready_condition()]}
    return obj


def attachment(name: str, network: str, refs: list[dict[str, str]], ns: str = NS) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": constants.ATTACHMENT_KIND,
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-pna-{name}", "generation": 1,
                         "resourceVersion": "1"},
            "spec": {"podNetworkName": network, "parametersRefs": refs}}


def nad(name: str, ns: str = "nets", config: dict[str, Any] | str | None = None) -> dict[str, Any]:
    if config is None:
        config = {"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-" + name[:8],
                  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24", "gateway": "10.9.0.1"}]]}}
    return {"apiVersion": npwg.NAD_API_VERSION, "kind": npwg.NAD_KIND,
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-nad-{name}", "resourceVersion": "1"},
            "spec": {"config": config if isinstance(config, str) else json.dumps(config)}}


def options(name: str, spec: dict[str, Any], ns: str = NS) -> dict[str, Any]:
    return {"apiVersion": translate.OPTIONS_API_VERSION, "kind": translate.OPTIONS_KIND,
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"}, "spec": spec}


def pod(name: str, nets: list[dict[str, Any]] | None, *, ns: str = NS,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    ann = dict(annotations or {})
    if nets is not None:
        ann[constants.NETWORKS_ANNOTATION] = json.dumps(nets)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-pod-{name}", "resourceVersion": "1",
                         "annotations": ann},
            "spec": {"containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Pending"}}


def condition(obj: Any, type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    raise KeyError(type_)


def annotations(obj: Any) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})
