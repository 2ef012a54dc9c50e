"""The bridge controller: thin kopf handlers around the bridge's pure decisions.

- ParamsReady (`bridge.translate.params`) on PodNetworks whose provider is the bridge's and
  on their attachments; NetworkAttachmentDefinition and NetworkSelectionOptions
  events re-evaluate exactly the objects that name them (an in-memory index of
  references), so ParamsReady follows NAD changes and deletions.
- The NPWG selection (`bridge.operator.pods.selection`): `k8s.v1.cni.cncf.io/networks` on
  pods carrying `multinetwork.x-k8s.io/networks`, once every object they name is
  Ready. Pods waiting for that are kept in memory and retried when a PodNetwork,
  attachment, NAD or options object changes. A hand-written selection that
  disagrees gets a Warning Event, once.
- The scheduling gate `multinetwork.x-k8s.io/npwg-selection` (added at pod
  creation by the bridge's webhook, `bridge.operator.admission`): removed in the same
  merge patch that writes the selection, or alone when the bridge will write
  none (`bridge.operator.pods.release_patch`), so the pod is scheduled only with it.
- Reverse status (`bridge.operator.pods.reverse_status_patch`): `multinetwork.x-k8s.io/pod-ips`
  and `multinetwork.x-k8s.io/attachments` from `k8s.v1.cni.cncf.io/network-status`, in one write.

Pods are watched with `kopf.on.event` only, filtered on the KEP annotation:
kopf's change-detecting handlers (on.create/on.update) would store their state
in an annotation of every pod. The other kinds are fed through `kopf.index`
handlers first, because kopf runs no event handler before every index has seen
its initial listing: the first pod decision already sees every NAD.

`register(registry, bridge)` adds the handlers to any kopf registry, so the
bridge runs alone (`podnetwork bridge`) or beside the PodNetwork controller in
one operator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kopf
import pydantic

from bridge import npwg, translate
from bridge.operator import pods
from bridge.translate import params
from podnetwork.cli import handlers
from podnetwork.ground import constants
from podnetwork.ground import core as kube_core
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import conditions
from podnetwork.kube import client as kube

logger = logging.getLogger(__name__)

Key = tuple[str, str]
#: (kind, namespace, name) of a PodNetwork ("" namespace) or attachment.
Ref = tuple[str, str, str]


@dataclass
class BridgeSettings:
    """What `podnetwork bridge` was asked to do."""

    params_ready: bool = True
    """Write ParamsReady on the bridge's PodNetworks and attachments. Default on."""
    write_selection: bool = True
    """Write `k8s.v1.cni.cncf.io/networks` on pods. Off when a mutating webhook or the
    CNI agent translates on its own and nothing else needs the annotation."""
    write_pod_ips: bool = True
    """Write `multinetwork.x-k8s.io/pod-ips` from `network-status`. Default on."""
    write_attachments: bool = True
    """Write `multinetwork.x-k8s.io/attachments` (the attachment data for the workload, KEP
    Phase II requirement 17) from `network-status`, in the same write. Default on."""


