"""Benchmark: kube-scheduler v1.36 placing pods by their PodNetworks through DRA, against the
extender and against no network constraint, in one run on the kit's real control plane.

Issue 36, item 4: "Measure scheduling throughput in the same run as the extender's benchmark, at
1,000 nodes: DRA-placed vs extender vs no network constraint. The goal is >= 0.95x of no
constraint."

The cluster (the kit's etcd, kube-apiserver and kube-controller-manager, started the way the real
tier starts them, tests/real/cluster_support.py): `--nodes` fake Nodes (no kubelet: API objects,
Ready, 32 CPUs each), four PodNetworks Ready (their status written here: no controller runs), each
offered by half of the nodes (node i offers network k when bit k of i is set, through the node
annotation `multinetwork.x-k8s.io/podnetworks`), the driver's DeviceClass (`classes.device_class`)
and, per node, the ResourceSlices `podnetwork dra-driver` would publish for it, built by the
driver's own code (`slices.offers`, `slices.specs`, `slices.plan`): one pool, one shareable device
per offered network. kube-controller-manager runs every default controller but the node lifecycle
ones (no kubelet heartbeats: they would taint every node unreachable).

Pods are a Deployment's pods (100m CPU, 128Mi): pod p names network p % 4 and, when p is odd,
(p + 1) % 4 too, in the annotation `multinetwork.x-k8s.io/networks` (so about half or a quarter of
the nodes fit). Four arms, each scheduled by a kube-scheduler of its own, started for the arm and
stopped after it (one scheduler at a time: none competes for the 2 cores):

- **none**: no network constraint: the cluster's default scheduler, no extender (the pods carry
  the annotation, which nothing reads);
- **extender**: that scheduler with `podnetwork scheduler-extender` registered as
  deploy/scheduler/kube-scheduler-config.yaml registers it (filter verb, nodeCacheCapable);
- **dra**: the pod's `spec.resourceClaims` as `podnetwork bridge --dra-claims` writes them at
  admission (`bridge.dracontract.claims`): one entry per network, each from that PodNetwork's
  ResourceClaimTemplate (one request, selecting the device by its `podNetwork` attribute), which
  kube-controller-manager's resourceclaim controller turns into the pod's claims; the scheduler's
  DynamicResources plugin allocates them and writes each allocation before binding. The claims'
  creation is part of what a user pays, so it is inside the clock (the webhook's own call is not:
  no webhook runs here, in any arm);
- **dra-claims**: the same claims, created by the benchmark before the clock starts and named by
  the pods (`resourceClaimName`): the scheduler's own DRA cost without the controller's;
- **dra-one-cel** (only when asked, `--arms`): as dra-claims, but each request's one CEL selector
  also checks `device.driver`, and its DeviceClass has no selector: one CEL evaluation per device
  and request instead of two (the allocator evaluates the class's selectors and the request's);
- **dra-exclusive** (only when asked): as dra-claims, but the slices are republished for the arm
  without `allowMultipleAllocations` (DRAConsumableCapacity): each device serves one claim. It fits:
  a phase claims at most 1.5 devices per pod (<= 225 at 150 pods), about 56 per network, and each
  network has a device on ~500 nodes (each pair of networks on ~250); every claim is deleted after
  each phase;
- **dra-class** (only when asked): as dra-claims, but each network has a DeviceClass of its own
  whose selectors are the driver's and the network's, and the requests have no selector;
- **dra-stable** (only when asked): as dra-exclusive, with a kube-scheduler whose beta DRA gates
  that the allocator asks about are off (`STABLE_GATES`), so the structured allocator may pick its
  "stable" implementation instead of "incubating" (k8s.io/dynamic-resource-allocation/structured
  `NewAllocator` takes the first of stable, incubating, experimental whose supported features are a
  superset of the enabled ones; the scheduler's DynamicResources plugin passes its feature gates,
  `AllocatorFeatures`: what a claim or a device uses plays no part).

Two measures per arm and round, as the extender's earlier figures were taken:

- **live**: the scheduler running and warmed (one pod bound), `--pods` pods created by 4 client
  threads (which can cap it: none ran at ~35 pods/s at load 30, ~120 at load 5); pods/s = pods / (last bind - first create);
- **backlog**: the scheduler stopped, `--pods` pods created (for dra, until each has its claim),
  then the scheduler started; pods/s = (pods - 1) / (last bind - first bind).

Binds are seen on one watch of the namespace. Every bound pod's node is checked to offer its
networks (extender and DRA arms). The arms' order rotates every round, so load from other work on
the machine hits them alike; each arm's ratio is to `none` of the same round. After each phase the
scheduler's own metrics (`/metrics`) give where its time went: the scheduling algorithm, each
extension point, the client-side rate limiter's wait.

Run:  .venv/bin/python benchmarks/bench_dra_scheduling.py [--nodes 1000] [--pods 150] [--rounds 2] [--pprof 15]
      (`make bench-dra`; ~20 minutes on 2 busy cores: DRA placed 1 to 12 pods/s at 1,000 nodes)
Everything runs in a cluster of its own, stopped and removed at the end (also on failure).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.dra.driver import classes, slices
from bridge.dracontract import claims as admission
from bridge.dracontract import names
from tests.real.cluster_support import (
    REPO,
    Api,
    Cluster,
    binaries,
    eventually,
    new_root,
    scheduler_config,
    start_extender,
)
from tests.unit.ports_support import free_port

NETWORKS = ["blue", "green", "red", "yellow"]
NETWORKS_ANNOTATION = "multinetwork.x-k8s.io/networks"
OFFERS = "multinetwork.x-k8s.io/podnetworks"
PODNETWORKS = "/apis/multinetwork.x-k8s.io/v1alpha1/podnetworks"
RESOURCE = "/apis/resource.k8s.io/v1"
DRIVER = names.DEFAULT_DRIVER
NAMESPACE = "bench"
ARMS = ("none", "extender", "dra", "dra-claims", "dra-one-cel", "dra-exclusive", "dra-class", "dra-stable")
#: The arms whose claims the benchmark makes before the clock starts.
MADE_CLAIMS = ("dra-claims", "dra-one-cel", "dra-exclusive", "dra-class", "dra-stable")
#: The arms whose slices' devices each serve one claim (no `allowMultipleAllocations`).
EXCLUSIVE = ("dra-exclusive", "dra-stable")
#: dra-stable's kube-scheduler: the beta gates of v1.36 that its DynamicResources plugin turns into
#: the allocator's features (AdminAccess and PrioritizedList are GA and stay on).
STABLE_GATES = "DRAConsumableCapacity=false,DRADeviceBindingConditions=false,DRADeviceTaints=false," \
    "DRAPartitionableDevices=false"
#: dra-one-cel's DeviceClass: no selector, so each device is matched by the request's one selector.
ONE_CEL_CLASS = f"{DRIVER}-no-selector"
#: The controllers kube-controller-manager runs: all the default ones but those that act on node
#: heartbeats, which fake nodes never send.
KCM_ARGS = "--controllers=-node-lifecycle-controller,-taint-eviction-controller,-pod-garbage-collector-controller"
CLIENTS = 4


def offered(i: int) -> list[str]:
    return [n for k, n in enumerate(NETWORKS) if i >> k & 1]


def node_name(i: int) -> str:
    return f"bench-{i:05d}"


def pod_networks(p: int) -> list[str]:
    return [NETWORKS[p % 4]] + ([NETWORKS[(p + 1) % 4]] if p % 2 else [])


# --- the cluster ----------------------------------------------------------------------------------


def node_body(i: int) -> dict[str, Any]:
    name = node_name(i)
    resources = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {OFFERS: json.dumps(offered(i))},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "fake node"}]}}


def podnetwork_ready(api: Api, name: str) -> dict[str, Any]:
    """A PodNetwork, Ready as the controller would say it (the controller does not run here)."""
    api.create(PODNETWORKS, {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork",
                             "metadata": {"name": name}, "spec": {"provider": "example.com/bench", "enabled": True}})
    status = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    made: dict[str, Any] = api.ok("PATCH", f"{PODNETWORKS}/{name}/status", {"status": status},
                                  content_type="application/merge-patch+json")
    return made


def slice_bodies(podnetworks: list[dict[str, Any]], node: dict[str, Any]) -> list[dict[str, Any]]:
    """The slices the driver would publish for `node`: its own code, from nothing published yet."""
    offers, _ = slices.offers(podnetworks, node)
    wanted = slices.specs(offers, node=node["metadata"]["name"], driver=DRIVER)
    return [w.body for w in slices.plan({}, wanted) if w.body is not None]


def shaped(devices: list[dict[str, Any]], shared: bool) -> list[dict[str, Any]]:
    """A slice's devices as the driver publishes them (`shared`) or each serving one claim."""
    if shared:
        return [{**d, "allowMultipleAllocations": True} for d in devices]
    return [{k: v for k, v in d.items() if k != "allowMultipleAllocations"} for d in devices]


