"""Hardening: container IDs of every length, through the shim, with the real plugins.

The agent's record of a container is the file `<ID>.jsonl`; a file name has at most
255 bytes. An ID of 249 characters (the longest whose record fits) is attached and
torn down like any other, and its damaged record can still be moved aside. A longer
one is refused on ADD with a clear CNI error 4, and its DEL succeeds: nothing can
ever have been attached under it, and the runtime must be able to tear the pod down.
Before, both ADD and DEL of a 300-character ID failed with "internal agent error:
ENAMETOOLONG", forever.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cni.agent_support import NOTHING_LEFT, World

pytestmark = pytest.mark.cni

NPWG_NETWORKS = "k8s.v1.cni.cncf.io/networks"
LONGEST = 249


@pytest.fixture
async def world(cni_host: list[Path]) -> AsyncIterator[World]:
    w = World(cni_host)
    try:
        await w.start_agent()
        yield w
    finally:
        await w.cleanup()


def container_id(length: int) -> str:
    return ("c0ffee" * 60)[:length]


@pytest.mark.parametrize("length", [LONGEST + 1, 300, 1024, 5000])
async def test_an_id_too_long_for_a_record_is_refused_on_add_and_its_del_succeeds(world: World, length: int) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("web", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    cid = container_id(length) if length <= 360 else "a" * length

    added = await world.cni("ADD", cid, netns, "web")
    assert added.returncode == 1
    error = added.json
    assert error["code"] == 4 and error["msg"] == "CNI_CONTAINERID is too long", error
    assert f"it has {length} characters, the agent accepts at most {LONGEST}" in error["details"]

    checked = await world.cni("CHECK", cid, netns, "web")
    assert checked.returncode == 1 and checked.json["code"] == 4

    deleted = await world.cni("DEL", cid, netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT
    assert world.objects.patches == []


async def test_the_longest_id_is_attached_and_torn_down(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("web", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    cid = container_id(LONGEST)

    added = await world.cni("ADD", cid, netns, "web")
    assert added.returncode == 0, added.stdout
    assert world.interfaces(netns) == ["eth0", "net1"]
    assert world.cached() == [f"{cid}.jsonl"]
    assert (await world.cni("CHECK", cid, netns, "web")).returncode == 0

    deleted = await world.cni("DEL", cid, netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


async def test_a_damaged_record_of_the_longest_id_is_moved_aside_and_the_retry_succeeds(world: World) -> None:
    world.pod("web")
    netns = world.make_netns()
    cid = container_id(LONGEST)
    assert (await world.cni("ADD", cid, netns, "web")).returncode == 0
    (world.cache_dir / f"{cid}.jsonl").write_bytes(b"\x00" * 32 + b"\n")

    first = await world.cni("DEL", cid, netns, "web")
    assert first.returncode == 1
    assert first.json["code"] == 5, first.json
    (aside,) = [p for p in world.cache_dir.iterdir() if ".corrupt-" in p.name]
    assert len(aside.name.encode()) <= 255 and aside.name.startswith(cid[:200])
    assert str(aside) in first.json["details"]
    assert aside.read_bytes() == b"\x00" * 32 + b"\n"

    second = await world.cni("DEL", cid, netns, "web")
    assert second.returncode == 0, second.stdout
    assert world.cached() == []
    assert world.interfaces(netns) == ["eth0"], "nothing the record could not name was touched"
