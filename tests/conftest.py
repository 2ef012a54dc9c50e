"""Shared test fixtures.

Tests that need root and the real CNI plugins ask for the `cni_host` fixture:
outside CI they are skipped with the reason; in CI (CI=true, root, plugins
installed by `make test`) a missing prerequisite is a failure, never a skip.

Every temporary file a test makes, or a process it starts (and maybe kills), goes under one
directory of the session (`temporary_files_are_removed`), which must be empty when the session
ends; a session killed before its end leaves it to the next one, which removes it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

CNI_BIN_DIRS = [Path("/opt/cni/bin"), Path("/usr/lib/cni")]
REQUIRED_PLUGINS = ("bridge", "host-local", "loopback")


def _cni_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`)"
    for plugin in REQUIRED_PLUGINS:
        if not any((d / plugin).is_file() for d in CNI_BIN_DIRS):
            return f"needs the CNI plugin {plugin!r} (apt-get install containernetworking-plugins)"
    return None


@pytest.fixture(scope="session")
def cni_host() -> list[Path]:
    """The CNI bin dirs, on a host where namespaces and plugins are usable."""
    missing = _cni_missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CNI tier cannot run in CI: {missing}")
        pytest.skip(missing)
    return [d for d in CNI_BIN_DIRS if d.is_dir()]


#: The session's temporary directory: `<tmp>/pn-tests-<pid>-<random>`.
SESSION_TMP_PREFIX = "pn-tests-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_dead_sessions(tmp: Path) -> None:
    """The directories of sessions that did not reach their end (killed): their process is gone."""
    for path in tmp.glob(f"{SESSION_TMP_PREFIX}*-*"):
        pid = path.name[len(SESSION_TMP_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def temporary_files_are_removed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point TMPDIR (this process's and every process a test starts) at a directory of this
    session, and fail the session when anything is left in it at the end: every file a test
    creates must be removed, even when the test fails or kills the process that made it (an
    operator's TLS files, an agent test's world). pytest's own `tmp_path` stays where it is,
    kept for inspection as pytest keeps it."""
    tmp_path_factory.getbasetemp()  # made before TMPDIR moves
    system_tmp = Path(tempfile.gettempdir())
    _remove_dead_sessions(system_tmp)
    session = Path(tempfile.mkdtemp(prefix=f"{SESSION_TMP_PREFIX}{os.getpid()}-", dir=system_tmp))
    session.chmod(0o1777)  # as /tmp: the deploy tests run components under other uids
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(session)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    try:
        yield session
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = None
        left = sorted(p.name for p in session.iterdir())
        with contextlib.suppress(OSError):
            shutil.rmtree(session)
        if left:
            pytest.fail(f"the tests left {len(left)} temporary file(s) or directories behind (removed now): "
                        f"{', '.join(left[:20])}; remove what a test makes even when it fails, and keep "
                        "what a process may be killed with in memory or in a directory the test removes")