@dataclass
class Bridge:
    """The bridge's memory: the objects translations read, and pods waiting for readiness."""

    config: BridgeSettings = field(default_factory=BridgeSettings)
    podnetworks: dict[str, translate.PodNetwork] = field(default_factory=dict)
    attachments: dict[Key, translate.PodNetworkAttachment] = field(default_factory=dict)
    nads: dict[Key, npwg.NetworkAttachmentDefinition] = field(default_factory=dict)
    options: dict[Key, translate.NetworkSelectionOptions] = field(default_factory=dict)
    nad_users: dict[Key, set[Ref]] = field(default_factory=dict)
    """NAD key -> the PodNetworks and attachments whose parametersRefs name it."""
    options_users: dict[Key, set[Ref]] = field(default_factory=dict)
    waiting: dict[Key, kube_core.Pod] = field(default_factory=dict)
    """Pods whose selection waits for objects to exist or turn Ready, by (namespace, name)."""
    posted: dict[Key, set[str]] = field(default_factory=dict)
    """Per pod, the names of the Events already posted (each cause is reported once); forgotten
    with the pod."""
    reverse_written: dict[Key, tuple[str, dict[str, str]]] = field(default_factory=dict)
    """Per pod, digests of the network-status the bridge last wrote the reverse status from and
    of what it wrote: a copy of the pod older than that write (a watch replaying kopf's listing, a
    reconnect) then writes nothing again. The next change of the status decides anew."""
    locks: dict[Any, asyncio.Lock] = field(default_factory=dict)
    api: kube.AsyncApi | None = None
    """The bridge's own API client (`podnetwork.kube`), from the credentials kopf logs in with."""
    background: set[asyncio.Task[None]] = field(default_factory=set)
    """Tasks started by the startup handler (kept referenced until the operator stops)."""

    # --- memory ----------------------------------------------------------------------------

    def objects(self) -> translate.Objects:
        # The memory holds only objects that fit their models (`_read`): nothing is invalid.
        return translate.Objects(self.podnetworks, self.attachments, self.nads, self.options)

    def _index_refs(
        self, ref: Ref, obj: translate.PodNetwork | translate.PodNetworkAttachment | None
    ) -> None:
        for users in (*self.nad_users.values(), *self.options_users.values()):
            users.discard(ref)
        if obj is None:
            return
        nad_keys, option_keys = translate.references(obj)
        for key in nad_keys:
            self.nad_users.setdefault(key, set()).add(ref)
        for key in option_keys:
            self.options_users.setdefault(key, set()).add(ref)

    def remember_podnetwork(self, body: Mapping[str, Any]) -> Ref | None:
        """Caches a PodNetwork body; None (logged) when it does not fit the model."""
        obj = _read(translate.PodNetwork, body)
        if obj is None:
            return None
        name = obj.metadata.name or ""
        obj = _newest(self.podnetworks.get(name), obj)
        self.podnetworks[name] = obj
        ref = (constants.PODNETWORK_KIND, "", name)
        self._index_refs(ref, obj)
        return ref

    def remember_attachment(self, body: Mapping[str, Any]) -> Ref | None:
        """Caches a PodNetworkAttachment body; None (logged) when it does not fit the model."""
        obj = _read(translate.PodNetworkAttachment, body)
        if obj is None:
            return None
        key = _key_of(obj)
        obj = _newest(self.attachments.get(key), obj)
        self.attachments[key] = obj
        ref = (constants.ATTACHMENT_KIND, *key)
        self._index_refs(ref, obj)
        return ref

    def remember_nad(self, body: Mapping[str, Any]) -> Key | None:
        obj = _read(npwg.NetworkAttachmentDefinition, body)
        if obj is None:
            return None
        key = _key_of(obj)
        self.nads[key] = _newest(self.nads.get(key), obj)
        return key

    def remember_options(self, body: Mapping[str, Any]) -> Key | None:
        obj = _read(translate.NetworkSelectionOptions, body)
        if obj is None:
            return None
        key = _key_of(obj)
        self.options[key] = _newest(self.options.get(key), obj)
        return key

    def forget(self, ref: Ref) -> None:
        kind, namespace, name = ref
        if kind == constants.PODNETWORK_KIND:
            self.podnetworks.pop(name, None)
        else:
            self.attachments.pop((namespace, name), None)
        self._index_refs(ref, None)

    def lock(self, key: Any) -> asyncio.Lock:
        lock = self.locks.get(key)
        if lock is None:
            lock = self.locks[key] = asyncio.Lock()
        return lock

    # --- the API, through podnetwork.kube ------------------------------------------------------

    def _api(self) -> kube.AsyncApi:
        assert self.api is not None, "Bridge.api is not set: give it a podnetwork.kube.AsyncApi"
        return self.api

    async def patch(self, target: Ref, payload: Mapping[str, Any], *, status: bool = False) -> Any:
        """A merge patch of a pod, or of a PodNetwork's or attachment's status (the operators'
        shared write policy); None when it did not apply (the next event retries)."""
        kind, namespace, name = target
        resource = _RESOURCES[kind]
        api = self._api()
        what = f"patch {kube.path_of(resource, namespace, name)}{'/status' if status else ''}"
        written = await api.write(
            what, lambda: api.patch(resource, name, payload, namespace=namespace or None, status=status),
            then="the next event retries")
        return written.body

    async def post_event(self, pod: kube_core.Pod, reason: str, message: str) -> None:
        body = pods.event(pod, reason, message, now=conditions.now())
        name = body["metadata"]["name"]
        namespace = body["metadata"]["namespace"]
        posted = self.posted.setdefault((namespace, pod.metadata.name or ""), set())
        if name in posted:
            return
        posted.add(name)
        try:
            await self._api().create(kube.Event, body)
        except kube.Conflict:
            logger.debug("event %s was posted before this process started", name)
        except kube.ApiError as exc:
            logger.warning("event %s not posted: %s", name, exc)
        logger.warning("pod %s/%s: %s", namespace, pod.metadata.name, message)

    # --- ParamsReady -----------------------------------------------------------------------

    def params_decision(
        self, ref: Ref
    ) -> tuple[translate.PodNetwork | translate.PodNetworkAttachment | None, conditions.Desired | None]:
        kind, namespace, name = ref
        if kind == constants.PODNETWORK_KIND:
            pn = self.podnetworks.get(name)
            return pn, None if pn is None else params.podnetwork_params(pn, self.objects())
        pna = self.attachments.get((namespace, name))
        if pna is None:
            return None, None
        podnetwork = self.podnetworks.get(pna.spec.pod_network_name)
        return pna, params.attachment_params(pna, podnetwork, self.objects())

    async def reconcile_params(self, ref: Ref) -> None:
        if not self.config.params_ready:
            return
        async with self.lock(ref):
            body, desired = self.params_decision(ref)
            if body is None or desired is None:
                return
            new = params.conditions_after(body, desired, now=conditions.now())
            if new is None:
                return
            fresh = await self.patch(ref, conditions.status_patch(body, new), status=True)
            if fresh:
                if ref[0] == constants.PODNETWORK_KIND:
                    self.remember_podnetwork(fresh)
                else:
                    self.remember_attachment(fresh)
                logger.info("%s %s: ParamsReady=%s (%s)", ref[0], _show(ref), desired.status, desired.reason)

    async def reconcile_users(self, refs: set[Ref]) -> None:
        for ref in sorted(refs):
            await self.reconcile_params(ref)

    def attachments_of(self, podnetwork: str) -> set[Ref]:
        return {
            (constants.ATTACHMENT_KIND, ns, name)
            for (ns, name), pna in self.attachments.items()
            if pna.spec.pod_network_name == podnetwork
        }

    # --- pods ------------------------------------------------------------------------------

    async def reconcile_pod(self, body: Mapping[str, Any]) -> None:
        key = _key(body)
        async with self.lock(("Pod", *key)):
            pod = _read(kube_core.Pod, body)
            if pod is None:  # the pod holds no network, as one whose annotation cannot be parsed
                self.waiting.pop(key, None)
                return
            await self._reconcile_pod(key, pod)

    async def _reconcile_pod(self, key: Key, pod: kube_core.Pod) -> None:
        if (
            pod.status.phase in ("Succeeded", "Failed")
            or pod.metadata.deletion_timestamp
            or pod.spec.host_network
        ):
            self.waiting.pop(key, None)
            return
        try:
            nets = pods.declared(pod)
        except InvalidObject as exc:
            logger.debug("pod %s/%s: networks annotation is invalid (admission reports it): %s", *key, exc)
            self.waiting.pop(key, None)
            await self.release(key, pod, "its networks annotation is invalid")
            return
        if nets is None:
            self.waiting.pop(key, None)
            await self.release(key, pod, "it names no networks")
            return
        objects = self.objects()
        try:
            translation = pods.translation(pod, nets, key[0], objects)
        except translate.TranslationError as exc:
            logger.info("pod %s/%s waits: %s", *key, exc)
            if exc.reason is translate.Reason.NOT_BRIDGE_PROVIDER:
                # Providers do not change: the bridge will never write this pod's selection.
                pod = await self.release(key, pod, str(exc))
            self.waiting[key] = pod
            await self.say_why_gated(pod, nets, key[0], objects, exc)
            return
        if not self.config.write_selection:
            await self.release(key, pod, "the bridge runs with --no-selection")
        else:
            if pods.ours_to_write(pod):
                # What NPWG cannot express, and a refusal, while it still matters: once
                # attached, the selection was read. Each is posted (and logged) once.
                for reason, message in pods.notices(translation):
                    await self.post_event(pod, reason, message)
            blockers = pods.not_ready(nets, key[0], objects)
            # An attached pod waits too: a network added to it (hot-plug) is selected once Ready.
            if blockers:
                logger.info("pod %s/%s waits: %s", *key, "; ".join(blockers))
                self.waiting[key] = pod
                await self.say_why_gated(pod, nets, key[0], objects)
            else:
                self.waiting.pop(key, None)
                decision = pods.selection(pod, translation)
                if decision.patch is not None:
                    fresh = await self.patch(_pod(key), decision.patch)
                    if fresh:
                        pod = _read(kube_core.Pod, fresh) or pod
                        wrote = "annotations" in decision.patch.get("metadata", {})
                        logger.info("pod %s/%s: %s%s", *key,
                                    f"wrote {npwg.NETWORKS_ANNOTATION}" if wrote else "nothing to write",
                                    f", removed scheduling gate {pods.SCHEDULING_GATE}"
                                    if "spec" in decision.patch else "")
                if decision.refused is not None:
                    # A change of the NAD (a gateway named) re-evaluates the pod.
                    self.waiting[key] = pod
                if decision.conflict is not None:
                    await self.post_event(pod, pods.CONFLICT_REASON, decision.conflict)
        if self.config.write_pod_ips or self.config.write_attachments:
            try:
                patch = pods.reverse_status_patch(pod, translation, pod_ips=self.config.write_pod_ips,
                                                  attachment_data=self.config.write_attachments)
            except ValueError as exc:
                logger.warning("pod %s/%s: %s", *key, exc)
                return
            if patch is None:
                return
            # Digests, not texts: one entry per pod stays small whatever the status holds.
            status = pods.digest(pod.metadata.annotation(npwg.NETWORK_STATUS_ANNOTATION) or "")
            changes: dict[str, str] = patch["metadata"]["annotations"]
            digests = {k: pods.digest(v) for k, v in changes.items()}
            last = self.reverse_written.get(key)
            if last is not None and last[0] == status and digests.items() <= last[1].items():
                return  # an older copy of the pod: this was written already
            if await self.patch(_pod(key), patch):
                before = last[1] if last is not None and last[0] == status else {}
                self.reverse_written[key] = (status, {**before, **digests})
                logger.info("pod %s/%s: wrote %s", *key, ", ".join(changes))

    async def say_why_gated(
        self, pod: kube_core.Pod, nets: list[translate.Network], namespace: str, objects: translate.Objects,
        error: translate.TranslationError | None = None,
    ) -> None:
        """An Event per cause on a pod the bridge holds behind its gate (`pods.gate_notices`): it
        never reaches kube-scheduler, so no FailedScheduling says why it is Pending."""
        for message in pods.gate_notices(pod, nets, namespace, objects, error):
            await self.post_event(pod, pods.GATED_REASON, message)

    async def release(self, key: Key, pod: kube_core.Pod, why: str) -> kube_core.Pod:
        """Remove the bridge's scheduling gate from a pod it will write no selection for.

        Returns the pod as it is now (the API's answer when a patch was made).
        """
        patch = pods.release_patch(pod)
        fresh = None if patch is None else await self.patch(_pod(key), patch)
        if not fresh:
            return pod
        logger.warning("pod %s/%s: removed scheduling gate %s without a selection: %s",
                       *key, pods.SCHEDULING_GATE, why)
        return _read(kube_core.Pod, fresh) or pod

    async def retry_waiting(self) -> None:
        """Re-evaluate the pods waiting for objects; called when one of those objects changes."""
        for key in sorted(self.waiting):
            pod = self.waiting.get(key)
            if pod is not None:
                async with self.lock(("Pod", *key)):
                    await self._reconcile_pod(key, pod)

    # --- follow-ups of object events ----------------------------------------------------------

    async def podnetwork_changed(self, ref: Ref) -> None:
        await self.reconcile_params(ref)
        await self.reconcile_users(self.attachments_of(ref[2]))
        await self.retry_waiting()

    async def attachment_changed(self, ref: Ref) -> None:
        await self.reconcile_params(ref)
        await self.retry_waiting()

    async def nad_changed(self, key: Key) -> None:
        await self.reconcile_users(set(self.nad_users.get(key, ())))
        await self.retry_waiting()

    async def options_changed(self, key: Key) -> None:
        await self.reconcile_users(set(self.options_users.get(key, ())))
        await self.retry_waiting()


