"""One execution of one CNI plugin, in small pure pieces (CNI spec, section 2 "Execution Protocol").

arguments -> environment (`environment`), plugin type -> executable (`find_plugin`),
execution (`Exec`, `SubprocessExec`), stdout -> result or error (`decode`).
Plugins are looked up only in the configured bin dirs, a `type` is a bare file
name (never a path, never `..`), and nothing runs through a shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any, Protocol

from bridge import npwg
from bridge.agent.delegates import hostpaths
from bridge.agent.shim import protocol

#: Versions of the CNI specification this project speaks, oldest first (the shim's too).
SUPPORTED_VERSIONS: tuple[str, ...] = protocol.SUPPORTED_VERSIONS
#: The version the agent answers in when the caller names none.
LATEST_VERSION = protocol.LATEST_VERSION
#: Default CNI bin dirs: the upstream default first, then Debian's package location.
DEFAULT_BIN_DIRS: tuple[Path, ...] = (Path("/opt/cni/bin"), Path("/usr/lib/cni"))

# CNI spec 1.0 "type": "must not contain characters disallowed in file paths
# for the system (e.g. / or \\)". We are stricter: a bare, printable file name.
_PLUGIN_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$")
# CNI spec "CNI_CONTAINERID": alphanumeric, then alphanumerics, underscore, dot, hyphen.
_CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
#: The longest CNI_CONTAINERID the agent attaches. The agent's record of a container is the
#: file `<ID>.jsonl`, and Linux file systems cap a file name at 255 bytes (NAME_MAX), so
#: 249 is the longest ID whose record can exist: every record any agent version wrote
#: keeps its name. Runtimes use 64 hex digits.
CONTAINER_ID_MAX = 255 - len(".jsonl")  # cache.NAME_MAX - len(cache.SUFFIX)


class Command(StrEnum):
    """CNI operations (CNI spec section 2, "CNI operations")."""

    ADD = "ADD"
    DEL = "DEL"
    CHECK = "CHECK"
    STATUS = "STATUS"
    VERSION = "VERSION"
    GC = "GC"


class ErrorCode(IntEnum):
    """CNI error codes: 1-99 are the spec's well-known codes, 100+ are this project's. Those the
    shim answers too are the protocol's (`bridge.agent.shim.protocol`)."""

    INCOMPATIBLE_VERSION = protocol.INCOMPATIBLE_VERSION
    UNSUPPORTED_FIELD = 2
    UNKNOWN_CONTAINER = 3
    INVALID_ENVIRONMENT = protocol.INVALID_ENVIRONMENT
    IO_FAILURE = protocol.IO_FAILURE
    DECODING_FAILURE = protocol.DECODING_FAILURE
    INVALID_CONFIG = protocol.INVALID_CONFIG
    TRY_AGAIN_LATER = protocol.TRY_AGAIN_LATER
    PLUGIN_TIMEOUT = 100
    """A delegate plugin did not answer within the agent's per-call timeout."""
    PLUGIN_FAILED = 101
    """A delegate plugin failed without printing a CNI error."""
    AGENT_UNAVAILABLE = protocol.AGENT_UNAVAILABLE
    """The shim could not reach the agent (not running, socket missing)."""
    REQUEST_TOO_LARGE = protocol.REQUEST_TOO_LARGE
    """The request is larger than the agent accepts."""
    POD_NOT_FOUND = 104
    """ADD for a pod the agent cannot read from the API."""
    DELEGATION_FAILED = 105
    """A selected network cannot be turned into a delegate configuration."""
    ATTACHMENT_INCOMPLETE = 106
    """CHECK of a container whose attachments are partly set up or torn down: DEL it."""
    POLICY_NOT_ENFORCED = 107
    """ADD of a pod that MultiNetworkPolicies select, whose rules could not be written (the
    agent fails closed: the ADD is rolled back)."""


