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

from bridge.agent import agent, invoke, objects
from bridge.agent.running import Running


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
        assert agent.parse_request({"CNI_COMMAND": "VERSION"}, json.dumps(written).encode()).cni_version == version
        assert agent.parse_request(
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

