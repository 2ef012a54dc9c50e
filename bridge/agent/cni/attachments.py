"""The ADD, DEL and CHECK of a container's attachments, and the attach and detach they share with
hot-plug (`bridge.agent.daemon.hotplug`).

ADD reads the pod, plans every attachment before the first plugin runs (`planner`), attaches
the default network (or, for a pod's explicit list, its first network) then each selected
network in order, each recorded before its delegate runs (`runner.Runner.add`), moves the
default route when a selection asks for it (4.1.2.1.9), and on the first failure tears down
everything it attempted (7.2). DEL needs only the record:
every recorded attachment is DELed in reverse with its cached result, a failure not stopping
the others. CHECK asks each recorded attachment's delegates with its cached result. Callers
hold the container's lock (`records.Records.lock`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from bridge.agent.cni import plan
from bridge.agent.cni.features import NodePaths, PolicyTables, ServiceTables
from bridge.agent.cni.planner import Planner
from bridge.agent.cni.request import Request
from bridge.agent.delegates import cache, invoke
from bridge.agent.delegates.cache import Attachment, Record, State
from bridge.agent.delegates.invoke import CNIError, Command, ErrorCode, RuntimeArgs
from bridge.agent.delegates.records import Records, unfinished
from bridge.agent.delegates.runner import Runner, Timer
from bridge.agent.kube.objects import NotFound, ObjectSource
from bridge.agent.netns import routes
from bridge.agent.netns.local import planned_local
from bridge.agent.node.settings import AgentConfig
from bridge.agent.pods.reports import Reports
from podnetwork.ground.core import Pod

log = logging.getLogger(__name__)


class Attachments:
    """Sets up and tears down the attachments of one agent's containers (module docstring)."""

    def __init__(self, objects: ObjectSource, config: AgentConfig, records: Records, runner: Runner,
                 planner: Planner, reports: Reports) -> None:
        self.objects = objects
        self.config = config
        self.records = records
        self.runner = runner
        self.planner = planner
        self.reports = reports
        self.enforcer: PolicyTables | None = None
        """MultiNetworkPolicy on this node (`bridge.agent.policy.apply`); None: no policies enforced."""
        self.node_access: NodePaths | None = None
        """The node's paths to PodNetworks (`bridge.agent.access.apply`), settled after each ADD and DEL."""
        self.services: ServiceTables | None = None
        """Services' ClusterIPs in this node's pods (`bridge.agent.services.apply`); None: not served."""

    # --- attach and detach, one container ---

    async def attach(self, record: Record, planned: Sequence[plan.Planned], args: RuntimeArgs,
                     timed: Timer | None = None) -> None:
        """Attaches each planned network in order, each recorded before its delegate runs. The
        first failure stops (7.2) and is raised, saying which attachment; what it attached stays
        in the record, for the caller to tear down."""
        for p in planned:
            attachment = Attachment(
                name=p.name,
                ifname=p.ifname,
                config=p.config,
                default=p.default,
                default_route=list(p.default_route) if p.default_route is not None else None,
                podnetwork=p.podnetwork,
            )
            try:
                await self.runner.add(record, attachment, args, timed)
            except CNIError as exc:
                exc.msg = f"attaching {p.name} as {p.ifname} failed: {exc.msg}"
                raise

    async def detach(self, record: Record, attachments: Sequence[Attachment], *, netns: str = "",
                     rollback: bool) -> list[str]:
        """DELs each attachment (in the order given) and drops it from the record (not saved);
        the messages of the failures, which stay in the record so that the container's DEL
        retries them. With `rollback`, an attachment whose ADD failed is dropped even when its
        DEL fails: CNI plugins undo their own failed ADD, so that DEL was a courtesy."""
        cni_args = tuple((str(k), str(v)) for k, v in record.cni_args)
        base = RuntimeArgs(Command.DEL, record.container_id, netns or record.netns, "", cni_args)
        problems: list[str] = []
        for attachment in attachments:
            if unpassable := invoke.environment_problem(base.with_ifname(attachment.ifname)):
                # A record of an agent that accepted such a name (a lone surrogate in an
                # interfaceName): its ADD could not start the plugin either, so nothing of it
                # exists to remove, and a DEL that tried would fail forever.
                log.warning("container %s: dropping %s (%r) from its record without a DEL: %s, so no plugin "
                            "ever ran with it", record.container_id, attachment.name, attachment.ifname,
                            unpassable)
                record.attachments.remove(attachment)
                continue
            try:
                await self.runner.delete(record, attachment, base)
            except CNIError as exc:
                if not (rollback and attachment.state is State.FAILED):
                    problems.append(f"{attachment.name} ({attachment.ifname}): {exc}")
                    continue
                log.info("DEL after the failed ADD of %s (%s): %s", attachment.name, attachment.ifname, exc)
                record.attachments.remove(attachment)
        return problems

    async def teardown(self, record: Record, netns: str = "", *, raise_errors: bool = True) -> list[str]:
        """DEL every attempted attachment in reverse, past failures (7.2); the failures' messages.
        What failed stays recorded (the record no longer complete), so the runtime's next DEL
        retries it; a record left with nothing is removed."""
        # Before the interfaces go: their removal is not a change of the pod's addresses.
        await self.reports.unwatch(record.container_id)
        if self.enforcer is not None:
            await self.enforcer.deleted(record.container_id, netns or record.netns)
        if self.services is not None:
            await self.services.deleted(record.container_id, netns or record.netns)
        await self.runner.stop_orphans(record.container_id)
        # A status not yet written would report interfaces this DEL removes; one queued (or
        # written) is withdrawn below, once the interfaces are gone.
        reported = self.reports.cancel(record) or record.complete
        problems = await self.detach(record, list(reversed(record.attachments)), netns=netns, rollback=True)
        self.reports.withdraw(record, reported=reported)
        if record.attachments:
            record.complete = False
            self.records.save(record)  # keep what failed, so the runtime's next DEL retries it
        else:
            self.records.remove(record.container_id)
        if problems and raise_errors:
            raise CNIError(
                ErrorCode.PLUGIN_FAILED,
                f"DEL failed for {len(problems)} attachment(s) of container {record.container_id}",
                "; ".join(problems),
            )
        return problems

    # --- ADD ---

    async def add(self, request: Request) -> dict[str, Any] | None:
        """CNI ADD (module docstring); the result of the attachment on the runtime's interface (the
        default network's, or the first listed network's), for the runtime."""
        args = request.args
        record = self.records.load(args.container_id)
        if record is not None and record.complete:
            if record.ifname != args.ifname:
                raise CNIError(
                    ErrorCode.INVALID_CONFIG,
                    f"container {args.container_id} is already attached on {record.ifname}",
                    f"ADD asked for {args.ifname}; DEL it first",
                )
            self._adopt_uid(record, args)
            self.reports.publish_unless_published(record)  # its status was never written: repaired
            return record.result  # CRI: set-up of an already set-up pod is skipped
        if record is not None:
            # A previous ADD was cut short (agent killed): undo it before starting over.
            await self.teardown(record, args.netns)
        pod = await self._pod(request)
        with request.phases.timed("plan"):
            planned, selected = await self.planner.attachments(request, pod)
        record = Record(
            container_id=args.container_id,
            netns=args.netns,
            ifname=args.ifname,
            cni_args=[list(p) for p in args.args],
            pod_namespace=request.pod_namespace or "",
            pod_name=request.pod_name or "",
            # The runtime's word first: the sandbox is that pod's, whatever the API holds by now.
            pod_uid=args.arg("K8S_POD_UID") or pod.metadata.uid or "",
            explicit=selected.explicit,
            claimed=selected.claimed,
        )
        await self._set_up(record, planned, request, pod)
        if self.node_access is not None and self.node_access.concerns(record):
            with request.phases.timed("node-access"):
                await self.node_access.settle(f"ADD of container {record.container_id}")
                await self.node_access.pod_routes(record)
        return self._complete(record, request)

    async def _pod(self, request: Request) -> Pod:
        assert request.pod_namespace and request.pod_name
        try:
            with request.phases.timed("pod"):
                return await self.objects.get_pod(request.pod_namespace, request.pod_name)
        except NotFound:
            raise CNIError(
                ErrorCode.POD_NOT_FOUND,
                f"pod {request.pod_namespace}/{request.pod_name} not found",
                "the agent reads the pod's networks from the API before attaching them",
            ) from None

    async def _set_up(self, record: Record, planned: list[plan.Planned], request: Request, pod: Pod) -> None:
        """Attaches every planned network, moves the default route and writes the pod's policy
        table, or none: any failure tears down everything attempted, and the error says at which
        stage. The table is written before the answer, beside the delegates (a rollback first waits
        for that write, then removes the table): a pod a policy isolates never runs open.
        Then its ClusterIPs, before the answer too, but a failure there does not fail the ADD."""
        policy: asyncio.Task[None] | None = None
        if self.enforcer is not None:
            # Beside the delegates (the table needs only the interfaces' names and networks).
            local = planned_local(record, [(p.name, p.ifname) for p in planned if not p.default])
            policy = asyncio.create_task(self.enforcer.added(record, pod, local=local),
                                         name=f"policy table of {record.container_id[:12]}")
        try:
            try:
                await self.attach(record, planned, request.args, request.phases.timed)
                try:
                    with request.phases.timed("routes"):
                        await self._apply_default_routes(record, planned)
                except CNIError as exc:
                    exc.msg = f"moving the default route failed: {exc.msg}"
                    raise
            except BaseException:
                if policy is not None:
                    # Written or not before the rollback, which removes what was written.
                    await asyncio.wait([policy])
                    if not policy.cancelled():
                        policy.exception()  # the attachment's failure is the one reported
                raise
            if self.enforcer is not None and policy is not None:
                with request.phases.timed("policy"):
                    await policy
                await self.enforcer.attached(record)
            if self.services is not None:
                # After the policy (which fails closed): the ClusterIPs fail open (servicer).
                with request.phases.timed("services"):
                    await self.services.added(record)
        except BaseException as exc:
            problems = await self.teardown(record, request.args.netns, raise_errors=False)
            if isinstance(exc, CNIError) and problems:
                exc.details = f"{exc.details}; rollback also failed: {'; '.join(problems)}".lstrip("; ")
            raise

    def _complete(self, record: Record, request: Request) -> dict[str, Any] | None:
        """Saves the record complete, queues its network-status and watches its addresses."""
        record.complete = True
        record.result = record.attachments[0].result
        record.status_published = not self.config.patch_status
        with request.phases.timed("cache"):
            self.records.save(record)
        self.reports.attached(record)
        if self.config.patch_status:
            with request.phases.timed("status"):
                entries = self.reports.publish(record)
            self.reports.watch(record, entries)
        return record.result

    async def _apply_default_routes(self, record: Record, planned: list[plan.Planned]) -> None:
        for attachment, p in zip(record.attachments, planned, strict=True):
            if attachment.default_route is None:
                continue
            try:
                gateways = plan.route_gateways(
                    attachment.default_route, p.default_route_families, attachment.result
                )
            except CNIError as exc:
                exc.msg = f"{attachment.name} should carry the default route: {exc.msg}"
                raise
            # Only the families that move: the status then reports what was applied (5.3.6.4).
            attachment.default_route = list(gateways)
            await routes.apply(
                record.netns, plan.default_route_ops(attachment.ifname, gateways), self.config.plugin_timeout
            )

    # --- DEL and CHECK ---

    async def delete(self, request: Request) -> None:
        """CNI DEL: tears down what the container's record holds; an unknown container succeeds."""
        container_id = request.args.container_id
        try:
            invoke.check_container_id(container_id)
        except CNIError as exc:
            log.info(
                "DEL of container %r: %s (%s); ADD refuses such an ID, so it never had a record: "
                "nothing to tear down",
                container_id[:64],
                exc.msg,
                exc.details[:120],
            )
            return
        record = await self._record_to_delete(container_id, request.args.netns)
        if record is None:
            return  # CRI: tear-down of a torn-down pod succeeds
        concerns = self.node_access is not None and self.node_access.concerns(record)
        try:
            await self.teardown(record, request.args.netns)  # empties the record's attachments
        finally:
            if concerns and self.node_access is not None:
                await self.node_access.settle(f"DEL of container {container_id}")

    async def _record_to_delete(self, container_id: str, netns: str) -> Record | None:
        """The container's record; an unreadable one is moved aside, with CNI error 5."""
        try:
            return self.records.cache.load(container_id)
        except cache.CacheError as exc:
            error = exc
        await self.reports.unwatch(container_id)
        await self.runner.stop_orphans(container_id)
        # The record names no attachment to DEL; refusing every DEL would keep the pod
        # forever (CRI: tear-down must eventually succeed). Keep the file for a human,
        # report it to this DEL, and let the runtime's retry succeed.
        aside = self.records.move_aside(container_id)
        log.error(
            "container %s: its cache record is unreadable (%s); moved it to %s. Inspect that file for "
            "the attachments it held (interfaces in netns %s, IPAM reservations such as host-local's "
            "files under /var/lib/cni/networks) and remove them by hand",
            container_id,
            error,
            aside,
            netns or "unknown",
        )
        raise CNIError(
            ErrorCode.IO_FAILURE,
            f"the agent's record of container {container_id} is unreadable; "
            "its attachments may be left behind",
            f"moved to {aside} for inspection (see the agent's log); the next DEL succeeds",
        )

    async def check(self, request: Request) -> None:
        """CNI CHECK: each recorded attachment's delegates, with its cached result."""
        if invoke.version_tuple(request.cni_version) < (0, 4, 0):
            raise CNIError(ErrorCode.INCOMPATIBLE_VERSION, f"cniVersion {request.cni_version} has no CHECK")
        record = self.records.load(request.args.container_id)
        if record is None:
            raise CNIError(
                ErrorCode.UNKNOWN_CONTAINER,
                f"container {request.args.container_id} is not attached",
                "no ADD is recorded for it",
            )
        if not record.complete or unfinished(record):
            # Not code 3: that tells the runtime no DEL is needed, and these attachments need one.
            raise CNIError(
                ErrorCode.ATTACHMENT_INCOMPLETE,
                f"container {request.args.container_id} is only partly attached",
                "its ADD (or a network added to the running pod) was cut short, or a DEL failed for some "
                "attachment; DEL it, then ADD again",
            )
        for attachment in record.attachments:
            await self.runner.check(attachment, request.args)
        self._adopt_uid(record, request.args)
        self.reports.publish_unless_published(record)  # its status was never written: repaired

    def _adopt_uid(self, record: Record, args: RuntimeArgs) -> None:
        """A record without the pod's UID (an earlier agent's, whose ADD had no K8S_POD_UID) takes
        the one the runtime passes now: the sandbox is that pod's, and its status can then be
        bound to it (`reports.Reports.unbound`)."""
        uid = args.arg("K8S_POD_UID")
        if uid and not record.pod_uid:
            record.pod_uid = uid
            self.records.save(record)


__all__ = ["Attachments"]
