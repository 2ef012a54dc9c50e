"""`podnetwork.cli.outputs`, the one writer of the commands' output files: paths checked before any
work, and written through to what exists (a device, a FIFO, a link's target), on real files
under tmp_path. Nothing under /dev is written but /dev/null and /dev/full, through links."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from podnetwork.cli import outputs


def test_a_new_file_is_created_and_an_existing_one_is_replaced_in_place(tmp_path: Path) -> None:
    target = tmp_path / "out.yaml"
    outputs.write(target, "first\n")
    inode = target.stat().st_ino
    outputs.write(target, "second\n")
    assert target.read_text() == "second\n"
    assert target.stat().st_ino == inode, "written through, not a new file renamed over it"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml"]


def test_a_link_keeps_being_a_link_and_its_target_gets_the_text(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    outputs.write(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_a_link_to_a_character_device_leaves_the_device_a_device(tmp_path: Path) -> None:
    sink = tmp_path / "null"
    sink.symlink_to("/dev/null")
    outputs.write(sink, "discarded\n")
    assert sink.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_character_device_node_stays_a_device_node(tmp_path: Path) -> None:
    # What `-o /dev/null` is as root, made in tmp_path: a node of the null device (1, 3).
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root (CI runs as root)")
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    outputs.write(node, "discarded\n")
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def test_a_fifo_is_written_to_its_reader_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    outputs.write(fifo, "through the pipe\n")
    reader.join(10)
    assert got == [b"through the pipe\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_write_the_device_refuses_is_an_output_error_naming_the_path_and_the_reason(tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    with pytest.raises(outputs.OutputError) as caught:
        outputs.write(full, "x" * 100_000, "-o")
    assert str(caught.value) == f"-o {full}: cannot write it: No space left on device"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("", "-o: an empty path; give a file name"),
        ("   ", "-o: an empty path; give a file name"),
        ("{tmp}", "-o {tmp}: is a directory; give a file name inside it"),
        ("{tmp}/sub/", "-o {tmp}/sub/: names a directory; give a file name (e.g. {tmp}/sub/out.yaml)"),
        ("{tmp}/..", "-o {tmp}/..: names a directory; give a file name (e.g. {tmp}/../out.yaml)"),
        ("{tmp}/missing/out.yaml",
         "-o {tmp}/missing/out.yaml: the directory {tmp}/missing does not exist; create it first, "
         "or write elsewhere"),
        ("{tmp}/file.txt/out.yaml", "-o {tmp}/file.txt/out.yaml: cannot be written: Not a directory"),
        ("{tmp}/loop", "-o {tmp}/loop: cannot be written: Too many levels of symbolic links"),
        ("{tmp}/dangling", "-o {tmp}/dangling: the directory {tmp}/nowhere does not exist"),
        ("a\0b", "-o 'a\\x00b': a path cannot hold a NUL character"),
    ],
)
def test_a_path_that_cannot_be_written_is_named_with_the_fix_before_anything_is_made(
    tmp_path: Path, target: str, message: str
) -> None:
    (tmp_path / "file.txt").write_text("")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    before = sorted(p.name for p in tmp_path.iterdir())
    problem = outputs.problem(target.format(tmp=tmp_path), "-o")
    assert problem is not None and problem.startswith(message.format(tmp=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_writable_paths_and_stdout_have_no_problem(tmp_path: Path) -> None:
    (tmp_path / "old.yaml").write_text("")
    (tmp_path / "dangling").symlink_to(tmp_path / "new-target.yaml")
    for target in ("old.yaml", "new.yaml", "dangling"):
        assert outputs.problem(str(tmp_path / target), "-o") is None
    assert outputs.problem("/dev/null", "-o") is None
    assert outputs.problem("-", "-o", allow_stdout=True) is None
    assert outputs.problem("-", "-o") is None  # without allow_stdout, "-" is a file named "-"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("", "--write-manifests: an empty path; give a directory"),
        ("{tmp}/file.txt", "--write-manifests {tmp}/file.txt: is not a directory"),
        ("{tmp}/file.txt/sub", "--write-manifests {tmp}/file.txt/sub: {tmp}/file.txt is not a directory"),
    ],
)
def test_a_directory_to_write_in_must_be_one_or_be_creatable(tmp_path: Path, target: str, message: str) -> None:
    (tmp_path / "file.txt").write_text("")
    assert outputs.directory_problem(target.format(tmp=tmp_path), "--write-manifests") == message.format(tmp=tmp_path)
    assert outputs.directory_problem(str(tmp_path / "new" / "deeper"), "--write-manifests") is None
    assert outputs.directory_problem(str(tmp_path), "--write-manifests") is None


def test_dev_stdout_is_written_to_the_descriptor_without_emptying_a_file_opened_for_appending(
    tmp_path: Path,
) -> None:
    # `podnetwork graph -o /dev/stdout >> log`: reopening /proc/self/fd/1 with O_TRUNC would empty log.
    log = tmp_path / "log"
    log.write_text("kept\n")
    with log.open("a") as append:
        done = subprocess.run(
            [sys.executable, "-c", "from podnetwork.cli import outputs; outputs.write('/dev/stdout', 'added\\n', '-o')"],
            stdout=append, stderr=subprocess.PIPE, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert log.read_text() == "kept\nadded\n"
