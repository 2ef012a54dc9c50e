"""Our nftables tables in a network namespace: apply, remove, read back.

Each function owns one table, its `table` argument: `POLICY` (`inet podnetwork_policy`, a
pod's MultiNetworkPolicy rules, the default), `SERVICES` (`inet podnetwork_services`, the
ClusterIPs of Services on the pod's networks, bridge.services) or `ACCESS` (`inet
podnetwork_access`, in the node's namespace: the node's paths to PodNetworks,
`bridge.agent.access.apply`). A ruleset may touch its own table only, so one applier can
never change another's table. A table is written with the `nft` program fed libnftables JSON on stdin
(`nft -j -f -`), entered into the namespace by `nsenter --net=…`:

- One `nft` run is one netlink batch, which the kernel commits or refuses as a whole.
  `apply` puts "create our table if missing, delete it" in front of the ruleset in the
  same document, so the old table is replaced by the new one in one transaction: a
  connection never sees no table or half a table, and a ruleset the kernel (or nft's
  parser) refuses leaves the previous table exactly as it was.
- `change` sends a difference instead (`flush chain`, `delete element`, ...) in one batch that
  keeps the table: a few commands where `apply` sends them all; it too applies whole or not at all.
- `nsenter` rather than setns(2) in a `preexec_fn`: `preexec_fn` runs Python between
  fork and exec, which CPython documents as unsafe in a process with threads (the agent
  has them: bridge.agent.netns.routes, addresswatch), and on Python 3.11 setns needs ctypes
  there. nsenter costs one more exec (docs/benchmarks.md, "nftables": about 1 ms of a
  ~10-20 ms apply). The in-process alternative, libnftables through ctypes in a thread
  that entered the namespace, saves the fork but cannot be killed on a time-out and
  puts a C library's crash into the agent.
- The namespace is opened here first and handed to nsenter as an inherited descriptor
  (`/proc/self/fd/N`): nft runs in the namespace we checked even if the path is
  unmounted meanwhile, and a namespace that is gone is told apart (`NetnsGone`) from
  nft refusing the ruleset.

Every run has a time-out (the process group is killed) and reads at most
`MAX_OUTPUT_BYTES` of each of stdout and stderr (the rest is drained and dropped).
Errors name the namespace, what we asked and what nft said.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.agent.delegates import invoke
from bridge.policy.rules import FAMILY, TABLE
from bridge.services import dnat
from podnetwork.ground import constants

#: The policy table's family and name, as a table object names them (the default of every function).
OUR_TABLE = {"family": FAMILY, "name": TABLE}


@dataclass(frozen=True)
class Table:
    """One nftables table of ours: a call given it touches that table and no other."""

    family: str
    name: str

    def __str__(self) -> str:
        return f"{self.family} {self.name}"

    def ref(self) -> dict[str, str]:
        """How a table object names itself: `{"family", "name"}`."""
        return {"family": self.family, "name": self.name}


#: The MultiNetworkPolicy table (bridge.policy.rules).
POLICY = Table(FAMILY, TABLE)
#: The table of Services' ClusterIPs (bridge.services.dnat).
SERVICES = Table(dnat.FAMILY, dnat.TABLE)
#: The node's table scoping its paths to PodNetworks (bridge.agent.access.apply).
ACCESS = Table(FAMILY, constants.NODE_ACCESS_TABLE)

DEFAULT_TIMEOUT = 10.0
"""Seconds for one nft run, from the start of nsenter to nft's exit."""

MAX_OUTPUT_BYTES = 64 * 1024
"""What is kept of nft's stdout and of its stderr; an error quotes at most this much."""

#: libnftables JSON commands a ruleset may hold (a bare object means "add").
ALLOWED_COMMANDS = frozenset({"add", "create", "insert", "replace", "delete", "flush"})
#: Object types that live in a table.
TABLE_OBJECTS = frozenset(
    {"table", "chain", "rule", "set", "map", "element", "counter", "quota", "limit", "ct helper"})

_NS_GET_NSTYPE = 0xB703  # ioctl on a namespace file: its CLONE_NEW* type (Linux >= 4.11)
_CLONE_NEWNET = 0x40000000


class NftablesError(Exception):
    """nft could not do what we asked in one network namespace; nothing of that request was applied."""

    def __init__(self, netns: str, action: str, detail: str) -> None:
        self.netns = netns
        self.action = action
        self.detail = detail
        super().__init__(f"{action} in network namespace {netns} failed: {detail}")


class NetnsGone(NftablesError):
    """The network namespace does not exist (any more): its path is missing, or the process is gone."""


