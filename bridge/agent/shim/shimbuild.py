"""Building the compiled shim (`shim.c`) and knowing a built one: its flags, its build id, the compiler.

`shim.c` is built with the protocol's constants as `-D` flags (`compile_flags`), so it speaks,
waits and refuses as the Python shim does, and with `SHIM_BUILD`, a hash of `shim.c` and of those
flags, which the binary carries as the marker `multinetwork-shim-build=<hash>`. A binary built
elsewhere (the image's build stage, deploy/agent/Dockerfile) is installed only when its marker
names the build this agent would make (`prebuilt_problem`): the same C source, the same protocol.

This module needs nothing but the standard library and `protocol` (which imports nothing), so the
image's build stage runs it without installing the project::

    python3 -m bridge.agent.shim.shimbuild out/multinetwork

The binary finds the Python shim it hands unusual requests to beside itself (`.<its name>.py`,
as `bridge.agent.node.install` writes it), so one build serves any bin dir.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bridge.agent.shim import protocol

SHIM_C_SOURCE = Path(__file__).with_name("shim.c")
#: The protocol's constants the compiled shim is built with (`#error` in shim.c without them).
COMPILED_CONSTANTS = ("MAX_STDIN_BYTES", "TIMEOUT_SECONDS", "CONNECT_TIMEOUT_SECONDS", "AGENT_UNAVAILABLE",
                      "IO_FAILURE", "API_PATH", "HOST", "CONTENT_TYPE")
#: What the binary carries before its build id (shim.c's `build_marker`).
MARKER = b"multinetwork-shim-build="
#: The compilers looked for on PATH, in order.
COMPILERS = ("cc", "gcc")
#: Seconds a build may take (a static link on a loaded node takes a few).
BUILD_TIMEOUT = 120


class BuildError(Exception):
    """The compiled shim cannot be built here; the message says why, in one line."""


def _c_value(value: object) -> str:
    """A constant of the protocol as C source: a number, or a string literal."""
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if any(c in text for c in '"\\\n') or not text.isprintable():
        raise ValueError(f"{text!r} cannot be written into C source")
    return f'"{text}"'


def constant_flags() -> list[str]:
    """The `-D` flags of the protocol's constants (`COMPILED_CONSTANTS`)."""
    return [f"-D{name}={_c_value(getattr(protocol, name))}" for name in COMPILED_CONSTANTS]


def build_id(source: bytes | None = None) -> str:
    """The hash of `shim.c` (or `source`) and the protocol's constants: what a binary built from
    them carries, and what a prebuilt one must carry to be installed."""
    digest = hashlib.sha256(SHIM_C_SOURCE.read_bytes() if source is None else source)
    digest.update(b"\0" + "\0".join(constant_flags()).encode())
    return digest.hexdigest()


def compile_flags() -> list[str]:
    """Every `-D` flag `shim.c` is built with: the protocol's constants and the build id."""
    return [*constant_flags(), f'-DSHIM_BUILD="{build_id()}"']


def find_compiler(path: str | None = None) -> str:
    """The first of `COMPILERS` on `path` (default: $PATH); `BuildError` names what was looked for."""
    search = os.environ.get("PATH", os.defpath) if path is None else path
    for name in COMPILERS:
        found = shutil.which(name, path=search)
        if found is not None:
            return found
    raise BuildError(f"no C compiler found: looked for {' and '.join(COMPILERS)} in PATH={search}")


def first_error(stderr: str) -> str:
    """The line of a failed build that says what failed: the first naming an error, else the first."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"error|cannot find|undefined reference", line, re.IGNORECASE):
            return line
    return lines[0] if lines else "no output"


def build(output: Path | str, *, path: str | None = None) -> None:
    """`shim.c` -> `output`, statically linked; `BuildError` says why not (no compiler, the
    compiler's first error)."""
    compiler = find_compiler(path)
    try:
        done = subprocess.run(
            # Static: it is built in a container (the agent's, the image's build stage) and runs on
            # the node, whose libc may differ.
            [compiler, "-O2", "-static", "-s", *compile_flags(), "-o", str(output), str(SHIM_C_SOURCE)],
            capture_output=True, text=True, timeout=BUILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise BuildError(f"{compiler} took more than {BUILD_TIMEOUT} s to build {SHIM_C_SOURCE}") from None
    except OSError as exc:
        raise BuildError(f"cannot run {compiler}: {exc}") from None
    if done.returncode != 0:
        raise BuildError(f"{compiler} failed to build {SHIM_C_SOURCE}: {first_error(done.stderr)}")


def carried_build(binary: bytes) -> str | None:
    """The build id a compiled shim carries (its marker), None when it carries none."""
    found = re.search(re.escape(MARKER) + rb"([0-9a-f]{64})\0", binary)
    return found.group(1).decode() if found else None


def prebuilt_problem(binary: Path) -> str | None:
    """Why `binary` is not the compiled shim of this `shim.c` and this protocol; None when it is."""
    try:
        data = binary.read_bytes()
    except FileNotFoundError:
        return f"the prebuilt shim {binary} does not exist"
    except OSError as exc:
        return f"the prebuilt shim {binary} cannot be read: {exc}"
    if data[:4] != b"\x7fELF":
        return f"the prebuilt shim {binary} is not an executable (ELF) file"
    carried = carried_build(data)
    if carried is None:
        return f"the prebuilt shim {binary} carries no build id (not built by bridge/agent/shim/shimbuild.py)"
    expected = build_id()
    if carried != expected:
        return (f"the prebuilt shim {binary} was built from another shim.c or protocol (build "
                f"{carried[:12]}, this agent's is {expected[:12]})")
    return None


def main(argv: list[str]) -> int:
    """`python3 -m bridge.agent.shim.shimbuild OUTPUT`: build the compiled shim into OUTPUT."""
    if len(argv) != 1:
        print("usage: python3 -m bridge.agent.shim.shimbuild OUTPUT", file=sys.stderr)
        return 2
    output = Path(argv[0])
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        build(output)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"built {output} (build {build_id()})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = ["COMPILED_CONSTANTS", "BuildError", "build", "build_id", "carried_build", "compile_flags",
           "find_compiler", "prebuilt_problem"]
