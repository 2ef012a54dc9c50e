"""The PodNetwork controller (KEP-3698 "PodNetwork Controller") as thin kopf handlers.

Every decision is a pure function elsewhere: `conditions` (Ready, InUse),
`inuse` (who references what, the finalizer), `defaultnet` (the `default`
PodNetwork, node readiness). This module only feeds them watch events and
sends the patches they return.

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
  coalesced and flushed every `inuse_message_interval` seconds; finalizer
  changes and InUse status flips are written at once.
- Status is written through the status subresource with merge patches that
  carry `resourceVersion`, so a concurrent ParamsReady update by the provider
  is never lost (409, retried on the next event).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kopf

from podnetwork.cli import handlers
from podnetwork.ground import constants
from podnetwork.ground.core import HasMetadata, Node, PartialObjectMetadata, Pod
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import admission, conditions, defaultnet, inuse
from podnetwork.kep import api as models
from podnetwork.kep.api import KepObject, Network
from podnetwork.kep.inuse import Ref
from podnetwork.kube import client as kube

logger = logging.getLogger(__name__)

NODE = "Node"
#: GETs per flush spent checking that the consumers keeping a deletion waiting still exist.
GHOST_CHECKS = 20
#: Seconds admission waits for its GET of an unseen namespace (the webhook times out at 5).
NAMESPACE_GET_TIMEOUT = 3.0
#: SubjectAccessReview answers kept for `--enforce-use-permission` (docs/controller.md
#: "Permission to use a PodNetwork"): at most this many, an allowance for 60 s, a denial for
#: 5 s (a permission just granted works within seconds; one revoked, within a minute).
USE_CACHE_SIZE = 4096
USE_CACHE_ALLOWED_SECONDS = 60.0
USE_CACHE_DENIED_SECONDS = 5.0


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
    or names. Status flips and finalizers are never delayed. Default 10 s: a busy network
    gains pods at pod-creation rate and needs no status write per pod."""


@dataclass
class UseCache:
    """Answers of SubjectAccessReviews, bounded in size (least recently used out first) and in age."""

    size: int = USE_CACHE_SIZE
    allowed_seconds: float = USE_CACHE_ALLOWED_SECONDS
    denied_seconds: float = USE_CACHE_DENIED_SECONDS
    clock: Callable[[], float] = time.monotonic
    entries: OrderedDict[Hashable, tuple[bool, float]] = field(default_factory=OrderedDict)
    """Key -> (allowed, expiry on `clock`)."""

    def get(self, key: Hashable) -> bool | None:
        """The answer cached for `key`, or None when there is none that is fresh."""
        found = self.entries.get(key)
        if found is None:
            return None
        allowed, expiry = found
        if self.clock() >= expiry:
            del self.entries[key]
            return None
        self.entries.move_to_end(key)
        return allowed

    def put(self, key: Hashable, allowed: bool) -> None:
        ttl = self.allowed_seconds if allowed else self.denied_seconds
        self.entries[key] = (allowed, self.clock() + ttl)
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)