def network_class(network: str) -> str:
    """dra-class's DeviceClass of a network."""
    return f"{network}.{DRIVER}"


def in_parallel(apis: list[Api], work: Sequence[Callable[[Api], Any]]) -> list[Any]:
    """Each piece of work on one of the clients, `len(apis)` at a time."""
    with ThreadPoolExecutor(len(apis)) as pool:
        futures = [pool.submit(w, apis[i % len(apis)]) for i, w in enumerate(work)]
        return [f.result() for f in futures]


def populate(cluster: Cluster, apis: list[Api], nodes: int) -> None:
    api = apis[0]
    podnetworks = [podnetwork_ready(api, n) for n in ["default", *NETWORKS]]
    in_parallel(apis, [lambda a, i=i: a.create("/api/v1/nodes", node_body(i)) for i in range(nodes)])
    # the API server's TaintNodesByCondition admission taints a new node not-ready; the node lifecycle
    # controller, which would lift it once the node is Ready, does not run here
    made = in_parallel(apis, [lambda a, i=i: a.merge_patch(f"/api/v1/nodes/{node_name(i)}", {"spec": {"taints": None}})
                              for i in range(nodes)])
    assert made[-1]["status"]["allocatable"]["cpu"] == "32", "the API server kept the fake node's status"
    bodies = [b for node in made for b in slice_bodies(podnetworks, node)]
    in_parallel(apis, [lambda a, b=b: a.create(f"{RESOURCE}/resourceslices", b) for b in bodies])
    api.create(f"{RESOURCE}/deviceclasses", classes.device_class(DRIVER).to_dict())
    api.create(f"{RESOURCE}/deviceclasses", {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                             "metadata": {"name": ONE_CEL_CLASS}, "spec": {}})
    for network in NETWORKS:
        selectors = [*classes.device_class(DRIVER).to_dict()["spec"]["selectors"],
                     {"cel": {"expression": admission.selector(DRIVER, network)}}]
        api.create(f"{RESOURCE}/deviceclasses", {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                                 "metadata": {"name": network_class(network)},
                                                 "spec": {"selectors": selectors}})
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for network in NETWORKS:
        api.create(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates",
                   admission.template(network, NAMESPACE, DRIVER))
    eventually(lambda: api.find(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
               "the bench namespace's default ServiceAccount", timeout=120)


def pod_body(name: str, p: int, arm: str) -> dict[str, Any]:
    nets = pod_networks(p)
    annotation = json.dumps([{"podNetworkName": n, "interfaceName": f"net{i + 1}"} for i, n in enumerate(nets)])
    container: dict[str, Any] = {
        "name": "web", "image": "registry.example/web:1.4.2", "ports": [{"containerPort": 8080}],
        "resources": {"limits": {"memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}}}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0,
                            "automountServiceAccountToken": False}
    if arm == "dra":  # what `podnetwork bridge --dra-claims` adds at admission
        spec["resourceClaims"] = [admission.claim_entry(n) for n in nets]
    elif arm in MADE_CLAIMS:
        spec["resourceClaims"] = [{"name": admission.claim_name(n), "resourceClaimName": made_claim(name, n)}
                                  for n in nets]
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "labels": {"app": "web"}, "annotations": {NETWORKS_ANNOTATION: annotation}}}


def made_claim(pod: str, network: str) -> str:
    return f"{pod}-{admission.claim_name(network)}"


def claim_bodies(pod: str, p: int, one_cel: bool = False, per_class: bool = False) -> list[dict[str, Any]]:
    """The claims the PodNetworks' templates would make for pod `p`, made beforehand; with
    `one_cel`, each from the selector-less class with one selector that also checks the driver;
    with `per_class`, each from its network's class, with no selector of its own."""
    out = []
    for n in pod_networks(p):
        spec = admission.template(n, NAMESPACE, DRIVER)["spec"]["spec"]
        if per_class:
            (request,) = spec["devices"]["requests"]
            request["exactly"] = {"deviceClassName": network_class(n)}
        elif one_cel:
            (request,) = spec["devices"]["requests"]
            request["exactly"]["deviceClassName"] = ONE_CEL_CLASS
            request["exactly"]["selectors"] = [{"cel": {"expression": (
                f"device.driver == {json.dumps(DRIVER)} && {admission.selector(DRIVER, n)}")}}]
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": made_claim(pod, n), "namespace": NAMESPACE}, "spec": spec})
    return out


# --- seeing binds -----------------------------------------------------------------------------------


@dataclass
class Binds:
    """Every pod of the namespace's first bind (monotonic time) and node, from one watch."""

    api: Api
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        version = ""
        while not self.stop.is_set():
            if not version:
                listed = self.api.get(path)
                for pod in listed["items"]:
                    self._saw(pod)
                version = listed["metadata"]["resourceVersion"]
            params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "60"}
            with contextlib.suppress(httpx.HTTPError), \
                    self.api.http.stream("GET", path, params=params, timeout=None) as response:
                for line in response.iter_lines():
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        version = ""  # expired: list again
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    self._saw(event["object"])
                    if self.stop.is_set():
                        return

    def _saw(self, pod: dict[str, Any]) -> None:
        node = pod.get("spec", {}).get("nodeName")
        name = pod["metadata"]["name"]
        if node and name not in self.bound:
            with self.lock:
                self.bound.setdefault(name, (time.monotonic(), node))

    def wait(self, pods: Sequence[str], timeout: float) -> list[tuple[float, str]]:
        end = time.monotonic() + timeout
        while True:
            with self.lock:
                missing = [p for p in pods if p not in self.bound]
                if not missing:
                    return [self.bound[p] for p in pods]
            if time.monotonic() > end:
                raise RuntimeError(f"{len(missing)} of {len(pods)} pods not bound within {timeout:.0f} s, "
                                   f"e.g. {missing[:3]}")
            time.sleep(0.05)


