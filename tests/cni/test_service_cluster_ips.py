"""A Service's ClusterIP inside a client pod (bridge.services.dnat compiled, bridge.agent.netns.clusterips
applied), proven with real traffic: the netpol harness's node in a namespace of the test
(tests/cni/netpol_support.py: real bridge and host-local plugins, sealed so no packet leaves
the machine), pods x/a (the client), x/b and x/c (the backends), each with eth0 (the cluster
default network, the pods' default route) and net1 (the Service's network, "blue").

Every backend answers who it is and whom it saw (`Node.who`), so the tests see which backend
each connection reached and from which of the client's addresses: always net1's, never eth0's.
The ClusterIP is 10.96.77.10, which no namespace of the test owns: without our rules a packet
to it follows the client's default route to the node namespace and dies there.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import services
from bridge.agent.netns import clusterips, nftables
from bridge.policy import parse_policy, rules
from bridge.policy import world as policy_world
from bridge.services import changes, dnat
from tests.cni.netpol_pod_support import WHO_PORT
from tests.cni.netpol_support import Node, run, standing

pytestmark = pytest.mark.cni

NETWORK = "blue"
CLIENT = "x/a"
BACKENDS = ("x/b", "x/c")
CLUSTER_IP = "10.96.77.10"
TRIES = 16
"""Connections per check: a backend of two is missed by all of them with probability 2**-15."""

HTTP = services.ServicePort(80, services.Protocol.TCP, "who", "who")
DNS = services.ServicePort(53, services.Protocol.UDP, "who-udp", "who-udp")
SLICE_PORTS = (services.EndpointPort("who", services.Protocol.TCP, WHO_PORT),
               services.EndpointPort("who-udp", services.Protocol.UDP, WHO_PORT))


def service(affinity: services.SessionAffinity = services.SessionAffinity.NONE) -> services.Service:
    return services.Service("x", "who", NETWORK, (ipaddress.ip_address(CLUSTER_IP),), (HTTP, DNS), affinity, 60)


@pytest.fixture(scope="module")
def module_node(cni_host: list[Path]) -> Iterator[Node]:
    with standing(cni_host, namespaces=("x",)) as node:
        yield node


@pytest.fixture
def node(module_node: Node) -> Iterator[Node]:
    """The module's node, with no table and no route of ours in the client after each test."""
    try:
        yield module_node
    finally:
        path = module_node.pods[CLIENT].path
        asyncio.run(clusterips.remove(path))
        asyncio.run(nftables.remove(path))
        assert not asyncio.run(clusterips.routes(path))


def client(node: Node) -> services.ClientPod:
    return services.ClientPod("x", "a", (services.attachment(NETWORK, "net1", node.pods[CLIENT].addresses["net1"]),))


def endpoint(node: Node, pod: str, *, ready: bool = True) -> services.Endpoint:
    return services.Endpoint(ipaddress.ip_address(node.pods[pod].addresses["net1"]), SLICE_PORTS, ready, ready)


def serve(node: Node, endpoints: list[services.Endpoint], svc: services.Service | None = None) -> dnat.Ruleset:
    """The client's ruleset for the Service with `endpoints`, applied in its namespace."""
    svc = svc or service()
    ruleset = dnat.compile_pod(client(node), [svc], {svc.key: endpoints})
    asyncio.run(clusterips.apply(node.pods[CLIENT].path, ruleset))
    return ruleset


def reached(node: Node, port: services.ServicePort = HTTP, tries: int = TRIES) -> list[dict[str, Any]]:
    return node.who(CLIENT, CLUSTER_IP, port.port, port.protocol.value, count=tries, timeout=1.0)


def backends_of(answers: list[dict[str, Any]]) -> set[str]:
    return {a["pod"] for a in answers if "pod" in a}


def test_the_client_reaches_each_backend_through_the_cluster_ip_over_net1_and_nothing_after_removal(
        node: Node) -> None:
    before = reached(node, tries=2) + reached(node, DNS, tries=2)
    assert all("error" in a for a in before), f"the ClusterIP answered before any rule: {before}"

    ruleset = serve(node, [endpoint(node, b) for b in BACKENDS])

    path = node.pods[CLIENT].path
    assert asyncio.run(clusterips.routes(path)) == list(ruleset.routes)
    got = json.loads(run("ip", "-n", node.pods[CLIENT].netns, "-j", "route", "get", CLUSTER_IP).stdout)
    assert got[0]["dev"] == "net1", got
    net1, eth0 = node.pods[CLIENT].addresses["net1"], node.pods[CLIENT].addresses["eth0"]
    for port in (HTTP, DNS):
        answers = reached(node, port)
        assert all("pod" in a for a in answers), f"{port}: {answers}"
        assert backends_of(answers) == set(BACKENDS), f"{port}: {answers}"
        # The backends saw the client's net1 address: the connections went over net1, not eth0.
        assert {a["peer"] for a in answers} == {net1} != {eth0}, answers

    asyncio.run(clusterips.remove(path))
    assert not asyncio.run(nftables.exists(path, table=nftables.SERVICES))
    assert not asyncio.run(clusterips.routes(path))
    after = reached(node, tries=2) + reached(node, DNS, tries=2)
    assert all("error" in a for a in after), f"the ClusterIP answered after removal: {after}"
    node.assert_sealed()


