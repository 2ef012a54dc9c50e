"""isDefaultGW4 / isDefaultGW6 move only their own family's default route, with real plugins.

The default network and the secondary network are dual-stack (host-local with an
IPv4 and an IPv6 range, `bridge` plugin). The pod asks for one family's default
route on the secondary network; the other family's default route must stay on
the default network's interface (KEP-3698 `isDefaultGW4`/`isDefaultGW6`, carried
by the `multinetwork.x-k8s.io/default-route-families` extension, NPWG 4.1.2.1.9).
The gateway is the NAD's, or, when a NetworkSelectionOptions gives `default-route: []`
(the user's own NPWG value), the attachment's CNI result's. A NAD naming no gateway of a
requested family, without such options, is refused, as the bridge refuses it
(docs/bridge.md "Default routes with Multus").
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.cni.agent_support import NOTHING_LEFT, World, bridge_podnetwork, run

pytestmark = pytest.mark.cni

KEP_NETWORKS = "multinetwork.x-k8s.io/networks"
NPWG_NETWORKS = "k8s.v1.cni.cncf.io/networks"
NPWG_STATUS = "k8s.v1.cni.cncf.io/network-status"


def v6_subnet(world: World, index: int) -> str:
    return str(ipaddress.ip_network(f"fd00:{world.octet:x}:{index}::/64"))


def v4_gateway(world: World, index: int) -> str:
    return world.subnet(index).replace(".0/24", ".1")


def v6_gateway(world: World, index: int) -> str:
    return str(ipaddress.ip_network(v6_subnet(world, index))[1])


def dual_stack(world: World, name: str, index: int, *, gateways: bool, default: bool = False) -> dict[str, Any]:
    """A bridge + host-local network with an IPv4 and an IPv6 range (gateways named or left to host-local)."""
    v4: dict[str, Any] = {"subnet": world.subnet(index)}
    v6: dict[str, Any] = {"subnet": v6_subnet(world, index)}
    if gateways:
        v4["gateway"], v6["gateway"] = v4_gateway(world, index), v6_gateway(world, index)
    ipam: dict[str, Any] = {"ranges": [[v4], [v6]]}
    if default:
        ipam["routes"] = [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
    return world.network(name, index, ipam=ipam)


class DualStackWorld(World):
    def default_network(self) -> dict[str, Any]:
        return dual_stack(self, "kubenet", 0, gateways=True, default=True)


@pytest.fixture
async def world(cni_host: list[Path], cni_version: str) -> AsyncIterator[World]:
    w = DualStackWorld(cni_host, cni_version=cni_version)
    try:
        await w.start_agent()
        yield w
    finally:
        await w.cleanup()


def default_routes(netns: str, family: int) -> list[tuple[str, str]]:
    name = Path(netns).name
    routes = json.loads(run("ip", "-n", name, "-j", f"-{family}", "route", "show", "default").stdout or "[]")
    return sorted((r.get("dev", ""), r.get("gateway", "")) for r in routes)


def attachment_with_empty_default_route(world: World, name: str, podnetwork: str) -> None:
    """A PodNetworkAttachment whose NetworkSelectionOptions give `default-route: []`: the gateway
    of the attachment's own CNI result (NPWG 4.1.2.1.9)."""
    world.objects.put({"apiVersion": "bridge.multinetwork.x-k8s.io/v1alpha1", "kind": "NetworkSelectionOptions",
                       "metadata": {"name": name, "namespace": "default"}, "spec": {"default-route": []}})
    world.objects.put({"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetworkAttachment",
                       "metadata": {"name": name, "namespace": "default"},
                       "spec": {"podNetworkName": podnetwork, "parametersRefs": [
                           {"group": "bridge.multinetwork.x-k8s.io", "kind": "networkselectionoptions", "name": name}]}})


