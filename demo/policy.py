"""Network policy in the demo (KEP-3698 Phase III, Req 22): a MultiNetworkPolicy isolates blue.

Each node's agent keeps the policy tables of its pods, as `podnetwork cni-agent` does on a
cluster: its enforcer (`bridge.agent.policy.apply`) is fed the policies, pods, namespaces and
networks by list + watch of the demo's store (`demo.objects.follow`), compiles each local
pod's rules (`bridge.policy.rules.compile_pod`) and writes them into the pod's network
namespace in one nftables transaction, or removes its table when no policy isolates the pod.
The stage only makes the changes and waits for every agent to be idle. The bridge, fed by
the store's watches, posts its Events on the policies (`bridge.operator.policies`).

The traffic is real TCP between the pods' namespaces, over addresses of 198.18.0.0/15 that
exist only inside them: nothing leaves the machine. The servers are stopped at the end of the
stage and the policies deleted, so the agents remove the tables; the namespaces go with the pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any

from bridge.agent.netns import nftables
from demo import stages
from demo.store import NotFound
from demo.world import BLUE, GREEN, POD
from podnetwork.ground import constants

POLICY = (constants.POLICY_API_VERSION, constants.POLICY_KIND)
PORT = 8080
#: Seconds a probe waits to connect: a dropped SYN is not answered at all.
PROBE_TIMEOUT = 1.0
Demo = stages.Demo


async def settle(demo: Demo) -> None:
    """Until every node's agent has brought its pods' policy tables to what the store says."""
    await stages.settle(demo, lambda agent: agent.enforcer, "policy tables")


async def chains(netns_path: str) -> list[str] | None:
    """The regular chains of our policy table in the namespace, each with its number of rules, or
    None when it holds no table."""
    if not await nftables.exists(netns_path):
        return None
    out = await nftables.run_in(netns_path, "list the policy table",
                                [shutil.which("nft") or "nft", "-j", "list", "table", nftables.POLICY.family,
                                 nftables.POLICY.name])
    items = json.loads(out).get("nftables", [])
    rules = [i["rule"]["chain"] for i in items if "rule" in i]
    return sorted(f"{name} ({rules.count(name)} rules)" for name in (
        i["chain"]["name"] for i in items if "chain" in i and "hook" not in i["chain"]))


async def tables(demo: Demo) -> dict[str, tuple[str, str, list[str]]]:
    """Pods whose namespace holds our policy table: node, namespace and the table's chains."""
    found = {}
    for node, kubelet in demo.kubelets.items():
        for key, sandbox in kubelet.sandboxes.items():
            with contextlib.suppress(nftables.NetnsGone):
                held = await chains(sandbox.netns_path)
                if held is not None:
                    found[key] = (node, sandbox.netns, held)
    return found


Servers = stages.Servers


async def connects(netns: str, address: str) -> tuple[bool, str]:
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", netns, sys.executable, "-m", "demo.tcpprobe", "connect", address, str(PORT),
        "--timeout", str(PROBE_TIMEOUT), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return proc.returncode == 0, out.decode(errors="replace").strip()


def policy(name: str, ns: str, ingress: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": constants.POLICY_API_VERSION, "kind": constants.POLICY_KIND,
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {constants.POLICY_FOR_PODNETWORK_ANNOTATION: BLUE.name}},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": ingress}}


@dataclass
class _Stage:
    """What the stage's steps share: the demo, its namespace, web-b's namespace, web-a's addresses,
    and the policy tables last shown."""

    demo: Demo
    ns: str
    client: str
    on_blue: str
    on_green: str
    shown: dict[str, tuple[str, str, list[str]]] = field(default_factory=dict)

    async def sync(self) -> None:
        """Wait for the agents, then say which tables they wrote, changed or removed."""
        r = self.demo.report
        await settle(self.demo)
        now = await tables(self.demo)
        for key, (node, netns, held) in sorted(now.items()):
            if self.shown.get(key) != (node, netns, held):
                r.say(f"{node}'s agent: {key}: table {nftables.POLICY} in {netns} (chains {', '.join(held)})")
        for key in sorted(set(self.shown) - set(now)):
            r.say(f"{self.shown[key][0]}'s agent: {key}: no policy isolates it: table removed")
        self.shown = now

    async def probe(self, address: str, network: str) -> bool:
        ok, said = await connects(self.client, address)
        self.demo.report.say(f"  web-b -> web-a ({address}:{PORT}) over TCP on {network}: {said}")
        return ok


