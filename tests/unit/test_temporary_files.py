"""The session check of tests/conftest.py bites: a test that leaves a temporary file behind fails
the session, naming it; a clean session passes and leaves nothing; a session killed before its
end has its directory removed by the next one.

Each case runs pytest as a process over a copy of tests/conftest.py and one test, with a TMPDIR
of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def session(tmp_path: Path, test: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run `test` (a test module's text) in a session of its own; the process and its TMPDIR."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tests / "test_case.py").write_text(test)
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "basetemp"),
         str(tests)],
        cwd=tmp_path, env={**os.environ, "TMPDIR": str(system_tmp)}, capture_output=True, text=True, timeout=120,
        check=False)
    return proc, system_tmp


def test_a_temporary_directory_left_by_a_test_fails_the_session_and_is_named(tmp_path: Path) -> None:
    proc, system_tmp = session(tmp_path, (
        "import tempfile\n"
        "def test_leaks():\n"
        "    tempfile.mkdtemp(prefix='podnetwork-webhook-')\n"))
    assert proc.returncode != 0, proc.stdout
    assert "1 passed, 1 error" in proc.stdout, proc.stdout
    assert "the tests left 1 temporary file(s) or directories behind" in proc.stdout
    assert "podnetwork-webhook-" in proc.stdout
    assert list(system_tmp.iterdir()) == []  # removed all the same


def test_a_session_whose_tests_clean_up_passes_and_leaves_nothing(tmp_path: Path) -> None:
    proc, system_tmp = session(tmp_path, (
        "import os, tempfile\n"
        "def test_cleans_up():\n"
        "    assert os.environ['TMPDIR'].startswith(tempfile.gettempdir())\n"
        "    with tempfile.TemporaryDirectory():\n"
        "        pass\n"))
    assert proc.returncode == 0, proc.stdout
    assert list(system_tmp.iterdir()) == []


def test_the_directory_of_a_killed_session_is_removed_by_the_next_one(tmp_path: Path) -> None:
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    stale = system_tmp / f"pn-tests-{dead.stdout.strip()}-abcdefgh"
    (stale / "pn-agent-test-x").mkdir(parents=True)
    live = system_tmp / f"pn-tests-{os.getpid()}-abcdefgh"  # a session still running: kept
    live.mkdir()
    proc, _ = session(tmp_path, "def test_nothing():\n    pass\n")
    assert proc.returncode == 0, proc.stdout
    assert sorted(p.name for p in system_tmp.iterdir()) == [live.name]
    live.rmdir()
