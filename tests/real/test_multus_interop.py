"""Multus thick as the node's NPWG implementation, under the KEP layer and the bridge (bridge/README.md).

The project's central interop claim: a cluster keeps Multus as its agent and still gets PodNetworks,
because the bridge translates a pod's KEP networks into the NPWG selection Multus reads and turns
the network-status Multus writes back into pod IPs. Proven on a second kubelet node of the session
that runs the kit's Multus thick v4.2.4 (`multus-daemon` and `multus-shim`, as processes) instead
of our agent, with the reference plugins behind NetworkAttachmentDefinitions; the first node keeps
our agent, so one PodNetwork spans both implementations.

How Multus runs here: tests/real/multus_support.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.real import multus_support
from tests.real.attachments_support import (
    POD_IPS,
    SELECTION,
    STATUS,
    annotation,
    bare,
    bridged_networks,
    interfaces,
    writer_of,
)
from tests.real.cluster_support import Api, Cluster, Node, eventually, pod_manifest, wait_phase


@pytest.fixture(scope="module")
def multus_node(components: Cluster, api: Api, node: Node) -> Iterator[Node]:
    """A second kubelet node whose NPWG implementation is Multus thick (our agent stays on `node`)."""
    if not multus_support.available(components):
        if os.environ.get("CI"):
            pytest.fail(f"the kit at {components.kit} has no multus/bin/multus-daemon", pytrace=False)
        pytest.skip(f"the kit at {components.kit} has no multus/bin/multus-daemon")
    index = 2  # a node index no other fixture of the session holds now
    while any(n.name.endswith(f"-n{index}") for n in components.nodes.values()):
        index += 1
    with multus_support.multus_node(components, api, index) as created:
        yield created


def test_on_a_multus_node_a_podnetwork_is_attached_by_multus_and_reaches_the_same_network_on_our_agent(
        control_plane: Cluster, api: Api, node: Node, multus_node: Node, ns: str) -> None:
    with bridged_networks(api, ns, "red") as (red,):
        networks = [{"podNetworkName": "default"}, {"podNetworkName": red.podnetwork, "interfaceName": "red0"}]
        # by nodeSelector, so through the bridge's scheduling gate and kube-scheduler with our extender
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest(
            "server", networks=networks, command=["sh", "-c", "nc -l -p 8080"], restartPolicy="Never",
            nodeSelector={"kubernetes.io/hostname": multus_node.name}))
        pod = wait_phase(api, ns, "server")
        assert pod["spec"]["nodeName"] == multus_node.name

        # what Multus read: the bridge's translation of the KEP networks
        assert annotation(api, ns, "server", SELECTION) == [{"name": red.nad, "namespace": ns, "interface": "red0"}]
        seen = interfaces(control_plane, ns, "server")
        assert sorted(seen) == ["eth0", "red0"], seen
        status = annotation(api, ns, "server", STATUS)
        assert writer_of(api, ns, "server", STATUS) == ["multus-daemon"]
        by_interface = {entry["interface"]: entry for entry in status}
        assert sorted(by_interface) == ["eth0", "red0"], status
        assert by_interface["eth0"]["default"] is True and by_interface["eth0"]["name"] == multus_node.network_name
        assert by_interface["red0"]["name"] == red.status_name
        for name, interface in seen.items():
            assert by_interface[name]["mac"] == interface.mac, name
            # Multus reports bare addresses (docs/attachment-data.md)
            assert by_interface[name]["ips"] == [bare(a) for a in interface.addresses], name
        (address,) = seen["red0"].addresses
        assert red.leases() == {bare(address)}
        pod_ips = eventually(lambda: annotation(api, ns, "server", POD_IPS), "the bridge wrote the pod IPs")
        assert pod_ips == [
            {"ip": bare(seen["eth0"].addresses[0]), "podNetwork": "default", "interfaceName": "eth0"},
            {"ip": bare(address), "podNetwork": red.podnetwork, "interfaceName": "red0"}]

        connect = f"for i in $(seq 30); do echo hello | nc -w 2 {bare(address)} 8080 && exit 0; sleep 1; done; exit 1"
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest(
            "client", networks=networks, command=["sh", "-c", connect], restartPolicy="Never", node=node.name))
        wait_phase(api, ns, "client", "Succeeded", timeout=90)
        wait_phase(api, ns, "server", "Succeeded")
        assert control_plane.kubectl("logs", "-n", ns, "server").stdout == "hello\n"


def test_multus_attaches_the_cluster_default_network_to_a_pod_whose_list_leaves_it_out_and_the_pod_is_told(
        control_plane: Cluster, api: Api, multus_node: Node, ns: str) -> None:
    with bridged_networks(api, ns, "solo") as (solo,):
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest(
            "solo", networks=[{"podNetworkName": solo.podnetwork}],
            nodeSelector={"kubernetes.io/hostname": multus_node.name}))
        wait_phase(api, ns, "solo")

        # NPWG 6.2: Multus puts the cluster default network on eth0 and the list after it
        # (bridge/README.md "The explicit list is not honoured"); our agent would give solo alone
        seen = interfaces(control_plane, ns, "solo")
        assert sorted(seen) == ["eth0", "net1"], seen
        status = {e["interface"]: e for e in annotation(api, ns, "solo", STATUS)}
        assert status["eth0"]["name"] == multus_node.network_name and status["net1"]["name"] == solo.status_name
        pod_ips = eventually(lambda: annotation(api, ns, "solo", POD_IPS), "the bridge wrote the pod IPs")
        assert sorted((p["podNetwork"], p["interfaceName"], p["ip"]) for p in pod_ips) == sorted([
            ("default", "eth0", bare(seen["eth0"].addresses[0])),
            (solo.podnetwork, "net1", bare(seen["net1"].addresses[0]))])
        warnings = [e["message"] for e in api.get(f"/api/v1/namespaces/{ns}/events")["items"]
                    if e["involvedObject"]["name"] == "solo" and e["reason"] == "TranslationWarning"]
        assert any("NPWG cannot leave it out" in w for w in warnings), warnings


def test_with_multus_a_default_route_request_reaches_its_selection_but_the_route_stays_on_eth0(
        control_plane: Cluster, api: Api, multus_node: Node, ns: str) -> None:
    with bridged_networks(api, ns, "gw", gateway=True) as (gw,):
        networks = [{"podNetworkName": "default"},
                    {"podNetworkName": gw.podnetwork, "interfaceName": "gw0", "isDefaultGW4": True}]
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_manifest(
            "routed", networks=networks, nodeSelector={"kubernetes.io/hostname": multus_node.name}))
        wait_phase(api, ns, "routed")

        # the bridge's part: isDefaultGW4 becomes the NAD's gateway in NPWG default-route
        assert annotation(api, ns, "routed", SELECTION) == [
            {"name": gw.nad, "namespace": ns, "interface": "gw0", "default-route": [gw.gateway]}]
        # Multus v4.2.4's part (bridge/README.md, "Default routes and Multus's netlink"): it does not
        # move the route, and its status does not say so. When this fails, Multus moved it: update the README
        routes = control_plane.kubectl("exec", "-n", ns, "routed", "--", "ip", "route").stdout
        devices = [words[words.index("dev") + 1] for words in map(str.split, routes.splitlines())
                   if words[:1] == ["default"]]
        assert devices == ["eth0"], routes
        entry = {e["interface"]: e for e in annotation(api, ns, "routed", STATUS)}["gw0"]
        assert "default-route" not in entry and "gateway" not in entry, entry
