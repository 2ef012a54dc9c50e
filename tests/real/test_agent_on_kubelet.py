"""Our CNI agent as a real kubelet's runtime calls it: pods on PodNetworks backed by NADs.

Against the kit's kubelet and containerd with the agent installed as a user installs it (the shim
first in the node's CNI configuration): the runtime runs the shim for each sandbox, the agent
reads the pod's KEP networks, runs the reference `bridge` and `host-local` plugins, and writes
network-status; the bridge turns that into pod IPs. What the pod shows is read inside its
container through the kubelet (`kubectl exec`), and on the node (links, leases, the agent's
cache, the sandbox's netns).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.real.attachments_support import (
    POD_IPS,
    STATUS,
    agent_records,
    annotation,
    bare,
    bridged_networks,
    interfaces,
    writer_of,
)
from tests.real.cluster_support import Api, Cluster, Node, eventually, pod_manifest, wait_phase


def test_a_pod_on_two_podnetworks_has_their_interfaces_and_its_status_and_pod_ips_name_them(
        control_plane: Cluster, api: Api, node: Node, ns: str) -> None:
    with bridged_networks(api, ns, "blue", "red") as (blue, red):
        networks = [{"podNetworkName": "default"},
                    {"podNetworkName": blue.podnetwork, "interfaceName": "blue0"},
                    {"podNetworkName": red.podnetwork}]
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest("two", networks=networks))
        wait_phase(api, ns, "two")

        seen = interfaces(control_plane, ns, "two")
        # an unnamed network gets the first free netN (docs/agent.md, step 4)
        assert sorted(seen) == ["blue0", "eth0", "net1"], seen
        status = eventually(lambda: annotation(api, ns, "two", STATUS), "the agent wrote network-status")
        assert writer_of(api, ns, "two", STATUS) == ["podnetwork-cni-agent"]
        by_interface = {entry["interface"]: entry for entry in status}
        assert sorted(by_interface) == sorted(seen)
        assert by_interface["eth0"]["default"] is True and by_interface["eth0"]["name"] == node.network_name
        assert by_interface["blue0"]["name"] == blue.status_name
        assert by_interface["net1"]["name"] == red.status_name
        for name, interface in seen.items():
            assert by_interface[name]["mac"] == interface.mac, name
            assert sorted(by_interface[name]["ips"]) == sorted(interface.addresses), name
        assert {bare(a) for a in seen["blue0"].addresses} <= blue.leases()
        assert {bare(a) for a in seen["net1"].addresses} <= red.leases()

        pod_ips = eventually(lambda: annotation(api, ns, "two", POD_IPS), "the bridge wrote the pod IPs")
        assert pod_ips == [
            {"ip": bare(seen["eth0"].addresses[0]), "podNetwork": "default", "interfaceName": "eth0"},
            {"ip": bare(seen["blue0"].addresses[0]), "podNetwork": blue.podnetwork, "interfaceName": "blue0"},
            {"ip": bare(seen["net1"].addresses[0]), "podNetwork": red.podnetwork, "interfaceName": "net1"},
        ]


def test_two_pods_on_one_podnetwork_reach_each_other_over_it(control_plane: Cluster, api: Api, node: Node,
                                                             ns: str) -> None:
    with bridged_networks(api, ns, "talk") as (talk,):
        networks = [{"podNetworkName": "default"}, {"podNetworkName": talk.podnetwork, "interfaceName": "talk0"}]
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest(
            "server", networks=networks, command=["sh", "-c", "nc -l -p 8080"], restartPolicy="Never"))
        wait_phase(api, ns, "server")
        (address,) = interfaces(control_plane, ns, "server")["talk0"].addresses
        # the client may start before the server listens: it tries until one connection is made
        connect = f"for i in $(seq 30); do echo hello | nc -w 2 {bare(address)} 8080 && exit 0; sleep 1; done; exit 1"
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest(
            "client", networks=networks, command=["sh", "-c", connect], restartPolicy="Never"))

        wait_phase(api, ns, "client", "Succeeded", timeout=90)
        wait_phase(api, ns, "server", "Succeeded")
        assert control_plane.kubectl("logs", "-n", ns, "server").stdout == "hello\n"


def test_deleting_a_pod_leaves_no_veth_lease_cache_record_or_netns_behind(
        control_plane: Cluster, api: Api, node: Node, ns: str) -> None:
    with bridged_networks(api, ns, "blue", "red") as (blue, red):
        networks = [{"podNetworkName": "default"},
                    {"podNetworkName": blue.podnetwork, "interfaceName": "blue0"},
                    {"podNetworkName": red.podnetwork, "interfaceName": "red0"}]
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest("gone", networks=networks))
        wait_phase(api, ns, "gone")
        (record,) = eventually(lambda: [r for r in agent_records(node, ns, "gone") if r["complete"]],
                               "the agent recorded the pod's container")
        netns = Path(record["netns"])
        # what there is to leave behind, before the delete
        assert len(blue.ports()) == 1 and len(red.ports()) == 1
        assert len(blue.leases()) == 1 and len(red.leases()) == 1
        assert netns.exists()

        api.delete(f"/api/v1/namespaces/{ns}/pods/gone")

        def nothing_left() -> bool:
            left = {"veths": blue.ports() + red.ports(), "leases": sorted(blue.leases() | red.leases()),
                    "cache": [r["path"] for r in agent_records(node, ns, "gone")],
                    "netns": [str(netns)] if netns.exists() else []}
            assert not any(left.values()), left
            return True

        eventually(nothing_left, "the pod's sandbox is torn down without a trace", timeout=60)


def test_a_pod_whose_networks_leave_out_default_gets_the_first_on_eth0_and_the_kubelet_reports_its_address(
        control_plane: Cluster, api: Api, node: Node, ns: str) -> None:
    with bridged_networks(api, ns, "solo") as (solo,):
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest("solo", networks=[{"podNetworkName": solo.podnetwork}]))
        pod = wait_phase(api, ns, "solo")

        # KEP: the list is explicit (docs/agent.md "The explicit list"); the runtime reads the pod's
        # IPs from the result of CNI_IFNAME, which is this network's
        seen = interfaces(control_plane, ns, "solo")
        assert sorted(seen) == ["eth0"], seen
        (address,) = seen["eth0"].addresses
        assert solo.leases() == {bare(address)}
        assert [ip["ip"] for ip in pod["status"]["podIPs"]] == [bare(address)]
        status = eventually(lambda: annotation(api, ns, "solo", STATUS), "the agent wrote network-status")
        assert status == [{"name": solo.status_name, "interface": "eth0", "ips": [address],
                           "mac": seen["eth0"].mac, "default": True}]
        eventually(lambda: annotation(api, ns, "solo", POD_IPS)
                   == [{"ip": bare(address), "podNetwork": solo.podnetwork, "interfaceName": "eth0"}],
                   "the pod IPs name solo, not default")


def test_a_sandbox_the_kubelet_recreates_gets_its_networks_anew_and_the_old_one_leaves_nothing(
        control_plane: Cluster, api: Api, node: Node, ns: str) -> None:
    with bridged_networks(api, ns, "blue") as (blue,):
        networks = [{"podNetworkName": "default"}, {"podNetworkName": blue.podnetwork, "interfaceName": "blue0"}]
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest("phoenix", networks=networks))
        wait_phase(api, ns, "phoenix")
        (old,) = eventually(lambda: [r for r in agent_records(node, ns, "phoenix") if r["complete"]],
                            "the agent recorded the pod's sandbox")
        crictl = [str(control_plane.bins["crictl"]), "--runtime-endpoint", f"unix://{node.containerd_socket}"]
        info = json.loads(subprocess.run([*crictl, "inspectp", old["container_id"]], check=True,
                                         capture_output=True, text=True).stdout)
        # the sandbox dies under the pod (its pause process killed): the kubelet tears it down
        # (CNI DEL) and starts a new one (CNI ADD), as after a node's runtime lost it
        os.kill(info["info"]["pid"], signal.SIGKILL)

        def recreated() -> dict[str, Any]:
            records = [r for r in agent_records(node, ns, "phoenix") if r["complete"]]
            assert [r["container_id"] for r in records] != [old["container_id"]], "still the old sandbox"
            (new,) = records
            return new

        new = eventually(recreated, "the kubelet made a new sandbox and the agent attached it", timeout=90)
        wait_phase(api, ns, "phoenix")

        def settled() -> bool:
            seen = interfaces(control_plane, ns, "phoenix")
            status = {e["interface"]: e for e in annotation(api, ns, "phoenix", STATUS)}
            assert sorted(seen) == sorted(status) == ["blue0", "eth0"], (seen, status)
            for name, interface in seen.items():
                assert status[name]["mac"] == interface.mac and status[name]["ips"] == list(interface.addresses)
            assert blue.leases() == {bare(a) for a in seen["blue0"].addresses}, blue.leases()
            assert not Path(old["netns"]).exists() and len(blue.ports()) == 1
            return True

        eventually(settled, "the new sandbox's interfaces are the status, the old one left nothing", timeout=60)
        assert new["netns"] != old["netns"]
