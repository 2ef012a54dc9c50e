"""When the agent is ready (NPWG 6.1): it writes its conflist only once the default network
is usable, and a default network in a cniVersion the agent cannot speak is not usable.

The agent's conflist copies the default network's cniVersion (so the result it
returns and the runtime's expectation agree); with 0.1.0 or 0.2.0 the agent's own
request parsing refuses every request. Readiness must say so and the conflist must
never be written.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest

from bridge.agent.cni import request
from bridge.agent.daemon import agent
from bridge.agent.daemon.running import Running
from bridge.agent.delegates import invoke
from bridge.agent.kube import objects


def _agent(tmp_path: Path, version: str) -> agent.Agent:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bridge").write_text("#!/bin/sh\n")
    (bin_dir / "bridge").chmod(0o755)
    return agent.Agent(
        objects.MemoryObjects(),
        agent.AgentConfig(
            socket_path=tmp_path / "a.sock",
            cache_dir=tmp_path / "cache",
            bin_dirs=(bin_dir,),
            conf_dir=tmp_path / "net.d",
            default_network={"cniVersion": version, "name": "kubenet", "plugins": [{"type": "bridge"}]},
            conf_file=tmp_path / "net.d" / "00-multinetwork.conflist",
            readiness_interval=0.05,
        ),
    )


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "9.9.9"])
async def test_a_default_network_in_a_version_the_agent_cannot_speak_is_reported_and_no_conflist_is_written(
    tmp_path: Path, version: str
) -> None:
    a = _agent(tmp_path, version)
    problem = await a.default_network_problem()
    assert problem is not None
    assert version in problem
    for supported in invoke.SUPPORTED_VERSIONS:
        assert supported in problem, "the message lists what the agent speaks"
    assert "kubenet" in problem, "and names the default network to fix"
    async with Running(a):
        await asyncio.sleep(0.25)
        assert not a.conf_written.is_set()
        assert not (tmp_path / "net.d" / "00-multinetwork.conflist").exists()


@pytest.mark.parametrize("version", invoke.SUPPORTED_VERSIONS)
async def test_every_version_the_agent_speaks_makes_the_default_network_usable(tmp_path: Path, version: str) -> None:
    a = _agent(tmp_path, version)
    assert await a.default_network_problem() is None
    async with Running(a):
        await asyncio.wait_for(a.conf_written.wait(), 5)
        written = json.loads((tmp_path / "net.d" / "00-multinetwork.conflist").read_text())
        assert written["cniVersion"] == version
        # and the agent accepts a request in the version it advertised
        assert request.parse_request({"CNI_COMMAND": "VERSION"}, json.dumps(written).encode()).cni_version == version
        assert request.parse_request(
            {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0"}, json.dumps(written).encode()
        ).cni_version == version


async def test_the_agent_writes_its_conflist_only_once_the_default_network_is_usable(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    default_file = tmp_path / "default.conflist"
    conf_file = tmp_path / "net.d" / "00-multinetwork.conflist"
    a = agent.Agent(
        objects.MemoryObjects(),
        agent.AgentConfig(
            socket_path=tmp_path / "a.sock",
            cache_dir=tmp_path / "cache",
            bin_dirs=(bin_dir,),
            default_network=default_file,
            conf_file=conf_file,
            readiness_interval=0.05,
        ),
    )
    async with Running(a):
        await asyncio.sleep(0.2)
        assert not conf_file.exists(), "no default network configuration yet"
        default_file.write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "kubenet",
            "plugins": [{"type": "bridge", "capabilities": {"portMappings": True}}],
        }))
        await asyncio.sleep(0.2)
        assert not conf_file.exists(), "the bridge plugin is not installed yet"
        (bin_dir / "bridge").write_text("#!/bin/sh\n")
        (bin_dir / "bridge").chmod(0o755)
        await asyncio.wait_for(a.conf_written.wait(), 5)
        assert json.loads(conf_file.read_text()) == {
            "cniVersion": "0.4.0",
            "name": "multinetwork",
            "plugins": [{"type": "multinetwork", "socketPath": str(tmp_path / "a.sock"),
                         "capabilities": {"portMappings": True}}],
        }
        assert stat.S_IMODE(os.stat(tmp_path / "a.sock").st_mode) == 0o600
    assert not conf_file.exists(), "a stopped agent takes its conflist away"
    assert not (tmp_path / "a.sock").exists()


async def test_without_a_default_network_conf_or_podnetwork_the_agent_says_what_to_create(tmp_path: Path) -> None:
    a = agent.Agent(objects.MemoryObjects(), agent.AgentConfig(cache_dir=tmp_path))
    problem = await a.default_network_problem()
    assert problem and "--default-network-conf" in problem and "PodNetwork 'default'" in problem



class Sink:
    """An EventSink that keeps what it was given."""

    def __init__(self) -> None:
        self.events: list[dict[str, object]] = []

    async def post_event(self, body: dict[str, object]) -> None:
        self.events.append(dict(body))


def probe(socket_path: Path) -> tuple[int, str]:
    """`python3 -I -m bridge.agent.shim.probe --socket PATH`, as the DaemonSet's readiness probe runs it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-I", "-m", "bridge.agent.shim.probe", f"--socket={socket_path}"],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[3])
    return done.returncode, done.stdout.strip()


