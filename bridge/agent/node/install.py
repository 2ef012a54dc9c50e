"""Installing the agent on a node: its shim into the CNI bin dir, its conflist into the conf dir.

A step of its own, apart from running the agent (as Multus ships an installer beside its
daemon): `podnetwork cni-agent --install` runs `install` before the agent starts, and the
running agent writes `own_conflist` through `write_conflist` once its default network is usable
(NPWG 6.1), because only then may the runtime use it.

The shim is one file. `bridge/agent/shim/shim.py` imports its protocol (`bridge.agent.shim.protocol`),
which a node's `python3 -IS` cannot import; the installed shim carries the protocol's text in
place of that import, so the shim and the agent read one definition and the shim still starts
without importing anything of this project. The compiled shim (`shim.c`), installed by default,
is the image's prebuilt binary or is built here (`bridge.agent.shim.shimbuild`: the protocol's
constants as `-D` flags, a build id that says a prebuilt binary matches); without either, the
Python shim is installed, with one warning saying why.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bridge import npwg
from bridge.agent.delegates import conflist, invoke
from bridge.agent.delegates.invoke import CNIError
from bridge.agent.node.settings import NETWORK_NAME, PLUGIN_TYPE
from bridge.agent.shim import protocol, shimbuild

log = logging.getLogger(__name__)

SHIM_SOURCE = Path(protocol.__file__).with_name("shim.py")
PROTOCOL_SOURCE = Path(protocol.__file__)
DEFAULT_SHIM_PYTHON = "/usr/bin/python3"
#: The lines of `shim.py` around its import of the protocol, which the installed shim replaces
#: with the protocol's text.
PROTOCOL_BEGIN = "# --- the protocol: begin"
PROTOCOL_END = "# --- the protocol: end"
#: The line of `protocol.py` after which comes what only the agent needs (not inlined).
AGENT_SIDE = "# --- the agent's side"
#: Where the image keeps the compiled shim its build stage made (deploy/agent/Dockerfile):
#: `--install` takes it when it is there and is the build of this shim.c and protocol.
DEFAULT_PREBUILT_SHIM = Path("/opt/podnetwork/shim/multinetwork")


def shim_script(python: str, source: Path = SHIM_SOURCE) -> str:
    """The Python shim as installed: `#!<python> -IS`, the protocol inlined (module docstring)."""
    lines = source.read_text().splitlines(keepends=True)
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    begin = next((i for i, line in enumerate(lines) if line.startswith(PROTOCOL_BEGIN)), None)
    end = next((i for i, line in enumerate(lines) if line.startswith(PROTOCOL_END)), None)
    if begin is None or end is None or end < begin:
        raise ValueError(f"{source} lacks the lines {PROTOCOL_BEGIN!r} and {PROTOCOL_END!r} around its "
                         "import of the protocol")
    inlined = ("# --- bridge/agent/shim/protocol.py, the shim's side, inlined by the installer\n"
               f"{shims_side()}"
               "# --- end of bridge/agent/shim/protocol.py\n")
    return f"#!{python} -IS\n" + "".join(lines[:begin]) + inlined + "".join(lines[end + 1:])


def shims_side() -> str:
    """The protocol module's text without its docstring, up to the agent's side: what the shim
    needs of it. Every line the shim carries is compiled on each CNI call (~0.2 ms per KB)."""
    text = PROTOCOL_SOURCE.read_text()
    first = ast.parse(text).body[0]
    start = first.end_lineno if isinstance(first, ast.Expr) and first.end_lineno is not None else 0
    lines = text.splitlines(keepends=True)[start:]
    cut = next((i for i, line in enumerate(lines) if line.startswith(AGENT_SIDE)), None)
    if cut is None:
        raise ValueError(f"{PROTOCOL_SOURCE} lacks the line {AGENT_SIDE!r} before what only the agent needs")
    return "".join(lines[:cut])


#: Which shim `--install` installs: the compiled one where it can be had, else the Python one
#: ("auto", the default); only the compiled one ("compiled"); only the Python one ("python").
ShimChoice = Literal["auto", "compiled", "python"]
SHIM_CHOICES: tuple[ShimChoice, ...] = ("auto", "compiled", "python")


class NoCompiledShim(Exception):
    """The compiled shim was required and cannot be had; the message says why, in one line."""


@dataclass(frozen=True)
class InstalledShim:
    """What `install` put in the bin dir: the shim's path, whether it is the compiled one, and how
    it came: "prebuilt <path>", "built with <compiler>", "as asked" or "the fallback: see the
    warning" (the one line `install` logs with the reasons)."""

    path: Path
    compiled: bool
    how: str


