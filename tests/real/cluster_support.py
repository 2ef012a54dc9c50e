"""A real Kubernetes for the real tier: the kit's v1.36 control plane, kubelet nodes, our components.

Where the binaries come from (`binaries`): `PODNETWORK_K8S_DIR`, a folder holding
kube-apiserver, etcd and kubectl (and kube-scheduler, kube-controller-manager, kubelet,
crictl where the tests need them), which take the place of the kit's binaries of the same
name; else the kit's own, unpacked once from `../shared/k8s` beside the checkout (or
`PODNETWORK_K8S_KIT`) into `/var/tmp/podnetwork-k8s-kit`. The kit's scripts (`start.sh`,
`node-up.sh`, `node-down.sh`, `stop.sh`) run the processes either way.

Each session gets a folder of its own (`REALK8S`, what the kit's scripts write into: PKI,
etcd's data, logs, the nodes' containerd and kubelet) and ports the kernel is not handing out
(`free_port`), so two runs on one machine do not meet; its nodes have names of their own, and
with them their own cgroup roots; its pods' default network is a bridge and a subnet of its own.
Everything is stopped and removed at the end (`Cluster.stop`), also when a test failed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.unit.ports_support import free_port

REPO = Path(__file__).resolve().parents[2]
KIT_SOURCE = Path(os.environ.get("PODNETWORK_K8S_KIT", REPO.parent / "shared" / "k8s"))
KIT_DIR = Path(os.environ.get("PODNETWORK_K8S_KIT_DIR", "/var/tmp/podnetwork-k8s-kit"))
BINARIES = ("kube-apiserver", "etcd", "kubectl", "kube-scheduler", "kube-controller-manager",
            "kubelet", "crictl")
HOW_TO_GET = ("the real-cluster tier needs Kubernetes binaries: the kit in ../shared/k8s beside the "
              "checkout (or PODNETWORK_K8S_KIT=DIR), or PODNETWORK_K8S_DIR=DIR holding kube-apiserver, "
              "etcd and kubectl (docs/testing.md, 'The real tier')")
PODNETWORK = REPO / ".venv" / "bin" / "podnetwork"


class KitMissing(RuntimeError):
    """What the real tier cannot run without, said so that the reader can get it."""


def _unpack_kit() -> Path:
    unpack = KIT_SOURCE / "unpack"
    if not unpack.exists():
        raise KitMissing(f"no kit at {KIT_SOURCE}: {HOW_TO_GET}")
    KIT_DIR.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{KIT_DIR}.lock", "w") as lock:  # two sessions unpacking at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([str(unpack), str(KIT_DIR)], check=True, capture_output=True, text=True)
    return KIT_DIR


def binaries() -> tuple[Path, dict[str, Path]]:
    """The kit's folder (its scripts) and each binary's path, PODNETWORK_K8S_DIR's first."""
    kit = _unpack_kit()
    found = {name: kit / "bin" / name for name in BINARIES if (kit / "bin" / name).exists()}
    own = os.environ.get("PODNETWORK_K8S_DIR")
    if own:
        folder = Path(own)
        if not folder.is_dir():
            raise KitMissing(f"PODNETWORK_K8S_DIR={own} is not a directory: {HOW_TO_GET}")
        found.update({name: folder / name for name in BINARIES if (folder / name).exists()})
    missing = [n for n in ("kube-apiserver", "etcd", "kubectl") if n not in found]
    if missing:
        raise KitMissing(f"missing {', '.join(missing)}: {HOW_TO_GET}")
    return kit, found