@pytest.mark.every_cni_version
@pytest.mark.parametrize("nad_names_gateways", [False, True], ids=["gateways-from-result", "gateways-in-nad"])
@pytest.mark.parametrize("flag", ["isDefaultGW4", "isDefaultGW6"])
async def test_one_family_default_route_moves_to_the_secondary_network_and_the_other_stays(
    world: World, flag: str, nad_names_gateways: bool
) -> None:
    world.nad("blue", dual_stack(world, "blue", 1, gateways=nad_names_gateways))
    bridge_podnetwork(world, "blue", "blue")
    if nad_names_gateways:
        secondary = {"podNetworkName": "blue", flag: True}
    else:
        attachment_with_empty_default_route(world, "blue-routes", "blue")
        secondary = {"podNetworkAttachmentName": "blue-routes", flag: True}
    world.pod("web", {KEP_NETWORKS: json.dumps([{"podNetworkName": "default"}, secondary])})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr1", netns, "web")
    assert added.returncode == 0, added.stdout

    moved, kept = (4, 6) if flag == "isDefaultGW4" else (6, 4)
    gateway = {4: v4_gateway, 6: v6_gateway}
    assert default_routes(netns, moved) == [("net1", gateway[moved](world, 1))]
    assert default_routes(netns, kept) == [("eth0", gateway[kept](world, 0))]
    status = json.loads(world.objects.get("Pod", "default", "web")["metadata"]["annotations"][NPWG_STATUS])
    assert status[1]["default-route"] == [gateway[moved](world, 1)]

    deleted = await world.cni("DEL", "ctr1", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


@pytest.mark.every_cni_version
async def test_a_plain_npwg_empty_default_route_still_moves_every_family_of_the_result(world: World) -> None:
    world.nad("blue", dual_stack(world, "blue", 1, gateways=False))
    world.pod("web", {NPWG_NETWORKS: json.dumps([{"name": "blue", "default-route": []}])})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr1", netns, "web")
    assert added.returncode == 0, added.stdout

    assert default_routes(netns, 4) == [("net1", v4_gateway(world, 1))]
    assert default_routes(netns, 6) == [("net1", v6_gateway(world, 1))]

    deleted = await world.cni("DEL", "ctr1", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


async def test_asking_for_a_family_the_secondary_network_lacks_fails_the_add_and_leaves_nothing(world: World) -> None:
    world.nad("red", world.network("red", 2))  # IPv4 only
    bridge_podnetwork(world, "red", "red")
    attachment_with_empty_default_route(world, "red-routes", "red")
    world.pod("web", {KEP_NETWORKS: json.dumps([{"podNetworkName": "default"},
                                                {"podNetworkAttachmentName": "red-routes", "isDefaultGW6": True}])})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr1", netns, "web")

    assert added.returncode != 0
    assert "no IPv6 gateway" in added.json["msg"], added.stdout
    assert world.leftovers() == NOTHING_LEFT
    assert default_routes(netns, 4) == [], "the rollback removed the default network's interface too"


async def test_a_default_route_on_a_nad_naming_no_gateway_of_the_family_is_refused_before_any_plugin_runs(
    world: World,
) -> None:
    """As the bridge refuses to write that selection: Multus would drop the pod's route and add none."""
    world.nad("red", world.network("red", 2))  # an IPv4 gateway only
    bridge_podnetwork(world, "red", "red")
    world.pod("web", {KEP_NETWORKS: json.dumps([{"podNetworkName": "default"}, {"podNetworkName": "red", "isDefaultGW6": True}])})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr1", netns, "web")

    assert added.returncode != 0
    assert (added.json["code"], added.json["msg"]) == (105, "cannot translate the pod's networks (DefaultGatewayMissing)")
    assert "NetworkAttachmentDefinition default/red names no IPv6 gateway" in added.json["details"], added.stdout
    assert world.leftovers() == NOTHING_LEFT
    assert world.interfaces(netns) == [], "not even the default network was attached"
