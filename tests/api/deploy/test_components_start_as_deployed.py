"""Each Deployment's and the DaemonSet's container of ours, started as its manifest gives it, turns ready.

A stand-in kubelet (`Kubelet`) reads the rendered workload (`kubectl kustomize`) and runs the
container's command with its arguments as written, its environment (the downward API's
values filled in: the pod's name, the node's name) and as its uid (65532 for the operators,
which has no passwd entry here either), against kmock's API emulator, which stands for the
API server and the service account (its kubeconfig in $KUBECONFIG). Volumes become
directories of the test at the paths the container mounts them (the secrets' TLS files are
made here), and the command's arguments under a mount path are pointed there: that is the
one change to the command. Then the kubelet's readiness probe, as the manifest writes it
(httpGet on the pod's address, which is loopback here, or exec), must pass.

The manifests' fixed ports (9443, 9444, 9090, 8888, 8889) are used as they are, one
component at a time: the controller and the bridge both take 9090, so under `make test`'s
pytest-xdist workers this module's tests form one group, which one worker runs in order
(`GROUPS` in tests/conftest.py). The agent's init container reads the host's /proc/1, which a
test sandbox may hide; tests/unit/agent/test_node_checks.py runs it on a stand-in /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest

from podnetwork.kube import certificates
from tests.api import bridge_api_support as bs
from tests.api import conformance_support as cs
from tests.api.kube_emulator import write_kubeconfig
from tests.unit.deploy_support import DEPLOY, Container, containers
from tests.unit.uid_support import needs_root, python_for, switch_to, without_passwd_entry

# The emulator made closer to an API server (namespaces, the CRDs' validation) of the conformance suite.
pytestmark = [pytest.mark.kmock(cls=cs.ClusterEmulator), pytest.mark.timeout(180)]

PEERINGS = "kopf.dev/v1/clusterkopfpeerings"
NODE = "node-a"


@pytest.fixture
def world() -> Iterator[Path]:
    """A directory other uids may read (pytest's tmp_path is root's alone), removed afterwards."""
    needs_root()
    path = Path(tempfile.mkdtemp(prefix="podnetwork-deploy-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cluster(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    """The emulator with what deploy/ expects before the components start: the KEP, NPWG and
    core kinds, the peering objects of deploy/peering/, and one node."""
    cs.declare_resources(kmock)
    kmock.resources[bs.NSO] = kmock_info("NetworkSelectionOptions", namespaced=True)
    kmock.resources[PEERINGS] = kmock_info("ClusterKopfPeering")
    for name in ("podnetwork-controller", "podnetwork-bridge"):
        kmock.objects[PEERINGS, None, name] = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
                                               "metadata": {"name": name, "resourceVersion": "0"}}
    kmock.objects["v1/nodes", None, NODE] = cs.node(NODE)
    return kmock


def kmock_info(kind: str, *, namespaced: bool = False) -> Any:
    return kmock.ResourceInfo(kind=kind, namespaced=namespaced, verbs={"list", "watch", "get", "patch"})


async def exists(k: kmock.KubernetesEmulator, path: str) -> bool:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(f"{str(k.url).rstrip('/')}{path}")).status_code == 200


class Kubelet:
    """Runs one container of a rendered workload the way the kubelet would (see the module docstring)."""

    def __init__(self, container: Container, world: Path, server: str) -> None:
        self.container = container
        self.world = world
        self.pod_name = f"{container.workload['metadata']['name']}-7d9c5b-x2kq4"
        self.mounts = self._volumes()
        self.kubeconfig = write_kubeconfig(world / "serviceaccount.kubeconfig", server)
        self.kubeconfig.chmod(0o644)
        self.log = world / f"{container.spec['name']}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def _volumes(self) -> dict[str, Path]:
        """mountPath -> the directory standing for that volume."""
        volumes = {v["name"]: v for v in self.container.pod.get("volumes", [])}
        mounts: dict[str, Path] = {}
        for mount in self.container.spec.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            directory = self.world / "volumes" / mount["name"]
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o755)
            if "secret" in volume:
                # A TLS secret as cert-manager (or the operators) would fill it: tls.crt, tls.key.
                certificates.self_signed(directory, "127.0.0.1")
                for f in directory.iterdir():
                    f.chmod(0o644)
            mounts[mount["mountPath"]] = directory
        return mounts

    def path(self, text: str) -> str:
        """`text` with a mounted path pointed at its volume's directory."""
        for mount_path in sorted(self.mounts, key=len, reverse=True):
            if text == mount_path or text.startswith(mount_path.rstrip("/") + "/"):
                return str(self.mounts[mount_path]) + text[len(mount_path.rstrip("/")):]
        return text

    def argument(self, arg: str) -> str:
        flag, eq, value = arg.partition("=")
        return f"{flag}={self.path(value)}" if eq and flag.startswith("--") else self.path(arg)

    def argv(self, command: list[str]) -> tuple[list[str], dict[str, str]]:
        python, extra = python_for(self.container.uid)
        args = [self.argument(a) for a in command]
        if args[0] == "podnetwork":
            return [python, "-m", "podnetwork", *args[1:]], extra
        assert Path(args[0]).name.startswith("python3"), args
        return [python, *args[1:]], extra

    def environment(self) -> dict[str, str]:
        fields = {"metadata.name": self.pod_name, "metadata.namespace": "multinetwork-system",
                  "spec.nodeName": NODE, "spec.serviceAccountName": self.container.pod["serviceAccountName"]}
        env = {"PATH": os.environ["PATH"], "KUBECONFIG": str(self.kubeconfig)}
        for var in self.container.spec.get("env", []):
            if "value" in var:
                env[var["name"]] = var["value"]
            else:
                env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        return env

    def start(self) -> None:
        argv, extra = self.argv(self.container.argv)
        uid = self.container.uid
        if uid:
            without_passwd_entry(uid)
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd="/",
                                            env={**self.environment(), **extra},
                                            preexec_fn=switch_to(uid) if uid else None)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def ready(self) -> bool:
        """The container's readinessProbe, as the kubelet runs it; the process must be alive."""
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"{self.container} exited {self.process.returncode}:\n{self.output()}")
        probe = self.container.spec["readinessProbe"]
        if "exec" in probe:
            argv, extra = self.argv(probe["exec"]["command"])
            done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, timeout=30, cwd="/",
                                           env={"PATH": os.environ["PATH"], **extra},
                                           preexec_fn=switch_to(self.container.uid) if self.container.uid else None)
            return done.returncode == 0
        get = probe["httpGet"]
        assert "host" not in get
        ports = {p["name"]: p["containerPort"] for p in self.container.spec.get("ports", [])}
        port = ports[get["port"]] if isinstance(get["port"], str) else get["port"]
        scheme = get.get("scheme", "HTTP").lower()
        # The kubelet does not verify a probe's certificate.
        async with httpx.AsyncClient(verify=False if scheme == "https" else ssl.create_default_context(),
                                     timeout=5) as http:
            try:
                answer = await http.get(f"{scheme}://127.0.0.1:{port}{get['path']}")
            except httpx.HTTPError:
                return False
        return 200 <= answer.status_code < 400

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def container_of(kustomization: str, workload: str, name: str) -> Container:
    (found,) = [c for c in containers(DEPLOY / kustomization)
                if c.workload["metadata"]["name"] == workload and c.spec["name"] == name and not c.init]
    return found


