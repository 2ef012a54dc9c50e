"""Inputs that NPWG peers accept, attached by the agent with the real plugins through the
shim: a NAD whose config gives CNI 1.1 `cniVersions` and an empty `name`, selected by
an annotation that carries a pre-spec key (docs/npwg-conformance.md)."""

from __future__ import annotations

import json

import pytest

from tests.cni.agent_support import NOTHING_LEFT, NPWG_NETWORKS, World, status_of

pytestmark = pytest.mark.cni


async def test_a_nad_with_cni_versions_and_an_empty_name_selected_with_a_pre_spec_key_attaches_and_detaches(
    world: World,
) -> None:
    blue = world.network("blue", 1)
    del blue["cniVersion"]
    blue["cniVersions"] = ["0.4.0", world.cni_version, "99.0.0"]  # 99.0.0 is skipped, as libcni does
    blue["name"] = ""  # NPWG 3.4.2: counts as missing, the NAD's name is injected
    world.nad("blue", blue)
    world.pod("web", {NPWG_NETWORKS: json.dumps([{"name": "blue", "interfaceRequest": "eth9"}])})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr1", netns, "web")
    assert added.returncode == 0, added.stdout
    assert world.interfaces(netns) == ["eth0", "net1"], "interfaceRequest is ignored, not an interface name"
    status = status_of(world, "web")
    assert [(s["name"], s.get("interface")) for s in status] == [("kubenet", "eth0"), ("default/blue", "net1")]
    assert status[1]["ips"] == world.addresses(netns, "net1")

    deleted = await world.cni("DEL", "ctr1", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT
