"""The Services controller of the bridge: its memory, and the applier of `bridge.operator.services.plan`.

For each Service annotated `multinetwork.x-k8s.io/podnetwork: <name>`, it keeps EndpointSlices of
the selected pods' addresses on that PodNetwork (docs/services.md). It remembers:

- every pod as a compact `services.PodRecord` (labels, addresses per network, named ports,
  readiness), by namespace: a Service's plan reads the pods of its namespace, never the API;
- the Services that name a PodNetwork (and, until their slices are gone, those that stopped);
- our slices (label `endpointslice.kubernetes.io/managed-by` ours), by Service, as the API
  answered the last write or the watch last said, the newer winning;
- PodNetworks (name and, for the bridge's, their NAD) and attachments (their PodNetwork).

Index handlers (kopf runs none of the event handlers before every index has its initial listing:
a restarted bridge never plans from half the pods) update the memory and mark the Services a
change concerns; event handlers then plan and apply every marked Service (`drain`), each
Service under its own lock. Marks are a set, so a burst of pod changes plans a Service once.

`Services.watches` lists its entry points, `register` wires them to kopf, beside the bridge's
own handlers (`bridge.operator.controller.register`), in the same operator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import kopf

from bridge import translate
from bridge.operator import services
from bridge.operator.memory import Key, key_of, read
from podnetwork.cli import handlers
from podnetwork.cli.handlers import Watch
from podnetwork.ground import constants
from podnetwork.ground import service as views
from podnetwork.ground.actions import Create, Delete, Patch
from podnetwork.ground.core import head_of
from podnetwork.kep import conditions
from podnetwork.kube import client as kube
from podnetwork.kube import writes

logger = logging.getLogger(__name__)

SLICES = ("discovery.k8s.io", "v1", "endpointslices")


class SliceApi(writes.Api, Protocol):
    """The calls the Services controller makes: the operators' ones and delete."""

    async def delete(self, resource: kube.Resource, name: str, namespace: str | None = None) -> None: ...


def _older(a: str, b: str) -> bool:
    return a.isdigit() and b.isdigit() and int(a) < int(b)


