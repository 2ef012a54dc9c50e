"""bridge.services.dnat without a kernel: what a client pod's table does to a new connection, read from
the libnftables JSON it compiles (a small reader below follows the subset the compiler writes and
fails on anything else), and the table's shape: our table only, the hooks and priorities that
compose with the MultiNetworkPolicy table, the routes. The kernel running it with real traffic:
tests/cni/test_service_cluster_ips.py.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import policy as netpol
from bridge import services
from bridge.agent.netns import nftables
from bridge.policy import rules as policy_rules
from bridge.services import dnat
from bridge.services.model import Endpoint, EndpointPort, Protocol, Service, ServicePort, SessionAffinity

ip = ipaddress.ip_address
TCP80 = ServicePort(80, Protocol.TCP, "http", "http")
DNS = ServicePort(53, Protocol.UDP, "dns", 53)
SCTP = ServicePort(7, Protocol.SCTP, "echo", 7)
PORTS = (EndpointPort("http", Protocol.TCP, 8080), EndpointPort("dns", Protocol.UDP, 5353),
         EndpointPort("echo", Protocol.SCTP, 7))
CLIENT = services.ClientPod("x", "client", (
    services.attachment("default", "eth0", "10.0.0.9"),
    services.attachment("blue", "net1", "10.1.0.9/24", "fd00:1::9"),
    services.attachment("red", "net2", "10.2.0.9"),
))


def svc(name: str = "db", network: str = "blue", cluster_ips: tuple[str, ...] = ("10.96.0.10",),
        ports: tuple[ServicePort, ...] = (TCP80, DNS, SCTP), affinity: SessionAffinity = SessionAffinity.NONE,
        timeout: int = 10800) -> Service:
    return Service("x", name, network, tuple(ip(a) for a in cluster_ips), ports, affinity, timeout)


def ep(address: str, *, ready: bool = True, serving: bool | None = None, terminating: bool = False,
       ports: tuple[EndpointPort, ...] = PORTS) -> Endpoint:
    return Endpoint(ip(address), ports, ready, ready if serving is None else serving, terminating)


class Reader:
    """Follows a new connection leaving the pod through the compiled table."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.sets: dict[str, Any] = {}
        self.chains: dict[str, dict[str, Any]] = {}
        self.rules: dict[str, list[list[dict[str, Any]]]] = {}
        for command in document["nftables"]:
            if "metainfo" in command:
                continue
            ((verb, body),) = command.items()
            assert verb == "add", command
            ((kind, obj),) = body.items()
            if kind == "table":
                assert obj == {"family": "inet", "name": "podnetwork_services"}
                continue
            assert (obj["family"], obj["table"]) == ("inet", "podnetwork_services"), command
            if kind in ("set", "map"):
                self.sets[obj["name"]] = obj
            elif kind == "chain":
                self.chains[obj["name"]] = obj
                self.rules[obj["name"]] = []
            elif kind == "rule":
                assert obj["chain"] in self.chains, f"a rule before its chain: {command}"
                self.rules[obj["chain"]].append(obj["expr"])
            else:
                raise AssertionError(f"the reader does not know {command}")

    @staticmethod
    def key(*parts: Any) -> dict[str, Any]:
        return {"concat": list(parts)}

    def elements(self, name: str) -> list[Any]:
        return list(self.sets[name].get("elem", []))

    def connect(self, interface: str, destination: str, protocol: str, port: int) -> str | set[tuple[str, int]]:
        """'refused', 'untouched' (leaves as it is) or the endpoints (address, port) it may be sent to."""
        version = ip(destination).version
        proto = protocol.lower()
        full = self.key(interface, destination, proto, port)
        served = f"served_v{version}" in self.sets and full in self.elements(f"served_v{version}")
        known = (f"cluster_ips_v{version}" in self.sets
                 and self.key(interface, destination) in self.elements(f"cluster_ips_v{version}"))
        if known and not served:
            return "refused"
        for key, verdict in self.sets.get(f"services_v{version}", {}).get("elem", []):
            if key == full:
                return self.run(verdict["goto"]["target"], proto)
        return "untouched"

    def run(self, chain: str, proto: str) -> set[tuple[str, int]]:
        out: set[tuple[str, int]] = set()
        for expr in self.rules[chain]:
            last = expr[-1]
            if "dnat" in last:
                assert expr[0] == {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": proto}}
                addr = last["dnat"]["addr"]
                if isinstance(addr, str):
                    out.add((addr, last["dnat"]["port"]))
                else:
                    assert addr["map"]["key"]["numgen"]["mod"] == len(addr["map"]["data"]["set"])
                    out.update((c["concat"][0], c["concat"][1]) for _, c in addr["map"]["data"]["set"])
            elif "vmap" in last:
                for _, verdict in last["vmap"]["data"]["set"]:
                    out |= self.run(verdict["goto"]["target"], proto)
            elif "goto" in last or "set" in last:
                continue  # affinity: a remembered client, or recording one
            else:
                raise AssertionError(f"the reader does not know {expr}")
        return out


def compiled(services_: list[Service], endpoints: dict[str, list[Endpoint]],
             pod: services.ClientPod = CLIENT) -> tuple[dnat.Ruleset, Reader]:
    ruleset = dnat.compile_pod(pod, services_, endpoints)
    assert ruleset.document is not None
    return ruleset, Reader(ruleset.document)


# --- what a connection meets -----------------------------------------------------------------------


def test_each_cluster_ip_port_and_protocol_goes_to_the_ready_endpoints_on_the_services_interface() -> None:
    _, table = compiled([svc()], {"x/db": [ep("10.1.0.5"), ep("10.1.0.6"), ep("10.1.0.7", ready=False)]})

    assert table.connect("net1", "10.96.0.10", "TCP", 80) == {("10.1.0.5", 8080), ("10.1.0.6", 8080)}
    assert table.connect("net1", "10.96.0.10", "UDP", 53) == {("10.1.0.5", 5353), ("10.1.0.6", 5353)}
    assert table.connect("net1", "10.96.0.10", "SCTP", 7) == {("10.1.0.5", 7), ("10.1.0.6", 7)}
    # Another protocol or port of the ClusterIP is refused; another interface's traffic is not ours.
    assert table.connect("net1", "10.96.0.10", "UDP", 80) == "refused"
    assert table.connect("net1", "10.96.0.10", "TCP", 81) == "refused"
    assert table.connect("eth0", "10.96.0.10", "TCP", 80) == "untouched"
    assert table.connect("net1", "10.96.0.11", "TCP", 80) == "untouched"


def test_the_endpoints_of_each_family_serve_the_cluster_ip_of_that_family() -> None:
    dual = svc(cluster_ips=("10.96.0.10", "fd00:96::10"), ports=(TCP80,))
    ruleset, table = compiled([dual], {"x/db": [ep("10.1.0.5"), ep("fd00:1::5"), ep("fd00:1::6")]})

    assert table.connect("net1", "10.96.0.10", "TCP", 80) == {("10.1.0.5", 8080)}
    assert table.connect("net1", "fd00:96::10", "TCP", 80) == {("fd00:1::5", 8080), ("fd00:1::6", 8080)}
    assert ruleset.routes == (dnat.Route("10.96.0.10/32", "net1", "10.1.0.9"),
                              dnat.Route("fd00:96::10/128", "net1", "fd00:1::9"))


def test_a_family_the_pod_has_no_address_of_on_that_network_is_skipped_with_the_reason() -> None:
    red = svc("cache", "red", ("10.96.0.20", "fd00:96::20"), (TCP80,))
    ruleset, table = compiled([red], {"x/cache": [ep("10.2.0.5"), ep("fd00:2::5")]})

    assert table.connect("net2", "10.96.0.20", "TCP", 80) == {("10.2.0.5", 8080)}
    assert "services_v6" not in table.sets
    assert ruleset.skipped == ("Service x/cache: ClusterIP fd00:96::20 is IPv6, and the pod has no IPv6 address "
                               "on network red (net2)",)


def test_with_no_ready_endpoint_serving_terminating_ones_take_over_and_else_the_port_is_refused() -> None:
    terminating = [ep("10.1.0.5", ready=False, serving=True, terminating=True),
                   ep("10.1.0.6", ready=False, serving=False, terminating=True), ep("10.1.0.7", ready=False)]
    _, table = compiled([svc(ports=(TCP80,))], {"x/db": terminating})
    assert table.connect("net1", "10.96.0.10", "TCP", 80) == {("10.1.0.5", 8080)}

    # A ready endpoint wins over every terminating one.
    _, table = compiled([svc(ports=(TCP80,))], {"x/db": [*terminating, ep("10.1.0.8")]})
    assert table.connect("net1", "10.96.0.10", "TCP", 80) == {("10.1.0.8", 8080)}

    for none_usable in ([], [ep("10.1.0.6", ready=False, serving=False, terminating=True)]):
        ruleset, table = compiled([svc(ports=(TCP80,))], {"x/db": none_usable})
        assert table.connect("net1", "10.96.0.10", "TCP", 80) == "refused"
        assert ruleset.routes == (dnat.Route("10.96.0.10/32", "net1", "10.1.0.9"),)  # the refusal needs the route


def test_an_endpoint_without_the_ports_name_serves_the_other_ports_only_and_one_listed_twice_counts_once() -> None:
    only_dns = ep("10.1.0.6", ports=(EndpointPort("dns", Protocol.UDP, 5353),))
    _, table = compiled([svc()], {"x/db": [ep("10.1.0.5"), ep("10.1.0.5"), only_dns]})

    assert table.connect("net1", "10.96.0.10", "TCP", 80) == {("10.1.0.5", 8080)}
    assert table.connect("net1", "10.96.0.10", "UDP", 53) == {("10.1.0.5", 5353), ("10.1.0.6", 5353)}
    single = next(r for r in table.rules.values() if r and "dnat" in r[0][-1] and isinstance(
        r[0][-1]["dnat"]["addr"], str))
    assert single  # one endpoint: a plain dnat, no numgen


def test_client_ip_affinity_remembers_each_client_per_endpoint_for_the_timeout() -> None:
    sticky = svc(ports=(TCP80,), affinity=SessionAffinity.CLIENT_IP, timeout=600)
    _, table = compiled([sticky], {"x/db": [ep("10.1.0.5"), ep("10.1.0.6")]})

    assert table.connect("net1", "10.96.0.10", "TCP", 80) == {("10.1.0.5", 8080), ("10.1.0.6", 8080)}
    clients = {n: s for n, s in table.sets.items() if n.endswith("_clients")}
    assert len(clients) == 2
    assert all(s["timeout"] == 600 and s["flags"] == ["timeout"] and s["type"] == "ipv4_addr"
               for s in clients.values())
    service_chain = next(n for n, c in table.chains.items() if n.startswith("svc_") and "_ep_" not in n)
    lookups = [r for r in table.rules[service_chain] if "goto" in r[-1]]
    # A remembered client goes to its endpoint before any new pick.
    assert [r[0]["match"]["right"] for r in lookups] == [f"@{n}" for n in sorted(clients)]
    for name in clients:
        endpoint_chain = name.removesuffix("_clients")
        assert table.rules[endpoint_chain][0] == [{"set": {
            "op": "update", "elem": {"payload": {"protocol": "ip", "field": "saddr"}}, "set": f"@{name}"}}]


# --- when there is no table ------------------------------------------------------------------------


def test_a_headless_service_and_a_pod_off_the_network_get_no_table_and_no_route() -> None:
    headless = dnat.compile_pod(CLIENT, [svc(cluster_ips=())], {"x/db": [ep("10.1.0.5")]})
    assert (headless.document, headless.routes, headless.skipped) == (None, (), ())

    elsewhere = services.ClientPod("x", "other", (services.attachment("red", "net2", "10.2.0.9"),))
    off = dnat.compile_pod(elsewhere, [svc()], {"x/db": [ep("10.1.0.5")]})
    assert (off.document, off.routes, off.skipped) == (None, (), ())


def test_a_network_with_no_interface_in_the_pods_status_gets_no_rule_and_says_why() -> None:
    unnamed = services.ClientPod("x", "p", (services.attachment("blue", None, "10.1.0.9"),))
    ruleset = dnat.compile_pod(unnamed, [svc()], {"x/db": [ep("10.1.0.5")]})
    assert ruleset.document is None
    assert ruleset.skipped == ("Service x/db: the pod's status names no interface on network blue, so its "
                               "ClusterIP cannot be routed there",)


# --- the table's shape -----------------------------------------------------------------------------


def test_the_table_is_the_services_own_and_the_applier_refuses_it_as_a_policy_table() -> None:
    ruleset, _ = compiled([svc()], {"x/db": [ep("10.1.0.5")]})
    assert ruleset.document is not None
    sent = nftables.document(ruleset.document, nftables.SERVICES)
    assert sent["nftables"][1:3] == [{"add": {"table": {"family": "inet", "name": "podnetwork_services"}}},
                                     {"delete": {"table": {"family": "inet", "name": "podnetwork_services"}}}]
    with pytest.raises(ValueError, match="only table inet podnetwork_policy is ours to change, not inet "
                                         "podnetwork_services"):
        nftables.document(ruleset.document)


def test_nat_runs_before_the_policy_filter_and_the_refusal_before_the_nat() -> None:
    """Egress policy must see the endpoint's address (NetworkPolicy's semantics for a Service's traffic):
    the policy table filters at priority 0, after the DNAT. The kernel runs nat chains at the NAT
    core's own priority (-100 in output) whatever their number; ours says so too."""
    _, table = compiled([svc()], {"x/db": [ep("10.1.0.5")]})
    hooks = {n: (c.get("type"), c.get("hook"), c.get("prio")) for n, c in table.chains.items() if "hook" in c}
    assert hooks == {"reject": ("filter", "output", -110), "dnat": ("nat", "output", -100)}

    world = netpol.World.build(
        pods=[netpol.pod_info("x", "client", {"app": "client"}, interfaces=[netpol.interface("blue", "net1", "10.1.0.9")])],
        networks=[netpol.NetworkInfo(podnetwork="blue")],
        policies=[netpol.parse_policy({
            "apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
            "metadata": {"namespace": "x", "name": "egress", "annotations": {"multinetwork.x-k8s.io/policy-for": "blue"}},
            "spec": {"podSelector": {}, "policyTypes": ["Egress"]}})])
    policy_table = policy_rules.compile_pod(world, "x/client").commands
    output = next(c["add"]["chain"] for c in policy_table
                  if "chain" in c.get("add", {}) and c["add"]["chain"].get("hook") == "output")
    assert dnat.REJECT_PRIORITY < dnat.DNAT_PRIORITY < output["prio"]


def test_the_same_inputs_in_any_order_compile_to_the_same_table() -> None:
    services_ = [svc("a", cluster_ips=("10.96.0.1",)), svc("b", cluster_ips=("10.96.0.2",))]
    endpoints = {"x/a": [ep("10.1.0.5"), ep("10.1.0.6")], "x/b": [ep("10.1.0.7")]}
    first = dnat.compile_pod(CLIENT, services_, endpoints)
    again = dnat.compile_pod(CLIENT, services_[::-1], {k: v[::-1] for k, v in endpoints.items()})
    assert first == again


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from(list(Protocol)), st.integers(0, 3), st.booleans()),
                max_size=6))