_T = TypeVar("_T", bound=kube_core.HasMetadata)
_M = TypeVar("_M", bound=pydantic.BaseModel)


def _newest(cached: _T | None, obj: _T) -> _T:
    """The newer of a cached object and an incoming one (resourceVersion is etcd's revision)."""
    if cached is not None:
        a = obj.metadata.resource_version or ""
        b = cached.metadata.resource_version or ""
        if a.isdigit() and b.isdigit() and int(a) < int(b):
            return cached
    return obj


def _read(model: type[_M], body: Mapping[str, Any]) -> _M | None:
    """`body` read into its model or view; None (logged) when it does not fit.

    As `podnetwork.kep.controller` does: an API server serving the CRDs never sends
    one; a mismatched CRD or an emulator can. The last good object stays cached.
    """
    try:
        return model.model_validate(body)
    except pydantic.ValidationError as exc:
        logger.warning("ignored %s %s: it does not fit its model: %s", model.__name__, _show_key(body),
                       translate.field_errors(exc))
        return None


def _key_of(obj: kube_core.HasMetadata) -> Key:
    return (obj.metadata.namespace or "", obj.metadata.name or "")


def _show_key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    return f"{meta.get('namespace') or ''}/{meta.get('name')}" if isinstance(meta, Mapping) else "?"