@dataclass
class Services:
    """The Services controller's memory (module docstring) and its applier."""

    api: SliceApi | None = None
    pods: dict[str, dict[str, services.PodRecord]] = field(default_factory=dict)
    """Namespace -> pod name -> record."""
    served: dict[Key, views.Service] = field(default_factory=dict)
    """The Services that name a PodNetwork, and those that stopped until their slices are gone."""
    slices: dict[Key, dict[str, services.Slice]] = field(default_factory=dict)
    """(namespace, Service) -> slice name -> slice."""
    networks: dict[str, services.Network] = field(default_factory=dict)
    attachments: dict[Key, str] = field(default_factory=dict)
    """(namespace, attachment) -> its PodNetwork."""
    warned: dict[Key, frozenset[services.ServiceWarning]] = field(default_factory=dict)
    """The Warnings each Service carries now: an Event is posted when one appears, not again."""
    dirty: dict[Key, None] = field(default_factory=dict)
    """Services to plan (an ordered set)."""
    locks: dict[Key, asyncio.Lock] = field(default_factory=dict)

    # --- entry points ---------------------------------------------------------------------------

    def watches(self) -> list[Watch]:
        """The kinds the Services controller watches and its entry points for each (`register`)."""
        return [
            Watch(constants.PODNETWORK_PLURAL, constants.API_VERSION, constants.PODNETWORK_KIND,
                  self.index_podnetwork, "bridge_service_podnetworks",
                  self.podnetwork_event, "bridge_service_podnetwork_event"),
            Watch(constants.ATTACHMENT_PLURAL, constants.API_VERSION, constants.ATTACHMENT_KIND,
                  self.index_attachment, "bridge_service_attachments",
                  self.attachment_event, "bridge_service_attachment_event"),
            Watch("pods", "v1", "Pod", self.index_pod, "bridge_service_pods",
                  self.pod_event, "bridge_service_pod_event"),
            Watch("endpointslices", views.ENDPOINTSLICE_API_VERSION, views.ENDPOINTSLICE_KIND,
                  self.index_slice, "bridge_service_slices", self.slice_event, "bridge_service_slice_event"),
            Watch("services", "v1", "Service", self.index_service, "bridge_services",
                  self.service_event, "bridge_service_event"),
        ]

    def index_podnetwork(self, body: Mapping[str, Any]) -> None:
        obj = read(translate.PodNetwork, body)
        if obj is None:
            return
        name = obj.metadata.name or ""
        nads = sorted(translate.references(obj)[0]) if translate.is_bridge(obj) else []
        network = services.Network(name, nads[0] if len(nads) == 1 else None)
        if self.networks.get(name) != network:
            self.networks[name] = network
            self._mark_network(name)

    def index_attachment(self, body: Mapping[str, Any]) -> None:
        obj = read(translate.PodNetworkAttachment, body)
        if obj is None:
            return
        key = key_of(body)
        if self.attachments.get(key) != obj.spec.pod_network_name:
            self.attachments[key] = obj.spec.pod_network_name
            self._mark_namespace(key[0])

    def index_pod(self, body: Mapping[str, Any]) -> None:
        pod = read(views.EndpointPod, body)
        if pod is None:
            return
        namespace, name = key_of(body)
        self._replace_pod(namespace, name, services.pod_record(pod))

    def index_slice(self, body: Mapping[str, Any]) -> None:
        view = read(views.EndpointSlice, body)
        if view is None or (view.metadata.labels or {}).get(
                constants.ENDPOINTSLICE_MANAGED_BY_LABEL) != constants.ENDPOINTSLICE_MANAGED_BY:
            return
        if self._remember_slice(view.metadata.namespace or "", services.slice_record(view)):
            self._mark((view.metadata.namespace or "", services.slice_record(view).service))

    def index_service(self, body: Mapping[str, Any]) -> None:
        view = read(views.Service, body)
        if view is None:
            return
        key = key_of(body)
        if services.network_of(view) is not None or self.slices.get(key):
            self.served[key] = view
            self._mark(key)
        else:
            self.served.pop(key, None)

    async def podnetwork_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        name = key_of(body)[1]
        if type == "DELETED" and self.networks.pop(name, None) is not None:
            self._mark_network(name)
        await self.drain()

    async def attachment_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        if type == "DELETED" and self.attachments.pop(key, None) is not None:
            self._mark_namespace(key[0])
        await self.drain()

    async def pod_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        if type == "DELETED":
            self._replace_pod(*key_of(body), None)
        await self.drain()

    async def slice_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        if type == "DELETED":
            namespace, name = key_of(body)
            head = head_of(body)
            labels = (head.metadata.labels if head is not None else None) or {}
            key = (namespace, labels.get(constants.ENDPOINTSLICE_SERVICE_NAME_LABEL) or "")
            if self.slices.get(key, {}).pop(name, None) is not None:
                if not self.slices[key]:
                    del self.slices[key]
                self._mark(key)
        await self.drain()

    async def service_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        if type == "DELETED":
            # The garbage collector deletes our slices (their ownerReferences name the Service).
            key = key_of(body)
            self.served.pop(key, None)
            self.warned.pop(key, None)
            self.dirty.pop(key, None)
        await self.drain()

    # --- memory ---------------------------------------------------------------------------------

    def _mark(self, key: Key) -> None:
        if key in self.served:
            self.dirty[key] = None

    def _mark_network(self, network: str) -> None:
        for key, svc in self.served.items():
            if services.network_of(svc) == network:
                self.dirty[key] = None

    def _mark_namespace(self, namespace: str) -> None:
        for key in self.served:
            if key[0] == namespace:
                self.dirty[key] = None

    def _replace_pod(self, namespace: str, name: str, record: services.PodRecord | None) -> None:
        held = self.pods.setdefault(namespace, {})
        old = held.get(name)
        if old == record:
            return
        if record is None:
            held.pop(name, None)
            if not held:
                del self.pods[namespace]
        else:
            held[name] = record
        for key, svc in self.served.items():
            selector = svc.spec.selector
            if key[0] == namespace and selector and any(
                    r is not None and services.selected(selector, r.labels) for r in (old, record)):
                self.dirty[key] = None

    def _remember_slice(self, namespace: str, record: services.Slice) -> bool:
        """Keep a slice unless what is held is newer; True when the memory changed."""
        held = self.slices.setdefault((namespace, record.service), {})
        old = held.get(record.name)
        if old is not None and (old == record or _older(record.resource_version, old.resource_version)):
            return False
        held[record.name] = record
        return True

    # --- the applier ----------------------------------------------------------------------------

    def _api(self) -> SliceApi:
        assert self.api is not None, "Services.api is not set: give it a podnetwork.kube.client.AsyncApi"
        return self.api

    def lock(self, key: Key) -> asyncio.Lock:
        lock = self.locks.get(key)
        if lock is None:
            lock = self.locks[key] = asyncio.Lock()
        return lock

    async def drain(self) -> None:
        """Plan and apply every marked Service, until none is marked."""
        while self.dirty:
            key = next(iter(self.dirty))
            del self.dirty[key]
            async with self.lock(key):
                await self.reconcile(key)

    def plan(self, key: Key) -> services.ServicePlan | None:
        """The plan of one Service from the memory (None: the Service is not held)."""
        svc = self.served.get(key)
        if svc is None:
            return None
        network_name = services.network_of(svc)
        namespace = key[0]
        attachment_networks = {n: pn for (ns, n), pn in self.attachments.items() if ns == namespace}
        return services.plan(svc, self.networks.get(network_name or ""),
                             self.pods.get(namespace, {}).values(), self.slices.get(key, {}),
                             attachment_networks)

    async def reconcile(self, key: Key) -> None:
        plan = self.plan(key)
        if plan is None:
            return
        svc = self.served[key]
        for action in plan.creates:
            await self._create(action)
        for patch in plan.updates:
            await self._update(patch)
        for delete in plan.deletes:
            await self._delete(key, delete)
        if plan.writes:
            logger.info("service %s/%s on PodNetwork %s: %d endpoints; created %d, updated %d, deleted %d "
                        "EndpointSlices", *key, services.network_of(svc) or "(none)", plan.endpoints,
                        len(plan.creates), len(plan.updates), len(plan.deletes))
        await self._warn(key, svc, plan.warnings)
        if not plan.served and not self.slices.get(key):
            self.served.pop(key, None)  # held only until its slices were gone

    async def _create(self, action: Create) -> None:
        meta = action.body["metadata"]
        written = await writes.write(
            f"create {kube.path_of(kube.EndpointSlice, meta['namespace'], meta['name'])}",
            lambda: self._api().create(kube.EndpointSlice, action.body), then="the next event retries")
        if written.body is not None:
            self._remember_body(written.body)

    async def _update(self, patch: Patch) -> None:
        written = await writes.apply(self._api(), patch, then="the next event retries")
        if written.body is not None:
            self._remember_body(written.body)

    async def _delete(self, key: Key, delete: Delete) -> None:
        async def request() -> dict[str, Any]:
            await self._api().delete(kube.EndpointSlice, delete.name, delete.namespace)
            return {}

        what = f"delete {kube.path_of(kube.EndpointSlice, delete.namespace, delete.name)}"
        written = await writes.write(what, request, then="the next event retries")
        if written.failure is None or written.gone:
            held = self.slices.get(key, {})
            held.pop(delete.name, None)
            if not held:
                self.slices.pop(key, None)

    def _remember_body(self, body: Mapping[str, Any]) -> None:
        view = read(views.EndpointSlice, body)
        if view is not None:
            self._remember_slice(view.metadata.namespace or "", services.slice_record(view))

    async def _warn(self, key: Key, svc: views.Service,
                    warnings: tuple[services.ServiceWarning, ...]) -> None:
        before = self.warned.get(key, frozenset())
        now = frozenset(warnings)
        if now:
            self.warned[key] = now
        else:
            self.warned.pop(key, None)
        for warning in warnings:
            if warning in before:
                continue
            logger.warning("service %s/%s: %s", *key, warning.message)
            try:
                event = services.service_event(svc, warning, now=conditions.now())
                await self._api().create(kube.Event, event)
            except kube.Conflict:
                logger.debug("event about service %s/%s was posted before this process started", *key)
            except kube.ApiError as exc:
                logger.warning("event about service %s/%s not posted: %s", *key, exc)


