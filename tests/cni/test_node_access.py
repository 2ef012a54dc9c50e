"""Node access and API access with real traffic (KEP-3698 Phase II requirements 19-21,
docs/node-access.md): the shim, the agent, the real bridge and host-local plugins, and the node's
nftables table, with a pod listing only `blue`.

The node stands in a network namespace of the test (`AgentConfig.node_netns`): the agent runs its
delegates there, so blue's bridge, the node's address on it and the agent's table are all in it.
The "API server" is an HTTP server in another namespace of the test, joined to the node by a veth
of the test, with no route back to blue's subnet (only the source NAT brings its answers back);
a test nft table in the node stands for kube-proxy (the Service's ClusterIP DNAT'ed to it). No
namespace of the test has a default route, so no packet can leave the machine: checked at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.agent.access import decide as access
from bridge.agent.access.apply import STATE_FILE
from bridge.agent.daemon import hotplug
from bridge.agent.netns import nftables
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from tests.cni.agent_support import KEP_NETWORKS, NPWG_NETWORKS, World, bridge_podnetwork, run
from tests.cni.netpol_support import nft_or_skip
from tests.cni.test_explicit_list import translation

pytestmark = pytest.mark.cni

POD_PORT = 8080
API_PORT = 6443

CLIENT = """
import socket, sys, urllib.request
kind, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    if kind == "tcp":
        socket.create_connection((host, port), timeout=1.5).close()
    else:
        body = urllib.request.urlopen(f"http://{host}:{port}/", timeout=1.5).read()
        sys.stdout.write(body.decode())
except OSError as exc:
    sys.stdout.write(f"failed: {exc}")
    sys.exit(1)
