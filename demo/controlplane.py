"""The operators themselves, on the demo's store: the PodNetwork controller's and the bridge's
orchestrations (the bridge's Services controller included), fed by the store's watches.

On a cluster kopf turns watch events into calls of each operator's entry points
(`podnetwork.kep.controller.register`, `bridge.operator.controller.register`). Here
`Feed` makes the same calls from the store's watches: the same entry points
(`Controller.watches`, `Bridge.watches`), in kopf's order (the index of an object
before any event handler; the initial listing indexed whole before its events), and
the operators' planners decide and their appliers write, through `demo.storeapi`
instead of HTTP. Nothing of the demo decides or writes for them.

The store never makes a caller wait, so each entry point's coroutine runs to its end
inside the watch callback (`run_now`): the control plane has settled when a write
returns, as it always had in the demo. The controller's periodic flush (`Controller.tick`,
every `--inuse-message-interval` on a cluster) runs after each event: the demo shows
every InUse message at once, where a busy cluster coalesces them.

`ControlPlane.notes` narrates what the operators applied (their `report`), in the words
the demo always used.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from bridge import npwg
from bridge.operator import controller as bridge_controller
from bridge.operator import plans as bridge_plans
from bridge.operator import policies as bridge_policies
from bridge.operator import serviceslices
from demo.store import Event, EventType, Store
from demo.storeapi import StoreApi
from podnetwork.cli.handlers import Watch
from podnetwork.ground import constants
from podnetwork.ground.core import head_of
from podnetwork.kep import controller as kep_controller
from podnetwork.kep import plans as kep_plans

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def run_now(step: Awaitable[_T]) -> _T:
    """Run a coroutine that never waits to its end, here: an operator's entry point over the store.

    Raises RuntimeError if it waits after all (the store answered nothing at once): a call
    that would need the event loop has no place in a watch callback.
    """
    steps = step.__await__()
    try:
        next(steps)
    except StopIteration as done:
        result: _T = done.value
        return result
    close = getattr(steps, "close", None)
    if close is not None:
        close()
    raise RuntimeError(f"{step!r} waited: over the demo's store an operator's call ends at once")


class Feed:
    """The store's watches as kopf delivers them to one operator's entry points (`Watch`)."""

    def __init__(self, store: Store, watches: Sequence[Watch], *,
                 after: Callable[[], Awaitable[None]] | None = None,
                 seen: Callable[[Watch, Event], None] | None = None) -> None:
        self.store = store
        self.watches = list(watches)
        self.after = after
        """Run after each event, as the operator's periodic work would (the controller's `tick`)."""
        self.seen = seen
        """Told of each event before the operator handles it (the narration)."""
        self._cancel: list[Callable[[], None]] = []
        self._listing: list[tuple[Watch, Event]] | None = None

    def start(self) -> None:
        """Watch every kind; the objects the store already has arrive as kopf's initial listing."""
        listing: list[tuple[Watch, Event]] = []
        self._listing = listing
        for watch in self.watches:
            self._cancel.append(self.store.subscribe(self._watcher(watch), watch.api_version, watch.kind))
        self._listing = None
        # The operator's writes for what it listed are watch events too: delivered after it.
        with self.store.batch():
            for watch, event in listing:
                if watch.index is not None:
                    watch.index(event.object)
            for watch, event in listing:
                self._deliver(watch, None, event.object)

    def stop(self) -> None:
        for cancel in self._cancel:
            cancel()
        self._cancel.clear()

    def _watcher(self, watch: Watch) -> Callable[[Event], None]:
        def on_event(event: Event) -> None:
            self._on(watch, event)

        return on_event

    def _on(self, watch: Watch, event: Event) -> None:
        if self._listing is not None:
            self._listing.append((watch, event))
            return
        if self.seen is not None:
            self.seen(watch, event)
        if event.type != EventType.DELETED and watch.index is not None:
            watch.index(event.object)
        self._deliver(watch, event.type.value, event.object)

    def _deliver(self, watch: Watch, type_: str | None, obj: dict[str, Any]) -> None:
        head = head_of(obj)
        annotations = head.metadata.annotations or {} if head is not None else {}
        if watch.event is not None and (watch.annotation is None or watch.annotation in annotations):
            run_now(watch.event(type_, obj))
        if self.after is not None:
            run_now(self.after())