@dataclass
class Controller:
    """The controller's memory: caches of watched objects and the in-use index."""

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
    api: kube.AsyncApi | None = None
    """The controller's own API client (`podnetwork.kube`), from the credentials kopf logs in with."""
    setup_pending: bool = True
    """The `default` PodNetwork still needs writing: an API error (after the client's
    retries) is retried at the next flush, not fatal."""
    use_cache: UseCache = field(default_factory=UseCache)
    """SubjectAccessReview answers for `may_use` (`--enforce-use-permission`)."""
    _flusher: asyncio.Task[None] | None = None
    _resyncer: asyncio.Task[None] | None = None

    # --- I/O edge: the Kubernetes API through podnetwork.kube ------------------------------

    def _api(self) -> kube.AsyncApi:
        assert self.api is not None, "Controller.api is not set: give it a podnetwork.kube.AsyncApi"
        return self.api

    async def _write(self, what: str, request: Callable[[], Awaitable[dict[str, Any]]],
                     retry: Ref | None) -> dict[str, Any] | None:
        """One write (the operators' shared policy, `AsyncApi.write`); None when it did not apply.

        kopf does not retry event handlers, so a write that failed or conflicted is
        queued (`retry`) for the next flush instead of waiting for an event that may
        never come. A 404 needs no retry: the object is gone.
        """
        then = f"retrying in {self.config.inuse_message_interval}s" if retry is not None else ""
        written = await self._api().write(what, request, then=then)
        if written.retry and retry is not None:
            self.deferred.add(retry)
        return written.body

    async def patch(self, resource: kube.Resource, name: str, payload: Mapping[str, Any], *,
                    namespace: str | None = None, status: bool = False, retry: Ref | None,
                    patch_type: str = "merge") -> dict[str, Any] | None:
        api = self._api()
        what = f"patch {kube.path_of(resource, namespace, name)}{'/status' if status else ''}"
        return await self._write(what, lambda: api.patch(resource, name, payload, namespace=namespace,
                                                         status=status, patch_type=patch_type), retry)

    async def patch_object(self, ref: Ref, payload: Mapping[str, Any], *, status: bool = False,
                           retry: Ref | None) -> dict[str, Any] | None:
        """Patch a PodNetwork or an attachment (or its status)."""
        resource = kube.PodNetworkAttachment if ref.kind == constants.ATTACHMENT_KIND else kube.PodNetwork
        return await self.patch(resource, ref.name, payload, namespace=ref.namespace or None, status=status,
                                retry=retry)

    # --- reconciliation ---------------------------------------------------------------------

    def lock(self, ref: Ref) -> asyncio.Lock:
        lock = self.locks.get(ref)
        if lock is None:
            lock = self.locks[ref] = asyncio.Lock()
        return lock

    def podnetwork(self, name: str) -> models.PodNetwork | None:
        network = self.objects.get(inuse.podnetwork_ref(name))
        return network if isinstance(network, models.PodNetwork) else None

    def desired_conditions(self, ref: Ref, body: KepObject) -> list[dict[str, Any]] | None:
        usage = self.index.usage(ref)
        now = conditions.now()
        if isinstance(body, models.PodNetworkAttachment):
            network = self.podnetwork(body.spec.pod_network_name)
            if network is not None and _unevaluated(network):
                return None  # its first status write is coming, and re-evaluates its attachments
            return conditions.attachment_conditions(body, network, usage, now=now)
        return conditions.podnetwork_conditions(body, usage, now=now)

    def _only_inuse_message_may_change(self, ref: Ref, body: KepObject) -> bool:
        """Whether Ready and InUse's status are right, in O(1): only InUse's message may be stale."""
        want = "True" if self.index.in_use(ref) else "False"
        inuse_cond = conditions.find(body, constants.ConditionType.IN_USE)
        if inuse_cond is None or inuse_cond.status != want:
            return False
        if isinstance(body, models.PodNetworkAttachment):
            ready = conditions.attachment_ready(body, self.podnetwork(body.spec.pod_network_name))
        else:
            ready = conditions.podnetwork_ready(body)
        existing = conditions.find(body, constants.ConditionType.READY)
        return conditions.holds(existing, ready, generation=body.metadata.generation)

    async def reconcile(self, ref: Ref, *, urgent: bool = True) -> None:
        """Bring one PodNetwork or attachment's finalizer and conditions in line."""
        async with self.lock(ref):
            body = self.objects.get(ref)
            if body is None:
                return
            fin = inuse.finalizer_patch(body, in_use=self.index.in_use(ref))
            if fin is not None:
                fresh = await self.patch_object(ref, fin, retry=ref)
                if fresh is None:
                    return
                logger.info("%s: %s finalizer %s", ref, "added" if self.index.in_use(ref)
                            else "removed", constants.IN_USE_FINALIZER)
                body = self.remember(ref, fresh)
                if body is None:
                    return  # deleted by this write; its DELETED event does the follow-ups
            if not urgent and self._only_inuse_message_may_change(ref, body):
                # A pod event changes consumers only. Their names for the message cost
                # O(consumers) (every pod, for `default`): the next flush writes them.
                self.deferred.add(ref)
                return
            new = self.desired_conditions(ref, body)
            if new is None:
                self.deferred.discard(ref)
                return
            self.deferred.discard(ref)
            ready_before = _ready_of(body)
            fresh = await self.patch_object(ref, conditions.status_patch(body, new), status=True, retry=ref)
            if fresh is not None:
                logger.info("%s: wrote conditions %s", ref, _conditions_line(new))
                self.remember(ref, fresh)
        # Attachments, nodes and the nudge read only Ready: an InUse-only write (a busy
        # network's consumer count, every flush) must not walk every node and attachment.
        if ref not in self.ready_seen or _ready_of(self.objects.get(ref)) != ready_before:
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
        obj = body if isinstance(body, KepObject) else _read_kep(body, ref.kind)
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
            if cached is None or not _older(obj, cached):
                self.objects[ref] = obj
        return self.objects.get(ref)

    async def after_change(self, ref: Ref) -> None:
        """Follow-ups of a PodNetwork or attachment change: dependents and the requeue nudge."""
        body = self.objects.get(ref)
        ready = conditions.is_ready(body)
        was_ready = self.ready_seen.get(ref)
        self.ready_seen[ref] = ready
        if ref.kind == constants.PODNETWORK_KIND:
            for key in sorted(self.index.attachments_of(ref)):
                namespace, _, name = key.partition("/")
                await self.reconcile(inuse.attachment_ref(namespace, name))
            await self.reconcile_nodes(ref.name)
        if ready and not was_ready:
            await self.nudge(ref)

    async def nudge(self, ref: Ref) -> None:
        """Requeue nudge (issue #3 item 5): touch unscheduled pods waiting for `ref`.

        kube-scheduler does not retry a pod its extender rejected when only a
        PodNetwork changed; an annotation change is a pod update, which moves
        the pod back to the active queue at once.
        """
        stamp = conditions.now()
        for key in sorted(self.index.unscheduled_pods(ref)):
            namespace, _, name = key.partition("/")
            patch = {"metadata": {"annotations": {constants.REQUEUED_AT_ANNOTATION: stamp}}}
            if await self.patch(kube.Pod, name, patch, namespace=namespace, retry=None) is not None:
                logger.info("requeued pod %s: %s turned Ready", key, ref)

    async def reconcile_node(self, name: str) -> None:
        async with self.lock(Ref(NODE, "", name)):
            node = self.nodes.get(name)
            if node is None:
                return
            network = self.podnetwork(defaultnet.node_default_name(node))
            if network is not None and _unevaluated(network):
                return  # its first status write is coming, and re-evaluates the nodes
            patch = defaultnet.node_condition_patch(node, network, now=conditions.now())
            if patch is None:
                return
            fresh = await self.patch(kube.Node, name, patch, status=True, retry=Ref(NODE, "", name),
                                     patch_type="strategic")
            if fresh is not None:
                logger.info("node %s: wrote condition %s", name,
                            _conditions_line(patch.get("status", {}).get("conditions", [])))
            fresh_node = None if fresh is None else _read(Node.model_validate, fresh, f"node {name}")
            if fresh_node is not None and name in self.nodes and not _older(fresh_node, self.nodes[name]):
                self.nodes[name] = fresh_node

    async def reconcile_nodes(self, podnetwork_name: str) -> None:
        for name, node in list(self.nodes.items()):
            if defaultnet.node_default_name(node) == podnetwork_name:
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
        """Forget consumers the API no longer has, where a deletion waits on them.

        After a watch expires (410 Gone) kopf relists and reports what it lists,
        never DELETED for what vanished in the gap (kopf's `continuous_watch`), so
        the index can keep a deleted pod and its finalizer forever. Only objects
        being deleted are checked, with at most `GHOST_CHECKS` GETs per flush.
        """
        api = self._api()
        budget = GHOST_CHECKS
        for ref, body in list(self.objects.items()):
            if budget <= 0:
                break
            if not body.metadata.deletion_timestamp or not self.index.in_use(ref):
                continue
            attachments, pods = self.index.some_consumers(ref, budget)
            for kind, keys in ((constants.ATTACHMENT_KIND, attachments), ("Pod", pods)):
                for key in keys:
                    budget -= 1
                    namespace, _, name = key.partition("/")
                    resource = kube.Pod if kind == "Pod" else kube.PodNetworkAttachment
                    obj: dict[str, Any] | None
                    try:
                        obj = await api.get(resource, name, namespace)
                    except kube.NotFound:
                        obj = None
                    except kube.ApiError as exc:
                        logger.warning("cannot check %s %s (%s); next flush", kind, key, exc)
                        return
                    if kind == "Pod":
                        pod = None if obj is None else _read(Pod.model_validate, obj, f"pod {key}")
                        self.pending |= (self.index.remove_pod(key) if pod is None
                                         else self.index.set_pod(pod, self.namespace_profile(namespace)))
                    else:
                        pna = None if obj is None else _read_kep(obj, kind)
                        self.pending |= (self.index.remove_attachment(key) if obj is None
                                         else self.index.set_attachment(pna)
                                         if isinstance(pna, models.PodNetworkAttachment) else set())
                    if obj is None:
                        logger.info("forgot %s %s: gone from the API without a DELETED event", kind, key)
        refs, self.pending = self.pending, set()
        for changed in sorted(refs):
            await self.reconcile(changed)

    async def forget_podnetwork(self, ref: Ref) -> None:
        """A PodNetwork is gone: its attachments and nodes re-evaluate; `default` comes back."""
        self.objects.pop(ref, None)
        self.locks.pop(ref, None)
        if ref.name == constants.DEFAULT_PODNETWORK:
            await self.setup()
        await self.after_change(ref)

    def forget_attachment(self, ref: Ref) -> None:
        """An attachment is gone: its PodNetwork loses a consumer (queued in `pending`)."""
        self.objects.pop(ref, None)
        self.locks.pop(ref, None)
        self.ready_seen.pop(ref, None)
        self.pending |= self.index.remove_attachment(f"{ref.namespace}/{ref.name}")

    async def resync(self) -> None:
        """Drop PodNetworks and attachments the API no longer has (`--resync-interval`).

        kopf re-lists after a watch expires (410 Gone) and reports what it lists,
        never DELETED for what vanished in the gap, so a deleted PodNetwork could
        stay in memory (its attachments Ready) and a deleted attachment stay a
        consumer. Both kinds are small, so one list each is cheap. Pods are not
        listed (issue #3: no full pod lists); a ghost pod only matters where it
        holds up a deletion, and `sweep_ghosts` checks exactly those.
        """
        api = self._api()
        gone: list[Ref] = []
        for kind, resource in ((constants.PODNETWORK_KIND, kube.PodNetwork),
                               (constants.ATTACHMENT_KIND, kube.PodNetworkAttachment)):
            try:
                listing = await api.list(resource)
            except kube.ApiError as exc:
                logger.warning("cannot list %s for the resync (%s); next resync",
                               kube.plural_of(resource), exc)
                return
            present = {inuse.ref_of(PartialObjectMetadata.model_validate(_as_kind(item, kind)))
                       for item in listing.items}
            version = {"metadata": {"resourceVersion": listing.resource_version}}
            gone += [ref for ref, body in list(self.objects.items())
                     if ref.kind == kind and ref not in present and not _newer_than_list(body, version)]
        for ref in gone:
            logger.info("forgot %s %s: gone from the API without a DELETED event", ref.kind, ref)
            if ref.kind == constants.PODNETWORK_KIND:
                await self.forget_podnetwork(ref)
            else:
                self.forget_attachment(ref)
        refs, self.pending = self.pending, set()
        for changed in sorted(refs):
            await self.reconcile(changed)

    def namespace(self, name: str) -> dict[str, Any] | admission.Unseen | None:
        """Admission's lookup: the namespace as cached, or `admission.UNSEEN` when never seen.

        Without `namespace_profiles` (no watch) a namespace is read once, when first
        needed, and its later changes are not seen.
        """
        return self.namespaces.get(name, admission.UNSEEN)

    async def fetch_namespace(self, name: str) -> dict[str, Any]:
        """Read a namespace admission has not seen yet, once, and cache it.

        A namespace and its pods applied together can reach admission before the
        namespace's watch event. Raises `admission.NamespaceUnavailable` with the reason.
        """
        if self.api is None:
            raise admission.NamespaceUnavailable("the controller has not connected to the API yet")
        try:
            body = await asyncio.wait_for(self.api.get(kube.Namespace, name), NAMESPACE_GET_TIMEOUT)
        except kube.NotFound:
            raise admission.NamespaceUnavailable("it does not exist") from None
        except (TimeoutError, kube.ApiError) as exc:
            raise admission.NamespaceUnavailable(
                f"GET /api/v1/namespaces/{name} failed: {exc or type(exc).__name__}") from None
        slim = namespace_entry(body)
        # A watch event that arrived meanwhile is at least as new: keep it.
        return self.namespaces.setdefault(name, slim)

    async def may_use(self, subject: admission.Subject, podnetwork: str, namespace: str) -> bool:
        """Whether `subject` may `use` the PodNetwork `podnetwork` for a pod in `namespace`, as
        the API server's authorizers answer a SubjectAccessReview (cached: `use_cache`).

        The namespace is the pod's, as PodSecurityPolicy's `use` check did: a RoleBinding
        there to a ClusterRole granting `use` suffices, though PodNetworks are
        cluster-scoped. Raises `admission.UseUnavailable` when the API does not answer.
        """
        key = (subject, podnetwork, namespace)
        cached = self.use_cache.get(key)
        if cached is not None:
            return cached
        if self.api is None:
            raise admission.UseUnavailable("the controller has not connected to the API yet")
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            **subject.spec(),
            "resourceAttributes": {"group": constants.GROUP, "resource": admission.USE_RESOURCE,
                                   "verb": admission.USE_VERB, "name": podnetwork, "namespace": namespace}}}
        try:
            answer = await self.api.create(kube.SubjectAccessReview, review)
        except kube.ApiError as exc:
            raise admission.UseUnavailable(f"POST /apis/authorization.k8s.io/v1/subjectaccessreviews "
                                           f"failed: {exc}") from None
        status = answer.get("status")
        if not isinstance(status, Mapping):
            raise admission.UseUnavailable("the SubjectAccessReview came back without a status")
        allowed = status.get("allowed") is True and status.get("denied") is not True
        self.use_cache.put(key, allowed)
        return allowed

    async def attachment_network(self, namespace: str, name: str) -> str | None:
        """The PodNetwork of a PodNetworkAttachment, or None when it does not exist.

        From the watch-fed cache; an attachment the cache has not seen (created just
        before its pods, or this replica is paused by peering and watches nothing) is
        read from the API. Raises `admission.UseUnavailable` when that read fails.
        """
        cached = self.objects.get(inuse.attachment_ref(namespace, name))
        if isinstance(cached, models.PodNetworkAttachment):
            return cached.spec.pod_network_name
        if self.api is None:
            raise admission.UseUnavailable("the controller has not connected to the API yet")
        try:
            body = await self.api.get(kube.PodNetworkAttachment, name, namespace)
        except kube.NotFound:
            return None
        except kube.ApiError as exc:
            raise admission.UseUnavailable(str(exc)) from None
        network = (body.get("spec") or {}).get("podNetworkName")
        return network if isinstance(network, str) and network else None

    def namespace_profile(self, name: str) -> list[Network] | None:
        try:
            return admission.namespace_default(self.namespaces.get(name))
        except InvalidObject:
            return None  # admission refuses new pods there; existing ones used `default`

    async def ensure_default(self) -> None:
        if not self.config.create_default:
            return
        body = defaultnet.podnetwork(self.config.default_provider)
        try:
            await self._api().create(kube.PodNetwork, body)
            logger.info("created the default PodNetwork")
        except kube.Conflict:
            logger.debug("the default PodNetwork exists")

    async def setup(self) -> None:
        """The `default` PodNetwork; on an API error, again next flush.

        Called from the flusher task and on the deletion of `default`: an exception
        there would end the flusher (and with it every retry) or lose the re-creation.
        """
        self.setup_pending = True
        try:
            await self.ensure_default()
        except kube.ApiError as exc:
            logger.warning("set-up failed (%s); retrying in %ss", exc, self.config.inuse_message_interval)
            return
        self.setup_pending = False