async def until(what: str, check: Callable[[], Any], kubelet: Kubelet, timeout: float = 90) -> None:
    """Wait for `check()` (awaited when it is a coroutine) to be true; fail with the container's log."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            pytest.fail(f"{kubelet.container}: {what} did not happen in {timeout}s:\n{kubelet.output()}")
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def started(container: Container, world: Path, k: kmock.KubernetesEmulator) -> AsyncIterator[Kubelet]:
    kubelet = Kubelet(container, world, str(k.url).rstrip("/"))
    kubelet.start()
    try:
        await until("the readiness probe passing", kubelet.ready, kubelet)
        yield kubelet
    finally:
        kubelet.stop()


def peers_of(k: kmock.KubernetesEmulator, name: str) -> dict[str, Any]:
    return dict(dict(k.objects[PEERINGS, None, name]).get("status") or {})


async def test_the_controller_as_deployed_turns_ready_peers_under_its_pod_name_and_creates_default(
        cluster: kmock.KubernetesEmulator, world: Path) -> None:
    controller = container_of("controller", "podnetwork-controller", "controller")
    assert controller.uid == 65532
    async with started(controller, world, cluster) as kubelet:
        await until("a keep-alive under the pod's name",
                    lambda: kubelet.pod_name in peers_of(cluster, "podnetwork-controller"), kubelet)
        await until("the default PodNetwork created", lambda: exists(cluster, f"{bs.PN_URL}/default"), kubelet)


async def test_the_bridge_as_deployed_turns_ready_as_a_uid_without_passwd_entry_and_peers_under_its_pod_name(
        cluster: kmock.KubernetesEmulator, world: Path) -> None:
    bridge = container_of("bridge", "podnetwork-bridge", "bridge")
    assert bridge.uid == 65532
    async with started(bridge, world, cluster) as kubelet:
        # --peering podnetwork-bridge: its keep-alive under POD_ID, the pod's name.
        await until("a keep-alive under the pod's name",
                    lambda: kubelet.pod_name in peers_of(cluster, "podnetwork-bridge"), kubelet)
        assert "Traceback" not in kubelet.output()


async def test_the_extender_as_deployed_answers_its_probes_on_the_pods_address_and_filters_on_loopback_only(
        cluster: kmock.KubernetesEmulator, world: Path) -> None:
    extender = container_of("scheduler", "podnetwork-scheduler", "extender")
    async with started(extender, world, cluster):
        ports = {p["name"]: p["containerPort"] for p in extender.spec["ports"]}
        async with httpx.AsyncClient(timeout=5) as http:
            probes = await http.post(f"http://127.0.0.1:{ports['probes']}/filter", json={})
            assert probes.status_code in (404, 405), "the probe address serves the probes alone"
            served = await http.get("http://127.0.0.1:8888/readyz")
            assert served.status_code == 200


async def test_the_agent_as_deployed_installs_its_shim_and_turns_ready_on_the_nodes_own_network(
        cluster: kmock.KubernetesEmulator, world: Path) -> None:
    agent = container_of("agent", "multinetwork-cni-agent", "agent")
    assert agent.uid == 0 and agent.spec["securityContext"]["privileged"]
    kubelet = Kubelet(agent, world, str(cluster.url).rstrip("/"))
    # The node before the agent: a network plugin installed (its file in /etc/cni/net.d, its
    # plugin in /opt/cni/bin), and `default` as `podnetwork controller` creates it.
    conf_dir = Path(kubelet.path("/etc/cni/net.d"))
    bin_dir = Path(kubelet.path("/opt/cni/bin"))
    (conf_dir / "10-kubenet.conflist").write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "kubenet", "plugins": [{"type": "bridge"}, {"type": "portmap"}]}))
    for plugin in ("bridge", "portmap"):
        (bin_dir / plugin).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / plugin).chmod(0o755)
    async with httpx.AsyncClient(timeout=5) as http:
        created = await http.post(f"{str(cluster.url).rstrip('/')}{bs.PN_URL}", json={
            "apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork",
            "metadata": {"name": "default"}, "spec": {"enabled": True}})
        assert created.status_code in (200, 201), created.text
    kubelet.start()
    try:
        await until("the readiness probe passing", kubelet.ready, kubelet)
        assert (bin_dir / "multinetwork").is_file(), "the shim is installed"
        # The compiled one (built here: this machine has no image's prebuilt binary but has cc).
        assert (bin_dir / "multinetwork").read_bytes()[:4] == b"\x7fELF", "its flags keep the default shim"
        written = json.loads((conf_dir / "00-multinetwork.conflist").read_text())
        assert written["plugins"][0]["type"] == "multinetwork"

        def node_event() -> list[Any]:
            return [dict(v) for key, v in cluster.objects.items() if key[0] == "v1/events"
                    and dict(v).get("involvedObject", {}).get("kind") == "Node"]

        await until("the Node Event", lambda: [e["reason"] for e in node_event()] == ["MultiNetworkAgentReady"],
                    kubelet)
        assert node_event()[0]["involvedObject"]["name"] == NODE
    finally:
        kubelet.stop()
    assert not (conf_dir / "00-multinetwork.conflist").exists(), "a stopped agent takes its conflist away"


def test_the_stand_in_kubelet_runs_the_commands_of_every_container_of_ours() -> None:
    # Every workload of ours is started by one of the tests above (init containers aside).
    started_here = {("controller", "controller"), ("bridge", "bridge"), ("scheduler", "extender"), ("agent", "agent")}
    # The DRA driver needs a kubelet to register with: tests/real/test_dra_driver.py runs it, as its
    # ServiceAccount, and tests/unit/deploy/test_dra_driver_manifests.py checks its DaemonSet's command.
    started_here.add(("dra-driver", "driver"))
    ours = {(c.kustomization.name, c.spec["name"]) for k in sorted(DEPLOY.iterdir()) if (k / "kustomization.yaml").exists()
            for c in containers(k) if c.ours and not c.init}
    assert ours == started_here

