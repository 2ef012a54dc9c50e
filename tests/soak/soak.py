"""A churn soak on the kit's kubelet node: pods come and go while the node's parts are SIGKILLed (issue 34).

One real cluster of the kit (../shared/k8s), started as the real tier starts it
(tests/real/cluster_support.py): the control plane with our scheduler extender, our controller and
bridge with their webhooks (as tests/real/conftest.py's `components`), one kubelet node with
containerd and our agent installed on it (shim and conflist). Its own folder, ports, node name,
bridges and subnets: it runs beside other clusters of the machine and touches none of theirs.

The networks: 5 PodNetworks of the bridge's provider, each backed by a NetworkAttachmentDefinition:
three `bridge` + `host-local` (a bridge and a /24 each), one `bridge` + `static` (one fixed
address: static IPAM holds no lease), one `macvlan` + `host-local` on the host end of a veth pair
the soak makes (this kernel has neither dummy nor ipvlan links).

The churn: pods with 0-3 of those networks (beside the default one), created at a steady rate and
each deleted after a random lifetime; a few get one more network hot-plugged, and unplugged again.

The traffic (docs/services.md, docs/network-policy.md): a few of the pods on `blue` are servers
(app=backend, answering their name on TCP 8080) behind a Service on that PodNetwork, isolated there
by a MultiNetworkPolicy that admits pods labelled soak-client=allowed; a few are clients, allowed or
denied. There is always at least one of each while the churn runs (the next pod takes a role none
has). From each client's network namespace (nsenter) the soak connects to each server's address on
`blue` and to the Service's ClusterIP: an allowed client must be answered by that server (by one of
the servers, through the ClusterIP), a denied one not at all. Probes every `--probe-every` seconds
during the churn are tallied; those at the counts, on settled pods, are judged like the counts.
The faults: at random intervals, SIGKILL to one of the agent, the bridge, the controller,
kube-apiserver (kept down 5-20 s), the kubelet or containerd; each brought back as its supervisor
would: our components with their own command line (`Cluster.start_component`), the kit's daemons
with the command line and environment read from /proc/<pid> before the kill, their new pid
written where the kit's scripts keep it (so that `stop.sh`/`node-down.sh` find it). Its recovery
time: from the kill to the part answering again (socket, /readyz, node Ready).

The counts (every `--check-every` seconds and at the end): the churn pauses, every pod the API
has settles (Running, or gone), then what the node holds is counted against what the API says
should exist; each difference is a leak, reported with what owned it:

- host veths on each of the soak's bridges and on the node's default bridge (one per attachment);
- host-local lease files of each host-local network (one per attachment);
- our agent's cache records (one per ready sandbox, whose pod the API has);
- nftables tables in the host (none beyond those there before the soak);
- netns files of the soak's sandboxes that outlive them;
- pods Terminating or ContainerCreating for more than 2 minutes;
- network-status that disagrees with the container's interfaces (read in the sandbox's network
  namespace with nsenter, through the pid `crictl inspectp` gives);
- probes of the traffic answered where they must not be, or not answered (or by another pod) where
  they must, reported with the policy or the Service and the server that owned them.

The report (printed and written as JSON, `--report`): pods per minute, create→Running and
delete→gone percentiles (this process's clock around the API calls, polled every ~0.5 s), every kill
with its recovery time, every leak, what the probes saw, the agent's RSS with its pid at every 100th
pod and every count (`--spare agent` keeps the kills off the agent, so that one process's RSS is
followed from pod 100 to the last hundred: `agent_rss_growth`).

Run:  make soak MINUTES=30    or    .venv/bin/python tests/soak/soak.py --pods 100 --kills 10
      .venv/bin/python tests/soak/soak.py --pods 1000 --kills 25 --spare agent   (the agent's RSS)
Needs root, containerd, runc, the CNI plugins, nftables, the kit. Removes everything it made (the
node, bridges, veths, lease directories, the session folder), also on a failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.real.*, run as a script from anywhere

from conformance.kep.suite import load_manifest  # noqa: E402
from conformance.kep.tests.policy import PORT  # noqa: E402
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
    start_operators,
)

PODNETWORKS = "/apis/multinetwork.x-k8s.io/v1alpha1/podnetworks"
PROVIDER = "multinetwork.x-k8s.io/npwg-bridge"
NETWORKS = "multinetwork.x-k8s.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
LEASES = Path("/var/lib/cni/networks")
POD_IPS = "multinetwork.x-k8s.io/pod-ips"
TARGETS = ("agent", "bridge", "controller", "kube-apiserver", "kubelet", "containerd")
STUCK = 120.0  # a pod Terminating or ContainerCreating longer than this is stuck (issue 34)


def percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# -- the networks ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Net:
    tag: str
    podnetwork: str
    nad: str
    cni_name: str
    kind: str  # bridge | static | macvlan
    bridge: str  # the host link the attachments hang off (bridge, or the macvlan's parent)
    subnet: str

    @property
    def lease_dir(self) -> Path:
        return LEASES / self.cni_name

    def config(self) -> dict[str, Any]:
        base = {"cniVersion": "1.0.0", "name": self.cni_name}
        if self.kind == "macvlan":
            return {**base, "type": "macvlan", "master": self.bridge, "mode": "bridge",
                    "ipam": {"type": "host-local", "ranges": [[{"subnet": self.subnet}]]}}
        if self.kind == "static":
            return {**base, "type": "bridge", "bridge": self.bridge,
                    "ipam": {"type": "static", "addresses": [{"address": self.subnet.replace(".0/24", ".5/24")}]}}
        return {**base, "type": "bridge", "bridge": self.bridge,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": self.subnet}]]}}


def make_nets(token: str) -> list[Net]:
    octets = random.sample(range(256), 5)
    kinds = [("blue", "bridge"), ("red", "bridge"), ("green", "bridge"), ("fixed", "static"), ("mac", "macvlan")]
    nets = []
    for i, ((tag, kind), octet) in enumerate(zip(kinds, octets, strict=True)):
        link = f"ps{token}m" if kind == "macvlan" else f"ps{token}{i}"
        nets.append(Net(tag=tag, podnetwork=f"soak-{tag}-{token}", nad=tag, cni_name=f"psk-{token}-{tag}",
                        kind=kind, bridge=link, subnet=f"10.253.{octet}.0/24"))
    return nets


# -- the kit's daemons: the command line and environment a supervisor would start again ------------

@dataclass
class Daemon:
    name: str  # as the kit's pid file names it
    pidfile: Path
    log: Path
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def remember(self) -> None:
        pid = self.pid()
        assert pid is not None, f"{self.name} has no pid file at {self.pidfile}"
        self.argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        pairs = (e.decode(errors="replace").partition("=")
                 for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if e)
        self.env = {k: v for k, _, v in pairs}

    def kill(self) -> None:
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            # gone, and reaped by whoever its parent is, before it starts again on the same ports
            end = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and _state(pid) not in ("Z", "X") and time.monotonic() < end:
                time.sleep(0.05)

    def start(self) -> None:
        # as the kit's `daemon` starts it: detached, so that init reaps it (a child of this process
        # would stay a zombie once stop.sh killed it, and stop.sh would wait for it in vain)
        started = subprocess.run(["bash", "-c", 'log=$1; shift; setsid "$@" >> "$log" 2>&1 < /dev/null & echo $!',
                                  "daemon", str(self.log), *self.argv], env=self.env, capture_output=True, text=True,
                                 check=True)
        self.pidfile.write_text(started.stdout.strip() + "\n")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


# -- the traffic: servers behind a Service on a PodNetwork, under a MultiNetworkPolicy --------------

SERVER, ALLOWED, DENIED = "server", "allowed", "denied"
#: The label of a client pod: `allowed` ones the policy lets through to the servers, `denied` ones not.
CLIENT_LABEL = "soak-client"
#: The network of the traffic (a `bridge` + `host-local` one of `make_nets`).
TRAFFIC_NET = "blue"
SERVICE = "backend"
POLICY = "backend-from-allowed"
#: service.yaml's port, to the pods' container port named `http` (PORT).
SERVICE_PORT = 80
#: Seconds a probe waits to connect and for the answer (a dropped SYN is not answered at all).
PROBE_SECONDS = 2.0
#: Attempts of a probe that must be answered: between two connections the server's `nc` is not
#: listening for an instant (busybox nc serves one connection and is started again).
ANSWER_TRIES = 3

#: Run with nsenter in a client pod's network namespace: connects to each (host, port, tries,
#: seconds) and prints what each answered (its first line), or null.
PROBE = r"""
import json, socket, sys, time
found = []
for host, port, tries, seconds in json.loads(sys.argv[1]):
    said = None
    for attempt in range(tries):
        try:
            with socket.create_connection((host, port), timeout=seconds) as conn:
                conn.settimeout(seconds)
                data = b""
                while b"\n" not in data:
                    chunk = conn.recv(256)
                    if not chunk:
                        break
                    data += chunk
                said = data.decode(errors="replace").strip() or None
        except OSError:
            said = None
        if said:
            break
        time.sleep(0.5)
    found.append(said)
