"""What the agent needs from its node, checked where it can be: mount propagation and host paths.

The agent runs in a container (deploy/agent) but works on the node's objects:

- Network namespaces. The runtime creates each pod's namespace as a bind mount under
  /var/run/netns (/run/netns) on the host, after the agent started. The agent (and the plugins
  it runs) see those mounts only if the mount holding that directory propagates host mounts
  into the container: in the container it must be a slave (`mountPropagation:
  HostToContainer`) or shared mount, which the runtime allows only when the hostPath, looked up
  as written (symlinks in it not resolved), lies on a shared or slave mount of the host. Where
  it does not, the runtime refuses to start the container; `host_netns_problem` says so in
  the agent's own words first (the DaemonSet's init container), and `netns_problem` checks
  the container the agent runs in.
- Plugins. The delegate plugins run inside the agent's container, from the host's
  /opt/cni/bin. A host's bin dir may hold symlinks to elsewhere (Debian's packages link to
  /usr/lib/cni), which do not resolve in the container; `in_host_root` resolves such a link
  the way the host does, under the host's root (/proc/1/root with `hostPID: true`).

Everything here reads files only: /proc/<pid>/mountinfo (proc(5)) and symlinks.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: The host's init process, as a container with `hostPID: true` sees it.
HOST_PROC = Path("/proc/1")
#: Where the runtimes (containerd, CRI-O) and `ip netns` make network namespaces: /var/run/netns,
#: which is this path on every current distribution (/var/run links to /run). This one, because a
#: runtime checks a hostPath's propagation without resolving that link (`runtime_mount_of`).
DEFAULT_NETNS_DIR = Path("/run/netns")
#: Symlinks followed in one resolution before giving up (the kernel's limit, MAXSYMLINKS).
MAX_SYMLINKS = 40
DOCS = 'docs/deploy.md "Mount propagation"'


@dataclass(frozen=True)
class Mount:
    """One line of /proc/<pid>/mountinfo: where it is mounted, and its propagation fields."""

    mount_point: str
    optional: tuple[str, ...]
    """`shared:N`, `master:N`, `propagate_from:N`, `unbindable`; none for a private mount."""

    @property
    def propagation(self) -> str:
        """`shared` (also when a slave of another group), `slave`, or `private`."""
        if any(field.startswith("shared:") for field in self.optional):
            return "shared"
        if any(field.startswith("master:") for field in self.optional):
            return "slave"
        return "private"


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo (octal)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo text, in its order (later lines are mounted over earlier ones)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields or len(fields) < 7:
            continue
        separator = fields.index("-")
        mounts.append(Mount(_unescape(fields[4]), tuple(fields[6:separator])))
    return mounts


def mount_of(mounts: list[Mount], path: str) -> Mount | None:
    """The mount `path` (absolute, symlinks resolved) lies on: the longest mount point above it,
    the last one mounted there when several are stacked."""
    target = PurePosixPath(path)
    best: Mount | None = None
    for mount in mounts:
        point = PurePosixPath(mount.mount_point)
        if (target == point or point in target.parents) and (
                best is None or len(point.parts) >= len(PurePosixPath(best.mount_point).parts)):
            best = mount
    return best


def in_host_root(host_root: Path, path: str | PurePosixPath, *, follow_last: bool = True) -> Path | None:
    """`path` resolved as the host resolves it, as a path under `host_root`; None when a link
    loops (more than MAX_SYMLINKS). Absolute link targets restart at the host's root, `..` stops
    at it. Whether the result exists is the caller's question."""
    given = PurePosixPath(path)
    parts = list(given.parts[1:] if given.is_absolute() else given.parts)
    resolved: list[str] = []
    followed = 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = host_root.joinpath(*resolved, part)
        if (parts or follow_last) and candidate.is_symlink():
            followed += 1
            if followed > MAX_SYMLINKS:
                return None
            target = PurePosixPath(os.readlink(candidate))
            if target.is_absolute():
                resolved = []
                parts = list(target.parts[1:]) + parts
            else:
                parts = list(target.parts) + parts
            continue
        resolved.append(part)
    return host_root.joinpath(*resolved)


def _same_mount_namespace(proc: Path) -> bool | None:
    """This process and `proc` (a /proc/<pid> directory) share a mount namespace; None when it
    cannot be told (`proc` is not ours to read: a sandbox's init, for one)."""
    try:
        return os.readlink("/proc/self/ns/mnt") == os.readlink(proc / "ns" / "mnt")
    except OSError:
        return None


