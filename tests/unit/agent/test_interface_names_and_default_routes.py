"""The agent's pure ADD decisions: the interface name of each attachment, the gateways a
result offers, and the commands that move the default route (NPWG 4.2.1, 4.1.2.1.5, 4.1.2.1.9)."""

from __future__ import annotations

import pytest

from bridge.agent.cni import plan
from bridge.agent.delegates.invoke import CNIError


def test_unnamed_attachments_get_net1_net2_skipping_names_the_pod_asked_for() -> None:
    assert plan.interface_names("eth0", [None, "net2", None, None]) == ["net1", "net2", "net3", "net4"]
    assert plan.interface_names("eth0", ["net1", None]) == ["net1", "net2"]
    assert plan.interface_names("net1", [None]) == ["net2"]


@pytest.mark.parametrize("requested", [["eth0"], ["data", "data"]])
def test_an_interface_name_used_twice_fails_the_add(requested: list[str | None]) -> None:
    with pytest.raises(CNIError) as caught:
        plan.interface_names("eth0", requested)
    assert "4.1.2.1.5" in caught.value.details


@pytest.mark.parametrize("bad", ["a/b", "x" * 16, "has space", "..", "\udfff", "net\ud800"])
def test_an_invalid_interface_name_fails_the_add(bad: str) -> None:
    with pytest.raises(CNIError) as caught:
        plan.interface_names("eth0", [bad])
    assert caught.value.code == 4 and caught.value.msg == "invalid interface name"


def test_a_lone_surrogate_is_named_in_the_error() -> None:
    with pytest.raises(CNIError) as caught:
        plan.interface_names("eth0", ["\udfff"])
    assert "lone surrogate U+DFFF" in caught.value.details


def test_default_route_commands_replace_each_family_with_the_given_gateways_in_order() -> None:
    assert plan.default_route_commands("net1", ["10.0.0.1", "fd00::1", "10.0.0.254"]) == [
        ["ip", "-4", "route", "flush", "exact", "0.0.0.0/0"],
        ["ip", "-4", "route", "add", "default", "via", "10.0.0.1", "dev", "net1"],
        ["ip", "-4", "route", "add", "default", "via", "10.0.0.254", "dev", "net1", "metric", "1"],
        ["ip", "-6", "route", "flush", "exact", "::/0"],
        ["ip", "-6", "route", "add", "default", "via", "fd00::1", "dev", "net1"],
    ]
    with pytest.raises(CNIError):
        plan.default_route_commands("net1", ["gateway"])


def test_gateways_come_from_the_results_ips_else_its_default_routes() -> None:
    assert plan.result_gateways({"ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1"}]}) == ["10.1.0.1"]
    assert plan.result_gateways({"ips": [{"address": "10.1.0.2/24"}], "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.9"}]}) == ["10.1.0.9"]
    assert plan.result_gateways(None) == []


def test_4_1_2_1_9_an_empty_default_route_finds_the_gateway_of_a_pre_0_3_0_result() -> None:
    # A delegate speaking CNI 0.2.0 reports its addresses in ip4/ip6, gateway included.
    legacy = {
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1"},
        "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1"},
    }
    assert plan.result_gateways(legacy) == ["10.1.0.1", "fd00::1"]


def test_4_1_2_1_9_a_pre_0_3_0_result_without_gateway_offers_its_default_routes() -> None:
    legacy = {"cniVersion": "0.2.0", "ip4": {"ip": "10.1.0.5/24", "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.254"}]}}
    assert plan.result_gateways(legacy) == ["10.1.0.254"]
