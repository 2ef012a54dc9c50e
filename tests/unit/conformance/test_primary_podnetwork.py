"""What the PrimaryPodNetworkExplicitList test accepts of a pod that lists one PodNetwork alone."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.kep.tests.primary import explicit_list_problem

BLUE_STATUS = [{"name": "default/blue", "interface": "eth0", "ips": ["10.1.0.5"], "default": True}]
BLUE_IPS = [{"ip": "10.1.0.5", "podNetwork": "blue", "interfaceName": "eth0"}]


def test_exactly_the_listed_network_marked_default_passes() -> None:
    assert explicit_list_problem("blue", BLUE_STATUS, BLUE_IPS, "10.1.0.5") is None
    assert explicit_list_problem("blue", BLUE_STATUS, BLUE_IPS, None) is None


@pytest.mark.parametrize(("status", "ips", "pod_ip", "says"), [
    # Multus's behaviour: the cluster default network first, blue second.
    ([{"name": "cluster", "interface": "eth0", "default": True}, {**BLUE_STATUS[0], "default": False}],
     BLUE_IPS, "10.1.0.5", "must get exactly that network"),
    ([{**BLUE_STATUS[0], "default": False}], BLUE_IPS, "10.1.0.5", "marked default"),
    (BLUE_STATUS, [*BLUE_IPS, {"ip": "10.0.0.9", "podNetwork": "default"}], "10.1.0.5", "must name it"),
    (BLUE_STATUS, BLUE_IPS, "10.0.0.9", "status.podIP 10.0.0.9 is not an address on blue"),
])
def test_another_network_or_a_wrong_default_is_named(status: list[dict[str, Any]], ips: list[dict[str, Any]],
                                                      pod_ip: str, says: str) -> None:
    problem = explicit_list_problem("blue", status, ips, pod_ip)
    assert problem is not None and says in problem