async def run(demo: Demo, *, ns: str) -> None:
    """Stage 4d: web-b reaches web-a over TCP on blue; a policy isolating blue for ingress refuses
    it (green stays open); a second policy allowing pods labelled role=client lets it through."""
    r = demo.report
    absent = [tool for tool in ("nft", "nsenter") if shutil.which(tool) is None]
    if absent:
        r.skip(f"4d. network policy: needs {' and '.join(absent)} (apt-get install nftables util-linux)")
        return
    r.section("4d. Network policy: a MultiNetworkPolicy isolates blue (KEP Phase III, Req 22)")
    on_blue, on_green = demo._ip_on("web-a", BLUE.name), demo._ip_on("web-a", GREEN.name)
    if on_blue is None or on_green is None:
        r.check(False, "web-a has addresses on blue and green for the policy stage", demo._pod_ips("web-a"))
        return
    stage = _Stage(demo, ns, demo._sandbox("web-b").netns, on_blue, on_green)
    servers = Servers()
    try:
        await _web_a_serves_and_web_b_connects(stage, servers)
        await _a_policy_isolates_blue(stage)
        await _a_second_policy_admits_clients(stage)
        await _deleting_the_policies_removes_the_tables(stage)
    finally:
        await servers.stop()
        # An interrupted stage leaves no policy behind either: the agents then remove the tables.
        for name in ("allow-clients", "isolate-blue"):
            with contextlib.suppress(NotFound):
                demo.api.delete(*POLICY, name, ns)


async def _web_a_serves_and_web_b_connects(stage: _Stage, servers: Servers) -> None:
    demo, ns = stage.demo, stage.ns
    server = demo._sandbox("web-a").netns
    await servers.start(server, stage.on_blue, PORT)
    await servers.start(server, stage.on_green, PORT)
    demo.report.say(f"web-a ({_node_of(demo.api, 'web-a', ns)}) serves TCP {PORT} on blue and green; "
                    f"web-b ({_node_of(demo.api, 'web-b', ns)}) connects from its own namespace")
    demo.report.check(await stage.probe(stage.on_blue, BLUE.name),
                      "web-b connects to web-a on blue before any policy")


async def _a_policy_isolates_blue(stage: _Stage) -> None:
    """isolate-blue (no ingress rule on blue): the bridge says it applies, web-b is refused on blue
    and still reaches web-a on green."""
    r, api, ns = stage.demo.report, stage.demo.api, stage.ns
    r.say("")
    r.say(f"create MultiNetworkPolicy {ns}/isolate-blue: {constants.POLICY_FOR_PODNETWORK_ANNOTATION}: "
          "blue, podSelector {}, policyTypes [Ingress], no ingress rule (deny all ingress on blue)")
    api.create(policy("isolate-blue", ns, []))
    await stage.sync()
    said = stages.events_about(api, ns, constants.POLICY_KIND, "isolate-blue")
    r.check([e.reason for e in said] == ["PolicyApplies"],
            f"the bridge posted PolicyApplies on MultiNetworkPolicy {ns}/isolate-blue",
            [(e.reason, e.message) for e in said])
    r.check(not await stage.probe(stage.on_blue, BLUE.name),
            "web-b cannot connect to web-a on blue: isolate-blue denies ingress")
    r.check(await stage.probe(stage.on_green, GREEN.name),
            "web-b still connects to web-a on green: the policy names blue only")


async def _a_second_policy_admits_clients(stage: _Stage) -> None:
    r, api, ns = stage.demo.report, stage.demo.api, stage.ns
    allow = policy("allow-clients", ns, [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                                          "ports": [{"protocol": "TCP", "port": PORT}]}])
    r.say("")
    r.say("label web-b role=client; create MultiNetworkPolicy "
          f"{ns}/allow-clients: ingress on blue from pods labelled role=client to TCP {PORT}")
    api.patch(*POD, "web-b", {"metadata": {"labels": {"role": "client"}}}, ns)
    api.create(allow)
    await stage.sync()
    r.check(await stage.probe(stage.on_blue, BLUE.name),
            "web-b connects to web-a on blue once allow-clients admits pods labelled role=client")


async def _deleting_the_policies_removes_the_tables(stage: _Stage) -> None:
    r, api, ns = stage.demo.report, stage.demo.api, stage.ns
    r.say("")
    r.say("delete both policies")
    api.delete(*POLICY, "allow-clients", ns)
    api.delete(*POLICY, "isolate-blue", ns)
    await stage.sync()
    r.check(not stage.shown, "with the policies deleted the agents removed every policy table",
            sorted(stage.shown))


def _node_of(api: Any, pod: str, ns: str) -> str:
    return str(api.get(*POD, pod, ns)["spec"].get("nodeName"))


__all__ = ["Servers", "chains", "connects", "run", "settle", "tables"]
