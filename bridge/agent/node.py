"""What the agent needs from its node, checked where it can be: mount propagation and host paths.

The agent runs in a container (deploy/agent) but works on the node's objects:

- Network namespaces. The runtime creates each pod's namespace as a bind mount under
  /var/run/netns on the host, after the agent started. The agent (and the plugins it runs)
  see those mounts only if the mount holding that directory propagates host mounts into the
  container: in the container it must be a slave (`mountPropagation: HostToContainer`) or
  shared mount, which the kubelet allows only when it is shared on the host. On a host where
  it is private the kubelet refuses to start the container; `host_netns_problem` says so in
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
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: The host's init process, as a container with `hostPID: true` sees it.
HOST_PROC = Path("/proc/1")
#: Where the runtimes (containerd, CRI-O) and `ip netns` make network namespaces.
DEFAULT_NETNS_DIR = Path("/var/run/netns")
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


def host_netns_problem(netns_dir: Path, *, proc: Path = HOST_PROC) -> str | None:
    """Why the kubelet would refuse to give the agent's container `netns_dir` with
    `mountPropagation: HostToContainer`, or None: on the host (as its init process `proc` sees
    it, in `proc`/root) the mount holding the directory must be shared or a slave."""
    try:
        resolved = in_host_root(proc / "root", str(netns_dir))
    except OSError as exc:  # a sandbox's init is not ours to read, even as root
        return (f"cannot read {proc / 'root'} to resolve {netns_dir} as the node does (the agent needs "
                f"hostPID: true, and the node's init readable): {exc.strerror or exc}: {exc.filename}")
    try:
        mounts = parse_mountinfo((proc / "mountinfo").read_text())
    except OSError as exc:
        return f"cannot read {proc / 'mountinfo'} (the agent needs hostPID: true): {exc}"
    if resolved is None:
        return f"{netns_dir} cannot be resolved on the host: its symlinks loop"
    on_host = os.path.normpath("/" + resolved.relative_to(proc / "root").as_posix())
    mount = mount_of(mounts, on_host)
    if mount is None or mount.propagation == "private":
        where = mount.mount_point if mount is not None else "?"
        return (f"path {netns_dir} ({on_host} on the node) is mounted on {where}, which is not a shared or "
                "slave mount: the kubelet refuses mountPropagation: HostToContainer there, and without it "
                "the agent would never see the network namespaces of new pods. On the node, make it a "
                f"shared mount, as containerd and `ip netns` do when they create their first namespace: "
                f"`mkdir -p {on_host} && mount --bind {on_host} {on_host} && mount --make-shared {on_host}` "
                f"(and at every boot, e.g. with a systemd unit; {DOCS})")
    return None


__all__ = [
    "DEFAULT_NETNS_DIR",
    "HOST_PROC",
    "Mount",
    "host_netns_problem",
    "in_host_root",
    "mount_of",
    "netns_problem",
    "parse_mountinfo",
]
