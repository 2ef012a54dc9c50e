"""Review findings in the agent's pure ADD decisions (bridge.cni.plan)."""

from __future__ import annotations

from bridge.cni import plan


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
