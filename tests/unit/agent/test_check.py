"""CHECK of a container whose attachments are only partly torn down or set up.

CNI error 3 ("container unknown") tells the runtime it need not DEL the container
(CNI spec, well-known error codes). A record that is not complete (an ADD cut short
by a crash, or a DEL that failed for some attachment) still holds attachments only a
DEL removes, so CHECK must not answer 3 for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from bridge.agent.daemon import agent
from bridge.agent.delegates import cache
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube import objects


class Refuse:
    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        raise AssertionError("CHECK of an incomplete record must not run plugins")


ENV = {"CNI_COMMAND": "CHECK", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
       "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}
CONF = {"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"}


def _agent(tmp_path: Path) -> agent.Agent:
    config = agent.AgentConfig(socket_path=tmp_path / "s", cache_dir=tmp_path / "cache", bin_dirs=(tmp_path,),
                               conf_dir=tmp_path / "net.d", default_network=CONF)
    return agent.Agent(objects.MemoryObjects(), config, executor=Refuse())


async def test_check_of_a_never_attached_container_is_container_unknown(tmp_path: Path) -> None:
    with pytest.raises(CNIError) as caught:
        await _agent(tmp_path).handle(ENV, json.dumps({"cniVersion": "1.0.0", "name": "multinetwork"}).encode())
    assert caught.value.code == ErrorCode.UNKNOWN_CONTAINER


async def test_check_of_a_partly_attached_container_is_not_container_unknown(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    record = cache.Record(container_id="c1", netns="/var/run/netns/x", ifname="eth0")
    record.attachments.append(cache.Attachment(name="kubenet", ifname="eth0", config=CONF, default=True))
    a.cache.save(record)  # complete=False: a DEL still has work to do
    with pytest.raises(CNIError) as caught:
        await a.handle(ENV, json.dumps({"cniVersion": "1.0.0", "name": "multinetwork"}).encode())
    assert caught.value.code != ErrorCode.UNKNOWN_CONTAINER
    assert "DEL" in str(caught.value)


async def test_check_of_a_complete_record_with_an_unfinished_hot_plug_says_partly_attached(tmp_path: Path) -> None:
    """A hot-plug cut short whose roll-back failed: the record is complete, one attachment is an
    intent. CHECK reports it (106), rather than running the plugin's CHECK without a result."""
    a = _agent(tmp_path)
    result = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    record = cache.Record(container_id="c1", netns="/var/run/netns/x", ifname="eth0", complete=True, result=result)
    record.attachments.append(cache.Attachment(name="kubenet", ifname="eth0", config=CONF, default=True,
                                               state=cache.State.ATTACHED, result=result))
    record.attachments.append(cache.Attachment(name="ns/red", ifname="net2", config=CONF))
    a.cache.save(record)
    with pytest.raises(CNIError) as caught:
        await a.handle(ENV, json.dumps({"cniVersion": "1.0.0", "name": "multinetwork"}).encode())
    assert caught.value.code == ErrorCode.ATTACHMENT_INCOMPLETE
    assert "DEL" in str(caught.value)
