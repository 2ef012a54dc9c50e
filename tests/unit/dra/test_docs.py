"""docs/dra.md: its offline commands run as documented, and it names every reason the export gives."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge import translate
from bridge.dra import export

ROOT = Path(__file__).parents[3]
DOC = (ROOT / "docs" / "dra.md").read_text()


def _offline_commands() -> list[str]:
    block = DOC.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line.startswith("podnetwork export-dra -f")]


def _expected_status(command: str) -> int:
    # The doc's comments say which of them cannot be expressed in full.
    return 1 if "--driver cni" in command or command.endswith("-f examples/") else 0


def test_the_quick_start_has_the_offline_commands() -> None:
    assert len(_offline_commands()) == 5


@pytest.mark.parametrize("command", _offline_commands())
def test_each_offline_command_of_the_quick_start_runs(command: str, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    argv = shlex.split(command)
    done = subprocess.run([sys.executable, "-m", "podnetwork", *argv[1:]], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert done.returncode == _expected_status(command), done.stderr
    written = done.returncode == 0 or "--partial" in argv
    for flag in ("-o", "--network-data"):
        if flag in argv:
            target = tmp_path / argv[argv.index(flag) + 1]
            assert target.exists() == written
            assert not written or target.stat().st_size > 0


def test_every_reason_is_in_the_table() -> None:
    table = DOC.split("## What cannot be expressed", 1)[1].split("\n## ", 1)[0]
    for reason in [*export.Reason, *translate.Reason]:
        assert f"`{reason}`" in table, reason