def test_every_service_port_reaches_exactly_its_ready_endpoints(draws: list[tuple[int, Protocol, int, bool]]) -> None:
    services_, endpoints = [], {}
    for n, (port_count, protocol, endpoint_count, sticky) in enumerate(draws):
        ports = tuple(ServicePort(100 + p, protocol, f"p{p}") for p in range(port_count))
        slice_ports = tuple(EndpointPort(f"p{p}", protocol, 9000 + p) for p in range(port_count))
        service = svc(f"s{n}", cluster_ips=(f"10.96.1.{n + 1}",), ports=ports,
                      affinity=SessionAffinity.CLIENT_IP if sticky else SessionAffinity.NONE)
        services_.append(service)
        endpoints[service.key] = [ep(f"10.1.{n}.{k + 1}", ready=k % 3 != 2, ports=slice_ports)
                                  for k in range(endpoint_count)]
    ruleset = dnat.compile_pod(CLIENT, services_, endpoints)
    if not services_:
        assert ruleset.document is None
        return
    assert ruleset.document is not None
    table = Reader(ruleset.document)
    for service in services_:
        for port in service.ports:
            ready = {(str(e.address), e.port_for(port)) for e in endpoints[service.key] if e.ready}
            got = table.connect("net1", str(service.cluster_ips[0]), port.protocol.value, port.port)
            assert got == (ready or "refused"), (service, port)