def _key(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def _show(ref: Ref) -> str:
    return f"{ref[1]}/{ref[2]}" if ref[1] else ref[2]


_RESOURCES: dict[str, kube.Resource] = {
    constants.PODNETWORK_KIND: kube.PodNetwork,
    constants.ATTACHMENT_KIND: kube.PodNetworkAttachment,
    "Pod": kube.Pod,
}


def _pod(key: Key) -> Ref:
    return ("Pod", *key)


def register(registry: kopf.OperatorRegistry, bridge: Bridge, meter: handlers.Meter | None = None) -> None:
    """Register the bridge's handlers in `registry`. Handler ids start with `bridge_`;
    `meter` counts the watching handlers' runs and failures (`podnetwork bridge --metrics-port`)."""
    on = handlers.Handlers(meter)

    @kopf.on.startup(registry=registry, id="bridge_startup")
    async def bridge_startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        # kopf would post an Event for every warning logged about a handled pod.
        settings.posting.enabled = False

    @kopf.on.cleanup(registry=registry, id="bridge_cleanup")
    async def bridge_cleanup(**_: Any) -> None:
        for task in bridge.background:
            task.cancel()
        await asyncio.gather(*bridge.background, return_exceptions=True)
        bridge.background.clear()
        if bridge.api is not None:
            await bridge.api.close()

    nad = (npwg.NAD_GROUP, npwg.NAD_VERSION, npwg.NAD_PLURAL)
    opts = (translate.OPTIONS_GROUP, translate.OPTIONS_VERSION, translate.OPTIONS_PLURAL)
    pn = (constants.GROUP, constants.VERSION, constants.PODNETWORK_PLURAL)
    pna = (constants.GROUP, constants.VERSION, constants.ATTACHMENT_PLURAL)

    # Indexes first: kopf runs no event handler before every index has its initial listing.
    @on.index(*pn, registry=registry, id="bridge_podnetworks")
    def bridge_podnetworks(body: kopf.Body, **_: Any) -> None:
        bridge.remember_podnetwork(body)

    @on.index(*pna, registry=registry, id="bridge_attachments")
    def bridge_attachments(body: kopf.Body, **_: Any) -> None:
        bridge.remember_attachment(body)

    @on.index(*nad, registry=registry, id="bridge_nads")
    def bridge_nads(body: kopf.Body, **_: Any) -> None:
        bridge.remember_nad(body)

    @on.index(*opts, registry=registry, id="bridge_options")
    def bridge_options(body: kopf.Body, **_: Any) -> None:
        bridge.remember_options(body)

    @on.event(*pn, registry=registry, id="bridge_podnetwork_event")
    async def bridge_podnetwork_event(type: str, body: kopf.Body, **_: Any) -> None:
        ref: Ref = (constants.PODNETWORK_KIND, "", _key(body)[1])
        if type == "DELETED":
            bridge.forget(ref)
        elif bridge.remember_podnetwork(body) is None:
            return
        await bridge.podnetwork_changed(ref)

    @on.event(*pna, registry=registry, id="bridge_attachment_event")
    async def bridge_attachment_event(type: str, body: kopf.Body, **_: Any) -> None:
        ref: Ref = (constants.ATTACHMENT_KIND, *_key(body))
        if type == "DELETED":
            bridge.forget(ref)
        elif bridge.remember_attachment(body) is None:
            return
        await bridge.attachment_changed(ref)

    @on.event(*nad, registry=registry, id="bridge_nad_event")
    async def bridge_nad_event(type: str, body: kopf.Body, **_: Any) -> None:
        key = _key(body)
        if type == "DELETED":
            bridge.nads.pop(key, None)
        elif bridge.remember_nad(body) is None:
            return
        await bridge.nad_changed(key)

    @on.event(*opts, registry=registry, id="bridge_options_event")
    async def bridge_options_event(type: str, body: kopf.Body, **_: Any) -> None:
        key = _key(body)
        if type == "DELETED":
            bridge.options.pop(key, None)
        elif bridge.remember_options(body) is None:
            return
        await bridge.options_changed(key)

    @on.event(
        "pods",
        registry=registry,
        id="bridge_pod_event",
        annotations={constants.NETWORKS_ANNOTATION: kopf.PRESENT},
    )
    async def bridge_pod_event(type: str, body: kopf.Body, **_: Any) -> None:
        key = _key(body)
        if type == "DELETED":
            bridge.waiting.pop(key, None)
            bridge.locks.pop(("Pod", *key), None)
            bridge.reverse_written.pop(key, None)
            bridge.posted.pop(key, None)
            return
        await bridge.reconcile_pod(body)


__all__ = ["Bridge", "BridgeSettings", "register"]