def register(registry: kopf.OperatorRegistry, controller: Services,
             meter: handlers.Meter | None = None) -> None:
    """Wire the entry points (`Services.watches`) to kopf's handlers in `registry`; ids start with
    `bridge_service`. Our slices are watched by their managed-by label."""
    on = handlers.Handlers(meter)
    pn = (constants.GROUP, constants.VERSION, constants.PODNETWORK_PLURAL)
    pna = (constants.GROUP, constants.VERSION, constants.ATTACHMENT_PLURAL)
    ours = {constants.ENDPOINTSLICE_MANAGED_BY_LABEL: constants.ENDPOINTSLICE_MANAGED_BY}

    @on.index(*pn, registry=registry, id="bridge_service_podnetworks")
    def bridge_service_podnetworks(body: kopf.Body, **_: Any) -> None:
        controller.index_podnetwork(body)

    @on.index(*pna, registry=registry, id="bridge_service_attachments")
    def bridge_service_attachments(body: kopf.Body, **_: Any) -> None:
        controller.index_attachment(body)

    @on.index("pods", registry=registry, id="bridge_service_pods")
    def bridge_service_pods(body: kopf.Body, **_: Any) -> None:
        controller.index_pod(body)

    @on.index(*SLICES, registry=registry, id="bridge_service_slices", labels=ours)
    def bridge_service_slices(body: kopf.Body, **_: Any) -> None:
        controller.index_slice(body)

    @on.index("services", registry=registry, id="bridge_services")
    def bridge_services(body: kopf.Body, **_: Any) -> None:
        controller.index_service(body)

    @on.event(*pn, registry=registry, id="bridge_service_podnetwork_event")
    async def bridge_service_podnetwork_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await controller.podnetwork_event(type, body)

    @on.event(*pna, registry=registry, id="bridge_service_attachment_event")
    async def bridge_service_attachment_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await controller.attachment_event(type, body)

    @on.event("pods", registry=registry, id="bridge_service_pod_event")
    async def bridge_service_pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await controller.pod_event(type, body)

    @on.event(*SLICES, registry=registry, id="bridge_service_slice_event", labels=ours)
    async def bridge_service_slice_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await controller.slice_event(type, body)

    @on.event("services", registry=registry, id="bridge_service_event")
    async def bridge_service_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await controller.service_event(type, body)


__all__ = ["Services", "SliceApi", "register"]
