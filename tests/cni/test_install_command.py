"""`podnetwork cni-agent --install` as a process: shim installed (the compiled one, by default),
conflist written, pods attached through it."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.cni.agent_support import NOTHING_LEFT, World

pytestmark = pytest.mark.cni


async def test_the_installed_agent_serves_the_runtime_through_its_conflist_and_removes_it_on_exit(
    cni_host: list[Path],
) -> None:
    world = World(cni_host)
    process: subprocess.Popen[bytes] | None = None
    try:
        world.nad("blue", world.network("blue", 1))
        world.pod("web", {"k8s.v1.cni.cncf.io/networks": "blue"})
        objects_file = world.root / "objects.yaml"
        objects_file.write_text(yaml.safe_dump_all([world.objects.get(*key) for key in list(world.objects._store)]))
        default_file = world.root / "10-kubenet.conflist"
        default_file.write_text(json.dumps(world.default_network()))
        bin_dir, agent_conf_dir = world.root / "bin-installed", world.root / "multinetwork.d"
        process = subprocess.Popen(
            [
                sys.executable, "-m", "podnetwork.cli", "cni-agent", "--install",
                "--install-bin-dir", str(bin_dir), "--agent-conf-dir", str(agent_conf_dir),
                "--shim-python", sys.executable,
                "--cni-bin-dir", ":".join(map(str, cni_host)), "--cni-conf-dir", str(world.root / "net.d"),
                "--cache-dir", str(world.cache_dir), "--socket", str(world.socket),
                "--default-network-conf", str(default_file), "--objects", str(objects_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        conflist_path = agent_conf_dir / "00-multinetwork.conflist"
        deadline = time.monotonic() + 20
        while not (conflist_path.exists() and world.socket.exists()):
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "the agent never wrote its conflist"
            await asyncio.sleep(0.05)
        conflist = json.loads(conflist_path.read_text())
        assert conflist["name"] == "multinetwork" and conflist["cniVersion"] == "1.0.0"
        (plugin,) = conflist["plugins"]
        assert plugin["type"] == "multinetwork" and (bin_dir / "multinetwork").is_file()
        # The default install where a compiler exists (CI has one): the compiled shim, the Python one beside it.
        assert (bin_dir / "multinetwork").read_bytes()[:4] == b"\x7fELF"
        assert (bin_dir / ".multinetwork.py").is_file()

        # What a runtime executes for this conflist: the plugin's config with name/cniVersion injected.
        world.shim = bin_dir / "multinetwork"
        stdin = json.dumps({**plugin, "name": conflist["name"], "cniVersion": conflist["cniVersion"]}).encode()
        netns = world.make_netns()
        added = await world.cni("ADD", "ctr-cmd", netns, "web", stdin=stdin)
        assert added.returncode == 0, added.stdout
        assert world.interfaces(netns) == ["eth0", "net1"]
        deleted = await world.cni("DEL", "ctr-cmd", netns, "web", stdin=stdin)
        assert deleted.returncode == 0, deleted.stdout
        assert world.leftovers() == NOTHING_LEFT

        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        assert not conflist_path.exists(), "without its agent the node must not look network-ready"
        assert not world.socket.exists()
        gone = await world.cni("ADD", "ctr-late", netns, "web", stdin=stdin)
        assert gone.returncode == 1 and gone.json["code"] == 102 and "cni-agent" in gone.json["details"]
    finally:
        if process is not None:
            if process.poll() is None:
                process.kill()
                process.wait(10)
            if process.stderr:
                process.stderr.close()
        await world.cleanup()