def _conditions_line(conds: Sequence[Mapping[str, Any]]) -> str:
    """`Ready=True (Ready), InUse=False (NotInUse)`: one log line says what a write set."""
    return ", ".join(f"{c.get('type')}={c.get('status')} ({c.get('reason')})" for c in conds)


def namespace_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the namespace cache keeps of a Namespace: its name and its networks profile."""
    meta = body.get("metadata") or {}
    entry: dict[str, Any] = {"metadata": {"name": meta.get("name")}}
    profile = (meta.get("annotations") or {}).get(constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION)
    if profile is not None:
        entry["metadata"]["annotations"] = {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: profile}
    return entry


def _newer_than_list(body: KepObject, listing: Mapping[str, Any]) -> bool:
    """Whether a cached object changed after the list was taken (created since: keep it)."""
    return _older(listing, body)


def _unevaluated(network: KepObject) -> bool:
    """A PodNetwork this controller has not written Ready on yet (just created)."""
    return conditions.find(network, constants.ConditionType.READY) is None


def _resource_version(obj: Mapping[str, Any] | HasMetadata) -> str:
    if isinstance(obj, Mapping):  # a list's metadata
        meta = obj.get("metadata")
        return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
    return obj.metadata.resource_version or ""


def _older(body: Mapping[str, Any] | HasMetadata, than: Mapping[str, Any] | HasMetadata) -> bool:
    a, b = _resource_version(body), _resource_version(than)
    return a.isdigit() and b.isdigit() and int(a) < int(b)


def _ready_of(obj: KepObject | None) -> tuple[Any, ...] | None:
    """What dependents read of an object's Ready condition."""
    ready = conditions.find(obj, constants.ConditionType.READY)
    return None if ready is None else (ready.status, ready.reason, ready.message)


