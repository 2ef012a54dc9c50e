"""docs/deploy.md's install, pods through it, and its uninstall, on a kit node with the real image.

The sibling test_deploy_install_uninstall.py proves the API server accepts the documented install
and that the uninstall ends clean, with no image and no node. This one runs the same documented
blocks (read from the page) against a control plane and a kubelet node of its own, with
`podnetwork:dev` in the node's containerd, so every workload of deploy/ runs as a user's would:

- the image is packed by tests/real/image_support.py from deploy/agent/Dockerfile's own steps:
  Debian bookworm's Python 3.11 and the Dockerfile's packages by mmdebstrap (the base layer,
  cached in /var/tmp/podnetwork-image-cache by what it is made of: about 1.5 minutes once, then
  reused), the files the Dockerfile COPYs installed by the image's pip and the shim compiled on
  this host (the app layer, each run). There is no container engine here; Debian's mirror
  answers, so the base is Debian's as the Dockerfile's is, not a copy of this host's Python.
  Both images are imported with `ctr -n k8s.io images import`, as the kit's node-up.sh imports
  its own, in place of the page's `docker build` line (the one line not run);
- deploy/scheduler's `registry.k8s.io/kube-scheduler` is an image of the kit's own
  kube-scheduler, tagged as the kustomization sets it (v1.36.1; the kit's binary is v1.36.2, a
  patch release apart, which the version skew policy allows);
- there is no kube-proxy on the kit, and its kube-apiserver binds 127.0.0.1 only: an nft table
  of the test's own forwards the `kubernetes` Service (10.96.0.1:443) to it, DNAT in `output`
  for the agent (hostNetwork) and in `prerouting` on the node's pod bridge for the operators'
  pods, with `route_localnet` on that bridge alone (a packet to 127.0.0.1 from a bridge is a
  martian otherwise); the table and the bridge go afterwards;
- the DaemonSet mounts fixed hostPaths (`/etc/cni/net.d`, `/opt/cni/bin`, `/run/multinetwork`,
  `/var/lib/multinetwork`), so the node's runtime reads those (node-up.sh's `CNI_CONF_DIR` and
  `CNI_BIN_DIR`): the test needs them absent or empty, holds a machine-wide lock while it uses
  them (another run of this test, from another checkout, waits), and removes what it put there.
  The rest of the real tier and the CNI tier use folders of their own, or /usr/lib/cni, and run
  in the same xdist group, one test after the other;
- `/run/netns` is made a shared mount as docs/deploy.md "Mount propagation" says to prepare a
  node, when it is not one yet (it stays one: other runtimes' namespaces may be under it);
- the node's containerd and kubelet run under an init of the node's own (`own_init`,
  cluster_support.init_process): this machine's PID 1 cannot be read even by root, and the
  DaemonSet's check-host (hostPID) resolves /run/netns under /proc/1/root as the node does, so it
  would refuse the node here; on a real node PID 1 is an init its root can read.

What it proves: the documented install comes up with every workload ready and 0 restarts; a
plain pod gets its default-network address; a pod on a NAD-backed PodNetwork gets its interface
and network-status; a pod naming a missing PodNetwork gets the bridge's gate Event; pods with
`schedulerName: podnetwork-scheduler` are placed by the in-cluster kube-scheduler through the
extender (one bound, one refused with the extender's reason); and `make uninstall` leaves no
object, CRD, webhook configuration, conflist, shim, agent socket, pod sandbox or netns of ours,
after which a new pod runs on the node's own network again. It prints the uninstall's duration.

The uninstall deletes CRDs, so the test has a control plane of its own (not the session's).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge.operator import admission as bridge_admission
from podnetwork.kep import admissionconfig
from tests.real import image_support
from tests.real.attachments_support import STATUS, annotation, bridged_networks
from tests.real.cluster_support import (
    Api,
    Cluster,
    KitMissing,
    Node,
    binaries,
    eventually,
    new_root,
    node_prerequisites,
    pod_manifest,
    wait_phase,
)
from tests.real.objects_support import OTHER_PROVIDER, PODNETWORKS, condition, events_of, podnetwork_body
from tests.real.test_deploy_install_uninstall import DONE, GUARD, left_over, run, section_commands

NS = "multinetwork-system"
HOST_CONF = Path("/etc/cni/net.d")
HOST_BIN = Path("/opt/cni/bin")
#: the agent's other hostPaths (deploy/agent/daemonset.yaml) that hold only the agent's files
AGENT_DIRS = (Path("/run/multinetwork"), Path("/var/lib/multinetwork"))
SERVICE = ("10.96.0.1", 443)
GATE = "multinetwork.x-k8s.io/npwg-selection"
#: how long the install may take to be ready on a loaded 2-core machine (six pods of Python)
READY_TIMEOUT = 420


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the real-cluster tier cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class HostPaths:
    """The host's fixed CNI and agent directories: which this test made, so it removes them after."""

    made: list[Path] = field(default_factory=list)
    emptied: list[Path] = field(default_factory=list)

    def claim(self) -> None:
        for path in (HOST_CONF, HOST_BIN, *AGENT_DIRS):
            if path.exists() and any(path.iterdir()):
                _unavailable(f"{path} is not empty: this test installs podnetwork's DaemonSet, whose hostPaths "
                             f"are fixed, and removes what it put there afterwards")
        for path in (HOST_CONF, HOST_BIN, *AGENT_DIRS):
            top = path
            while not top.parent.exists():
                top = top.parent
            if not top.exists():
                self.made.append(top)  # e.g. /opt/cni when there was no /opt/cni
            elif path.exists():
                self.emptied.append(path)
            path.mkdir(parents=True, exist_ok=True)

    def release(self) -> None:
        for path in self.made:
            shutil.rmtree(path, ignore_errors=True)
        for path in self.emptied:
            for child in path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)