def node_prerequisites() -> str | None:
    """Why pods cannot run here, or None."""
    if os.geteuid() != 0:
        return "a kubelet node needs root"
    for tool, package in (("containerd", "containerd"), ("runc", "runc"), ("ip", "iproute2"),
                          ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"a kubelet node needs {tool} (apt-get install -y {package})"
    if not Path("/usr/lib/cni/bridge").exists():
        return "a kubelet node needs the CNI plugins (apt-get install -y containernetworking-plugins)"
    return None


@dataclass
class Process:
    """One of our components, started from the checkout; its log in the session folder."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str]) -> None:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=dict(env), start_new_session=True)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class ApiError(AssertionError):
    def __init__(self, code: int, body: Any, what: str) -> None:
        self.code, self.body = code, body
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{what}: HTTP {code}: {message}")


class Api:
    """The API server over real HTTPS as cluster-admin (or as another identity's certificate):
    paths as the REST API spells them, so a test says exactly which request the server sees."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path) -> None:
        self.server = server
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        self.http = httpx.Client(base_url=server, verify=context, timeout=30)

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                params: Mapping[str, str] | None = None) -> tuple[int, Any]:
        headers = {"Content-Type": content_type} if body is not None else {}
        response = self.http.request(method, path, content=None if body is None else json.dumps(body),
                                     headers=headers, params=params)
        try:
            data: Any = response.json()
        except ValueError:
            data = response.text
        return response.status_code, data

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        code, data = self.request(method, path, body, **kw)
        if code >= 300:
            raise ApiError(code, data, f"{method} {path}")
        return data

    def get(self, path: str) -> Any:
        return self.ok("GET", path)

    def find(self, path: str) -> Any | None:
        code, data = self.request("GET", path)
        if code == 404:
            return None
        if code >= 300:
            raise ApiError(code, data, f"GET {path}")
        return data

    def create(self, path: str, body: Any) -> Any:
        return self.ok("POST", path, body)

    def merge_patch(self, path: str, patch: Any) -> Any:
        return self.ok("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        code, data = self.request("DELETE", path)
        if code >= 300 and not (missing_ok and code == 404):
            raise ApiError(code, data, f"DELETE {path}")

    def close(self) -> None:
        self.http.close()


def eventually(check: Callable[[], Any], what: str, timeout: float = 30.0, interval: float = 0.25) -> Any:
    """`check()`'s first truthy value within `timeout` seconds; else the test fails saying `what`
    and the last value or error seen."""
    end = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except (AssertionError, httpx.HTTPError, KeyError, IndexError, ValueError) as error:
            last = error
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout:.0f}s: {what} (last seen: {last!r})")
        time.sleep(interval)


@dataclass
class Node:
    """A kubelet node of the session: containerd, kubelet and (once `install_agent` ran) our agent."""

    name: str
    dir: Path
    kubelet_port: int
    healthz_port: int
    bridge: str
    subnet: str
    network_name: str
    agent: Process | None = None
    #: the runtime's CNI dirs when not the node's own folder's (a DaemonSet's fixed hostPaths)
    cni_conf_dir: Path | None = None
    cni_bin_dir: Path | None = None
    #: the node's own init (`init_process`), when its containerd and kubelet run in a PID and mount
    #: namespace of their own
    init: subprocess.Popen[bytes] | None = None

    def enter(self) -> list[str]:
        """What runs a command among the node's processes: nothing for a node in the machine's
        namespaces, else nsenter into its own (the node's init's PID and mount namespaces)."""
        if self.init is None:
            return []
        return ["nsenter", "-t", str(_child_of(self.init.pid)), "-p", "-m", "--"]

    @property
    def conf_dir(self) -> Path:
        return self.cni_conf_dir or self.dir / "net.d"

    @property
    def bin_dir(self) -> Path:
        return self.cni_bin_dir or self.dir / "cni" / "bin"

    @property
    def cache_dir(self) -> Path:
        return self.dir / "agent-cache"

    @property
    def socket(self) -> Path:
        return self.dir / "run" / "agent.sock"

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "run" / "containerd.sock"


@dataclass
class Cluster:
    """One real cluster for the session (`start`, `add_node`, `stop`)."""

    kit: Path
    bins: dict[str, Path]
    root: Path
    ports: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    components: dict[str, Process] = field(default_factory=dict)
    suffix: str = field(default_factory=lambda: secrets.token_hex(2))
    api: Api | None = None

    # -- the processes ------------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        # nor make's variables: under `make test`, a `make` the test runs would print
        # "Entering directory" lines a user's shell does not
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("KUBECONFIG", "PYTEST_", "COV_")) and k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        env.update(REALK8S=str(self.root), ETCD_PORT=str(self.ports["etcd"]),
                   APISERVER_PORT=str(self.ports["apiserver"]), SCHEDULER_PORT=str(self.ports["scheduler"]),
                   KCM_PORT=str(self.ports["kcm"]), KUBECONFIG=str(self.kubeconfig))
        env.update(extra)
        return env

    def script(self, name: str, *args: str, timeout: float = 180, enter: Sequence[str] = (), **extra: str) -> str:
        proc = subprocess.run([*enter, str(self.kit / name), *args], env=self.env(**extra), capture_output=True,
                              text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                               f"{proc.stderr[-3000:]}")
        return proc.stdout

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bins["kubectl"]), "--kubeconfig", str(self.kubeconfig), *args],
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def apply(self, objects: Sequence[Mapping[str, Any]] | str, *args: str) -> None:
        text = objects if isinstance(objects, str) else yaml.safe_dump_all(list(objects))
        self.kubectl("apply", "-f", "-", *args, input=text)

    def start(self, *, scheduler_config: Path | None = None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        bindir = self.root / "bin"
        bindir.mkdir(exist_ok=True)
        for name, path in self.bins.items():
            (bindir / name).symlink_to(path)
        # start.sh asks for the kit's one binary by name; every program is its own file here
        (bindir / "hyperkube").symlink_to(self.bins["kube-apiserver"])
        for part in ("images", "multus"):
            if (self.kit / part).exists():
                (self.root / part).symlink_to(self.kit / part)
        self.ports.update(etcd=free_port(), apiserver=free_port(), scheduler=free_port(), kcm=free_port())
        while True:  # etcd's peer port is the client port + 1
            peer = self.ports["etcd"] + 1
            with contextlib.suppress(OSError), _bound(peer):
                break
            self.ports["etcd"] = free_port()
        extra = {"START_KCM": "1" if "kube-controller-manager" in self.bins else "0"}
        if scheduler_config is not None:
            extra["SCHED_CONFIG"] = str(scheduler_config)
        self.script("start.sh", **extra)
        pki = self.root / "pki"
        self.api = Api(self.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
        # pods need the default ServiceAccount, which the controller manager makes
        if extra["START_KCM"] == "1":
            eventually(lambda: self.api and self.api.find("/api/v1/namespaces/default/serviceaccounts/default"),
                       "the default ServiceAccount exists", timeout=60)

    def start_component(self, name: str, argv: Sequence[str], ready: Callable[[], Any], *,
                        timeout: float = 60) -> Process:
        process = Process(name, [str(PODNETWORK), *argv], self.root / "run" / f"{name}.log")
        self.components[name] = process
        process.start(self.env())

        def up() -> Any:
            if not process.alive():
                raise RuntimeError(f"{name} exited ({process.popen and process.popen.returncode}):\n"
                                   f"{process.tail()}")
            return ready()

        try:
            eventually(up, f"{name} is ready", timeout=timeout)
        except AssertionError as error:
            raise AssertionError(f"{error}\n--- {name}'s log:\n{process.tail()}") from None
        return process

    def restart_component(self, name: str, ready: Callable[[], Any], *, timeout: float = 60) -> Process:
        """`name` stopped if it runs, then started again with its own command line (its log goes on)."""
        previous = self.components[name]
        previous.stop()
        return self.start_component(name, previous.argv[1:], ready, timeout=timeout)

    # -- nodes ---------------------------------------------------------------------------------------
    def add_node(self, index: int, *, conf_dir: Path | None = None, bin_dir: Path | None = None,
                 own_init: bool = False) -> Node:
        """A kubelet node, Ready; its runtime reads CNI configurations from `conf_dir` and plugins from
        `bin_dir` (the node's own folder's by default). With `own_init`, its containerd and kubelet run
        under an init of the node's own (`init_process`): what a `hostPID: true` pod sees as PID 1."""
        name = f"real{self.suffix}-n{index}"
        octet = 100 + (int(self.suffix, 16) + index) % 150
        node = Node(name=name, dir=self.root / f"node-{name}", kubelet_port=free_port(), healthz_port=free_port(),
                    bridge=f"pnr{self.suffix}n{index}", subnet=f"10.251.{octet}.0/24",
                    network_name=f"pnreal-{self.suffix}-n{index}", cni_conf_dir=conf_dir, cni_bin_dir=bin_dir)
        self.nodes[name] = node
        # the pods' own default network: a bridge, a subnet and a lease directory of this session's
        node.conf_dir.mkdir(parents=True, exist_ok=True)
        (node.conf_dir / "10-default.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": node.network_name, "plugins": [
                {"type": "bridge", "bridge": node.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": node.subnet}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}))
        if own_init:
            node.init = init_process()
        self.script("node-up.sh", enter=node.enter(), NODE_NAME=name, DEFAULT_CNI_CONF="0",
                    CNI_CONF_DIR=str(node.conf_dir), CNI_BIN_DIR=str(node.bin_dir),
                    KUBELET_PORT=str(node.kubelet_port), KUBELET_HEALTHZ_PORT=str(node.healthz_port))
        assert self.api is not None
        eventually(lambda: ready(self.api.get(f"/api/v1/nodes/{name}")) if self.api else None,
                   f"node {name} is Ready", timeout=60)
        return node

    def install_agent(self, node: Node, *extra: str) -> Process:
        """Our agent on `node`, installed as a user installs it: the shim into the node's CNI bin dir,
        its conflist first in the node's conf dir (docs/agent.md)."""
        node.socket.parent.mkdir(parents=True, exist_ok=True)
        argv = ["cni-agent", "--install", "--socket", str(node.socket), "--cni-bin-dir", str(node.bin_dir),
                "--cni-conf-dir", str(node.conf_dir), "--cache-dir", str(node.cache_dir),
                "--node-name", node.name, "--kubeconfig", str(self.kubeconfig),
                "--metrics-port", str(free_port()), "--metrics-host", "127.0.0.1",
                # where `podnetwork dra-driver` on this node records the claims it prepared (docs/dra.md)
                "--dra-state-dir", str(node.dir / "kubelet" / "root" / "plugins" / "dra.multinetwork.x-k8s.io"),
                *extra]
        conflists = lambda: sorted(p.name for p in node.conf_dir.glob("*.conflist"))  # noqa: E731
        before = set(conflists())
        process = self.start_component(f"agent-{node.name}", argv,
                                       lambda: (set(conflists()) - before) and node.socket.exists())
        node.agent = process
        first = conflists()[0]
        assert first not in before, f"the agent's conflist is not the runtime's first: {conflists()}"
        return process

    def remove_node(self, node: Node) -> None:
        with contextlib.suppress(Exception):
            self.script("node-down.sh", "--wipe", enter=node.enter(), NODE_NAME=node.name, timeout=120,
                        KUBELET_PORT=str(node.kubelet_port))
        if node.agent is not None:
            node.agent.stop()
        if node.init is not None:  # its init's end ends whatever of the node still ran (--kill-child)
            node.init.kill()
            node.init.wait(10)
        subprocess.run(["ip", "link", "del", node.bridge], capture_output=True)
        shutil.rmtree(f"/var/lib/cni/networks/{node.network_name}", ignore_errors=True)
        for hierarchy in Path("/sys/fs/cgroup").glob("*/"):
            with contextlib.suppress(OSError):
                _remove_cgroup(hierarchy / node.name)
        self.nodes.pop(node.name, None)

    def stop(self) -> None:
        for node in list(self.nodes.values()):
            self.remove_node(node)
        for process in reversed(list(self.components.values())):
            process.stop()
        if self.api is not None:
            self.api.close()
        with contextlib.suppress(Exception):
            self.script("stop.sh", "--wipe", timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tails(self) -> str:
        parts = [f"--- {p.name}:\n{p.tail(15)}" for p in self.components.values()]
        return "\n".join(parts)


@contextlib.contextmanager
def _bound(port: int) -> Iterator[None]:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        yield


def ready(obj: Mapping[str, Any] | None) -> bool:
    """Whether the object (a node, a pod, a PodNetwork) has the condition Ready True."""
    conditions = (obj or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


#: The node's init: reaps the daemons node-up.sh leaves to it, as an init does.
_REAPER = """import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(1)
"""


def init_process() -> subprocess.Popen[bytes]:
    """An init of a node's own: PID 1 of a new PID namespace, in a mount namespace of its own with
    its own /proc, every other mount kept as the machine has it (`--propagation unchanged`: the
    shared /run/netns stays shared, so the network namespaces the node's runtime pins there
    appear on the machine too). The machine's own PID 1 may be unreadable even to root (a VM's
    agent holding capabilities no other process has), which a `hostPID: true` pod that reads
    /proc/1 (the CNI agent's check-host) cannot tell from a broken node; a node's init is
    readable by its root, as on any node. `unshare --kill-child`: when the returned process is
    killed, the init is, and with it every process of the namespace."""
    init = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation",
                             "unchanged", sys.executable, "-c", _REAPER], stdin=subprocess.DEVNULL,
                            start_new_session=True)
    eventually(lambda: _child_of(init.pid), "the node's init started", timeout=10)
    return init


def _child_of(pid: int) -> int:
    """The one child of `pid` (unshare's: the namespace's init), 0 while there is none."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0]) if children else 0


def _remove_cgroup(path: Path) -> None:
    if not path.is_dir():
        return
    for child in path.iterdir():
        if child.is_dir():
            _remove_cgroup(child)
    path.rmdir()


def new_root() -> Path:
    """The session's folder: short (containerd's and the agent's sockets live under it)."""
    return Path(tempfile.mkdtemp(prefix="pnreal-", dir="/var/tmp"))


def scheduler_config(path: Path, kubeconfig: Path, extender_port: int) -> Path:
    """kube-scheduler's configuration: the cluster's default scheduler with our extender, as
    deploy/scheduler/kube-scheduler-config.yaml registers it (docs/scheduler-extender.md)."""
    shipped = yaml.safe_load((REPO / "deploy" / "scheduler" / "kube-scheduler-config.yaml").read_text())
    (extender,) = shipped["extenders"]
    config = {
        "apiVersion": shipped["apiVersion"], "kind": shipped["kind"],
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "default-scheduler"}],
        "extenders": [{**extender, "urlPrefix": f"http://127.0.0.1:{extender_port}"}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


BUSYBOX = "docker.io/local/busybox:1"


def pod_manifest(name: str, *, networks: Sequence[Mapping[str, Any]] | None = None,
                 command: Sequence[str] = ("sleep", "3600"), node: str | None = None,
                 annotations: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
                 **spec: Any) -> dict[str, Any]:
    """A busybox pod of the kit's local image: no pull, and no grace period to wait out on delete
    (`sleep` as PID 1 ignores SIGTERM, so a grace period would be waited for in full)."""
    meta: dict[str, Any] = {"name": name, "annotations": dict(annotations or {}), "labels": dict(labels or {})}
    if networks is not None:
        meta["annotations"]["multinetwork.x-k8s.io/networks"] = json.dumps(list(networks))
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                 "command": list(command)}], **spec}}
    if node is not None:
        body["spec"]["nodeName"] = node
    return body


def wait_phase(api: Api, ns: str, name: str, phase: str = "Running", timeout: float = 60) -> dict[str, Any]:
    """The pod once it reached `phase`; fails with its conditions and last Event otherwise."""
    def reached() -> dict[str, Any] | None:
        pod: dict[str, Any] = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return pod if pod.get("status", {}).get("phase") == phase else None

    try:
        result: dict[str, Any] = eventually(reached, f"pod {ns}/{name} is {phase}", timeout=timeout)
        return result
    except AssertionError as error:
        events = api.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
        said = [f"{e.get('reason')}: {e.get('message')}" for e in events
                if e.get("involvedObject", {}).get("name") == name]
        raise AssertionError(f"{error}; its Events: {said[-5:]}") from None


def answers(url: str) -> bool:
    """Whether GET `url` answers 200 now."""
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_control_plane(cluster: Cluster) -> None:
    """The control plane with our extender registered in kube-scheduler (at a port chosen now, where
    `start_extender` serves it), and this project's CRDs and admission policies from `crds/`."""
    cluster.ports["extender"] = free_port()
    config = scheduler_config(cluster.root / "scheduler-config.yaml", cluster.root / "scheduler.kubeconfig",
                              cluster.ports["extender"])
    cluster.root.mkdir(parents=True, exist_ok=True)
    cluster.start(scheduler_config=config)
    cluster.kubectl("apply", "-f", str(REPO / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def start_extender(cluster: Cluster) -> Process:
    """The scheduler extender where kube-scheduler calls it, ready once its cache is synced."""
    probe = free_port()
    return cluster.start_component("extender", [
        "scheduler-extender", "--host", "127.0.0.1", "--port", str(cluster.ports["extender"]),
        "--probe-host", "127.0.0.1", "--probe-port", str(probe), "--kubeconfig", str(cluster.kubeconfig)],
        lambda: answers(f"http://127.0.0.1:{probe}/readyz"))


def start_controller_and_bridge(cluster: Cluster) -> None:
    """Our two operators as a user runs them outside a pod: each serving its webhooks on loopback and
    registering them there (`--manage-webhooks`), with the use permission enforced."""
    api = cluster.api
    assert api is not None
    webhooks = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    for name, extra, is_up in (
            ("controller", [], lambda: api.find(f"{webhooks}/podnetwork") and ready(
                api.find("/apis/multinetwork.x-k8s.io/v1alpha1/podnetworks/default"))),
            ("bridge", ["--webhook"], lambda: api.find(f"{webhooks}/podnetwork-bridge"))):
        port = free_port()
        cluster.start_component(name, [
            name, *extra, "--manage-webhooks", "--webhook-host", "127.0.0.1", "--webhook-port", str(port),
            "--webhook-url", f"https://127.0.0.1:{port}", "--enforce-use-permission",
            "--metrics-host", "127.0.0.1", "--metrics-port", str(free_port()), "--kubeconfig",
            str(cluster.kubeconfig)], is_up)


def start_operators(cluster: Cluster) -> None:
    """The controller, the bridge and the extender (the real tier's `components`)."""
    start_controller_and_bridge(cluster)
    start_extender(cluster)
