"""`podnetwork cni-agent --objects FILE` reads its file as the manifest commands read theirs: a
missing, unreadable, non-UTF-8 or oversized file is refused before anything starts (exit 2), in
the words `validate` and `migrate` use, naming --objects and the file. The agent runs as a process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def agent(node: Path, objects: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "podnetwork", "cni-agent", "--objects", str(objects), "--socket", str(node / "a.sock"),
         "--cache-dir", str(node / "cache"), "--netns-dir", str(node), *more],
        capture_output=True, text=True, timeout=60, cwd=node, env={"PATH": "/usr/bin:/bin", "HOME": str(node)})


def refused(proc: subprocess.CompletedProcess[str], line: str, node: Path) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert f"error: --objects {line}" in proc.stderr, proc.stderr
    assert not (node / "cache").exists() and not (node / "a.sock").exists(), "nothing started"


def test_a_missing_objects_file_is_named(tmp_path: Path) -> None:
    refused(agent(tmp_path, tmp_path / "nope.yaml"), f"{tmp_path / 'nope.yaml'}: no such file or directory", tmp_path)


def test_an_objects_file_that_is_not_utf8_says_where(tmp_path: Path) -> None:
    (tmp_path / "o.yaml").write_bytes(b"kind: \xff\n")
    refused(agent(tmp_path, tmp_path / "o.yaml"), f"{tmp_path / 'o.yaml'}: not UTF-8 text (byte 6); save it as UTF-8",
            tmp_path)


def test_a_directory_is_not_an_objects_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    refused(agent(tmp_path, tmp_path / "d"), f"{tmp_path / 'd'}: is a directory, not a file", tmp_path)


def test_an_objects_file_past_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(50 * 1024 * 1024)  # sparse: 50 MiB of NULs the agent must not read
    refused(agent(tmp_path, big), f"{big}: is {50 * 1024 * 1024} bytes, more than the 4 MiB (4194304 bytes) a "
            "manifest file may have: split it into smaller files, or raise the limit with --max-file-size", tmp_path)


def test_max_file_size_raises_or_lowers_the_limit(tmp_path: Path) -> None:
    (tmp_path / "o.yaml").write_text("[]\n" + "#" * 2000 + "\n")
    refused(agent(tmp_path, tmp_path / "o.yaml", "--max-file-size", "1Ki"),
            f"{tmp_path / 'o.yaml'}: is 2004 bytes, more than the 1 KiB (1024 bytes) a manifest file may have: "
            "split it into smaller files, or raise the limit with --max-file-size", tmp_path)


@pytest.mark.parametrize(("text", "problem"), [
    ("a: [\n", "doc 1: "),
    ("- kind: Pod\n  metadata: {}\n", "object 0: an object needs a kind and metadata.name"),
    ("- 3\n", "object 0 is not a mapping"),
])
def test_an_objects_file_that_holds_no_objects_says_where(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "o.yaml").write_text(text)
    proc = agent(tmp_path, tmp_path / "o.yaml")
    refused(proc, f"{tmp_path / 'o.yaml'}:", tmp_path)
    assert problem in proc.stderr, proc.stderr


def test_an_alias_bomb_is_refused_at_its_line(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
              f"*a{i - 1}]" for i in range(1, 9)]
    (tmp_path / "o.yaml").write_text("\n".join(lines) + "\n")
    proc = agent(tmp_path, tmp_path / "o.yaml")
    refused(proc, f"{tmp_path / 'o.yaml'}:doc 1:", tmp_path)
    assert "10000" in proc.stderr.replace(",", ""), proc.stderr