def _nft(script: str) -> None:
    done = subprocess.run(["nft", "-f", "-"], input=script, text=True, capture_output=True)
    assert done.returncode == 0, f"nft refused:\n{script}\n{done.stderr}"


@contextlib.contextmanager
def service_forwarding(cluster: Cluster, bridge: str) -> Iterator[str]:
    """10.96.0.1:443 to the kit's kube-apiserver (127.0.0.1 only): what kube-proxy would do."""
    table = f"pnr{cluster.suffix}_apiserver"
    address, port = SERVICE
    to = f"127.0.0.1:{cluster.ports['apiserver']}"
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "link", "set", bridge, "up"], check=True, capture_output=True)
        Path(f"/proc/sys/net/ipv4/conf/{bridge}/route_localnet").write_text("1\n")
        _nft(f"""table ip {table} {{
  chain output {{ type nat hook output priority -100; ip daddr {address} tcp dport {port} dnat to {to}; }}
  chain prerouting {{ type nat hook prerouting priority -100;
    iifname "{bridge}" ip daddr {address} tcp dport {port} dnat to {to}; }}
}}""")
        yield table
    finally:
        subprocess.run(["nft", "delete", "table", "ip", table], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)


def _shared_netns_mount() -> None:
    """docs/deploy.md "Mount propagation": the node's /run/netns a shared mount."""
    found = subprocess.run(["findmnt", "-n", "-o", "TARGET,PROPAGATION", "/run/netns"], capture_output=True,
                           text=True)
    if found.returncode == 0 and found.stdout.split()[:1] == ["/run/netns"] and "shared" in found.stdout:
        return
    subprocess.run(["sh", "-c", "mkdir -p /run/netns && mount --bind /run/netns /run/netns && "
                    "mount --make-shared /run/netns"], check=True, capture_output=True)


@dataclass
class Deployed:
    cluster: Cluster
    api: Api
    node: Node
    install: list[str]


