"""The demo and the operators reach the same results for the same objects.

The same objects, in the same steps, go to the PodNetwork controller and the bridge running
under kopf against kmock's emulator (real HTTP, the handlers their `register` wires) and to
the demo's control plane over its store (`demo.controlplane`). After each step, once the
operators settled, the PodNetworks, attachments, pods, nodes and Events must agree: the
conditions and finalizers, each pod's selection, scheduling gates, pod IPs, attachment data
and requeue nudge, each node's DefaultPodNetworkReady, and every Event the bridge posted.

The steps cover each kind of decision: a selection with a default route, a translation
warning, a missing gateway, a pod waiting behind its gate for a network that does not exist
yet (then exists, then is Ready), a network of another provider (the gate released), a
hand-written selection that disagrees, an attachment, network-status turned into pod IPs,
and a pod that ended.

SchedulingGated Events are compared by pod, not by message: they record each transient
reason a gated pod waited for (a network missing, then not Ready for a reason that changes
as the controller and the bridge write), and which transient states a kopf operator sees
depends on how kopf batches an object's events. The message of the one stable wait (the
network does not exist) is compared on both sides.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kmock as kmock_lib
import kopf
import pytest

from bridge import npwg
from bridge.operator import controller as bridge_controller
from bridge.operator import pods
from demo.controlplane import ControlPlane
from demo.store import Store
from podnetwork.ground import constants
from podnetwork.kep import controller as kep_controller
from podnetwork.kube import client as kube
from tests.api import bridge_api_support as bs
from tests.api import kube_emulator as ke

pytestmark = pytest.mark.kmock(cls=ke.Emulator)

NS = "app"
GATE = constants.NPWG_SELECTION_GATE
PN_KIND, PNA_KIND = constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND
#: What both sides run with: as `podnetwork controller` does, but InUse messages flushed within 0.2 s
#: (the demo flushes after every event) and no namespace watch (kmock cannot list namespaces).
SETTINGS = kep_controller.ControllerSettings(inuse_message_interval=0.2, namespace_profiles=False,
                                             resync_interval=0)


def podnetwork(name: str, nad: str | None, provider: str = constants.BRIDGE_PROVIDER) -> dict[str, Any]:
    spec: dict[str, Any] = {"enabled": True, "provider": provider}
    if nad is not None:
        spec["parametersRefs"] = [{"group": npwg.NAD_GROUP, "kind": npwg.NAD_PLURAL, "namespace": "nets",
                                   "name": nad}]
    return {"apiVersion": constants.API_VERSION, "kind": PN_KIND, "metadata": {"name": name, "generation": 1},
            "spec": spec}


def nad(name: str, gateway: str | None) -> dict[str, Any]:
    subnet: dict[str, str] = {"subnet": "10.9.0.0/24"}
    if gateway:
        subnet["gateway"] = gateway
    config = {"cniVersion": "1.0.0", "type": "bridge", "bridge": f"br-{name}",
              "ipam": {"type": "host-local", "ranges": [[subnet]]}}
    return {"apiVersion": npwg.NAD_API_VERSION, "kind": npwg.NAD_KIND,
            "metadata": {"name": name, "namespace": "nets"}, "spec": {"config": json.dumps(config)}}


def pod(name: str, nets: list[dict[str, Any]] | None, *, gated: bool = False,
        annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    ann = dict(annotations or {})
    if nets is not None:
        ann[constants.NETWORKS_ANNOTATION] = json.dumps(nets)
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if gated:  # as the bridge's webhook adds it
        spec["schedulingGates"] = [{"name": GATE}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "annotations": ann},
            "spec": spec}


DEFAULT = {"podNetworkName": "default"}
#: What exists before the operators start: their initial listing.
WORLD = [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
    podnetwork("blue", "blue"), nad("blue", "10.9.0.1"),
    podnetwork("green", "green"), nad("green", None),
    podnetwork("other", None, provider="example.com/other"),
    {"apiVersion": constants.API_VERSION, "kind": PNA_KIND, "metadata": {"name": "blue-port", "namespace": NS},
     "spec": {"podNetworkName": "blue"}},
]


@dataclass(frozen=True)
class Create:
    obj: dict[str, Any]


@dataclass(frozen=True)
class Change:
    """A merge patch of a pod (`status`: of its status)."""

    name: str
    patch: dict[str, Any]
    status: bool = False


STATUS = [{"name": "cluster", "interface": "eth0", "ips": ["10.0.0.5/24"], "default": True},
          {"name": "nets/blue", "interface": "net1", "ips": ["10.9.0.7/24"], "mac": "0a:58:0a:09:00:07"}]
STEPS: list[tuple[str, list[Create | Change]]] = [
    ("pods", [
        Create(pod("p-blue", [DEFAULT, {"podNetworkName": "blue", "interfaceName": "net1", "isDefaultGW4": True}],
                   gated=True)),
        Create(pod("p-warn", [{"podNetworkName": "default", "interfaceName": "eth9"}, {"podNetworkName": "blue"}])),
        Create(pod("p-gw", [DEFAULT, {"podNetworkName": "green", "isDefaultGW4": True}], gated=True)),
        Create(pod("p-red", [DEFAULT, {"podNetworkName": "red", "interfaceName": "net2"}], gated=True)),
        Create(pod("p-other", [DEFAULT, {"podNetworkName": "other"}], gated=True)),
        Create(pod("p-hand", [DEFAULT, {"podNetworkName": "blue"}],
                   annotations={npwg.NETWORKS_ANNOTATION: "nets/green"})),
        Create(pod("p-pna", [DEFAULT, {"podNetworkAttachmentName": "blue-port"}])),
        Create(pod("p-plain", None)),
    ]),
    ("PodNetwork red, without its NAD", [Create(podnetwork("red", "red"))]),
    ("red's NAD", [Create(nad("red", None))]),
    ("p-blue's network-status", [Change("p-blue", {"metadata": {"annotations": {
        npwg.NETWORK_STATUS_ANNOTATION: json.dumps(STATUS)}}})]),
    ("p-plain ended", [Change("p-plain", {"status": {"phase": "Succeeded"}}, status=True)]),
]


def snapshot(objects: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the operators decided, without what differs by server (resourceVersions, uids, times)."""
    out: dict[str, Any] = {}
    events: set[tuple[str, ...]] = set()
    for obj in objects:
        kind, meta = obj.get("kind"), obj.get("metadata") or {}
        name = f"{kind} {meta.get('namespace') or ''}/{meta.get('name')}"
        conds = {c["type"]: (c["status"], c.get("reason"), c.get("message"))
                 for c in (obj.get("status") or {}).get("conditions") or []}
        ann = meta.get("annotations") or {}
        if kind in (PN_KIND, PNA_KIND):
            out[name] = {"conditions": conds, "finalizers": sorted(meta.get("finalizers") or [])}
        elif kind == "Node":
            out[name] = conds.get("DefaultPodNetworkReady")
        elif kind == "Pod":
            out[name] = {key: ann.get(key) for key in (
                npwg.NETWORKS_ANNOTATION, pods.WRITTEN_ANNOTATION, constants.POD_IPS_ANNOTATION,
                constants.ATTACHMENTS_ANNOTATION)}
            out[name]["requeued"] = constants.REQUEUED_AT_ANNOTATION in ann
            out[name]["gates"] = [g.get("name") for g in (obj.get("spec") or {}).get("schedulingGates") or []]
        elif kind == "Event":
            message = "" if obj.get("reason") == pods.GATED_REASON else obj.get("message", "")
            events.add((obj["involvedObject"]["name"], obj.get("reason", ""), obj.get("type", ""), message))
    out["events"] = sorted(events)
    return out