def test_traffic_follows_the_endpoints_down_and_up_and_a_not_ready_backend_gets_none(node: Node) -> None:
    serve(node, [endpoint(node, b) for b in BACKENDS])
    assert backends_of(reached(node)) == set(BACKENDS)

    serve(node, [endpoint(node, "x/c")])  # scaled down to one
    answers = reached(node)
    assert backends_of(answers) == {"x/c"} and all("pod" in a for a in answers), answers

    serve(node, [endpoint(node, "x/b", ready=False), endpoint(node, "x/c")])  # b is back, not ready yet
    answers = reached(node) + reached(node, DNS)
    assert backends_of(answers) == {"x/c"} and all("pod" in a for a in answers), answers

    serve(node, [endpoint(node, b) for b in BACKENDS])  # b ready: scaled up again
    assert backends_of(reached(node)) == set(BACKENDS)


def refused(answer: dict[str, Any]) -> bool:
    """Refused at once, not timed out: TCP meets our reset (ECONNREFUSED); a UDP send is rejected on its
    way out (EPERM, as kube-proxy's reject does) or its ICMP port unreachable comes back (ECONNREFUSED)."""
    return answer.get("error", "").startswith(("ConnectionRefusedError", "PermissionError"))


def test_with_no_ready_endpoint_and_on_a_port_it_lacks_the_cluster_ip_refuses_at_once(node: Node) -> None:
    serve(node, [endpoint(node, b, ready=False) for b in BACKENDS])
    for port in (HTTP, DNS):
        answers = reached(node, port, tries=2)
        assert all(refused(a) for a in answers), f"{port}: {answers}"
    tcp = reached(node, tries=2)
    assert all(a["error"].startswith("ConnectionRefusedError") for a in tcp), tcp

    serve(node, [endpoint(node, b) for b in BACKENDS])
    answers = node.who(CLIENT, CLUSTER_IP, 81, count=2)  # a port the Service does not have
    assert all(refused(a) for a in answers), answers
    assert backends_of(reached(node)) == set(BACKENDS)


def test_client_ip_affinity_keeps_the_client_on_one_backend(node: Node) -> None:
    serve(node, [endpoint(node, b) for b in BACKENDS], service(services.SessionAffinity.CLIENT_IP))
    # One connection first: the affinity is recorded as its first packet passes, so first connections
    # sent at once may each pick before any is recorded (kube-proxy's `recent` match has the same race).
    first = reached(node, tries=1)
    answers = first + reached(node)
    assert all("pod" in a for a in answers), answers
    assert len(backends_of(answers)) == 1, answers


def test_an_egress_policy_denying_a_backend_applies_to_the_translated_connections(node: Node) -> None:
    """The policy table's output chain (filter, priority 0) runs after the DNAT (nat, -100): it sees the
    backend's address, so a policy keeping the client from b keeps the ClusterIP from sending it there."""
    serve(node, [endpoint(node, b) for b in BACKENDS])
    subnet = str(ipaddress.ip_interface(f"{node.pods['x/b'].addresses['net1']}/24").network)
    policy = parse_policy({
        "apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
        "metadata": {"namespace": "x", "name": "not-b",
                     "annotations": {"multinetwork.x-k8s.io/policy-for": NETWORK}},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"],
                 "egress": [{"to": [{"ipBlock": {"cidr": subnet,
                                                 "except": [f"{node.pods['x/b'].addresses['net1']}/32"]}}]}]},
    })
    world = policy_world.World.build(
        pods=[policy_world.pod_info("x", key.split("/")[1], {"pod": key.split("/")[1]},
                                    interfaces=[policy_world.interface(NETWORK, "net1", pod.addresses["net1"])])
              for key, pod in node.pods.items()],
        namespaces=[policy_world.namespace_info("x")],
        networks=[policy_world.NetworkInfo(podnetwork=NETWORK)],
        policies=[policy])
    document = rules.compile_pod(world, CLIENT).document
    assert document is not None
    asyncio.run(nftables.apply(node.pods[CLIENT].path, document))

    answers = reached(node, tries=12) + reached(node, DNS, tries=12)
    assert backends_of(answers) == {"x/c"}, answers
    assert any("error" in a for a in answers), "no connection was sent to b: the check proves nothing"

    asyncio.run(nftables.remove(node.pods[CLIENT].path))
    assert backends_of(reached(node)) == set(BACKENDS)


OTHER_IP = "10.96.77.11"


def listing(node: Node) -> list[Any]:
    """The client's table as nft lists it, comparable: no handles, elements sorted, a chain's rules in order."""
    out = run("ip", "netns", "exec", node.pods[CLIENT].netns, "nft", "-j", "list", "table", dnat.FAMILY,
              dnat.TABLE).stdout
    items = [i for i in json.loads(out)["nftables"] if "metainfo" not in i]

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k != "handle"}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    items = [clean(i) for i in items]
    for item in items:
        for obj in item.values():
            if "elem" in obj:
                obj["elem"] = sorted(obj["elem"], key=json.dumps)
    # sorted() is stable: the rules of one chain keep their order.
    return sorted(items, key=lambda i: ("rule", i["rule"]["chain"]) if "rule" in i else (next(iter(i)), json.dumps(i)))


