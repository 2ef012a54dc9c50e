"""The compiled shim (`install_shim(shim="compiled")`) as the runtime's plugin: ADD, CHECK and DEL of a
pod with a secondary network, real plugins in a real namespace, and nothing left after DEL."""

from __future__ import annotations

import shutil
import sys

import pytest

from bridge.agent.daemon import command
from tests.cni.agent_support import NOTHING_LEFT, NPWG_NETWORKS, World

pytestmark = pytest.mark.cni


async def test_add_check_and_del_through_the_compiled_shim_attach_and_leave_nothing(world: World) -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the compiled shim cannot be built")
    world.shim = command.install_shim(world.root / "cbin", sys.executable, shim="compiled")
    assert world.shim.read_bytes()[:4] == b"\x7fELF"
    world.nad("blue", world.network("blue", 1))
    world.pod("fast", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr-c", netns, "fast")
    assert added.returncode == 0, added.stdout
    assert world.interfaces(netns) == ["eth0", "net1"]
    assert len(world.addresses(netns, "net1")) == 1
    checked = await world.cni("CHECK", "ctr-c", netns, "fast")
    assert checked.returncode == 0, checked.stdout
    deleted = await world.cni("DEL", "ctr-c", netns, "fast")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT
