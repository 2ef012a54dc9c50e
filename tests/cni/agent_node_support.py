"""The real agent on the netpol harness's sealed node: set-up shared by the CNI tests of what the
agent keeps in its pods' namespaces (tests/cni/test_policy_enforcement.py, MultiNetworkPolicy;
tests/cni/test_service_enforcement.py, the Services' ClusterIPs).

The agent (tests/cni/agent_support.py `World`, through the shim) attaches pods whose delegates
run inside the node namespace (tests/cni/netpol_support.py `Node`, `InNode`): bridges and veths
live there, where no packet can leave (`sealed_node` asserts it after the test, and that the node
left nothing behind). The pods select the NAD `default/pnnp-net1` (the node's net1) by the NPWG
annotation; `add` runs their ADD and joins them to the node's probes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from podnetwork.ground import constants
from tests.cni.agent_support import World
from tests.cni.netpol_support import Node, nft_or_skip

NAD_NAME = "pnnp-net1"
NAD = f"default/{NAD_NAME}"


@contextlib.contextmanager
def sealed_node(cni_host: list[Path]) -> Iterator[Node]:
    """A node with no pods of its own; sealed after the test, and gone without leftovers."""
    nft_or_skip()
    bin_dir = next(d for d in cni_host if (d / "bridge").is_file())
    made = Node(bin_dir, namespaces=(), pod_names=()).start()
    try:
        yield made
        made.assert_sealed()
    finally:
        made.close()
    assert not made.leftovers(), f"the node left {made.leftovers()}"


def pod_object(namespace: str, name: str, labels: Mapping[str, str], node: str = "this") -> dict[str, Any]:
    """A Pod selecting the node's net1 NAD as `net1`."""
    selection = json.dumps([{"name": NAD_NAME, "namespace": "default", "interface": "net1"}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}", "labels": dict(labels),
        "annotations": {constants.NPWG_NETWORKS_ANNOTATION: selection}}, "spec": {"nodeName": node}}


def status_of_pod(world: World, namespace: str, name: str) -> list[dict[str, Any]]:
    annotations = world.objects.get("Pod", namespace, name)["metadata"]["annotations"]
    return json.loads(annotations[constants.NPWG_NETWORK_STATUS_ANNOTATION])


async def add(world: World, node: Node, namespace: str, name: str, labels: Mapping[str, str]) -> str:
    """The pod's object in the API, its ADD through the agent (which must succeed), the pod joined to
    the node's probes with the addresses the agent reported; its netns path."""
    world.objects.put(pod_object(namespace, name, labels))
    netns = node.new_pod_netns(namespace, name)
    answer = await world.cni("ADD", f"c-{namespace}-{name}", netns, name, namespace=namespace)
    assert answer.returncode == 0, answer.stdout
    addresses = {e["interface"]: e["ips"][0].split("/")[0] for e in status_of_pod(world, namespace, name)}
    node.join(namespace, name, addresses)
    return netns


__all__ = ["NAD", "NAD_NAME", "add", "pod_object", "sealed_node", "status_of_pod"]
