"""`podnetwork demo`: every component's real code, on this machine, narrated and checked.

The API server is `demo.store` (Kubernetes semantics, in process). On it run
the PodNetwork controller and the NPWG bridge (their own orchestration, fed by the
store's watches: `demo.controlplane`), admission, the scheduler extender over HTTP on loopback
with a kube-scheduler stand-in (`demo.scheduling`), and one CNI agent per
node on its unix socket, reached through the real shim executable by a kubelet
stand-in (`demo.kubelet`) that gives each pod a network namespace. The
plugins are the real ones (bridge, macvlan, host-local).

The two nodes share this machine's kernel, so one Linux bridge per network stands
for the network's layer 2 across nodes, and the macvlan network's parent is one
dummy link. Addresses come from 198.18.0.0/15 (RFC 2544, benchmarking), which no
real network routes, and nothing is routed to or from the host: every ping stays
inside the demo's own namespaces.

`Demo` runs the stages in order: 1 to 3 (the control plane's part) are `demo.controlstory`,
hot-plug is `demo.hotplug`, and the namespace, nodes and networks they share are `demo.world`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge import npwg
from bridge.agent.daemon.running import Running
from demo import host as host_mod
from demo.controlplane import ControlPlane
from demo.controlstory import ControlStory
from demo.report import Report
from demo.scheduling import Decision, Extender, Scheduler
from demo.store import Store
from demo.world import (
    BLUE,
    DEFAULT,
    GREEN,
    NODE_A,
    NODE_B,
    NS,
    PN,
    PNA,
    POD,
    RED,
    SECONDARY,
    Net,
    condition,
    condition_summary,
)
from podnetwork.ground import constants
from podnetwork.ground.constants import ConditionType
from podnetwork.kep import networks

if TYPE_CHECKING:
    from demo.kubelet import Kubelet


@dataclass
class Options:
    check: bool = False
    keep: bool = False
    cni_bin_dirs: list[Path] = field(default_factory=lambda: list(host_mod.DEFAULT_CNI_BIN_DIRS))
    control_plane_only: bool = False
    tag: str | None = None
    """Names the run's resources (default: the process id)."""


