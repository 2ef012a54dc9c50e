"""The PodNetwork controller on the demo's store (`demo.controlplane`): store events drive the operator's
own orchestration to a steady state, settled when each write returns."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from demo.controlplane import ControlPlane, run_now
from demo.store import Store
from podnetwork.ground import constants

PN = (constants.API_VERSION, constants.PODNETWORK_KIND)
PNA = (constants.API_VERSION, constants.ATTACHMENT_KIND)
FIN = constants.IN_USE_FINALIZER


def pn(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": PN[0], "kind": PN[1], "metadata": {"name": name}, "spec": {"enabled": True, **spec}}


def pna(name: str, network: str, ns: str = "demo") -> dict[str, Any]:
    return {
        "apiVersion": PNA[0],
        "kind": PNA[1],
        "metadata": {"name": name, "namespace": ns},
        "spec": {"podNetworkName": network},
    }


def pod(
    name: str, nets: list[dict[str, Any]] | None, ns: str = "demo", node: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if nets is not None:
        meta["annotations"] = {constants.NETWORKS_ANNOTATION: json.dumps(nets)}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return next((c for c in (obj or {}).get("status", {}).get("conditions", []) if c["type"] == type_), {})


@pytest.fixture
def api() -> Store:
    return Store()


@pytest.fixture
def controller(api: Store) -> Iterator[ControlPlane]:
    ctl = ControlPlane(api)
    ctl.start()
    yield ctl
    ctl.stop()


def test_start_creates_the_default_podnetwork_and_it_turns_ready(api: Store, controller: ControlPlane) -> None:
    default = api.get(*PN, constants.DEFAULT_PODNETWORK)
    assert cond(default, "Ready")["status"] == "True"
    assert cond(default, "Ready")["observedGeneration"] == 1


def test_default_creation_can_be_disabled(api: Store) -> None:
    ctl = ControlPlane(api, create_default=False)
    ctl.start()
    assert api.find(*PN, constants.DEFAULT_PODNETWORK) is None


def test_a_disabled_podnetwork_is_not_ready_and_recovers_when_enabled(
    api: Store, controller: ControlPlane
) -> None:
    api.create(pn("blue", enabled=False))
    assert cond(api.get(*PN, "blue"), "Ready")["reason"] == "AdministrativelyDisabled"
    api.patch(*PN, "blue", {"spec": {"enabled": True}})
    ready = cond(api.get(*PN, "blue"), "Ready")
    assert ready["status"] == "True" and ready["observedGeneration"] == 2


def test_params_without_params_ready_keep_a_podnetwork_not_ready(api: Store, controller: ControlPlane) -> None:
    api.create(pn("blue", parametersRefs=[{"group": "g", "kind": "k", "name": "n"}]))
    assert cond(api.get(*PN, "blue"), "Ready")["reason"] == "ParamsNotReady"
    # The provider reports ParamsReady; the controller follows without any other event.
    api.patch(
        *PN,
        "blue",
        {
            "status": {
                "conditions": [
                    *api.get(*PN, "blue")["status"]["conditions"],
                    {
                        "type": "ParamsReady",
                        "status": "True",
                        "reason": "Ok",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    },
                ]
            }
        },
        subresource="status",
    )
    assert cond(api.get(*PN, "blue"), "Ready")["status"] == "True"


def test_attachment_follows_its_podnetwork(api: Store, controller: ControlPlane) -> None:
    api.create(pna("port", "blue"))
    assert "not found" in cond(api.get(*PNA, "port", "demo"), "Ready")["message"]
    api.create(pn("blue"))
    assert cond(api.get(*PNA, "port", "demo"), "Ready")["status"] == "True"
    api.patch(*PN, "blue", {"spec": {"enabled": False}})
    assert cond(api.get(*PNA, "port", "demo"), "Ready")["reason"] == "PodNetworkNotReady"


def test_finalizer_holds_a_deleted_podnetwork_until_its_last_pod_goes(
    api: Store, controller: ControlPlane
) -> None:
    api.create(pn("blue"))
    api.create(pod("a", [{"podNetworkName": "blue"}], node="n1"))
    api.create(pod("b", [{"podNetworkName": "blue"}], node="n1"))
    assert FIN in api.get(*PN, "blue")["metadata"]["finalizers"]
    assert cond(api.get(*PN, "blue"), "InUse")["message"] == "in use by 2 pods: demo/a, demo/b"
    api.delete(*PN, "blue")
    assert api.get(*PN, "blue")["metadata"]["deletionTimestamp"]
    api.delete("v1", "Pod", "a", "demo")
    assert api.find(*PN, "blue") is not None
    api.delete("v1", "Pod", "b", "demo")
    assert api.find(*PN, "blue") is None


def test_terminal_pods_release_their_networks(api: Store, controller: ControlPlane) -> None:
    api.create(pn("blue"))
    api.create(pod("a", [{"podNetworkName": "blue"}], node="n1"))
    api.patch("v1", "Pod", "a", {"status": {"phase": "Succeeded"}}, "demo", subresource="status")
    blue = api.get(*PN, "blue")
    assert FIN not in (blue["metadata"].get("finalizers") or [])
    assert cond(blue, "InUse")["status"] == "False"


def test_attachment_keeps_its_podnetwork_and_pods_keep_the_attachment(
    api: Store, controller: ControlPlane
) -> None:
    api.create(pn("blue"))
    api.create(pna("port", "blue"))
    api.create(pod("a", [{"podNetworkAttachmentName": "port"}], node="n1"))
    assert FIN in api.get(*PNA, "port", "demo")["metadata"]["finalizers"]
    api.delete(*PNA, "port", "demo")
    assert api.find(*PNA, "port", "demo") is not None
    api.delete("v1", "Pod", "a", "demo")
    assert api.find(*PNA, "port", "demo") is None
    assert FIN not in (api.get(*PN, "blue")["metadata"].get("finalizers") or [])


def test_turning_ready_nudges_unscheduled_pods_only(api: Store, controller: ControlPlane) -> None:
    api.create(pod("waiting", [{"podNetworkName": "red"}]))
    api.create(pod("placed", [{"podNetworkName": "red"}], node="n1"))
    api.create(pn("red"))
    waiting = api.get("v1", "Pod", "waiting", "demo")["metadata"]["annotations"]
    placed = api.get("v1", "Pod", "placed", "demo")["metadata"]["annotations"]
    assert constants.REQUEUED_AT_ANNOTATION in waiting
    assert constants.REQUEUED_AT_ANNOTATION not in placed


def test_nodes_report_default_network_readiness_and_keep_other_conditions(
    api: Store, controller: ControlPlane
) -> None:
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    api.patch(
        "v1",
        "Node",
        "n1",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        subresource="status",
    )
    node = api.get("v1", "Node", "n1")
    assert cond(node, "DefaultPodNetworkReady")["status"] == "True"
    assert cond(node, "Ready")["status"] == "True"
    api.patch(*PN, constants.DEFAULT_PODNETWORK, {"spec": {"enabled": False}})
    assert cond(api.get("v1", "Node", "n1"), "DefaultPodNetworkReady")["status"] == "False"
    assert cond(api.get("v1", "Node", "n1"), "Ready")["status"] == "True"


def test_the_default_podnetwork_is_recreated_after_a_delete(api: Store, controller: ControlPlane) -> None:
    api.delete(*PN, constants.DEFAULT_PODNETWORK)
    again = api.get(*PN, constants.DEFAULT_PODNETWORK)
    assert not again["metadata"].get("deletionTimestamp")
    assert cond(again, "Ready")["status"] == "True"


def test_a_steady_cluster_makes_no_writes(api: Store, controller: ControlPlane) -> None:
    api.create(pn("blue"))
    api.create(pna("port", "blue"))
    api.create(pod("a", [{"podNetworkName": "blue"}], node="n1"))
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    before = controller.controller_writes
    version = api.resource_version
    api.patch("v1", "Node", "n1", {"metadata": {"labels": {"x": "y"}}})
    api.patch(*PN, "blue", {"metadata": {"labels": {"x": "y"}}})
    api.patch("v1", "Pod", "a", {"metadata": {"labels": {"x": "y"}}}, "demo")
    assert controller.controller_writes == before
    assert int(api.resource_version) == int(version) + 3  # only our three patches


def test_objects_stored_before_the_control_plane_starts_are_reconciled_as_kopf_lists_them(api: Store) -> None:
    # kopf indexes its initial listing whole before any event handler runs; the operators'
    # writes for listed objects are then delivered as watch events, after the listing.
    api.create(pn("blue"))
    api.create(pna("port", "blue"))
    api.create(pod("a", [{"podNetworkAttachmentName": "port"}], node="n1"))
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    ctl = ControlPlane(api)
    ctl.start()
    ctl.stop()
    assert api.callback_errors == []
    assert cond(api.get(*PN, "blue"), "InUse")["message"] == "in use by 1 attachment: pna demo/port"
    assert FIN in api.get(*PNA, "port", "demo")["metadata"]["finalizers"]
    assert cond(api.get("v1", "Node", "n1"), "DefaultPodNetworkReady")["status"] == "True"


def test_an_operator_call_that_would_wait_is_an_error_not_an_event_half_handled() -> None:
    async def waits() -> None:
        await asyncio.sleep(0)

    async def ends() -> str:
        return "done"

    assert run_now(ends()) == "done"
    with pytest.raises(RuntimeError, match="waited: over the demo's store an operator's call ends at once"):
        run_now(waits())
