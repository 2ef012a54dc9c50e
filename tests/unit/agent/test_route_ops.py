"""The default-route decision as typed steps (`plan.RouteOp`), before any executor runs them."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from bridge.agent.cni import plan
from bridge.agent.delegates.invoke import CNIError
from bridge.agent.netns.routes import RouteAction, RouteOp

FLUSH, ADD = RouteAction.FLUSH_DEFAULT, RouteAction.ADD_DEFAULT


def test_each_family_is_flushed_then_given_its_gateways_in_order_with_rising_metrics() -> None:
    assert plan.default_route_ops("net1", ["10.0.0.1", "fd00::1", "10.0.0.254"]) == [
        RouteOp(4, FLUSH),
        RouteOp(4, ADD, "10.0.0.1", "net1"),
        RouteOp(4, ADD, "10.0.0.254", "net1", metric=1),
        RouteOp(6, FLUSH),
        RouteOp(6, ADD, "fd00::1", "net1"),
    ]


def test_a_family_without_gateways_gets_no_step_at_all() -> None:
    ops = plan.default_route_ops("net2", ["fd00:1::1"])
    assert {op.family for op in ops} == {6}


def test_each_step_names_the_ip_command_with_the_same_effect() -> None:
    assert RouteOp(6, FLUSH).argv() == ["ip", "-6", "route", "flush", "exact", "::/0"]
    assert RouteOp(4, ADD, "10.1.0.1", "eth1", metric=3).argv() == [
        "ip", "-4", "route", "add", "default", "via", "10.1.0.1", "dev", "eth1", "metric", "3",
    ]
    gateways = ["10.0.0.1", "fd00::1", "10.0.0.254"]
    assert [op.argv() for op in plan.default_route_ops("x", gateways)] == plan.default_route_commands("x", gateways)


def test_a_gateway_that_is_no_address_is_a_cni_error() -> None:
    with pytest.raises(CNIError) as caught:
        plan.default_route_ops("net1", ["10.0.0.1", "gateway"])
    assert "'gateway' is not an IP address" in caught.value.details


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        pytest.param({"family": 4, "action": ADD, "ifname": "net1"}, "needs a gateway", id="add without gateway"),
        pytest.param({"family": 4, "action": ADD, "gateway": "10.0.0.1"}, "needs a gateway and an interface", id="add without interface"),
        pytest.param({"family": 6, "action": ADD, "gateway": "10.0.0.1", "ifname": "net1"}, "not an IPv6 address", id="family mismatch"),
        pytest.param({"family": 4, "action": ADD, "gateway": "10.0.0.1", "ifname": "n", "metric": -1}, "negative", id="negative metric"),
        pytest.param({"family": 4, "action": FLUSH, "gateway": "10.0.0.1"}, "takes no gateway", id="flush with gateway"),
        pytest.param({"family": 4, "action": FLUSH, "metric": 2}, "takes no gateway", id="flush with metric"),
    ],
)
def test_a_step_that_cannot_mean_anything_is_refused_when_made(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        RouteOp(**kwargs)


def test_the_agent_imports_no_pyroute2() -> None:
    # ~6.6 MB of RSS and ~55 ms (docs/benchmarks.md): routes and the address watch speak
    # rtnetlink through `bridge.agent.netns.netlink` (the stdlib); a move in a real namespace without
    # pyroute2 is tests/cni/test_default_routes_over_netlink.py.
    probe = (
        "import sys, bridge.agent.daemon.command, bridge.agent.daemon.agent, bridge.agent.daemon.server, bridge.agent.netns.routes, "
        "bridge.agent.pods.addresswatch; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyroute2'))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_namespace_that_cannot_be_entered_is_said_so_without_pyroute2() -> None:
    probe = (
        "import asyncio, sys; sys.modules['pyroute2'] = None\n"  # as if it were not installed
        "from bridge.agent.cni import plan\nfrom bridge.agent.netns import routes\n"
        "from bridge.agent.delegates.invoke import CNIError\n"
        "try:\n"
        "    asyncio.run(routes.apply('/var/run/netns/none', plan.default_route_ops('net1', ['10.0.0.1']), 5))\n"
        "except CNIError as exc:\n"
        "    print(int(exc.code), exc.msg, '|', exc.details)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == (
        "5 ip -4 route flush exact 0.0.0.0/0 failed in /var/run/netns/none | "
        "cannot enter network namespace /var/run/netns/none: No such file or directory"
    ), done.stdout
