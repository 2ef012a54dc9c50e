"""A pod on PodNetwork `blue` alone, with node access, and its probe (KEP-3698 "the list is explicit";
Phase II Req 19; docs/node-access.md).

The pod `solo` lists only `blue`: the agent attaches exactly that, on `eth0`, with no default
network. First the node cannot reach it (isolation is the default). Then `blue` is annotated
`multinetwork.x-k8s.io/node-access: "true"` for the rest of the stage, and the agent of the pod's
node gives the node an address on blue's bridge and scopes it with its nftables table. Then a
TCP connect from the node's namespace to the pod's blue address succeeds, as the kubelet's
TCP probe (and, to the same address and port, its HTTP probe) would.

The node is `node-c`, a network namespace of its own (`pn-demo-<pid>-node-c`), and its agent runs
with `AgentConfig.node_netns` naming it, as `podnetwork cni-agent --node-netns` does: the bridge
plugin makes node-c's blue bridge there, and node access puts its address and table there, not in
this machine's namespace, where node-a's and node-b's agents run (the demo's shared kernel). Those
two never reconcile while blue asks for node access: the switch is on only during this stage,
when nothing is attached or detached on their nodes, and their periodic recheck is off
(`Demo._start_agent`). node-c's blue bridge is its own segment: the probe needs nothing else.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from bridge import npwg
from bridge.agent.daemon.running import Running
from bridge.agent.netns import nftables
from demo import host as host_mod
from demo.kubelet import Kubelet
from demo.policy import PORT, Servers, connects
from demo.report import Report
from demo.store import Store
from demo.world import BLUE, PN, POD, pod_manifest
from podnetwork.ground import constants
from podnetwork.kep import networks

NODE_C = "node-c"
POD_NAME = "solo"


class Demo(Protocol):
    """What the stage uses of `demo.demo.Demo` (which imports this module, not the reverse)."""

    report: Report
    api: Store
    kubelets: dict[str, Kubelet]
    agents: list[Running]
    host: host_mod.Host

    def _flush_notes(self) -> None: ...

    def _sandbox(self, pod: str) -> Any: ...

    def _ip_on(self, pod: str, network: str) -> str | None: ...

    def _show_pod_networks(self, pod: str) -> None: ...

    async def _create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]: ...

    async def _start_agent(self, node: str, node_netns: str | None = None) -> Running: ...


def _interfaces(netns: str) -> dict[str, list[str]]:
    """Each link of the namespace but `lo`, with its IPv4 addresses."""
    shown = json.loads(host_mod.run(["ip", "-n", netns, "-j", "-4", "addr"], check=False).stdout or "[]")
    links = json.loads(host_mod.run(["ip", "-n", netns, "-j", "link"], check=False).stdout or "[]")
    addresses = {i["ifname"]: [f"{a['local']}/{a['prefixlen']}" for a in i.get("addr_info", [])]
                 for i in shown}
    return {link["ifname"]: addresses.get(link["ifname"], []) for link in links if link["ifname"] != "lo"}


async def run(demo: Demo, *, ns: str) -> None:
    """Stage 4e: `solo` on blue alone, on node-c; the node's TCP probe to its blue address."""
    r, api = demo.report, demo.api
    r.section("4e. A pod on blue alone: the explicit list, node access, a probe (KEP Req 19)")
    node_ns = demo.host.netns(NODE_C)
    api.create({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": NODE_C, "labels": {"kubernetes.io/hostname": NODE_C},
                             "annotations": {constants.NODE_PODNETWORKS_ANNOTATION: '["blue"]'}}})
    r.say(f'created node {NODE_C} ({constants.NODE_PODNETWORKS_ANNOTATION}: ["blue"]), '
          f"its network namespace {node_ns}")
    running = await demo._start_agent(NODE_C, f"/var/run/netns/{node_ns}")
    r.say(f"agent of {NODE_C} listening on {running.agent.config.socket_path}, --node-netns {node_ns}")
    servers = Servers()
    try:
        await demo._create_pod(pod_manifest(POD_NAME, [{"podNetworkName": BLUE.name}], NODE_C))
        demo._flush_notes()
        kubelet = demo.kubelets[NODE_C]
        await kubelet.start_pod(ns, POD_NAME)
        r.say(f"{NODE_C}: CNI ADD {ns}/{POD_NAME} via the shim, netns {demo._sandbox(POD_NAME).netns}")
        await running.agent.status.idle()
        demo._show_pod_networks(POD_NAME)
        pod = api.get(*POD, POD_NAME, ns)
        status = json.loads(networks.annotations_of(pod).get(npwg.NETWORK_STATUS_ANNOTATION) or "[]")
        ip = demo._ip_on(POD_NAME, BLUE.name)
        links = _interfaces(demo._sandbox(POD_NAME).netns)
        r.say(f"  interfaces in {POD_NAME}'s namespace: {links}; status.podIP {pod['status'].get('podIP')}")
        r.check(list(links) == ["eth0"] and ip is not None and links["eth0"][:1] == [f"{ip}/24"],
                f"{POD_NAME} has blue on eth0 and no other interface (no default network)", links)
        r.check([(e.get("name"), e.get("interface"), e.get("default")) for e in status]
                == [(f"{ns}/{BLUE.name}", "eth0", True)] and pod["status"].get("podIP") == ip,
                f"{POD_NAME}'s network-status has one entry, blue on eth0, default true; its podIP is blue's",
                status)

        assert ip is not None
        await servers.start(demo._sandbox(POD_NAME).netns, ip, PORT)
        ok, said = await connects(node_ns, ip)
        r.say(f"  {NODE_C} -> {POD_NAME} ({ip}:{PORT}) over TCP, as the kubelet's probe: {said}")
        r.check(not ok, f"without node access {NODE_C} cannot reach {POD_NAME} (isolation is the default)",
                said)

        r.say("")
        api.patch(*PN, BLUE.name, {"metadata": {"annotations": {constants.NODE_ACCESS_ANNOTATION: "true"}}})
        r.say(f'annotate PodNetwork blue {constants.NODE_ACCESS_ANNOTATION}: "true" '
              f"({NODE_C}'s agent reconciles node access)")
        await running.agent.node_access.settle("demo")
        node_links = _interfaces(node_ns)
        bridge = demo.host.footprint.link(BLUE.link)
        r.say(f"  {NODE_C}'s namespace: {node_links}")
        r.check(f"{BLUE.gateway}/24" in node_links.get(bridge, []),
                f"{NODE_C}'s agent gave the node {BLUE.gateway} on blue's bridge (node access)", node_links)
        r.check(await nftables.exists(f"/var/run/netns/{node_ns}", table=nftables.ACCESS),
                f"{NODE_C}'s namespace holds the table inet {constants.NODE_ACCESS_TABLE}")
        ok, said = await connects(node_ns, ip)
        r.say(f"  {NODE_C} -> {POD_NAME} ({ip}:{PORT}) over TCP, as the kubelet's probe: {said}")
        r.check(ok, f"the TCP probe from {NODE_C}'s namespace reaches {POD_NAME} on blue", said)
        await servers.stop()

        r.say("")
        await kubelet.stop_pod(ns, POD_NAME)
        api.delete(*POD, POD_NAME, ns)
        await running.agent.node_access.settle("demo")
        r.say(f"{NODE_C}: CNI DEL {ns}/{POD_NAME}; the node's path goes with the network's last pod")
        r.check(f"{BLUE.gateway}/24" not in _interfaces(node_ns).get(bridge, [])
                and not await nftables.exists(f"/var/run/netns/{node_ns}", table=nftables.ACCESS),
                f"with {POD_NAME} gone {NODE_C} holds no address on blue and no node-access table",
                _interfaces(node_ns))
    finally:
        await servers.stop()
        api.patch(*PN, BLUE.name, {"metadata": {"annotations": {constants.NODE_ACCESS_ANNOTATION: None}}})
        demo._flush_notes()
    others = {a.agent.config.socket_path.stem: a.agent.node_access.made() for a in demo.agents
              if a is not running}
    r.check(not any(others.values()),
            "node-a's and node-b's agents (this machine's namespace) made no node path", others)


__all__ = ["NODE_C", "run"]