def document(ruleset: Mapping[str, Any], table: Table = POLICY) -> dict[str, Any]:
    """The transaction `apply` sends: `table` created if missing and deleted, then `ruleset`.

    `ruleset` is a libnftables JSON document (`{"nftables": [...]}`) that builds `table`
    from nothing (commands or bare objects, optionally `metainfo`). Anything that is not
    in `table` (another table, ours or not, `flush ruleset`, `list`) is refused with
    ValueError naming the item, before nft runs: each call owns one table and never another's.
    """
    items = _items(ruleset, table, "ruleset")
    ours = {"table": table.ref()}
    # A metainfo (the schema version nft checks) stays first, where nft itself writes it.
    meta = [i for i in items if "metainfo" in i]
    rest = [i for i in items if "metainfo" not in i]
    return {"nftables": [*meta, {"add": ours}, {"delete": ours}, *rest]}


def _items(document: Mapping[str, Any], table: Table, what: str) -> list[Any]:
    """The items of a libnftables JSON `document`, each checked to touch `table` only (ValueError
    naming the first that does not, `what` saying whose)."""
    items = document.get("nftables") if isinstance(document, Mapping) else None
    if not isinstance(items, list):
        raise ValueError(
            f'a {what} is a libnftables JSON object {{"nftables": [...]}}, not {_quote(document)}')
    for index, item in enumerate(items):
        problem = _refusal(item, table)
        if problem:
            raise ValueError(f"{what} item {index} ({_quote(item)}): {problem}")
    return list(items)


def _refusal(item: Any, table: Table) -> str:
    """Why `item` may not be in a ruleset of ours, or ''."""
    if not isinstance(item, dict) or len(item) != 1:
        return "each item is an object with one key (a command such as add, or an object such as rule)"
    (key, value), = item.items()
    if key == "metainfo":
        return ""
    if key in ALLOWED_COMMANDS:
        if not isinstance(value, dict) or len(value) != 1:
            return f"the {key} command takes one object, e.g. {{{key!r}: {{'rule': {{...}}}}}}"
        (key, value), = value.items()
    elif key not in TABLE_OBJECTS:
        return f"{key!r} is not a command this code sends (one of {', '.join(sorted(ALLOWED_COMMANDS))})"
    if key not in TABLE_OBJECTS:
        return f"{key!r} is not an object of a table (one of {', '.join(sorted(TABLE_OBJECTS))})"
    if not isinstance(value, dict):
        return f"the {key} is an object"
    name = value.get("name") if key == "table" else value.get("table")
    if value.get("family") != table.family or name != table.name:
        return f"only table {table} is ours to change, not {value.get('family')} {name}"
    return ""


