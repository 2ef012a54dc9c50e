"""The PodNetwork controller's decisions, driven by the demo store's watch events.

On a cluster the kopf operator (`podnetwork controller`) turns watch events into
calls of the pure functions of `podnetwork.conditions`, `podnetwork.inuse` and
`podnetwork.defaultnet`, and writes their answers back. This module does the
same against `embedded.store.Store`: every decision here is theirs; this module
only reads, calls and writes. Because the store delivers events synchronously
after each write, the control plane has settled when a write returns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from embedded import store as store_mod
from embedded.store import Event, EventType, Store
from podnetwork import conditions, constants, defaultnet, inuse

log = logging.getLogger(__name__)

PN = (constants.API_VERSION, constants.PODNETWORK_KIND)
PNA = (constants.API_VERSION, constants.ATTACHMENT_KIND)
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
        key = inuse.key_of(event.object)
        if event.type == EventType.DELETED:
            changed = self.index.remove_pod(key)
        else:
            changed = self.index.set_pod(event.object)
        for ref in sorted(changed):
            self._reconcile_ref(ref)

    def _on_attachment(self, event: Event) -> None:
        obj = event.object
        changed = (
            self.index.remove_attachment(inuse.key_of(obj))
            if event.type == EventType.DELETED
            else self.index.set_attachment(obj)
        )
        if event.type != EventType.DELETED:
            self._reconcile_ref(inuse.ref_of(obj))
        for ref in sorted(changed):
            self._reconcile_ref(ref)

    def _on_podnetwork(self, event: Event) -> None:
        name = event.object["metadata"]["name"]
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
        for node in self.api.list(*NODE):
            if defaultnet.node_default_name(node) == name:
                self._reconcile_node(node["metadata"]["name"])

    def _on_node(self, event: Event) -> None:
        if event.type != EventType.DELETED:
            self._reconcile_node(event.object["metadata"]["name"])

    # -- reconcilers ------------------------------------------------------------------

    def _reconcile_ref(self, ref: inuse.Ref) -> None:
        if ref.kind == constants.PODNETWORK_KIND:
            self._reconcile(PN, ref.name, None, ref)
        else:
            self._reconcile(PNA, ref.name, ref.namespace, ref)

    def _reconcile(self, coords: tuple[str, str], name: str, namespace: str | None, ref: inuse.Ref) -> None:
        for _ in range(RETRIES):
            obj = self.api.find(*coords, name, namespace)
            if obj is None:
                return
            try:
                if self._reconcile_once(coords, obj, ref):
                    return
            except store_mod.Conflict:
                continue  # someone wrote in between: read again and decide again
        log.warning("gave up reconciling %s after %d conflicts", ref, RETRIES)

    def _reconcile_once(self, coords: tuple[str, str], obj: dict[str, Any], ref: inuse.Ref) -> bool:
        meta = obj["metadata"]
        name, namespace = meta["name"], meta.get("namespace")
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
        if coords == PN:
            new = conditions.podnetwork_conditions(obj, usage, now=self._now())
        else:
            pn = self.api.find(*PN, obj["spec"].get("podNetworkName", ""))
            new = conditions.attachment_conditions(obj, pn, usage, now=self._now())
        if new is None:
            return True
        was_ready = conditions.is_ready(obj)
        self.writes += 1
        updated = self.api.patch(
            *coords, name, conditions.status_patch(obj, new), namespace, subresource="status"
        )
        if not was_ready and conditions.is_ready(updated):
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
            node = self.api.find(*NODE, name)
            if node is None:
                return
            pn = self.api.find(*PN, defaultnet.node_default_name(node))
            patch = defaultnet.node_condition_patch(node, pn, now=self._now())
            if patch is None:
                return
            # The patch is a strategic merge by condition type; the store speaks JSON merge
            # patch, which replaces lists, so merge by type here and send the whole list.
            mine = {c["type"]: c for c in patch["status"]["conditions"]}
            existing = (node.get("status") or {}).get("conditions") or []
            kept = [c for c in existing if c.get("type") not in mine]
            body = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "status": {"conditions": kept + list(mine.values())},
            }
            try:
                self.api.patch(*NODE, name, body, subresource="status")
            except store_mod.Conflict:
                continue
            self.writes += 1
            return
