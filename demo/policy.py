"""Network policy in the demo (KEP-3698 Phase III, Req 22): a MultiNetworkPolicy isolates blue.

On a cluster each node's agent compiles the rules of every pod of its node from the
policies, pods, namespaces and networks it watches (`bridge.policy.rules.compile_pod`) and
writes them into the pod's network namespace in one nftables transaction
(`bridge.agent.nftables.apply`), or removes its table when no policy isolates the pod.
Here `NodePolicies` does exactly that from the store's objects, for the pods its node's
kubelet stand-in runs, after each change the stage makes. The bridge, fed by the store's
watches, posts its Events on the policies (`bridge.operator.policies`).

The traffic is real TCP between the pods' namespaces, over addresses of 198.18.0.0/15 that
exist only inside them: nothing leaves the machine. The servers are stopped and the tables
removed at the end of the stage; the namespaces go with the pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
from collections.abc import Mapping
from typing import Any, Protocol

from bridge import npwg, translate
from bridge.agent import nftables
from bridge.policy import PolicyError, World, parse_policy, rules, views
from demo.kubelet import Kubelet, Sandbox
from demo.report import Report
from demo.store import Store
from demo.world import BLUE, GREEN, NAD, PN, POD
from podnetwork.ground import constants
from podnetwork.ground.core import Namespace

POLICY = (constants.POLICY_API_VERSION, constants.POLICY_KIND)
PORT = 8080
#: Seconds a probe waits to connect: a dropped SYN is not answered at all.
PROBE_TIMEOUT = 1.0


class Demo(Protocol):
    """What the stage uses of `demo.demo.Demo` (which imports this module, not the reverse)."""

    report: Report
    api: Store
    kubelets: dict[str, Kubelet]

    def _flush_notes(self) -> None: ...

    def _sandbox(self, pod: str) -> Any: ...

    def _ip_on(self, pod: str, network: str) -> str | None: ...

    def _pod_ips(self, pod: str) -> list[dict[str, Any]]: ...


def world(api: Any) -> World:
    """What a node's agent watches, read from the store: the same views the agent builds."""
    podnetworks = [translate.PodNetwork.model_validate(o) for o in api.list(*PN)]
    nads = [npwg.NetworkAttachmentDefinition.model_validate(o) for o in api.list(*NAD)]
    networks = views.networks_of(podnetworks, nads)
    pods = [views.pod_from_object(o, networks) for o in api.list(*POD)]
    namespaces = [views.namespace_from_view(Namespace.model_validate(o)) for o in api.list("v1", "Namespace")]
    policies = []
    for obj in api.list(*POLICY):
        with contextlib.suppress(PolicyError):  # the bridge reports it in an Event; it applies to nothing
            policies.append(parse_policy(obj))
    return World.build(pods, namespaces, networks, policies)


class NodePolicies:
    """One node's agent, for policies: the rules of each pod its kubelet runs, compiled and applied."""

    def __init__(self, api: Any, node: str, sandboxes: Mapping[str, Sandbox]) -> None:
        self.api = api
        self.node = node
        self.sandboxes = sandboxes
        self.tables: dict[str, dict[str, Any]] = {}
        """Pods (`namespace/name`) whose namespace holds our table, and the transaction applied."""

    async def sync(self) -> list[str]:
        """Compile and apply every local pod's rules; what was done, in words."""
        done = []
        current = world(self.api)
        for key in rules.local_pods(current, self.node):
            sandbox = self.sandboxes.get(key)
            if sandbox is None:
                continue
            ruleset = rules.compile_pod(current, key)
            document = ruleset.document
            if document is not None:
                if self.tables.get(key) == document:
                    continue  # as the agent does: an unchanged ruleset is not written again
                await nftables.apply(sandbox.netns_path, document)
                self.tables[key] = document
                chains = sorted(c["add"]["chain"]["name"] for c in ruleset.commands
                                if "chain" in c.get("add", {}) and "hook" not in c["add"]["chain"])
                done.append(f"{self.node}'s agent: {key}: table {rules.FAMILY} {rules.TABLE} "
                            f"applied in {sandbox.netns} (chains {', '.join(chains)})")
            elif key in self.tables:
                await nftables.remove(sandbox.netns_path)
                del self.tables[key]
                done.append(f"{self.node}'s agent: {key}: no policy isolates it: table removed")
        return done