def stored(k: kmock_lib.KubernetesEmulator) -> list[dict[str, Any]]:
    return [copy.deepcopy(obj.raw) for _, obj in k.objects.items() if not obj.deleted]


def in_store(store: Store) -> list[dict[str, Any]]:
    return [obj for res in store.resources() for obj in store.list(res.api_version, res.kind)]


def seed(k: kmock_lib.KubernetesEmulator) -> None:
    bs.declare_resources(k)
    paths = {"Node": ke.NODES, PN_KIND: ke.PN, PNA_KIND: ke.PNA, npwg.NAD_KIND: bs.NAD}
    for obj in WORLD:
        meta = obj["metadata"]
        k.objects[paths[obj["kind"]], meta.get("namespace"), meta["name"]] = copy.deepcopy(obj)


async def send(k: kmock_lib.KubernetesEmulator, op: Create | Change) -> None:
    if isinstance(op, Create):
        meta = op.obj["metadata"]
        url = kube.path_of(kube.BY_KIND[op.obj["kind"]], meta.get("namespace"))
        await bs.call(k, "POST", url, op.obj)
    else:
        url = kube.path_of(kube.Pod, NS, op.name) + ("/status" if op.status else "")
        await bs.call(k, "PATCH", url, op.patch)


def apply(store: Store, op: Create | Change) -> None:
    if isinstance(op, Create):
        store.create(op.obj)
    else:
        store.patch("v1", "Pod", op.name, op.patch, NS, subresource="status" if op.status else None)


