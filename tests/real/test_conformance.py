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
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance.kep.tests import ALL
from tests.real.cluster_support import BUSYBOX, PODNETWORK, Api, Cluster, Node, eventually
from tests.real.objects_support import BRIDGE_PROVIDER, PODNETWORKS, condition, nad_ref, nads

NODE_ACCESS = "multinetwork.x-k8s.io/node-access"
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


@pytest.fixture
def networks(api: Api, ns: str, node: Node) -> Iterator[Networks]:
    suffix = secrets.token_hex(3)
    third = 3 * secrets.randbelow(80)  # 10.253.<third + i>.0/24, one per role
    names: dict[str, str] = {}
    made: list[str] = []
    bridges: list[str] = []
    try:
        for i, role in enumerate(ROLES):
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
        yield Networks(names)
    finally:
        for path in reversed(made):  # PodNetworks before their NADs
            api.delete(path)
        for path in reversed(made):
            eventually(lambda path=path: api.find(path) is None, f"{path} is gone", timeout=60)
        for bridge in bridges:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        for name in names.values():
            shutil.rmtree(LEASES / name, ignore_errors=True)


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
    assert passed == {t.name for t in ALL} - {TWO_NODES}
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