def main(options: Options, report: Report) -> int:
    """Run the demo: 0 when every check passed, 1 when one failed, 130 when interrupted."""
    report.show_checks = options.check
    demo = Demo(options, report)
    interrupted = False
    try:
        asyncio.run(demo.run())
    except KeyboardInterrupt:
        interrupted = True
        report.failures.append("interrupted (Ctrl-C or SIGTERM)")
        left = demo.footprint.leftovers() if not options.keep else []
        report.always("everything the demo made was removed" if not left else f"left behind: {left}")
    report.summary()
    if interrupted:
        return 130
    return 1 if report.failures else 0


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class Demo(ControlStory):
    def __init__(self, options: Options, report: Report) -> None:
        self.options = options
        self.report = report
        self.footprint = host_mod.Footprint(options.tag or str(os.getpid()))
        self.api = Store()
        self.notes: list[str] = []
        self.control = ControlPlane(self.api, on_note=self._note)
        self.extender = Extender(self.api)
        self.scheduler: Scheduler | None = None
        self.kubelets: dict[str, Kubelet] = {}
        self.agents: list[Running] = []
        self.data_plane = False
        self.ipam_dirs: dict[str, Path] = {}
        self.shim: Path | None = None
        self.bin_dir: Path | None = None
        self.run_dir: Path | None = None
        self.default_conf: dict[str, Any] = {}
        self.agent_watches: list[Callable[[], None]] = []
        """What stops the store's feeds of the agents' Services state (`demo.objects.follow`)."""

    # -- narrative helpers ----------------------------------------------------------------

    def _note(self, text: str) -> None:
        self.notes.append(text)

    def _decision(self, decision: Decision) -> None:
        """Scheduler decisions join the notes, so the story prints in the order things happened."""
        reply = decision.reply
        answer = f"NodeNames={reply.node_names or []}"
        for key, failed in (("FailedNodes", reply.failed_nodes),
                            ("FailedAndUnresolvableNodes", reply.failed_and_unresolvable_nodes)):
            if failed:
                answer += f" {key}={json.dumps(failed)}"
        self._note(
            f"scheduler: POST /filter {{Pod: {decision.pod}, NodeNames: {decision.candidates}}} -> {answer}"
        )
        if decision.node:
            self._note(f"scheduler:   bound {decision.pod} to {decision.node}")
        else:
            self._note(f"scheduler:   {decision.pod} stays Pending: {decision.message}")

    # -- the run ------------------------------------------------------------------------

    async def run(self) -> None:
        opts = self.options
        missing = host_mod.missing_prerequisites(opts.cni_bin_dirs)
        self.data_plane = not opts.control_plane_only and not missing
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        # Ctrl-C and SIGTERM cancel the run; cleanup then runs to its end whatever arrives.
        self._on_signals(loop, task.cancel)
        interrupted = False
        try:
            with host_mod.Host(self.footprint, keep=opts.keep) as host:
                self.host = host
                try:
                    await self._stages(missing)
                except asyncio.CancelledError:
                    interrupted = True
                    self.report.say("interrupted: cleaning up (this finishes even if you press Ctrl-C again)")
                except Exception as exc:
                    self.report.check(False, "the demo ran to its end", f"{type(exc).__name__}: {exc}")
                    if self.report.verbosity >= 2:
                        import traceback

                        traceback.print_exc()
                finally:
                    self._on_signals(loop, lambda: self.report.say("still cleaning up, please wait"))
                    await self._stop_components()
            # The Host's ExitStack has removed namespaces, links and directories here.
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)
        if interrupted:
            raise KeyboardInterrupt
        self._after_cleanup()
        self.report.say(f"(demo took {time.monotonic() - started:.1f}s)")

    @staticmethod
    def _on_signals(loop: asyncio.AbstractEventLoop, callback: Any) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, callback)

    async def _stages(self, missing: list[str]) -> None:
        opts = self.options
        self.report.section("0. What runs here")
        self._intro(missing)
        await self._start_control_plane()
        self._networks()
        await self._pods()
        self._translation()
        if self.data_plane:
            await self._attach()
            await self._live_ips()
            from demo import hotplug as hotplug_stage

            await hotplug_stage.run(self, ns=NS, red=RED)
            from demo import policy as policy_stage

            await policy_stage.run(self, ns=NS)
            from demo import solo as solo_stage

            await solo_stage.run(self, ns=NS)
            from demo import services as services_stage

            await services_stage.run(self, ns=NS)
        else:
            why = "--control-plane-only" if opts.control_plane_only else "needs " + "; ".join(missing)
            self.report.skip(f"4. attaching pods with the real CNI plugins: {why}")
        await self._delete()

    def _intro(self, missing: list[str]) -> None:
        r = self.report
        r.say("API server:       an in-process object store with Kubernetes semantics (demo.store)")
        r.say("controller:       podnetwork.kep.conditions / inuse / defaultnet, fed by watch events")
        r.say("bridge:           ParamsReady, translation to NPWG, pod IPs per network (bridge.translate), "
              "EndpointSlices of a network's addresses (bridge.operator.serviceslices)")
        r.say("scheduler:        the scheduler extender's FastAPI app, over HTTP on 127.0.0.1")
        if self.data_plane:
            dirs = ":".join(str(d) for d in self.options.cni_bin_dirs)
            r.say(f"CNI:              shim -> agent (unix socket, one per node) -> real plugins in {dirs}")
            r.say(f"pods:             network namespaces named {self.footprint.netns_prefix}<pod>")
        elif self.options.control_plane_only:
            r.say("CNI:              skipped (--control-plane-only)")
        else:
            r.say("CNI:              skipped; the data-plane part needs " + "; ".join(missing))

    async def _start_control_plane(self) -> None:
        # Admission webhooks are registered before anything is created, as on a cluster.
        from demo import admission as admission_mod
        from demo import services as services_mod

        admission_mod.register(self.api)
        services_mod.register(self.api)  # the API server's own ClusterIP allocation
        self.control.start()
        url = await self.extender.start()
        self.scheduler = Scheduler(self.api, url, on_decision=self._decision)
        await self.scheduler.start()
        self.report.say(f"scheduler extender listening on {url}")
        self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})

    # -- 4 ------------------------------------------------------------------------------

    async def _start_agents(self) -> None:
        for node in (NODE_A, NODE_B):
            running = await self._start_agent(node)
            self.report.say(f"agent of {node} listening on {running.agent.config.socket_path}")
        self.report.say(
            f"shim installed as {self.shim}; {NODE_A}'s runtime hands it this network config: "
            f"{json.dumps(self.kubelets[NODE_A].plugin_config)}"
        )

    async def _start_agent(self, node: str, node_netns: str | None = None) -> Running:
        """The node's agent and its kubelet stand-in. Without `node_netns` the agent's node is this
        machine's namespace (node-a and node-b share it, and its bridges): its periodic node-access
        recheck is then off, so that it never gives this machine a path (`demo.solo`)."""
        from bridge.agent.daemon import agent as agent_mod
        from bridge.agent.daemon import command as cni_command
        from bridge.agent.policy import state as policystate
        from bridge.agent.policy.apply import Enforcer
        from bridge.agent.services import state as servicestate
        from bridge.agent.services.apply import ClusterIPs
        from demo import objects as objects_mod
        from demo.kubelet import Kubelet

        if self.shim is None:
            self.bin_dir = self.host.tempdir("bin")
            self.shim = cni_command.install_shim(self.bin_dir, sys.executable)
            self.run_dir = self.host.tempdir("run")
            self.default_conf = DEFAULT.config(
                self.footprint.link(DEFAULT.link), self.host.tempdir("ipam-default")
            )
        assert self.bin_dir is not None and self.run_dir is not None
        default_conf = self.default_conf
        config = agent_mod.AgentConfig(
            socket_path=self.run_dir / f"{node}.sock",
            cache_dir=self.run_dir / f"{node}-cache",
            bin_dirs=tuple(self.options.cni_bin_dirs),
            conf_dir=self.run_dir / "net.d",
            default_network=default_conf,
            plugin_timeout=30.0,
            node_netns=Path(node_netns) if node_netns else None,
            recheck_interval=30.0 if node_netns else 24 * 3600.0,
        )
        # The Services' ClusterIPs and the MultiNetworkPolicy tables in the node's pods, as
        # `podnetwork cni-agent` keeps them: the agent's own reconcilers, their state listing and
        # watching the store (demo.services, demo.policy).
        services = ClusterIPs(servicestate.ServiceState())
        self.agent_watches.append(objects_mod.follow(self.api, servicestate.KINDS, services.state))
        enforcer = Enforcer(policystate.PolicyState(node=node))
        self.agent_watches.append(objects_mod.follow(self.api, policystate.KINDS, enforcer.state))
        agent = agent_mod.Agent(objects_mod.StoreObjects(self.api), config, services=services,
                                enforcer=enforcer)
        running = Running(agent)
        await running.start()
        self.agents.append(running)
        conflist = agent.own_conflist(default_conf)
        plugin_config = {
            "cniVersion": conflist["cniVersion"],
            "name": conflist["name"],
            **conflist["plugins"][0],
        }
        self.kubelets[node] = Kubelet(
            node,
            self.api,
            self.host,
            shim=[str(self.shim)],
            plugin_config=plugin_config,
            cni_path=[self.bin_dir, *self.options.cni_bin_dirs],
        )
        return running

    async def _attach(self) -> None:
        r, api = self.report, self.api
        r.section("4. Attaching pods: runtime -> shim -> agent -> CNI plugins")
        bridges = [self.host.bridge(net.link) for net in (DEFAULT, BLUE, RED)]
        r.say(f"node network setup: Linux bridges {', '.join(bridges)} (default, blue, red) with fixed MACs")
        await self._start_agents()
        pods = [p for p in api.list(*POD, NS) if p["spec"].get("nodeName")]
        for pod in pods:
            name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
            kubelet = self.kubelets[node]
            result = await kubelet.start_pod(NS, name)
            call = kubelet.calls[-1]
            r.say(
                f"{node}: CNI ADD {NS}/{name} via the shim ({call.seconds * 1000:.0f} ms), "
                f"netns {kubelet.sandboxes[f'{NS}/{name}'].netns}"
            )
            r.detail("CNI_ARGS", call.env["CNI_ARGS"])
            r.detail("result returned to the runtime", result)
        r.say("")
        for running in self.agents:  # each agent writes network-status after its answer
            await running.agent.status.idle()
        for pod in pods:
            self._show_pod_networks(pod["metadata"]["name"])
        r.say("")
        for name in ("web-a", "web-b"):
            netns = self._sandbox(name).netns
            route = host_mod.run(
                ["ip", "-n", netns, "-4", "route", "show", "default"], check=False
            ).stdout.strip()
            r.say(
                f"{name}: isDefaultGW4 on blue -> default-route -> in the pod: "
                f"{route or '(no default route)'}"
            )
            r.check(
                route.startswith(f"default via {BLUE.gateway} dev blue0"),
                f"the agent moved {name}'s default route to blue0 via {BLUE.gateway} (isDefaultGW4)",
                route,
            )
        r.say("")
        r.say("connectivity (ICMP echo from inside each pod's network namespace):")
        await self._ping("web-a", "web-b", DEFAULT.name)
        await self._ping("web-a", "web-b", BLUE.name)
        await self._ping("web-b", "web-a", GREEN.name)
        await self._ping("db-1", "db-2", RED.name)
        held = self._leases(RED)
        red_ips = sorted(filter(None, (self._ip_on(p, RED.name) for p in ("db-1", "db-2"))))
        r.say(f"host-local leases of red in {self.ipam_dirs[RED.name]}: {held}")
        r.check(
            held == red_ips and len(held) == 2,
            "host-local holds exactly the red IPs of db-1 and db-2",
            {"leases": held, "pod-ips": red_ips},
        )
        r.say("")
        failures = {}
        for pod in pods:
            name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
            try:
                await self.kubelets[node].check_pod(NS, name)
            except Exception as exc:
                failures[name] = str(exc)
        r.say(
            f"CNI CHECK of {len(pods)} pods through the shim: every delegate plugin confirms its attachment"
        )
        r.check(not failures, "CNI CHECK succeeded for every pod", failures)

    async def _live_ips(self) -> None:
        """KEP Req 25 (demo.liveips): an IPv6 address added in web-a shows in its status."""
        from demo import liveips

        netns = self._sandbox("web-a").netns
        await liveips.show(self.report, self.api, NS, "web-a", netns, "eth0", DEFAULT.name)

    def _sandbox(self, pod: str) -> Any:
        node = self.api.get(*POD, pod, NS)["spec"]["nodeName"]
        return self.kubelets[node].sandboxes[f"{NS}/{pod}"]

    def _leases(self, net: Net) -> list[str]:
        """The addresses host-local holds for a network: one file per address in its dataDir."""
        where = self.ipam_dirs[net.name] / f"demo-{net.name}"
        if not where.is_dir():
            return []
        return sorted(p.name for p in where.iterdir() if _is_ip(p.name))

    def _pod_ips(self, pod: str) -> list[dict[str, Any]]:
        obj = self.api.get(*POD, pod, NS)
        text = networks.annotations_of(obj).get(constants.POD_IPS_ANNOTATION)
        return json.loads(text) if text else []

    def _ip_on(self, pod: str, network: str) -> str | None:
        return next((e["ip"] for e in self._pod_ips(pod) if e.get("podNetwork") == network), None)

    def _show_pod_networks(self, pod: str) -> None:
        r = self.report
        obj = self.api.get(*POD, pod, NS)
        status = json.loads(networks.annotations_of(obj).get(npwg.NETWORK_STATUS_ANNOTATION) or "[]")
        ips = self._pod_ips(pod)
        r.say(f"{pod} ({obj['spec']['nodeName']}):")
        for entry in status:
            r.say(
                f"  network-status: {entry.get('name')} {entry.get('interface')} {entry.get('ips')}"
                + (" default" if entry.get("default") else "")
                + (f" default-route={entry['default-route']}" if entry.get("default-route") else "")
            )
        r.say(f"  {constants.POD_IPS_ANNOTATION}: {json.dumps(ips)}")
        data = json.loads(networks.annotations_of(obj).get(constants.ATTACHMENTS_ANNOTATION) or "[]")
        r.say(f"  {constants.ATTACHMENTS_ANNOTATION}: " + ", ".join(
            f"{d.get('podNetwork')} {d.get('interfaceName')} {d.get('hardwareAddress')}" for d in data))
        r.detail("network-status", status)
        r.detail(
            "ip addr in the pod",
            self.host.addresses(self.kubelets[obj["spec"]["nodeName"]].sandboxes[f"{NS}/{pod}"].netns),
        )
        kep = json.loads(networks.annotations_of(obj)[constants.NETWORKS_ANNOTATION])
        wanted = [n.get("podNetworkName") or "green" for n in kep]
        subnets = {n.name: ipaddress.ip_network(n.subnet) for n in (DEFAULT, *SECONDARY)}
        for network in wanted:
            ip = self._ip_on(pod, network)
            ok = ip is not None and ipaddress.ip_address(ip) in subnets[network]
            r.check(ok, f"{pod} has an IP on {network} in {subnets[network]}", ips)
        r.check(
            len(status) == len(wanted) and sum(1 for e in status if e.get("default")) == 1,
            f"{pod}'s network-status lists {len(wanted)} attachments, one of them the default",
            status,
        )
        r.check(
            [d.get("interfaceName") for d in data] == [e.get("interface") for e in status]
            and all(d.get("hardwareAddress") and d.get("ips") for d in data),
            f"{pod}'s attachment data (KEP Req 17, for a downward-API volume) names each interface "
            "with its IPs and MAC",
            data,
        )

    async def _ping(self, src: str, dst: str, network: str) -> None:
        ip = self._ip_on(dst, network)
        node = self.api.get(*POD, src, NS)["spec"]["nodeName"]
        netns = self.kubelets[node].sandboxes[f"{NS}/{src}"].netns
        if ip is None:
            self.report.check(False, f"{src} -> {dst} on {network}", f"{dst} has no IP on {network}")
            return
        proc = await asyncio.to_thread(self.host.ping, netns, ip)
        self.report.say(f"  {src} -> {dst} ({ip}) on {network}: {proc.stdout.strip() or proc.stderr.strip()}")
        self.report.check(
            proc.returncode == 0,
            f"{src} reaches {dst} on {network}",
            proc.stdout.strip() or proc.stderr.strip(),
        )

    # -- 5 ------------------------------------------------------------------------------

    async def _delete_pod(self, name: str) -> None:
        pod = self.api.get(*POD, name, NS)
        node = pod["spec"].get("nodeName")
        if self.data_plane and node in self.kubelets:
            kubelet = self.kubelets[node]
            await kubelet.stop_pod(NS, name)
            self.report.say(
                f"{node}: CNI DEL {NS}/{name} via the shim ({kubelet.calls[-1].seconds * 1000:.0f} ms);"
                " namespace removed"
            )
        self.api.delete(*POD, name, NS)
        self.report.say(f"pod {NS}/{name} deleted")
        self._flush_notes()

    async def _delete(self) -> None:
        r, api = self.report, self.api
        r.section("5. Deleting: CNI DEL, finalizers released, the PodNetwork goes")
        api.delete(*PN, RED.name)
        red = api.get(*PN, RED.name)
        r.say(f"delete PodNetwork red -> {condition_summary(red)}")
        r.check(
            bool(red["metadata"].get("deletionTimestamp"))
            and constants.IN_USE_FINALIZER in (red["metadata"].get("finalizers") or []),
            "red is kept (deletionTimestamp set) while db-1 and db-2 use it",
            red["metadata"],
        )
        await self._delete_pod("db-1")
        red_now = api.find(*PN, RED.name)
        r.check(
            red_now is not None and "1 pod" in condition(red_now, ConditionType.IN_USE).get("message", ""),
            "red still waits for db-2 (InUse names it)",
            condition_summary(red_now),
        )
        await self._delete_pod("db-2")
        r.check(
            api.find(*PN, RED.name) is None,
            "with the last pod gone the finalizer was removed and red's delete completed",
        )
        if self.data_plane:
            leases = self._leases(RED)
            r.check(not leases, "host-local released red's addresses (no lease files left)", leases)
            netns = host_mod.run(["ip", "netns", "list"], check=False).stdout
            r.check(
                self.footprint.netns("db-1") not in netns and self.footprint.netns("db-2") not in netns,
                "the db pods' network namespaces are gone",
                netns,
            )
        api.delete(constants.API_VERSION, constants.ATTACHMENT_KIND, "green-port", NS)
        pna = api.find(*PNA, "green-port", NS)
        r.say(f"delete PodNetworkAttachment green-port -> {condition_summary(pna)}")
        r.check(
            pna is not None and bool(pna["metadata"].get("deletionTimestamp")),
            "green-port waits for web-a and web-b (in-use finalizer)",
            pna,
        )

    # -- 6 ------------------------------------------------------------------------------

    async def _stop_components(self) -> None:
        """Tear down the pods still attached (CNI DEL), then stop the agents and the servers."""
        r = self.report
        r.section("6. Cleaning up")
        for kubelet in self.kubelets.values():
            for key in list(kubelet.sandboxes):
                ns, _, name = key.partition("/")
                if self.options.keep:
                    continue
                try:
                    await kubelet.stop_pod(ns, name)
                    r.say(f"{kubelet.node}: CNI DEL {key}")
                except Exception as exc:  # keep tearing down the rest
                    r.check(False, f"CNI DEL of {key} during cleanup", str(exc))
        for stop in self.agent_watches:
            stop()
        for running in self.agents:
            with contextlib.suppress(Exception):
                await running.stop()
        if self.scheduler is not None:
            await self.scheduler.stop()
        await self.extender.stop()
        self.control.stop()

    def _after_cleanup(self) -> None:
        r = self.report
        if self.options.keep:
            r.always("--keep: the namespaces, links and files are left in place. Remove them with:")
            for line in self.host.cleanup_commands():
                r.always(f"  {line}")
            return
        for problem in self.host.cleanup_errors:
            r.check(False, "cleanup step", problem)
        r.check(
            not self.api.callback_errors,
            "no component failed while handling a watch event",
            self.api.callback_errors,
        )
        left = self.footprint.leftovers()
        r.check(not left, "nothing of the demo is left: no namespace, link, IPAM directory or socket", left)
        if not left:
            r.say(
                f"removed everything this run made ({len(self.host.created)} namespaces, links, directories)"
            )


__all__ = ["Demo", "Options", "main"]
