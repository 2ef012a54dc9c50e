"""Files the commands write: checked before any work, then written through to what is there.

The one writer of output files: `graph -o`, `migrate -o` and `--write-manifests`,
`export-dra -o` and `--network-data`, `conformance --report` write through it, as
the manifest reader (`podnetwork.cli.manifests`) is the one reader of their inputs.

Two rules:

- `problem` checks a path before the command reads or runs anything, so a run
  of minutes (the conformance suite) or a plan never ends in an output that
  cannot be written: an empty path, a path naming a directory, a missing parent
  directory, a path the user may not write are refused with the fix.
- `write` writes *through* to what exists, as a shell's `>` does: it opens the
  path for writing and truncates it, so a character device (`/dev/null`,
  `/dev/stdout`), a FIFO or a symbolic link receives the text and stays what it
  was. Only a path where nothing exists becomes a new regular file (mode 0666
  less the umask). A temporary file renamed over the path would replace a
  device node with a regular file when run as root, and a symbolic link with a
  file beside its target.

`/dev/stdout`, `/dev/stderr` and `/dev/fd/N` are written to that descriptor as it is,
never reopened: reopening `/proc/self/fd/1` with `O_TRUNC` would empty a file the
shell opened for appending (`>> log`).

A write that fails part-way (a full disk, `/dev/full`) is an `OutputError`
naming the path and the system's reason; a regular file may then hold part of
the text, as after a shell's `>`.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

from podnetwork.ground import excerpts

STDOUT = "-"
_DESCRIPTOR = re.compile(r"/(?:dev|proc/self)/fd/(\d+)")
_STANDARD = {"/dev/stdout": 1, "/dev/stderr": 2}


def _descriptor(target: str) -> int | None:
    """The open descriptor `target` names (`/dev/stdout`, `/dev/fd/3`), else None."""
    if target in _STANDARD:
        return _STANDARD[target]
    match = _DESCRIPTOR.fullmatch(target)
    return int(match.group(1)) if match else None


class OutputError(ValueError):
    """An output that cannot be written; the text names the option, the path and the fix."""


def _shown(flag: str, target: str) -> str:
    return f"{flag} {excerpts.cut(target)}" if flag else excerpts.cut(target)


def problem(target: str, flag: str = "", *, allow_stdout: bool = False) -> str | None:
    """What stops `target` from being written, or None. Checks only: creates nothing.

    `flag` names the option in the message (`-o`, `--report`); `allow_stdout`
    accepts `-` (the caller writes standard output itself).
    """
    if allow_stdout and target == STDOUT:
        return None
    if not target.strip():
        return f"{flag + ': ' if flag else ''}an empty path; give a file name"
    if "\0" in target:
        return f"{_shown(flag, repr(target))}: a path cannot hold a NUL character"
    if target.endswith(("/", os.sep)) or Path(target).name in ("", ".", ".."):
        example = f"{target.rstrip('/')}/out.yaml"
        return f"{_shown(flag, target)}: names a directory; give a file name (e.g. {excerpts.cut(example)})"
    try:
        st = os.stat(target)  # follows symbolic links: what a write would reach
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a loop of links, a component that is a file, too long a name
        return f"{_shown(flag, target)}: cannot be written: {exc.strerror}"
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return f"{_shown(flag, target)}: is a directory; give a file name inside it"
        if not os.access(target, os.W_OK):
            return f"{_shown(flag, target)}: not writable (permission denied or a read-only file system)"
        return None
    # Nothing there: its directory must exist and take a new file. A dangling link's
    # target is what would be created.
    parent = Path(os.path.realpath(target)).parent
    if not parent.is_dir():
        return (f"{_shown(flag, target)}: the directory {excerpts.cut(str(parent))} does not exist; "
                "create it first, or write elsewhere")
    if not os.access(parent, os.W_OK | os.X_OK):
        return (f"{_shown(flag, target)}: cannot create a file in {excerpts.cut(str(parent))} "
                "(permission denied or a read-only file system)")
    return None


def directory_problem(target: str, flag: str = "") -> str | None:
    """What stops `target` from being (or becoming, with its parents) a directory to write in, or None."""
    if not target.strip():
        return f"{flag + ': ' if flag else ''}an empty path; give a directory"
    if "\0" in target:
        return f"{_shown(flag, repr(target))}: a path cannot hold a NUL character"
    path = Path(target)
    # The nearest existing ancestor decides: it must be a directory we may write in.
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.stat(probe)
    except OSError as exc:
        return f"{_shown(flag, target)}: cannot be used: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        what = "is not a directory" if probe == path else f"{excerpts.cut(str(probe))} is not a directory"
        return f"{_shown(flag, target)}: {what}"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{_shown(flag, target)}: cannot write in {excerpts.cut(str(probe))} (permission denied " \
               "or a read-only file system)"
    return None


def write(target: str | os.PathLike[str], data: str | bytes, flag: str = "") -> None:
    """Writes `data` (text as UTF-8) through to `target`, creating a regular file only where
    nothing exists. Raises `OutputError`."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    shown = _shown(flag, os.fspath(target))
    fd = _descriptor(os.fspath(target))
    if fd is not None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # what the command printed before comes first
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            raise OutputError(f"{shown}: cannot write it: {exc.strerror or exc}") from None
        return
    try:
        with open(target, "wb") as f:  # O_WRONLY|O_CREAT|O_TRUNC: the device or FIFO stays
            f.write(raw)
    except IsADirectoryError:
        raise OutputError(f"{shown}: is a directory; give a file name inside it") from None
    except OSError as exc:
        raise OutputError(f"{shown}: cannot write it: {exc.strerror or exc}") from None


__all__ = ["STDOUT", "OutputError", "directory_problem", "problem", "write"]