def install_shim(
    bin_dir: Path,
    python: str = DEFAULT_SHIM_PYTHON,
    name: str = PLUGIN_TYPE,
    *,
    shim: ShimChoice = "python",
    prebuilt: Path | None = None,
    compiler_path: str | None = None,
) -> Path:
    """`install`, returning the installed shim's path. The Python shim unless `shim` says otherwise
    (embedders and tests exec it directly); `podnetwork cni-agent --install` defaults to "auto"."""
    return install(bin_dir, python, name, shim=shim, prebuilt=prebuilt, compiler_path=compiler_path).path


def install(
    bin_dir: Path,
    python: str = DEFAULT_SHIM_PYTHON,
    name: str = PLUGIN_TYPE,
    *,
    shim: ShimChoice = "auto",
    prebuilt: Path | None = None,
    compiler_path: str | None = None,
) -> InstalledShim:
    """Puts the shim into `bin_dir` as an executable named `name`, atomically.

    The Python shim starts `#!<python> -IS`: the node's interpreter, isolated and without site
    packages (fast start, nothing from the environment). The compiled shim (`shim.c`) forwards
    ordinary requests itself and hands everything else to the Python shim, installed beside it as
    `.<name>.py`. It is, in order: `prebuilt` (the image's; `shimbuild.prebuilt_problem` checks it
    is the build of this `shim.c` and protocol), else built here with the C compiler found on
    `compiler_path` (default: $PATH). "auto" then falls back to the Python shim with one warning
    saying why; "compiled" raises `NoCompiledShim` instead; "python" installs the Python shim.
    """
    if not os.path.isabs(python):
        raise ValueError(f"--shim-python must be an absolute path, got {python!r}")
    if shim not in SHIM_CHOICES:
        raise ValueError(f"shim must be one of {', '.join(SHIM_CHOICES)}, got {shim!r}")
    script = shim_script(python).encode()
    bin_dir.mkdir(parents=True, exist_ok=True)
    if shim == "python":
        path = _write_executable(bin_dir, name, lambda tmp: Path(tmp).write_bytes(script))
        return InstalledShim(path, False, "as asked")
    reasons: list[str] = []
    with _staged(bin_dir, name) as staged:
        how = _compiled_shim(staged, prebuilt, compiler_path, reasons)
        if how is not None:
            # The Python shim first: the compiled one never runs without it to hand over to.
            _write_executable(bin_dir, f".{name}.py", lambda tmp: Path(tmp).write_bytes(script))
            os.chmod(staged, 0o755)
            os.replace(staged, bin_dir / name)
            if reasons:  # the prebuilt binary could not be used; one was built here instead
                log.warning("installed the compiled shim %s %s: %s", bin_dir / name, how, "; ".join(reasons))
            return InstalledShim(bin_dir / name, True, how)
    why = "; ".join(reasons)
    if shim == "compiled":
        raise NoCompiledShim(f"the compiled shim cannot be installed: {why}")
    # Nothing written before this point when the compiled shim was required and cannot be had.
    path = _write_executable(bin_dir, name, lambda tmp: Path(tmp).write_bytes(script))
    log.warning("installed the Python shim as %s, not the compiled one (~5 ms more per CNI call, "
                "docs/benchmarks.md): %s", path, why)
    return InstalledShim(path, False, "the fallback: see the warning")


