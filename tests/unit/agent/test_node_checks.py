"""What the agent checks of its node (bridge.agent.delegates.hostpaths), on real files and symlinks in temp dirs
that stand for /proc/<pid> and a host's root.

- the propagation of the mount holding the netns directory, read from mountinfo: in the agent's
  container (`netns_problem`), and on the host as the runtime looks a hostPath up, as written,
  symlinks in it unresolved (`host_netns_problem`, the DaemonSet's init container), with the
  message that says what the node needs;
- plugins in a bin dir behind symlinks to elsewhere (Debian's layout), resolved under the host's
  root when the container cannot follow them (`invoke.find_plugin`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bridge.agent.delegates import hostpaths as node
from bridge.agent.delegates import invoke
from bridge.agent.delegates.invoke import CNIError

# Real lines of /proc/<pid>/mountinfo (proc(5)): root ext4 private, /run tmpfs shared, a netns bind
# mount, a slave mount as HostToContainer gives the container, and a mount point with a space.
HOST = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 27 0:25 / /run rw,nosuid shared:12 - tmpfs tmpfs rw,mode=755
43 30 0:4 net:[4026532177] /run/netns/cni-1 rw shared:2 - nsfs nsfs rw
"""
PRIVATE_ROOT = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
# runc resolves the image's /var/run -> /run symlink: the mount point is the resolved path.
CONTAINER = """\
600 500 0:70 / / rw,relatime - overlay overlay rw
610 600 254:0 /run/netns /run/netns rw,relatime master:12 - tmpfs tmpfs rw
611 600 254:0 /data /my\\040dir rw - ext4 /dev/vda rw
"""


def test_mountinfo_fields_and_propagation_are_read_as_the_kernel_writes_them() -> None:
    mounts = node.parse_mountinfo(HOST + CONTAINER)
    assert [m.mount_point for m in mounts][-1] == "/my dir"
    assert node.mount_of(mounts[:3], "/run/netns/cni-1").propagation == "shared"
    assert node.mount_of(mounts[:3], "/run/netns").mount_point == "/run"
    assert node.mount_of(mounts[:1], "/run/netns").propagation == "private"
    assert node.mount_of(node.parse_mountinfo(CONTAINER), "/run/netns").propagation == "slave"
    # Stacked on one mount point, the last mounted is the one seen.
    stacked = node.parse_mountinfo(PRIVATE_ROOT + "28 27 0:9 / / rw shared:1 - ext4 /dev/vdb rw\n")
    assert node.mount_of(stacked, "/x").propagation == "shared"


def fake_proc(tmp_path: Path, mountinfo: str, *, mnt: str = "mnt:[4026531841]") -> Path:
    proc = tmp_path / "proc1"
    (proc / "ns").mkdir(parents=True)
    (proc / "ns" / "mnt").symlink_to(mnt)
    (proc / "mountinfo").write_text(mountinfo)
    root = proc / "root"
    (root / "run" / "netns").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")  # as on every systemd host
    return proc


def test_on_a_host_whose_run_is_shared_the_netns_directory_may_be_propagated(tmp_path: Path) -> None:
    assert node.host_netns_problem(Path("/run/netns"), proc=fake_proc(tmp_path, HOST)) is None


def test_the_runtime_finds_a_host_path_by_its_written_name_so_var_run_lies_on_root_not_on_run() -> None:
    # containerd's mount.Lookup and CRI-O's getSourceMount: string prefixes, the longest wins, the
    # first listed among equals; nothing resolves /var/run -> /run.
    mounts = node.parse_mountinfo(HOST)
    assert node.runtime_mount_of(mounts, "/var/run/netns").mount_point == "/"
    assert node.runtime_mount_of(mounts, "/run/netns").mount_point == "/run"
    assert node.runtime_mount_of(mounts, "/run//netns/").mount_point == "/run"
    stacked = node.parse_mountinfo(PRIVATE_ROOT + "28 27 0:9 / / rw shared:1 - ext4 /dev/vdb rw\n")
    assert node.runtime_mount_of(stacked, "/x").propagation == "private"


