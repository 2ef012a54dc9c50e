"""Hardening: a delegate still running when the agent was SIGKILLed must not outlive the DEL.

Plugins run in their own session, so killing the agent leaves them running. The
delegate here is a real one made slow: a script that, on ADD, notes its PID,
sleeps, then execs the real `bridge` plugin (which runs the real `host-local`).
The agent runs in its own process and is SIGKILLed while that script sleeps; a
fresh agent then gets the runtime's DEL. Without the fix the DEL answers 0, and
the orphan later finishes its ADD: an interface in the pod, a port on the bridge
and a host-local lease that nothing will ever remove. So the test waits until
the orphan would have finished before it looks for leftovers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.agent.delegates import invoke
from tests.cni.agent_support import NOTHING_LEFT, World, spawn_agent, wait_for_socket

pytestmark = pytest.mark.cni

NPWG_NETWORKS = "k8s.v1.cni.cncf.io/networks"
#: How long the slow delegate sleeps before it execs the real bridge plugin.
SLOW_SECONDS = 3


@pytest.fixture
async def world(cni_host: list[Path]) -> AsyncIterator[World]:
    w = World(list(cni_host))
    try:
        yield w
    finally:
        await w.cleanup()


def install_slow_bridge(world: World) -> Path:
    """A `slowbridge` plugin in a bin dir of the world's own, searched first; returns the
    file its ADD writes its PID to once it is running."""
    bridge = invoke.find_plugin("bridge", world.bin_dirs)
    slow_dir = world.root / "slowbin"
    slow_dir.mkdir()
    started = world.root / "slow-started"
    script = slow_dir / "slowbridge"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$CNI_COMMAND" = ADD ]; then\n'
        f"  echo $$ > {started}.tmp && mv {started}.tmp {started}\n"
        f"  sleep {SLOW_SECONDS}\n"
        "fi\n"
        f"exec {bridge}\n"
    )
    script.chmod(0o755)
    world.bin_dirs.insert(0, slow_dir)
    return started


def running(pid: int) -> bool:
    """True while `pid` exists and has not exited (a zombie nobody reaped has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(b")")[2].split()[0] not in (b"Z", b"X")


async def test_del_after_the_agent_died_mid_delegate_stops_the_orphan_and_leaves_nothing(world: World) -> None:
    started = install_slow_bridge(world)
    blue = world.network("blue", 1)
    blue["plugins"][0]["type"] = "slowbridge"
    world.nad("blue", blue)
    world.pod("orphaned", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    process = spawn_agent(world)
    orphan = 0
    try:
        await wait_for_socket(world, process)
        add = asyncio.create_task(world.cni("ADD", "ctr-orphan", netns, "orphaned"))
        deadline = time.monotonic() + 20
        while not started.exists():
            assert time.monotonic() < deadline, "the slow delegate never started"
            assert not add.done(), (await add).stdout
            await asyncio.sleep(0.05)
        orphan = int(started.read_text())
        began = time.monotonic()
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        answer = await add
        assert answer.returncode == 1 and answer.json["code"] == 102, "the runtime hears the agent went away"
        assert running(orphan), "the delegate outlived the agent (it runs in its own session)"
        record = json.loads((world.cache_dir / "ctr-orphan.jsonl").read_text().splitlines()[-1])
        assert [(a["ifname"], a["state"]) for a in record["attachments"]] == [("eth0", "attached"), ("net1", "intent")]

        await world.start_agent()
        deleted = await world.cni("DEL", "ctr-orphan", netns, "orphaned")
        assert deleted.returncode == 0, deleted.stdout
        assert not running(orphan), "the DEL answered while the orphaned delegate was still running"

        # Past the moment the orphan would have run bridge and host-local to the end.
        deadline = time.monotonic() + 60
        while running(orphan) or time.monotonic() < began + SLOW_SECONDS + 2:
            assert time.monotonic() < deadline, f"the orphan {orphan} is still running"
            await asyncio.sleep(0.1)
        assert world.leftovers() == NOTHING_LEFT
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stderr:
            process.stderr.close()
        if orphan and running(orphan):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(orphan, signal.SIGKILL)
