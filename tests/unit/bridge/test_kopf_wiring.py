"""`register` only wires: each kopf handler of the bridge calls the one entry point its `watches()`
names for that kind (what the demo's store feed calls too), and there is no other."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from bridge.operator import controller, serviceslices
from podnetwork.ground import constants
from tests.unit.wiring_support import Recorder, wired


@dataclasses.dataclass
class Spy(controller.Bridge):
    """The bridge, its entry points recording their calls instead of acting."""

    calls: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def index_podnetwork(self, body: Mapping[str, Any]) -> None:
        self.calls.append(("index_podnetwork", body))

    def index_attachment(self, body: Mapping[str, Any]) -> None:
        self.calls.append(("index_attachment", body))

    def index_nad(self, body: Mapping[str, Any]) -> None:
        self.calls.append(("index_nad", body))

    def index_options(self, body: Mapping[str, Any]) -> None:
        self.calls.append(("index_options", body))

    async def podnetwork_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("podnetwork_event", (type, body)))

    async def attachment_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("attachment_event", (type, body)))

    async def nad_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("nad_event", (type, body)))

    async def options_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("options_event", (type, body)))

    async def pod_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("pod_event", (type, body)))

    async def policy_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("policy_event", (type, body)))


def test_every_kopf_handler_calls_the_entry_point_its_watch_names_and_no_other() -> None:
    bridge = Spy()
    meter = Recorder()
    controller.register(kopf.OperatorRegistry(), bridge, meter)
    watches = bridge.watches()
    assert {name: plural for name, (plural, _) in meter.handlers.items()} == wired(watches)
    for watch in watches:
        body = {"metadata": {"name": f"a-{watch.plural}", "namespace": "ns"}}
        if watch.index is not None:
            bridge.calls.clear()
            meter.handlers[watch.index_handler][1](body=body)
            assert bridge.calls == [(watch.index.__name__, body)]
        if watch.event is not None:
            bridge.calls.clear()
            asyncio.run(meter.handlers[watch.event_handler][1](type="DELETED", body=body))
            assert bridge.calls == [(watch.event.__name__, ("DELETED", body))]


def test_the_pod_watch_sees_only_pods_that_name_their_networks_as_kopf_s_filter_does() -> None:
    (pods,) = [w for w in controller.Bridge().watches() if w.plural == "pods"]
    assert pods.annotation == constants.NETWORKS_ANNOTATION and pods.index is None


def test_policies_are_watched_by_an_event_handler_only_so_a_missing_crd_holds_no_other_handler() -> None:
    (mnp,) = [w for w in controller.Bridge().watches() if w.plural == constants.POLICY_PLURAL]
    assert mnp.index is None and mnp.event is not None and mnp.api_version == constants.POLICY_API_VERSION


@dataclasses.dataclass
class ServicesSpy(serviceslices.Services):
    """The Services controller, its entry points recording their calls instead of acting."""

    calls: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        for watch in serviceslices.Services.watches(self):
            for entry in (watch.index, watch.event):
                if entry is not None:
                    setattr(self, entry.__name__, self._recorder(entry.__name__, entry is watch.event))

    def _recorder(self, name: str, is_event: bool) -> Any:
        if is_event:
            async def event(type: str | None, body: Mapping[str, Any]) -> None:
                self.calls.append((name, (type, body)))
            event.__name__ = name
            return event

        def index(body: Mapping[str, Any]) -> None:
            self.calls.append((name, body))
        index.__name__ = name
        return index


def test_every_kopf_handler_of_the_services_controller_calls_the_entry_point_its_watch_names() -> None:
    spy = ServicesSpy()
    meter = Recorder()
    serviceslices.register(kopf.OperatorRegistry(), spy, meter)
    watches = spy.watches()
    assert {name: plural for name, (plural, _) in meter.handlers.items()} == wired(watches)
    for watch in watches:
        body = {"metadata": {"name": f"a-{watch.plural}", "namespace": "ns"}}
        assert watch.index is not None and watch.event is not None
        spy.calls.clear()
        meter.handlers[watch.index_handler][1](body=body)
        assert spy.calls == [(watch.index.__name__, body)]
        spy.calls.clear()
        asyncio.run(meter.handlers[watch.event_handler][1](type="DELETED", body=body))
        assert spy.calls == [(watch.event.__name__, ("DELETED", body))]


def test_no_change_detecting_or_spawning_handler_so_kopf_s_diff_base_may_be_skipped() -> None:
    """handlers.NoEssence (which the startup handler installs) is only right while kopf's per-event
    diff feeds no handler: none of on.create/update/resume/delete/field, daemon or timer."""
    registry = kopf.OperatorRegistry()
    controller.register(registry, Spy(), Recorder())
    serviceslices.register(registry, ServicesSpy(), Recorder())
    assert registry._watching.get_all_handlers()
    assert not registry._changing.get_all_handlers() and not registry._spawning.get_all_handlers()