print(json.dumps(found))
"""


@dataclass(frozen=True)
class Probe:
    """One connection a client pod must see answered (by one of `answerers`) or not answered."""

    client: str
    role: str  # ALLOWED or DENIED
    kind: str  # "policy probe" (to a server's address) or "service probe" (to the ClusterIP)
    host: str
    port: int
    answerers: tuple[str, ...]  # the server pods that may answer it

    @property
    def expect(self) -> bool:
        return self.role == ALLOWED

    def wrong(self, answer: str | None) -> bool:
        return answer not in self.answerers if self.expect else answer is not None

    def said(self, answer: str | None) -> str:
        got = "no answer" if answer is None else f"answered {answer!r}"
        must = f"must be answered by {' or '.join(self.answerers)}" if self.expect else "must not be answered"
        return f"{self.client} ({CLIENT_LABEL}={self.role}) to {self.host}:{self.port}: {got}, {must}"


def address_on(pod: dict[str, Any], podnetwork: str) -> str | None:
    """The pod's IPv4 address on `podnetwork`, as its `multinetwork.x-k8s.io/pod-ips` reports it."""
    for entry in json.loads(pod["metadata"].get("annotations", {}).get(POD_IPS, "[]") or "[]"):
        if entry.get("podNetwork") == podnetwork and ":" not in str(entry.get("ip", "")):
            return str(entry["ip"])
    return None


def probe_plan(running: dict[str, dict[str, Any]], podnetwork: str, cluster_ip: str | None) -> list[Probe]:
    """What each client pod of `running` (name -> pod, Running and not deleted) must see: each server
    on `podnetwork` at its address there, and the Service's ClusterIP while a server runs; answered
    for an `allowed` client (the policy admits it), not for a `denied` one."""
    servers: dict[str, str] = {}
    for name, pod in running.items():
        ip = address_on(pod, podnetwork)
        if pod["metadata"].get("labels", {}).get("app") == SERVICE and ip:
            servers[name] = ip
    plan: list[Probe] = []
    for name, pod in sorted(running.items()):
        role = pod["metadata"].get("labels", {}).get(CLIENT_LABEL)
        if role not in (ALLOWED, DENIED):
            continue
        for server, ip in sorted(servers.items()):
            plan.append(Probe(name, role, "policy probe", ip, PORT, (server,)))
        if servers and cluster_ip:
            plan.append(Probe(name, role, "service probe", cluster_ip, SERVICE_PORT, tuple(sorted(servers))))
    return plan


