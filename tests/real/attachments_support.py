"""PodNetworks backed by NetworkAttachmentDefinitions on the real tier, and what a pod shows of them.

`bridged_networks` makes, per tag, a NetworkAttachmentDefinition in the test's namespace (the
reference `bridge` plugin on a Linux bridge and a host-local subnet of the test's own) and a
PodNetwork of the bridge's provider naming it, waits until the PodNetwork is Ready, and removes
all of it afterwards, also when the test failed: the namespace's pods first (and the leases their
CNI DEL gives back), then the PodNetworks, the NADs, the bridges and the lease directories.

What a pod shows is read the way a user reads it: its interfaces through the kubelet
(`kubectl exec`, busybox's `ip`), its annotations from the API server, and on the node the
host-local lease files and our agent's cache records.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.real.cluster_support import Api, Cluster, Node, eventually

PROVIDER = "multinetwork.x-k8s.io/npwg-bridge"
PODNETWORKS = "/apis/multinetwork.x-k8s.io/v1alpha1/podnetworks"
NETWORKS = "multinetwork.x-k8s.io/networks"
POD_IPS = "multinetwork.x-k8s.io/pod-ips"
ATTACHMENTS = "multinetwork.x-k8s.io/attachments"
SELECTION = "k8s.v1.cni.cncf.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
LEASES = Path("/var/lib/cni/networks")


@dataclass(frozen=True)
class BridgedNetwork:
    """One PodNetwork of the test, its NAD, and what the NAD puts on the node."""

    podnetwork: str
    namespace: str
    nad: str
    cni_name: str
    bridge: str
    subnet: str

    @property
    def status_name(self) -> str:
        """How an NPWG implementation names it in network-status (NPWG 5: namespace/name)."""
        return f"{self.namespace}/{self.nad}"

    @property
    def gateway(self) -> str:
        return self.subnet.replace(".0/24", ".1")

    @property
    def lease_dir(self) -> Path:
        return LEASES / self.cni_name

    def leases(self) -> set[str]:
        """The addresses host-local holds for this network (its other files are bookkeeping)."""
        if not self.lease_dir.is_dir():
            return set()
        return {p.name for p in self.lease_dir.iterdir() if p.name != "lock" and not p.name.startswith("last_")}

    def ports(self) -> list[str]:
        """The host links enslaved to this network's bridge (one veth per attached pod)."""
        out = subprocess.run(["ip", "-j", "link", "show", "master", self.bridge], capture_output=True, text=True)
        if out.returncode != 0:  # no bridge (yet, or any more): nothing attached
            return []
        return [link["ifname"] for link in json.loads(out.stdout or "[]")]


def _ready(obj: Mapping[str, Any] | None) -> bool:
    conditions = (obj or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@contextlib.contextmanager
def bridged_networks(api: Api, ns: str, *tags: str, gateway: bool = False) -> Iterator[list[BridgedNetwork]]:
    """A Ready PodNetwork per tag, each on a bridge and a 10.252.x.0/24 subnet of its own; with
    `gateway`, its NAD names 10.252.x.1 as the subnet's gateway (what a default route needs)."""
    token = secrets.token_hex(3)
    octets = random.sample(range(256), len(tags))  # another session's networks sit on other bridges
    made: list[BridgedNetwork] = []
    failed = False
    try:
        for i, (tag, octet) in enumerate(zip(tags, octets, strict=True)):
            net = BridgedNetwork(podnetwork=f"{tag}-{token}", namespace=ns, nad=tag, cni_name=f"pnc-{token}-{tag}",
                                 bridge=f"pc{token}{i}", subnet=f"10.252.{octet}.0/24")
            subnet: dict[str, str] = {"subnet": net.subnet}
            if gateway:
                subnet["gateway"] = net.gateway
            config = {"cniVersion": "1.0.0", "name": net.cni_name, "type": "bridge", "bridge": net.bridge,
                      "ipam": {"type": "host-local", "ranges": [[subnet]]}}
            made.append(net)
            api.create(f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions", {
                "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": net.nad}, "spec": {"config": json.dumps(config)}})
            api.create(PODNETWORKS, {
                "apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork",
                "metadata": {"name": net.podnetwork},
                "spec": {"provider": PROVIDER, "parametersRefs": [{
                    "group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions",
                    "namespace": ns, "name": net.nad}]}})
        for net in made:
            eventually(lambda net=net: _ready(api.find(f"{PODNETWORKS}/{net.podnetwork}")),
                       f"PodNetwork {net.podnetwork} is Ready", timeout=60)
        yield made
    except BaseException:
        failed = True
        raise
    finally:
        problems = _remove(api, ns, made)
        if problems and not failed:
            raise AssertionError("; ".join(problems))


