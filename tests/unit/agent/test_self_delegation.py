"""A NAD whose plugin is the agent's own shim fails the ADD: the agent never calls itself.

The nested request would wait for the container's lock held by the outer ADD, be
killed by the plugin timeout, and then, still queued in the agent, run a second
full ADD of its own that nothing ever deletes. Any user who may create a NAD (or
an on-disk config named like the NAD, NPWG 3.4.1 rule 2) could trigger it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.daemon import agent
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube import objects
from bridge.agent.node import settings


class Recorder:
    def __init__(self) -> None:
        self.plugins: list[str] = []

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        self.plugins.append(plugin.name)
        conf = json.loads(stdin)
        if env["CNI_COMMAND"] == "ADD":
            result = {"cniVersion": conf["cniVersion"], "interfaces": [{"name": env["CNI_IFNAME"], "sandbox": "/ns"}],
                      "ips": [{"address": "10.0.0.2/24", "interface": 0}]}
            return 0, json.dumps(result).encode(), b""
        return 0, b"", b""


def _agent(tmp_path: Path, nad_config: dict[str, Any]) -> tuple[agent.Agent, Recorder]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bridge", settings.PLUGIN_TYPE):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    objs = [
        {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
                                     "annotations": {"k8s.v1.cni.cncf.io/networks": "loop"}}},
        {"kind": "NetworkAttachmentDefinition", "metadata": {"name": "loop", "namespace": "ns"},
         "spec": {"config": json.dumps(nad_config)}},
    ]
    rec = Recorder()
    config = agent.AgentConfig(
        socket_path=tmp_path / "s", cache_dir=tmp_path / "cache", bin_dirs=(bin_dir,), conf_dir=tmp_path / "net.d",
        default_network={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"},
    )
    return agent.Agent(objects.MemoryObjects(objs), config, executor=rec), rec


ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
       "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}


@pytest.mark.parametrize(
    "nad_config",
    [
        {"cniVersion": "1.0.0", "type": settings.PLUGIN_TYPE},
        {"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}, {"type": settings.PLUGIN_TYPE}]},
    ],
    ids=["single", "in-a-list"],
)
async def test_a_nad_delegating_to_the_agents_own_shim_fails_the_add_before_anything_runs(
    tmp_path: Path, nad_config: dict[str, Any]
) -> None:
    a, rec = _agent(tmp_path, nad_config)
    with pytest.raises(CNIError) as caught:
        await a.handle(ENV, b'{"cniVersion": "1.0.0", "name": "multinetwork", "type": "multinetwork"}')
    assert caught.value.code == ErrorCode.DELEGATION_FAILED
    assert "ns/loop" in str(caught.value) and settings.PLUGIN_TYPE in str(caught.value)
    assert rec.plugins == [], "nothing executed, not even the default network"
    assert list(a.cache.container_ids()) == []
