"""The edge's builders (bridge.policy.views): a pod's addresses per network from network-status
(NPWG 5) and multinetwork.x-k8s.io/pod-ips, its named ports, the networks with their aliases, and
a pod's interfaces keyed by network."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge import npwg, translate
from bridge.policy import NetworkInfo, Protocol, views
from bridge.policy.world import PodInterface

NETWORKS = [NetworkInfo(podnetwork="storage", nad="infra/storage-nad"), NetworkInfo(podnetwork="telco"), NetworkInfo(nad="x/mv")]


def _pod(annotations: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "a", "namespace": "x", "labels": {"pod": "a"},
                     "annotations": {k: json.dumps(v) if not isinstance(v, str) else v for k, v in annotations.items()}},
        "spec": {"nodeName": "n1", **spec},
    }


def test_addresses_come_from_network_status_and_pod_ips_merged_per_interface() -> None:
    pod = views.pod_from_object(_pod({
        "k8s.v1.cni.cncf.io/network-status": [
            {"name": "cluster", "interface": "eth0", "ips": ["10.244.0.5"], "default": True},
            {"name": "infra/storage-nad", "interface": "net1", "ips": ["10.1.0.5/24", "fd00:1::5/64"]},
            {"name": "mv", "interface": "net2", "ips": ["10.2.0.5"]},
            {"name": "y/unknown", "interface": "net9", "ips": ["10.9.0.5"]},
        ],
        "multinetwork.x-k8s.io/pod-ips": [
            {"ip": "10.1.0.5", "podNetwork": "storage", "interfaceName": "net1"},
            {"ip": "10.3.0.5", "podNetwork": "telco", "interfaceName": "net3"},
            {"ip": "10.4.0.5", "podNetwork": "nowhere"},
        ],
    }), NETWORKS)
    got = {(i.network, i.interface): [str(a) for a in i.addresses] for i in pod.interfaces}
    assert got == {
        ("storage", "net1"): ["10.1.0.5", "fd00:1::5"],
        ("x/mv", "net2"): ["10.2.0.5"],
        ("telco", "net3"): ["10.3.0.5"],
    }
    assert pod.node == "n1" and dict(pod.labels) == {"pod": "a"}
    assert pod.addresses_on("storage")[0] == ipaddress.ip_address("10.1.0.5")


def test_unreadable_annotations_add_nothing_and_break_nothing() -> None:
    pod = views.pod_from_object(_pod({"k8s.v1.cni.cncf.io/network-status": "{not json",
                                      "multinetwork.x-k8s.io/pod-ips": "[1, {\"ip\": 5}]"}), NETWORKS)
    assert pod.interfaces == ()


def test_only_named_container_ports_are_kept_with_their_protocol() -> None:
    pod = views.pod_from_object(_pod({}, containers=[
        {"name": "c", "ports": [{"name": "http", "containerPort": 8080}, {"containerPort": 9090},
                                {"name": "dns", "containerPort": 53, "protocol": "UDP"}, {"name": "bad", "containerPort": "x"}]},
        {"name": "d", "ports": "garbage"},
    ]), NETWORKS)
    assert pod.named_port("http", Protocol.TCP) == 8080
    assert pod.named_port("dns", Protocol.UDP) == 53
    assert pod.named_port("dns", Protocol.TCP) is None
    assert [p.name for p in pod.ports] == ["http", "dns"]


def test_networks_are_podnetworks_with_their_nad_alias_and_the_nads_no_podnetwork_uses() -> None:
    bridged = translate.PodNetwork.model_validate({
        "metadata": {"name": "storage"},
        "spec": {"provider": "multinetwork.x-k8s.io/npwg-bridge", "parametersRefs": [
            {"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "storage-nad", "namespace": "infra"}]},
    })
    native = translate.PodNetwork.model_validate({"metadata": {"name": "telco"}, "spec": {"provider": "example.com/cni"}})
    default = translate.PodNetwork.model_validate({"metadata": {"name": "default"}})
    nads = [npwg.NetworkAttachmentDefinition.model_validate({"metadata": {"name": n, "namespace": ns}})
            for ns, n in (("infra", "storage-nad"), ("x", "mv"))]
    assert views.networks_of([bridged, native, default], nads) == [
        NetworkInfo(podnetwork="storage", nad="infra/storage-nad"), NetworkInfo(podnetwork="telco"), NetworkInfo(nad="x/mv"),
    ]


_ADDRESS = st.sampled_from([ipaddress.ip_address(a) for a in ("10.0.0.1", "10.0.0.2", "fd00::1")])
_INTERFACES = st.lists(st.builds(PodInterface, st.sampled_from(["ns/blue", "blue", "ns/red"]),
                                 st.sampled_from(["net1", "net2", None]), st.lists(_ADDRESS, max_size=3).map(tuple)),
                       max_size=4)


@given(_INTERFACES, st.sampled_from([{}, {"ns/blue": "blue"}, {"ns/blue": "blue", "ns/red": "ns/red"}]))
def test_keyed_merges_each_interface_of_one_network_and_shares_what_it_does_not_change(
        interfaces: list[PodInterface], by_nad: dict[str, str]) -> None:
    got = views.keyed(interfaces, by_nad)
    # One interface per (network key, name), in the order first seen, its addresses each once.
    merged: dict[tuple[str, str | None], list[ipaddress.IPv4Address | ipaddress.IPv6Address]] = {}
    for itf in interfaces:
        addresses = merged.setdefault((by_nad.get(itf.network, itf.network), itf.interface), [])
        for address in itf.addresses:
            if address not in addresses:
                addresses.append(address)
    assert [(i.network, i.interface, list(i.addresses)) for i in got] == [(*k, v) for k, v in merged.items()]
    # An interface that keying leaves as it was reported is the reported object (the agent keeps both).
    for itf in got:
        same = [i for i in interfaces if (by_nad.get(i.network, i.network), i.interface) == (itf.network, itf.interface)]
        if len(same) == 1 and same[0] == itf:
            assert same[0] is itf
