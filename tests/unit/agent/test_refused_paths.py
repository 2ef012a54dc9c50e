"""`podnetwork cni-agent` refuses, before it starts, a --socket, --cache-dir or install directory it
cannot use: exit 2, one line naming the flag, the path, what is wrong and what to do, and nothing
left behind (no cache directory, no shim, no conflist). The agent runs as a process."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.uid_support import NONROOT, needs_root, python_for, switch_to


def agent(args: list[str], cwd: Path, *, uid: int = 0) -> subprocess.CompletedProcess[str]:
    python, extra = python_for(uid)
    return subprocess.run([python, "-m", "podnetwork", "cni-agent", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, preexec_fn=switch_to(uid) if uid else None,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), **extra})


@pytest.fixture
def node(tmp_path: Path) -> Path:
    (tmp_path / "objects.yaml").write_text("[]\n")
    return tmp_path


def flags(node: Path, **paths: Path) -> list[str]:
    given = {"socket": node / "a.sock", "cache-dir": node / "cache", "netns-dir": node,
             "cni-conf-dir": node / "conf", **paths}
    return ["--objects", str(node / "objects.yaml"), "--no-watch-addresses",
            *[arg for flag, path in given.items() for arg in (f"--{flag}", str(path))]]


def refused(proc: subprocess.CompletedProcess[str], line: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert f"error: {line}" in proc.stderr, proc.stderr


def test_a_socket_path_that_is_a_directory_is_refused_naming_it(node: Path) -> None:
    (node / "sockdir").mkdir()
    proc = agent(flags(node, socket=node / "sockdir"), node)
    refused(proc, f"--socket {node / 'sockdir'}: is a directory, not a socket; give the path of the socket "
            f"to create in it, e.g. {node / 'sockdir' / 'agent.sock'}")
    assert not (node / "cache").exists(), "nothing made"


def test_a_socket_path_that_is_a_regular_file_is_refused_and_kept(node: Path) -> None:
    (node / "a.sock").write_text("mine")
    proc = agent(flags(node), node)
    refused(proc, f"--socket {node / 'a.sock'}: is a regular file, not a socket; remove it if it is not needed, "
            "or give another path")
    assert (node / "a.sock").read_text() == "mine"


def test_a_socket_under_a_regular_file_is_refused_naming_the_file(node: Path) -> None:
    (node / "run").write_text("")
    proc = agent(flags(node, socket=node / "run" / "a.sock"), node)
    refused(proc, f"--socket {node / 'run' / 'a.sock'}: {node / 'run'} is a file, not a directory; "
            "give a path in a directory, or remove the file")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory another uid may enter (a test's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="agent-paths-"))
    path.chmod(0o755)
    (path / "objects.yaml").write_text("[]\n")
    (path / "objects.yaml").chmod(0o644)
    yield path
    shutil.rmtree(path)


def test_a_socket_in_a_directory_the_agent_may_not_write_is_refused_naming_the_user(shared: Path) -> None:
    needs_root()
    (shared / "ro").mkdir(mode=0o755)
    mine = shared / "mine"
    mine.mkdir()
    os.chown(mine, NONROOT, NONROOT)
    proc = agent(flags(shared, socket=shared / "ro" / "a.sock", **{"cache-dir": mine / "cache"}), shared, uid=NONROOT)
    refused(proc, f"--socket {shared / 'ro' / 'a.sock'}: cannot create it in {shared / 'ro'}: permission denied "
            f"to uid {NONROOT}; give a path in a directory this user may write, or run the agent as one who may")
    assert not (mine / "cache").exists()


def test_a_cache_dir_that_is_a_regular_file_is_refused_naming_it(node: Path) -> None:
    (node / "cachefile").write_text("")
    proc = agent(flags(node, **{"cache-dir": node / "cachefile"}), node)
    refused(proc, f"--cache-dir {node / 'cachefile'}: is a file, not a directory; give a directory, "
            "or remove the file")
    assert not (node / "a.sock").exists()


def test_a_cache_dir_whose_parent_the_agent_may_not_write_is_refused(shared: Path) -> None:
    needs_root()
    (shared / "ro").mkdir(mode=0o755)
    mine = shared / "mine"
    mine.mkdir()
    os.chown(mine, NONROOT, NONROOT)
    proc = agent(flags(shared, socket=mine / "a.sock", **{"cache-dir": shared / "ro" / "cache"}), shared,
                 uid=NONROOT)
    refused(proc, f"--cache-dir {shared / 'ro' / 'cache'}: cannot create it in {shared / 'ro'}: permission "
            f"denied to uid {NONROOT}; give a path in a directory this user may write, or run the agent as "
            "one who may")


def test_an_install_bin_dir_that_is_a_regular_file_is_refused_before_anything_is_installed(node: Path) -> None:
    (node / "bin").write_text("")
    (node / "cache").mkdir()
    proc = agent([*flags(node), "--install", "--python-shim", "--install-bin-dir", str(node / "bin"),
                  "--agent-conf-dir", str(node / "agentconf")], node)
    refused(proc, f"--install-bin-dir {node / 'bin'}: is a file, not a directory; give a directory, "
            "or remove the file")
    assert not (node / "agentconf").exists()


def test_an_agent_conf_dir_that_is_a_regular_file_is_refused_before_the_shim_is_installed(node: Path) -> None:
    (node / "bin").mkdir()
    (node / "agentconf").write_text("")
    proc = agent([*flags(node), "--install", "--python-shim", "--install-bin-dir", str(node / "bin"),
                  "--agent-conf-dir", str(node / "agentconf")], node)
    refused(proc, f"--agent-conf-dir {node / 'agentconf'}: is a file, not a directory; give a directory, "
            "or remove the file")
    assert list((node / "bin").iterdir()) == [], "no shim"


def test_without_install_bin_dir_the_first_cni_bin_dir_is_named(node: Path) -> None:
    (node / "bin").write_text("")
    proc = agent([*flags(node), "--install", "--python-shim", "--cni-bin-dir", f"{node / 'bin'}:/opt/cni/bin"],
                 node)
    refused(proc, f"--cni-bin-dir {node / 'bin'}: is a file, not a directory; give a directory, "
            "or remove the file")


def test_a_socket_path_too_long_for_a_unix_socket_is_refused_with_its_length(node: Path) -> None:
    long = node / ("s" * 120)
    proc = agent(flags(node, socket=long), node)
    refused(proc, f"--socket {long}: is {len(str(long))} bytes long, more than the 107 the path of a unix "
            "socket may have; give a shorter path")
