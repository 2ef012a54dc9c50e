"""The paths `podnetwork cni-agent` will create things in, checked before it creates any.

The socket, the cache directory and, with --install, the shim's and the conflist's directories:
a path the agent cannot use is said once, naming the flag, before anything is made, so a refused
start leaves no cache directory, shim or conflist behind (the socket bound, the shim installed,
then a failure told only as `[Errno 98] Address already in use`, was the old way). Each function
returns the problem as the end of a sentence that starts with the flag and the path, or None.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

#: The longest path a unix socket may be bound at (sun_path, less its closing NUL).
MAX_SOCKET_PATH_BYTES = 107
_WRITE = "give a path in a directory this user may write, or run the agent as one who may"


def _nearest(path: Path) -> tuple[Path, os.stat_result] | tuple[Path, OSError]:
    """The path itself or its nearest ancestor that exists, with its stat (or why it has none)."""
    current = path
    while True:
        try:
            return current, current.stat()
        except (FileNotFoundError, NotADirectoryError):
            if current.parent == current:
                return current, FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
            current = current.parent
        except OSError as exc:
            return current, exc


def _unwritable(directory: Path) -> str | None:
    """Why this process may not create entries in `directory`, or None."""
    if os.access(directory, os.W_OK | os.X_OK):
        return None
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "a read-only file system"
    except OSError:
        pass
    return f"permission denied to uid {os.geteuid()}"


def _parent_problem(path: Path) -> str | None:
    """Why `path` cannot be created (with the directories it needs), or None."""
    found, info = _nearest(path.parent)
    if isinstance(info, OSError):
        return f"{found} cannot be read: {(info.strerror or str(info)).lower()}; {_WRITE}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{found} is a file, not a directory; give a path in a directory, or remove the file"
    problem = _unwritable(found)
    return None if problem is None else f"cannot create it in {found}: {problem}; {_WRITE}"


def directory_problem(path: Path) -> str | None:
    """Why the agent cannot use `path` as a directory it writes files in (making it when missing)."""
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return _parent_problem(path)
    except OSError as exc:
        return f"cannot be read: {(exc.strerror or str(exc)).lower()}; {_WRITE}"
    if not stat.S_ISDIR(info.st_mode):
        return "is a file, not a directory; give a directory, or remove the file"
    problem = _unwritable(path)
    return None if problem is None else f"cannot write in it: {problem}; {_WRITE}"


def socket_problem(path: Path) -> str | None:
    """Why the agent cannot bind its socket at `path`. A socket already there is not a problem
    here: the server replaces a dead agent's and refuses to take a live one's."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        return (f"is {size} bytes long, more than the {MAX_SOCKET_PATH_BYTES} the path of a unix socket "
                "may have; give a shorter path")
    try:
        info = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return _parent_problem(path)
    except OSError as exc:
        return f"cannot be read: {(exc.strerror or str(exc)).lower()}; {_WRITE}"
    if stat.S_ISDIR(info.st_mode):
        return (f"is a directory, not a socket; give the path of the socket to create in it, "
                f"e.g. {path / 'agent.sock'}")
    if not stat.S_ISSOCK(info.st_mode):
        kind = ("a regular file" if stat.S_ISREG(info.st_mode) else
                "a symbolic link" if stat.S_ISLNK(info.st_mode) else "another kind of file")
        return f"is {kind}, not a socket; remove it if it is not needed, or give another path"
    return _parent_problem(path)


__all__ = ["MAX_SOCKET_PATH_BYTES", "directory_problem", "socket_problem"]