# --- the scheduler ------------------------------------------------------------------------------


@dataclass
class Scheduler:
    """A kube-scheduler of the kit with one configuration; its /metrics open on loopback."""

    binary: Path
    config: Path
    kubeconfig: Path
    log: Path
    gates: str = ""
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.port = free_port()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(self.binary), "--config", str(self.config), "--bind-address", "127.0.0.1",
                 "--secure-port", str(self.port), "--authentication-kubeconfig", str(self.kubeconfig),
                 "--authorization-kubeconfig", str(self.kubeconfig),
                 "--authorization-always-allow-paths", "/healthz,/readyz,/livez,/metrics,/debug/pprof/*",
                 *([f"--feature-gates={self.gates}"] if self.gates else [])],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        eventually(lambda: self._get("/healthz").status_code == 200, "kube-scheduler is healthy", timeout=60)

    def _get(self, path: str) -> httpx.Response:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"kube-scheduler exited: {self.log.read_text()[-2000:]}")
        return httpx.get(f"https://127.0.0.1:{self.port}{path}", verify=False, timeout=10)

    def metrics(self) -> str:
        return self._get("/metrics").text

    def profile(self, seconds: int) -> bytes:
        """A CPU profile of the next `seconds` (Go's pprof, on by default: --profiling)."""
        if self.proc is None:
            raise RuntimeError("kube-scheduler is not running")
        url = f"https://127.0.0.1:{self.port}/debug/pprof/profile?seconds={seconds}"
        return httpx.get(url, verify=False, timeout=seconds + 60).content

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def no_extender_config(path: Path, kubeconfig: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "default-scheduler"}]}))
    return path