async def test_readiness_changes_are_logged_and_posted_on_the_node_once_each_and_the_probe_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from bridge.agent.node import readiness

    a = _agent(tmp_path, "1.0.0")
    (tmp_path / "bin" / "bridge").unlink()  # the default network's plugin is missing: not ready
    sink = Sink()
    a.readiness = readiness.Reporter("node-a", sink)
    caplog.set_level("INFO", logger="bridge.agent.node.readiness")
    async with Running(a):
        await asyncio.sleep(0.3)  # several checks at readiness_interval 0.05
        code, said = await asyncio.to_thread(probe, tmp_path / "a.sock")
        assert code == 1 and said.startswith("not ready: ") and "'bridge'" in said
        not_ready = [r for r in caplog.records if r.getMessage().startswith("not ready:")]
        assert len(not_ready) == 1 and not_ready[0].levelname == "WARNING"
        (tmp_path / "bin" / "bridge").write_text("#!/bin/sh\n")
        (tmp_path / "bin" / "bridge").chmod(0o755)
        await asyncio.wait_for(a.conf_written.wait(), 5)
        assert await asyncio.to_thread(probe, tmp_path / "a.sock") == (0, "ready")
        await asyncio.sleep(0.2)
    assert [r.getMessage() for r in caplog.records if r.name == "bridge.agent.node.readiness"] == [
        not_ready[0].getMessage(), "ready again: pods can be attached"]
    assert [(e["reason"], e["type"]) for e in sink.events] == [
        (readiness.REASON_NOT_READY, "Warning"), (readiness.REASON_READY, "Normal")]
    first = sink.events[0]
    assert first["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "node-a"}
    assert first["metadata"]["namespace"] == "default" and "'bridge'" in str(first["message"])


async def test_what_the_node_denies_the_agent_makes_it_not_ready_and_no_conflist_is_written(tmp_path: Path) -> None:
    a = _agent(tmp_path, "1.0.0")
    async with Running(a):
        a.host_problem = "/var/run/netns is on the mount /, which is private in the agent's container"
        await asyncio.sleep(0.25)
        assert not a.conf_written.is_set()
        code, said = await asyncio.to_thread(probe, tmp_path / "a.sock")
        assert code == 1 and "private in the agent's container" in said


def test_the_probe_of_an_agent_that_is_not_there_fails_and_names_the_socket(tmp_path: Path) -> None:
    code, said = probe(tmp_path / "none.sock")
    assert code == 1 and str(tmp_path / "none.sock") in said