def _quote(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 200 else text[:200] + "..."


async def apply(netns: str, ruleset: Mapping[str, Any], *, table: Table = POLICY,
                timeout: float = DEFAULT_TIMEOUT, nft: str = "nft", nsenter: str = "nsenter") -> None:
    """Makes `table` in the namespace at path `netns` exactly `ruleset`, in one transaction.

    Raises ValueError for a ruleset that reaches outside our table (nothing runs),
    NetnsGone when the namespace does not exist, NftablesError when nft refuses the
    ruleset or does not finish within `timeout` seconds. In every failure the table is
    as it was before: the kernel applies a batch whole or not at all.
    """
    body = json.dumps(document(ruleset, table)).encode()
    await _nft(netns, f"apply nftables table {table}", ["-j", "-f", "-"], body, timeout, nft, nsenter)


def changing(commands: Mapping[str, Any], table: Table = POLICY) -> dict[str, Any]:
    """The transaction `change` sends: `commands` as they are, checked like `document`'s (each
    touches `table` and nothing else: ValueError naming the item otherwise)."""
    return {"nftables": _items(commands, table, "change")}


async def change(netns: str, commands: Mapping[str, Any], *, table: Table = POLICY,
                 timeout: float = DEFAULT_TIMEOUT, nft: str = "nft", nsenter: str = "nsenter") -> None:
    """Changes `table` in the namespace at path `netns` in place by `commands`, in one transaction.

    Unlike `apply`, the table is kept (not replaced): `commands` are a difference from what it
    holds (bridge.services.changes), and fail whole (NftablesError, the table as it was) when it
    does not hold what they expect, e.g. a chain to flush that is not there. ValueError for a
    command outside `table`, NetnsGone when the namespace does not exist.
    """
    body = json.dumps(changing(commands, table)).encode()
    await _nft(netns, f"change nftables table {table}", ["-j", "-f", "-"], body, timeout, nft, nsenter)


async def remove(netns: str, *, table: Table = POLICY, timeout: float = DEFAULT_TIMEOUT, nft: str = "nft",
                 nsenter: str = "nsenter") -> None:
    """Deletes `table` from the namespace at path `netns`, if both exist (idempotent).

    An empty `netns` (a CNI DEL may carry none) or a namespace that is gone is no error:
    its tables went with it. Raises NftablesError when nft fails or times out.
    """
    if not netns:
        return
    ours = {"table": table.ref()}
    body = json.dumps({"nftables": [{"add": ours}, {"delete": ours}]}).encode()
    with contextlib.suppress(NetnsGone):
        await _nft(netns, f"remove nftables table {table}", ["-j", "-f", "-"], body, timeout, nft, nsenter)


async def exists(netns: str, *, table: Table = POLICY, timeout: float = DEFAULT_TIMEOUT, nft: str = "nft",
                 nsenter: str = "nsenter") -> bool:
    """Whether `table` is in the namespace at path `netns` (NetnsGone if the namespace is not)."""
    action = "list nftables tables"
    out = await _nft(netns, action, ["-j", "list", "tables", table.family], b"", timeout, nft, nsenter)
    try:
        items = json.loads(out)["nftables"]
        return any(isinstance(i, dict) and i.get("table", {}).get("name") == table.name for i in items)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise NftablesError(netns, action, f"nft answered what is not its JSON: {_cut(out)}") from None


async def _nft(netns: str, action: str, args: Sequence[str], stdin: bytes, timeout: float, nft: str,
               nsenter: str) -> bytes:
    """Runs `nft ARGS` in the namespace at path `netns`; its stdout (at most MAX_OUTPUT_BYTES)."""
    program = shutil.which(nft)
    if program is None:
        raise NftablesError(netns, action,
                            f"the nft program ({nft}) is not installed: install the nftables package")
    return await run_in(netns, action, [program, *args], stdin, timeout=timeout, nsenter=nsenter,
                        said_by="nft")


async def run_in(netns: str, action: str, argv: Sequence[str], stdin: bytes = b"", *,
                 timeout: float = DEFAULT_TIMEOUT, nsenter: str = "nsenter", said_by: str = "") -> bytes:
    """Runs `argv` (a program's path and its arguments) in the namespace at path `netns`; its stdout
    (at most MAX_OUTPUT_BYTES). NetnsGone, or NftablesError naming `action` and what the program
    (`said_by`, its file name by default) said."""
    said_by = said_by or os.path.basename(argv[0])
    fd = _open_netns(netns, action)
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                nsenter, f"--net=/proc/self/fd/{fd}", *argv,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                pass_fds=(fd,), start_new_session=True,  # a time-out kills whatever it started
            )
        except OSError as exc:
            raise NftablesError(netns, action, f"cannot execute {nsenter}: {exc.strerror}") from None
    finally:
        os.close(fd)
    try:
        out, err = await asyncio.wait_for(_communicate(proc, stdin), timeout)
    except TimeoutError:
        await invoke.kill_group(proc)
        raise NftablesError(netns, action, f"{said_by} did not finish within {timeout:g} s; it was killed, "
                                           "and a transaction it had not committed is not applied") from None
    except BaseException:
        await invoke.kill_group(proc)
        raise
    if proc.returncode != 0:
        said = _cut(err or out) or f"no message, exit code {proc.returncode}"
        raise NftablesError(netns, action, f"{said_by} said: {said}")
    return out


def _open_netns(netns: str, action: str) -> int:
    """An O_RDONLY descriptor of the namespace file, checked to be a network namespace."""
    try:
        fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ESRCH):
            raise NetnsGone(netns, action, "the network namespace does not exist (any more)") from None
        raise NftablesError(netns, action, f"cannot open it: {exc.strerror}") from None
    try:
        nstype = fcntl.ioctl(fd, _NS_GET_NSTYPE)
    except OSError:
        nstype = None
    if nstype != _CLONE_NEWNET:
        os.close(fd)
        raise NftablesError(netns, action, "it is not a network namespace (a CNI_NETNS path such as "
                                           "/var/run/netns/NAME or /proc/PID/ns/net)")
    return fd


async def _communicate(proc: asyncio.subprocess.Process, stdin: bytes) -> tuple[bytes, bytes]:
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    async def feed() -> None:
        assert proc.stdin is not None
        # nft may exit before reading everything (an early error): its message matters, not the pipe.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin)
            await proc.stdin.drain()
        proc.stdin.close()

    _, out, err = await asyncio.gather(feed(), _read_bounded(proc.stdout), _read_bounded(proc.stderr))
    await proc.wait()
    return out, err


async def _read_bounded(stream: asyncio.StreamReader) -> bytes:
    """At most MAX_OUTPUT_BYTES of `stream`; the rest is read and dropped, so the writer never blocks."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < MAX_OUTPUT_BYTES:
            kept += chunk[: MAX_OUTPUT_BYTES - len(kept)]
    return bytes(kept)


def _cut(data: bytes) -> str:
    text = data.decode(errors="replace").strip()
    return text if len(data) < MAX_OUTPUT_BYTES else text + " [...] (cut)"
