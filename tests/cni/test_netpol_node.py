"""The netpol harness itself (tests/cni/netpol_support.py): a node in a namespace of the test that
no packet leaves, the x/y/z x a/b/c pods all reaching each other with no table, and nothing
left behind, even when the test fails. Real bridge and host-local plugins, real sockets.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cni.netpol_support import ICMP, SCTP80, SCTP81, TCP80, UDP80, Matrix, Node, sctp_or_skip, standing

pytestmark = pytest.mark.cni


def host_gateways() -> list[str]:
    routes = json.loads(subprocess.run(["ip", "-j", "-4", "route", "show", "default"], capture_output=True,
                                       text=True, check=True).stdout or "[]")
    return [r["gateway"] for r in routes if "gateway" in r]


def test_with_no_table_every_pod_reaches_every_pod_and_none_reaches_past_the_node(cni_host: list[Path]) -> None:
    with standing(cni_host) as node:
        for network in ("eth0", "net1"):
            matrix = node.probe(network=network)
            expected = Matrix.expect(list(node.pods), matrix.probes, lambda s, d, p: True)
            assert not (diff := matrix.diff(expected)), f"{network}:\n{diff}"

        forwarding = subprocess.run(["ip", "netns", "exec", node.node_netns, "sysctl", "-n", "net.ipv4.ip_forward"],
                                    capture_output=True, text=True, check=True).stdout.strip()
        assert forwarding == "1", "the bridge plugin turns forwarding on: the node namespace must be what stops packets"
        # A ClusterIP, and the host's own gateway: what would leave the machine from the host.
        reached = node.reach("x/a", ["10.96.0.1", *host_gateways()], [TCP80, UDP80, ICMP])
        assert not any(reached.values()), f"x/a reached past the node: {reached}"
        node.assert_sealed()


def test_a_failing_test_leaves_no_namespace_bridge_or_ipam_file(cni_host: list[Path]) -> None:
    seen: list[Node] = []
    with pytest.raises(RuntimeError, match="the test failed"), standing(cni_host) as node:
        seen.append(node)
        assert node.leftovers()  # it did make namespaces and files
        raise RuntimeError("the test failed")
    assert seen[0].leftovers() == []


def test_sctp_servers_answer_where_the_kernel_has_sctp(cni_host: list[Path]) -> None:
    sctp_or_skip()
    with standing(cni_host) as node:
        matrix = node.probe([SCTP80, SCTP81])
        assert not (diff := matrix.diff(Matrix.expect(list(node.pods), matrix.probes, lambda s, d, p: True))), diff
