"""Installing the agent on a node: its shim into the CNI bin dir, its conflist into the conf dir.

A step of its own, apart from running the agent (as Multus ships an installer beside its
daemon): `podnetwork cni-agent --install` runs `install_shim` before the agent starts, and the
running agent writes `own_conflist` through `write_conflist` once its default network is usable
(NPWG 6.1), because only then may the runtime use it.

The shim is one file. `bridge/agent/shim.py` imports its protocol (`bridge.agent.protocol`),
which a node's `python3 -IS` cannot import; the installed shim carries the protocol's text in
place of that import, so the shim and the agent read one definition and the shim still starts
without importing anything of this project. The compiled shim (`shim.c`) is built with the
protocol's constants as `-D` flags (`compile_flags`).
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bridge import npwg
from bridge.agent import conflist, invoke, protocol
from bridge.agent.invoke import CNIError
from bridge.agent.settings import NETWORK_NAME, PLUGIN_TYPE

log = logging.getLogger(__name__)

SHIM_SOURCE = Path(__file__).with_name("shim.py")
SHIM_C_SOURCE = Path(__file__).with_name("shim.c")
PROTOCOL_SOURCE = Path(protocol.__file__)
DEFAULT_SHIM_PYTHON = "/usr/bin/python3"
#: The lines of `shim.py` around its import of the protocol, which the installed shim replaces
#: with the protocol's text.
PROTOCOL_BEGIN = "# --- the protocol: begin"
PROTOCOL_END = "# --- the protocol: end"
#: The line of `protocol.py` after which comes what only the agent needs (not inlined).
AGENT_SIDE = "# --- the agent's side"
#: The protocol's constants the compiled shim is built with (`#error` in shim.c without them).
COMPILED_CONSTANTS = ("MAX_STDIN_BYTES", "TIMEOUT_SECONDS", "CONNECT_TIMEOUT_SECONDS", "AGENT_UNAVAILABLE",
                      "IO_FAILURE", "API_PATH", "HOST", "CONTENT_TYPE")


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
    inlined = (f"# --- bridge/agent/protocol.py, the shim's side, inlined by the installer\n{shims_side()}"
               "# --- end of bridge/agent/protocol.py\n")
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


def install_shim(
    bin_dir: Path,
    python: str = DEFAULT_SHIM_PYTHON,
    name: str = PLUGIN_TYPE,
    *,
    compiled: bool = False,
) -> Path:
    """Copies the shim into `bin_dir` as an executable named `name`, atomically.

    Its first line becomes `#!<python> -IS`: the node's interpreter, isolated and
    without site packages (fast start, nothing from the environment). With `compiled`,
    `name` is `shim.c` built by the node's `cc`, which forwards ordinary requests itself
    and hands everything else to the Python shim, installed beside it as `.<name>.py`;
    without a compiler (or if the build fails) `name` is the Python shim, as without it.
    """
    if not os.path.isabs(python):
        raise ValueError(f"--shim-python must be an absolute path, got {python!r}")
    script = shim_script(python).encode()
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / name
    if compiled:
        python_shim = _write_executable(bin_dir, f".{name}.py", lambda tmp: Path(tmp).write_bytes(script))
        try:
            return _write_executable(bin_dir, name, lambda tmp: compile_shim(python_shim, tmp))
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            log.warning("the compiled shim was not built (%s); installing the Python shim as %s", exc, target)
    return _write_executable(bin_dir, name, lambda tmp: Path(tmp).write_bytes(script))


def _c_value(value: object) -> str:
    """A constant of the protocol as C source: a number, or a string literal."""
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if any(c in text for c in '"\\\n') or not text.isprintable():
        raise ValueError(f"{text!r} cannot be written into C source")
    return f'"{text}"'


def compile_flags(python_shim: Path) -> list[str]:
    """The `-D` flags `shim.c` is built with: the Python shim to defer to, and the protocol's
    constants (`COMPILED_CONSTANTS`), so that both shims speak, wait and refuse alike."""
    values: dict[str, object] = {"PYTHON_SHIM": str(python_shim)}
    values.update((name, getattr(protocol, name)) for name in COMPILED_CONSTANTS)
    return [f"-D{name}={_c_value(value)}" for name, value in values.items()]


def compile_shim(python_shim: Path, output: str) -> None:
    """`shim.c` -> `output`, deferring to `python_shim`; raises when there is no compiler or it fails."""
    flags = compile_flags(python_shim)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise FileNotFoundError("no C compiler (cc) on this node")
    subprocess.run(
        # Static: built in the agent's container, it runs on the node, whose libc may differ.
        [compiler, "-O2", "-static", "-s", *flags, "-o", output, str(SHIM_C_SOURCE)],
        check=True, capture_output=True, timeout=120,
    )


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
    "DEFAULT_SHIM_PYTHON",
    "compile_flags",
    "compile_shim",
    "default_version",
    "install_shim",
    "own_conflist",
    "remove_conflist",
    "shim_script",
    "write_atomically",
    "write_conflist",
]