_T = TypeVar("_T")


def _read(model: Callable[[Mapping[str, Any]], _T], body: Mapping[str, Any], what: str) -> _T | None:
    """`body` read into its model or view; None (logged) when it does not fit.

    The API server's schemas are the models', so only a mismatched CRD or a
    foreign emulator can send what does not fit.
    """
    try:
        return model(body)
    except ValueError as exc:  # pydantic.ValidationError, or models.parse's unknown kind
        logger.warning("ignored %s: it does not fit its model: %s", what, exc)
        return None


def _read_kep(body: Mapping[str, Any], kind: str) -> KepObject | None:
    return _read(lambda b: models.parse(b, kind), body, f"{kind} {_key(body)}")


def _key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    return f"{meta.get('namespace') or ''}/{meta.get('name')}" if isinstance(meta, Mapping) else "?"


def object_url(ref: Ref) -> str:
    if ref.kind == constants.ATTACHMENT_KIND:
        return kube.path_of(kube.PodNetworkAttachment, ref.namespace, ref.name)
    return kube.path_of(kube.PodNetwork, None, ref.name)


def register(registry: kopf.OperatorRegistry, ctl: Controller, meter: handlers.Meter | None = None) -> None:
    """Register the controller's handlers in `registry` (kept explicit for tests and embedding);
    `meter` counts the watching handlers' runs and failures (`podnetwork controller --metrics-port`)."""
    on = handlers.Handlers(meter)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Event handlers post no Kubernetes Events of their own; keep it so.
        settings.posting.enabled = False

        async def flusher() -> None:
            await ctl.setup()
            while True:
                await asyncio.sleep(ctl.config.inuse_message_interval)
                await ctl.flush_deferred()
                await ctl.sweep_ghosts()

        ctl._flusher = asyncio.create_task(flusher())
        if ctl.config.resync_interval > 0:
            ctl._resyncer = asyncio.create_task(resyncer())

    async def resyncer() -> None:
        while True:
            await asyncio.sleep(ctl.config.resync_interval)
            try:
                await ctl.resync()
            except Exception:  # logged; the next interval tries again, the operator goes on
                logger.exception("resync failed; next one in %ss", ctl.config.resync_interval)

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        for task in (ctl._flusher, ctl._resyncer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if ctl.api is not None:
            await ctl.api.close()

    # Indexes: fed before any event handler runs (kopf waits for every initial listing).
    @on.index("pods", registry=registry)
    def pod_refs(body: kopf.Body, name: str | None, namespace: str | None, **_: Any) -> None:
        pod = _read(Pod.model_validate, body, f"pod {namespace}/{name}")
        if pod is None:  # holds nothing, like a pod whose networks annotation cannot be parsed
            ctl.pending |= ctl.index.remove_pod(f"{namespace or ''}/{name or ''}")
            return
        # The profile fills in only pods that name no networks (after admission: none).
        names_them = pod.metadata.annotation(constants.NETWORKS_ANNOTATION) is not None
        profile = None if names_them else ctl.namespace_profile(namespace or "")
        ctl.pending |= ctl.index.set_pod(pod, profile)

    if ctl.config.namespace_profiles:
        @on.index("namespaces", registry=registry)
        def namespaces(body: kopf.Body, name: str, **_: Any) -> None:
            ctl.namespaces[name] = namespace_entry(body)

        @on.event("namespaces", registry=registry)
        def namespace_event(type: str, name: str, **_: Any) -> None:
            if type == "DELETED":
                ctl.namespaces.pop(name, None)

    @on.index(constants.GROUP, constants.VERSION, constants.PODNETWORK_PLURAL, registry=registry)
    def podnetworks(body: kopf.Body, **_: Any) -> None:
        obj = _read_kep(body, constants.PODNETWORK_KIND)
        if obj is not None:
            ctl.remember(inuse.ref_of(obj), obj)

    @on.index(constants.GROUP, constants.VERSION, constants.ATTACHMENT_PLURAL, registry=registry)
    def attachments(body: kopf.Body, **_: Any) -> None:
        obj = _read_kep(body, constants.ATTACHMENT_KIND)
        if isinstance(obj, models.PodNetworkAttachment):
            ctl.remember(inuse.ref_of(obj), obj)
            ctl.pending |= ctl.index.set_attachment(obj)

    @on.event("pods", registry=registry)
    async def pod_event(type: str, name: str | None, namespace: str | None, **_: Any) -> None:
        if type == "DELETED":
            ctl.pending |= ctl.index.remove_pod(f"{namespace or ''}/{name or ''}")
        await ctl.flush_pending()

    @on.event(constants.GROUP, constants.VERSION, constants.PODNETWORK_PLURAL, registry=registry)
    async def podnetwork_event(type: str, name: str | None, **_: Any) -> None:
        ref = inuse.podnetwork_ref(name or "")
        if type == "DELETED":
            await ctl.forget_podnetwork(ref)
            return
        await ctl.reconcile(ref)

    @on.event(constants.GROUP, constants.VERSION, constants.ATTACHMENT_PLURAL, registry=registry)
    async def attachment_event(type: str, name: str | None, namespace: str | None, **_: Any) -> None:
        ref = inuse.attachment_ref(namespace or "", name or "")
        if type == "DELETED":
            ctl.forget_attachment(ref)
        else:
            await ctl.reconcile(ref)
        # Its PodNetwork gained or lost a consumer: that flips InUse, so no deferral.
        refs, ctl.pending = ctl.pending, set()
        for changed in sorted(refs):
            await ctl.reconcile(changed)

    @on.event("nodes", registry=registry)
    async def node_event(type: str, body: kopf.Body, name: str | None, **_: Any) -> None:
        name = name or ""
        if type == "DELETED":
            ctl.nodes.pop(name, None)
            ctl.locks.pop(Ref(NODE, "", name), None)
            return
        cached = ctl.nodes.get(name)
        if cached is None or not _older(body, cached):
            node = _read(Node.model_validate, body, f"node {name}")
            if node is not None:
                ctl.nodes[name] = node
        await ctl.reconcile_node(name)


def _as_kind(body: Mapping[str, Any], kind: str) -> dict[str, Any]:
    obj = dict(body)
    obj.setdefault("kind", kind)
    return obj


__all__ = ["Controller", "ControllerSettings", "object_url", "register"]
