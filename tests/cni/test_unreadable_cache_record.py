"""Review fix, with real plugins through the shim: an unreadable cache record fails one DEL, not all.

The runtime sees a CNI error naming where the file went, then its retry succeeds
(CRI: tear-down must eventually succeed). What the record described stays on the
node (the agent can no longer know it) and the test's cleanup removes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cni.agent_support import World

pytestmark = pytest.mark.cni


@pytest.fixture
async def world(cni_host: list[Path]) -> AsyncIterator[World]:
    w = World(cni_host)
    try:
        await w.start_agent()
        yield w
    finally:
        await w.cleanup()


async def test_a_damaged_record_fails_one_del_through_the_shim_and_the_retry_succeeds(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("web", {"k8s.v1.cni.cncf.io/networks": "blue"})
    netns = world.make_netns()
    assert (await world.cni("ADD", "ctr-dmg", netns, "web")).returncode == 0
    assert world.cached() == ["ctr-dmg.jsonl"]
    record = world.cache_dir / "ctr-dmg.jsonl"
    record.write_bytes(b"\x00" * 64 + b"\n")  # a damaged disk block

    first = await world.cni("DEL", "ctr-dmg", netns, "web")
    assert first.returncode == 1
    error = first.json
    assert error["code"] == 5
    aside = sorted(world.cache_dir.glob("ctr-dmg.jsonl.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == b"\x00" * 64 + b"\n"
    assert str(aside[0]) in error["details"]
    assert world.cached() == []

    second = await world.cni("DEL", "ctr-dmg", netns, "web")
    assert second.returncode == 0, second.stdout
    assert world.interfaces(netns) == ["eth0", "net1"], "nothing the record could not name was touched"
