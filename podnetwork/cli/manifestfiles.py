"""Manifest inputs as text: regular files, standard input and directories, within `Limits`.

Only regular files are read (a FIFO or a device would hang or flood the reader),
each at most `max_file_bytes`, as UTF-8; a directory contributes its `*.yaml`,
`*.yml` and `*.json` files in name order (`walk`), its subdirectories only when
recursive, and one reached twice through symbolic links is walked once.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from podnetwork.cli.manifestlimits import DEFAULT_LIMITS, Limits, ManifestError, ManifestIOError, size_text
from podnetwork.ground import excerpts

STDIN = "-"
STDIN_LABEL = "<stdin>"
EXTENSIONS = (".yaml", ".yml", ".json")


_NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _file_type(mode: int) -> str:
    for test, what in _NOT_REGULAR:
        if test(mode):
            return what
    return "not a regular file"


def _os_problem(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _too_large(size_known: int | None, limits: Limits) -> str:
    size = f"is {size_known} bytes, more" if size_known is not None else "is more"
    return (
        f"{size} than the {size_text(limits.max_file_bytes)} a manifest file may have: "
        "split it into smaller files, or raise the limit with --max-file-size"
    )


def _decode(data: bytes, label: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(label, f"not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def read_file(path: str | Path, *, limits: Limits = DEFAULT_LIMITS, stdin_hint: bool = True) -> str:
    """The text of one regular file. Raises `ManifestIOError` for anything else (FIFO,
    device, socket, directory, missing, unreadable, larger than `limits.max_file_bytes`)
    and `ManifestError` for bytes that are not UTF-8."""
    label = str(path)
    instead = ": copy its content to a file" + (", or pipe it to -f -" if stdin_hint else "")
    try:
        info = os.stat(path)
    except OSError as exc:
        problem = _os_problem(exc)
        if os.path.islink(path):
            target = excerpts.cut(os.readlink(path))
            problem = f"a symbolic link to {target}, which cannot be read: {problem}; fix or remove the link"
        raise ManifestIOError(label, problem) from None
    if stat.S_ISDIR(info.st_mode):
        raise ManifestIOError(label, "is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise ManifestIOError(
            label, f"is {_file_type(info.st_mode)}, not a regular file; only regular files are read{instead}"
        )
    if info.st_size > limits.max_file_bytes:
        raise ManifestIOError(label, _too_large(info.st_size, limits))
    try:
        # O_NONBLOCK: if the path became a FIFO since stat, opening it must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ManifestIOError(label, _os_problem(exc)) from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ManifestIOError(label, f"is not a regular file; only regular files are read{instead}")
        try:
            data = handle.read(limits.max_file_bytes + 1)
        except OSError as exc:
            raise ManifestIOError(label, _os_problem(exc)) from None
    if len(data) > limits.max_file_bytes:  # it grew since stat
        raise ManifestIOError(label, _too_large(None, limits))
    return _decode(data, label)


def read_stream(stream: IO[str], label: str = STDIN_LABEL, *, limits: Limits = DEFAULT_LIMITS) -> str:
    """At most `limits.max_file_bytes` of a stream (stdin), as UTF-8 text."""
    binary = getattr(stream, "buffer", None)
    if binary is not None:
        data = binary.read(limits.max_file_bytes + 1)
        if len(data) > limits.max_file_bytes:
            raise ManifestIOError(label, _too_large(None, limits))
        return _decode(data, label)
    text = stream.read(limits.max_file_bytes + 1)
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_file_bytes:
        raise ManifestIOError(label, _too_large(None, limits))
    return text


def walk(
    root: Path, recursive: bool, visited: set[tuple[int, int]], errors: list[ManifestError]
) -> list[Path]:
    """Manifest files under `root` in name order (subdirectories in place with `recursive`).

    Hidden entries are skipped. Symbolic links are followed, but a directory is
    entered once, known by (device, inode): a link to an ancestor is not a loop.
    """
    found: list[Path] = []
    pending: list[Iterator[Path]] = []

    def enter(directory: Path) -> None:
        try:
            entries = sorted(directory.iterdir())
        except OSError as exc:
            errors.append(ManifestIOError(str(directory), f"cannot list this directory: {_os_problem(exc)}"))
            return
        pending.append(iter(entries))

    enter(root)
    while pending:
        entry = next(pending[-1], None)
        if entry is None:
            pending.pop()
            continue
        if entry.name.startswith("."):
            continue
        try:
            info = entry.stat()
        except OSError:
            if entry.suffix.lower() in EXTENSIONS:
                found.append(entry)  # read_file says why it cannot be read
            continue
        if stat.S_ISDIR(info.st_mode):
            key = (info.st_dev, info.st_ino)
            if recursive and key not in visited:
                visited.add(key)
                enter(entry)
        elif entry.suffix.lower() in EXTENSIONS:
            found.append(entry)
    return found


__all__ = ["EXTENSIONS", "STDIN", "STDIN_LABEL", "read_file", "read_stream", "walk"]