def test_a_var_run_host_path_is_refused_as_containerd_refuses_it_even_where_run_netns_is_shared(
        tmp_path: Path) -> None:
    # The node of the issue: private root, /run/netns made shared as the docs said; containerd 1.6
    # still refused hostPath /var/run/netns, and --check-host said yes.
    shared_netns = PRIVATE_ROOT + "44 27 0:25 /netns /run/netns rw shared:7 - tmpfs tmpfs rw\n"
    proc = fake_proc(tmp_path, shared_netns)
    problem = node.host_netns_problem(Path("/var/run/netns"), proc=proc)
    assert problem is not None
    assert problem.startswith('path "/var/run/netns" is mounted on "/" but it is not a shared or slave mount')
    assert "give the hostPath and --netns-dir as /run/netns" in problem
    assert "also on a private mount" not in problem
    assert node.host_netns_problem(Path("/run/netns"), proc=proc) is None


def test_on_a_host_whose_root_is_private_the_problem_is_the_runtimes_and_says_what_the_node_needs(
        tmp_path: Path) -> None:
    problem = node.host_netns_problem(Path("/run/netns"), proc=fake_proc(tmp_path, PRIVATE_ROOT))
    assert problem is not None
    assert problem.startswith('path "/run/netns" is mounted on "/" but it is not a shared or slave mount')
    assert "mount --bind /run/netns /run/netns && mount --make-shared /run/netns" in problem
    assert "docs/deploy.md" in problem
    both = node.host_netns_problem(Path("/var/run/netns"), proc=fake_proc(tmp_path / "b", PRIVATE_ROOT))
    assert both is not None and "as /run/netns" in both and "mount --make-shared /run/netns" in both


def test_a_slave_mount_serves_host_to_container_but_bidirectional_needs_a_shared_one(tmp_path: Path) -> None:
    slave = PRIVATE_ROOT + "30 27 0:25 / /run rw master:12 - tmpfs tmpfs rw\n"
    proc = fake_proc(tmp_path, slave)
    assert node.host_netns_problem(Path("/run/netns"), proc=proc) is None
    problem = node.host_netns_problem(Path("/run/netns"), proc=proc, bidirectional=True)
    assert problem is not None and "is mounted on \"/run\" but it is not a shared mount" in problem


def test_a_host_path_that_is_itself_a_symlink_is_resolved_as_the_runtime_resolves_it(tmp_path: Path) -> None:
    # The runtime resolves a hostPath whose last component is a link (lstat, then EvalSymlinks).
    proc = fake_proc(tmp_path, PRIVATE_ROOT + "30 27 0:25 / /run rw shared:12 - tmpfs tmpfs rw\n")
    (proc / "root" / "netns").symlink_to("/run/netns")
    assert node.host_netns_problem(Path("/netns"), proc=proc) is None


def test_in_a_container_the_netns_directory_must_be_a_slave_or_shared_mount(tmp_path: Path) -> None:
    host = fake_proc(tmp_path, HOST)  # another mount namespace than this process's
    own = tmp_path / "self"
    own.mkdir()
    (own / "mountinfo").write_text(CONTAINER)
    assert node.netns_problem(Path("/var/run/netns"), proc=host, own=own) is None
    (own / "mountinfo").write_text(CONTAINER.replace("master:12 ", ""))
    problem = node.netns_problem(Path("/var/run/netns"), proc=host, own=own)
    assert problem is not None and "private in the agent's container" in problem
    assert "HostToContainer" in problem


def test_in_the_hosts_own_mount_namespace_nothing_needs_propagating(tmp_path: Path) -> None:
    host = fake_proc(tmp_path, PRIVATE_ROOT, mnt=os.readlink("/proc/self/ns/mnt"))
    own = tmp_path / "self"
    own.mkdir()
    (own / "mountinfo").write_text(PRIVATE_ROOT)
    assert node.netns_problem(Path("/var/run/netns"), proc=host, own=own) is None


