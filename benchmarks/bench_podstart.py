"""Pod start on a real kubelet: the default network alone, Multus thick, podnetwork (issue 35).

One real cluster from the kit (../shared/k8s: Kubernetes v1.36.2, Multus thick v4.2.4), started
the way the real test tier starts it (tests/real/cluster_support.py), and three ways of giving pods
their networks, one after the other, each on a fresh kubelet node of the same kind (containerd,
the reference CNI plugins, the node's own bridge conflist as its default network):

- `default`: the default network alone. No agent: the runtime runs the node's bridge conflist
  itself. Pods carry no network annotation.
- `multus`: Multus thick from the kit (daemon and shim as processes, tests/real/multus_support.py),
  the node's conflist as its cluster network, and 2 NetworkAttachmentDefinitions (`bridge` +
  `host-local`, each on a bridge and a subnet of its own) selected by the pods'
  `k8s.v1.cni.cncf.io/networks`.
- `podnetwork`: our controller and bridge (webhooks registered, as tests/real/conftest.py's
  `components` runs them) and our agent installed on the node (shim and conflist, `cni-agent
  --install`), with the same 2 networks as PodNetworks of the bridge's provider backed by the same
  kind of NADs, selected by the pods' `multinetwork.x-k8s.io/networks`.

The control plane is the same for all three: kube-scheduler with our extender registered (as the
real tier and deploy/scheduler register it; the extender runs from the start, since an
unreachable extender is not ignorable). Our controller and bridge start only before `podnetwork`:
the first two ways are a cluster without podnetwork's webhooks, which is what their users run.

Each way: 1 pod, alone on the node, created and deleted `--singles` times (5) one after the
other; then `--burst` pods (20) created at once; then `--waves` waves (5) of `--burst`
pods, each wave created at once once the previous one is Ready (100 pods on the node at the
end). Each batch is then deleted the same way (the burst at once, the waves in waves). Pods are
busybox from the kit's local image, no pull, with a shell that exits on SIGTERM and a grace period
(`COMMAND`: so delete→gone covers the kubelet's teardown and the CNI DEL), placed by `nodeSelector`
(so through kube-scheduler, our extender and, for `podnetwork`, the bridge's webhook and, when a
network is not Ready at admission, its scheduling gate).

How it is timed: a watch on the namespace's pods in this process, every event stamped with
`time.monotonic()` on arrival. create→Ready is from just before the pod's POST to the first event
showing its Ready condition True; delete→gone from just before its DELETE to its DELETED event.
The API's own timestamps (`creationTimestamp`, the Ready condition's `lastTransitionTime`) have
a granularity of one second, the size of what is measured; the kubelet's
`pod_start_sli_duration_seconds` is a histogram whose buckets (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20 s...)
are as coarse, covers start only (not delete) and is per kubelet. The watch's own delivery delay
(a few ms on loopback) is in every way's figures alike.

Where the time goes: the same watch stamps each pod's steps (admitted: the POST returned, which
includes every admission webhook; ungated: the scheduling gate gone; bound: `spec.nodeName` set;
network-status: the annotation written; Ready); for `podnetwork` also our agent's log of each ADD
(its phases: pod read, plan with NAD reads, cache, each plugin exec, routes) and of each
network-status write. For the pods alone, finer: the kubelet's and containerd's logs (the pod
reaching the kubelet, the sandbox asked for, the CNI ADD over, the sandbox and the container
started, the PLEG, running), the API server's admission histograms per webhook and our operators'
webhook apps' own, and the CPU each component used (docs/benchmarks.md, "A pod alone, step by
step").

Needs root, containerd, runc and the CNI plugins (`make setup` installs them), and the kit.
Run:  sudo .venv/bin/python benchmarks/bench_podstart.py   (or `make bench-podstart`)
Prints Markdown for docs/benchmarks.md. Removes everything it made (nodes, bridges, lease
directories, the session folder), also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.real.*, run as a script from anywhere

from tests.real import multus_support  # noqa: E402
from tests.real.attachments_support import LEASES, bridged_networks  # noqa: E402
from tests.real.cluster_support import (  # noqa: E402
    Api,
    Cluster,
    Node,
    answers,
    binaries,
    eventually,
    new_root,
    node_prerequisites,
    pod_manifest,
    ready,
    start_control_plane,
    start_controller_and_bridge,
    start_extender,
)

WAYS = ("default", "multus", "podnetwork")
PERCENTILES = (50, 95, 99)
STATUS = "k8s.v1.cni.cncf.io/network-status"
NETWORKS = "multinetwork.x-k8s.io/networks"
STEPS = ("admitted", "ungated", "bound", "network-status", "ready")


# -- statistics (tests/unit/agent/test_podstart_statistics.py) ------------------------------------

def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile, linear between the two nearest ranks (numpy's default): with one
    value, that value; p95 of 20 values lies between the 19th and the 20th."""
    if not values:
        raise ValueError("no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not within 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratio(value: float | None, baseline: float | None) -> str:
    """`value / baseline` as the tables print it (`1.23×`), `n/a` without both or with a zero baseline."""
    if value is None or baseline is None or baseline <= 0:
        return "n/a"
    return f"{value / baseline:.2f}×"


def milliseconds(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.0f} ms"


# -- the watch -----------------------------------------------------------------------------------

@dataclass
class Timeline:
    """What the watch saw of one pod, in `time.monotonic()` seconds."""

    marks: dict[str, float] = field(default_factory=dict)
    gated: bool = False


class PodWatch:
    """A watch on one namespace's pods in a thread of this process; each event stamped on arrival."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        pki = cluster.root / "pki"
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.server = cluster.server
        self.client = self._client()
        self.ns = ns
        self.pods: dict[str, Timeline] = {}
        self.changed = threading.Condition()
        self.stopping = False
        self.failure: BaseException | None = None
        self.reconnects: list[str] = []
        self.response: httpx.Response | None = None
        #: `time.time() - time.monotonic()`: turns the watch's stamps into the nodes' logs' wall clock
        self.wall = time.time() - time.monotonic()
        self.began = time.time()
        listing = self.client.get(f"/api/v1/namespaces/{ns}/pods")
        listing.raise_for_status()
        self.version = listing.json()["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, name=f"watch-{ns}", daemon=True)
        self.thread.start()

    def _client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server, verify=self.context, timeout=httpx.Timeout(10, read=None))

    def timeline(self, name: str) -> Timeline:
        with self.changed:
            return self.pods.setdefault(name, Timeline())

    def mark(self, name: str, step: str, when: float) -> None:
        with self.changed:
            self.pods.setdefault(name, Timeline()).marks.setdefault(step, when)
            self.changed.notify_all()

    def _run(self) -> None:
        while not self.stopping:
            try:
                params = {"watch": "true", "resourceVersion": self.version, "allowWatchBookmarks": "true"}
                with self.client.stream("GET", f"/api/v1/namespaces/{self.ns}/pods", params=params) as response:
                    self.response = response
                    response.raise_for_status()
                    for line in response.iter_lines():
                        now = time.monotonic()
                        if line:
                            self._event(json.loads(line), now)
            except (httpx.TransportError, ssl.SSLError) as error:
                # The watch goes on from the last resourceVersion on a new connection, so no event is
                # lost, only stamped late by the reconnect; the report says how often it happened.
                if self.stopping:
                    return
                self.reconnects.append(f"{error!r} after {time.monotonic() + self.wall - self.began:.1f} s")
                if len(self.reconnects) > 20:
                    self._fail(error)
                    return
                with contextlib.suppress(Exception):
                    self.client.close()
                self.client = self._client()
            except Exception as error:  # the watch is the measurement: a failure ends the run, said
                if not self.stopping:
                    self._fail(error)
                return

    def _fail(self, error: BaseException) -> None:
        self.failure = error
        with self.changed:
            self.changed.notify_all()

    def _event(self, event: Mapping[str, Any], now: float) -> None:
        pod = event["object"]
        if event["type"] == "ERROR":
            raise RuntimeError(f"the watch ended: {pod.get('message')}")
        self.version = pod["metadata"]["resourceVersion"]
        if event["type"] == "BOOKMARK":
            return
        name = pod["metadata"]["name"]
        with self.changed:
            line = self.pods.setdefault(name, Timeline())
            if event["type"] == "DELETED":
                line.marks.setdefault("gone", now)
            else:
                if "seen" not in line.marks:
                    line.marks["seen"] = now
                    line.gated = bool(pod["spec"].get("schedulingGates"))
                if line.gated and not pod["spec"].get("schedulingGates"):
                    line.marks.setdefault("ungated", now)
                if pod["spec"].get("nodeName"):
                    line.marks.setdefault("bound", now)
                if STATUS in pod["metadata"].get("annotations", {}):
                    line.marks.setdefault("network-status", now)
                if any(c["type"] == "Ready" and c["status"] == "True"
                       for c in pod.get("status", {}).get("conditions", [])):
                    line.marks.setdefault("ready", now)
            self.changed.notify_all()

    def wait(self, names: Sequence[str], step: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        with self.changed:
            while True:
                if self.failure is not None:
                    raise RuntimeError(f"the watch of {self.ns} failed: {self.failure!r}")
                missing = [n for n in names if step not in self.pods.get(n, Timeline()).marks]
                if not missing:
                    return
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(missing)} pods of {self.ns} not {step} within {timeout:.0f}s: "
                                       f"{missing[:5]}")
                self.changed.wait(min(left, 1.0))

    def close(self) -> None:
        """Ends the watch, its thread first. Closing the client alone, with the thread blocked in
        the TLS read, frees the socket's fd number while OpenSSL still reads from it: the server's
        next bytes on that watch (a BOOKMARK, about a minute later) wake the thread, whose next
        read takes them from whatever connection got the number since, the next way's watch: that
        one then fails with `SSL: WRONG_VERSION_NUMBER` (what every run's reconnect was). A
        shutdown of the socket ends the blocked read at once, with the fd still the watch's."""
        self.stopping = True
        response = self.response
        stream = response.extensions.get("network_stream") if response is not None else None
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                # the plain socket's shutdown: SSLSocket.shutdown would drop the TLS object the
                # thread is reading with
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
        self.thread.join(10)
        self.client.close()


# -- one way -------------------------------------------------------------------------------------

@dataclass
class Batch:
    """One batch of pods (the single pod, the burst, or all the waves): each pod's times."""

    name: str
    start: list[float] = field(default_factory=list)
    delete: list[float] = field(default_factory=list)
    steps: dict[str, list[float]] = field(default_factory=dict)
    pods: list[str] = field(default_factory=list)
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each pod's marks as the watch stamped them, wall clock (`time.time()`)."""


@dataclass
class Way:
    name: str
    batches: list[Batch] = field(default_factory=list)
    agent_adds: list[dict[str, float]] = field(default_factory=list)
    agent_metrics: dict[str, tuple[float, float]] = field(default_factory=dict)
    reconnects: list[str] = field(default_factory=list)
    status_writes: list[float] = field(default_factory=list)
    seconds: float = 0.0
    admission: dict[str, tuple[float, float]] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds each component used over the single pods (`components_cpu`), per pod."""
    idle_cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds per second each component used, before the single pods, with no pod to start."""
    singles_seconds: float = 0.0
    """The API server's admission figures over the single pods (`admission_means`)."""
    node: dict[str, dict[str, float]] = field(default_factory=dict)
    """The kubelet's and containerd's steps of each pod (`node_marks`), wall clock."""


class Runner:
    """Creates and deletes the pods of one way in its namespace and times them through `watch`."""

    def __init__(self, api: Api, watch: PodWatch, ns: str, manifest: Callable[[str], dict[str, Any]],
                 timeout: float) -> None:
        self.api, self.watch, self.ns, self.manifest, self.timeout = api, watch, ns, manifest, timeout

    def _create(self, name: str) -> None:
        self.watch.mark(name, "create", time.monotonic())
        self.api.create(f"/api/v1/namespaces/{self.ns}/pods", self.manifest(name))
        self.watch.mark(name, "admitted", time.monotonic())

    def _delete(self, name: str) -> None:
        self.watch.mark(name, "delete", time.monotonic())
        self.api.delete(f"/api/v1/namespaces/{self.ns}/pods/{name}", missing_ok=False)

    def _at_once(self, action: Callable[[str], None], names: Sequence[str]) -> None:
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            list(pool.map(action, names))

    def batch(self, label: str, waves: Sequence[Sequence[str]], *, alone: bool = False) -> Batch:
        """Each wave created at once once the previous one is Ready, then deleted wave by wave;
        `alone`: each wave deleted and gone before the next is created (nothing else on the node)."""
        for wave in waves:
            self._at_once(self._create, wave)
            self.watch.wait(wave, "ready", self.timeout)
            if alone:
                self._at_once(self._delete, wave)
                self.watch.wait(wave, "gone", self.timeout)
        for wave in waves if not alone else ():
            self._at_once(self._delete, wave)
            self.watch.wait(wave, "gone", self.timeout)
        result = Batch(label, pods=[n for wave in waves for n in wave])
        for name in result.pods:
            marks = self.watch.timeline(name).marks
            result.marks[name] = {step: when + self.watch.wall for step, when in marks.items()}
            result.start.append(marks["ready"] - marks["create"])
            result.delete.append(marks["gone"] - marks["delete"])
            for step in STEPS:
                if step in marks:
                    result.steps.setdefault(step, []).append(marks[step] - marks["create"])
        return result


def run_way(name: str, api: Api, cluster: Cluster, ns: str, manifest: Callable[[str], dict[str, Any]],
            args: argparse.Namespace) -> Way:
    way = Way(name)
    watch = PodWatch(cluster, ns)
    began = time.monotonic()
    try:
        runner = Runner(api, watch, ns, manifest, args.timeout)
        idle = components_cpu(cluster)
        time.sleep(args.idle)  # what each component uses with no pod to start: its baseline
        before, cpu = scrape_admission(api, cluster), components_cpu(cluster)
        way.idle_cpu = {name: (used - idle[name]) / args.idle for name, used in cpu.items() if name in idle}
        singles = time.monotonic()
        way.batches.append(runner.batch(f"1 pod ({args.singles}×, one after the other)",
                                        [[f"single-{i}"] for i in range(args.singles)], alone=True))
        way.singles_seconds = time.monotonic() - singles
        way.admission = admission_means(before, scrape_admission(api, cluster))
        way.cpu = {name: (used - cpu[name]) / args.singles for name, used in components_cpu(cluster).items()
                   if name in cpu}
        way.batches.append(runner.batch(f"{args.burst} at once",
                                        [[f"burst-{i}" for i in range(args.burst)]]))
        way.batches.append(runner.batch(f"{args.waves * args.burst} in {args.waves} waves of {args.burst}",
                                        [[f"wave{w}-{i}" for i in range(args.burst)] for w in range(args.waves)]))
    finally:
        watch.close()
        way.reconnects = watch.reconnects
    way.seconds = time.monotonic() - began
    return way


# -- the cluster and the three ways -----------------------------------------------------------------

@contextlib.contextmanager
def namespace(api: Api, name: str) -> Iterator[str]:
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    eventually(lambda: api.find(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
               f"namespace {name} has its default ServiceAccount", timeout=60)
    try:
        yield name
    finally:
        api.delete(f"/api/v1/namespaces/{name}")


#: Exits on SIGTERM (busybox `sleep` as PID 1 ignores it): with a grace period the API server keeps
#: the pod until the kubelet has stopped it, torn its sandbox down (the CNI DEL) and deleted it, so
#: delete→gone covers that; with `terminationGracePeriodSeconds: 0` the object is gone at once
#: (~10 ms here) and the node's teardown goes unmeasured.
COMMAND = ("sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")


def pod(name: str, node: Node, **extra: Any) -> dict[str, Any]:
    return pod_manifest(name, command=COMMAND, terminationGracePeriodSeconds=30,
                        nodeSelector={"kubernetes.io/hostname": node.name}, **extra)


@contextlib.contextmanager
def nads(api: Api, ns: str, tags: Sequence[str], leftovers: list[tuple[str, Path]]) -> Iterator[None]:
    """The 2 NADs of the Multus way: the same shape as tests/real/attachments_support.py's
    (`bridge` + `host-local`, a bridge and a 10.252.x.0/24 of their own), without PodNetworks."""
    token = secrets.token_hex(3)
    made: list[tuple[str, str]] = []
    try:
        for i, tag in enumerate(tags):
            bridge, cni_name = f"pb{token}{i}", f"pnb-{token}-{tag}"
            made.append((bridge, cni_name))
            leftovers.append((bridge, LEASES / cni_name))
            octet = 10 + (int(token, 16) + 37 * i) % 240
            config = {"cniVersion": "1.0.0", "name": cni_name, "type": "bridge", "bridge": bridge,
                      "ipam": {"type": "host-local", "ranges": [[{"subnet": f"10.252.{octet}.0/24"}]]}}
            api.create(f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions", {
                "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": tag}, "spec": {"config": json.dumps(config)}})
        yield
    finally:
        for tag in tags:
            api.delete(f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{tag}")
        for bridge, cni_name in made:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
            shutil.rmtree(LEASES / cni_name, ignore_errors=True)


def remove(cluster: Cluster, node: Node) -> None:
    cluster.remove_node(node)
    shutil.rmtree(node.dir, ignore_errors=True)


_ADD = re.compile(r"ADD container \S+ \(pod (\S+)/(\S+)\) done in ([\d.]+) ms \((.*)\)")
_WRITE = re.compile(r"pod (\S+)/(\S+): network-status written in ([\d.]+) ms")


def agent_log(text: str, ns: str) -> tuple[list[dict[str, float]], list[float]]:
    """Our agent's ADDs of `ns`'s pods (total and phases, ms) and its network-status writes (ms)."""
    adds: list[dict[str, float]] = []
    writes: list[float] = []
    for line in text.splitlines():
        if (add := _ADD.search(line)) and add.group(1) == ns:
            phases: dict[str, float] = {"total": float(add.group(3))}
            for part in filter(None, (p.strip() for p in add.group(4).split(","))):
                label, _, value = part.rpartition(" ")
                with contextlib.suppress(ValueError):
                    phases[label] = phases.get(label, 0.0) + float(value)
            adds.append(phases)
        elif (write := _WRITE.search(line)) and write.group(1) == ns:
            writes.append(float(write.group(3)))
    return adds, writes


_SAMPLE = re.compile(r"^podnetwork_agent_(request|plugin_exec)_duration_seconds_(sum|count)\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def metric_means(text: str) -> dict[str, tuple[float, float]]:
    """From the agent's /metrics: per CNI command at its socket (`ADD`), and per plugin and
    command (`exec bridge ADD`), how many and their total seconds."""
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        sample = _SAMPLE.match(line)
        if not sample:
            continue
        labels = dict(_LABEL.findall(sample.group(3)))
        if sample.group(1) == "request":
            if labels.get("code") != "0":
                continue
            key = labels["command"]
        else:
            if labels.get("result") != "ok":
                continue
            key = f"exec {labels['plugin']} {labels['command']}"
        slot = found.setdefault(key, [0.0, 0.0])
        slot[0 if sample.group(2) == "count" else 1] += float(sample.group(4))
    return {key: (count, total) for key, (count, total) in found.items() if count}


# -- finer steps of a pod alone: the node's logs and the API server's admission metrics ---------------

#: klog's header (`I1207 02:40:01.123456 ...`, local time, no year) and containerd's (`time="...Z"`)
_KLOG = re.compile(r"^[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})\s")
_CONTAINERD_TIME = re.compile(r'^time="([^"]+)"')
_SANDBOX = re.compile(r'RunPodSandbox for &PodSandboxMetadata\{Name:([^,]+),Uid:[^,]*,Namespace:([^,]+),'
                      r'Attempt:\d+,\}( returns sandbox id \\"([0-9a-f]+)\\")?')
_CREATED = re.compile(r'CreateContainer within sandbox \\"([0-9a-f]+)\\" for &ContainerMetadata\{[^}]*\} '
                      r'returns container id \\"([0-9a-f]+)\\"')
_STARTED = re.compile(r'StartContainer for \\"([0-9a-f]+)\\" returns successfully')
#: The shim of a sandbox's pause container starting: containerd sets the pod's network up (the CNI
#: ADD, through whichever plugin) before it creates that container, so the ADD is over by then.
_SHIM = re.compile(r'msg="starting signal loop".* path=\S*/([0-9a-f]{64})\b')
#: Where a pod alone goes on its node, in order: the kubelet's and containerd's steps (wall clock).
NODE_STEPS = ("kubelet ADD", "sandbox asked", "CNI over", "sandbox done", "container started", "PLEG saw it",
              "running")


def _klog_time(line: str, year: int) -> float | None:
    head = _KLOG.match(line)
    if head is None:
        return None
    month, day, hour, minute, second, micro = (int(x) for x in head.groups())
    return datetime.datetime(year, month, day, hour, minute, second, micro).timestamp()  # local, as klog


def _containerd_time(line: str) -> float | None:
    head = _CONTAINERD_TIME.match(line)
    return datetime.datetime.fromisoformat(head.group(1)).timestamp() if head else None


def containerd_marks(text: str, ns: str) -> dict[str, dict[str, float]]:
    """Per pod of `ns`: when containerd was asked for its sandbox, when the sandbox's shim started
    (the CNI ADD over), when the sandbox was done, and when its container had started."""
    marks: dict[str, dict[str, float]] = {}
    sandboxes: dict[str, str] = {}
    containers: dict[str, str] = {}
    shims: dict[str, float] = {}
    for line in text.splitlines():
        when = _containerd_time(line)
        if when is None:
            continue
        if shim := _SHIM.search(line):
            shims.setdefault(shim.group(1), when)
            continue
        if (sandbox := _SANDBOX.search(line)) and sandbox.group(2) == ns:
            pod = marks.setdefault(sandbox.group(1), {})
            if sandbox.group(4):
                sandboxes[sandbox.group(4)] = sandbox.group(1)
                pod.setdefault("sandbox done", when)
            else:
                pod.setdefault("sandbox asked", when)
        elif (created := _CREATED.search(line)) and created.group(1) in sandboxes:
            containers[created.group(2)] = sandboxes[created.group(1)]
        elif (started := _STARTED.search(line)) and started.group(1) in containers:
            marks[containers[started.group(1)]].setdefault("container started", when)
    for sandbox_id, name in sandboxes.items():
        if sandbox_id in shims:
            marks[name].setdefault("CNI over", shims[sandbox_id])
    return marks


_RUNNING = re.compile(r'observedRunningTime="(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) \+0000 UTC')


def kubelet_marks(text: str, ns: str, year: int) -> dict[str, dict[str, float]]:
    """Per pod of `ns`: when the kubelet got it (SyncLoop ADD), the first UPDATE it got from the API
    (a change of the pod's annotations: network-status), when its PLEG saw the pod's last container
    started (the sandbox's and the container's ContainerStarted come in either order), and when
    it found the pod running (its startup-latency line's observedRunningTime, UTC)."""
    marks: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if '"SyncLoop ' not in line and '"Observed pod startup duration"' not in line:
            continue
        when = _klog_time(line, year)
        if when is None:
            continue
        for name in re.findall(rf'"{re.escape(ns)}/([^"]+)"', line):
            pod = marks.setdefault(name, {})
            if '"SyncLoop ADD"' in line:
                pod.setdefault("kubelet ADD", when)
            elif '"SyncLoop UPDATE"' in line:
                pod.setdefault("kubelet UPDATE", when)
            elif '"SyncLoop (PLEG)' in line and '"Type":"ContainerStarted"' in line:
                pod["PLEG saw it"] = max(pod.get("PLEG saw it", when), when)
            elif running := _RUNNING.search(line):
                pod.setdefault("running", datetime.datetime.fromisoformat(running.group(1) + "+00:00").timestamp())
    return marks


def node_marks(node: Node, ns: str) -> dict[str, dict[str, float]]:
    """The kubelet's and containerd's steps of each pod of `ns` on `node`, wall clock (read from
    their logs before the node goes); none when a log cannot be read (the report says `none`)."""
    try:
        return _node_marks(node, ns)
    except OSError as error:
        print(f"# {node.name}: its logs not read: {error}", file=sys.stderr)
        return {}


def _node_marks(node: Node, ns: str) -> dict[str, dict[str, float]]:
    logs = node.dir / "log"
    year = time.localtime().tm_year
    marks = containerd_marks((logs / "containerd.log").read_text(errors="replace"), ns)
    for name, found in kubelet_marks((logs / "kubelet.log").read_text(errors="replace"), ns, year).items():
        marks.setdefault(name, {}).update(found)
    return marks


_HISTOGRAM = re.compile(r"^(apiserver_\w+)_(sum|count)\{([^}]*)\} (\S+)$")
#: The API server's histograms of a pod's POST: the whole request, each admission step (admit:
#: mutating, validate), each webhook and each ValidatingAdmissionPolicy.
ADMISSION_FAMILIES = ("apiserver_request_duration_seconds", "apiserver_admission_step_admission_duration_seconds",
                      "apiserver_admission_webhook_admission_duration_seconds",
                      "apiserver_validating_admission_policy_check_duration_seconds")


_APP = re.compile(r'^podnetwork_(\w+)_webhook_request_duration_seconds_(sum|count)\{path="([^"]*)"\} (\S+)$')


def app_sums(text: str) -> dict[str, list[float]]:
    """From our controller's or bridge's /metrics: [count, seconds] of its webhook app per path,
    keyed `<component> app <path>` (the time inside the app: TLS and HTTP parsing are outside)."""
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        if sample := _APP.match(line):
            slot = found.setdefault(f"{sample.group(1)} app {sample.group(3)}", [0.0, 0.0])
            slot[0 if sample.group(2) == "count" else 1] += float(sample.group(4))
    return found


def scrape_admission(api: Api, cluster: Cluster) -> dict[str, list[float]]:
    """The API server's admission histograms and, when they run, our operators' webhook apps'."""
    code, text = api.request("GET", "/metrics")
    if code != 200 or not isinstance(text, str):
        print(f"# the API server's /metrics: HTTP {code}", file=sys.stderr)
        return {}
    found = admission_sums(text)
    for name in ("controller", "bridge"):
        process = cluster.components.get(name)
        if process is None or not process.alive():
            continue
        port = process.argv[process.argv.index("--metrics-port") + 1]
        with contextlib.suppress(httpx.HTTPError):
            found.update(app_sums(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text))
    return found


def admission_sums(text: str) -> dict[str, list[float]]:
    """From the API server's /metrics: [count, seconds] of what a pod's POST runs through, keyed
    `request`, `step admit`, `webhook <name> validating`, `policy <name>`."""
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        sample = _HISTOGRAM.match(line)
        if not sample or sample.group(1) not in ADMISSION_FAMILIES:
            continue
        labels = dict(_LABEL.findall(sample.group(3)))
        family = sample.group(1)
        if family == "apiserver_request_duration_seconds":
            if (labels.get("verb"), labels.get("resource"), labels.get("subresource")) != ("POST", "pods", ""):
                continue
            key = "request"
        elif family == "apiserver_admission_step_admission_duration_seconds":
            if (labels.get("operation"), labels.get("resource"), labels.get("subresource")) != ("CREATE", "pods", ""):
                continue
            key = f"step {labels.get('type')}"
        elif family == "apiserver_validating_admission_policy_check_duration_seconds":
            key = f"policy {labels.get('policy')}"
        else:
            if labels.get("operation") != "CREATE":
                continue
            key = f"webhook {labels.get('name')} {labels.get('type')}"
        slot = found.setdefault(key, [0.0, 0.0])
        slot[0 if sample.group(2) == "count" else 1] += float(sample.group(4))
    return found


def session_cpu(leader: int) -> float:
    """CPU seconds of every live process in the session `leader` started (our components each start
    one), their reaped children included (a plugin the agent or Multus ran and waited for)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[3]) == leader:
                total += sum(int(x) for x in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def components_cpu(cluster: Cluster) -> dict[str, float]:
    """`session_cpu` of each of the cluster's components that runs (ours, and Multus's daemon)."""
    return {name: session_cpu(process.popen.pid) for name, process in cluster.components.items()
            if process.popen is not None and process.alive()}


def admission_means(before: Mapping[str, list[float]], after: Mapping[str, list[float]]) -> dict[str, tuple[float, float]]:
    """What changed between two scrapes: per key, how many and the mean in seconds."""
    means = {}
    for key, (count, total) in after.items():
        was = before.get(key, [0.0, 0.0])
        if count > was[0]:
            means[key] = (count - was[0], (total - was[1]) / (count - was[0]))
    return means


def _metrics_port(node: Node) -> int:
    assert node.agent is not None
    return int(node.agent.argv[node.agent.argv.index("--metrics-port") + 1])


def agent_metrics(node: Node) -> dict[str, tuple[float, float]]:
    return metric_means(httpx.get(f"http://127.0.0.1:{_metrics_port(node)}/metrics", timeout=10).text)


def one_pod_with_phases(cluster: Cluster, api: Api, node: Node, ns: str,
                        networks: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, float]], list[float]]:
    """One more pod, not timed with the others, through our agent restarted with `-v` (which logs
    each ADD's phases and each network-status write): where one pod's ADD goes."""
    assert node.agent is not None
    previous = node.agent
    argv = previous.argv[1:]
    previous.stop()
    port = _metrics_port(node)
    log = previous.log
    offset = log.stat().st_size
    node.agent = cluster.start_component(previous.name, ["-v", *argv],
                                         lambda: node.socket.exists() and answers(f"http://127.0.0.1:{port}/metrics"))
    name = "phases-0"
    api.create(f"/api/v1/namespaces/{ns}/pods", pod(name, node, networks=networks))
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    eventually(lambda: ready(api.get(path)), f"pod {name} is Ready", timeout=120)

    def logged() -> tuple[list[dict[str, float]], list[float]] | None:
        with open(log, "rb") as file:
            file.seek(offset)
            adds, writes = agent_log(file.read().decode(errors="replace"), ns)
        return (adds, writes) if adds and writes else None

    found: tuple[list[dict[str, float]], list[float]] = eventually(logged, "the agent logged the ADD and its write",
                                                                   timeout=60)
    api.delete(path)
    eventually(lambda: api.find(path) is None, f"pod {name} is gone", timeout=120)
    return found


def keep_logs(args: argparse.Namespace, way: str, node: Node) -> None:
    """`--keep-logs`: the node's containerd and kubelet logs (and our agent's) copied before the node goes."""
    if args.keep_logs is None:
        return
    into = Path(args.keep_logs) / way
    shutil.copytree(node.dir / "log", into, dirs_exist_ok=True)
    if node.agent is not None:
        shutil.copy(node.agent.log, into / "agent.log")


def run(args: argparse.Namespace) -> list[Way]:
    missing = node_prerequisites()
    if missing:
        raise SystemExit(f"bench_podstart: {missing}")
    kit, bins = binaries()
    if not (kit / "multus" / "bin" / "multus-daemon").exists():
        raise SystemExit(f"bench_podstart: the kit at {kit} has no multus/bin/multus-daemon")
    cluster = Cluster(kit=kit, bins=bins, root=new_root())
    ways: list[Way] = []
    # the networks' bridges and lease directories: a runtime's late CNI DEL (a sandbox removed when
    # its node goes) makes host-local create its directory again, so they go once everything is down
    leftovers: list[tuple[str, Path]] = []
    try:
        started = time.monotonic()
        start_control_plane(cluster)
        start_extender(cluster)
        assert cluster.api is not None
        api = cluster.api
        print(f"# control plane up in {time.monotonic() - started:.0f}s ({cluster.root})", file=sys.stderr)
        tag = cluster.suffix

        if "default" in args.ways:
            node = cluster.add_node(1)
            try:
                with namespace(api, f"bench-default-{tag}") as ns:
                    ways.append(run_way("default", api, cluster, ns,
                                        lambda name: pod(name, node), args))
                    ways[-1].node = node_marks(node, ns)
                    keep_logs(args, "default", node)
            finally:
                remove(cluster, node)
            _report_progress(ways[-1])

        if "multus" in args.ways:
            # the node goes first (its pods through the API while Multus still runs), then the NADs
            with namespace(api, f"bench-multus-{tag}") as ns, nads(api, ns, ("blue", "red"), leftovers), \
                    multus_support.multus_node(cluster, api, 2) as node:
                selection = json.dumps([{"name": "blue", "interface": "net1"}, {"name": "red", "interface": "net2"}])
                ways.append(run_way("multus", api, cluster, ns, lambda name: pod(
                    name, node, annotations={"k8s.v1.cni.cncf.io/networks": selection}), args))
                ways[-1].node = node_marks(node, ns)
                keep_logs(args, "multus", node)
            _report_progress(ways[-1])

        if "podnetwork" in args.ways:
            start_controller_and_bridge(cluster)
            node = cluster.add_node(3)
            try:
                cluster.install_agent(node)
                with namespace(api, f"bench-podnetwork-{tag}") as ns, \
                        bridged_networks(api, ns, "blue", "red") as (blue, red):
                    leftovers.extend((net.bridge, net.lease_dir) for net in (blue, red))
                    networks = [{"podNetworkName": "default"},
                                {"podNetworkName": blue.podnetwork, "interfaceName": "net1"},
                                {"podNetworkName": red.podnetwork, "interfaceName": "net2"}]
                    way = run_way("podnetwork", api, cluster, ns,
                                  lambda name: pod(name, node, networks=networks), args)
                    ways.append(way)
                    way.node = node_marks(node, ns)
                    keep_logs(args, "podnetwork", node)
                    way.agent_metrics = agent_metrics(node)
                    way.agent_adds, way.status_writes = one_pod_with_phases(cluster, api, node, ns, networks)
            finally:
                remove(cluster, node)
            _report_progress(ways[-1])
    finally:
        cluster.stop()
        for bridge, lease_dir in leftovers:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
            shutil.rmtree(lease_dir, ignore_errors=True)
    return ways


def _report_progress(way: Way) -> None:
    print(f"# {way.name}: done in {way.seconds:.0f}s", file=sys.stderr)


# -- the report ----------------------------------------------------------------------------------

#: A pod alone, in order: the watch's marks and the node's, each as the median ms after the POST.
SINGLE_STEPS = ("admitted", "bound", "kubelet ADD", "sandbox asked", "network-status", "kubelet UPDATE",
                "CNI over", "sandbox done", "container started", "PLEG saw it", "running", "ready")


def single_pod_steps(ways: Sequence[Way]) -> list[str]:
    """The tables of a pod alone: each step after the POST, from the watch and the node's logs; and
    what the API server's admission took of the POST (its own histograms)."""
    lines = ["", "A pod alone, step by step: the median ms after the POST, from the watch and the node's "
             "logs (kubelet ADD: the kubelet got the pod; sandbox asked / done: containerd's RunPodSandbox, "
             "the CNI ADD inside; CNI over: the sandbox's shim started, which containerd does once the ADD "
             "returned; kubelet UPDATE: the kubelet got the first change of the pod's annotations; "
             "container started: containerd's StartContainer returned; PLEG saw it: the kubelet's relist "
             "found it started; running: the kubelet's status manager found the pod running, which its "
             "status write (Ready) follows):", "",
             "| way | " + " | ".join(SINGLE_STEPS) + " |", "| --- | " + " | ".join("---" for _ in SINGLE_STEPS) + " |"]
    for way in ways:
        single = way.batches[0] if way.batches else None
        if single is None:
            continue
        cells = []
        for step in SINGLE_STEPS:
            after = [{**way.node.get(p, {}), **single.marks[p]}.get(step) for p in single.pods]
            offsets = [when - single.marks[p]["create"] for p, when in zip(single.pods, after, strict=True)
                       if when is not None]
            cells.append(f"{statistics.median(offsets) * 1000:.0f}" if offsets else "none")
        lines.append(f"| {way.name} | " + " | ".join(cells) + " |")
    used = sorted({name for way in ways for name in way.cpu})
    if used:
        lines += ["", "CPU each component used per pod alone (its process and the children it waited for, "
                  "over the single pods' create and delete, divided by their number), then what it uses with "
                  "no pod (`idle`, per second, measured just before), and the first less what idle would have "
                  "used in the same time (`above idle`); ms:", "",
                  "| component | " + " | ".join(f"{w.name}: per pod | idle, per s | above idle" for w in ways) + " |",
                  "| --- | " + " | ".join("--- | --- | ---" for _ in ways) + " |"]
        for name in used:
            cells = []
            for way in ways:
                if name not in way.cpu:
                    cells.append("none | none | none")
                    continue
                rate = way.idle_cpu.get(name, 0.0)
                above = way.cpu[name] - rate * way.singles_seconds / max(len(way.batches[0].pods), 1)
                cells.append(f"{way.cpu[name] * 1000:.0f} | {rate * 1000:.1f} | {above * 1000:.0f}")
            lines.append(f"| {re.sub(r'-real[0-9a-f]+-n[0-9]+$', '', name)} | " + " | ".join(cells) + " |")
    keys = sorted({key for way in ways for key in way.admission})
    if keys:
        lines += ["", "What the API server's admission took of a pod alone's POST (its histograms over the single "
                  "pods: mean ms per call; `request` is the whole POST at the server, `step admit` / `step "
                  "validate` every mutating / validating plugin and webhook together; `controller app` / `bridge "
                  "app`: the time inside our operators' webhook apps, by path, from their own /metrics):", "",
                  "| what | " + " | ".join(w.name for w in ways) + " |", "| --- | " + " | ".join("---" for _ in ways) + " |"]
        for key in keys:
            cells = [f"{way.admission[key][1] * 1000:.1f} ({way.admission[key][0]:.0f}×)" if key in way.admission
                     else "none" for way in ways]
            lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return lines


def report(ways: list[Way], args: argparse.Namespace) -> str:
    by_name = {w.name: w for w in ways}
    lines = [
        f"Run: `{' '.join(['make bench-podstart'] if args.from_make else sys.argv)}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores "
        f"({platform.machine()}, Python {platform.python_version()}), load average before "
        f"{args.load_before}, after {', '.join(f'{x:.1f}' for x in os.getloadavg())}.",
        "",
        "| way | pods | create→Ready p50 | p95 | p99 | delete→gone p50 | p95 | p99 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for way in ways:
        for batch in way.batches:
            start = " | ".join(milliseconds(percentile(batch.start, p)) for p in PERCENTILES)
            delete = " | ".join(milliseconds(percentile(batch.delete, p)) for p in PERCENTILES)
            lines.append(f"| {way.name} | {batch.name} | {start} | {delete} |")
    ours = by_name.get("podnetwork")
    for baseline in ("multus", "default"):
        if ours is None or baseline not in by_name:
            continue
        lines += ["", f"podnetwork / {baseline}, per percentile:", "",
                  "| pods | create→Ready p50 | p95 | p99 | delete→gone p50 | p95 | p99 |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for mine, theirs in zip(ours.batches, by_name[baseline].batches, strict=True):
            start = " | ".join(ratio(percentile(mine.start, p), percentile(theirs.start, p)) for p in PERCENTILES)
            delete = " | ".join(ratio(percentile(mine.delete, p), percentile(theirs.delete, p))
                                for p in PERCENTILES)
            lines.append(f"| {mine.name} | {start} | {delete} |")
    lines += ["", "Where create→Ready goes: the median time from just before the POST to each step, as the "
              "watch saw it (admitted: the POST returned, every admission webhook included; ungated: the "
              "bridge's scheduling gate gone; bound: `spec.nodeName` set; network-status: the annotation "
              "written; none: no such step, e.g. no gate because the webhook found every network Ready "
              "and translated at admission):", "",
              "| way | pods | " + " | ".join(STEPS) + " |", "| --- | --- | " + " | ".join("---" for _ in STEPS) + " |"]
    for way in ways:
        for batch in way.batches:
            cells = [milliseconds(statistics.median(batch.steps[s])) if batch.steps.get(s) else "none"
                     for s in STEPS]
            lines.append(f"| {way.name} | {batch.name} | " + " | ".join(cells) + " |")
    lines += single_pod_steps(ways)
    if ours is not None and ours.agent_metrics:
        lines += ["", "Our agent's own figures over the whole podnetwork run (its /metrics: time at its socket "
                  "per CNI command, and per plugin execution):", "", "| what | count | mean |", "| --- | --- | --- |"]
        for key, (count, total) in sorted(ours.agent_metrics.items()):
            lines.append(f"| {key} | {count:.0f} | {total / count * 1000:.1f} ms |")
    if ours is not None and ours.agent_adds:
        (first,) = ours.agent_adds[:1]
        names = list(first)
        lines += ["", "One more pod through the agent restarted with `-v` (its log of the ADD's phases, ms; "
                  "`total` is the time at its socket; network-status is written after the answer):", "",
                  "| " + " | ".join(names) + " | network-status write |",
                  "| " + " | ".join("---" for _ in names) + " | --- |",
                  "| " + " | ".join(f"{first[n]:.1f}" for n in names) + " | "
                  + (f"{ours.status_writes[0]:.1f}" if ours.status_writes else "n/a") + " |"]
    lines += ["", "Each way's wall time: " + ", ".join(f"{w.name} {w.seconds:.0f} s" for w in ways) + "."]
    for way in ways:
        if way.reconnects:
            lines.append(f"The {way.name} watch reconnected {len(way.reconnects)} times ({'; '.join(way.reconnects)}): "
                         "its events during a reconnect are stamped late.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--singles", type=int, default=5,
                        help="single pods, each created and deleted alone, one after the other (5)")
    parser.add_argument("--burst", type=int, default=20, help="pods created at once, and the size of a wave (20)")
    parser.add_argument("--waves", type=int, default=5, help="waves of --burst pods (5: 100 pods)")
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS), help="which ways (all three)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a batch may take to be Ready or gone")
    parser.add_argument("--idle", type=float, default=10.0,
                        help="seconds each way waits before its single pods, to measure what each component "
                             "uses with no pod (10)")
    parser.add_argument("--keep-logs", metavar="DIR", help="copy each way's node logs (containerd, kubelet, "
                        "our agent) into DIR/<way> before the node goes")
    parser.add_argument("--from-make", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())

    def terminated(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminated)
    try:
        ways = run(args)
    except KeyboardInterrupt:
        print("bench_podstart: interrupted; the cluster, its nodes and networks are removed", file=sys.stderr)
        return 130
    print(report(ways, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