class Servers:
    """TCP servers in a pod's namespace (`demo.tcpprobe serve`), stopped by `stop`."""

    def __init__(self) -> None:
        self.procs: list[asyncio.subprocess.Process] = []

    async def start(self, netns: str, address: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", netns, sys.executable, "-m", "demo.tcpprobe", "serve", address, str(PORT),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        self.procs.append(proc)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=10)
        if line.strip() != b"listening":
            raise RuntimeError(f"the TCP server on {address}:{PORT} in {netns} did not start")

    async def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self.procs.clear()


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


async def run(demo: Demo, *, ns: str) -> None:
    """Stage 4d: web-b reaches web-a over TCP on blue; a policy isolating blue for ingress refuses
    it (green stays open); a second policy allowing pods labelled role=client lets it through."""
    r, api = demo.report, demo.api
    absent = [tool for tool in ("nft", "nsenter") if shutil.which(tool) is None]
    if absent:
        r.skip(f"4d. network policy: needs {' and '.join(absent)} (apt-get install nftables util-linux)")
        return
    r.section("4d. Network policy: a MultiNetworkPolicy isolates blue (KEP Phase III, Req 22)")
    nodes = [NodePolicies(api, node, kubelet.sandboxes) for node, kubelet in demo.kubelets.items()]
    server, client = demo._sandbox("web-a").netns, demo._sandbox("web-b").netns
    on_blue, on_green = demo._ip_on("web-a", BLUE.name), demo._ip_on("web-a", GREEN.name)
    if on_blue is None or on_green is None:
        r.check(False, "web-a has addresses on blue and green for the policy stage", demo._pod_ips("web-a"))
        return
    servers = Servers()

    async def sync() -> None:
        demo._flush_notes()
        for node in nodes:
            for line in await node.sync():
                r.say(line)

    async def probe(address: str, network: str) -> bool:
        ok, said = await connects(client, address)
        r.say(f"  web-b -> web-a ({address}:{PORT}) over TCP on {network}: {said}")
        return ok

    try:
        await servers.start(server, on_blue)
        await servers.start(server, on_green)
        r.say(f"web-a ({_node_of(api, 'web-a', ns)}) serves TCP {PORT} on blue and green; "
              f"web-b ({_node_of(api, 'web-b', ns)}) connects from its own namespace")
        r.check(await probe(on_blue, BLUE.name), "web-b connects to web-a on blue before any policy")

        deny = policy("isolate-blue", ns, [])
        r.say("")
        r.say(f"create MultiNetworkPolicy {ns}/isolate-blue: {constants.POLICY_FOR_PODNETWORK_ANNOTATION}: "
              "blue, podSelector {}, policyTypes [Ingress], no ingress rule (deny all ingress on blue)")
        api.create(deny)
        await sync()
        said = [e for e in api.list("v1", "Event", ns)
                if (e.get("involvedObject") or {}).get("kind") == constants.POLICY_KIND
                and e["involvedObject"].get("name") == "isolate-blue"]
        r.check([e.get("reason") for e in said] == ["PolicyApplies"],
                f"the bridge posted PolicyApplies on MultiNetworkPolicy {ns}/isolate-blue",
                [(e.get("reason"), e.get("message")) for e in said])
        r.check(not await probe(on_blue, BLUE.name),
                "web-b cannot connect to web-a on blue: isolate-blue denies ingress")
        r.check(await probe(on_green, GREEN.name),
                "web-b still connects to web-a on green: the policy names blue only")

        allow = policy("allow-clients", ns, [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                                              "ports": [{"protocol": "TCP", "port": PORT}]}])
        r.say("")
        r.say("label web-b role=client; create MultiNetworkPolicy "
              f"{ns}/allow-clients: ingress on blue from pods labelled role=client to TCP {PORT}")
        api.patch(*POD, "web-b", {"metadata": {"labels": {"role": "client"}}}, ns)
        api.create(allow)
        await sync()
        r.check(await probe(on_blue, BLUE.name),
                "web-b connects to web-a on blue once allow-clients admits pods labelled role=client")

        r.say("")
        r.say("delete both policies")
        api.delete(*POLICY, "allow-clients", ns)
        api.delete(*POLICY, "isolate-blue", ns)
        await sync()
        left = [key for node in nodes for key in node.tables]
        for node in nodes:
            for key in node.sandboxes:
                if await nftables.exists(node.sandboxes[key].netns_path):
                    left.append(key)
        r.check(not left, "with the policies deleted no pod's namespace holds a policy table", left)
    finally:
        await servers.stop()
        for node in nodes:  # an interrupted stage leaves no rule behind either
            for key in list(node.tables):
                with contextlib.suppress(nftables.NftablesError):
                    await nftables.remove(node.sandboxes[key].netns_path)


def _node_of(api: Any, pod: str, ns: str) -> str:
    return str(api.get(*POD, pod, ns)["spec"].get("nodeName"))


__all__ = ["NodePolicies", "Servers", "connects", "run", "world"]