class CNIError(Exception):
    """A CNI error as protocol data: `{cniVersion, code, msg, details}` (CNI spec "Errors")."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(f"{msg}: {details}" if details else msg)
        self.code = int(code)
        self.msg = msg
        self.details = details

    def to_json(self, cni_version: str = LATEST_VERSION) -> dict[str, Any]:
        out: dict[str, Any] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CNIError:
        code = data.get("code")
        return cls(
            code if isinstance(code, int) else ErrorCode.PLUGIN_FAILED,
            str(data.get("msg") or "plugin failed without a message"),
            str(data.get("details") or ""),
        )


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.4.0' -> (0, 4, 0); anything unparsable sorts lowest, as the oldest protocol."""
    try:
        return tuple(int(p) for p in version.split("."))
    except (AttributeError, ValueError):
        return (0,)


def check_container_id(container_id: str, *, max_length: int | None = CONTAINER_ID_MAX) -> str:
    """The ID, if it is a CNI container ID of at most `max_length` characters; else CNI error 4."""
    if not isinstance(container_id, str) or not _CONTAINER_ID.fullmatch(container_id):
        shown = container_id[:80] if isinstance(container_id, str) else container_id
        raise CNIError(
            ErrorCode.INVALID_ENVIRONMENT,
            "invalid CNI_CONTAINERID",
            f"{shown!r}: must start with a letter or digit and contain only letters, digits, "
            "'_', '.' and '-'",
        )
    if max_length is not None and len(container_id) > max_length:
        raise CNIError(
            ErrorCode.INVALID_ENVIRONMENT,
            "CNI_CONTAINERID is too long",
            f"it has {len(container_id)} characters, the agent accepts at most {max_length}: its record "
            f"of the container is a file named after the ID, and a file name has at most 255 bytes "
            f"(runtimes use 64 hex digits); {container_id[:40]!r}...",
        )
    return container_id


def check_ifname(ifname: str) -> str:
    problem = npwg.interface_problem(ifname) if isinstance(ifname, str) else "must be a string"
    if problem:
        raise CNIError(ErrorCode.INVALID_ENVIRONMENT, "invalid interface name", f"{ifname!r}: {problem}")
    return ifname


@dataclass(frozen=True)
class RuntimeArgs:
    """The per-invocation parameters of CNI spec section 2 "Parameters"."""

    command: Command
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: tuple[tuple[str, str], ...] = ()
    """CNI_ARGS as ordered key/value pairs."""

    def with_ifname(self, ifname: str) -> RuntimeArgs:
        return RuntimeArgs(self.command, self.container_id, self.netns, ifname, self.args)

    def with_command(self, command: Command) -> RuntimeArgs:
        return RuntimeArgs(command, self.container_id, self.netns, self.ifname, self.args)

    def arg(self, key: str) -> str | None:
        for k, v in self.args:
            if k == key:
                return v
        return None


def parse_cni_args(text: str) -> tuple[tuple[str, str], ...]:
    """'K1=V1;K2=V2' -> (('K1','V1'), ('K2','V2')); a pair without '=' is an error."""
    pairs: list[tuple[str, str]] = []
    for item in (text or "").split(";"):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CNIError(ErrorCode.INVALID_ENVIRONMENT, "invalid CNI_ARGS", f"{item!r} is not KEY=VALUE")
        pairs.append((key, value))
    return tuple(pairs)


def format_cni_args(pairs: Sequence[tuple[str, str]]) -> str:
    return ";".join(f"{k}={v}" for k, v in pairs)


def environment_problem(args: RuntimeArgs) -> str | None:
    """Why no process could be given these CNI variables, or None.

    A process environment holds bytes without NUL. The runtime's own values arrive as
    bytes (read with surrogateescape) and always go back; a lone surrogate such as
    "\\udfff", which a JSON escape in a pod's annotation can carry into an interface
    name, has no byte form. No plugin can ever have run with such arguments."""
    for var, value in (("CNI_CONTAINERID", args.container_id), ("CNI_NETNS", args.netns),
                       ("CNI_IFNAME", args.ifname), ("CNI_ARGS", format_cni_args(args.args))):
        try:
            encoded = os.fsencode(value)
        except UnicodeEncodeError:
            return f"{var} {value[:80]!r} has no byte form (a lone surrogate)"
        if b"\0" in encoded:
            return f"{var} {value[:80]!r} holds a NUL"
    return None


