"""The PodNetwork controller's decisions, driven by the demo store's watch events.

On a cluster the kopf operator (`podnetwork controller`) turns watch events into
calls of the pure functions of `podnetwork.kep.conditions`, `podnetwork.kep.inuse` and
`podnetwork.kep.defaultnet`, and writes their answers back. This module does the
same against `demo.store.Store`: every decision here is theirs; this module
only reads, calls and writes. Because the store delivers events synchronously
after each write, the control plane has settled when a write returns.

Objects are read into their models (`podnetwork.kep.api`) and views
(`podnetwork.ground.core`) as they leave the store, as the operator reads them
from watch events: one that does not fit is ignored with a warning, and a pod
that does not fit holds no network.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from demo import store as store_mod
from demo.store import Event, EventType, Store
from podnetwork.ground import constants
from podnetwork.ground.core import Node, PartialObjectMetadata, Pod
from podnetwork.kep import api, conditions, defaultnet, inuse
from podnetwork.kep.api import KepObject

log = logging.getLogger(__name__)

PN: tuple[str, str] = (constants.API_VERSION, constants.PODNETWORK_KIND)
PNA: tuple[str, str] = (constants.API_VERSION, constants.ATTACHMENT_KIND)
POD = ("v1", "Pod")
NODE = ("v1", "Node")
#: Attempts at a read-decide-write cycle before giving up on a conflict storm.
RETRIES = 5


class Controller:
    """Conditions, InUse finalizers, the `default` PodNetwork, node readiness, the requeue nudge."""

    def __init__(
        self,
        api: Store,
        *,
        create_default: bool = True,
        now: Callable[[], str] = conditions.now,
        on_note: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api
        self.index = inuse.Index()
        self.create_default = create_default
        self._now = now
        self._note = on_note or (lambda text: log.info("%s", text))
        self._cancel: list[Callable[[], None]] = []
        self.writes = 0
        """Writes made so far: a steady cluster makes none (the no-hot-loop rule)."""

    def start(self) -> None:
        if self.create_default and self.api.find(*PN, constants.DEFAULT_PODNETWORK) is None:
            self.api.create(defaultnet.podnetwork())
            self._note('created the cluster default PodNetwork "default" (KEP "Default PodNetwork")')
        # Pods and attachments first, so the index is complete when networks are first reconciled.
        self._cancel.append(self.api.subscribe(self._on_pod, *POD))
        self._cancel.append(self.api.subscribe(self._on_attachment, *PNA))
        self._cancel.append(self.api.subscribe(self._on_podnetwork, *PN))
        self._cancel.append(self.api.subscribe(self._on_node, *NODE))

    def stop(self) -> None:
        for cancel in self._cancel:
            cancel()
        self._cancel.clear()

    # -- events -----------------------------------------------------------------------

    def _on_pod(self, event: Event) -> None:
        pod = _read(Pod.model_validate, event.object)
        key = inuse.key_of(pod) if pod is not None else _key(event.object)
        if event.type == EventType.DELETED or pod is None:
            changed = self.index.remove_pod(key)
        else:
            changed = self.index.set_pod(pod)
        for ref in sorted(changed):
            self._reconcile_ref(ref)

    def _on_attachment(self, event: Event) -> None:
        if event.type == EventType.DELETED:
            changed = self.index.remove_attachment(_key(event.object))
        else:
            obj = _read(api.PodNetworkAttachment.model_validate, event.object)
            if obj is None:
                return
            changed = self.index.set_attachment(obj)
            self._reconcile_ref(inuse.ref_of(obj))
        for ref in sorted(changed):
            self._reconcile_ref(ref)

    def _on_podnetwork(self, event: Event) -> None:
        name = _name(event.object)
        if not name:
            return
        ref = inuse.podnetwork_ref(name)
        if event.type == EventType.DELETED:
            self._note(f'PodNetwork "{name}" is gone')
            if name == constants.DEFAULT_PODNETWORK and self.create_default:
                self.api.create(defaultnet.podnetwork())
                self._note('re-created the cluster default PodNetwork "default"')
        else:
            self._reconcile_ref(ref)
        # Attachments follow their PodNetwork without waiting for a resync (issue 3, item 1).
        for key in sorted(self.index.attachments_of(ref)):
            ns, _, pna = key.partition("/")
            self._reconcile_ref(inuse.attachment_ref(ns, pna))
        for body in self.api.list(*NODE):
            node = _read(Node.model_validate, body)
            if node is not None and node.metadata.name and defaultnet.node_default_name(node) == name:
                self._reconcile_node(node.metadata.name)

    def _on_node(self, event: Event) -> None:
        name = _name(event.object)
        if event.type != EventType.DELETED and name:
            self._reconcile_node(name)

    # -- reconcilers ------------------------------------------------------------------

    def _reconcile_ref(self, ref: inuse.Ref) -> None:
        if ref.kind == constants.PODNETWORK_KIND:
            self._reconcile(PN, ref.name, None, ref)
        else:
            self._reconcile(PNA, ref.name, ref.namespace, ref)

    def _reconcile(self, coords: tuple[str, str], name: str, namespace: str | None, ref: inuse.Ref) -> None:
        for _ in range(RETRIES):
            obj = self._find(coords, name, namespace)
            if obj is None:
                return
            try:
                if self._reconcile_once(coords, obj, ref):
                    return
            except store_mod.Conflict:
                continue  # someone wrote in between: read again and decide again
        log.warning("gave up reconciling %s after %d conflicts", ref, RETRIES)

    def _find(self, coords: tuple[str, str], name: str, namespace: str | None = None) -> KepObject | None:
        """A PodNetwork or attachment of the store, in its model; None when absent or unreadable."""
        body = self.api.find(*coords, name, namespace)
        return None if body is None else _read(lambda b: api.parse(b, coords[1]), body)

    def _podnetwork(self, name: str) -> api.PodNetwork | None:
        pn = self._find(PN, name)
        return pn if isinstance(pn, api.PodNetwork) else None

    def _reconcile_once(self, coords: tuple[str, str], obj: KepObject, ref: inuse.Ref) -> bool:
        name, namespace = obj.metadata.name or "", obj.metadata.namespace
        patch = inuse.finalizer_patch(obj, in_use=self.index.in_use(ref))
        if patch is not None:
            self.writes += 1
            adding = constants.IN_USE_FINALIZER in patch["metadata"]["finalizers"]
            self.api.patch(*coords, name, patch, namespace)
            self._note(
                f"{'added' if adding else 'removed'} finalizer {constants.IN_USE_FINALIZER} "
                f"{'to' if adding else 'from'} {ref}"
            )
            return False  # read again: the delete may have completed, the version moved
        usage = self.index.usage(ref)
        if isinstance(obj, api.PodNetwork):
            new = conditions.podnetwork_conditions(obj, usage, now=self._now())
        else:
            pn = self._podnetwork(obj.spec.pod_network_name)
            new = conditions.attachment_conditions(obj, pn, usage, now=self._now())
        if new is None:
            return True
        was_ready = conditions.is_ready(obj)
        self.writes += 1
        updated = self.api.patch(
            *coords, name, conditions.status_patch(obj, new), namespace, subresource="status"
        )
        if not was_ready and conditions.is_ready(_read(lambda b: api.parse(b, coords[1]), updated)):
            self._nudge(ref)
        return True

    def _nudge(self, ref: inuse.Ref) -> None:
        """Make the scheduler retry pods that wait for `ref` (issue 3, item 5): kube-scheduler
        does not retry a pod its extender rejected when only a PodNetwork changed."""
        for key in sorted(self.index.unscheduled_pods(ref)):
            ns, _, pod = key.partition("/")
            try:
                self.api.patch(
                    *POD,
                    pod,
                    {"metadata": {"annotations": {constants.REQUEUED_AT_ANNOTATION: self._now()}}},
                    ns,
                )
            except store_mod.NotFound:
                continue
            self.writes += 1
            self._note(
                f"{ref} turned Ready: nudged pod {key} ({constants.REQUEUED_AT_ANNOTATION}) "
                "so the scheduler retries it"
            )

    def _reconcile_node(self, name: str) -> None:
        for _ in range(RETRIES):
            found = self.api.find(*NODE, name)
            node = None if found is None else _read(Node.model_validate, found)
            if node is None:
                return
            pn = self._podnetwork(defaultnet.node_default_name(node))
            patch = defaultnet.node_condition_patch(node, pn, now=self._now())
            if patch is None:
                return
            # The patch is a strategic merge by condition type; the store speaks JSON merge
            # patch, which replaces lists, so merge by type here and send the whole list.
            mine = {c["type"]: c for c in patch["status"]["conditions"]}
            kept = [c.to_dict() for c in node.status.conditions or [] if c.type not in mine]
            body = {
                "metadata": {"resourceVersion": node.metadata.resource_version},
                "status": {"conditions": kept + list(mine.values())},
            }
            try:
                self.api.patch(*NODE, name, body, subresource="status")
            except store_mod.Conflict:
                continue
            self.writes += 1
            return


_T = TypeVar("_T")


def _read(model: Callable[[Mapping[str, Any]], _T], body: Mapping[str, Any]) -> _T | None:
    """`body` in its model or view; None (logged) when it does not fit."""
    try:
        return model(body)
    except ValueError as exc:  # pydantic.ValidationError
        log.warning("ignored %s %s: it does not fit its model: %s", body.get("kind"), _key(body), exc)
        return None


def _name(body: Mapping[str, Any]) -> str:
    """What an event handler needs of an object: its name (it reads the rest from the store)."""
    head = _read(PartialObjectMetadata.model_validate, body)
    return (head.metadata.name or "") if head is not None else ""


def _key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}" if isinstance(meta, Mapping) else "/"
