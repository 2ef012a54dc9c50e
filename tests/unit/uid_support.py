"""Our commands run as a uid without a passwd entry, as deploy/ runs them (uid 65532).

Switching uid needs root (CI runs as root; elsewhere the tests that use `needs_root` skip
with the reason). This environment's interpreter lives under /root (pyenv), which another
uid may not enter, so such a process runs the machine's own Python 3 of the same minor
version over this environment's packages and the repository (`python_for`).
"""

from __future__ import annotations

import os
import pwd
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The uid deploy/ runs the controller, the bridge and the extender as (distroless' "nonroot").
NONROOT = 65532


def needs_root() -> None:
    """Fail in CI, skip elsewhere, unless this process may switch uids."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("needs root to run a process as another uid")
        pytest.skip("needs root to run a process as another uid")


def without_passwd_entry(uid: int) -> int:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return uid
    pytest.fail(f"uid {uid} has a passwd entry on this machine; the test needs one without")


def switch_to(uid: int, gid: int | None = None) -> Callable[[], None]:
    """A `preexec_fn` that makes the child `uid` (and `gid`, default the same number), no groups."""

    def switch() -> None:
        os.setgroups([])
        os.setgid(uid if gid is None else gid)
        os.setuid(uid)

    return switch


def python_for(uid: int) -> tuple[str, dict[str, str]]:
    """(interpreter, environment additions) that run this project's code as `uid`."""
    if uid == 0:
        return sys.executable, {}
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (Path("/usr/bin") / version, Path("/usr/local/bin") / version):
        if candidate.is_file() and os.access(candidate, os.X_OK) and _others_may_run(candidate):
            purelib = sysconfig.get_paths()["purelib"]
            return str(candidate), {"PYTHONPATH": os.pathsep.join([str(ROOT), purelib])}
    pytest.fail(f"no {version} outside /root that uid {uid} may run (apt-get install {version})")


def _others_may_run(path: Path) -> bool:
    for part in [*reversed(path.resolve().parents), path.resolve()]:
        mode = part.stat().st_mode
        if not mode & (0o001 if part.is_dir() else 0o005):
            return False
    return True
