"""Hardening: finding and stopping the delegates an earlier agent process left running.

The pure pieces (reading /proc/<pid>/stat, matching an environment) with the inputs
that trip naive parsers; then `orphans.stop` against real process groups: it kills
every process of the group of a marked delegate, its plugins included even when
they cleared their environment, and nothing of another container or another agent.
tests/cni/test_orphaned_delegates.py runs the whole story with real plugins.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.agent.delegates import orphans


def test_stat_fields_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    assert orphans.stat_fields(b"4242 (a) (b c) S 1 4240 4240 0 -1 4194560 93 0 0 0") == ("S", 4240)
    assert orphans.stat_fields(b"17 (sleep) Z 1 17 17 0 -1") == ("Z", 17)
    assert orphans.stat_fields(b"garbage") is None
    assert orphans.stat_fields(b"1 (x) S 1 notanumber") is None


def test_a_delegate_is_matched_by_whole_environment_entries_only() -> None:
    env = b"PATH=/bin\0CNI_CONTAINERID=ctr1\0MULTINETWORK_DELEGATE_OF=/var/lib/multinetwork/cache"
    assert orphans.is_delegate(env, "/var/lib/multinetwork/cache", "ctr1")
    assert not orphans.is_delegate(env, "/var/lib/multinetwork/cache", "ctr")
    assert not orphans.is_delegate(env, "/var/lib/multinetwork", "ctr1")
    assert not orphans.is_delegate(env + b"2", "/var/lib/multinetwork/cache", "ctr1")
    assert not orphans.is_delegate(b"CNI_CONTAINERID=ctr1\0X=1", "/var/lib/multinetwork/cache", "ctr1"), "no marker"


def running(pid: int) -> bool:
    try:
        fields = orphans.stat_fields(Path(f"/proc/{pid}/stat").read_bytes())
    except FileNotFoundError:
        return False
    return fields is not None and fields[0] not in ("Z", "X")


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def delegate(tmp_path: Path, owner: str, container_id: str, spawned: list[subprocess.Popen[bytes]]) -> tuple[int, int]:
    """A stand-in delegate in its own session, as SubprocessExec starts them, with a child of
    its own that cleared its environment (as an IPAM plugin run by it could); (its pid, the child's)."""
    child_file = tmp_path / f"child-{len(spawned)}"
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f"env -i /bin/sleep 60 & echo $! > {child_file}.tmp; mv {child_file}.tmp {child_file}; exec /bin/sleep 60"],
        env={"PATH": "/usr/bin:/bin", "CNI_CONTAINERID": container_id, orphans.MARKER: owner},
        start_new_session=True,
    )
    spawned.append(proc)
    deadline = time.monotonic() + 10
    while not child_file.exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc.pid, int(child_file.read_text())


async def test_stop_kills_each_delegate_group_of_the_container_and_nothing_else(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    owner = str(tmp_path / "cache")
    mine, my_child = delegate(tmp_path, owner, "ctr1", spawned)
    other_container, _ = delegate(tmp_path, owner, "ctr10", spawned)
    other_agent, _ = delegate(tmp_path, str(tmp_path / "cache2"), "ctr1", spawned)
    assert running(mine) and running(my_child)

    stopped = await orphans.stop(owner, "ctr1")

    assert mine in stopped
    assert not running(mine) and not running(my_child), "the group went, the child without the marker too"
    assert running(other_container) and running(other_agent)
    assert await orphans.stop(owner, "ctr1") == [], "nothing left to stop"


async def test_stop_finds_nothing_for_a_container_without_delegates(tmp_path: Path) -> None:
    assert await orphans.stop(str(tmp_path / "cache"), "ctr-none") == []
