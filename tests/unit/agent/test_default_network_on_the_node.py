"""The cluster default network as the node has it: what deploy/ installs by default.

The controller creates the `default` PodNetwork with no provider (KEP "Default PodNetwork":
the network the cluster was created with). The agent then attaches what the runtime would
have run without it: the first CNI configuration of --cni-conf-dir in lexical order (as
libcni and the runtimes pick it), other than the agent's own. A `default` of the NPWG
bridge is attached from its NetworkAttachmentDefinition instead, and --default-network-conf
overrides both. No real plugins: a recording executor stands in for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.daemon import agent
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube import objects
from bridge.agent.node import settings
from tests.unit.agent.test_networks import Recorder, add, nad, pod, podnetwork

KUBENET = {"cniVersion": "1.0.0", "name": "kubenet",
           "plugins": [{"type": "bridge", "capabilities": {"portMappings": True}}]}


def installed_default() -> dict[str, Any]:
    """`default` as `podnetwork controller` creates it without --default-provider."""
    return {"kind": "PodNetwork", "metadata": {"name": "default"}, "spec": {"enabled": True}}


def node_agent(tmp_path: Path, objs: list[dict[str, Any]], files: dict[str, Any]) -> tuple[agent.Agent, Recorder]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for plugin in ("bridge", "flannel"):
        (bin_dir / plugin).write_text("#!/bin/sh\n")
        (bin_dir / plugin).chmod(0o755)
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir(exist_ok=True)
    for name, content in files.items():
        (conf_dir / name).write_text(content if isinstance(content, str) else json.dumps(content))
    rec = Recorder()
    config = agent.AgentConfig(socket_path=tmp_path / "s", cache_dir=tmp_path / "cache", bin_dirs=(bin_dir,),
                               conf_dir=conf_dir, conf_file=conf_dir / settings.DEFAULT_CONF_FILE_NAME)
    return agent.Agent(objects.MemoryObjects(objs), config, executor=rec), rec


async def test_a_default_podnetwork_without_provider_is_the_nodes_first_cni_configuration(tmp_path: Path) -> None:
    own = {"cniVersion": "1.0.0", "name": "multinetwork", "plugins": [{"type": "multinetwork"}]}
    flannel = {"cniVersion": "1.0.0", "name": "cbr0", "plugins": [{"type": "flannel"}]}
    a, rec = node_agent(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": "blue"}), installed_default(), nad("blue")], {
        settings.DEFAULT_CONF_FILE_NAME: own,        # the agent's own, first in order: never the default
        "05-other-meta.conflist": {**own, "name": "older-agent"},  # a shim of ours under another name
        "10-kubenet.conflist": KUBENET,
        "20-flannel.conflist": flannel,           # after the first one: ignored, as the runtime ignores it
        "99-notes.txt": "not a CNI configuration",
    })
    assert await a.default_network_problem() is None
    await add(a)
    assert rec.adds() == [("eth0", "kubenet"), ("net1", "blue")]
    first = rec.calls[0][2]
    assert first["type"] == "bridge" and first["name"] == "kubenet"
    # runtimeConfig for the capabilities the node's configuration declares (portMappings here)
    assert first["runtimeConfig"]["portMappings"]
    await a.status.idle()
    status = json.loads((await a.objects.get_pod("ns", "p")).metadata.annotations["k8s.v1.cni.cncf.io/network-status"])
    assert status[0]["name"] == "kubenet" and status[0]["default"] is True


async def test_a_default_podnetwork_of_another_provider_is_the_nodes_network_too(tmp_path: Path) -> None:
    other = {**installed_default(), "spec": {"enabled": True, "provider": "example.com/cni"}}
    a, rec = node_agent(tmp_path, [pod(), other], {"10-kubenet.conf": {**KUBENET["plugins"][0], "name": "kubenet",
                                                                       "cniVersion": "1.0.0"}})
    assert await a.default_network_problem() is None
    await add(a)
    assert rec.adds() == [("eth0", "kubenet")]


async def test_json_and_conf_files_count_in_lexical_order_as_libcni_reads_them(tmp_path: Path) -> None:
    a, rec = node_agent(tmp_path, [pod(), installed_default()], {
        "30-late.conflist": {**KUBENET, "name": "late"},
        "15-mid.json": {**KUBENET, "name": "mid"},
    })
    await add(a)
    assert rec.adds() == [("eth0", "mid")]


async def test_a_node_without_a_cni_configuration_of_its_own_is_not_ready_and_says_what_to_install(
        tmp_path: Path) -> None:
    own = {"cniVersion": "1.0.0", "name": "multinetwork", "plugins": [{"type": "multinetwork"}]}
    a, _ = node_agent(tmp_path, [pod(), installed_default()], {settings.DEFAULT_CONF_FILE_NAME: own})
    problem = await a.default_network_problem()
    assert problem is not None
    assert str(tmp_path / "net.d") in problem
    assert "--default-network-conf" in problem and "provider" in problem


async def test_a_broken_first_configuration_is_reported_by_its_file_name(tmp_path: Path) -> None:
    a, _ = node_agent(tmp_path, [pod(), installed_default()], {"10-broken.conflist": "{not json"})
    problem = await a.default_network_problem()
    assert problem is not None and "10-broken.conflist" in problem


async def test_a_default_podnetwork_of_the_bridge_still_comes_from_its_nad(tmp_path: Path) -> None:
    a, rec = node_agent(tmp_path, [pod(), nad("kubenet-nad"), podnetwork("default", "kubenet-nad")],
                        {"10-kubenet.conflist": KUBENET})
    await add(a)
    assert rec.adds() == [("eth0", "kubenet-nad")]


async def test_a_default_network_conf_that_is_not_utf8_is_the_agents_stated_problem_not_a_crash(
        tmp_path: Path) -> None:
    """--default-network-conf naming a binary file: STATUS and ADD say so (CNI error 7), naming the
    file and the byte, as every other file the project reads does."""
    a, rec = node_agent(tmp_path, [pod({}), installed_default()], {})
    conf = tmp_path / "default.conf"
    conf.write_bytes(b'{"cniVersion": "1.0.0", "name": "\xc2"}')
    a.config.default_network = conf
    problem = await a.default_network_problem()
    assert problem is not None and f"{conf}: not UTF-8 text (byte 33); save it as UTF-8" in problem, problem
    with pytest.raises(CNIError) as raised:
        await add(a)
    assert raised.value.code == ErrorCode.INVALID_CONFIG and "not UTF-8 text" in str(raised.value)
    assert rec.adds() == []
