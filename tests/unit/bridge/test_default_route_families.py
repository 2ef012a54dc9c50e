"""isDefaultGW4/isDefaultGW6 -> `default-route` plus the families extension, and the agent's
per-family route decision (KEP-3698 Network; NPWG 4.1.2.1.9, 4.1.2.1 extensions)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge import npwg, translate
from bridge.agent.cni import plan
from bridge.agent.delegates.invoke import CNIError
from podnetwork.kep.api import Network

NS = "app"
KEY = "multinetwork.x-k8s.io/default-route-families"
V4, V6 = "10.7.0.1", "fd00:7::1"


def nad_with(ranges: list[list[dict[str, Any]]]) -> dict[str, Any]:
    config = {"cniVersion": "1.0.0", "type": "bridge", "ipam": {"type": "host-local", "ranges": ranges}}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "blue", "namespace": NS},
        "spec": {"config": json.dumps(config)},
    }


DUAL_WITH_GATEWAYS = nad_with([[{"subnet": "10.7.0.0/24", "gateway": V4}], [{"subnet": "fd00:7::/64", "gateway": V6}]])
DUAL_NO_GATEWAYS = nad_with([[{"subnet": "10.7.0.0/24"}], [{"subnet": "fd00:7::/64"}]])
V4_GATEWAY_ONLY = nad_with([[{"subnet": "10.7.0.0/24", "gateway": V4}], [{"subnet": "fd00:7::/64"}]])

PODNETWORK = {
    "apiVersion": "multinetwork.x-k8s.io/v1alpha1",
    "kind": "PodNetwork",
    "metadata": {"name": "blue"},
    "spec": {
        "provider": "multinetwork.x-k8s.io/npwg-bridge",
        "parametersRefs": [{"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": "blue", "namespace": NS}],
    },
}


def options_attachment(default_route: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "bridge.multinetwork.x-k8s.io/v1alpha1",
            "kind": "NetworkSelectionOptions",
            "metadata": {"name": "opts", "namespace": NS},
            "spec": {"default-route": default_route},
        },
        {
            "apiVersion": "multinetwork.x-k8s.io/v1alpha1",
            "kind": "PodNetworkAttachment",
            "metadata": {"name": "blue-opts", "namespace": NS},
            "spec": {
                "podNetworkName": "blue",
                "parametersRefs": [{"group": "bridge.multinetwork.x-k8s.io", "kind": "NetworkSelectionOptions", "name": "opts"}],
            },
        },
    ]


def element(flags: dict[str, bool], *objs: dict[str, Any], via_options: bool = False) -> dict[str, Any]:
    ref = {"podNetworkAttachmentName": "blue-opts"} if via_options else {"podNetworkName": "blue"}
    nets = [Network.model_validate({"podNetworkName": "default"}), Network.model_validate({**ref, **flags})]
    result = translate.translate(nets, NS, translate.Objects.from_objects([PODNETWORK, *objs]))
    (only,) = result.elements
    return only.to_json()


@pytest.mark.parametrize(
    ("nad", "flags", "route", "families"),
    [
        pytest.param(DUAL_WITH_GATEWAYS, {"isDefaultGW4": True}, [V4], None, id="v4 gateway named: plain NPWG"),
        pytest.param(DUAL_WITH_GATEWAYS, {"isDefaultGW6": True}, [V6], None, id="v6 gateway named: plain NPWG"),
        pytest.param(DUAL_WITH_GATEWAYS, {"isDefaultGW4": True, "isDefaultGW6": True}, [V4, V6], None, id="both named"),
        pytest.param(DUAL_NO_GATEWAYS, {"isDefaultGW4": True}, [], ["ipv4"], id="no gateway, v4 only: extension"),
        pytest.param(DUAL_NO_GATEWAYS, {"isDefaultGW6": True}, [], ["ipv6"], id="no gateway, v6 only: extension"),
        pytest.param(DUAL_NO_GATEWAYS, {"isDefaultGW4": True, "isDefaultGW6": True}, [], None, id="no gateway, both: [] says it"),
        pytest.param(V4_GATEWAY_ONLY, {"isDefaultGW4": True, "isDefaultGW6": True}, [V4], ["ipv4", "ipv6"], id="v4 named, both asked"),
        pytest.param(V4_GATEWAY_ONLY, {"isDefaultGW6": True}, [], ["ipv6"], id="v4 named, v6 asked"),
    ],
)
def test_default_route_carries_the_requested_families_only_when_npwg_alone_would_say_otherwise(
    nad: dict[str, Any], flags: dict[str, bool], route: list[str], families: list[str] | None
) -> None:
    out = element(flags, nad)
    assert out["default-route"] == route
    assert out.get(KEY) == families


@pytest.mark.parametrize(
    ("flags", "given", "families"),
    [
        pytest.param({"isDefaultGW4": True}, [V4], None, id="options match the flag"),
        pytest.param({"isDefaultGW4": True}, [V4, V6], ["ipv4"], id="options name more families than asked"),
        pytest.param({"isDefaultGW4": True, "isDefaultGW6": True}, [V6], ["ipv4", "ipv6"], id="options name fewer"),
        pytest.param({"isDefaultGW6": True}, [], ["ipv6"], id="options empty, one family"),
        pytest.param({"isDefaultGW4": True, "isDefaultGW6": True}, [], None, id="options empty, both"),
    ],
)
def test_options_default_route_is_kept_and_the_families_follow_the_flags(
    flags: dict[str, bool], given: list[str], families: list[str] | None
) -> None:
    out = element(flags, DUAL_WITH_GATEWAYS, *options_attachment(given), via_options=True)
    assert out["default-route"] == given
    assert out.get(KEY) == families


def test_the_extension_survives_the_annotation_round_trip_and_is_an_npwg_extension_key() -> None:
    out = element({"isDefaultGW4": True}, DUAL_NO_GATEWAYS)
    (parsed,) = npwg.parse_selection(json.dumps([out]), NS)
    assert parsed.extensions == {KEY: ["ipv4"]}
    assert translate.DEFAULT_ROUTE_FAMILIES_KEY == KEY


def test_a_family_without_a_named_gateway_is_warned_about_by_family() -> None:
    nets = [Network.model_validate({"podNetworkName": "default"}),
            Network.model_validate({"podNetworkName": "blue", "isDefaultGW4": True, "isDefaultGW6": True})]
    result = translate.translate(nets, NS, translate.Objects.from_objects([PODNETWORK, V4_GATEWAY_ONLY]))
    assert [w for w in result.warnings if "names no IPv6 gateway" in w]
    assert not [w for w in result.warnings if "IPv4" in w]


DUAL_RESULT = {"ips": [{"address": "10.7.0.5/24", "gateway": "10.7.0.1"}, {"address": "fd00:7::5/64", "gateway": "fd00:7::1"}]}
V4_RESULT = {"ips": [{"address": "10.7.0.5/24", "gateway": "10.7.0.1"}]}


@pytest.mark.parametrize(
    ("listed", "families", "result", "moved"),
    [
        pytest.param([], (4,), DUAL_RESULT, ["10.7.0.1"], id="[] + ipv4: only the result's v4 gateway"),
        pytest.param([], (6,), DUAL_RESULT, ["fd00:7::1"], id="[] + ipv6: only the result's v6 gateway"),
        pytest.param([], None, DUAL_RESULT, ["10.7.0.1", "fd00:7::1"], id="[] alone: every family of the result"),
        pytest.param(["10.9.0.1"], None, DUAL_RESULT, ["10.9.0.1"], id="listed v4 alone: v6 stays"),
        pytest.param(["fd00:9::1"], None, DUAL_RESULT, ["fd00:9::1"], id="listed v6 alone: v4 stays"),
        pytest.param(["10.9.0.1"], (4, 6), DUAL_RESULT, ["10.9.0.1", "fd00:7::1"], id="listed v4, both asked: v6 from result"),
        pytest.param(["10.9.0.1", "fd00:9::1"], (4,), DUAL_RESULT, ["10.9.0.1"], id="listed both, v4 asked"),
    ],
)
def test_the_agent_moves_the_default_route_of_the_requested_families_only(
    listed: list[str], families: tuple[int, ...] | None, result: dict[str, Any], moved: list[str]
) -> None:
    assert plan.route_gateways(listed, families, result) == moved
    flushed = {cmd[1] for cmd in plan.default_route_commands("net1", moved) if "flush" in cmd}
    assert flushed == {f"-{f}" for f in (families or {4 if "." in gw else 6 for gw in moved})}


@pytest.mark.parametrize(
    ("listed", "families", "result", "needle"),
    [
        pytest.param([], (6,), V4_RESULT, "no IPv6 gateway", id="asked family missing"),
        pytest.param([], None, {"ips": [{"address": "10.7.0.5/24"}]}, "no gateway", id="nothing at all"),
    ],
)
def test_a_requested_default_route_without_a_gateway_is_a_cni_error(
    listed: list[str], families: tuple[int, ...] | None, result: dict[str, Any], needle: str
) -> None:
    with pytest.raises(CNIError, match=needle):
        plan.route_gateways(listed, families, result)


@pytest.mark.parametrize("value", [[], ["ipv5"], "ipv4", [4], None])
def test_the_families_extension_is_parsed_strictly(value: Any) -> None:
    if value is None:
        assert plan.route_families(None) is None
        return
    with pytest.raises(CNIError, match="invalid default-route families"):
        plan.route_families(value)


def test_the_families_extension_names_are_normalised_to_ip_versions() -> None:
    assert plan.route_families(["ipv6", "ipv4", "ipv6"]) == (4, 6)
