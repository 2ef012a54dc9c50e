"""The demo's footprint on this machine: network namespaces, links, directories.

Every resource is named with the run's tag (`pn-demo-<pid>-...` for namespaces,
`pnd<pid>...` for links, whose names the kernel caps at 15 bytes) and registered
for removal the moment it exists, in an `ExitStack`, so a failure or Ctrl-C
half-way still removes all of it. `leftovers()` lists anything of a run that is
still there; `--check` asserts it is empty.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Plugins the full demo executes (Debian package containernetworking-plugins).
REQUIRED_PLUGINS = ("bridge", "host-local", "macvlan")
DEFAULT_CNI_BIN_DIRS = (Path("/opt/cni/bin"), Path("/usr/lib/cni"))
COMMAND_TIMEOUT = 20.0


def missing_prerequisites(cni_bin_dirs: Sequence[Path]) -> list[str]:
    """Why the data-plane part cannot run here (empty when it can)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (to create network namespaces and links)")
    if shutil.which("ip") is None:
        missing.append("iproute2's `ip` (apt-get install iproute2)")
    absent = [p for p in REQUIRED_PLUGINS if not any((Path(d) / p).is_file() for d in cni_bin_dirs)]
    if absent:
        dirs = ":".join(str(d) for d in cni_bin_dirs)
        missing.append(
            f"the CNI plugins {', '.join(absent)} in {dirs} (apt-get install containernetworking-plugins)"
        )
    return missing


class CommandFailed(RuntimeError):
    pass


def run(
    argv: Sequence[str],
    *,
    timeout: float = COMMAND_TIMEOUT,
    check: bool = True,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a program (never through a shell); raise `CommandFailed` with its stderr on failure."""
    proc = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    if check and proc.returncode != 0:
        said = proc.stderr.strip() or proc.stdout.strip()
        raise CommandFailed(f"{' '.join(argv)} exited {proc.returncode}: {said}")
    return proc


@dataclass
class Footprint:
    """The names one run uses, derived from a tag (the process id by default)."""

    tag: str = field(default_factory=lambda: str(os.getpid()))

    @property
    def netns_prefix(self) -> str:
        return f"pn-demo-{self.tag}-"

    @property
    def link_prefix(self) -> str:
        return f"pnd{self.tag}"

    def netns(self, pod: str) -> str:
        return f"{self.netns_prefix}{pod}"

    def link(self, suffix: str) -> str:
        name = f"{self.link_prefix}{suffix}"
        if len(name.encode()) > 15:
            raise ValueError(f"link name {name!r} is longer than the kernel's 15 bytes")
        return name

    @property
    def tmp_prefix(self) -> str:
        return f"podnetwork-demo-{self.tag}-"

    def leftovers(self) -> list[str]:
        """Namespaces, links and temporary directories of this run that still exist."""
        found = []
        if shutil.which("ip"):
            netns = run(["ip", "netns", "list"], check=False).stdout
            found += [
                f"netns {line.split()[0]}"
                for line in netns.splitlines()
                if line.split() and line.split()[0].startswith(self.netns_prefix)
            ]
            links = run(["ip", "-o", "link", "show"], check=False).stdout
            for line in links.splitlines():
                parts = line.split(": ")
                if len(parts) > 1:
                    name = parts[1].split("@")[0]
                    if name.startswith(self.link_prefix):
                        found.append(f"link {name}")
        tmp = Path(tempfile.gettempdir())
        found += [f"directory {p}" for p in tmp.glob(f"{self.tmp_prefix}*")]
        return found


class Host:
    """Creates the run's resources and removes them when closed (in reverse order)."""

    def __init__(self, footprint: Footprint, *, keep: bool = False) -> None:
        self.footprint = footprint
        self.keep = keep
        self._stack = contextlib.ExitStack()
        self.cleanup_errors: list[str] = []
        self.created: list[str] = []

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.keep:
            self._stack.pop_all()
            return
        self._stack.close()

    def _undo(self, what: str, argv: Sequence[str]) -> None:
        def undo() -> None:
            try:
                run(argv, check=False)
            except (OSError, subprocess.SubprocessError) as exc:  # keep removing the rest
                self.cleanup_errors.append(f"{what}: {exc}")

        self._stack.callback(undo)

    def tempdir(self, purpose: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"{self.footprint.tmp_prefix}{purpose}-"))
        self.created.append(f"directory {path}")
        self._stack.callback(shutil.rmtree, path, ignore_errors=True)
        return path

    def netns(self, pod: str) -> str:
        name = self.footprint.netns(pod)
        # Register first: if `ip netns add` half-fails, deleting is still right.
        self._undo(f"netns {name}", ["ip", "netns", "delete", name])
        run(["ip", "netns", "add", name])
        run(["ip", "-n", name, "link", "set", "lo", "up"])
        self.created.append(f"netns {name}")
        return name

    def parent_link(self, suffix: str) -> tuple[str, str]:
        """An up link with no address to be a macvlan parent: a dummy link, or, where the kernel
        has no dummy driver (some containers), one end of a veth pair. Returns (name, kind)."""
        name = self.footprint.link(suffix)
        self._undo(f"link {name}", ["ip", "link", "delete", name])
        kind = "dummy"
        try:
            run(["ip", "link", "add", name, "type", "dummy"])
        except CommandFailed:
            kind = "veth"
            run(
                ["ip", "link", "add", name, "type", "veth", "peer", "name", self.footprint.link(suffix + "p")]
            )
            run(["ip", "link", "set", self.footprint.link(suffix + "p"), "up"])
        run(["ip", "link", "set", name, "up"])
        self.created.append(f"link {name}")
        return name, kind

    def bridge(self, suffix: str) -> str:
        """A Linux bridge for a network's layer 2, with a fixed MAC address.

        The bridge plugin would create it too, but a bridge whose MAC nobody set takes
        the lowest MAC of its ports and changes as pods join; the plugin's CHECK then
        finds the bridge MAC of an earlier result outdated. A node's network setup pins
        it; so does the demo (a locally administered address, RFC 7042 2.1).
        """
        name = self.footprint.link(suffix)
        self._undo(f"link {name}", ["ip", "link", "delete", name])
        run(["ip", "link", "add", name, "type", "bridge"])
        mac = "02:" + ":".join(f"{b:02x}" for b in os.urandom(5))
        run(["ip", "link", "set", name, "address", mac])
        run(["ip", "link", "set", name, "up"])
        self.created.append(f"link {name}")
        return name

    def callback(self, fn, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self._stack.callback(fn, *args, **kwargs)

    def ping(self, netns: str, address: str) -> subprocess.CompletedProcess[str]:
        return run(
            [
                "ip",
                "netns",
                "exec",
                netns,
                sys.executable,
                "-m",
                "demo.probe",
                address,
                "--count",
                "3",
                "--timeout",
                "1",
            ],
            check=False,
        )

    def addresses(self, netns: str) -> str:
        return run(["ip", "-n", netns, "-br", "addr"], check=False).stdout

    def cleanup_commands(self) -> list[str]:
        """Shell commands that remove this run's resources, for `--keep`."""
        fp = self.footprint
        return [
            f"for ns in $(ip netns list | awk '/^{fp.netns_prefix}/{{print $1}}');"
            " do ip netns delete $ns; done",
            "for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1"
            f" | grep '^{fp.link_prefix}'); do ip link delete $l; done",
            f"rm -rf {tempfile.gettempdir()}/{fp.tmp_prefix}*",
        ]