#: The extension points reported: the scheduling cycle's (serial: one pod at a time) and the binding
#: cycle's (in goroutines of their own, one per pod).
COST_POINTS = ("PreEnqueue", "PreFilter", "Filter", "PreScore", "Score", "Reserve", "PreBind", "Bind")
_SAMPLE = re.compile(r'^(\w+)\{([^}]*)\} ([0-9.e+-]+)$')


def breakdown(text: str) -> dict[str, float]:
    """Milliseconds per pod (sum over count) of the scheduler's histograms that say where its time
    went: a scheduling attempt that placed the pod, each extension point of the profile, the wait in
    its API client's rate limiter (kube-scheduler's default 50 requests/s, burst 100) by verb."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        metric, labels, value = m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))), float(m.group(3))
        base, _, kind = metric.rpartition("_")
        if kind not in ("sum", "count"):
            continue
        if base == "scheduler_framework_extension_point_duration_seconds" and labels.get("status") == "Success":
            key = labels["extension_point"]
            if key not in COST_POINTS:
                continue
        elif base == "scheduler_scheduling_attempt_duration_seconds" and labels.get("result") == "scheduled":
            key = "attempt"
        elif base == "rest_client_rate_limiter_duration_seconds":
            key = f"rate limiter {labels.get('verb', '')}"
        else:
            continue
        (sums if kind == "sum" else counts)[key] = (sums if kind == "sum" else counts).get(key, 0.0) + value
    return {k: 1e3 * sums[k] / counts[k] for k in sums if counts.get(k)}


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """A protobuf message's fields: (number, varint or bytes); enough to read a pprof profile."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        kind = key & 7
        if kind == 0:
            value, i = _varint(data, i)
            yield key >> 3, value
        elif kind == 2:
            size, i = _varint(data, i)
            yield key >> 3, data[i:i + size]
            i += size
        else:  # fixed 64 or 32 bits: not in profile.proto's fields read here
            i += 8 if kind == 1 else 4


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _ints(value: int | bytes) -> list[int]:
    """A repeated integer field's values: packed (bytes) or one."""
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = _varint(value, i)
        out.append(v)
    return out


