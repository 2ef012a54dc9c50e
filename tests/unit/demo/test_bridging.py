"""The bridge on the demo's store (`demo.controlplane`): ParamsReady, translation once Ready, and pod IPs
from network-status, by the operator's own orchestration."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bridge import npwg
from demo.controlplane import ControlPlane
from demo.store import Store
from podnetwork.ground import constants

PN = (constants.API_VERSION, constants.PODNETWORK_KIND)
NAD = (npwg.NAD_API_VERSION, npwg.NAD_KIND)
BRIDGE_CONF = {"cniVersion": "1.0.0", "name": "blue", "plugins": [{"type": "bridge", "bridge": "br-blue"}]}


def bridge_pn(name: str) -> dict[str, Any]:
    return {
        "apiVersion": PN[0],
        "kind": PN[1],
        "metadata": {"name": name},
        "spec": {
            "enabled": True,
            "provider": constants.BRIDGE_PROVIDER,
            "parametersRefs": [
                {"group": npwg.NAD_GROUP, "kind": npwg.NAD_PLURAL, "name": name, "namespace": "demo"}
            ],
        },
    }


def nad(name: str, config: dict[str, Any] | str = BRIDGE_CONF) -> dict[str, Any]:
    text = config if isinstance(config, str) else json.dumps(config)
    return {
        "apiVersion": NAD[0],
        "kind": NAD[1],
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"config": text},
    }


def pod(name: str, nets: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "demo",
            "annotations": {constants.NETWORKS_ANNOTATION: json.dumps(nets)},
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def cond(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), {})


@pytest.fixture
def api() -> Iterator[Store]:
    api = Store()
    control = ControlPlane(api)
    control.start()
    yield api
    control.stop()


def test_params_ready_follows_the_nad_appearing_and_breaking(api: Store) -> None:
    api.create(bridge_pn("blue"))
    blue = api.get(*PN, "blue")
    assert cond(blue, "ParamsReady")["reason"] == "ParametersNotFound"
    assert cond(blue, "Ready")["reason"] == "ParamsNotReady"
    api.create(nad("blue"))
    blue = api.get(*PN, "blue")
    assert cond(blue, "ParamsReady")["status"] == "True"
    assert cond(blue, "Ready")["status"] == "True"
    api.patch(
        *NAD,
        "blue",
        {"spec": {"config": json.dumps({**BRIDGE_CONF, "plugins": [{"type": "../sh"}]})}},
        "demo",
    )
    blue = api.get(*PN, "blue")
    assert cond(blue, "ParamsReady")["reason"] == "InvalidParameters"
    assert cond(blue, "Ready")["status"] == "False"


def test_other_providers_objects_are_left_alone(api: Store) -> None:
    api.create(
        {
            "apiVersion": PN[0],
            "kind": PN[1],
            "metadata": {"name": "other"},
            "spec": {
                "enabled": True,
                "provider": "example.com/other",
                "parametersRefs": [{"group": "example.com", "kind": "Thing", "name": "x"}],
            },
        }
    )
    assert cond(api.get(*PN, "other"), "ParamsReady") == {}


def test_the_selection_is_written_only_once_every_reference_is_ready(api: Store) -> None:
    api.create(bridge_pn("blue"))
    api.create(pod("p", [{"podNetworkName": "default"}, {"podNetworkName": "blue", "interfaceName": "b0"}]))
    annotations = api.get("v1", "Pod", "p", "demo")["metadata"]["annotations"]
    assert npwg.NETWORKS_ANNOTATION not in annotations
    api.create(nad("blue"))
    annotations = api.get("v1", "Pod", "p", "demo")["metadata"]["annotations"]
    assert json.loads(annotations[npwg.NETWORKS_ANNOTATION]) == [
        {"name": "blue", "namespace": "demo", "interface": "b0"}
    ]


def test_a_hand_written_selection_is_not_overwritten(api: Store) -> None:
    api.create(bridge_pn("blue"))
    api.create(nad("blue"))
    mine = pod("p", [{"podNetworkName": "blue"}])
    mine["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION] = "other/net"
    api.create(mine)
    assert (
        api.get("v1", "Pod", "p", "demo")["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION] == "other/net"
    )


def test_network_status_becomes_pod_ips_per_podnetwork(api: Store) -> None:
    api.create(bridge_pn("blue"))
    api.create(nad("blue"))
    api.create(pod("p", [{"podNetworkName": "default"}, {"podNetworkName": "blue", "interfaceName": "b0"}]))
    status = [
        {"name": "cluster", "interface": "eth0", "ips": ["198.18.0.2/24"], "default": True},
        {"name": "demo/blue", "interface": "b0", "ips": ["198.18.1.2/24", "fd00::2/64"]},
    ]
    api.patch(
        "v1",
        "Pod",
        "p",
        {"metadata": {"annotations": {npwg.NETWORK_STATUS_ANNOTATION: json.dumps(status)}}},
        "demo",
    )
    ips = json.loads(
        api.get("v1", "Pod", "p", "demo")["metadata"]["annotations"][constants.POD_IPS_ANNOTATION]
    )
    assert ips == [
        {"ip": "198.18.0.2", "podNetwork": "default", "interfaceName": "eth0"},
        {"ip": "198.18.1.2", "podNetwork": "blue", "interfaceName": "b0"},
        {"ip": "fd00::2", "podNetwork": "blue", "interfaceName": "b0"},
    ]


def test_unreadable_network_status_writes_no_pod_ips_and_breaks_nothing(api: Store) -> None:
    api.create(bridge_pn("blue"))
    api.create(nad("blue"))
    api.create(pod("p", [{"podNetworkName": "blue"}]))
    api.patch(
        "v1", "Pod", "p", {"metadata": {"annotations": {npwg.NETWORK_STATUS_ANNOTATION: "{not json"}}}, "demo"
    )
    assert constants.POD_IPS_ANNOTATION not in api.get("v1", "Pod", "p", "demo")["metadata"]["annotations"]
    assert api.callback_errors == []
