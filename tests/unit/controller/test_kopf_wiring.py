"""`register` only wires: each kopf handler of the controller calls the one entry point its
`watches()` names for that kind (what the demo's store feed calls too), and there is no other."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf
import pytest

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