def _compiled_shim(output: str, prebuilt: Path | None, compiler_path: str | None,
                   reasons: list[str]) -> str | None:
    """The compiled shim into `output`: `prebuilt` if it matches, else built here. How it came,
    or None with why not appended to `reasons`."""
    if prebuilt is not None:
        problem = shimbuild.prebuilt_problem(prebuilt)
        if problem is None:
            shutil.copyfile(prebuilt, output)
            return f"prebuilt {prebuilt}"
        reasons.append(problem)
    try:
        compiler = shimbuild.find_compiler(compiler_path)
        shimbuild.build(output, path=compiler_path)
    except shimbuild.BuildError as exc:
        reasons.append(str(exc))
        return None
    return f"built with {compiler}"


@contextlib.contextmanager
def _staged(bin_dir: Path, name: str) -> Iterator[str]:
    """A temporary file in `bin_dir`, to be renamed onto `name`; removed unless it was."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=bin_dir)
    os.close(fd)
    try:
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _write_executable(bin_dir: Path, name: str, write: Callable[[str], Any]) -> Path:
    """`write(tmp_path)` makes the file; it becomes `bin_dir/name`, mode 0755, in one rename."""
    target = bin_dir / name
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=bin_dir)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def default_version(config: Mapping[str, Any]) -> str:
    """The version the default network runs at, which the agent's own conflist speaks:
    CNI 1.1's `cniVersions` chosen as libcni does, else `cniVersion`, else the latest."""
    if "cniVersions" in config:
        with contextlib.suppress(CNIError):  # conflist.load reports it, with context
            return conflist.chosen_version(config)
    return str(config.get("cniVersion") or invoke.LATEST_VERSION)


def own_conflist(default_config: Mapping[str, Any], socket_path: Path) -> dict[str, Any]:
    """The conflist the runtime reads: the shim as the only plugin, speaking the default
    network's cniVersion and offering the capabilities its plugins declare (7.5)."""
    capabilities: dict[str, bool] = {}
    for delegate in npwg.plugins_of(default_config):
        # why: the agent keeps pydantic out (its RSS); a CNI plugin's JSON, one key read
        for cap, on in (delegate.get("capabilities") or {}).items():
            if on is True:
                capabilities[cap] = True
    plugin: dict[str, Any] = {"type": PLUGIN_TYPE, "socketPath": str(socket_path)}
    if capabilities:
        plugin["capabilities"] = capabilities
    return {
        "cniVersion": default_version(default_config),
        "name": NETWORK_NAME,
        "plugins": [plugin],
    }


def write_conflist(path: Path, default_config: Mapping[str, Any], socket_path: Path) -> None:
    """Installs the agent's conflist (`own_conflist`) at `path`: from now on the runtime uses it."""
    write_atomically(path, json.dumps(own_conflist(default_config, socket_path), indent=2))


def remove_conflist(path: Path) -> None:
    """Removes the agent's conflist: without its agent, the node must not look network-ready."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def remove_shim(bin_dir: Path, name: str = PLUGIN_TYPE) -> list[Path]:
    """Removes what `install` put into `bin_dir` (the shim, and the Python shim beside a compiled
    one); the paths it removed. For an uninstall only: a stopping agent leaves the shim, which
    answers a late runtime call with a CNI error naming the agent."""
    removed = []
    for path in (bin_dir / name, bin_dir / f".{name}.py"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """`text` into `path`, synced, in one rename: a runtime never reads half a conflist."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


__all__ = [
    "DEFAULT_PREBUILT_SHIM",
    "DEFAULT_SHIM_PYTHON",
    "SHIM_CHOICES",
    "InstalledShim",
    "NoCompiledShim",
    "ShimChoice",
    "default_version",
    "install",
    "install_shim",
    "own_conflist",
    "remove_conflist",
    "remove_shim",
    "shim_script",
    "write_atomically",
    "write_conflist",
]