@contextlib.asynccontextmanager
async def operators(k: kmock_lib.KubernetesEmulator) -> AsyncIterator[None]:
    """The controller and the bridge, as `podnetwork controller` and `podnetwork bridge` run them."""
    registry = kopf.OperatorRegistry()
    kep_controller.register(registry, kep_controller.Controller(config=SETTINGS, api=ke.api(k)))
    bridge_controller.register(registry, bridge_controller.Bridge(api=ke.api(k)))
    async with ke.operator(k, registry):
        yield


async def test_the_demo_and_the_operators_reach_the_same_results_for_the_same_objects(kmock: ke.Emulator) -> None:
    store = Store()
    for obj in WORLD:
        store.create(obj)
    control = ControlPlane(store, settings=SETTINGS)
    control.start()
    seed(kmock)
    async with operators(kmock):
        for step, ops in [("start", []), *STEPS]:
            for op in ops:
                apply(store, op)
                await send(kmock, op)
            want = snapshot(in_store(store))

            def agree(want: dict[str, Any] = want) -> bool:
                assert snapshot(stored(kmock)) == want
                return True
            try:
                await ke.eventually(agree, timeout=20)
            except AssertionError as exc:
                raise AssertionError(f"after step {step!r}, the operators and the demo disagree: {exc}") from None
            if step == "pods":
                waiting = [e for e in in_store(store) if e.get("kind") == "Event"
                           and e["involvedObject"]["name"] == "p-red" and e["reason"] == pods.GATED_REASON]
                seen = [e for e in stored(kmock) if e.get("kind") == "Event"
                        and e["involvedObject"]["name"] == "p-red" and e["reason"] == pods.GATED_REASON]
                assert [e["message"] for e in waiting] == [e["message"] for e in seen]
                assert 'podnetwork "red" not found' in waiting[0]["message"]
    control.stop()
    assert store.callback_errors == []
    # Each kind of decision was taken, so agreeing means something.
    final = snapshot(in_store(store))
    assert final[f"Pod {NS}/p-blue"]["gates"] == [] and final[f"Pod {NS}/p-blue"][constants.POD_IPS_ANNOTATION]
    assert final[f"Pod {NS}/p-gw"]["gates"] == [GATE] and final[f"Pod {NS}/p-gw"][npwg.NETWORKS_ANNOTATION] is None
    assert final[f"Pod {NS}/p-other"]["gates"] == [] and final[f"Pod {NS}/p-other"][npwg.NETWORKS_ANNOTATION] is None
    assert final[f"Pod {NS}/p-red"]["gates"] == [] and final[f"Pod {NS}/p-red"]["requeued"]
    assert {reason for _, reason, _, _ in final["events"]} == {
        pods.TRANSLATION_WARNING_REASON, pods.GATEWAY_MISSING_REASON, pods.GATED_REASON, pods.CONFLICT_REASON}
    assert constants.IN_USE_FINALIZER in final[f"{PNA_KIND} {NS}/blue-port"]["finalizers"]
    assert final["Node /n1"][0] == "True"
