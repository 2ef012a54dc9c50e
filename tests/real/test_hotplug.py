"""Hot-plug on a real kubelet (docs/hotplug.md): a running pod's networks changed by a PATCH.

The change goes through the API server as a user's `kubectl annotate` does (our admission
webhooks see the UPDATE); the bridge rewrites its selection, our agent on the kit's kubelet node
attaches or detaches in the pod's running sandbox, rewrites network-status, and the kubelet
projects the bridge's attachment data into the pod's downward-API volume.
"""

from __future__ import annotations

import json

from tests.real.attachments_support import (
    NETWORKS,
    POD_IPS,
    STATUS,
    annotation,
    bare,
    bridged_networks,
    interfaces,
)
from tests.real.cluster_support import Api, Cluster, Node, eventually, pod_manifest, wait_phase


def _attachment_data(cluster: Cluster, ns: str, pod: str) -> list[dict[str, object]]:
    """The bridge's attachment data as the container reads it from its downward-API volume."""
    text = cluster.kubectl("exec", "-n", ns, pod, "--", "cat", "/etc/podnetwork/attachments").stdout
    return json.loads(text) if text else []


def _events(api: Api, ns: str, pod: str, reason: str) -> list[str]:
    items = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [e["message"] for e in items if e["involvedObject"]["name"] == pod and e["reason"] == reason]


def test_a_network_added_to_a_running_pod_appears_in_it_and_goes_again_with_its_lease(
        control_plane: Cluster, api: Api, node: Node, ns: str) -> None:
    with bridged_networks(api, ns, "blue", "red") as (blue, red):
        before = [{"podNetworkName": "default"}, {"podNetworkName": blue.podnetwork, "interfaceName": "blue0"}]
        pod = pod_manifest("vm", networks=before)
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "podnetwork", "mountPath": "/etc/podnetwork"}]
        pod["spec"]["volumes"] = [{"name": "podnetwork", "downwardAPI": {"items": [{
            "path": "attachments",
            "fieldRef": {"fieldPath": "metadata.annotations['multinetwork.x-k8s.io/attachments']"}}]}}]
        api.create(f"/api/v1/namespaces/{ns}/pods", pod)
        wait_phase(api, ns, "vm")
        eventually(lambda: len(_attachment_data(control_plane, ns, "vm")) == 2,
                   "the container reads its two attachments", timeout=60)
        assert sorted(interfaces(control_plane, ns, "vm")) == ["blue0", "eth0"]

        after = [*before, {"podNetworkName": red.podnetwork, "interfaceName": "red0"}]
        api.merge_patch(f"/api/v1/namespaces/{ns}/pods/vm", {"metadata": {"annotations": {NETWORKS: json.dumps(after)}}})

        def red_attached() -> str:
            seen = interfaces(control_plane, ns, "vm")
            assert sorted(seen) == ["blue0", "eth0", "red0"], seen
            (address,) = seen["red0"].addresses
            status = {e["interface"]: e for e in annotation(api, ns, "vm", STATUS)}
            assert status["red0"]["name"] == red.status_name and status["red0"]["ips"] == [address], status
            assert status["red0"]["mac"] == seen["red0"].mac
            return address

        address = eventually(red_attached, "red0 is in the container and in network-status", timeout=60)
        assert red.leases() == {bare(address)}
        eventually(lambda: {"ip": bare(address), "podNetwork": red.podnetwork, "interfaceName": "red0"}
                   in annotation(api, ns, "vm", POD_IPS), "the pod IPs name red", timeout=60)
        eventually(lambda: any(a.get("interfaceName") == "red0" and a.get("ips") == [address]
                               for a in _attachment_data(control_plane, ns, "vm")),
                   "the kubelet refreshed the container's attachment data", timeout=90)
        assert any("attach" in m and "red0" in m for m in _events(api, ns, "vm", "NetworksChanged"))

        api.merge_patch(f"/api/v1/namespaces/{ns}/pods/vm", {"metadata": {"annotations": {NETWORKS: json.dumps(before)}}})

        def red_detached() -> bool:
            seen = interfaces(control_plane, ns, "vm")
            assert sorted(seen) == ["blue0", "eth0"], seen
            status = annotation(api, ns, "vm", STATUS)
            assert [e["interface"] for e in status] == ["eth0", "blue0"], status
            assert not red.leases(), red.leases()
            return True

        eventually(red_detached, "red0 left the container, network-status and its lease", timeout=60)
        assert red.ports() == [] and len(blue.ports()) == 1
        eventually(lambda: [a["podNetwork"] for a in _attachment_data(control_plane, ns, "vm")]
                   == ["default", blue.podnetwork], "the container's attachment data drops red", timeout=90)
