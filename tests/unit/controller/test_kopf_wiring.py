"""`register` only wires: each kopf handler of the controller calls the one entry point its
`watches()` names for that kind (what the demo's store feed calls too), and there is no other."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf
import pytest

from podnetwork.cli import handlers
from podnetwork.kep import controller
from tests.unit.wiring_support import Recorder, wired


@dataclasses.dataclass
class Spy(controller.Controller):
    """The controller, its entry points recording their calls instead of acting."""

    calls: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def index_pod(self, body: Mapping[str, Any]) -> None:
        self.calls.append(("index_pod", body))

    def index_namespace(self, body: Mapping[str, Any]) -> None:
        self.calls.append(("index_namespace", body))

    def index_podnetwork(self, body: Mapping[str, Any]) -> None:
        self.calls.append(("index_podnetwork", body))

    def index_attachment(self, body: Mapping[str, Any]) -> None:
        self.calls.append(("index_attachment", body))

    async def pod_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("pod_event", (type, body)))

    async def namespace_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("namespace_event", (type, body)))

    async def podnetwork_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("podnetwork_event", (type, body)))

    async def attachment_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("attachment_event", (type, body)))

    async def node_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        self.calls.append(("node_event", (type, body)))


@pytest.mark.parametrize("profiles", [True, False])
def test_every_kopf_handler_calls_the_entry_point_its_watch_names_and_no_other(profiles: bool) -> None:
    ctl = Spy(config=controller.ControllerSettings(namespace_profiles=profiles))
    meter = Recorder()
    controller.register(kopf.OperatorRegistry(), ctl, meter)
    watches = ctl.watches()
    assert {name: plural for name, (plural, _) in meter.handlers.items()} == wired(watches)
    for watch in watches:
        body = {"metadata": {"name": f"a-{watch.plural}", "namespace": "ns"}}
        if watch.index is not None:
            ctl.calls.clear()
            meter.handlers[watch.index_handler][1](body=body, name="x", namespace="ns")
            assert ctl.calls == [(watch.index.__name__, body)]
        if watch.event is not None:
            ctl.calls.clear()
            asyncio.run(meter.handlers[watch.event_handler][1](type="MODIFIED", body=body, name="x"))
            assert ctl.calls == [(watch.event.__name__, ("MODIFIED", body))]


@pytest.mark.parametrize("profiles", [True, False])
def test_no_change_detecting_or_spawning_handler_so_kopf_s_diff_base_may_be_skipped(profiles: bool) -> None:
    """handlers.NoEssence (which the startup handler installs) is only right while kopf's per-event
    diff feeds no handler: none of on.create/update/resume/delete/field, daemon or timer."""
    registry = kopf.OperatorRegistry()
    controller.register(registry, Spy(config=controller.ControllerSettings(namespace_profiles=profiles)), Recorder())
    assert registry._watching.get_all_handlers()
    assert not registry._changing.get_all_handlers() and not registry._spawning.get_all_handlers()


def test_the_startup_handler_installs_the_essence_free_diff_base() -> None:
    registry = kopf.OperatorRegistry()
    ctl = Spy(config=controller.ControllerSettings())
    controller.register(registry, ctl, Recorder())
    settings = kopf.OperatorSettings()
    (startup,) = [h for h in registry._activities.get_all_handlers() if h.activity.value == "startup"]

    async def run() -> None:
        await startup.fn(settings=settings)
        await ctl.stop_tasks()

    asyncio.run(run())
    assert isinstance(settings.persistence.diffbase_storage, handlers.NoEssence)
    assert settings.persistence.diffbase_storage.build(body=kopf.Body({"spec": {"a": 1}})) == {}
