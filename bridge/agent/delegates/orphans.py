"""Delegate plugins that outlived the agent which ran them, found and stopped before a tear-down.

Delegates run in a session of their own (`invoke.SubprocessExec`), so a timeout can
kill a plugin together with the plugins it runs itself (IPAM). The same choice means
nothing ends them when the agent dies: killed during an ADD, the agent leaves its
delegate running; a restarted agent tearing down the container's record would DEL
too early, and the orphan would then finish its ADD and leave an interface, a bridge
port and an IPAM lease that no record names.

So every delegate's environment carries `MARKER=<the agent's cache dir>` (`Marking`),
which the plugins pass on to the plugins they run. Before a tear-down of a record
that an earlier agent process wrote, `stop` finds every live process whose environment
holds that marker and the container's `CNI_CONTAINERID`, kills its whole process
group with SIGKILL, and waits until none of those processes and groups is left
(a zombie has exited: it can change nothing any more). docs/agent.md says why this
and not PR_SET_PDEATHSIG.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from bridge.agent.delegates import invoke
from bridge.agent.delegates.invoke import CNIError, ErrorCode

log = logging.getLogger(__name__)

#: The environment variable naming the agent (its cache dir) a delegate runs for.
MARKER = "MULTINETWORK_DELEGATE_OF"
PROC = Path("/proc")
#: Seconds `stop` waits for SIGKILLed delegates to exit before giving up (CNI error 11).
STOP_TIMEOUT = 10.0


@dataclass
class Marking:
    """An Exec that runs every plugin with the agent's marker in its environment."""

    inner: invoke.Exec
    owner: str
    """The marker's value: the agent's cache dir, so agents on one node never stop each other's."""

    async def run(
        self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float
    ) -> tuple[int, bytes, bytes]:
        return await self.inner.run(plugin, {**env, MARKER: self.owner}, stdin, timeout)


@dataclass(frozen=True)
class Process:
    pid: int
    pgid: int
    delegate: bool
    """Its environment marks it as a delegate of the container looked for (else: in a group killed)."""


def stat_fields(stat: bytes) -> tuple[str, int] | None:
    """/proc/<pid>/stat -> (state, process group); None when unparsable.

    The command name, in parentheses, may hold spaces and parentheses: the fields
    after it start after its last ')'.
    """
    rest = stat.rpartition(b")")[2].split()
    if len(rest) < 3 or not rest[2].lstrip(b"-").isdigit():
        return None
    return rest[0].decode("ascii", "replace"), int(rest[2])


def is_delegate(environ: bytes, owner: str, container_id: str) -> bool:
    """Whether a NUL-separated environment marks a delegate of `owner` for `container_id`."""
    entries = b"\0" + environ + b"\0"
    marker = b"\0" + f"{MARKER}={owner}".encode("utf-8", "surrogateescape") + b"\0"
    container = b"\0" + f"CNI_CONTAINERID={container_id}".encode("utf-8", "surrogateescape") + b"\0"
    return marker in entries and container in entries


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def live_processes(
    owner: str, container_id: str, groups: Collection[int] = (), proc: Path = PROC
) -> list[Process]:
    """Processes that have not exited and are delegates of `container_id` or in one of `groups`."""
    found: list[Process] = []
    try:
        names = [name for name in os.listdir(proc) if name.isdigit()]
    except OSError as exc:
        raise CNIError(
            ErrorCode.IO_FAILURE,
            f"cannot list {proc} to look for delegates of container {container_id} still running",
            str(exc),
        ) from None
    root = str(proc)
    for name in names:
        try:
            delegate = is_delegate(_read(f"{root}/{name}/environ"), owner, container_id)
            if not delegate and not groups:
                continue  # the common case: one read per process
            fields = stat_fields(_read(f"{root}/{name}/stat"))
        except OSError:  # exited meanwhile
            continue
        if fields is None or fields[0] in ("Z", "X"):
            continue
        if delegate or fields[1] in groups:
            found.append(Process(int(name), fields[1], delegate))
    return found


async def stop(
    owner: str, container_id: str, *, timeout: float = STOP_TIMEOUT, proc: Path = PROC
) -> list[int]:
    """Kills the delegates of `container_id` still running and waits until they are gone.

    Returns the PIDs it found (empty almost always). Each one's process group is
    killed, so plugins a delegate runs go too, even one that cleared its environment.
    Raises CNI error 11 when some are still alive after `timeout` seconds.
    """
    own = {os.getpid(), os.getpgrp()}
    groups: set[int] = set()
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        processes = await asyncio.to_thread(live_processes, owner, container_id, frozenset(groups), proc)
        targets = [p for p in processes if p.pid not in own]
        if not targets:
            if seen:
                log.warning(
                    "container %s: stopped %d delegate process(es) left running by an earlier agent: %s",
                    container_id,
                    len(seen),
                    ", ".join(map(str, sorted(seen))),
                )
            return sorted(seen)
        if time.monotonic() > deadline:
            raise CNIError(
                ErrorCode.TRY_AGAIN_LATER,
                f"delegate plugins of container {container_id} are still running",
                f"processes {', '.join(str(p.pid) for p in targets)} were started by an earlier agent "
                f"and did not exit within {timeout:g}s of SIGKILL; tearing down now would let them "
                "re-create what the DEL removes",
            )
        for p in targets:
            seen.add(p.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if p.pgid > 1 and p.pgid not in own:
                    groups.add(p.pgid)
                    os.killpg(p.pgid, signal.SIGKILL)
                else:
                    os.kill(p.pid, signal.SIGKILL)
        await asyncio.sleep(0.02)