def test_paths_resolve_under_the_host_root_as_the_host_resolves_them(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr" / "lib" / "cni").mkdir(parents=True)
    (root / "opt" / "cni" / "bin").mkdir(parents=True)
    (root / "opt" / "cni" / "bin" / "abs").symlink_to("/usr/lib/cni/bridge")
    (root / "opt" / "cni" / "bin" / "rel").symlink_to("../../../usr/lib/cni/bridge")
    (root / "opt" / "cni" / "bin" / "chain").symlink_to("abs")
    (root / "opt" / "cni" / "bin" / "escape").symlink_to("../../../../../../usr/lib/cni/bridge")
    (root / "opt" / "cni" / "bin" / "loop").symlink_to("loop")
    for name in ("abs", "rel", "chain", "escape"):
        assert node.in_host_root(root, f"/opt/cni/bin/{name}") == root / "usr" / "lib" / "cni" / "bridge", name
    assert node.in_host_root(root, "/opt/cni/bin/loop") is None


def plugin_behind_a_symlink(tmp_path: Path) -> tuple[Path, Path, str]:
    """A bin dir whose `bridge` links to an absolute path that exists only under a host root."""
    target = f"/podnetwork-test-{os.getpid()}/usr/lib/cni/bridge"
    assert not Path(target).exists()
    host_root = tmp_path / "host"
    real = host_root / target.lstrip("/")
    real.parent.mkdir(parents=True)
    real.write_text("#!/bin/sh\necho '{}'\n")
    real.chmod(0o755)
    bin_dir = tmp_path / "opt-cni-bin"
    bin_dir.mkdir()
    (bin_dir / "bridge").symlink_to(target)
    return bin_dir, host_root, target


def test_a_plugin_behind_a_symlink_the_container_cannot_follow_runs_from_the_host(tmp_path: Path) -> None:
    bin_dir, host_root, target = plugin_behind_a_symlink(tmp_path)
    assert invoke.find_plugin("bridge", [bin_dir], host_root=host_root) == host_root / target.lstrip("/")


def test_a_symlink_that_resolves_nowhere_is_named_with_its_target(tmp_path: Path) -> None:
    bin_dir, _, target = plugin_behind_a_symlink(tmp_path)
    with pytest.raises(CNIError) as caught:
        invoke.find_plugin("bridge", [bin_dir], host_root=tmp_path / "elsewhere")
    assert f"{bin_dir / 'bridge'} -> {target}" in str(caught.value)
    assert "hostPID" in str(caught.value)


def test_check_host_as_the_init_container_runs_it_exits_1_with_what_the_node_needs_or_0(tmp_path: Path) -> None:
    import subprocess
    import sys

    def check(proc: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "podnetwork", "cni-agent", "--check-host",
                               "--netns-dir=/run/netns", f"--host-proc={proc}"],
                              capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[3])

    private = check(fake_proc(tmp_path / "a", PRIVATE_ROOT))
    assert private.returncode == 1
    assert 'is mounted on "/" but it is not a shared or slave mount' in private.stderr
    shared = check(fake_proc(tmp_path / "b", HOST))
    assert shared.returncode == 0, shared.stderr


def test_check_host_where_the_hosts_root_cannot_be_read_says_so_and_exits_1(tmp_path: Path) -> None:
    # /proc/1/root of a sandbox's init is not ours to read even as root (EACCES): --check-host said
    # it with a traceback. Here the host's root is a directory we may not enter; root is held to its
    # mode by running the command without the capabilities that bypass it.
    import shutil
    import subprocess
    import sys

    proc = fake_proc(tmp_path, HOST)
    command = [sys.executable, "-m", "podnetwork", "cni-agent", "--check-host",
               "--netns-dir=/var/run/netns", f"--host-proc={proc}"]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) is needed to run the command as root without CAP_DAC_*"
        drop = "-dac_override,-dac_read_search"
        command = [setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}", *command]
    (proc / "root").chmod(0)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60,
                              cwd=Path(__file__).resolve().parents[3])
    finally:
        (proc / "root").chmod(0o755)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"the node is not ready for the agent: cannot read {proc / 'root'}" in done.stderr
    assert "hostPID: true" in done.stderr and "Permission denied" in done.stderr


def test_a_netns_dir_the_host_cannot_resolve_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    problem = node.host_netns_problem(Path("/var/run/" + "n" * 300), proc=fake_proc(tmp_path, HOST))
    assert problem is not None and "File name too long" in problem
