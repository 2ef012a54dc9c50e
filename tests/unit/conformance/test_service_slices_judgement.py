"""What the ServiceEndpointSlices test accepts of a Service's EndpointSlices on a PodNetwork, and the
wrong implementations it names (the cluster network's addresses, another controller's slices, wrong
readiness, a named port not resolved per pod, too many endpoints in a slice...)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from conformance.kep.tests.services import Backend, backend, service_families, slices_problem
from podnetwork.ground import constants

OURS = {constants.ENDPOINTSLICE_MANAGED_BY_LABEL: constants.ENDPOINTSLICE_MANAGED_BY,
        constants.ENDPOINTSLICE_SERVICE_NAME_LABEL: "db"}
A = Backend("a", {"IPv4": "198.51.100.1", "IPv6": "2001:db8:2::1"}, True, 8080,
            {"192.0.2.1": "default", "2001:db8:1::1": "default"})
B = Backend("b", {"IPv4": "198.51.100.2"}, False, 9090, {"192.0.2.2": "default"})
OUTSIDER = Backend("outsider", {}, True, 8080, {"192.0.2.9": "default"})
BACKENDS = [A, B, OUTSIDER]


def endpoint(pod: str, address: str, ready: bool) -> dict[str, Any]:
    return {"addresses": [address], "conditions": {"ready": ready, "serving": ready, "terminating": False},
            "targetRef": {"kind": "Pod", "name": pod, "namespace": "app"}}


def eps_slice(name: str, kind: str, port: int, *endpoints: dict[str, Any],
              labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "app", "labels": OURS if labels is None else labels},
            "addressType": kind, "endpoints": list(endpoints),
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}


RIGHT = [eps_slice("db.ipv4.0", "IPv4", 8080, endpoint("a", "198.51.100.1", True)),
         eps_slice("db.ipv4.1", "IPv4", 9090, endpoint("b", "198.51.100.2", False)),
         # The upstream controller's slice of the same Service: not ours, not judged.
         eps_slice("db-x7k2p", "IPv4", 8080, endpoint("a", "192.0.2.1", True), endpoint("b", "192.0.2.2", False),
                   labels={constants.ENDPOINTSLICE_MANAGED_BY_LABEL: "endpointslice-controller.k8s.io",
                           constants.ENDPOINTSLICE_SERVICE_NAME_LABEL: "db"})]


def judge(slices: list[dict[str, Any]], families: tuple[str, ...] = ("IPv4",),
          backends: list[Backend] | None = None) -> str | None:
    return slices_problem("db", "blue", families, "http", BACKENDS if backends is None else backends, slices)


def test_the_network_addresses_with_their_readiness_and_ports_pass() -> None:
    assert judge(RIGHT) is None
    v6 = eps_slice("db.ipv6.0", "IPv6", 8080, endpoint("a", "2001:db8:2::1", True))
    assert judge([*RIGHT, v6], ("IPv4", "IPv6")) is None


def changed(index: int, **fields: Any) -> list[dict[str, Any]]:
    slices = copy.deepcopy(RIGHT)
    slices[index].update(fields)
    return slices


def with_endpoint(index: int, **fields: Any) -> list[dict[str, Any]]:
    slices = copy.deepcopy(RIGHT)
    slices[index]["endpoints"][0].update(fields)
    return slices


@pytest.mark.parametrize(("slices", "says"), [
    # The cluster network's address (what the upstream controller writes) in our slice.
    (with_endpoint(0, addresses=["192.0.2.1"]), "pod a's address on PodNetwork default, not its address on blue"),
    # The same slices, managed by someone else: ours are missing.
    ([{**s, "metadata": {**s["metadata"], "labels": {**OURS, constants.ENDPOINTSLICE_MANAGED_BY_LABEL: "other"}}}
      for s in RIGHT[:2]], "no endpoint for pod a (IPv4 198.51.100.1), b (IPv4 198.51.100.2) on PodNetwork blue "
                           "(no EndpointSlice labelled"),
    (RIGHT[:1], "no endpoint for pod b (IPv4 198.51.100.2) on PodNetwork blue in db.ipv4.0"),
    # A pod that is not Ready listed as ready, or serving.
    (with_endpoint(1, conditions={"ready": True, "serving": True, "terminating": False}), "ready=True"),
    (with_endpoint(1, conditions={"ready": False, "serving": True, "terminating": False}), "serving=True"),
    (with_endpoint(0, conditions={"ready": True, "serving": True, "terminating": True}), "terminating=True"),
    # The named target port not resolved per pod: b's number is 9090.
    (changed(1, ports=[{"name": "http", "port": 8080, "protocol": "TCP"}]), "container port 'http' is 9090"),
    (changed(0, ports=[{"name": "http", "port": 80, "protocol": "TCP"}]), "port 'http' is 80 for pod a"),
    # Families: one per slice, and only the Service's.
    (with_endpoint(0, addresses=["2001:db8:2::1"]), "of addressType IPv4 lists 2001:db8:2::1"),
    ([*RIGHT, {**eps_slice("db.ipv6.0", "IPv6", 8080, endpoint("a", "2001:db8:2::1", True))}],
     "addressType IPv6, not one of the Service's families IPv4"),
    # A pod listed twice, a pod the Service does not select, a selected pod not on the network.
    ([*RIGHT, eps_slice("db.ipv4.2", "IPv4", 8080, endpoint("a", "198.51.100.1", True))], "listed twice"),
    (with_endpoint(0, targetRef={"kind": "Pod", "name": "stranger"}), "not a pod the Service selects"),
    (with_endpoint(0, addresses=["192.0.2.9"], targetRef={"kind": "Pod", "name": "outsider"}),
     "pod outsider's address on PodNetwork default"),
    (with_endpoint(0, addresses=["198.51.100.1", "198.51.100.7"]), "not one"),
])
def test_a_wrong_implementation_is_named(slices: list[dict[str, Any]], says: str) -> None:
    problem = judge(slices)
    assert problem is not None and says in problem, problem


def test_more_than_100_endpoints_in_one_slice_is_wrong_and_100_are_right() -> None:
    many = [Backend(f"p{i}", {"IPv4": f"198.51.{100 + i // 200}.{i % 200 + 1}"}, True, 8080) for i in range(101)]
    one = eps_slice("db.ipv4.0", "IPv4", 8080, *(endpoint(b.pod, b.addresses["IPv4"], True) for b in many))
    problem = judge([one], backends=many)
    assert problem is not None and "holds 101 endpoints; at most 100" in problem
    two = [eps_slice("db.ipv4.0", "IPv4", 8080, *one["endpoints"][:100]),
           eps_slice("db.ipv4.1", "IPv4", 8080, *one["endpoints"][100:])]
    assert judge(two, backends=many) is None


def test_a_pod_is_read_as_a_backend_from_its_pod_ips_per_network_its_ready_condition_and_its_port() -> None:
    pod = {"metadata": {"name": "a", "annotations": {constants.POD_IPS_ANNOTATION: (
        '[{"ip": "192.0.2.1", "podNetwork": "default"}, {"ip": "198.51.100.1", "podNetwork": "blue"},'
        ' {"ip": "2001:db8:2::1", "podNetwork": "blue"}, {"ip": "10.9.0.1", "podNetwork": "red"}]')}},
        "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080},
                                                        {"name": "http", "containerPort": 53, "protocol": "UDP"}]}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert backend(pod, "blue", "http") == Backend(
        "a", {"IPv4": "198.51.100.1", "IPv6": "2001:db8:2::1"}, True, 8080,
        {"192.0.2.1": "default", "10.9.0.1": "red"})
    assert backend({**pod, "status": {}}, "green", "sql") == Backend(
        "a", {}, False, None, {"192.0.2.1": "default", "198.51.100.1": "blue", "2001:db8:2::1": "blue",
                               "10.9.0.1": "red"})


@pytest.mark.parametrize(("spec", "families"), [
    ({"ipFamilies": ["IPv6", "IPv4"], "clusterIPs": ["fd00::1", "10.96.0.1"]}, ("IPv6", "IPv4")),
    ({"clusterIPs": ["fd00::1"]}, ("IPv6",)),
    ({"clusterIP": "10.96.0.1"}, ("IPv4",)),
    ({}, ("IPv4",)),
])
def test_the_families_judged_are_the_services(spec: dict[str, Any], families: tuple[str, ...]) -> None:
    assert service_families({"spec": spec}) == families