def pprof_top(gzipped: bytes, count: int = 20) -> list[tuple[str, float, float]]:
    """The functions of a Go CPU profile (`/debug/pprof/profile`, profile.proto) with the share of
    CPU time spent in them (flat) and under them (cumulative), the highest cumulative first."""
    import gzip

    strings: list[str] = []
    functions: dict[int, int] = {}
    locations: dict[int, list[int]] = {}
    samples: list[tuple[list[int], int]] = []
    for number, value in _fields(gzip.decompress(gzipped)):
        if not isinstance(value, bytes):  # time, duration, period: not needed for shares
            continue
        if number == 6:
            strings.append(value.decode(errors="replace"))
        elif number == 5:
            f = dict(_fields(value))
            functions[int(f.get(1, 0))] = int(f.get(2, 0))
        elif number == 4:
            loc = list(_fields(value))
            ident = next(int(v) for n, v in loc if n == 1)
            locations[ident] = [int(dict(_fields(v)).get(1, 0)) for n, v in loc if n == 4 and isinstance(v, bytes)]
        elif number == 2:
            sample = list(_fields(value))
            ids = [i for n, v in sample if n == 1 for i in _ints(v)]
            values = [i for n, v in sample if n == 2 for i in _ints(v)]
            samples.append((ids, values[-1]))
    flat: dict[str, int] = {}
    cum: dict[str, int] = {}
    for ids, value in samples:
        stack = [strings[functions[f]] for loc in ids for f in locations.get(loc, [])]
        if stack:
            flat[stack[0]] = flat.get(stack[0], 0) + value
        for name in set(stack):
            cum[name] = cum.get(name, 0) + value
    total = sum(v for _, v in samples) or 1
    ranked = sorted(cum, key=lambda n: -cum[n])[:count]
    return [(n, flat.get(n, 0) / total, cum[n] / total) for n in ranked]


