"""Shared test fixtures.

Tests that need root and the real CNI plugins ask for the `cni_host` fixture:
outside CI they are skipped with the reason; in CI (CI=true, root, plugins
installed by `make test`) a missing prerequisite is a failure, never a skip.

Every temporary file a test makes, or a process it starts (and maybe kills), goes under one
directory of the session (`temporary_files_are_removed`), which must be empty when the session
ends; a session killed before its end leaves it to the next one, which removes it.

`make test` runs the suite on several pytest-xdist workers (`-n`). The CNI and e2e tiers share
the root network namespace's state (bridges, nftables tables, the IPAM directories, the plugins'
locks), so they form one group (`SERIAL_GROUP`) that one worker runs, one test after the other,
while the unit and api tiers spread over all workers (`GROUPS`, `pytest_xdist_make_scheduler`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SERIAL_GROUP = "root-netns"
SERIAL_MARKERS = ("cni", "e2e")
#: The xdist groups (tests/README.md, "How the suite runs"): node id prefix -> group. One worker
#: runs a group's tests, in order, while the other workers share the rest of the suite.
GROUPS = {
    # Bridges, veths, nftables tables and IPAM files in the root network namespace and the
    # plugins' shared directories; each test checks that nothing is left there afterwards.
    "tests/cni/": SERIAL_GROUP,
    "tests/e2e/": SERIAL_GROUP,
    # The real tier's kubelet node and its agent (tests/real/): veths, bridges and the node
    # access table in the root network namespace, as the CNI tier's; and one cluster per session,
    # which this group's worker alone starts.
    "tests/real/": SERIAL_GROUP,
    # The components as their manifests run them, on the manifests' fixed ports (the controller
    # and the bridge both take 9090).
    "tests/api/deploy/test_components_start_as_deployed.py": "deploy-fixed-ports",
}


def group_of(nodeid: str) -> str | None:
    """The group of a test by its node id (all xdist's scheduler sees of it), or None."""
    return next((group for prefix, group in GROUPS.items() if nodeid.startswith(prefix)), None)


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


def _needs_the_host(item: pytest.Item) -> bool:
    """Marked as a CNI or e2e test, or asking for the real plugins (`cni_host`): it makes netns,
    bridges, nftables tables and IPAM files on this host."""
    return (any(item.get_closest_marker(m) for m in SERIAL_MARKERS)
            or "cni_host" in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The scheduler below groups by node id alone, so a test that needs the host must live where
    # GROUPS puts it in the serial group; and xdist's own `xdist_group` marker is silently
    # ignored with this pytest (xdist 3.8 renames `item._nodeid`, which pytest 9.2 no longer reads).
    wrong = [item.nodeid for item in items if _needs_the_host(item) and group_of(item.nodeid) != SERIAL_GROUP]
    marked = [item.nodeid for item in items if item.get_closest_marker("xdist_group")]
    if wrong:
        raise pytest.UsageError(
            f"{len(wrong)} test(s) need the root network namespace (marked cni or e2e, or using cni_host) "
            f"but are not in the {SERIAL_GROUP!r} group, so they could run beside each other: "
            f"{', '.join(wrong[:5])}; put them under tests/cni/ (or tests/e2e/) or add their path to "
            "GROUPS in tests/conftest.py")
    if marked:
        raise pytest.UsageError(
            f"pytest.mark.xdist_group has no effect here: {', '.join(marked[:5])}; add the test's path "
            "to GROUPS in tests/conftest.py instead")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load scheduling with GROUPS: each group is one unit of work, which one worker runs
    in order; the largest unit goes out first (the CNI and e2e tiers, which thus start at once),
    then every other test one by one as workers free up. Any --dist but `each` gets it, so a
    plain `pytest -n 4` never runs two CNI tests at once either."""
    if config.getvalue("dist") == "each":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupedScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    return GroupedScheduling(config, log)


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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line for the real tier (tests/real/, a real Kubernetes from ../shared/k8s): how many of
    its tests ran, so that a run which skipped it, or ran none of it, says so at its end."""
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        counts[outcome] = sum(1 for report in terminalreporter.stats.get(outcome, [])
                              if getattr(report, "nodeid", "").startswith("tests/real/")
                              and (outcome != "passed" or getattr(report, "when", "call") == "call"))
    if any(counts.values()):
        terminalreporter.write_line(
            "real-cluster tier (tests/real/, Kubernetes v1.36 from ../shared/k8s): "
            + ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n))
