"""Run the bridge controller (real kopf, real HTTP) against kube_emulator.Emulator.

Changes during a test go through HTTP (`call`), so the operator sees them as
watch events, as it would on a real cluster.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import kmock
import kopf

from bridge import npwg, translate
from bridge.operator import controller
from podnetwork.ground import constants
from tests.api import kube_emulator

# The bridge tests reach the shared emulator through this module (as `bs.X`).
from tests.api.kube_emulator import EVENTS as EVENTS
from tests.api.kube_emulator import PN as PN
from tests.api.kube_emulator import PNA as PNA
from tests.api.kube_emulator import PODS as PODS
from tests.api.kube_emulator import Emulator as Emulator
from tests.api.kube_emulator import condition as condition
from tests.api.kube_emulator import eventually as eventually
from tests.api.kube_emulator import requests_to as requests_to

NAD = f"{npwg.NAD_GROUP}/{npwg.NAD_VERSION}/{npwg.NAD_PLURAL}"
NSO = f"{translate.OPTIONS_GROUP}/{translate.OPTIONS_VERSION}/{translate.OPTIONS_PLURAL}"
NS = "app"

PN_URL = f"/apis/{constants.GROUP}/{constants.VERSION}/{constants.PODNETWORK_PLURAL}"
NAD_URL = f"/apis/{npwg.NAD_GROUP}/{npwg.NAD_VERSION}/namespaces/{{ns}}/{npwg.NAD_PLURAL}"
NSO_URL = f"/apis/{translate.OPTIONS_GROUP}/{translate.OPTIONS_VERSION}/namespaces/{{ns}}/{translate.OPTIONS_PLURAL}"
POD_URL = "/api/v1/namespaces/{ns}/pods/{name}"


def declare_resources(k: kmock.KubernetesEmulator) -> None:
    """kube_emulator's resources, NADs, selection options and events."""
    kube_emulator.declare_resources(k)
    verbs = set(kube_emulator.ALL_VERBS)
    k.resources[NAD] = kmock.ResourceInfo(kind=npwg.NAD_KIND, namespaced=True, verbs=verbs)
    k.resources[NSO] = kmock.ResourceInfo(kind=translate.OPTIONS_KIND, namespaced=True, verbs=verbs)
    k.resources[EVENTS] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create", "list", "get"})


@contextlib.asynccontextmanager
async def running(k: kmock.KubernetesEmulator, config: controller.BridgeSettings | None = None,
                  **spawn_options: Any) -> AsyncIterator[controller.Bridge]:
    """The bridge alone in an operator task of this loop; stopped and awaited on exit.
    `spawn_options` go to `kube_emulator.operator` (peering, identity)."""
    registry = kopf.OperatorRegistry()
    bridge = controller.Bridge(config=config or controller.BridgeSettings(), api=kube_emulator.api(k))
    controller.register(registry, bridge)
    async with kube_emulator.operator(k, registry, **spawn_options):
        yield bridge


async def seen(bridge: controller.Bridge, *podnetworks: str, nads: tuple[str, ...] = ()) -> None:
    """Until the bridge's watches have delivered every named PodNetwork and NAD (namespace `nets`).

    Each kind has its own watch: waiting for one says nothing of the other, and a
    webhook answering in between translates against half the world.
    """
    def both() -> None:
        objs = bridge.objects()
        for name in podnetworks:
            assert name in objs.podnetworks, f"PodNetwork {name} not seen yet"
        for name in nads:
            assert ("nets", name) in objs.nads, f"NAD nets/{name} not seen yet"
    await eventually(both)


async def call(k: kmock.KubernetesEmulator, method: str, url: str, body: Any = None) -> Any:
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with k.request(method, url, json=body, headers=headers) as resp:
        assert resp.status < 300, f"{method} {url}: {resp.status} {await resp.text()}"
        return await resp.json()


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


def annotations(obj: Any) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})