def test_an_update_in_place_moves_the_changed_service_keeps_the_other_and_equals_the_whole_table(node: Node) -> None:
    """What the agent does on an endpoint change (bridge.services.changes through clusterips.update):
    only the changed Service's chains are rewritten, in one transaction; the other Service is not
    touched and keeps serving; the table is then exactly the one a whole write makes. A table that
    is not what was last written (deleted by hand) is written whole instead."""
    svc, other = service(), services.Service("x", "other", NETWORK, (ipaddress.ip_address(OTHER_IP),), (HTTP, DNS),
                                              services.SessionAffinity.NONE, 60)
    path = node.pods[CLIENT].path

    def compiled(to: str) -> dnat.Ruleset:
        return dnat.compile_pod(client(node), [svc, other], {svc.key: [endpoint(node, to)],
                                                             other.key: [endpoint(node, "x/b")]})

    def others() -> set[str]:
        answers = node.who(CLIENT, OTHER_IP, HTTP.port, count=TRIES) + node.who(CLIENT, OTHER_IP, DNS.port, "UDP",
                                                                                count=4)
        assert all("pod" in a for a in answers), answers
        return backends_of(answers)

    before, after = compiled("x/b"), compiled("x/c")
    asyncio.run(clusterips.apply(path, before))
    assert backends_of(reached(node)) == {"x/b"} and others() == {"x/b"}

    delta = changes.changes(before.commands, after.commands)
    assert delta is not None
    other_chains = {c["add"]["chain"]["name"] for c in after.commands
                    if "chain" in c.get("add", {}) and str(c["add"]["chain"].get("comment", "")).startswith("x/other ")}
    assert other_chains and not any(obj.get("name") in other_chains or obj.get("chain") in other_chains
                                    for c in delta for body in c.values() for obj in body.values())
    assert asyncio.run(clusterips.update(path, before, after, delta)) is True  # in place, not whole

    answers = reached(node) + reached(node, DNS)
    assert all("pod" in a for a in answers) and backends_of(answers) == {"x/c"}, answers
    assert others() == {"x/b"}
    in_place = listing(node)
    asyncio.run(clusterips.apply(path, after))
    assert listing(node) == in_place  # the kernel holds exactly what a whole write makes

    run("ip", "netns", "exec", node.pods[CLIENT].netns, "nft", "delete", "table", dnat.FAMILY, dnat.TABLE)
    assert asyncio.run(clusterips.update(path, after, before, changes.changes(after.commands, before.commands))) \
        is False  # refused in place: written whole
    assert backends_of(reached(node)) == {"x/b"} and others() == {"x/b"}
    node.assert_sealed()


def test_route_sync_over_netlink_drops_our_stale_routes_adds_the_wanted_and_leaves_others_alone(node: Node) -> None:
    pod = node.pods[CLIENT]
    net1 = pod.addresses["net1"]
    run("ip", "-n", pod.netns, "route", "add", "10.96.99.1/32", "dev", "net1")  # someone else's (proto boot)
    run("ip", "-n", pod.netns, "route", "add", "10.96.99.2/32", "dev", "net1", "proto", str(dnat.ROUTE_PROTOCOL))
    try:
        wanted = [dnat.Route("10.96.99.3/32", "net1", net1), dnat.Route("10.96.99.4/32", "eth0", "")]
        asyncio.run(clusterips.sync_routes(pod.path, wanted))

        assert asyncio.run(clusterips.routes(pod.path)) == sorted(wanted)
        listed = json.loads(run("ip", "-n", pod.netns, "-j", "route", "show", "table", "main").stdout)
        by_dst = {r["dst"]: r for r in listed}
        assert "10.96.99.2" not in by_dst and "10.96.99.1" in by_dst, listed
        assert (by_dst["10.96.99.3"]["dev"], by_dst["10.96.99.3"]["prefsrc"]) == ("net1", net1)
        assert by_dst["10.96.99.3"]["scope"] == "link" and by_dst["10.96.99.4"]["dev"] == "eth0"

        # An interface the pod lacks: refused in ip's words, and what is there stays.
        with pytest.raises(nftables.NftablesError, match='Cannot find device "net9"'):
            asyncio.run(clusterips.sync_routes(pod.path, [*wanted, dnat.Route("10.96.99.5/32", "net9", "")]))
        assert asyncio.run(clusterips.routes(pod.path)) == sorted(wanted)
    finally:
        run("ip", "-n", pod.netns, "route", "del", "10.96.99.1/32", "dev", "net1")


def test_routes_of_a_namespace_that_is_gone_say_so(tmp_path: Path) -> None:
    with pytest.raises(nftables.NetnsGone, match="does not exist"):
        asyncio.run(clusterips.routes(str(tmp_path / "gone")))
    asyncio.run(clusterips.remove(str(tmp_path / "gone")))  # idempotent: nothing to remove