def netns_problem(netns_dir: Path, *, proc: Path = HOST_PROC, own: Path = Path("/proc/self")) -> str | None:
    """Why network namespaces the runtime makes under `netns_dir` after now would stay invisible
    to this process, or None. Only a process in another mount namespace than the host's init
    (`proc`) needs them propagated; then the mount holding `netns_dir` must be a slave or shared.
    Where the host's init cannot be read, nothing is said (in a pod, `hostPID: true` shows it)."""
    if _same_mount_namespace(proc) is not False:
        return None
    try:
        mounts = parse_mountinfo((own / "mountinfo").read_text())
    except OSError as exc:
        return f"cannot read {own / 'mountinfo'} to check how {netns_dir} is mounted: {exc}"
    mount = mount_of(mounts, os.path.realpath(netns_dir))
    if mount is None or mount.propagation == "private":
        where = mount.mount_point if mount is not None else "?"
        return (f"{netns_dir} is on the mount {where}, which is private in the agent's container: the "
                "network namespaces the runtime creates there for new pods would not appear in here, and "
                "every ADD would fail. Mount it with mountPropagation: HostToContainer (deploy/agent does), "
                f"which needs it shared on the node ({DOCS})")
    return None


def runtime_mount_of(mounts: list[Mount], path: str) -> Mount | None:
    """The mount a container runtime finds for a hostPath when it checks its propagation: the
    mount points that are a prefix of `path` as a string (cleaned, no symlink resolved), the
    longest, the first listed among equals. containerd (mount.Lookup) and CRI-O
    (getSourceMount) both do so; `/var/run/netns` therefore lies on `/`, never on `/run`."""
    target = posixpath.normpath(path)
    if target.startswith("//"):
        target = "/" + target.lstrip("/")
    best: Mount | None = None
    for mount in mounts:
        if target.startswith(mount.mount_point) and (
                best is None or len(mount.mount_point) > len(best.mount_point)):
            best = mount
    return best


def _as_the_runtime_names(host_root: Path, path: str) -> tuple[str, str] | None:
    """`path` as the runtime looks it up (only a last component that is itself a symlink is
    resolved: os.Lstat then EvalSymlinks), and as the node resolves it entirely; None when a
    link loops."""
    written = posixpath.normpath(path)
    whole = in_host_root(host_root, written)
    if whole is None:
        return None
    resolved = posixpath.normpath("/" + whole.relative_to(host_root).as_posix())
    last = in_host_root(host_root, written, follow_last=False)
    return (resolved if last is not None and last.is_symlink() else written), resolved


def host_netns_problem(netns_dir: Path, *, proc: Path = HOST_PROC, bidirectional: bool = False) -> str | None:
    """Why the runtime would refuse the agent's container the hostPath `netns_dir` with
    `mountPropagation: HostToContainer` (or Bidirectional), or None. The runtime looks the path
    up as written in its mount table (`runtime_mount_of`); its mount must be shared, or a slave
    for HostToContainer. The runtime's mount table is the host's, as its init (`proc`) sees it."""
    try:
        names = _as_the_runtime_names(proc / "root", str(netns_dir))
    except OSError as exc:  # a sandbox's init is not ours to read, even as root
        return (f"cannot read {proc / 'root'} to resolve {netns_dir} as the node does (the agent needs "
                f"hostPID: true, and the node's init readable): {exc.strerror or exc}: {exc.filename}")
    try:
        mounts = parse_mountinfo((proc / "mountinfo").read_text())
    except OSError as exc:
        return f"cannot read {proc / 'mountinfo'} (the agent needs hostPID: true): {exc}"
    if names is None:
        return f"{netns_dir} cannot be resolved on the host: its symlinks loop"
    looked_up, resolved = names

    def refused(path: str) -> Mount | None:
        mount = runtime_mount_of(mounts, path)
        wanted = ("shared",) if bidirectional else ("shared", "slave")
        return None if mount is not None and mount.propagation in wanted else (mount or Mount("?", ()))

    mount = refused(looked_up)
    if mount is None:
        return None
    kind = "shared" if bidirectional else "shared or slave"
    said = (f'path "{looked_up}" is mounted on "{mount.mount_point}" but it is not a {kind} mount: the '
            f"runtime refuses mountPropagation: {'Bidirectional' if bidirectional else 'HostToContainer'} "
            "there, and without it the agent would never see the network namespaces of new pods. ")
    make_shared = (f"`mkdir -p {resolved} && mount --bind {resolved} {resolved} && mount --make-shared "
                   f"{resolved}` (and at every boot, e.g. with a systemd unit before the kubelet)")
    if resolved != looked_up:
        said += (f"The runtime looks the hostPath up as written, without resolving the symlinks in it, and "
                 f"{looked_up} is {resolved} on the node: give the hostPath and --netns-dir as {resolved} "
                 "(deploy/agent/daemonset.yaml does)")
        said += (f"; {resolved} is also on a private mount: on the node, {make_shared}" if refused(resolved)
                 else "")
    else:
        said += f"On the node, make it a shared mount, as containerd and `ip netns` do: {make_shared}"
    return f"{said} ({DOCS})"


__all__ = [
    "DEFAULT_NETNS_DIR",
    "HOST_PROC",
    "Mount",
    "host_netns_problem",
    "in_host_root",
    "mount_of",
    "netns_problem",
    "parse_mountinfo",
    "runtime_mount_of",
]
