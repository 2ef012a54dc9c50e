"""`podnetwork cni-agent --install` as a process, stopped by SIGTERM as the kubelet stops its pod:
a log line, the conflist and the socket removed (the node no longer looks network-ready), exit 0."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest

from tests.cni.agent_support import World

pytestmark = pytest.mark.cni


async def test_sigterm_removes_the_conflist_and_the_socket_and_exits_0(cni_host: list[Path]) -> None:
    world = World(cni_host)
    proc: asyncio.subprocess.Process | None = None
    try:
        objects = world.root / "objects.json"
        objects.write_text("[]")  # the default network comes from its file: no object needed
        default = world.root / "10-kubenet.conflist"
        default.write_text(json.dumps(world.default_network()))
        conf_dir = world.root / "multinetwork.d"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podnetwork", "cni-agent", "--install",
            "--install-bin-dir", str(world.root / "bin-installed"), "--agent-conf-dir", str(conf_dir),
            "--shim-python", sys.executable, "--cni-bin-dir", ":".join(map(str, cni_host)),
            "--cni-conf-dir", str(world.root / "net.d"), "--cache-dir", str(world.cache_dir),
            "--socket", str(world.socket), "--default-network-conf", str(default), "--objects", str(objects),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        conflist = conf_dir / "00-multinetwork.conflist"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not (conflist.exists() and world.socket.exists()):
            assert proc.returncode is None, "the agent exited before installing its conflist"
            assert loop.time() < deadline, "the agent never installed its conflist"
            await asyncio.sleep(0.05)

        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        assert "podnetwork cni-agent: SIGTERM received, stopping" in err.decode()
        assert not conflist.exists(), "without its agent the node must not look network-ready"
        assert not world.socket.exists()
        assert "Traceback" not in err.decode()
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        await world.cleanup()