def environment(
    args: RuntimeArgs, bin_dirs: Sequence[Path], base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of one plugin call: the CNI variables, plus PATH for plugins that run tools.

    The rest of the caller's environment is not passed on: a plugin sees only
    what the protocol gives it. CNI_PATH is our bin dirs, so chained IPAM
    plugins are found only there too. CNI error 4 when a value cannot be passed on
    (`environment_problem`); the agent's checks refuse such values before any plugin runs.
    """
    if problem := environment_problem(args):
        raise CNIError(ErrorCode.INVALID_ENVIRONMENT, "cannot pass the CNI variables to a plugin", problem)
    env = {"PATH": (base or os.environ).get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    env["CNI_COMMAND"] = args.command.value
    env["CNI_PATH"] = os.pathsep.join(str(d) for d in bin_dirs)
    if args.container_id:
        env["CNI_CONTAINERID"] = args.container_id
    if args.netns:
        env["CNI_NETNS"] = args.netns
    if args.ifname:
        env["CNI_IFNAME"] = args.ifname
    if args.args:
        env["CNI_ARGS"] = format_cni_args(args.args)
    return env


def check_plugin_type(plugin_type: Any) -> str:
    """A plugin `type` must be a bare file name: never a path, never '..'."""
    if not isinstance(plugin_type, str) or not _PLUGIN_TYPE.fullmatch(plugin_type) or ".." in plugin_type:
        raise CNIError(
            ErrorCode.INVALID_CONFIG,
            "invalid plugin type",
            f"{plugin_type!r}: a plugin type must be a bare file name of letters, digits, '.', '_', "
            "'+' or '-' (no '/' and no '..'), found in the CNI bin dirs",
        )
    return plugin_type


def find_plugin(plugin_type: Any, bin_dirs: Sequence[Path], *,
                host_root: Path = hostpaths.HOST_PROC / "root") -> Path:
    """The executable for `plugin_type`, from the bin dirs only, first dir wins.

    A symlink there that does not resolve here (the agent's container) is resolved as the
    host resolves it, under `host_root` (the host's init's root, with `hostPID: true`): a
    host's /opt/cni/bin may link to /usr/lib/cni, which the container lacks. The plugin then
    runs from there, as the runtime on the host would run it.
    """
    name = check_plugin_type(plugin_type)
    dangling: list[str] = []
    for d in bin_dirs:
        candidate = Path(d) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
        if candidate.is_symlink():
            # The link as the host reads it: the bin dir is mounted at its host path.
            target = os.readlink(candidate)
            on_host = hostpaths.in_host_root(host_root, os.path.join(candidate.parent, target))
            if on_host is not None and on_host.is_file() and os.access(on_host, os.X_OK):
                return on_host
            dangling.append(f"{candidate} -> {os.readlink(candidate)}")
    if dangling:
        raise CNIError(
            ErrorCode.INVALID_CONFIG,
            f"failed to find plugin {name!r}",
            f"{'; '.join(dangling)}: a symlink whose target is neither in the agent's container nor, "
            f"resolved on the host, under {host_root} (the agent needs hostPID: true to see the host's "
            "files; docs/deploy.md \"CNI paths\")",
        )
    raise CNIError(
        ErrorCode.INVALID_CONFIG,
        f"failed to find plugin {name!r}",
        f"looked in {os.pathsep.join(str(d) for d in bin_dirs)}; install it there or fix the "
        'configuration\'s "type"',
    )


def decode(stdout: bytes, *, expect_result: bool) -> dict[str, Any] | None:
    """A successful call's stdout -> the result object (None when the command returns none)."""
    text = stdout.strip()
    if not text:
        if expect_result:
            raise CNIError(ErrorCode.DECODING_FAILURE, "plugin returned no result")
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CNIError(
            ErrorCode.DECODING_FAILURE, "plugin output is not JSON", f"{exc}: {text[:200]!r}"
        ) from None
    if not isinstance(data, dict):
        raise CNIError(ErrorCode.DECODING_FAILURE, "plugin output is not a JSON object", repr(text[:200]))
    return data


def decode_failure(plugin: str, returncode: int, stdout: bytes, stderr: bytes) -> CNIError:
    """A failed call's outputs -> the plugin's CNI error, or one that says what we saw."""
    try:
        data = json.loads(stdout)
    except ValueError:
        data = None
    if isinstance(data, dict) and "code" in data:
        err = CNIError.from_json(data)
        err.msg = f"plugin {plugin}: {err.msg}"
        return err
    seen = (stderr or stdout).decode(errors="replace").strip()[:500]
    return CNIError(
        ErrorCode.PLUGIN_FAILED,
        f"plugin {plugin} failed with exit code {returncode} without a CNI error",
        seen,
    )


class Exec(Protocol):
    """Runs one plugin executable; the place where tests plug in a fake or a wrapper."""

    async def run(
        self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float
    ) -> tuple[int, bytes, bytes]:
        """Returns (exit code, stdout, stderr); raises CNIError on timeout."""
        ...


class SubprocessExec:
    """Executes plugins as child processes: argv is the plugin path alone, no shell; with `netns`
    (`AgentConfig.node_netns`), in that network namespace, entered by `nsenter --net=` (which
    execs the plugin: the same process, killed as one on a time-out)."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    async def run(
        self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float
    ) -> tuple[int, bytes, bytes]:
        prefix = ["nsenter", f"--net={self.netns}"] if self.netns else []
        try:
            proc = await asyncio.create_subprocess_exec(
                *prefix,
                str(plugin),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(env),
                close_fds=True,
                # Its own process group, so a timeout also kills the plugins it runs (IPAM):
                # a surviving child would hold the pipes open and outlive the timeout.
                start_new_session=True,
            )
        except OSError as exc:  # e.g. ENOEXEC, or the file vanished since find_plugin
            raise CNIError(ErrorCode.IO_FAILURE, f"cannot execute plugin {plugin.name}", str(exc)) from None
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            await kill_group(proc)
            raise CNIError(
                ErrorCode.PLUGIN_TIMEOUT,
                f"plugin {plugin.name} timed out",
                f"no answer within {timeout:g}s (--plugin-timeout); it was killed",
            ) from None
        except asyncio.CancelledError:
            await kill_group(proc)
            raise
        return proc.returncode or 0, stdout, stderr


class Measured:
    """An `Exec` that tells `observe` how long each plugin execution took: the plugin's
    type (its file name), the CNI command, whether it exited 0, and the seconds."""

    def __init__(self, inner: Exec, observe: Callable[[str, str, bool, float], None]) -> None:
        self.inner = inner
        self.observe = observe

    async def run(
        self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float
    ) -> tuple[int, bytes, bytes]:
        started = time.perf_counter()
        ok = False
        try:
            result = await self.inner.run(plugin, env, stdin, timeout)
            ok = result[0] == 0
            return result
        finally:
            self.observe(plugin.name, env.get("CNI_COMMAND", ""), ok, time.perf_counter() - started)


async def kill_group(proc: asyncio.subprocess.Process) -> None:
    """Kills a plugin started in its own process group, with whatever it started, and reaps it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()


async def call(
    executor: Exec,
    plugin_type: Any,
    config: Mapping[str, Any],
    args: RuntimeArgs,
    bin_dirs: Sequence[Path],
    timeout: float,
) -> dict[str, Any] | None:
    """Runs one plugin for one command: the whole exec protocol of one call."""
    plugin = find_plugin(plugin_type, bin_dirs)
    env = environment(args, bin_dirs)
    code, stdout, stderr = await executor.run(plugin, env, json.dumps(config).encode(), timeout)
    if code != 0:
        raise decode_failure(plugin.name, code, stdout, stderr)
    result = decode(stdout, expect_result=args.command in (Command.ADD, Command.VERSION))
    if args.command is Command.ADD and result is not None:
        result_version = result.get("cniVersion")
        if "cniVersion" in result and (
            not isinstance(result_version, str)
            or len(parts := result_version.split(".")) != 3
            or not all(p.isascii() and p.isdigit() for p in parts)
            or version_tuple(result_version) > version_tuple(LATEST_VERSION)
        ):
            # libcni refuses a result it has no type for; guessing its meaning from its
            # shape would put guesses into prevResult, the cache and network-status.
            raise CNIError(
                ErrorCode.INCOMPATIBLE_VERSION,
                f"plugin {plugin.name} returned a result of cniVersion {result_version!r}, "
                "which is not a version this agent reads",
                f"supported: {', '.join(SUPPORTED_VERSIONS)}; set the network's cniVersion to one of those",
            )
    return result
