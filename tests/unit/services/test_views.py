"""bridge.services.views: Services and EndpointSlices (discovery.k8s.io/v1) read into the compiler's
types; what does not fit is skipped with a log line naming the object and the field, the rest kept,
and nothing raises on any JSON (fuzzed).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.services import views
from bridge.services.model import Endpoint, EndpointPort, Protocol, Service, ServicePort, SessionAffinity

ip = ipaddress.ip_address
ANNOTATION = "multinetwork.x-k8s.io/podnetwork"


def service_object(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": "x", "name": "db",
                         "annotations": {ANNOTATION: "blue"} if annotations is None else annotations},
            "spec": spec}


def slice_object(endpoints: list[Any], *, address_type: str = "IPv4", ports: Any = None,
                 labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": address_type,
            "metadata": {"namespace": "x", "name": "db-blue-abcde",
                         "labels": {"kubernetes.io/service-name": "db",
                                    "endpointslice.kubernetes.io/managed-by": "podnetwork"}
                         if labels is None else labels},
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}] if ports is None else ports,
            "endpoints": endpoints}


def test_a_dual_stack_service_with_ports_and_client_ip_affinity() -> None:
    got = views.service(service_object({
        "type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:96::10"],
        "ports": [{"name": "http", "port": 80, "targetPort": "http"},
                  {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}],
        "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}))
    assert got == Service("x", "db", "blue", (ip("10.96.0.10"), ip("fd00:96::10")),
                          (ServicePort(80, Protocol.TCP, "http", "http"), ServicePort(53, Protocol.UDP, "dns", 5353)),
                          SessionAffinity.CLIENT_IP, 60)


def test_the_edge_may_name_the_resolved_network_and_a_single_cluster_ip_is_read_from_cluster_ip() -> None:
    got = views.service(service_object({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}), network="blue-net")
    assert got is not None
    assert (got.network, got.cluster_ips, got.ports) == ("blue-net", (ip("10.96.0.10"),), (ServicePort(80),))
    assert got.session_affinity is SessionAffinity.NONE and got.affinity_timeout == 10800


@pytest.mark.parametrize("obj", [
    service_object({"clusterIP": "10.96.0.10"}, annotations={}),  # not on a PodNetwork: kube-proxy's
    service_object({"type": "NodePort", "clusterIP": "10.96.0.10"}),
    service_object({"type": "LoadBalancer", "clusterIP": "10.96.0.10"}),
    service_object({"type": "ExternalName", "externalName": "example.org"}),
    service_object({"ports": [{"port": 80}]}),  # no ClusterIP allocated yet
    service_object({"clusterIPs": ["not-an-ip"]}),
], ids=["unannotated", "nodeport", "loadbalancer", "externalname", "unallocated", "bad-ip"])
def test_services_not_served_in_the_pods_are_none(obj: dict[str, Any]) -> None:
    assert views.service(obj) is None


def test_a_headless_service_has_no_cluster_ip() -> None:
    got = views.service(service_object({"clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 80}]}))
    assert got is not None and got.headless


def test_bad_ports_are_skipped_with_a_line_each_and_the_good_ones_kept(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="bridge.services.views")
    got = views.service(service_object({"clusterIP": "10.96.0.10", "ports": [
        {"name": "ok", "port": 80}, "junk", {"name": "zero", "port": 0}, {"name": "icmp", "port": 1, "protocol": "ICMP"},
        {"name": "again", "port": 80, "protocol": "TCP"}, {"name": 5, "port": 81}],
        "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 999999}}}))
    assert got is not None
    assert got.ports == (ServicePort(80, Protocol.TCP, "ok"),)
    assert got.affinity_timeout == 10800
    assert [r.getMessage() for r in caplog.records] == [
        "Service x/db: sessionAffinityConfig.clientIP.timeoutSeconds 999999 is not 1-86400; using 10800",
        "Service x/db: spec.ports[1] is not an object; skipped",
        "Service x/db: spec.ports[2].port 0 is not a port number (1-65535); skipped",
        "Service x/db: spec.ports[3].protocol 'ICMP' is not one of TCP, UDP, SCTP; skipped",
        "Service x/db: spec.ports[4] repeats TCP/80; skipped",
        "Service x/db: spec.ports[5].name 5 is not text; skipped",
    ]


def test_a_slices_endpoints_with_their_conditions_and_the_slices_ports() -> None:
    got = views.slice_endpoints(slice_object([
        {"addresses": ["10.1.0.5"], "conditions": {"ready": True}},
        {"addresses": ["10.1.0.6", "10.1.0.60"]},  # no conditions: ready; the first address only
        {"addresses": ["10.1.0.7"], "conditions": {"ready": False, "serving": True, "terminating": True}},
        {"addresses": ["10.1.0.8"], "conditions": {"ready": False}},  # serving nil defers to ready
    ]))
    ports = (EndpointPort("http", Protocol.TCP, 8080),)
    assert got == ("x/db", (Endpoint(ip("10.1.0.5"), ports), Endpoint(ip("10.1.0.6"), ports),
                            Endpoint(ip("10.1.0.7"), ports, False, True, True),
                            Endpoint(ip("10.1.0.8"), ports, False, False, False)))


def test_bad_endpoints_and_ports_of_a_slice_are_skipped_and_fqdn_or_foreign_slices_ignored(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="bridge.services.views")
    got = views.slice_endpoints(slice_object(
        [{"addresses": ["fd00::5"]}, {"addresses": []}, "junk", {"addresses": ["10.1.0.5"]}],
        ports=[{"name": "http", "port": 8080}, {"name": "all", "port": None}, 7]))
    assert got == ("x/db", (Endpoint(ip("10.1.0.5"), (EndpointPort("http", Protocol.TCP, 8080),)),))
    assert len(caplog.records) == 5 and all("EndpointSlice x/db-blue-abcde" in r.getMessage() for r in caplog.records)

    assert views.slice_endpoints(slice_object([{"addresses": ["a.example"]}], address_type="FQDN")) is None
    assert views.slice_endpoints(slice_object([], labels={})) is None
    assert views.slice_endpoints(slice_object([]), managed_by="endpointslice-controller.k8s.io") is None
    assert views.slice_endpoints(slice_object([]), managed_by="podnetwork") == ("x/db", ())


def test_endpoints_are_grouped_by_service_across_slices_and_families() -> None:
    got = views.endpoints_by_service([
        slice_object([{"addresses": ["10.1.0.5"]}]),
        slice_object([{"addresses": ["fd00:1::5"]}], address_type="IPv6"),
        slice_object([{"addresses": ["10.1.0.9"]}], labels={"kubernetes.io/service-name": "cache"}),
    ])
    assert {k: [str(e.address) for e in v] for k, v in got.items()} == {
        "x/db": ["10.1.0.5", "fd00:1::5"], "x/cache": ["10.1.0.9"]}


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                                       max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(spec=JSON, endpoints=JSON, ports=JSON, address_type=JSON)
def test_any_json_is_read_or_skipped_never_raised(spec: Any, endpoints: Any, ports: Any, address_type: Any) -> None:
    logging.getLogger("bridge.services.views").disabled = True
    try:
        views.service(service_object(spec))
        views.service({"metadata": spec, "spec": spec})
        views.slice_endpoints({"metadata": {"namespace": "x", "labels": {"kubernetes.io/service-name": "s"}},
                               "addressType": address_type, "endpoints": endpoints, "ports": ports})
        views.slice_endpoints(slice_object(endpoints if isinstance(endpoints, list) else [endpoints], ports=ports))
    finally:
        logging.getLogger("bridge.services.views").disabled = False
