"""Our nftables table in a pod's namespace (bridge.agent.netns.nftables), proven with real traffic.

Against the real `nft`, in the pods of a node namespace of the test (tests/cni/netpol_support.py:
real bridge and host-local plugins, x/y/z x a/b/c, eth0 + net1 + net2), with rulesets written
by hand here: what the table does is measured by TCP, UDP and ICMP between the pods, never by
reading the rules back.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.netns import nftables
from tests.cni.netpol_support import DEFAULT_PROBES, PREFIX, TCP80, UDP80, Matrix, Node, standing

pytestmark = pytest.mark.cni

T = {"family": "inet", "table": "podnetwork_policy"}


def table(*items: dict[str, Any]) -> dict[str, Any]:
    return {"nftables": [{"add": {"table": {"family": "inet", "name": "podnetwork_policy"}}}, *items]}


def chain(name: str, hook: str | None = None) -> dict[str, Any]:
    base = {"type": "filter", "hook": hook, "prio": 0, "policy": "accept"} if hook else {}
    return {"add": {"chain": {**T, "name": name, **base}}}


def rule(chain_: str, *expr: dict[str, Any]) -> dict[str, Any]:
    return {"add": {"rule": {**T, "chain": chain_, "expr": list(expr)}}}


ESTABLISHED = {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}}
ACCEPT: dict[str, Any] = {"accept": None}
DROP: dict[str, Any] = {"drop": None}


def iif(name: str) -> dict[str, Any]:
    return {"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": name}}


def ingress(ifname: str, allowed: list[str] | None = None) -> dict[str, Any]:
    """Ingress isolation on `ifname`: only replies, and new connections from `allowed` (a named set)."""
    items = [chain("input", hook="input"), rule("input", ESTABLISHED, ACCEPT),
             chain(f"ingress_{ifname}"), rule("input", iif(ifname), {"jump": {"target": f"ingress_{ifname}"}})]
    if allowed:
        items.append({"add": {"set": {**T, "name": f"peers_{ifname}", "type": "ipv4_addr", "elem": allowed}}})
        saddr = {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                           "right": f"@peers_{ifname}"}}
        items.append(rule(f"ingress_{ifname}", saddr, ACCEPT))
    items.append(rule(f"ingress_{ifname}", DROP))
    return table(*items)


@pytest.fixture(scope="module")
def module_node(cni_host: list[Path]) -> Iterator[Node]:
    with standing(cni_host, networks=("eth0", "net1", "net2")) as node:
        yield node


@pytest.fixture
def node(module_node: Node) -> Iterator[Node]:
    """The module's node, with our table out of every pod again after each test."""
    try:
        yield module_node
    finally:
        module_node.remove_all()


def everything(node: Node) -> Matrix:
    return Matrix.expect(list(node.pods), DEFAULT_PROBES, lambda s, d, p: True)


def test_deny_all_ingress_on_net1_closes_x_a_there_and_leaves_its_replies_net2_and_eth0_open(node: Node) -> None:
    node.apply("x/a", ingress("net1"))

    # Only x/a itself (over lo) reaches x/a on net1; x/a's own connections out get their replies.
    expected = Matrix.expect(list(node.pods), DEFAULT_PROBES, lambda s, d, p: d != "x/a" or s == "x/a")
    assert not (diff := node.probe(network="net1").diff(expected)), diff
    for other in ("net2", "eth0"):
        assert not (diff := node.probe(network=other).diff(everything(node))), f"{other}:\n{diff}"


def test_an_established_connection_survives_a_replacement_that_still_allows_it(node: Node) -> None:
    xa, xb, xc = (node.pods[p].addresses["net1"] for p in ("x/a", "x/b", "x/c"))
    node.apply("x/a", ingress("net1", allowed=[xb]))
    with node.connection("x/b", "x/a") as round_trip:
        assert round_trip()
        assert node.reach("x/c", [xa], [TCP80]) == {(xa, TCP80): False}

        node.apply("x/a", ingress("net1", allowed=[xb, xc]))

        assert round_trip(), "the established connection x/b -> x/a broke when the table was replaced"
        # The new table is in force: x/c is let in now, y/a still is not.
        column = node.probe([TCP80], sources=["x/b", "x/c", "y/a"], destinations=["x/a"])
        assert column.connected == {("x/b", "x/a", TCP80): True, ("x/c", "x/a", TCP80): True,
                                    ("y/a", "x/a", TCP80): False}


def test_removing_the_table_opens_the_pod_again_and_removing_it_twice_is_no_error(node: Node) -> None:
    node.apply("x/a", ingress("net1"))
    assert node.exists("x/a")
    assert not node.probe([TCP80], sources=["y/b"], destinations=["x/a"]).connected[("y/b", "x/a", TCP80)]

    node.remove("x/a")
    node.remove("x/a")

    assert not node.exists("x/a")
    assert not (diff := node.probe(network="net1").diff(everything(node))), diff


def test_a_ruleset_nft_refuses_leaves_the_previous_table_in_force(node: Node) -> None:
    node.apply("x/a", ingress("net1"))
    # Whole, this would open x/a (an empty table): half-applied, the deny-all would be gone.
    refused = table(chain("input", hook="input"), rule("input", ACCEPT), rule("no_such_chain", ACCEPT))

    with pytest.raises(nftables.NftablesError) as caught:
        node.apply("x/a", refused)

    assert node.pods["x/a"].path in str(caught.value) and "nft said:" in str(caught.value)
    assert "No such file or directory" in caught.value.detail  # nft's own words for the missing chain
    assert node.exists("x/a")
    column = node.probe([TCP80, UDP80], sources=["x/b", "y/a"], destinations=["x/a"])
    assert not any(column.connected.values()), column.connected


def test_applying_in_a_network_namespace_that_vanished_says_which_and_removing_there_is_no_error(
        node: Node) -> None:
    name = f"{PREFIX}gone-{node.tag}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "netns", "del", name], check=True)
    sleeper = subprocess.Popen(["sleep", "0"])
    sleeper.wait()
    for path in (f"/var/run/netns/{name}", f"/proc/{sleeper.pid}/ns/net"):
        with pytest.raises(nftables.NetnsGone) as caught:
            asyncio.run(nftables.apply(path, ingress("net1")))
        assert str(caught.value) == (f"apply nftables table inet podnetwork_policy in network namespace {path} failed: "
                                     "the network namespace does not exist (any more)")
        with pytest.raises(nftables.NetnsGone):
            asyncio.run(nftables.exists(path))
        asyncio.run(nftables.remove(path))
