"""The CNI agent: this project's NPWG delegating plugin (multi-net spec 2.4), KEP "Agent-based" model.

The runtime runs the shim (`bridge.agent.shim.shim`), which forwards the CNI request here
over a unix socket (`bridge.agent.daemon.server`, speaking `bridge.agent.shim.protocol`). The agent is
made of parts that call each other's public methods only:

- `request`: a forwarded request, validated before anything else;
- `records.Records`: the containers' records on disk, their locks, the order of requests;
- `runner.Runner`: the delegates of one attachment run (libcni's `CNIConfig`), recorded first;
- `defaultnet.DefaultNetwork`, `selection`, `planner.Planner`: which networks a pod gets,
  resolved before the first plugin runs;
- `attachments.Attachments`: ADD, DEL and CHECK, and the attach and detach hot-plug shares;
- `collector.Collector`: GC;
- `reports.Reports`: network-status after the answer, live address changes, Events;
- `install`: the conflist this agent writes once its default network is usable (6.1).

On ADD the agent reads the pod, attaches the cluster default network first (6.2; for a pod
whose KEP networks leave out `default`, the first of them in its place: the KEP's explicit
list), then each selected network in order (4.2), rolls back on the first failure (7.2),
records every attachment on disk before executing it, moves the default route when a selection
asks for it (4.1.2.1.9), returns the first attachment's result to the runtime, then writes
`k8s.v1.cni.cncf.io/network-status` (5) in the background. DEL needs only the cache; before
it tears down a record an earlier agent process wrote, it stops the delegates that process
may have left running (`bridge.agent.delegates.orphans`). Operations for one container are serialized;
different containers run in parallel (7.3).

Embedding: `Agent(objects, AgentConfig(...))`, then `await agent.start()` /
`await agent.stop()`; `await agent.handle(env, stdin)` runs one request without
the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from bridge.agent.access.apply import NodeAccess
from bridge.agent.cni.attachments import Attachments
from bridge.agent.cni.collector import Collector
from bridge.agent.cni.defaultnet import DefaultNetwork
from bridge.agent.cni.planner import Planner
from bridge.agent.cni.request import parse_request
from bridge.agent.delegates import cache, hostpaths, invoke
from bridge.agent.delegates.invoke import CNIError, Command
from bridge.agent.delegates.records import Records, unfinished
from bridge.agent.delegates.runner import Runner
from bridge.agent.kube.objects import EventSink, ObjectSource
from bridge.agent.node import install, readiness
from bridge.agent.node.settings import AgentConfig
from bridge.agent.pods.addresswatch import AddressWatch
from bridge.agent.pods.publisher import StatusPublisher
from bridge.agent.pods.reports import Reports
from bridge.agent.policy.apply import Enforcer
from bridge.agent.services.apply import ClusterIPs

log = logging.getLogger(__name__)

#: Events on a pod whose hot-plug an agent restart cut short (`Agent._roll_back`).
REASON_ROLLED_BACK = "NetworksChangeRolledBack"
REASON_ROLLBACK_FAILED = "NetworksChangeRollbackFailed"


class Agent:
    """The delegating plugin. Safe to run several in one process (distinct sockets and caches)."""

    def __init__(
        self,
        objects: ObjectSource,
        config: AgentConfig,
        *,
        executor: invoke.Exec | None = None,
        events: EventSink | None = None,
        enforcer: Enforcer | None = None,
        services: ClusterIPs | None = None,
    ) -> None:
        self.objects = objects
        self.config = config
        self.cache = cache.Cache(config.cache_dir, durable=config.durable_cache)
        self.records = Records(self.cache)
        node_netns = str(config.node_netns) if config.node_netns is not None else None
        self.runner = Runner(executor or invoke.SubprocessExec(node_netns), config.bin_dirs,
                             config.plugin_timeout, self.records)
        self.default_network = DefaultNetwork(objects, config, self.runner)
        self.planner = Planner(objects, config, self.runner, self.default_network)
        self.reports = Reports(objects, config, self.records, events)
        self.attachments = Attachments(objects, config, self.records, self.runner, self.planner, self.reports)
        self.node_access = NodeAccess(objects, config, self.records, self.runner, events=lambda: self.events)
        """The node's paths to the PodNetworks that ask for one (docs/node-access.md)."""
        self.attachments.node_access = self.node_access
        self.collector = Collector(self.records, self.runner, self.attachments)
        self.enforcer = enforcer
        """MultiNetworkPolicy on this node's pods (`bridge.agent.policy.apply`); None: not enforced."""
        self.attachments.enforcer = enforcer
        self.services = services
        """Services' ClusterIPs in this node's pods (`bridge.agent.services.apply`); None: not served."""
        self.attachments.services = services
        self.readiness = readiness.Reporter()
        """Logs each change of readiness (and, given a node and a sink, posts a Node Event)."""
        self.host_problem: str | None = None
        """What the node denies the agent (`delegates.hostpaths`), found at start; None: nothing."""
        self.conf_written = asyncio.Event()
        """Set once the agent's own conflist is in place (6.1)."""
        self._announcing: asyncio.Task[None] | None = None
        self._reconciling: asyncio.Task[None] | None = None
        self._finishing: set[asyncio.Task[None]] = set()
        """Roll-backs of hot-plugs an earlier agent process left unfinished (`start`)."""

    @property
    def status(self) -> StatusPublisher:
        """The network-status writer (`publisher.StatusPublisher`): other parts of the agent
        report a pod's attachments anew through `status.publish(namespace, name, entries)`."""
        return self.reports.publisher

    @property
    def address_watch(self) -> AddressWatch:
        """The address watches of the attached pods (`addresswatch.AddressWatch`)."""
        return self.reports.address_watch

    @property
    def events(self) -> EventSink | None:
        """Where Warning Events about pods go; None: the log only."""
        return self.reports.events

    @events.setter
    def events(self, sink: EventSink | None) -> None:
        self.reports.events = sink

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Makes the cache directory, rolls back the hot-plugs an earlier agent process left
        unfinished, queues the network-status writes it left pending, and watches the addresses
        of the pods already recorded. The socket is not the agent's: `running.Running` serves it."""
        self.cache.ensure()
        if self.config.netns_dir is not None:
            self.host_problem = hostpaths.netns_problem(self.config.netns_dir)
        self._roll_back_unfinished()
        self.reports.track_recorded()
        if self.config.patch_status:
            self.reports.republish_pending()
        self.reports.watch_recorded()
        if self.enforcer is not None:
            # Every recorded pod's table is reconciled once the policies are read.
            self.enforcer.start(self.records.readable())
        if self.services is not None:
            # And every recorded pod's ClusterIPs once the Services are read.
            self.services.start(self.records.readable())

    async def _reconcile_node_access(self) -> None:
        """Node access at start, then every `recheck_interval` (a PodNetwork's switch changed)."""
        while True:
            await self.node_access.settle("reconcile")
            await asyncio.sleep(self.config.recheck_interval)

    def _roll_back_unfinished(self) -> None:
        """For each complete record with an attachment not attached (an earlier agent process was
        killed during a hot-plug), a task that takes the container's lock at once and rolls that
        attachment back: every CNI request for the container waits for it (tasks run in the order
        they were made, and these are made before the socket is served)."""
        for record in self.records.readable():
            if unfinished(record):
                task = asyncio.create_task(
                    self._roll_back(record.container_id), name=f"roll-back {record.container_id[:12]}")
                self._finishing.add(task)
                task.add_done_callback(self._finishing.discard)

    async def _roll_back(self, container_id: str) -> None:
        async with self.records.lock(container_id):
            try:
                record = self.records.cache.load(container_id)
            except cache.CacheError:
                return
            undone = unfinished(record) if record is not None else []
            if record is None or not undone:
                return
            log.warning(
                "container %s (pod %s/%s): an earlier agent was stopped while attaching %s to the running "
                "pod; rolling that back (its pod watch attaches the network anew)",
                container_id, record.pod_namespace, record.pod_name,
                ", ".join(f"{a.name} as {a.ifname}" for a in undone),
            )
            networks = ", ".join(f"{a.name} as {a.ifname}" for a in undone)
            cut = f"attaching {networks} was cut short by an agent restart and"
            try:
                await self.runner.stop_orphans(container_id)  # its delegate may still be running
            except CNIError as exc:
                log.error("container %s: not rolled back: %s; CHECK reports it partly attached, and its DEL "
                          "retries", container_id, exc)
                self.reports.report(record, REASON_ROLLBACK_FAILED, f"{cut} could not be rolled back: {exc}")
                return
            problems = await self.attachments.detach(record, list(reversed(undone)), rollback=False)
            self.records.save(record)
        if problems:
            log.error("container %s: rolling back failed for %s; still recorded, so CHECK reports it partly "
                      "attached (106) and its DEL retries", container_id, "; ".join(problems))
            self.reports.report(record, REASON_ROLLBACK_FAILED, f"{cut} rolling it back failed: "
                                f"{'; '.join(problems)}; the pod's CHECK fails until its DEL")
            return
        # A Warning: the pod lost, for a while, a network its annotation names.
        self.reports.report(record, REASON_ROLLED_BACK, f"{cut} rolled back; its pod watch attaches it anew")
        self.reports.publish_unless_published(record)
        self.reports.watch(record)

    def announce(self) -> None:
        """Start reconciling node access (`nodeaccess`: now, then every `recheck_interval`), and,
        when `conf_file` is set, waiting for the default network, then writing the agent's
        conflist (6.1): only once something serves the socket it names."""
        if self._reconciling is None:  # once the socket is served: node access reconciled
            self._reconciling = asyncio.create_task(self._reconcile_node_access(), name="node-access")
        if self.config.conf_file is not None and self._announcing is None:
            self._announcing = asyncio.create_task(self._install_conf_when_ready(),
                                                   name="cni-agent-readiness")

    async def stop(self) -> None:
        """Removes the agent's conflist: without the agent, the node is not ready. Stops
        publishing: a write still pending is recorded, and the next agent makes it."""
        if self._reconciling is not None:
            self._reconciling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciling
            self._reconciling = None
        for task in list(self._finishing):
            task.cancel()
        if self._finishing:
            await asyncio.wait(set(self._finishing))
        await self.reports.close()
        if self.enforcer is not None:
            await self.enforcer.stop()
        if self.services is not None:
            await self.services.stop()
        if self._announcing is not None:
            self._announcing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._announcing
            self._announcing = None
        if self.conf_written.is_set() and self.config.conf_file is not None:
            install.remove_conflist(self.config.conf_file)
            self.conf_written.clear()
        await self.readiness.close()

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- readiness (6.1) ---------------------------------------------------------------

    async def readiness_problem(self) -> str | None:
        """Why the agent cannot attach a pod now, or None (GET /v1/ready, CNI STATUS, the
        readiness probe): what the node denies it, else the default network's problem. Each
        change is reported once (`readiness`)."""
        problem = self.host_problem or await self.default_network_problem()
        self.readiness.update(problem)
        return problem

    async def default_network_problem(self) -> str | None:
        """Why the default network is not usable now, or None when a pod could attach to it."""
        return await self.default_network.problem()

    def own_conflist(self, default_config: Mapping[str, Any]) -> dict[str, Any]:
        """The conflist the runtime reads (`install.own_conflist`): the shim as the only plugin."""
        return install.own_conflist(default_config, self.config.socket_path)

    async def _install_conf_when_ready(self) -> None:
        """Writes the agent's conflist once it is ready, then keeps checking (more slowly), so a
        later change is reported too."""
        assert self.config.conf_file is not None
        while True:
            problem = await self.readiness_problem()
            if problem is None and not self.conf_written.is_set():
                _, default_config = await self.default_network.resolve({})
                install.write_conflist(self.config.conf_file, default_config, self.config.socket_path)
                self.conf_written.set()
                log.info("default network usable; wrote %s", self.config.conf_file)
            ready = problem is None and self.conf_written.is_set()
            await asyncio.sleep(self.config.recheck_interval if ready else self.config.readiness_interval)

    # --- requests ----------------------------------------------------------------------

    async def handle(self, env: Mapping[str, str], stdin: bytes) -> dict[str, Any] | None:
        """One CNI request; returns the result (None when the command has none), raises CNIError."""
        request = parse_request(env, stdin)
        command = request.args.command
        container_id = request.args.container_id
        arrival = self.records.arrived(container_id, adding=command is Command.ADD)
        if command is Command.VERSION:
            return {"cniVersion": request.cni_version, "supportedVersions": list(invoke.SUPPORTED_VERSIONS)}
        if command is Command.STATUS:
            problem = await self.readiness_problem()
            if problem:
                raise CNIError(50, "the agent cannot attach pods now", problem)
            return None
        if command is Command.GC:
            await self.collector.gc(request, arrival)
            return None
        async with self.records.lock(container_id):
            started = time.monotonic()
            result: dict[str, Any] | None = None
            if command is Command.ADD:
                async with self.records.add_slot():
                    result = await self.attachments.add(request)
            elif command is Command.DEL:
                await self.attachments.delete(request)
                self.records.forget(container_id)
            else:
                await self.attachments.check(request)
            log.info(
                "%s container %s (pod %s/%s) done in %.1f ms (%s)",
                command.value,
                container_id,
                request.pod_namespace or "-",
                request.pod_name or "-",
                (time.monotonic() - started) * 1000,
                request.phases,
            )
            return result


__all__ = ["Agent", "AgentConfig"]