class ControlPlane:
    """The PodNetwork controller and the NPWG bridge, as the operators run them, on the store."""

    def __init__(self, store: Store, *, create_default: bool = True,
                 settings: kep_controller.ControllerSettings | None = None,
                 bridge_settings: bridge_plans.BridgeSettings | None = None,
                 on_note: Callable[[str], None] | None = None) -> None:
        """`settings` and `bridge_settings` as `podnetwork controller` and `podnetwork bridge` take
        them (default: their defaults, `create_default` as given)."""
        self.store = store
        self._note = on_note or (lambda text: log.info("%s", text))
        controller_api, bridge_api = StoreApi(store), StoreApi(store)
        controller_api.on_write = self._count
        self.controller = kep_controller.Controller(
            config=settings or kep_controller.ControllerSettings(create_default=create_default),
            api=controller_api, report=self._controller_did)
        self.bridge = bridge_controller.Bridge(config=bridge_settings or bridge_plans.BridgeSettings(),
                                               api=bridge_api, report=self._bridge_did)
        self.services = serviceslices.Services(api=StoreApi(store))
        """The bridge's Services controller (EndpointSlices of a network's addresses), beside the
        bridge's own handlers in the same operator, as `podnetwork bridge` runs it."""
        self.feeds = [Feed(store, self.controller.watches(), after=self.controller.tick, seen=self._seen),
                      Feed(store, self.bridge.watches()), Feed(store, self.services.watches())]
        self.controller_writes = 0
        """Writes the controller made so far: a steady cluster makes none (the no-hot-loop rule)."""

    def start(self) -> None:
        """Watch the store, as the operators start watching, and create the `default` PodNetwork."""
        for feed in self.feeds:
            feed.start()
        with self.store.batch():
            run_now(self.controller.setup())

    def stop(self) -> None:
        for feed in self.feeds:
            feed.stop()

    def _count(self, kind: str, verb: str, outcome: str) -> None:
        self.controller_writes += 1

    # -- narration: what the operators applied, in the demo's words ---------------------------

    def _seen(self, watch: Watch, event: Event) -> None:
        if event.type == EventType.DELETED and watch.kind == constants.PODNETWORK_KIND:
            head = head_of(event.object)
            name = head.metadata.name if head is not None else None
            self._note(f'controller: PodNetwork "{name}" is gone')

    def _controller_did(self, action: kep_controller.Applied) -> None:
        if isinstance(action, kep_plans.CreateDefault):
            again = 're-created the cluster default PodNetwork "default"'
            first = 'created the cluster default PodNetwork "default" (KEP "Default PodNetwork")'
            self._note(f"controller: {again if action.again else first}")
        elif isinstance(action, kep_plans.SetFinalizer):
            verb, word = ("added", "to") if action.adding else ("removed", "from")
            self._note(f"controller: {verb} finalizer {constants.IN_USE_FINALIZER} {word} {action.ref}")
        elif isinstance(action, kep_plans.Nudge):
            self._note(f"controller: {action.ref} turned Ready: nudged pod {action.pod} "
                       f"({constants.REQUEUED_AT_ANNOTATION}) so the scheduler retries it")

    def _bridge_did(self, key: str, action: bridge_controller.Applied) -> None:
        if isinstance(action, bridge_plans.WriteParams):
            before, want = action.before, action.desired
            if before is not None and (before.status, before.reason) == (want.status, want.reason):
                return  # only observedGeneration moved: nothing to tell
            ok = want.status == constants.ConditionStatus.TRUE
            detail = "" if ok else f" ({want.reason}: {want.message})"
            self._note(f"bridge: {action.ref[0]} {key} ParamsReady={want.status}{detail}")
        elif isinstance(action, bridge_plans.WriteSelection) and action.writes_selection:
            self._note(f"bridge: pod {key} -> {npwg.NETWORKS_ANNOTATION}: {action.selection}")
        elif isinstance(action, bridge_plans.Release):
            self._note(f"bridge: pod {key}: removed scheduling gate {constants.NPWG_SELECTION_GATE} "
                       f"without a selection: {action.why}")
        elif isinstance(action, bridge_plans.PostEvent):
            self._note(f"bridge: event on pod {key}: {action.message}")
        elif isinstance(action, bridge_policies.PostPolicyEvent):
            note = action.note
            self._note(f"bridge: event on {constants.POLICY_KIND} {key}: {note.type} {note.reason}: "
                       f"{note.message}")


__all__ = ["ControlPlane", "Feed", "run_now"]
