"""The bridge's Services controller over HTTP: kopf against kmock's Kubernetes emulator. Services
annotated with a PodNetwork get EndpointSlices of the network's addresses, which follow the
pods; bad input gets one Warning Event and no slice."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import kmock as kmock_lib
import kopf
import pytest

from bridge.operator import controller, services, serviceslices
from podnetwork.ground import constants
from tests.api import bridge_api_support as bs
from tests.api import kube_emulator

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

SERVICES = "v1/services"
SLICES = "discovery.k8s.io/v1/endpointslices"
SERVICE_URL = f"/api/v1/namespaces/{bs.NS}/services"
SLICE_URL = f"/apis/discovery.k8s.io/v1/namespaces/{bs.NS}/endpointslices"
POD_URL = f"/api/v1/namespaces/{bs.NS}/pods"


def seed(k: kmock_lib.KubernetesEmulator, *objs: dict[str, Any]) -> None:
    bs.declare_resources(k)
    verbs = set(kube_emulator.ALL_VERBS)
    k.resources[SERVICES] = kmock_lib.ResourceInfo(kind="Service", namespaced=True, verbs=verbs)
    k.resources[SLICES] = kmock_lib.ResourceInfo(kind="EndpointSlice", namespaced=True, verbs=verbs)
    kinds = {"PodNetwork": bs.PN, "Pod": bs.PODS, "Service": SERVICES}
    for obj in objs:
        meta = obj["metadata"]
        k.objects[kinds[obj["kind"]], meta.get("namespace"), meta["name"]] = obj


@contextlib.asynccontextmanager
async def running(k: kmock_lib.KubernetesEmulator) -> AsyncIterator[serviceslices.Services]:
    """The bridge as `podnetwork bridge` runs it: its own handlers and the Services controller."""
    registry = kopf.OperatorRegistry()
    api = kube_emulator.api(k)
    controller.register(registry, controller.Bridge(api=api))
    served = serviceslices.Services(api=api)
    serviceslices.register(registry, served)
    async with kube_emulator.operator(k, registry):
        yield served


def service(name: str = "db", *, network: str | None = "blue", selector: dict[str, str] | None = None,
            families: list[str] | None = None, target: int | str = "sql") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": bs.NS, "uid": f"uid-svc-{name}", "resourceVersion": "1",
                            "labels": {constants.SERVICE_PROXY_NAME_LABEL: constants.SERVICE_PROXY_NAME}}
    if network is not None:
        meta["annotations"] = {constants.SERVICE_PODNETWORK_ANNOTATION: network}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ipFamilies": families or ["IPv4"],
                     "selector": {"app": "db"} if selector is None else selector,
                     "ports": [{"name": "sql", "port": 5432, "targetPort": target, "protocol": "TCP"}]}}


def pod(name: str, ips: list[str], *, network: str = "blue", ready: bool = True) -> dict[str, Any]:
    body = bs.pod(name, [{"podNetworkName": network}], annotations={constants.POD_IPS_ANNOTATION: json.dumps(
        [{"ip": ip, "podNetwork": network, "interfaceName": "net1"} for ip in ips])})
    body["metadata"]["labels"] = {"app": "db"}
    body["spec"] = {"nodeName": "node-a", "containers": [
        {"name": "c", "image": "x", "ports": [{"name": "sql", "containerPort": 5432, "protocol": "TCP"}]}]}
    body["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return body


def slices(k: kmock_lib.KubernetesEmulator) -> dict[str, dict[str, Any]]:
    return {key[2]: copy.deepcopy(obj.raw) for key, obj in k.objects.items() if key[0] == SLICES and not obj.deleted}


def endpoints(k: kmock_lib.KubernetesEmulator) -> dict[str, list[str]]:
    """Slice name -> the pods it lists."""
    return {n: sorted(e["targetRef"]["name"] for e in s["endpoints"]) for n, s in slices(k).items()}


def service_events(k: kmock_lib.KubernetesEmulator) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in bs.requests_to(k, "POST", f"/api/v1/namespaces/{bs.NS}/events")
            if e["involvedObject"]["kind"] == "Service"]


async def test_more_than_a_hundred_endpoints_of_both_families_are_sliced_and_follow_pods(
        kmock: bs.Emulator) -> None:
    pods = [pod(f"db-{i:03}", [f"10.9.0.{i + 1}", f"fd00::{i + 1:x}"]) for i in range(130)]
    seed(kmock, bs.podnetwork("blue", nad=None, provider="example.com/vendor"),
         service(families=["IPv4", "IPv6"]), *pods)
    async with running(kmock):
        def sliced() -> None:
            got = {n: len(eps) for n, eps in endpoints(kmock).items()}
            assert got == {"db.ipv4.0": 100, "db.ipv4.1": 30, "db.ipv6.0": 100, "db.ipv6.1": 30}
        await bs.eventually(sliced, timeout=20)
        for name, body in slices(kmock).items():
            labels = body["metadata"]["labels"]
            assert labels[constants.ENDPOINTSLICE_MANAGED_BY_LABEL] == constants.ENDPOINTSLICE_MANAGED_BY
            assert labels[constants.ENDPOINTSLICE_SERVICE_NAME_LABEL] == "db"
            assert labels[constants.SERVICE_PROXY_NAME_LABEL] == constants.SERVICE_PROXY_NAME
            assert body["addressType"] == ("IPv4" if "ipv4" in name else "IPv6")
            assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-svc-db"
        # A pod that goes is removed; a new one goes into a slice with room (no new slice); a
        # not-ready one says so.
        await bs.call(kmock, "DELETE", f"{POD_URL}/db-000")
        await bs.eventually(lambda: all("db-000" not in eps for eps in endpoints(kmock).values()), timeout=20)
        await bs.call(kmock, "POST", POD_URL, pod("db-new", ["10.9.1.1", "fd00::1:1"], ready=False))

        def followed() -> None:
            got = endpoints(kmock)
            assert set(got) == {"db.ipv4.0", "db.ipv4.1", "db.ipv6.0", "db.ipv6.1"}
            assert "db-new" in got["db.ipv4.0"] and "db-new" in got["db.ipv6.0"]
            assert sum(map(len, got.values())) == 260
        await bs.eventually(followed, timeout=20)
        new = next(e for e in slices(kmock)["db.ipv4.0"]["endpoints"] if e["targetRef"]["name"] == "db-new")
        assert new["conditions"] == {"ready": False, "serving": False, "terminating": False}
        assert new["addresses"] == ["10.9.1.1"]
        # Only the slices that changed were written.
        patched = {str(r.url.path).rsplit("/", 1)[1] for r in list(kmock)
                   if r.method.value == "PATCH" and "/endpointslices/" in str(r.url.path)}
        assert patched == {"db.ipv4.0", "db.ipv6.0"}
    assert service_events(kmock) == []


async def test_a_service_that_stops_naming_the_network_loses_its_slices(kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("blue", nad=None, provider="example.com/vendor"), service(),
         pod("db-0", ["10.9.0.5"]))
    async with running(kmock):
        await bs.eventually(lambda: endpoints(kmock) == {"db.ipv4.0": ["db-0"]})
        await bs.call(kmock, "PATCH", f"{SERVICE_URL}/db",
                      {"metadata": {"annotations": {constants.SERVICE_PODNETWORK_ANNOTATION: None}}})
        await bs.eventually(lambda: slices(kmock) == {})
        # A pod change afterwards writes no slice again.
        await bs.call(kmock, "POST", POD_URL, pod("db-1", ["10.9.0.6"]))
        await asyncio.sleep(0.5)
        assert slices(kmock) == {}
    assert service_events(kmock) == []


async def test_an_unknown_network_gets_one_warning_and_no_slice_until_the_network_exists(
        kmock: bs.Emulator) -> None:
    seed(kmock, service(network="green"), pod("db-0", ["10.9.0.5"], network="green"))
    async with running(kmock):
        await bs.eventually(lambda: service_events(kmock))
        # Pod changes re-plan the Service: the same problem is not posted again.
        await bs.call(kmock, "POST", POD_URL, pod("db-1", ["10.9.0.6"], network="green"))
        await asyncio.sleep(0.5)
        ((reason, message),) = service_events(kmock)
        assert reason == services.PODNETWORK_NOT_FOUND and "PodNetwork 'green'" in message
        assert slices(kmock) == {}
        await bs.call(kmock, "POST", bs.PN_URL, bs.podnetwork("green", nad=None, provider="example.com/vendor"))
        await bs.eventually(lambda: endpoints(kmock) == {"db.ipv4.0": ["db-0", "db-1"]})


async def test_bad_input_gets_a_clear_warning_on_the_service_and_no_slice_and_breaks_nothing_else(
        kmock: bs.Emulator) -> None:
    seed(kmock, bs.podnetwork("blue", nad=None, provider="example.com/vendor"),
         service("nosel", selector={}), service("noport", target="http"),
         service("nov6", families=["IPv6"]), service("offnet"), service("good"),
         pod("db-0", ["10.9.0.5"]), pod("db-1", ["10.7.0.5"], network="red"))
    async with running(kmock):
        def warned() -> dict[str, str]:
            got = {e["involvedObject"]["name"]: e["reason"] for e in bs.requests_to(
                kmock, "POST", f"/api/v1/namespaces/{bs.NS}/events")}
            assert len(got) == 5
            return got
        got = await bs.eventually(warned)
        assert got == {"nosel": services.SELECTOR_MISSING, "noport": services.TARGET_PORT_NOT_FOUND,
                       "nov6": services.NO_ADDRESS_OF_FAMILY, "offnet": services.PODS_NOT_ON_PODNETWORK,
                       "good": services.PODS_NOT_ON_PODNETWORK}
        await bs.eventually(lambda: endpoints(kmock) == {"offnet.ipv4.0": ["db-0"], "good.ipv4.0": ["db-0"]})
        messages = dict(service_events(kmock))
        assert messages[services.PODS_NOT_ON_PODNETWORK].startswith("1 of 2 pods the selector picks are not on "
                                                                    "PodNetwork blue")
