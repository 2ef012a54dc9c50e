"""The PodNetwork controller (KEP-3698 "PodNetwork Controller"): its memory, and the applier of its plans.

Every decision is a planner of `podnetwork.kep.plans`, over the rules of `conditions`
(Ready, InUse), `inuse` (who references what, the finalizer) and `defaultnet` (the
`default` PodNetwork, node readiness). `Controller` keeps what the watches told it,
asks the planners what to do, sends their actions through `podnetwork.kube.writes`
and reports each applied one (`report`). Its entry points (`watches`) are what kopf's
handlers call (`register`, which only wires) and what the demo calls from its store's
watches: one orchestration for both.

How it stays cheap and quiet on a large cluster:

- Pods, PodNetworks and attachments are seen through `@kopf.index` handlers
  and `@kopf.on.event` handlers only. kopf's change-detecting handlers
  (on.create/on.update/on.resume) persist progress and a diff-base in
  annotations of each handled object, which for pods would mean a write to
  every pod of the cluster; index and event handlers store nothing on the
  object and need no kopf finalizer.
- kopf calls no event handler before every index has seen its initial listing,
  so the in-use index is complete before the first finalizer decision: a
  restart never releases a finalizer a pod still needs.
- One pod event updates `inuse.Index` in O(networks of that pod), then
  re-evaluates only the objects whose consumers changed. When only the InUse
  message would change (one more pod on a busy network), the write is
  coalesced and flushed every `inuse_message_interval` seconds (`tick`); finalizer
  changes and InUse status flips are written at once.
- Status is written through the status subresource with merge patches that
  carry `resourceVersion`, so a concurrent ParamsReady update by the provider
  is never lost (409, retried on the next event).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from podnetwork.cli import handlers
from podnetwork.cli.handlers import Watch
from podnetwork.ground import constants
from podnetwork.ground.actions import Patch
from podnetwork.ground.core import Node, Pod
from podnetwork.kep import admissionreads, defaultnet, inuse, missed, plans, reading
from podnetwork.kep import api as models
from podnetwork.kep.admissionreads import UseCache, namespace_entry
from podnetwork.kep.api import KepObject
from podnetwork.kep.conditions import now as clock_now
from podnetwork.kep.inuse import Ref
from podnetwork.kube import client as kube
from podnetwork.kube import writes

logger = logging.getLogger(__name__)

NODE = plans.NODE_KIND

#: What the controller reports when it applied an action (`Controller.report`).
Applied = (plans.SetFinalizer | plans.WriteConditions | plans.WriteNodeCondition | plans.Nudge
           | plans.CreateDefault)


@dataclass
class ControllerSettings:
    """What `podnetwork controller` was asked to do."""

    create_default: bool = True
    """Create (and re-create) the `default` PodNetwork. KEP "Automatic creation"; off with
    `--disable-default-podnetwork-creation` ("Manual creation")."""
    default_provider: str | None = None
    """`spec.provider` of the `default` PodNetwork the controller creates (a URL); none by default."""
    enabled: bool = True
    """The MultiNetwork feature gate. False makes the controller and admission a no-op
    (KEP Phase I requirement 1)."""
    namespace_profiles: bool = True
    """Watch namespaces for the networks profile annotation (KEP Story #6), used by admission
    and for pods admitted without auto-population. Off only where namespaces cannot be
    listed (kmock 0.8 cannot parse the cluster-wide `/api/v1/namespaces` path)."""
    resync_interval: float = 300.0
    """Seconds between re-listings of PodNetworks and attachments that drop from memory what
    the API no longer has (kopf's re-list after 410 Gone sends no DELETED for objects removed
    in the gap); 0 disables. Pods are never listed: see `sweep_ghosts`."""
    inuse_message_interval: float = 10.0
    """Seconds between flushes of InUse messages whose only change is the consumer count
    or names (`Controller.tick`). Status flips and finalizers are never delayed. Default 10 s:
    a busy network gains pods at pod-creation rate and needs no status write per pod."""


@dataclass
class Controller(admissionreads.AdmissionReads):
    """The controller's memory (caches of watched objects, the in-use index) and its applier."""

    config: ControllerSettings = field(default_factory=ControllerSettings)
    index: inuse.Index = field(default_factory=inuse.Index)
    objects: dict[Ref, KepObject] = field(default_factory=dict)
    """Latest PodNetwork and attachment bodies, from watch events and patch responses."""
    nodes: dict[str, Node] = field(default_factory=dict)
    namespaces: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Every namespace seen (watch, mirror or admission's GET), by name: its name and, when it
    sets one, its networks profile annotation. Admission tells an unseen namespace (read it
    once) from one without a profile (none to apply)."""
    ready_seen: dict[Ref, bool] = field(default_factory=dict)
    pending: set[Ref] = field(default_factory=set)
    """Refs whose consumers changed since the last pod event handler ran."""
    deferred: set[Ref] = field(default_factory=set)
    """Refs with only an InUse message change waiting for the next flush."""
    locks: dict[Ref, asyncio.Lock] = field(default_factory=dict)
    api: writes.Api | None = None
    """The controller's own API client (`podnetwork.kube`), from the credentials kopf logs in with;
    in the demo, its store (`demo.storeapi`)."""
    setup_pending: bool = True
    """The `default` PodNetwork still needs writing: an API error (after the client's
    retries) is retried at the next flush, not fatal."""
    use_cache: UseCache = field(default_factory=UseCache)
    """SubjectAccessReview answers for `may_use` (`--enforce-use-permission`)."""
    report: Callable[[Applied], None] | None = None
    """Told of every action once it was applied (the demo narrates them); the log says them anyway."""
    _flusher: asyncio.Task[None] | None = None
    _resyncer: asyncio.Task[None] | None = None

    # --- entry points: what kopf's handlers and the demo's store feed call ---------------------

    def watches(self) -> list[Watch]:
        """The kinds the controller watches and its entry points for each (`register` wires them)."""
        found = [Watch("pods", "v1", "Pod", self.index_pod, "pod_refs", self.pod_event, "pod_event")]
        if self.config.namespace_profiles:
            found.append(Watch("namespaces", "v1", "Namespace", self.index_namespace, "namespaces",
                               self.namespace_event, "namespace_event"))
        found += [
            Watch(constants.PODNETWORK_PLURAL, constants.API_VERSION, constants.PODNETWORK_KIND,
                  self.index_podnetwork, "podnetworks", self.podnetwork_event, "podnetwork_event"),
            Watch(constants.ATTACHMENT_PLURAL, constants.API_VERSION, constants.ATTACHMENT_KIND,
                  self.index_attachment, "attachments", self.attachment_event, "attachment_event"),
            Watch("nodes", "v1", "Node", event=self.node_event, event_handler="node_event"),
        ]
        return found

    def index_pod(self, body: Mapping[str, Any]) -> None:
        namespace, name = reading.key(body)
        pod = reading.read(Pod.model_validate, body, f"pod {namespace}/{name}")
        if pod is None:  # holds nothing, like a pod whose networks annotation cannot be parsed
            self.pending |= self.index.remove_pod(f"{namespace}/{name}")
            return
        # The profile fills in only pods that name no networks (after admission: none).
        names_them = pod.metadata.annotation(constants.NETWORKS_ANNOTATION) is not None
        profile = None if names_them else self.namespace_profile(namespace)
        self.pending |= self.index.set_pod(pod, profile)

    def index_namespace(self, body: Mapping[str, Any]) -> None:
        self.namespaces[reading.key(body)[1]] = namespace_entry(body)

    async def namespace_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        if type == "DELETED":
            self.namespaces.pop(reading.key(body)[1], None)

    def index_podnetwork(self, body: Mapping[str, Any]) -> None:
        obj = reading.read_kep(body, constants.PODNETWORK_KIND)
        if obj is not None:
            self.remember(inuse.ref_of(obj), obj)

    def index_attachment(self, body: Mapping[str, Any]) -> None:
        obj = reading.read_kep(body, constants.ATTACHMENT_KIND)
        if isinstance(obj, models.PodNetworkAttachment):
            self.remember(inuse.ref_of(obj), obj)
            self.pending |= self.index.set_attachment(obj)

    async def pod_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        if type == "DELETED":
            self.pending |= self.index.remove_pod("/".join(reading.key(body)))
        await self.flush_pending()

    async def podnetwork_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        ref = inuse.podnetwork_ref(reading.key(body)[1])
        if type == "DELETED":
            await self.forget_podnetwork(ref)
            return
        await self.reconcile(ref)

    async def attachment_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        ref = inuse.attachment_ref(*reading.key(body))
        if type == "DELETED":
            self.forget_attachment(ref)
        else:
            await self.reconcile(ref)
        # Its PodNetwork gained or lost a consumer: that flips InUse, so no deferral.
        refs, self.pending = self.pending, set()
        for changed in sorted(refs):
            await self.reconcile(changed)

    async def node_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        name = reading.key(body)[1]
        if type == "DELETED":
            self.nodes.pop(name, None)
            self.locks.pop(Ref(NODE, "", name), None)
            return
        cached = self.nodes.get(name)
        gained: frozenset[str] = frozenset()
        if cached is None or not reading.older(body, cached):
            node = reading.read(Node.model_validate, body, f"node {name}")
            if node is not None:
                self.nodes[name] = node
                known = (ref.name for ref in self.objects if ref.kind == constants.PODNETWORK_KIND)
                gained = plans.newly_offered(cached, node, known)
        await self.reconcile_node(name)
        if gained:
            await self.nudge_offered(name, gained)

    async def nudge_offered(self, node: str, networks: frozenset[str]) -> None:
        """Requeue nudge (`plans.offer_nudges`): touch unscheduled pods of networks `node` offers now."""
        for action in plans.offer_nudges(networks, self.index, now=clock_now()):
            if await self.apply(action.patch, retry=None) is not None:
                logger.info("requeued pod %s: node %s offers %s now", action.pod, node, action.ref.name)
                self._report(action)

    async def tick(self) -> None:
        """What runs every `inuse_message_interval`: the deferred writes, then the ghost sweep."""
        await self.flush_deferred()
        await self.sweep_ghosts()

    # --- the applier: the Kubernetes API through podnetwork.kube.writes ------------------------

    def checked_api(self) -> writes.Api:
        assert self.api is not None, "Controller.api is not set: give it a podnetwork.kube.writes.Api"
        return self.api

    async def apply(self, patch: Patch, *, retry: Ref | None) -> dict[str, Any] | None:
        """One planned patch (the operators' shared policy); None when it did not apply.

        kopf does not retry event handlers, so a write that failed or conflicted is
        queued (`retry`) for the next flush instead of waiting for an event that may
        never come. A 404 needs no retry: the object is gone.
        """
        then = f"retrying in {self.config.inuse_message_interval}s" if retry is not None else ""
        written = await writes.apply(self.checked_api(), patch, then=then)
        if written.retry and retry is not None:
            self.deferred.add(retry)
        return written.body

    def _report(self, action: Applied) -> None:
        if self.report is not None:
            self.report(action)

    # --- reconciliation ---------------------------------------------------------------------

    def lock(self, ref: Ref) -> asyncio.Lock:
        lock = self.locks.get(ref)
        if lock is None:
            lock = self.locks[ref] = asyncio.Lock()
        return lock

    def podnetwork(self, name: str) -> models.PodNetwork | None:
        network = self.objects.get(inuse.podnetwork_ref(name))
        return network if isinstance(network, models.PodNetwork) else None

    def network_of(self, obj: KepObject) -> models.PodNetwork | None:
        """An attachment's PodNetwork as cached (None for a PodNetwork, or when missing)."""
        if isinstance(obj, models.PodNetworkAttachment):
            return self.podnetwork(obj.spec.pod_network_name)
        return None

    async def reconcile(self, ref: Ref, *, urgent: bool = True) -> None:
        """Bring one PodNetwork or attachment's finalizer and conditions in line (`plans.object_action`)."""
        async with self.lock(ref):
            body = self.objects.get(ref)
            if body is None:
                return
            action = plans.object_action(ref, body, self.index, self.network_of(body), urgent=urgent,
                                         now=clock_now())
            if isinstance(action, plans.SetFinalizer):
                fresh = await self.apply(action.patch, retry=ref)
                if fresh is None:
                    return
                logger.info("%s: %s finalizer %s", ref, "added" if action.adding else "removed",
                            constants.IN_USE_FINALIZER)
                self._report(action)
                body = self.remember(ref, fresh)
                if body is None:
                    return  # deleted by this write; its DELETED event does the follow-ups
                action = plans.object_action(ref, body, self.index, self.network_of(body), urgent=urgent,
                                             now=clock_now())
            if isinstance(action, plans.Defer):
                self.deferred.add(ref)
                return
            self.deferred.discard(ref)
            if not isinstance(action, plans.WriteConditions):
                return
            ready_before = plans.ready_of(body)
            fresh = await self.apply(action.patch, retry=ref)
            if fresh is not None:
                logger.info("%s: wrote conditions %s", ref, plans.conditions_line(action.conditions))
                self._report(action)
                self.remember(ref, fresh)
        if plans.moves_dependents(ref, ref in self.ready_seen, ready_before, self.objects.get(ref)):
            await self.after_change(ref)

    def remember(self, ref: Ref, body: Mapping[str, Any] | KepObject) -> KepObject | None:
        """Cache a body unless the cache already holds a newer one; returns the cached body.

        Watch events can arrive after the response to our own patch (the event
        of an earlier write is still queued); acting on them would undo our
        write. resourceVersion is opaque by API convention, but it is etcd's
        revision, a counter, wherever Kubernetes runs on etcd; when either side
        is not a number the later arrival wins. A body as the API served it is
        read into its model first; one that does not fit is ignored (logged).
        """
        obj = body if isinstance(body, KepObject) else reading.read_kep(body, ref.kind)
        if obj is None:
            return self.objects.get(ref)
        meta = obj.metadata
        if meta.deletion_timestamp and not meta.finalizers:
            # The API server's answer to the write that dropped the last finalizer: the
            # object is gone. Its DELETED event may already have been handled; do not
            # bring it back (attachments would go on reading it as a Ready PodNetwork).
            self.objects.pop(ref, None)
            return None
        if meta.name:
            cached = self.objects.get(ref)
            if cached is None or not reading.older(obj, cached):
                self.objects[ref] = obj
        return self.objects.get(ref)

    async def after_change(self, ref: Ref) -> None:
        """Follow-ups of a PodNetwork or attachment change (`plans.follow_ups`)."""
        follow = plans.follow_ups(ref, self.objects.get(ref), self.ready_seen.get(ref), self.index)
        self.ready_seen[ref] = follow.ready
        for attachment in follow.attachments:
            await self.reconcile(attachment)
        if follow.nodes_of is not None:
            await self.reconcile_nodes(follow.nodes_of)
        if follow.nudge:
            await self.nudge(ref)

    async def nudge(self, ref: Ref) -> None:
        """Requeue nudge (`plans.nudge`): touch unscheduled pods waiting for `ref`."""
        for action in plans.nudge(ref, self.index, now=clock_now()):
            if await self.apply(action.patch, retry=None) is not None:
                logger.info("requeued pod %s: %s turned Ready", action.pod, ref)
                self._report(action)

    async def reconcile_node(self, name: str) -> None:
        async with self.lock(Ref(NODE, "", name)):
            node = self.nodes.get(name)
            if node is None:
                return
            action = plans.node_action(name, node, self.podnetwork(defaultnet.node_default_name(node)),
                                       now=clock_now())
            if action is None:
                return
            fresh = await self.apply(action.patch, retry=Ref(NODE, "", name))
            if fresh is not None:
                logger.info("node %s: wrote condition %s", name, plans.conditions_line(action.conditions))
                self._report(action)
            fresh_node = None if fresh is None else reading.read(Node.model_validate, fresh, f"node {name}")
            cached = self.nodes.get(name)
            if fresh_node is not None and cached is not None and not reading.older(fresh_node, cached):
                self.nodes[name] = fresh_node

    async def reconcile_nodes(self, podnetwork_name: str) -> None:
        for name in plans.nodes_of(dict(self.nodes), podnetwork_name):
            await self.reconcile_node(name)

    async def flush_pending(self) -> None:
        refs, self.pending = self.pending, set()
        for ref in sorted(refs):
            await self.reconcile(ref, urgent=False)

    async def flush_deferred(self) -> None:
        if self.setup_pending:
            await self.setup()
        refs, self.deferred = self.deferred, set()
        for ref in sorted(refs):
            if ref.kind == NODE:
                await self.reconcile_node(ref.name)
            else:
                await self.reconcile(ref, urgent=True)

    async def sweep_ghosts(self) -> None:
        """Forget consumers the API no longer has, where a deletion waits on them (`missed`)."""
        await missed.sweep_ghosts(self)

    async def forget_podnetwork(self, ref: Ref) -> None:
        """A PodNetwork is gone: its attachments and nodes re-evaluate; `default` comes back."""
        self.objects.pop(ref, None)
        self.locks.pop(ref, None)
        if ref.name == constants.DEFAULT_PODNETWORK:
            await self.setup(again=True)
        await self.after_change(ref)

    def forget_attachment(self, ref: Ref) -> None:
        """An attachment is gone: its PodNetwork loses a consumer (queued in `pending`)."""
        self.objects.pop(ref, None)
        self.locks.pop(ref, None)
        self.ready_seen.pop(ref, None)
        self.pending |= self.index.remove_attachment(f"{ref.namespace}/{ref.name}")

    async def resync(self) -> None:
        """Drop PodNetworks and attachments the API no longer has (`missed`, `--resync-interval`)."""
        await missed.resync(self)

    async def setup(self, *, again: bool = False) -> None:
        """The `default` PodNetwork (`plans.default_podnetwork`); on an API error, again next flush.

        Called from the flusher task and on the deletion of `default`: an exception
        there would end the flusher (and with it every retry) or lose the re-creation.
        """
        self.setup_pending = True
        config = self.config
        action = plans.default_podnetwork(config.create_default, config.default_provider, again=again)
        try:
            if action is not None:
                await self.checked_api().create(kube.PodNetwork, action.create.body)
                logger.info("created the default PodNetwork")
                self._report(action)
        except kube.Conflict:
            logger.debug("the default PodNetwork exists")
        except kube.ApiError as exc:
            logger.warning("set-up failed (%s); retrying in %ss", exc, self.config.inuse_message_interval)
            return
        self.setup_pending = False

    # --- kopf's start and stop ----------------------------------------------------------------

    async def start_tasks(self) -> None:
        """The flusher (`setup`, then `tick` every `inuse_message_interval`) and the resyncer."""
        async def flusher() -> None:
            await self.setup()
            while True:
                await asyncio.sleep(self.config.inuse_message_interval)
                await self.tick()

        async def resyncer() -> None:
            while True:
                await asyncio.sleep(self.config.resync_interval)
                try:
                    await self.resync()
                except Exception:  # logged; the next interval tries again, the operator goes on
                    logger.exception("resync failed; next one in %ss", self.config.resync_interval)

        self._flusher = asyncio.create_task(flusher())
        if self.config.resync_interval > 0:
            self._resyncer = asyncio.create_task(resyncer())

    async def stop_tasks(self) -> None:
        for task in (self._flusher, self._resyncer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.api is not None:
            await self.api.close()


def object_url(ref: Ref) -> str:
    if ref.kind == constants.ATTACHMENT_KIND:
        return kube.path_of(kube.PodNetworkAttachment, ref.namespace, ref.name)
    return kube.path_of(kube.PodNetwork, None, ref.name)


def register(registry: kopf.OperatorRegistry, ctl: Controller, meter: handlers.Meter | None = None) -> None:
    """Wire the controller's entry points (`Controller.watches`) to kopf's handlers in `registry`;
    `meter` counts the watching handlers' runs and failures (`podnetwork controller --metrics-port`)."""
    on = handlers.Handlers(meter)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Event handlers post no Kubernetes Events of their own; keep it so.
        settings.posting.enabled = False
        # Only index and event handlers: kopf's per-event diff is never read (handlers.NoEssence).
        settings.persistence.diffbase_storage = handlers.NoEssence()
        await ctl.start_tasks()

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        await ctl.stop_tasks()

    # Indexes: fed before any event handler runs (kopf waits for every initial listing).
    @on.index("pods", registry=registry)
    def pod_refs(body: kopf.Body, **_: Any) -> None:
        ctl.index_pod(body)

    if ctl.config.namespace_profiles:
        @on.index("namespaces", registry=registry)
        def namespaces(body: kopf.Body, **_: Any) -> None:
            ctl.index_namespace(body)

        @on.event("namespaces", registry=registry)
        async def namespace_event(type: str | None, body: kopf.Body, **_: Any) -> None:
            await ctl.namespace_event(type, body)

    @on.index(constants.GROUP, constants.VERSION, constants.PODNETWORK_PLURAL, registry=registry)
    def podnetworks(body: kopf.Body, **_: Any) -> None:
        ctl.index_podnetwork(body)

    @on.index(constants.GROUP, constants.VERSION, constants.ATTACHMENT_PLURAL, registry=registry)
    def attachments(body: kopf.Body, **_: Any) -> None:
        ctl.index_attachment(body)

    @on.event("pods", registry=registry)
    async def pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await ctl.pod_event(type, body)

    @on.event(constants.GROUP, constants.VERSION, constants.PODNETWORK_PLURAL, registry=registry)
    async def podnetwork_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await ctl.podnetwork_event(type, body)

    @on.event(constants.GROUP, constants.VERSION, constants.ATTACHMENT_PLURAL, registry=registry)
    async def attachment_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await ctl.attachment_event(type, body)

    @on.event("nodes", registry=registry)
    async def node_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await ctl.node_event(type, body)


__all__ = ["Applied", "Controller", "ControllerSettings", "object_url", "register"]
