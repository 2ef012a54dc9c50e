"""Memory of the bridge's Services controller at 10,000 pods, and its planning time per change.

The controller (`bridge.operator.serviceslices.Services`) is fed as kopf feeds it: every pod
body through `index_pod`, every Service through `index_service`, then one `drain` plans and
writes every Service's EndpointSlices to an in-process API that answers as an API server does
(resourceVersion, merge patch), and the answers go back into the memory. Memory is what
`tracemalloc` sees allocated by the feeding and the slices, so it counts the controller's own
structures, not the interpreter's.

- memory at 2,500, 5,000 and 10,000 pods with 10 Services, and at 10,000 pods with 1, 10, 100
  and 1,000 Services (each Service selects an equal share of the pods, so every pod is an
  endpoint once): growth must be linear in pods (ratios 10k/5k and 5k/2.5k near 2) and
  nearly flat in Services at a fixed number of endpoints;
- planning time per change: one pod of a Service turns not ready (index + plan + one slice
  patch), median of many, at 10,000 pods in the namespace, for Services of 100 and 1,000
  endpoints; the baseline is reading the same pod body into its view (`EndpointPod`), which
  every pod event pays anyway.

    .venv/bin/python benchmarks/bench_service_slices.py [--changes 200]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Mapping
from typing import Any

from bridge.operator import serviceslices
from demo.store import merge_patch
from podnetwork.ground import constants
from podnetwork.ground import service as views
from podnetwork.kube import client as kube

NS = "bench"


class MemoryApi:
    """An API server of dicts: create, merge patch (resourceVersion bumped), delete."""

    on_write = None

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.revision = 0

    def _bump(self, body: dict[str, Any]) -> dict[str, Any]:
        self.revision += 1
        body["metadata"]["resourceVersion"] = str(self.revision)
        return copy.deepcopy(body)

    async def create(self, resource: kube.Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(body))
        self.objects[(kube.kind_of(resource), obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
        return self._bump(obj)

    async def patch(self, resource: kube.Resource, name: str, patch: Any, *, namespace: str | None = None,
                    patch_type: str = "merge", status: bool = False) -> dict[str, Any]:
        key = (kube.kind_of(resource), namespace or "", name)
        obj = merge_patch(self.objects[key], copy.deepcopy(patch))
        self.objects[key] = obj
        return self._bump(obj)

    async def delete(self, resource: kube.Resource, name: str, namespace: str | None = None) -> None:
        self.objects.pop((kube.kind_of(resource), namespace or "", name), None)

    async def get(self, resource: kube.Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = self.objects.get((kube.kind_of(resource), namespace or "", name))
        if obj is None:
            raise kube.NotFound(f"get {kube.kind_of(resource)} {namespace}/{name}", 404, "not found")
        return copy.deepcopy(obj)

    async def list(self, resource: kube.Resource, namespace: str | None = None) -> kube.Listing:
        kind = kube.kind_of(resource)
        items = [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
                 if k == kind and (namespace is None or ns == namespace)]
        return kube.Listing(items, str(self.revision))

    async def close(self) -> None:
        return None


def pod(i: int, app: str, *, ready: bool = True) -> dict[str, Any]:
    ips = [{"ip": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", "podNetwork": "blue", "interfaceName": "net1"},
           {"ip": f"fd00::{i:x}", "podNetwork": "default", "interfaceName": "eth0"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{app}-{i:05}-abcde", "namespace": NS, "uid": f"0000-{i:08}",
                         "resourceVersion": "1", "labels": {"app": app, "pod-template-hash": "5d8f7b9c4"},
                         "annotations": {constants.POD_IPS_ANNOTATION: json.dumps(ips),
                                         constants.NETWORKS_ANNOTATION: json.dumps([{"podNetworkName": "blue"}])}},
            "spec": {"nodeName": f"node-{i % 50:02}", "containers": [{"name": "c", "image": "registry/app:1", "ports": [
                {"name": "sql", "containerPort": 5432, "protocol": "TCP"}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def service(app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": app, "namespace": NS, "uid": f"uid-{app}", "resourceVersion": "1",
                         "labels": {constants.SERVICE_PROXY_NAME_LABEL: constants.SERVICE_PROXY_NAME},
                         "annotations": {constants.SERVICE_PODNETWORK_ANNOTATION: "blue"}},
            "spec": {"clusterIP": "10.96.0.10", "ipFamilies": ["IPv4"], "selector": {"app": app},
                     "ports": [{"name": "sql", "port": 5432, "targetPort": "sql", "protocol": "TCP"}]}}


def network() -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": constants.PODNETWORK_KIND,
            "metadata": {"name": "blue", "resourceVersion": "1"}, "spec": {"provider": "example.com/vendor"}}


def bodies(pods: int, services: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    apps = [f"app{s:04}" for s in range(services)]
    return [pod(i, apps[i % services]) for i in range(pods)], [service(a) for a in apps]


def fed(pod_bodies: list[dict[str, Any]], service_bodies: list[dict[str, Any]]) -> serviceslices.Services:
    controller = serviceslices.Services(api=MemoryApi())
    controller.index_podnetwork(network())
    for body in pod_bodies:
        controller.index_pod(body)
    for body in service_bodies:
        controller.index_service(body)
    asyncio.run(controller.drain())
    return controller


def memory(pods: int, services: int) -> tuple[int, int]:
    """Bytes held by the controller (its API's objects left out) and the endpoints written."""
    pod_bodies, service_bodies = bodies(pods, services)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    controller = fed(pod_bodies, service_bodies)
    assert isinstance(controller.api, MemoryApi)
    api_objects = controller.api.objects
    controller.api = None
    gc.collect()
    with_api = tracemalloc.get_traced_memory()[0]
    del api_objects
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert held <= with_api - before
    endpoints = sum(len(s.endpoints) for per in controller.slices.values() for s in per.values())
    return held, endpoints


def change_time(pods: int, services: int, changes: int) -> tuple[float, float]:
    """Median seconds of one change (a pod of the first Service turns not ready, then ready again),
    and of reading that pod's body into its view."""
    pod_bodies, service_bodies = bodies(pods, services)
    controller = fed(pod_bodies, service_bodies)
    first = [b for b in pod_bodies if b["metadata"]["labels"]["app"] == "app0000"]
    loop = asyncio.new_event_loop()
    times, reads = [], []
    for n in range(changes):
        body = copy.deepcopy(first[n % len(first)])
        body["status"]["conditions"][0]["status"] = "False" if n // len(first) % 2 == 0 else "True"
        start = time.perf_counter()
        controller.index_pod(body)
        loop.run_until_complete(controller.pod_event("MODIFIED", body))
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        views.EndpointPod.model_validate(body)
        reads.append(time.perf_counter() - start)
    loop.close()
    return statistics.median(times), statistics.median(reads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=200)
    args = parser.parse_args()
    print("memory held by the Services controller")
    print("| pods | Services | endpoints | memory | per pod | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    previous = None
    for pods in (2500, 5000, 10000):
        held, endpoints = memory(pods, 10)
        ratio = f"{held / previous:.2f}" if previous else "-"
        previous = held
        print(f"| {pods:,} | 10 | {endpoints:,} | {held / 1e6:.1f} MB | {held / pods:,.0f} B | {ratio} |")
    base = None
    for count in (1, 10, 100, 1000):
        held, endpoints = memory(10000, count)
        base = base or held
        print(f"| 10,000 | {count:,} | {endpoints:,} | {held / 1e6:.1f} MB | {held / 10000:,.0f} B | "
              f"{held / base:.2f} (to 1 Service) |")
    print("\nplanning time per change (index + plan + one slice patch), 10,000 pods in the namespace")
    print("| Service's endpoints | per change | reading the pod (baseline) | ratio |")
    print("| --- | --- | --- | --- |")
    for count in (100, 10):
        per_change, read = change_time(10000, count, args.changes)
        print(f"| {10000 // count:,} | {per_change * 1e3:.2f} ms | {read * 1e6:.0f} µs | {per_change / read:.0f} |")


if __name__ == "__main__":
    main()