def probe_from(pid: int, probes: Sequence[Probe]) -> list[str | None] | None:
    """What each probe got, connecting from the network namespace of process `pid` (a client pod's
    sandbox); None when that namespace is gone."""
    targets = [(p.host, p.port, ANSWER_TRIES if p.expect else 1, PROBE_SECONDS) for p in probes]
    try:
        out = subprocess.run(["nsenter", "-t", str(pid), "-n", sys.executable, "-I", "-S", "-c", PROBE,
                              json.dumps(targets)], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        return None
    answers: list[str | None] = json.loads(out.stdout)
    return answers


@dataclass
class Traffic:
    """What the probes saw: during the churn (for the report) and at the counts (a wrong one that stays
    is a leak of the count)."""

    cluster_ip: str | None = None
    servers: int = 0
    clients: dict[str, int] = field(default_factory=lambda: {ALLOWED: 0, DENIED: 0})
    churn: dict[str, int] = field(default_factory=lambda: {"probes": 0, "allowed_answered": 0,
                                                           "allowed_unanswered": 0, "denied_answered": 0,
                                                           "denied_unanswered": 0})
    counted: dict[str, int] = field(default_factory=lambda: {"probes": 0, "wrong": 0})
    churn_wrong: list[str] = field(default_factory=list)  # the first few wrong answers during the churn


# -- the soak --------------------------------------------------------------------------------------

@dataclass
class Life:
    name: str
    nets: list[str]
    created: float
    running: float | None = None
    delete_at: float | None = None
    deleted: float | None = None
    gone: float | None = None
    plugged: str | None = None  # the tag of a hot-plugged network
    unplug_at: float | None = None
    role: str | None = None  # SERVER, ALLOWED or DENIED: a pod of the traffic (see Traffic)


@dataclass
class Kill:
    target: str
    at: float  # seconds since the soak began
    down: float  # how long it was kept down before it was started again
    recovery: float | None  # from the kill to the part answering again
    error: str | None = None


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.token = secrets.token_hex(2)
        self.cluster: Cluster | None = None
        self.node: Node | None = None
        self.nets: list[Net] = []
        self.ns = f"soak-{self.token}"
        self.lives: dict[str, Life] = {}
        self.kills: list[Kill] = []
        self.leaks: list[dict[str, Any]] = []
        self.checks: list[dict[str, Any]] = []
        self.netns_seen: dict[str, str] = {}  # netns path -> the sandbox that had it
        self.rss: dict[str, int | None] = {}
        self.paused = threading.Event()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.creating = threading.Lock()
        self.began = time.monotonic()
        self.counter = 0
        self.tables_before: set[str] = set()
        self.pod_100_at: float | None = None
        self.rss_samples: list[dict[str, Any]] = []  # the agent's RSS and pid every 100 pods and at each count
        self.sandbox_info: dict[str, dict[str, Any]] = {}  # sandbox id -> what `crictl inspectp` said of it
        self.traffic = Traffic()
        self.api_down = threading.Event()
        self.threads: list[threading.Thread] = []

    # -- setup and teardown ------------------------------------------------------------------------
    def setup(self) -> None:
        missing = node_prerequisites()
        if missing:
            raise SystemExit(f"soak: {missing}")
        kit, bins = binaries()
        self.cluster = cluster = Cluster(kit=kit, bins=bins, root=new_root())
        self.tables_before = nft_tables()
        start_control_plane(cluster)
        start_operators(cluster)
        self.node = node = cluster.add_node(1)
        cluster.install_agent(node)
        api = self.api
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}})
        eventually(lambda: api.find(f"/api/v1/namespaces/{self.ns}/serviceaccounts/default"),
                   f"namespace {self.ns} has its default ServiceAccount", timeout=60)
        self.nets = make_nets(self.token)
        mac = next(n for n in self.nets if n.kind == "macvlan")
        run(["ip", "link", "add", mac.bridge, "type", "veth", "peer", "name", f"{mac.bridge}p"])
        run(["ip", "link", "set", mac.bridge, "up"])
        run(["ip", "link", "set", f"{mac.bridge}p", "up"])
        for net in self.nets:
            api.create(f"/apis/k8s.cni.cncf.io/v1/namespaces/{self.ns}/network-attachment-definitions", {
                "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": net.nad}, "spec": {"config": json.dumps(net.config())}})
            api.create(PODNETWORKS, {
                "apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork",
                "metadata": {"name": net.podnetwork},
                "spec": {"provider": PROVIDER, "parametersRefs": [{
                    "group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions",
                    "namespace": self.ns, "name": net.nad}]}})
        for net in self.nets:
            eventually(lambda net=net: ready(api.find(f"{PODNETWORKS}/{net.podnetwork}")),
                       f"PodNetwork {net.podnetwork} is Ready", timeout=60)
        if not self.args.no_traffic:
            self.traffic_objects()

    def traffic_objects(self) -> None:
        """The Service of the servers on the traffic's PodNetwork and the policy that isolates them but
        for `allowed` clients: the conformance suite's manifests (docs/services.md,
        docs/network-policy.md)."""
        network = self.net(TRAFFIC_NET).podnetwork
        values = {"NAMESPACE": self.ns, "NETWORK": network}
        (service,) = load_manifest("service.yaml", {**values, "NAME": SERVICE, "TYPE": "ClusterIP"})
        made = self.api.create(f"/api/v1/namespaces/{self.ns}/services", service)
        self.traffic.cluster_ip = next(ip for ip in made["spec"]["clusterIPs"] if ":" not in ip)
        allow = [{"from": [{"podSelector": {"matchLabels": {CLIENT_LABEL: ALLOWED}}}],
                  "ports": [{"protocol": "TCP", "port": PORT}]}]
        (policy,) = load_manifest("multi-networkpolicy.yaml", {**values, "NAME": POLICY,
                                                               "INGRESS": json.dumps(allow)})
        # the manifest isolates app=server; the servers here are the Service's, app=backend (one `app` a pod)
        policy["spec"]["podSelector"] = {"matchLabels": {"app": SERVICE}}
        self.api.create(f"/apis/k8s.cni.cncf.io/v1beta1/namespaces/{self.ns}/multi-networkpolicies", policy)

    @property
    def api(self) -> Api:
        assert self.cluster is not None and self.cluster.api is not None
        return self.cluster.api

    def teardown(self) -> None:
        cluster, node = self.cluster, self.node
        self.stop.set()
        for thread in self.threads:
            thread.join(150)  # a part the faults killed is started again before the cluster stops
        if cluster is None:
            return
        api = cluster.api
        if api is not None:
            with contextlib.suppress(Exception):
                api.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods")
                eventually(lambda: not api.get(f"/api/v1/namespaces/{self.ns}/pods")["items"],
                           "the soak's pods are gone", timeout=120)
            for net in self.nets:
                with contextlib.suppress(Exception):
                    api.delete(f"{PODNETWORKS}/{net.podnetwork}")
            with contextlib.suppress(Exception):
                api.delete(f"/api/v1/namespaces/{self.ns}")
        with contextlib.suppress(Exception):
            cluster.stop()
        for net in self.nets:
            subprocess.run(["ip", "link", "del", net.bridge], capture_output=True)
            shutil.rmtree(net.lease_dir, ignore_errors=True)
        if node is not None:
            subprocess.run(["ip", "link", "del", node.bridge], capture_output=True)
            shutil.rmtree(LEASES / node.network_name, ignore_errors=True)
        shutil.rmtree(cluster.root, ignore_errors=True)

    # -- the churn ---------------------------------------------------------------------------------
    def churn(self) -> None:
        """Creates pods at `--rate` a second while fewer than `--pods` were made, deletes each after
        its lifetime, hot-plugs some; polls the API for what each pod reached."""
        interval = 1.0 / self.args.rate
        next_create = time.monotonic()
        while not self.stop.is_set():
            if self.paused.is_set():
                time.sleep(0.2)
                next_create = time.monotonic()
                continue
            now = time.monotonic()
            if now >= next_create and self.counter < self.args.pods and self.live_count() < self.args.population:
                self.create()
                next_create = now + interval
            self.observe()
            self.act()
            if self.counter >= self.args.pods and all(life.gone for life in self.lives.values()):
                return
            time.sleep(0.3)

    def live_count(self) -> int:
        return sum(1 for life in self.lives.values() if life.deleted is None)

    def role(self) -> str | None:
        """A server, an allowed or a denied client whenever none lives (so that each count has them to
        probe), else now and then one more."""
        if self.args.no_traffic:
            return None
        live = [life.role for life in self.lives.values() if life.deleted is None and life.role]
        for role in (SERVER, ALLOWED, DENIED):
            if role not in live:
                return role
        draw = self.rng.random()
        if draw < 0.05 and live.count(SERVER) < 3:
            return SERVER
        return self.rng.choice((ALLOWED, DENIED)) if draw < 0.15 else None

    def create(self, role: str | None = None) -> None:
        with self.creating:  # the churn and a count (which gives missing roles) name pods from one counter
            self._create(role)

    def _create(self, role: str | None) -> None:
        chosen = self.rng.sample([n.tag for n in self.nets], self.rng.choice((0, 1, 1, 2, 2, 3)))
        role = role or self.role()
        if role and TRAFFIC_NET not in chosen:
            chosen = [TRAFFIC_NET, *chosen[:2]]
        name = f"p{self.counter:05d}"
        networks = None
        if chosen:
            networks = [{"podNetworkName": "default"}] + [
                {"podNetworkName": self.net(tag).podnetwork, "interfaceName": f"{tag}0"} for tag in chosen]
        # A grace period of 0 makes the API server drop the pod at once, before the kubelet tore its sandbox
        # down: "gone" would then say nothing. With one, the object stays until the kubelet stopped the
        # sandbox (CNI DEL); the shell ends on SIGTERM at once, so the grace is not waited out.
        command = "trap 'exit 0' TERM; sleep 3600 & wait"
        labels = {CLIENT_LABEL: role} if role in (ALLOWED, DENIED) else {}
        if role == SERVER:
            # answers its name on PORT (busybox nc serves one connection, so again and again)
            command = f"trap 'exit 0' TERM; while true; do echo {name} | nc -l -p {PORT} & wait $!; done"
            labels = {"app": SERVICE}
        body = pod_manifest(name, networks=networks, nodeSelector={"kubernetes.io/hostname": self.node_name},
                            command=("sh", "-c", command), labels=labels)
        body["spec"]["terminationGracePeriodSeconds"] = 10
        if role == SERVER:
            body["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": PORT, "protocol": "TCP"}]
        started = time.monotonic()
        try:
            code, data = self.api.request("POST", f"/api/v1/namespaces/{self.ns}/pods", body)
        except httpx.HTTPError:
            return  # the API server is down: the next tick tries again
        if code == 409 and isinstance(data, dict) and data.get("reason") == "AlreadyExists":
            # an earlier POST of this name, whose answer was lost (the API server was killed), made
            # it: that pod is the soak's, with the networks and role it was made with
            adopted = self.adopt(name)
            if adopted is None:
                return
            chosen, role = adopted
            print(f"soak: {name} was made by a POST whose answer was lost: adopted", flush=True)
        elif code >= 300:
            if code not in (500, 503, 504) and "webhook" not in str(data):
                print(f"soak: creating {name}: HTTP {code}: {str(data)[:300]}", flush=True)
            return
        self.counter += 1
        self.lives[name] = Life(name=name, nets=chosen, created=started, role=role)
        if role == SERVER:
            self.traffic.servers += 1
        elif role:
            self.traffic.clients[role] += 1
        if self.counter % 100 == 0:
            self.sample_rss(f"pod {self.counter}", pods=self.counter)

    def adopt(self, name: str) -> tuple[list[str], str | None] | None:
        """The networks (tags) and role of the soak's pod `name` as the API has it."""
        try:
            pod = self.api.find(f"/api/v1/namespaces/{self.ns}/pods/{name}")
        except (httpx.HTTPError, AssertionError):
            return None
        if pod is None:
            return None
        by_podnetwork = {n.podnetwork: n.tag for n in self.nets}
        asked = json.loads(pod["metadata"].get("annotations", {}).get(NETWORKS, "[]"))
        chosen = [by_podnetwork[e["podNetworkName"]] for e in asked if e.get("podNetworkName") in by_podnetwork]
        labels = pod["metadata"].get("labels", {})
        role = SERVER if labels.get("app") == SERVICE else labels.get(CLIENT_LABEL)
        return chosen, role

    def net(self, tag: str) -> Net:
        return next(n for n in self.nets if n.tag == tag)

    @property
    def node_name(self) -> str:
        assert self.node is not None
        return self.node.name

    def list_pods(self) -> dict[str, dict[str, Any]] | None:
        try:
            code, data = self.api.request("GET", f"/api/v1/namespaces/{self.ns}/pods")
        except httpx.HTTPError:
            return None
        if code != 200:
            return None
        return {p["metadata"]["name"]: p for p in data["items"]}

    def observe(self) -> None:
        pods = self.list_pods()
        if pods is None:
            return
        now = time.monotonic()
        for life in self.lives.values():
            pod = pods.get(life.name)
            if pod is None:
                if life.deleted is not None and life.gone is None:
                    life.gone = now
                continue
            if life.running is None and pod.get("status", {}).get("phase") == "Running":
                life.running = now
                # the traffic's pods live twice as long, to be probed during the churn too
                life.delete_at = now + self.rng.uniform(*self.args.lifetime) * (2 if life.role else 1)
                if self.args.hotplug > self.rng.random():
                    spare = [n.tag for n in self.nets if n.tag not in life.nets]
                    if spare:
                        life.plugged = self.rng.choice(spare)
                        life.unplug_at = now + self.rng.uniform(1, max(1.5, self.args.lifetime[0] * 0.8))
                        self.patch_networks(life, [*life.nets, life.plugged])

    def patch_networks(self, life: Life, tags: list[str]) -> None:
        networks = [{"podNetworkName": "default"}] + [
            {"podNetworkName": self.net(t).podnetwork, "interfaceName": f"{t}0"} for t in tags]
        with contextlib.suppress(httpx.HTTPError, AssertionError):
            self.api.merge_patch(f"/api/v1/namespaces/{self.ns}/pods/{life.name}",
                                 {"metadata": {"annotations": {NETWORKS: json.dumps(networks)}}})

    def act(self) -> None:
        now = time.monotonic()
        for life in list(self.lives.values()):
            if life.plugged and life.unplug_at is not None and now >= life.unplug_at and life.deleted is None:
                life.unplug_at = None
                self.patch_networks(life, life.nets)
            stuck_creating = life.running is None and now - life.created > STUCK / 2
            if self.paused.is_set() and life.role and not stuck_creating:
                continue  # a count probes the traffic's pods: they go once it is done
            if life.deleted is None and ((life.delete_at is not None and now >= life.delete_at) or stuck_creating):
                try:
                    # not forced (gracePeriodSeconds=0 would drop the object at once): gone means the
                    # kubelet stopped the sandbox, so through CNI DEL
                    code, _ = self.api.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{life.name}")
                except httpx.HTTPError:
                    continue
                if code < 300 or code == 404:
                    life.deleted = now

    # -- the faults --------------------------------------------------------------------------------
    def faults(self) -> None:
        """SIGKILLs `--kills` times, spread over the churn, one part at a time."""
        cluster, node = self.cluster, self.node
        assert cluster is not None and node is not None
        run_dir = cluster.root / "run"
        daemons = {
            "kube-apiserver": Daemon("kube-apiserver", run_dir / "kube-apiserver.pid", run_dir / "kube-apiserver.log"),
            "kubelet": Daemon(f"kubelet-{node.name}", run_dir / f"kubelet-{node.name}.pid",
                              node.dir / "log" / "kubelet.log"),
            "containerd": Daemon(f"containerd-{node.name}", run_dir / f"containerd-{node.name}.pid",
                                 node.dir / "log" / "containerd.log"),
        }
        for daemon in daemons.values():
            daemon.remember()
        # every part in each round of six, in a random order
        order: list[str] = []
        targets = [t for t in TARGETS if t not in self.args.spare]
        while len(order) < self.args.kills:
            round_ = list(targets)
            self.rng.shuffle(round_)
            order.extend(round_)
        # spread over the expected churn (--minutes, or pods / rate seconds) by the clock, not by gaps
        # after each kill: a kill's own time (an API server kept down 20 s, counts that pause the
        # faults) would otherwise push the last kills past the end of a timed run
        duration = self.args.minutes * 60 if self.args.minutes else self.args.pods / self.args.rate
        schedule = kill_schedule(duration, self.args.kills, self.rng)
        for target, offset in zip(order[: self.args.kills], schedule, strict=True):
            if self.stop.wait(max(3.0, self.began + offset - time.monotonic())):
                return
            while self.paused.is_set() and not self.stop.is_set():
                time.sleep(0.2)
            if self.stop.is_set():
                return
            self.kill(target, daemons)

    def kill(self, target: str, daemons: dict[str, Daemon]) -> None:
        cluster, node = self.cluster, self.node
        assert cluster is not None and node is not None
        at = time.monotonic()
        down = 0.0
        error = None
        try:
            if target in daemons:
                daemon = daemons[target]
                daemon.kill()
                if target == "kube-apiserver":
                    self.api_down.set()
                    down = self.rng.uniform(5, 20)
                    self.stop.wait(down)
                daemon.start()
                self.api_down.clear()
                ready = {"kube-apiserver": lambda: http_ok(cluster, "/readyz"),
                         "kubelet": lambda: kubelet_healthy(node),
                         "containerd": lambda: crictl(node, "info").returncode == 0}[target]
                eventually(ready, f"{target} answers again", timeout=120)
            else:
                name = {"agent": f"agent-{node.name}"}.get(target, target)
                process = cluster.components[name]
                assert process.popen is not None
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.popen.pid, signal.SIGKILL)
                process.popen.wait(10)
                if target == "agent":
                    node.agent = cluster.start_component(name, process.argv[1:], lambda: socket_answers(node.socket),
                                                         timeout=120)
                else:
                    cluster.start_component(name, process.argv[1:], lambda: http_ok_plain(process.argv), timeout=120)
        except Exception as failure:  # a part that does not come back is the soak's finding, said in the report
            error = str(failure)[:500]
        self.api_down.clear()
        recovery = None if error else time.monotonic() - at
        self.kills.append(Kill(target=target, at=round(at - self.began, 1), down=round(down, 1),
                               recovery=None if recovery is None else round(recovery, 2), error=error))
        outcome = f"back in {recovery:.1f}s" if recovery is not None else f"NOT BACK: {error}"
        print(f"soak: killed {target} at {at - self.began:.0f}s: {outcome}", flush=True)

    # -- the counts --------------------------------------------------------------------------------
    def check(self, label: str) -> list[dict[str, Any]]:
        """Pauses the churn, lets every pod settle, counts what the node holds against the API."""
        self.paused.set()
        try:
            return self._check(label)
        finally:
            self.paused.clear()

    def _check(self, label: str) -> list[dict[str, Any]]:
        if not self.args.no_traffic and not self.stop.is_set():
            # every count probes a server from an allowed and a denied client: a role none has now
            # is given to a new pod (within --pods), which the count waits for like the others
            live = {life.role for life in self.lives.values() if life.deleted is None}
            for role in (SERVER, ALLOWED, DENIED):
                if role not in live and self.counter < self.args.pods:
                    self.create(role)
        def settled() -> bool:
            self.observe()
            pods = self.list_pods()
            if pods is None:
                return False
            self.act()
            return all(p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                       and not self._plug_pending(p) for p in pods.values())

        with contextlib.suppress(AssertionError):
            eventually(settled, "every pod settles", timeout=STUCK, interval=0.5)
        # A difference seen once may still be on its way out: a sandbox whose teardown the kubelet's
        # restart cut short is torn down again when the runtime removes it (its garbage collection,
        # within a minute or two). A leak is what is still there STUCK seconds on; what went by
        # then is reported as transient.
        end = time.monotonic() + STUCK
        leaks, record = self._count(label)
        transient: list[dict[str, Any]] = []
        while leaks and time.monotonic() < end:
            transient = transient or leaks
            time.sleep(5)
            leaks, record = self._count(label)
        gone = [t for t in transient if not any(t["kind"] == x["kind"] and t["what"] == x["what"] for x in leaks)]
        record["transient"] = [f"{t['kind']}: {t['what']} ({t['owner']})" for t in gone] if transient else []
        self.checks.append(record)
        self.traffic.counted["probes"] += record["probes"]["allowed"] + record["probes"]["denied"]
        self.traffic.counted["wrong"] += record["probes"]["wrong"]
        self.sample_rss(f"count {label}")
        self.leaks.extend({**leak, "check": label} for leak in leaks)
        print(f"soak: check {label}: {record}", flush=True)
        for leak in leaks:
            print(f"soak:   LEAK {leak['kind']}: {leak['what']} ({leak['owner']})", flush=True)
        return leaks

    def _count(self, label: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        node = self.node
        assert node is not None
        leaks: list[dict[str, Any]] = []
        pods = self.list_pods() or {}
        now = time.monotonic()
        for name, pod in pods.items():
            life = self.lives.get(name)
            since = now - (life.deleted or life.created) if life else 0
            state = "Terminating" if pod["metadata"].get("deletionTimestamp") else pod["status"].get("phase")
            if state != "Running" and since > STUCK:
                leaks.append({"kind": "stuck pod", "what": name, "owner": f"pod {self.ns}/{name} {state} "
                              f"for {since:.0f}s", "detail": pod["status"].get("conditions")})
        running = {n: p for n, p in pods.items() if p["status"].get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp")}
        # what the API says should exist: one attachment per network a running pod asks for
        wanted: dict[str, set[str]] = {net.tag: set() for net in self.nets}
        for name, pod in running.items():
            for entry in json.loads(pod["metadata"].get("annotations", {}).get(NETWORKS, "[]")):
                tag = next((n.tag for n in self.nets if n.podnetwork == entry.get("podNetworkName")), None)
                if tag:
                    wanted[tag].add(name)
        for net in self.nets:
            if net.kind == "macvlan":
                continue  # macvlan links live in the pods only: counted by network-status below
            ports = links_on(net.bridge)
            if len(ports) != len(wanted[net.tag]):
                leaks.append({"kind": "host veth", "what": f"{len(ports)} ports on {net.bridge}",
                              "owner": f"PodNetwork {net.podnetwork}: {len(wanted[net.tag])} running pods ask for it",
                              "detail": ports})
        default_ports = links_on(node.bridge)
        if len(default_ports) != len(running):
            leaks.append({"kind": "host veth", "what": f"{len(default_ports)} ports on {node.bridge}",
                          "owner": f"the default network: {len(running)} running pods", "detail": default_ports})
        for net in [n for n in self.nets if n.kind != "static"]:
            leases = lease_files(net.lease_dir)
            if len(leases) != len(wanted[net.tag]):
                leaks.append({"kind": "host-local lease", "what": f"{len(leases)} leases in {net.lease_dir}",
                              "owner": f"PodNetwork {net.podnetwork}: {len(wanted[net.tag])} running pods",
                              "detail": sorted(leases)})
        default_leases = lease_files(LEASES / node.network_name)
        if len(default_leases) != len(running):
            leaks.append({"kind": "host-local lease", "what": f"{len(default_leases)} default-network leases",
                          "owner": f"the default network: {len(running)} running pods",
                          "detail": sorted(default_leases)})
        sandboxes = ready_sandboxes(node, self.sandbox_info)
        for sandbox_id, info in sandboxes.items():
            if info.get("netns"):
                self.netns_seen[info["netns"]] = sandbox_id
        uids = {p["metadata"]["uid"] for p in running.values()}
        for path in node.cache_dir.glob("*.jsonl"):
            record = last_record(path)
            cid = path.name.removesuffix(".jsonl")
            if cid not in sandboxes:
                leaks.append({"kind": "agent cache record", "what": str(path),
                              "owner": f"pod {record.get('pod_namespace')}/{record.get('pod_name')} "
                                       f"(no ready sandbox {cid[:12]})", "detail": None})
        for cid, info in sandboxes.items():
            if info["uid"] not in uids:
                leaks.append({"kind": "sandbox", "what": cid[:12],
                              "owner": f"pod {info['namespace']}/{info['name']} uid {info['uid']} (not running "
                                       "in the API)", "detail": None})
        for netns, cid in self.netns_seen.items():
            if cid not in sandboxes and Path(netns).exists():
                leaks.append({"kind": "netns file", "what": netns, "owner": f"sandbox {cid[:12]} (gone)",
                              "detail": None})
        extra_tables = nft_tables() - self.tables_before
        for table in sorted(extra_tables):
            # only ours: other sessions on this machine add tables of their own meanwhile
            if self.token in table or "multinet" in table or "podnet" in table:
                leaks.append({"kind": "nftables table", "what": table, "owner": "host", "detail": None})
        by_uid = {info["uid"]: (cid, info) for cid, info in sandboxes.items()}
        for name, pod in running.items():
            found = by_uid.get(pod["metadata"]["uid"])
            if found is None:
                continue
            disagreement = status_disagrees(pod, found[1])
            if disagreement:
                leaks.append({"kind": "network-status", "what": f"pod {self.ns}/{name}",
                              "owner": f"sandbox {found[0][:12]}", "detail": disagreement})
        network = self.net(TRAFFIC_NET).podnetwork
        probes = self.probe(running, sandboxes)
        for probe, answer in probes:
            if not probe.wrong(answer):
                continue
            if probe.kind == "service probe":
                owner = f"Service {self.ns}/{SERVICE} (ClusterIP {probe.host}) on PodNetwork {network}"
            else:
                owner = f"MultiNetworkPolicy {self.ns}/{POLICY} on PodNetwork {network}, server pod {probe.answerers[0]}"
            leaks.append({"kind": probe.kind, "what": probe.said(answer), "owner": owner, "detail": None})
        record = {"label": label, "at": round(time.monotonic() - self.began, 1), "pods": len(pods),
                  "running": len(running), "sandboxes": len(sandboxes), "leaks": len(leaks),
                  "notready_sandboxes": len(crictl(node, "pods", "--state", "notready", "-q").stdout.split()),
                  "probes": {"allowed": sum(1 for p, _ in probes if p.role == ALLOWED),
                             "denied": sum(1 for p, _ in probes if p.role == DENIED),
                             "service": sum(1 for p, _ in probes if p.kind == "service probe"),
                             "wrong": sum(1 for p, a in probes if p.wrong(a))}}
        return leaks, record

    def _plug_pending(self, pod: dict[str, Any]) -> bool:
        """A hot-plug or unplug whose network-status does not show it yet."""
        wanted = {e.get("interfaceName") for e in json.loads(pod["metadata"].get("annotations", {}).get(NETWORKS, "[]"))
                  if e.get("interfaceName")}
        status = json.loads(pod["metadata"].get("annotations", {}).get(STATUS, "[]"))
        shown = {e.get("interface") for e in status if e.get("interface") and e.get("interface") != "eth0"}
        return wanted != shown

    def agent_pid(self) -> int | None:
        node = self.node
        if node is None or node.agent is None or node.agent.popen is None:
            return None
        return node.agent.popen.pid

    def agent_rss(self, pid: int | None = None) -> int | None:
        pid = pid or self.agent_pid()
        if pid is None:
            return None
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def sample_rss(self, label: str, pods: int | None = None) -> None:
        """The agent's RSS now, with its pid: samples of one pid are one process's (a SIGKILLed agent
        starts afresh)."""
        pid = self.agent_pid()
        rss = self.agent_rss(pid)
        at = time.monotonic() - self.began
        self.rss_samples.append({"label": label, "pods": pods if pods is not None else self.counter,
                                 "at": round(at, 1), "pid": pid, "rss_bytes": rss})
        if label == "pod 100":
            self.rss["pod 100"] = rss
            self.pod_100_at = at

    # -- the traffic -------------------------------------------------------------------------------
    def probe(self, running: dict[str, dict[str, Any]],
              sandboxes: dict[str, dict[str, Any]]) -> list[tuple[Probe, str | None]]:
        """Every probe of `probe_plan`, from each client pod's network namespace (clients at once);
        a client whose sandbox is not ready, or went meanwhile, is left out."""
        plan = probe_plan(running, self.net(TRAFFIC_NET).podnetwork, self.traffic.cluster_ip)
        pid_of = {info["uid"]: info.get("pid") for info in sandboxes.values()}
        by_client: dict[str, list[Probe]] = {}
        for probe in plan:
            by_client.setdefault(probe.client, []).append(probe)
        results: list[tuple[Probe, str | None]] = []

        def run_client(client: str, probes: list[Probe]) -> None:
            pid = pid_of.get(running[client]["metadata"]["uid"])
            answers = probe_from(pid, probes) if pid else None
            if answers is not None:
                with self.lock:
                    results.extend(zip(probes, answers, strict=True))

        workers = [threading.Thread(target=run_client, args=item, daemon=True) for item in by_client.items()]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(150)
        return results

    def probing(self) -> None:
        """Probes every `--probe-every` seconds during the churn; what it saw goes to the report (a wrong
        answer while pods come and go is not a failure: the counts judge settled pods)."""
        tally = self.traffic.churn
        while not self.stop.wait(self.args.probe_every):
            if self.paused.is_set():
                continue
            pods = self.list_pods()
            if pods is None or self.node is None:
                continue
            running = {n: p for n, p in pods.items() if p["status"].get("phase") == "Running"
                       and not p["metadata"].get("deletionTimestamp")}
            for probe, answer in self.probe(running, ready_sandboxes(self.node, self.sandbox_info)):
                tally["probes"] += 1
                tally[f"{probe.role}_{'unanswered' if answer is None else 'answered'}"] += 1
                if probe.wrong(answer) and len(self.traffic.churn_wrong) < 20:
                    self.traffic.churn_wrong.append(f"at {time.monotonic() - self.began:.0f}s: {probe.said(answer)}")

    # -- the whole run -----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.setup()
        self.began = time.monotonic()
        churn = threading.Thread(target=self._guard(self.churn), name="churn", daemon=True)
        faults = threading.Thread(target=self._guard(self.faults), name="faults", daemon=True)
        probing = threading.Thread(target=self._guard(self.probing), name="probing", daemon=True)
        self.threads = [churn, faults, probing]
        churn.start()
        faults.start()
        if not self.args.no_traffic:
            probing.start()
        deadline = self.began + self.args.minutes * 60 if self.args.minutes else None
        next_check = time.monotonic() + self.args.check_every
        while churn.is_alive():
            churn.join(1)
            if deadline and time.monotonic() > deadline:
                break
            if time.monotonic() >= next_check and churn.is_alive():
                self.check(f"at {time.monotonic() - self.began:.0f}s")
                next_check = time.monotonic() + self.args.check_every
        self.stop.set()
        churn.join(60)
        faults.join(180)
        if probing.is_alive():
            probing.join(150)
        elapsed = time.monotonic() - self.began
        self.rss["end"] = self.agent_rss()
        self.sample_rss("end")
        # every pod deleted and gone, then nothing of them may be left on the node
        for life in self.lives.values():
            if life.deleted is None:
                life.delete_at = time.monotonic()
        def all_gone() -> bool:
            self.act()
            self.observe()
            return all(life.gone for life in self.lives.values())

        with contextlib.suppress(AssertionError):
            eventually(all_gone, "every soak pod is gone", timeout=STUCK, interval=0.5)
        self.check("final")
        return self.report(elapsed)

    def _guard(self, body: Callable[[], None]) -> Callable[[], None]:
        def guarded() -> None:
            try:
                body()
            except Exception as error:
                print(f"soak: {body.__name__} failed: {error!r}", flush=True)
                self.leaks.append({"kind": "soak error", "what": body.__name__, "owner": "the soak",
                                   "detail": repr(error)[:500], "check": "run"})
                self.stop.set()
        return guarded

    def report(self, elapsed: float) -> dict[str, Any]:
        starts = [life.running - life.created for life in self.lives.values() if life.running]
        deletes = [life.gone - life.deleted for life in self.lives.values() if life.gone and life.deleted]
        counts: dict[str, int] = {}
        for leak in self.leaks:
            counts[leak["kind"]] = counts.get(leak["kind"], 0) + 1
        return {
            "command": " ".join(sys.argv),
            "pods": self.counter, "minutes": round(elapsed / 60, 2),
            "pods_per_minute": round(self.counter / (elapsed / 60), 1) if elapsed else None,
            "hot_plugged": sum(1 for life in self.lives.values() if life.plugged),
            "create_to_running_s": {f"p{p}": _round(percentile(starts, p)) for p in (50, 95, 99)},
            "delete_to_gone_s": {f"p{p}": _round(percentile(deletes, p)) for p in (50, 95, 99)},
            "never_running": sum(1 for life in self.lives.values() if life.running is None),
            "kills": [asdict(k) for k in self.kills],
            "kills_not_recovered": sum(1 for k in self.kills if k.recovery is None),
            "checks": self.checks,
            "leaks": self.leaks,
            "leak_counts": counts,
            "agent_rss_bytes": self.rss,
            "agent_rss_samples": self.rss_samples,
            "agent_rss_growth": rss_growth(self.rss_samples),
            "spared": list(self.args.spare),
            "traffic": asdict(self.traffic),
            # a SIGKILLed agent starts afresh: its RSS at the end is then that of the last one
            "agent_kills_after_pod_100": None if self.pod_100_at is None else sum(
                1 for k in self.kills if k.target == "agent" and k.at > self.pod_100_at),
        }


def kill_schedule(duration: float, kills: int, rng: random.Random) -> list[float]:
    """When each kill is due, in seconds from the start: one in each of `kills` equal slots of
    `duration`, at a random point of the slot's middle half (so two kills are never closer than half
    a slot)."""
    slot = duration / kills if kills else 0.0
    return [(i + rng.uniform(0.25, 0.75)) * slot for i in range(kills)]


def rss_growth(samples: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The agent's RSS from its sample at pod 100 to its last sample at a hundred pods, when one
    process (one pid) took both: what issue 34 bounds (5 MB from pod 100 to pod 1,000)."""
    first = next((s for s in samples if s["label"] == "pod 100" and s["rss_bytes"] is not None), None)
    if first is None:
        return None
    same = [s for s in samples if s["label"].startswith("pod ") and s["pid"] == first["pid"]
            and s["rss_bytes"] is not None]
    last = max(same, key=lambda s: s["pods"])
    return {"pid": first["pid"], "from": first["label"], "to": last["label"], "from_bytes": first["rss_bytes"],
            "to_bytes": last["rss_bytes"], "bytes": last["rss_bytes"] - first["rss_bytes"]}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# -- what the node holds ---------------------------------------------------------------------------

def run(argv: Sequence[str]) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, text=True)


def links_on(master: str) -> list[str]:
    out = subprocess.run(["ip", "-j", "link", "show", "master", master], capture_output=True, text=True)
    if out.returncode != 0:
        return []
    return [link["ifname"] for link in json.loads(out.stdout or "[]")]


def lease_files(folder: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    return {p.name for p in folder.iterdir() if p.name != "lock" and not p.name.startswith("last_")}


def nft_tables() -> set[str]:
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True)
    return set(out.stdout.splitlines())


def last_record(path: Path) -> dict[str, Any]:
    try:
        lines = path.read_text().splitlines()
        return json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return {}


def crictl(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    crictl_bin = shutil.which("crictl") or str(node.dir.parent / "bin" / "crictl")
    return subprocess.run([crictl_bin, "--runtime-endpoint", f"unix://{node.containerd_socket}", "--timeout", "10s",
                           *args], capture_output=True, text=True)


def ready_sandboxes(node: Node, known: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """The node's ready sandboxes: their pod, its UID, the pid and netns of each. `known` keeps what was
    inspected of a sandbox (its pid and netns stay while it is ready: one `crictl inspectp` each)."""
    out = crictl(node, "pods", "--state", "ready", "-o", "json")
    if out.returncode != 0:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for item in json.loads(out.stdout).get("items", []):
        if known is not None and item["id"] in known and known[item["id"]].get("pid"):
            found[item["id"]] = known[item["id"]]
            continue
        meta = item["metadata"]
        inspected = crictl(node, "inspectp", item["id"])
        info: dict[str, Any] = {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                                "pid": None, "netns": None}
        if inspected.returncode == 0:
            details = json.loads(inspected.stdout).get("info", {})
            info["pid"] = details.get("pid")
            for namespace in details.get("runtimeSpec", {}).get("linux", {}).get("namespaces", []):
                if namespace.get("type") == "network":
                    info["netns"] = namespace.get("path")
        found[item["id"]] = info
        if known is not None:
            known[item["id"]] = info
    if known is not None:
        for gone in set(known) - set(found):
            known.pop(gone, None)
    return found


def status_disagrees(pod: dict[str, Any], sandbox: dict[str, Any]) -> str | None:
    """What network-status says that the sandbox's interfaces do not show, or the other way."""
    if not sandbox.get("pid"):
        return None
    out = subprocess.run(["nsenter", "-t", str(sandbox["pid"]), "-n", "ip", "-j", "addr"], capture_output=True,
                         text=True)
    if out.returncode != 0:
        return f"nsenter: {out.stderr.strip()}"
    seen = {link["ifname"]: {a["local"] for a in link.get("addr_info", []) if a.get("scope") == "global"}
            for link in json.loads(out.stdout) if link["ifname"] != "lo"}
    status = json.loads(pod["metadata"].get("annotations", {}).get(STATUS, "[]"))
    shown = {e["interface"]: {ip.split("/")[0] for ip in e.get("ips", [])} for e in status if e.get("interface")}
    if not status:
        shown = {}
        if set(seen) == {"eth0"}:
            return None  # a pod without networks: the default network alone, no status needed
    if seen != shown:
        return f"in the sandbox {sorted(seen.items())}, in network-status {sorted(shown.items())}"
    return None


def kubelet_healthy(node: Node) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{node.healthz_port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def http_ok(cluster: Cluster, path: str) -> bool:
    assert cluster.api is not None
    try:
        code, _ = cluster.api.request("GET", path)
    except httpx.HTTPError:
        return False
    return code == 200


def http_ok_plain(argv: Sequence[str]) -> bool:
    """The operator's metrics endpoint answers (it serves once the operator runs)."""
    port = argv[list(argv).index("--metrics-port") + 1]
    return answers(f"http://127.0.0.1:{port}/metrics")


def socket_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False




@contextlib.contextmanager
def terminated_on_sigterm() -> Iterator[None]:
    def raise_interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=0, help="run this long (0: until --pods were made)")
    parser.add_argument("--pods", type=int, default=100, help="pods to create in all (with --minutes: at most)")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs, spread over the run")
    parser.add_argument("--rate", type=float, default=1.0, help="pods created a second")
    parser.add_argument("--population", type=int, default=12, help="at most this many pods at once")
    parser.add_argument("--lifetime", type=float, nargs=2, default=(3.0, 15.0), help="seconds a pod lives Running")
    parser.add_argument("--hotplug", type=float, default=0.1, help="share of pods that get a network hot-plugged")
    parser.add_argument("--check-every", type=float, default=180, help="seconds between counts")
    parser.add_argument("--spare", action="append", choices=TARGETS, default=[],
                        help="a part the kills leave alone (repeat for more): --spare agent keeps one agent "
                             "process over the whole run, whose RSS the report then follows")
    parser.add_argument("--probe-every", type=float, default=10,
                        help="seconds between the traffic's probes during the churn")
    parser.add_argument("--no-traffic", action="store_true",
                        help="no servers, Service, policy or probes (pods with networks only)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--report", type=Path, default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    if args.kills and set(args.spare) >= set(TARGETS):
        parser.error("--spare names every part: nothing is left to kill (use --kills 0 for no kills)")
    if args.minutes:
        args.pods = max(args.pods, 10**6) if args.pods == 100 else args.pods
        args.kills = args.kills if args.kills != 10 else max(10, int(args.minutes * 2))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    soak = Soak(args)
    result: dict[str, Any] | None = None
    try:
        with terminated_on_sigterm():
            result = soak.run()
    except KeyboardInterrupt:
        print("soak: interrupted: cleaning up", flush=True)
        return 130
    finally:
        # a second SIGTERM (a supervisor's, a CI timeout's) must not leave half of it behind
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        soak.teardown()
        print("soak: cleaned up", flush=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    leaked = len(result["leaks"]) + result["kills_not_recovered"]
    return 1 if leaked else 0


if __name__ == "__main__":
    sys.exit(main())