@pytest.fixture
def deployed() -> Iterator[Deployed]:
    """A control plane and a kubelet node of the test's own, the node's runtime on the host's fixed CNI
    dirs, `podnetwork:dev` and kube-scheduler in its containerd; nothing installed yet."""
    try:
        kit, bins = binaries()
    except KitMissing as missing:
        _unavailable(str(missing))
    missing_part = node_prerequisites() or (
        None if "kube-controller-manager" in bins else "the uninstall needs kube-controller-manager")
    if missing_part:
        _unavailable(missing_part)
    if shutil.which("mmdebstrap") is None:
        _unavailable("packing the image needs mmdebstrap (apt-get install -y mmdebstrap; make system-deps)")
    image_support.CACHE.mkdir(parents=True, exist_ok=True)
    with open(image_support.CACHE / ".host-cni.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the host's fixed CNI dirs and the 10.96.0.1 DNAT: one run at a time
        host = HostPaths()
        host.claim()
        cluster = Cluster(kit=kit, bins=bins, root=new_root())
        try:
            work = cluster.root / "image"
            started = time.monotonic()
            images = [image_support.podnetwork_image(work), image_support.scheduler_image(work, bins["kube-scheduler"])]
            print(f"images packed in {time.monotonic() - started:.0f}s")
            cluster.start()
            _shared_netns_mount()
            bridge = f"pnr{cluster.suffix}n1"  # the one add_node(1) names, made first for route_localnet
            with service_forwarding(cluster, bridge):
                try:
                    node = cluster.add_node(1, conf_dir=HOST_CONF, bin_dir=HOST_BIN, own_init=True)
                    assert node.bridge == bridge
                    for archive in images:
                        image_support.import_into(node.containerd_socket, archive)
                        archive.unlink()
                    assert cluster.api is not None
                    yield Deployed(cluster, cluster.api, node, section_commands("Install"))
                finally:
                    cluster.stop()  # the node first, while 10.96.0.1 still leads somewhere
        finally:
            cluster.stop()  # when packing or starting failed; a no-op otherwise
            for path in AGENT_DIRS:  # the agent's cache and socket folder: the DaemonSet's, not the node's
                shutil.rmtree(path, ignore_errors=True)
            host.release()


def _workloads_ready(api: Api) -> list[str]:
    """What of deploy/'s workloads is not ready yet (empty: all are)."""
    waiting = []
    for item in api.get(f"/apis/apps/v1/namespaces/{NS}/deployments")["items"]:
        want, have = item["spec"]["replicas"], item.get("status", {}).get("readyReplicas", 0)
        if have != want:
            waiting.append(f"deployment {item['metadata']['name']} {have}/{want}")
    for item in api.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets")["items"]:
        status = item.get("status", {})
        want, have = status.get("desiredNumberScheduled", 0), status.get("numberReady", 0)
        if not want or have != want:
            waiting.append(f"daemonset {item['metadata']['name']} {have}/{want}")
    return waiting


def _webhooks_missing(api: Api) -> list[str]:
    """The webhook configurations the installed operators register that are not there yet (docs/deploy.md:
    pods created before them are admitted without them)."""
    bridge = api.get(f"/apis/apps/v1/namespaces/{NS}/deployments/podnetwork-bridge")["spec"]["template"]["spec"]
    enforce = "--enforce-use-permission" in bridge["containers"][0].get("command", [])
    client = {"service": {"name": "any", "namespace": NS, "port": 443}}
    wanted = [*admissionconfig.webhook_configurations(client),
              *bridge_admission.webhook_configurations(client, enforce_use=enforce)]
    missing = []
    for obj in wanted:
        plural = "mutatingwebhookconfigurations" if obj["kind"].startswith("Mutating") else \
            "validatingwebhookconfigurations"
        if api.find(f"/apis/admissionregistration.k8s.io/v1/{plural}/{obj['metadata']['name']}") is None:
            missing.append(f"{obj['kind']} {obj['metadata']['name']}")
    return missing


def _restarts(api: Api) -> dict[str, int]:
    """Each container's restart count in multinetwork-system, init containers included."""
    counts = {}
    for pod in api.get(f"/api/v1/namespaces/{NS}/pods")["items"]:
        status = pod.get("status", {})
        for c in [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]:
            counts[f"{pod['metadata']['name']}/{c['name']}"] = c.get("restartCount", 0)
    return counts


def _why_restarted(cluster: Cluster, api: Api) -> str:
    """Each restarted container's last end, its previous log's tail, and its pod's Events."""
    said = []
    for pod in api.get(f"/api/v1/namespaces/{NS}/pods")["items"]:
        name = pod["metadata"]["name"]
        status = pod.get("status", {})
        for c in [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]:
            if not c.get("restartCount"):
                continue
            log = cluster.kubectl("logs", "-n", NS, name, "-c", c["name"], "--previous", "--tail=15", check=False)
            events = [f"{e.get('reason')}: {e.get('message')}" for e in events_of(api, NS, name)]
            said.append(f"{name}/{c['name']}: {c['restartCount']} restart(s), last: "
                        f"{c.get('lastState', {}).get('terminated')}\n  events: {events[-6:]}\n"
                        f"  previous log: {log.stdout[-2500:]}{log.stderr[-300:]}")
    return "\n".join(said)


def _node_condition(api: Api, node: str, kind: str) -> str | None:
    found = condition(api.get(f"/api/v1/nodes/{node}"), kind)
    return found["status"] if found else None


def _sandboxes(cluster: Cluster, node: Node) -> list[dict[str, Any]]:
    """The node's pod sandboxes as the runtime has them (namespace, name, netns path)."""
    crictl = [str(cluster.bins["crictl"]), "--runtime-endpoint", f"unix://{node.containerd_socket}", "--timeout", "10s"]
    ids = subprocess.run([*crictl, "pods", "-q"], capture_output=True, text=True, check=True).stdout.split()
    found = []
    for sandbox in ids:
        out = subprocess.run([*crictl, "inspectp", sandbox], capture_output=True, text=True)
        if out.returncode != 0:
            continue  # removed meanwhile
        info = json.loads(out.stdout)
        meta = info["status"]["metadata"]
        spaces = info.get("info", {}).get("runtimeSpec", {}).get("linux", {}).get("namespaces", [])
        netns = next((s.get("path", "") for s in spaces if s["type"] == "network"), "")
        found.append({"namespace": meta["namespace"], "name": meta["name"], "netns": netns})
    return found


def _uninstall_left_on_node(cluster: Cluster, node: Node, netns: list[str]) -> list[str]:
    left = [str(p) for p in (HOST_CONF / "00-multinetwork.conflist", HOST_BIN / "multinetwork",
                             HOST_BIN / ".multinetwork.py", Path("/run/multinetwork/agent.sock")) if p.exists()]
    left += [f"sandbox {s['namespace']}/{s['name']}" for s in _sandboxes(cluster, node) if s["namespace"] == NS]
    left += [f"netns {path}" for path in netns if Path(path).exists()]
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    left += [line for line in tables.splitlines() if "podnetwork" in line]
    return left


@pytest.mark.timeout(1200)  # packing (the first time), six pods of Python starting on two loaded cores
def test_the_documented_install_runs_pods_with_no_restart_and_the_documented_uninstall_leaves_nothing(
        deployed: Deployed) -> None:
    cluster, api, node = deployed.cluster, deployed.api, deployed.node
    (build,) = [line for line in deployed.install if line.startswith("docker build")]
    assert f"-t {image_support.IMAGE} " in build, build
    for line in deployed.install:
        if line == build:
            continue  # the image was packed and imported instead (module docstring)
        done = run(cluster, line)
        assert done.returncode == 0, f"{line}:\n{done.stdout}\n{done.stderr}"

    # docs/deploy.md "Then check that everything turned ready"
    try:
        eventually(lambda: not _workloads_ready(api), "every workload of deploy/ is ready", timeout=READY_TIMEOUT)
        eventually(lambda: condition(api.find(f"{PODNETWORKS}/default"), "Ready"), "default has Ready")
        assert condition(api.get(f"{PODNETWORKS}/default"), "Ready")["status"] == "True"  # type: ignore[index]
        eventually(lambda: _node_condition(api, node.name, "DefaultPodNetworkReady") == "True",
                   "the node's DefaultPodNetworkReady is True", timeout=120)
        eventually(lambda: not _webhooks_missing(api), "the operators registered their webhooks", timeout=120)
    except AssertionError as error:
        listing = run(cluster, f"kubectl -n {NS} get pods -o wide").stdout
        events = run(cluster, f"kubectl -n {NS} get events --sort-by=.lastTimestamp").stdout
        raise AssertionError(f"{error}\n{listing}\n{events[-4000:]}") from None
    first = sorted(p.name for p in HOST_CONF.iterdir())
    assert first[0] == "00-multinetwork.conflist", first
    assert (HOST_BIN / "multinetwork").exists()

    user = f"t-{secrets.token_hex(3)}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": user}})
    eventually(lambda: api.find(f"/api/v1/namespaces/{user}/serviceaccounts/default"), "the default ServiceAccount")
    pods = f"/api/v1/namespaces/{user}/pods"
    with bridged_networks(api, user, "blue") as (blue,):
        disabled = f"off-{secrets.token_hex(3)}"
        api.create(PODNETWORKS, podnetwork_body(disabled, provider=OTHER_PROVIDER, enabled=False))
        missing = f"missing-{secrets.token_hex(3)}"
        on_blue = [{"podNetworkName": "default"}, {"podNetworkName": blue.podnetwork, "interfaceName": "blue0"}]
        api.create(pods, pod_manifest("plain"))
        api.create(pods, pod_manifest("on-blue", networks=on_blue))
        api.create(pods, pod_manifest("gated", networks=[{"podNetworkName": missing}]))
        api.create(pods, pod_manifest("placed", networks=on_blue, schedulerName="podnetwork-scheduler"))
        api.create(pods, pod_manifest("refused", networks=[{"podNetworkName": disabled}],
                                      schedulerName="podnetwork-scheduler"))

        # a plain pod: the default network's address, as the agent reports it
        plain = wait_phase(api, user, "plain", timeout=120)
        subnet_prefix = node.subnet.rsplit(".", 1)[0] + "."
        assert plain["status"]["podIP"].startswith(subnet_prefix), plain["status"]
        status = eventually(lambda: annotation(api, user, "plain", STATUS), "plain's network-status")
        assert [(s["interface"], s.get("default")) for s in status] == [("eth0", True)], status

        # pods on a PodNetwork: their interface and network-status, whichever scheduler placed them
        for name in ("on-blue", "placed"):
            wait_phase(api, user, name, timeout=120)
            status = eventually(lambda name=name: annotation(api, user, name, STATUS), f"{name}'s network-status")
            by_interface = {s["interface"]: s for s in status}
            assert sorted(by_interface) == ["blue0", "eth0"], status
            assert by_interface["blue0"]["name"] == blue.status_name
            assert by_interface["blue0"]["ips"][0].startswith(blue.subnet.rsplit(".", 1)[0] + "."), status
        scheduled = events_of(api, user, "placed", "Scheduled")
        assert [e.get("reportingComponent") or e.get("source", {}).get("component") for e in scheduled] == \
            ["podnetwork-scheduler"], scheduled

        # a missing PodNetwork: the bridge's gate, said in an Event
        said = eventually(lambda: events_of(api, user, "gated", "SchedulingGated"), "the bridge's gate Event")
        assert f'podnetwork "{missing}" not found; the pod stays behind scheduling gate {GATE}' in said[0]["message"]
        assert {"name": GATE} in api.get(f"{pods}/gated")["spec"]["schedulingGates"]

        # the extender in podnetwork-scheduler's pod refuses the node for a network that is not Ready
        def refused() -> str | None:
            found = condition(api.get(f"{pods}/refused"), "PodScheduled")
            return found["message"] if found and found["status"] == "False" else None

        message = eventually(refused, "podnetwork-scheduler says why refused is Pending", timeout=90)
        assert f'podnetwork "{disabled}" is not Ready: AdministrativelyDisabled' in message, message
        assert not api.get(f"{pods}/refused")["spec"].get("nodeName")

        api.delete(f"{PODNETWORKS}/{disabled}")
        # bridged_networks deletes the namespace's pods (and waits), then the PodNetwork and its NAD

    restarts = _restarts(api)
    print(f"containers of {NS}: {len(restarts)}, restarts: {sum(restarts.values())}")
    assert restarts and not any(restarts.values()), _why_restarted(cluster, api)
    netns = [s["netns"] for s in _sandboxes(cluster, node) if s["namespace"] == NS and s["netns"]]
    assert netns, "the operators' pods have network namespaces"

    (uninstall,) = section_commands("Uninstall")
    started = time.monotonic()
    done = run(cluster, uninstall, timeout=GUARD)
    took = time.monotonic() - started
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.strip().splitlines()[-1] == DONE, done.stdout
    assert left_over(api, cluster) == []
    eventually(lambda: not _uninstall_left_on_node(cluster, node, netns),
               "nothing of podnetwork is left on the node", timeout=60)
    print(f"uninstall took {took:.1f}s")

    # the node runs its own network again: no shim between the runtime and it
    api.create(pods, pod_manifest("after"))
    after = wait_phase(api, user, "after", timeout=120)
    assert after["status"]["podIP"].startswith(subnet_prefix)
    assert annotation(api, user, "after", STATUS) is None
    api.delete(f"{pods}/after")
    eventually(lambda: not api.get(pods)["items"], "the last pod is gone", timeout=60)