"""

SERVER = """
import http.server, sys
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{sys.argv[3]} saw {self.client_address[0]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), Answer)
print("ready", flush=True)
server.serve_forever()
"""


@dataclass
class Node:
    """The test's node namespace, the API server's namespace and the veth between them."""

    world: World
    name: str
    api_name: str
    octet: int

    @property
    def path(self) -> str:
        return f"/var/run/netns/{self.name}"

    @property
    def cluster_ip(self) -> str:
        return f"10.96.{self.octet}.1"

    @property
    def api_ip(self) -> str:
        return f"172.31.{self.octet}.2"

    def gateway(self, index: int) -> str:
        return self.world.subnet(index).replace(".0/24", ".1")

    def addresses(self, bridge: str) -> list[str]:
        proc = run("ip", "-n", self.name, "-j", "-4", "addr", "show", "dev", bridge, check=False)
        return [f"{a['local']}/{a['prefixlen']}" for link in json.loads(proc.stdout or "[]")
                for a in link.get("addr_info", [])]

    async def table(self) -> bool:
        return await nftables.exists(self.path, table=nftables.ACCESS)

    def bridge_ports(self) -> list[str]:
        ports: list[str] = []
        for br in self.world.bridges:
            proc = run("ip", "-n", self.name, "-j", "link", "show", "master", br, check=False)
            if proc.returncode == 0:
                ports += [link["ifname"] for link in json.loads(proc.stdout or "[]")]
        return ports

    def assert_sealed(self) -> None:
        for ns in (self.name, self.api_name, *self.world.netns):
            for family in ("-4", "-6"):
                routes = json.loads(run("ip", "-n", ns, "-j", family, "route", "show", "table", "all").stdout or "[]")
                assert not [r for r in routes if r.get("dst") == "default"], f"{ns} has a default route: {routes}"


def reach(netns: str, kind: str, host: str, port: int) -> tuple[bool, str]:
    """A TCP connect or an HTTP GET from a namespace (a kubelet probe's stand-in)."""
    proc = subprocess.run(["nsenter", f"--net={netns}", sys.executable, "-c", CLIENT, kind, host, str(port)],
                          capture_output=True, text=True, timeout=20, check=False)
    return proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def serve(servers: list[subprocess.Popen[str]], netns: str, address: str, port: int, who: str) -> None:
    proc = subprocess.Popen(["nsenter", f"--net={netns}", sys.executable, "-c", SERVER, address, str(port), who],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    servers.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr


@pytest.fixture
async def node(cni_host: list[Path]) -> AsyncIterator[Node]:
    nft_or_skip()
    world = World(cni_host)
    n = Node(world, f"pn-{world.tag}-node", f"pn-{world.tag}-api", world.octet)
    try:
        for ns in (n.name, n.api_name):
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        # The API server's host: a veth of the test, no route but its own /30.
        run("ip", "-n", n.name, "link", "add", "pnapi0", "type", "veth", "peer", "name", "pnapi1",
            "netns", n.api_name)
        run("ip", "-n", n.name, "addr", "add", f"172.31.{n.octet}.1/30", "dev", "pnapi0")
        run("ip", "-n", n.api_name, "addr", "add", f"{n.api_ip}/30", "dev", "pnapi1")
        run("ip", "-n", n.name, "link", "set", "pnapi0", "up")
        run("ip", "-n", n.api_name, "link", "set", "pnapi1", "up")
        # kube-proxy's stand-in: the Service's ClusterIP DNAT'ed to its endpoint.
        subprocess.run(
            ["ip", "netns", "exec", n.name, "nft", "-f", "-"], check=True, text=True, capture_output=True,
            input=f"table ip test_kube_proxy {{\n chain pre {{\n type nat hook prerouting priority dstnat;\n"
                  f" ip daddr {n.cluster_ip} tcp dport 443 dnat to {n.api_ip}:{API_PORT}\n }}\n}}\n")
        world.objects.put({"apiVersion": "v1", "kind": "Service",
                           "metadata": {"name": "kubernetes", "namespace": "default"},
                           "spec": {"clusterIP": n.cluster_ip, "clusterIPs": [n.cluster_ip]}})
        world.objects.put({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                           "metadata": {"name": "kubernetes", "namespace": "default",
                                        "labels": {"kubernetes.io/service-name": "kubernetes"}},
                           "endpoints": [{"addresses": [n.api_ip], "conditions": {"ready": True}}]})
        await world.start_agent(node_netns=Path(n.path))
        yield n
        n.assert_sealed()
    finally:
        await world.cleanup()
        for ns in (n.name, n.api_name):
            run("ip", "netns", "del", ns, check=False)
    left = [ns for ns in run("ip", "netns", "list").stdout.split() if ns.startswith(f"pn-{world.tag}-")]
    assert not left, f"namespaces left: {left}"


def blue(world: World, index: int = 1, name: str = "blue", **switches: str) -> None:
    world.nad(name, world.network(name, index, isGateway=False))
    bridge_podnetwork(world, name, name)
    set_switches(world, name, **switches)


def set_switches(world: World, name: str, **switches: str) -> None:
    obj = world.objects.get("PodNetwork", None, name)
    obj["metadata"]["annotations"] = {f"{constants.GROUP}/{k.replace('_', '-')}": v for k, v in switches.items()}
    world.objects.put(obj)


async def add(world: World, pod: str, *networks: str) -> tuple[str, str]:
    world.pod(pod, {KEP_NETWORKS: json.dumps([{"podNetworkName": n} for n in networks])})
    netns = world.make_netns()
    run("ip", "-n", Path(netns).name, "link", "set", "lo", "up")
    added = await world.cni("ADD", f"ctr-{pod}", netns, pod)
    assert added.returncode == 0, added.stdout + added.stderr
    return netns, added.json["ips"][0]["address"].split("/")[0]


async def nothing_left(node: Node) -> dict[str, list[str]]:
    world = node.world
    return {
        "pod interfaces": [f"{Path(ns).name}:{i}" for ns in world.netns for i in world.interfaces(f"/var/run/netns/{ns}")],
        "bridge ports": node.bridge_ports(),
        "node addresses": [a for br in world.bridges for a in node.addresses(br)],
        "node table": ["inet podnetwork_access"] if await node.table() else [],
        "node-access state": [STATE_FILE] if (world.cache_dir / STATE_FILE).exists() else [],
        "IPAM reservations": world.reservations(),
        "cache records": world.cached(),
    }


EMPTY = {"pod interfaces": [], "bridge ports": [], "node addresses": [], "node table": [], "node-access state": [],
         "IPAM reservations": [], "cache records": []}


async def test_the_node_reaches_a_blue_only_pod_and_the_pod_the_api_only_while_blue_asks_for_it(
    node: Node, servers: list[subprocess.Popen[str]],
) -> None:
    world = node.world
    agent = world.agent
    assert agent is not None
    blue(world)
    quiet_netns, quiet_ip = await add(world, "quiet", "blue")
    serve(servers, quiet_netns, quiet_ip, POD_PORT, "quiet")
    serve(servers, f"/var/run/netns/{node.api_name}", node.api_ip, API_PORT, "api-server")

    # Off (the default): the node has no address on blue, so no probe of it reaches the pod.
    assert node.addresses(world.bridge(1)) == [], "isGateway false and no switch: the bridge has no address"
    assert reach(node.path, "tcp", quiet_ip, POD_PORT)[0] is False
    assert reach(node.path, "http", quiet_ip, POD_PORT)[0] is False
    assert not await node.table()

    set_switches(world, "blue", node_access="true", api_access="true")
    await agent.node_access.reconcile()
    assert node.addresses(world.bridge(1)) == [f"{node.gateway(1)}/24"], "blue's gateway, host-local's own"
    assert await node.table()
    assert reach(node.path, "tcp", quiet_ip, POD_PORT)[0] is True, "a TCP probe from the node"
    ok, body = reach(node.path, "http", quiet_ip, POD_PORT)
    assert ok and body == f"quiet saw {node.gateway(1)}", body

    # A pod started with API access on: its routes go via the node's address on blue.
    api_netns, api_pod_ip = await add(world, "client", "blue")
    routes = run("ip", "-n", Path(api_netns).name, "-4", "route", "show").stdout
    assert f"{node.cluster_ip} via {node.gateway(1)} dev eth0" in routes, routes
    assert f"{node.api_ip} via {node.gateway(1)} dev eth0" in routes, routes
    for host, port in ((node.cluster_ip, 443), (node.api_ip, API_PORT)):
        ok, body = reach(api_netns, "http", host, port)
        # The API server sees the node's address: its answer finds the way back only through the SNAT.
        assert ok and body == f"api-server saw 172.31.{node.octet}.1", (host, body)
    assert reach(quiet_netns, "http", node.cluster_ip, 443)[0] is False, "no route in a pod started without it"
    # The node is no router for blue: only the API's addresses are forwarded, and only replies come in.
    assert reach(api_netns, "tcp", f"172.31.{node.octet}.1", 22)[0] is False

    # Removing the switch removes the node's path, and the table with it.
    set_switches(world, "blue")
    await agent.node_access.reconcile()
    assert node.addresses(world.bridge(1)) == []
    assert not await node.table()
    assert reach(node.path, "tcp", quiet_ip, POD_PORT)[0] is False
    assert reach(api_netns, "http", node.cluster_ip, 443)[0] is False

    set_switches(world, "blue", node_access="true", api_access="true")
    await agent.node_access.reconcile()
    assert reach(node.path, "tcp", api_pod_ip, POD_PORT + 1)[0] is False, "nothing listens there"
    for pod, netns in (("quiet", quiet_netns), ("client", api_netns)):
        deleted = await world.cni("DEL", f"ctr-{pod}", netns, pod)
        assert deleted.returncode == 0, deleted.stdout
    assert await nothing_left(node) == EMPTY, "the last pod of blue took the node's path with it"


async def test_hot_plug_gives_the_node_a_path_to_an_added_network_and_takes_it_back_and_refuses_a_ptp_network_with_an_event(
    node: Node,
) -> None:
    world = node.world
    agent = world.agent
    assert agent is not None
    events: list[dict[str, object]] = []

    class Sink:
        async def post_event(self, body: dict[str, object]) -> None:
            events.append(body)

    agent.events = Sink()
    blue(world, 1, "blue", node_access="true")
    blue(world, 2, "red", node_access="true")
    world.nad("odd", {"cniVersion": "1.0.0", "name": "odd", "type": "ptp",
                      "ipam": {"type": "host-local", "subnet": world.subnet(3), "dataDir": str(world.ipam_dir)}})
    bridge_podnetwork(world, "odd", "odd")
    set_switches(world, "odd", node_access="true")
    netns, _ = await add(world, "solo", "blue")
    assert node.addresses(world.bridge(1)) == [f"{node.gateway(1)}/24"]

    pod = world.objects.get("Pod", "default", "solo")
    pod["metadata"]["annotations"][KEP_NETWORKS] = json.dumps([{"podNetworkName": "blue"}, {"podNetworkName": "red"}])
    world.objects.put(pod)
    pod["metadata"]["annotations"][NPWG_NETWORKS] = translation(world, "solo").annotation
    world.objects.put(pod)
    (outcome,) = await hotplug.HotPlug(agent, Sink(), "node-a").handle(Pod.model_validate(pod))
    assert outcome.error is None, outcome.error
    assert node.addresses(world.bridge(2)) == [f"{node.gateway(2)}/24"], "red's path came with it"

    pod["metadata"]["annotations"][KEP_NETWORKS] = json.dumps([{"podNetworkName": "blue"}])
    pod["metadata"]["annotations"][NPWG_NETWORKS] = translation(world, "solo").annotation
    world.objects.put(pod)
    (outcome,) = await hotplug.HotPlug(agent, Sink(), "node-a").handle(Pod.model_validate(pod))
    assert outcome.error is None, outcome.error
    assert node.addresses(world.bridge(2)) == [], "red's last pod left: its path went"
    assert node.addresses(world.bridge(1)) == [f"{node.gateway(1)}/24"]

    # A type the node cannot reach (ptp): refused with an Event on the PodNetwork, nothing made.
    other_netns, _ = await add(world, "other", "odd")
    refused = [e for e in events if e["reason"] == constants.NODE_ACCESS_REFUSED_REASON]
    assert len(refused) == 1 and "'ptp'" in str(refused[0]["message"]), [(e["reason"], e["message"]) for e in events]
    assert refused[0]["involvedObject"] == {"apiVersion": constants.API_VERSION, "kind": "PodNetwork",
                                            "name": "odd", "uid": None}
    await agent.node_access.reconcile()
    assert len([e for e in events if e["reason"] == constants.NODE_ACCESS_REFUSED_REASON]) == 1, "reported once"
    assert set(agent.node_access.made()) == {"blue"}, "nothing made for odd"

    deleted = await world.cni("DEL", "ctr-other", other_netns, "other")
    assert deleted.returncode == 0, deleted.stdout
    deleted = await world.cni("DEL", "ctr-solo", netns, "solo")
    assert deleted.returncode == 0, deleted.stdout
    assert await nothing_left(node) == EMPTY


async def test_a_macvlan_network_gets_a_node_side_sub_interface_with_an_ipam_address_and_del_releases_it(
    node: Node, servers: list[subprocess.Popen[str]],
) -> None:
    world = node.world
    # The master: one end of a veth pair of the test, both ends in the node namespace (this kernel
    # may lack the dummy driver); bridge-mode macvlans on it talk to each other inside the kernel,
    # and what goes out of the master comes back into the node namespace only.
    run("ip", "-n", node.name, "link", "add", "pnmaster0", "type", "veth", "peer", "name", "pnmaster1")
    for end in ("pnmaster0", "pnmaster1"):
        run("ip", "-n", node.name, "link", "set", end, "up")
    world.nad("green", {"cniVersion": "1.0.0", "name": "green", "type": "macvlan", "master": "pnmaster0",
                        "mode": "bridge", "ipam": {"type": "host-local", "subnet": world.subnet(4),
                                                   "dataDir": str(world.ipam_dir)}})
    bridge_podnetwork(world, "green", "green")
    set_switches(world, "green", node_access="true")
    netns, pod_ip = await add(world, "solo", "green")
    serve(servers, netns, pod_ip, POD_PORT, "solo")

    link = access.node_link_name("green")
    (made,) = node.addresses(link)
    assert made.startswith(world.subnet(4).rsplit(".", 1)[0]) and made.split("/")[0] != pod_ip
    assert sorted(p.split("/")[1] for p in world.reservations()) == sorted([pod_ip, made.split("/")[0]]), \
        "the node's address is reserved in the pods' pool"
    ok, body = reach(node.path, "http", pod_ip, POD_PORT)
    assert ok and body == f"solo saw {made.split('/')[0]}", body

    deleted = await world.cni("DEL", "ctr-solo", netns, "solo")
    assert deleted.returncode == 0, deleted.stdout
    assert node.addresses(link) == [], "the sub-interface went with the last pod"
    assert await nothing_left(node) == EMPTY
