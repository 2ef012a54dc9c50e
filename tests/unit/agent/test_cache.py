"""The agent's cache of attachments: one journal file per container, and what DEL, ADD
and CHECK do when a container's file holds no readable record.

CRI: tear-down must succeed eventually; NPWG 7.2: DEL attempts every attachment
it knows. An unreadable record names no attachment, so the agent moves it aside
(kept for a human to inspect), reports that once, and the runtime's next DEL succeeds.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path

import pytest

from bridge.agent.daemon import agent
from bridge.agent.delegates import cache
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube import objects


def record(container_id: str = "abc") -> cache.Record:
    return cache.Record(
        container_id=container_id,
        netns="/var/run/netns/x",
        ifname="eth0",
        cni_args=[["K8S_POD_NAME", "p"]],
        pod_namespace="ns",
        pod_name="p",
        attachments=[
            cache.Attachment("kubenet", "eth0", {"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"},
                             default=True, state=cache.State.ATTACHED, result={"ips": []}),
            cache.Attachment("ns/blue", "net1", {"cniVersion": "1.0.0", "name": "blue", "type": "macvlan"},
                             default_route=["10.0.0.1"]),
        ],
    )


def test_a_cache_record_survives_a_round_trip_through_disk(tmp_path: Path) -> None:
    c = cache.Cache(tmp_path / "cache")
    c.save(record())
    assert c.load("abc") == record()
    assert list(c.container_ids()) == ["abc"]
    assert stat.S_IMODE(os.stat(c.path("abc")).st_mode) == 0o600
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["abc.jsonl"]


def test_removing_a_record_twice_is_fine_and_a_missing_one_loads_as_none(tmp_path: Path) -> None:
    c = cache.Cache(tmp_path)
    c.save(record())
    c.remove("abc")
    c.remove("abc")
    assert c.load("abc") is None


@pytest.mark.parametrize("bad", ["../x", "a/b", ".hidden", "", "x" * 2000])
def test_a_container_id_that_is_not_a_safe_file_name_never_reaches_the_disk(tmp_path: Path, bad: str) -> None:
    with pytest.raises(CNIError) as caught:
        cache.Cache(tmp_path).path(bad)
    assert caught.value.code == ErrorCode.INVALID_ENVIRONMENT


def test_the_last_complete_line_of_the_journal_is_the_record(tmp_path: Path) -> None:
    c = cache.Cache(tmp_path, durable=True)
    first = record()
    c.save(first)
    second = record()
    second.complete = True
    c.save(second)
    assert c.load("abc") == second
    with c.path("abc").open("ab") as f:
        f.write(b'{"container_id": "abc", "netns')  # torn by a power loss
    assert c.load("abc") == second


def test_a_journal_without_a_readable_line_is_reported_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "abc.jsonl").write_text('{"container_id": ')
    with pytest.raises(cache.CacheError, match=r"abc\.jsonl"):
        cache.Cache(tmp_path).load("abc")



# --- a container whose record is unreadable ---------------------------------------------


CONF = {"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"}
STDIN = json.dumps({"cniVersion": "1.0.0", "name": "multinetwork"}).encode()
GARBAGE = b'{"container_id": "c1", "netns\x00\xff not json\n'


class Refuse:
    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        raise AssertionError("no plugin can be run for an unreadable record")


def _agent(tmp_path: Path) -> agent.Agent:
    config = agent.AgentConfig(socket_path=tmp_path / "s", cache_dir=tmp_path / "cache", bin_dirs=(tmp_path,),
                               conf_dir=tmp_path / "net.d", default_network=CONF)
    return agent.Agent(objects.MemoryObjects(), config, executor=Refuse())


def _env(command: str) -> dict[str, str]:
    return {"CNI_COMMAND": command, "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x",
            "CNI_IFNAME": "eth0", "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}


async def test_del_of_an_unreadable_record_fails_once_keeps_the_file_aside_and_the_next_del_succeeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = _agent(tmp_path)
    a.cache.ensure()
    a.cache.path("c1").write_bytes(GARBAGE)
    with caplog.at_level(logging.ERROR, logger="bridge.agent.cni.attachments"), pytest.raises(CNIError) as caught:
        await a.handle(_env("DEL"), STDIN)
    aside = list((tmp_path / "cache").glob("c1.jsonl.corrupt-*"))
    assert len(aside) == 1, "the unreadable file is kept, under a new name"
    assert aside[0].read_bytes() == GARBAGE, "nothing of it is lost"
    assert not a.cache.path("c1").exists()
    assert caught.value.code == ErrorCode.IO_FAILURE
    assert str(aside[0]) in str(caught.value)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and str(aside[0]) in errors[0].getMessage()
    assert "c1" in errors[0].getMessage() and "inspect" in errors[0].getMessage().lower()
    assert await a.handle(_env("DEL"), STDIN) is None, "the runtime's retry succeeds"
    assert list(a.cache.container_ids()) == [], "the moved file is no longer a record"


async def test_two_unreadable_records_of_one_container_are_both_kept(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    a.cache.ensure()
    for garbage in (b"first\n", b"second\n"):
        a.cache.path("c1").write_bytes(garbage)
        with pytest.raises(CNIError):
            await a.handle(_env("DEL"), STDIN)
    kept = sorted(p.read_bytes() for p in (tmp_path / "cache").glob("c1.jsonl.corrupt-*"))
    assert kept == [b"first\n", b"second\n"]


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
async def test_add_or_check_over_an_unreadable_record_is_a_cni_error_that_says_to_del(tmp_path: Path, command: str) -> None:
    a = _agent(tmp_path)
    a.cache.ensure()
    a.cache.path("c1").write_bytes(GARBAGE)
    with pytest.raises(CNIError) as caught:
        await a.handle(_env(command), STDIN)
    assert caught.value.code == ErrorCode.IO_FAILURE
    assert "DEL" in str(caught.value) and "c1.jsonl" in str(caught.value)
    assert a.cache.path("c1").read_bytes() == GARBAGE, "only DEL moves the file"
