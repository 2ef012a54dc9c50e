"""`podnetwork conformance --profile extended` against the real cluster: the whole KEP-3698 suite,
as a user runs it (a process with KUBECONFIG), on our components, a real kube-scheduler with our
extender, a kubelet with containerd and our agent on one node; then `PerNodeAvailability`, the one
feature one node cannot show, with a second node up.

The networks the suite cannot make portably are the test's: three PodNetworks of the bridge, each
backed by a NetworkAttachmentDefinition of a bridge and a host-local subnet of this test's own
(docs/network-policy.md, docs/services.md), the primary one open to the node
(`multinetwork.x-k8s.io/node-access`, docs/node-access.md) so the kubelet's readiness probe
reaches a pod on it alone. The emulator tier (tests/api/conformance/) cannot run pods, so there
the NetworkPolicy, PrimaryPodNetwork, ServiceClusterIP and PodIPsPerNetwork tests are skipped;
here they must pass.

ServiceClusterIP's backends answer on every address (the kit's busybox `nc` cannot bind one), so
its client judges the path by its packet counters on the network's interface; the last test shows
that judgement failing a client whose connections reach the backend over the cluster network.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance.kep import features
from conformance.kep.suite import load_manifest
from conformance.kep.tests import ALL
from conformance.kep.tests.services import CONNECTIONS, client_command, server_command
from tests.real.cluster_support import BUSYBOX, PODNETWORK, Api, Cluster, Node, eventually, wait_phase
from tests.real.objects_support import BRIDGE_PROVIDER, PODNETWORKS, condition, nad_ref, nads, pods

NODE_ACCESS = "multinetwork.x-k8s.io/node-access"
POD_IPS = "multinetwork.x-k8s.io/pod-ips"
#: The only test one node cannot run: it needs two schedulable nodes.
TWO_NODES = "BoundWhereOffered"
ROLES = ("policy", "primary", "service")
LEASES = Path("/var/lib/cni/networks")


@dataclass(frozen=True)
class Networks:
    """The PodNetwork of each role (`ROLES`) for the suite's flags."""

    names: dict[str, str]

    def flags(self) -> list[str]:
        return [arg for role in ROLES for arg in (f"--{role}-network", self.names[role])]


def _nad(name: str, bridge: str, subnet: str) -> dict[str, Any]:
    # "name" is the network's name for host-local: its lease directory, which the test removes
    config = {"cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": bridge,
              "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]]}}
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name}, "spec": {"config": json.dumps(config)}}