# --- one arm, one phase -----------------------------------------------------------------------------


@dataclass
class Bench:
    cluster: Cluster
    apis: list[Api]
    binds: Binds
    schedulers: dict[str, Scheduler]
    pods: int
    timeout: float
    pprof: int = 0
    """Seconds of CPU profile to take at the start of each arm's first backlog (0: none)."""
    profiles: dict[str, bytes] = field(default_factory=dict)
    serial: int = 0
    costs: dict[tuple[str, str], list[dict[str, float]]] = field(default_factory=dict)
    shared: bool = True
    """Whether the published devices have `allowMultipleAllocations` (as the driver publishes them)."""

    def names(self, arm: str, phase: str) -> list[str]:
        self.serial += 1
        return [f"{arm}-{phase}-{self.serial}-{p:04d}" for p in range(self.pods)]

    def create(self, arm: str, names_: Sequence[str], offset: int = 0) -> None:
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        in_parallel(self.apis, [lambda a, n=n, p=p: a.create(pods, pod_body(n, p + offset, arm))
                                for p, n in enumerate(names_)])

    def claims_first(self, arm: str, names_: Sequence[str]) -> None:
        if arm in MADE_CLAIMS:
            claims = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
            in_parallel(self.apis, [lambda a, b=b: a.create(claims, b) for p, n in enumerate(names_)
                                    for b in claim_bodies(n, p, one_cel=arm == "dra-one-cel",
                                                          per_class=arm == "dra-class")])

    def shape(self, arm: str) -> None:
        """The slices as the arm wants them: republished when the last arm wanted the other shape (the
        arm's scheduler starts after this, so its informers see only the new shape)."""
        shared = arm not in EXCLUSIVE
        if shared == self.shared:
            return
        path = f"{RESOURCE}/resourceslices"
        items = self.apis[0].get(path)["items"]
        in_parallel(self.apis, [lambda a, s=s: a.merge_patch(f"{path}/{s['metadata']['name']}", {
            "spec": {"devices": shaped(s["spec"].get("devices", []), shared)}}) for s in items])
        self.shared = shared

    def check(self, arm: str, names_: Sequence[str], bound: list[tuple[float, str]]) -> None:
        """Each pod of a constrained arm is on a node that offers its networks."""
        if arm == "none":
            return
        wrong = [n for p, (n, (_, node)) in enumerate(zip(names_, bound, strict=True))
                 if not set(pod_networks(p)) <= set(offered(int(node.rsplit("-", 1)[1])))]
        if wrong:
            raise AssertionError(f"{arm}: {len(wrong)} pods on nodes without their networks, e.g. {wrong[:3]}")

    def warm(self, arm: str) -> None:
        names_ = self.names(arm, "warm")[:1]
        self.claims_first(arm, names_)
        self.create(arm, names_)
        self.binds.wait(names_, self.timeout)

    def live(self, arm: str) -> float:
        scheduler = self.schedulers[arm]
        scheduler.start()
        try:
            self.warm(arm)
            names_ = self.names(arm, "live")
            self.claims_first(arm, names_)
            started = time.monotonic()
            self.create(arm, names_)
            bound = self.binds.wait(names_, self.timeout)
            self.costs.setdefault((arm, "live"), []).append(breakdown(scheduler.metrics()))
        finally:
            scheduler.stop()
        self.check(arm, names_, bound)
        return self.pods / (max(t for t, _ in bound) - started)

    def backlog(self, arm: str) -> float:
        names_ = self.names(arm, "backlog")
        self.claims_first(arm, names_)
        self.create(arm, names_)
        if arm == "dra":
            self.wait_claims(names_)
        scheduler = self.schedulers[arm]
        scheduler.start()
        try:
            profiling = None
            if self.pprof and arm not in self.profiles:
                def take(arm: str = arm) -> None:
                    self.profiles[arm] = scheduler.profile(self.pprof)
                profiling = threading.Thread(target=take)
                profiling.start()
            bound = self.binds.wait(names_, self.timeout)
            if profiling is not None:
                profiling.join()
            self.costs.setdefault((arm, "backlog"), []).append(breakdown(scheduler.metrics()))
        finally:
            scheduler.stop()
        self.check(arm, names_, bound)
        times = [t for t, _ in bound]
        return (self.pods - 1) / (max(times) - min(times))

    def wait_claims(self, names_: Sequence[str]) -> None:
        """Until the resourceclaim controller has made every pod's claim (the pod's status names it)."""
        wanted = set(names_)

        def made() -> bool:
            items = self.apis[0].get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
            return all(p["status"].get("resourceClaimStatuses") for p in items if p["metadata"]["name"] in wanted)

        eventually(made, "every backlog pod has its claim", timeout=self.timeout, interval=1)

    def clean(self) -> None:
        """No pod and no claim left in the namespace (the resourceclaim controller deallocates)."""
        api = self.apis[0]
        api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods", params={"gracePeriodSeconds": "0"})
        api.request("DELETE", f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims")
        eventually(lambda: not api.get(f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1")["items"]
                   and not api.get(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims?limit=1")["items"],
                   "the namespace's pods and claims are gone", timeout=self.timeout, interval=1)


# --- the run --------------------------------------------------------------------------------------


def client(cluster: Cluster) -> Api:
    pki = cluster.root / "pki"
    return Api(cluster.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")


@contextlib.contextmanager
def kit_cluster(nodes: int) -> Iterator[tuple[Cluster, list[Api]]]:
    kit, bins = binaries()
    cluster = Cluster(kit=kit, bins=bins, root=new_root())
    apis: list[Api] = []
    os.environ["KCM_EXTRA_ARGS"] = KCM_ARGS
    try:
        cluster.start()
        # the kit's own scheduler: each arm runs one of its own instead
        pid = int((cluster.root / "run" / "kube-scheduler.pid").read_text())
        os.killpg(pid, signal.SIGTERM)
        cluster.kubectl("apply", "-f", str(REPO / "crds"))
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        apis = [client(cluster) for _ in range(CLIENTS)]
        started = time.monotonic()
        populate(cluster, apis, nodes)
        print(f"cluster: {nodes} nodes, their slices, PodNetworks, templates in {time.monotonic() - started:.0f} s",
              flush=True)
        yield cluster, apis
    finally:
        for api in apis:
            api.close()
        cluster.stop()


def schedulers(cluster: Cluster) -> dict[str, Scheduler]:
    root, kubeconfig = cluster.root, cluster.root / "scheduler.kubeconfig"
    cluster.ports.setdefault("extender", free_port())
    plain = no_extender_config(root / "bench-plain.yaml", kubeconfig)
    extended = scheduler_config(root / "bench-extender.yaml", kubeconfig, cluster.ports["extender"])
    return {arm: Scheduler(cluster.bins["kube-scheduler"], extended if arm == "extender" else plain, kubeconfig,
                           root / "run" / f"bench-scheduler-{arm}.log",
                           gates=STABLE_GATES if arm == "dra-stable" else "") for arm in ARMS}


def spread(values: Sequence[float]) -> str:
    return f"{min(values):.2f} - {max(values):.2f}" if len(values) > 1 else "-"


def report(rates: dict[tuple[str, str], list[float]], bench: Bench, arms: Sequence[str]) -> None:
    print()
    print("| measure | arm | pods/s, median | ratio to none, median | ratio, lowest - highest round |")
    print("| --- | --- | ---: | ---: | --- |")
    for phase in ("live", "backlog"):
        for arm in arms:
            values = rates[(arm, phase)]
            ratio = [a / b for a, b in zip(values, rates[("none", phase)], strict=True)]
            print(f"| {phase} | {arm} | {statistics.median(values):.1f} | **{statistics.median(ratio):.2f}** | "
                  f"{spread(ratio)} |")
    print()
    seen = {k for runs in bench.costs.values() for run in runs for k in run}
    keys = [k for k in ("attempt", *COST_POINTS) if k in seen] + sorted(k for k in seen if k.startswith("rate"))
    print("Per pod, ms (median over rounds of the scheduler's own histograms, sum / count):")
    print()
    print("| measure | arm | " + " | ".join(keys) + " |")
    print("| --- | --- |" + " ---: |" * len(keys))
    for phase in ("live", "backlog"):
        for arm in arms:
            runs = bench.costs.get((arm, phase), [])
            cells = [f"{statistics.median([r[k] for r in runs if k in r]):.2f}" if any(k in r for r in runs)
                     else "" for k in keys]
            print(f"| {phase} | {arm} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000, help="fake nodes (default: %(default)s)")
    parser.add_argument("--pods", type=int, default=150, help="pods per arm and measure (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every arm (default: %(default)s)")
    parser.add_argument("--arms", nargs="+", default=list(ARMS[:4]), choices=ARMS,
                        help="arms (none is always run; default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a phase may take")
    parser.add_argument("--pprof", type=int, default=0, metavar="SECONDS",
                        help="profile kube-scheduler's CPU for SECONDS at the start of each arm's first backlog "
                             "and print where it went")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cluster is removed on TERM too
    arms = ["none", *[a for a in args.arms if a != "none"]]
    print(f"kube-scheduler v1.36 (the kit), {args.nodes} nodes, {args.pods} pods per arm and measure, "
          f"{args.rounds} rounds, arms {', '.join(arms)} rotated each round (Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} before)", flush=True)
    with kit_cluster(args.nodes) as (cluster, apis):
        extender = start_extender_for(cluster) if "extender" in arms else None
        binds = Binds(client(cluster))
        watcher = threading.Thread(target=binds.run, daemon=True)
        watcher.start()
        bench = Bench(cluster, apis, binds, schedulers(cluster), args.pods, args.timeout, args.pprof)
        rates: dict[tuple[str, str], list[float]] = {(a, p): [] for a in arms for p in ("live", "backlog")}
        try:
            for r in range(args.rounds):
                order = arms[r % len(arms):] + arms[:r % len(arms)]
                for arm in order:
                    bench.shape(arm)
                    for phase, measure in (("live", bench.live), ("backlog", bench.backlog)):
                        rates[(arm, phase)].append(measure(arm))
                        cost = bench.costs[(arm, phase)][-1]
                        print(f"  {arm}, {phase}: {rates[(arm, phase)][-1]:.1f} pods/s; ms per pod: "
                              + ", ".join(f"{k} {cost[k]:.2f}" for k in ("attempt", "Filter", "PreBind", "Bind")
                                          if k in cost), flush=True)
                        bench.clean()
                print(f"round {r + 1}: " + ", ".join(f"{a} {rates[(a, 'live')][-1]:.0f}/"
                                                     f"{rates[(a, 'backlog')][-1]:.0f}" for a in arms)
                      + f" pods/s live/backlog (load {os.getloadavg()[0]:.1f})", flush=True)
        finally:
            binds.stop.set()
            for scheduler in bench.schedulers.values():
                scheduler.stop()
            if extender is not None:
                extender.stop()
        report(rates, bench, arms)
        for arm, data in bench.profiles.items():
            print()
            print(f"kube-scheduler's CPU, {arm} arm, backlog, first {args.pprof} s: function, flat %, cumulative %")
            print()
            for name, flat, cum in pprof_top(data, 25):
                print(f"    {100 * flat:5.1f} {100 * cum:5.1f}  {name}")
    print()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def start_extender_for(cluster: Cluster) -> Any:
    """`podnetwork scheduler-extender` where the extender arm's scheduler calls it (its port is
    chosen by `schedulers`, which must run first)."""
    cluster.ports.setdefault("extender", free_port())
    return start_extender(cluster)


if __name__ == "__main__":
    main()