def _remove(api: Api, ns: str, made: list[BridgedNetwork]) -> list[str]:
    problems: list[str] = []

    def attempt(what: str, step: Any) -> None:
        try:
            step()
        except Exception as error:
            problems.append(f"{what}: {error}")

    # the pods first: their CNI DEL gives the leases back, and the PodNetworks wait for them (InUse)
    attempt("deleting the pods", lambda: api.request("DELETE", f"/api/v1/namespaces/{ns}/pods"))
    attempt("the pods are gone", lambda: eventually(
        lambda: not api.get(f"/api/v1/namespaces/{ns}/pods")["items"], f"no pod left in {ns}", timeout=60))
    for net in made:
        attempt(f"{net.cni_name} leases", lambda net=net: eventually(
            lambda: not net.leases(), f"every lease of {net.cni_name} is given back", timeout=60))
    for net in made:
        attempt(f"deleting {net.podnetwork}", lambda net=net: api.delete(f"{PODNETWORKS}/{net.podnetwork}"))
    for net in made:
        attempt(f"{net.podnetwork} is gone", lambda net=net: eventually(
            lambda: api.find(f"{PODNETWORKS}/{net.podnetwork}") is None, f"{net.podnetwork} is gone", timeout=60))
        attempt(f"deleting NAD {net.nad}", lambda net=net: api.delete(
            f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{net.nad}"))
        subprocess.run(["ip", "link", "del", net.bridge], capture_output=True)
        shutil.rmtree(net.lease_dir, ignore_errors=True)
    return problems


# -- what the pod shows ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Interface:
    mac: str
    addresses: tuple[str, ...]
    """Global-scope addresses with their prefix length, as the kernel has them."""


_LINK = re.compile(r"^\d+: ([^:@\s]+)(?:@\S+)?: .*link/\S+ ([0-9a-f:]{17})")
_ADDR = re.compile(r"^\d+: (\S+)\s+inet6? (\S+) .*scope global")


def interfaces(cluster: Cluster, ns: str, pod: str) -> dict[str, Interface]:
    """The pod's interfaces other than lo, read inside its container through the kubelet."""
    out = cluster.kubectl("exec", "-n", ns, pod, "--", "sh", "-c", "ip -o link; ip -o addr").stdout
    macs: dict[str, str] = {}
    addresses: dict[str, list[str]] = {}
    for line in out.splitlines():
        if (link := _LINK.match(line)) and link.group(1) != "lo":
            macs[link.group(1)] = link.group(2)
        elif addr := _ADDR.match(line):
            addresses.setdefault(addr.group(1), []).append(addr.group(2))
    return {name: Interface(mac, tuple(addresses.get(name, ()))) for name, mac in macs.items()}


def annotation(api: Api, ns: str, pod: str, key: str) -> Any:
    """The pod's annotation `key` parsed as JSON, None while it is absent."""
    value = api.get(f"/api/v1/namespaces/{ns}/pods/{pod}")["metadata"].get("annotations", {}).get(key)
    return None if value is None else json.loads(value)


def bare(address: str) -> str:
    return address.split("/")[0]


def writer_of(api: Api, ns: str, pod: str, key: str) -> list[str]:
    """The field managers that own the pod's annotation `key` (who wrote it, as the server recorded)."""
    pod_object = api.get(f"/api/v1/namespaces/{ns}/pods/{pod}")
    return [m["manager"] for m in pod_object["metadata"].get("managedFields", [])
            if f"f:{key}" in m.get("fieldsV1", {}).get("f:metadata", {}).get("f:annotations", {})]


def agent_records(node: Node, ns: str, pod: str) -> list[dict[str, Any]]:
    """Our agent's cache records (the last state of each) of the pod's containers on `node`."""
    records = []
    for path in node.cache_dir.glob("*.jsonl"):
        lines = path.read_text().splitlines()
        if not lines:
            continue
        record = json.loads(lines[-1])
        if record.get("pod_namespace") == ns and record.get("pod_name") == pod:
            records.append({**record, "path": str(path)})
    return records