@contextlib.contextmanager
def bridge_networks(api: Api, ns: str, roles: Sequence[str]) -> Iterator[dict[str, str]]:
    """A Ready PodNetwork of the bridge per role, each backed by a NAD in `ns` of a bridge and a subnet
    of its own; afterwards (their pods gone) the PodNetworks, NADs, bridges and lease directories are
    removed, each step tried even when one before it failed."""
    suffix = secrets.token_hex(3)
    third = len(ROLES) * secrets.randbelow(250 // len(ROLES))  # 10.253.<third + i>.0/24 per role
    names: dict[str, str] = {}
    made: list[str] = []
    bridges: list[str] = []
    try:
        for i, role in enumerate(roles):
            name = f"kc-{role}-{suffix}"
            bridge = f"pnc{suffix}{role[:2]}"  # 11 characters: a link name has at most 15
            bridges.append(bridge)
            api.create(nads(ns), _nad(name, bridge, f"10.253.{third + i}.0/24"))
            made.append(f"{nads(ns)}/{name}")
            body: dict[str, Any] = {
                "apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork",
                "metadata": {"name": name, "annotations": {NODE_ACCESS: "true"} if role == "primary" else {}},
                "spec": {"provider": BRIDGE_PROVIDER, "parametersRefs": [nad_ref(ns, name)]}}
            api.create(PODNETWORKS, body)
            made.append(f"{PODNETWORKS}/{name}")
            names[role] = name
        for name in names.values():
            eventually(lambda name=name: (condition(api.get(f"{PODNETWORKS}/{name}"), "Ready") or {})
                       .get("status") == "True", f"PodNetwork {name} is Ready", timeout=60)
        yield names
    finally:
        problems: list[str] = []
        for path in reversed(made):  # PodNetworks before their NADs
            try:
                api.delete(path)
                eventually(lambda path=path: api.find(path) is None, f"{path} is gone", timeout=60)
            except AssertionError as error:
                problems.append(str(error))
        for name in names.values():
            try:  # a lease still held is an address whose DEL has not run (or failed)
                eventually(lambda name=name: not _leases(LEASES / name), f"network {name} holds no lease",
                           timeout=60)
            except AssertionError as error:
                problems.append(str(error))
            shutil.rmtree(LEASES / name, ignore_errors=True)
        for bridge in bridges:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        if problems:
            raise AssertionError("cleanup: " + "; ".join(problems))


def _leases(store: Path) -> list[str]:
    """The addresses host-local has handed out from `store` (one file each, named by the address)."""
    found = []
    for entry in store.glob("*"):
        with contextlib.suppress(ValueError):
            found.append(str(ipaddress.ip_address(entry.name)))
    return found


@pytest.fixture
def networks(api: Api, ns: str, node: Node) -> Iterator[Networks]:
    with bridge_networks(api, ns, ROLES) as names:
        yield Networks(names)


@pytest.fixture
def report_file() -> Iterator[Path]:
    handle, path = tempfile.mkstemp(prefix="kep-report-", suffix=".yaml")
    os.close(handle)
    try:
        yield Path(path)
    finally:
        Path(path).unlink(missing_ok=True)


def _conformance(cluster: Cluster, report: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    # Generous timeouts for a loaded 2-core machine: they bound the waits of a failing test only,
    # except that a pod not Running within --schedule-timeout would skip the kubelet tests.
    argv = [str(PODNETWORK), "conformance", *args, "--probe-image", BUSYBOX, "--report", str(report),
            "--implementation-name", "podnetwork", "--implementation-version", "0.1.0",
            "--implementation-url", "https://example.invalid/podnetwork", "--mode", "real-tier",
            "--schedule-timeout", "60", "--settle-timeout", "60"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
    env["KUBECONFIG"] = str(cluster.kubeconfig)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    made = yaml.safe_load(report.read_text()) if report.stat().st_size else None
    return proc, made


def _outcomes(made: Any) -> tuple[set[str], dict[str, str], dict[str, str]]:
    """passed, failed (name -> message) and skipped (name -> reason), over every profile."""
    passed: set[str] = set()
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for profile in made["profiles"]:
        tests = profile["tests"]
        passed.update(tests.get("passed") or [])
        failed.update({t["name"]: t["message"] for t in tests.get("failed") or []})
        skipped.update({t["name"]: t["reason"] for t in tests.get("skipped") or []})
    return passed, failed, skipped


def _podnetworks(api: Api) -> set[str]:
    return {n["metadata"]["name"] for n in api.get(PODNETWORKS)["items"]}


def _nothing_left(api: Api, podnetworks: set[str]) -> None:
    """Everything the suite made is gone: its namespaces (kep-*) and the PodNetworks it added to
    `podnetworks`, those there before it ran."""
    def left() -> list[str]:
        spaces = [n["metadata"]["name"] for n in api.get("/api/v1/namespaces")["items"]]
        return [n for n in spaces if n.startswith("kep-")] + sorted(_podnetworks(api) - podnetworks)

    eventually(lambda: not left(), "the suite's namespaces and PodNetworks are gone", timeout=90)


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"


def test_the_extended_profile_passes_on_one_node_with_only_the_two_node_test_skipped(
        components: Cluster, api: Api, networks: Networks, report_file: Path) -> None:
    nodes = len(api.get("/api/v1/nodes")["items"])
    assert nodes == 1, f"this run is the one-node run, and the cluster has {nodes} nodes"
    before = _podnetworks(api)
    try:
        proc, made = _conformance(components, report_file, "--profile", "extended", *networks.flags())
    finally:
        _nothing_left(api, before)
    assert made is not None, f"no report written: {_said(proc)}"
    passed, failed, skipped = _outcomes(made)
    assert not failed, f"failed: {json.dumps(failed, indent=1)}\n{_said(proc)}"
    assert set(skipped) == {TWO_NODES}, f"skipped: {json.dumps(skipped, indent=1)}"
    assert "two schedulable nodes" in skipped[TWO_NODES]
    # the profile's tests: an opt-in feature's (DRAPlacement, tests/real/test_conformance_dra.py) are in none
    assert passed == {t.name for t in ALL if set(t.features) <= set(features.PROFILES["extended"])} - {TWO_NODES}
    assert proc.returncode == 0, _said(proc)
    assert "cleanupProblems" not in made, made["cleanupProblems"]
    assert {p["name"]: p["result"] for p in made["profiles"]} == {"core": "success", "extended": "partial"}


def test_per_node_availability_passes_with_a_second_node(
        components: Cluster, api: Api, node: Node, report_file: Path) -> None:
    index = 2  # a node index no other test of the session holds now
    while any(n.name.endswith(f"-n{index}") for n in components.nodes.values()):
        index += 1
    second: Node | None = None
    before = _podnetworks(api)
    try:
        second = components.add_node(index)
        proc, made = _conformance(components, report_file, "--features", "PerNodeAvailability")
    finally:
        try:
            _nothing_left(api, before)
        finally:
            if second is not None:
                components.remove_node(second)
                shutil.rmtree(second.dir, ignore_errors=True)
                eventually(lambda: api.find(f"/api/v1/nodes/{second.name}") is None,
                           f"node {second.name} is gone", timeout=60)
    assert made is not None, f"no report written: {_said(proc)}"
    passed, failed, skipped = _outcomes(made)
    assert (passed, failed, skipped) == ({TWO_NODES}, {}, {}), _said(proc)
    assert proc.returncode == 0, _said(proc)


def test_the_cluster_ip_check_fails_a_client_whose_connections_reach_the_backend_over_the_cluster_network(
        api: Api, ns: str, node: Node) -> None:
    # The ServiceClusterIP backends listen on every address, so the answer alone cannot tell the
    # networks apart: the client's net1 counters must. The same client command, aimed once at the
    # backend's address on the network and once at its cluster-network address, both answered.
    with bridge_networks(api, ns, ("service",)) as names:
        made: list[str] = []
        try:
            network = names["service"]
            on = json.dumps([{"podNetworkName": "default"}, {"podNetworkName": network, "interfaceName": "net1"}])
            (backend,) = load_manifest("pod-backend.yaml", {
                "NAME": "backend", "NAMESPACE": ns, "NETWORKS": on, "GATES": "[]", "IMAGE": BUSYBOX,
                "COMMAND": json.dumps(server_command("backend")), "PORT": "8080"})
            api.create(pods(ns), backend)
            made.append("backend")
            pod = wait_phase(api, ns, "backend")

            def on_network() -> str | None:
                raw = api.get(f"{pods(ns)}/backend")["metadata"].get("annotations", {}).get(POD_IPS)
                return next((e["ip"] for e in json.loads(raw or "[]") if e.get("podNetwork") == network), None)

            address = eventually(on_network, f"the backend reports its address on {network}", timeout=60)
            for name, target in (("over-net1", address), ("over-eth0", pod["status"]["podIP"])):
                (client,) = load_manifest("pod-probe.yaml", {
                    "NAME": name, "NAMESPACE": ns, "NETWORKS": on, "LABELS": "{}", "RESTART": "Never",
                    "PROBE_IMAGE": BUSYBOX, "COMMAND": json.dumps(client_command(target, 8080, ["backend"]))})
                api.create(pods(ns), client)
                made.append(name)
            ended = {name: eventually(lambda name=name: _ended(api, ns, name), f"client {name} ends", timeout=90)
                     for name in ("over-net1", "over-eth0")}
            said = {name: api.request("GET", f"{pods(ns)}/{name}/log")[1] for name in ended}
            assert ended == {"over-net1": "Succeeded", "over-eth0": "Failed"}, said
            assert "backend" in said["over-eth0"].splitlines(), f"the backend did not answer over eth0: {said}"
            counted = re.search(r"net1: (\d+) packets received, (\d+) sent", said["over-eth0"])
            assert counted and max(map(int, counted.groups())) < CONNECTIONS, said
        finally:
            # Not forced: a pod leaves the API once its kubelet has torn down its sandbox (the CNI
            # DEL), so its lease is released before the network's store is removed.
            for name in made:
                api.delete(f"{pods(ns)}/{name}")
            for name in made:
                eventually(lambda name=name: api.find(f"{pods(ns)}/{name}") is None, f"pod {name} is gone",
                           timeout=60)


def _ended(api: Api, ns: str, name: str) -> str | None:
    phase = api.get(f"{pods(ns)}/{name}")["status"].get("phase")
    return phase if phase in ("Succeeded", "Failed") else None
