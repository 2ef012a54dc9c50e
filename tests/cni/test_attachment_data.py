"""The attachment data for the workload (KEP-3698 Phase II requirement 17) from a real attachment:
the agent attaches a pod with the real `bridge` and `host-local` plugins in a network namespace the
test makes, writes network-status, and the bridge's decision (`bridge.operator.pods.reverse_status_patch`)
turns it into `multinetwork.x-k8s.io/attachments`, which must name the interfaces, addresses and MACs
the pod really has. The rest of the chain (the kubelet projecting the annotation into a file) is
not on this machine: docs/attachment-data.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge import translate
from bridge.operator import pods
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.kep.api import Network
from tests.cni.agent_support import KEP_NETWORKS, NOTHING_LEFT, World, bridge_podnetwork, run

pytestmark = pytest.mark.cni


def link(netns: str, ifname: str) -> dict[str, Any]:
    """`ip -j addr show dev IFNAME` in the pod's netns: its MAC and addresses as the kernel has them."""
    (data,) = json.loads(run("ip", "-n", Path(netns).name, "-j", "addr", "show", "dev", ifname).stdout)
    return data  # type: ignore[no-any-return]


async def test_the_attachment_data_names_the_interfaces_addresses_and_macs_the_pod_has(world: World) -> None:
    nad = world.nad("green", world.network("green", 1))
    bridge_podnetwork(world, "green", "green")
    nets = [{"podNetworkName": "default"}, {"podNetworkName": "green", "interfaceName": "data0"}]
    world.pod("web", {KEP_NETWORKS: json.dumps(nets)})
    netns = world.make_netns()
    added = await world.cni("ADD", "ctr1", netns, "web")
    assert added.returncode == 0, added.stdout
    try:
        pod = Pod.model_validate(world.objects.get("Pod", "default", "web"))
        podnetwork = world.objects.get("PodNetwork", "", "green")
        translation = translate.translate([Network.model_validate(n) for n in nets], "default",
                                          translate.Objects.from_objects([podnetwork, nad]))
        patch = pods.reverse_status_patch(pod, translation)
        assert patch is not None
        data = json.loads(patch["metadata"]["annotations"][constants.ATTACHMENTS_ANNOTATION])
        assert [(d["podNetwork"], d["interfaceName"]) for d in data] == [("default", "eth0"), ("green", "data0")]
        for entry in data:
            kernel = link(netns, entry["interfaceName"])
            assert entry["hardwareAddress"] == kernel["address"]
            assert entry["ips"] == [f"{a['local']}/{a['prefixlen']}" for a in kernel["addr_info"]
                                    if a.get("scope") == "global"]
    finally:
        deleted = await world.cni("DEL", "ctr1", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT
