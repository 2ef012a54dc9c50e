"""Review fix: a default network whose cniVersion the agent cannot speak is not "usable".

The agent's conflist copies the default network's cniVersion (so the result it
returns and the runtime's expectation agree); with 0.1.0 or 0.2.0 the agent's own
request parsing refuses every request. Readiness (NPWG 6.1) must say so and the
conflist must never be written.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bridge.cni import agent, invoke, objects


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
    async with a:
        await asyncio.sleep(0.25)
        assert not a.conf_written.is_set()
        assert not (tmp_path / "net.d" / "00-multinetwork.conflist").exists()


@pytest.mark.parametrize("version", invoke.SUPPORTED_VERSIONS)
async def test_every_version_the_agent_speaks_makes_the_default_network_usable(tmp_path: Path, version: str) -> None:
    a = _agent(tmp_path, version)
    assert await a.default_network_problem() is None
    async with a:
        await asyncio.wait_for(a.conf_written.wait(), 5)
        written = json.loads((tmp_path / "net.d" / "00-multinetwork.conflist").read_text())
        assert written["cniVersion"] == version
        # and the agent accepts a request in the version it advertised
        assert agent.parse_request({"CNI_COMMAND": "VERSION"}, json.dumps(written).encode()).cni_version == version
        assert agent.parse_request(
            {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0"}, json.dumps(written).encode()
        ).cni_version == version
