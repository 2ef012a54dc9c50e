"""deploy/agent's propagated hostPath against the runtime's check of it, without a cluster: the
DaemonSet's own `check-host` init container (its argv from the rendered manifest, as a process)
against host mount tables written as the kernel writes /proc/<pid>/mountinfo, and docs/deploy.md's
remedy against what that check asks for.

containerd 1.6 refused the agent's container on a node with a private root because the hostPath
was /var/run/netns, which the runtime looks up unresolved and finds on `/`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.unit.deploy_support import DEPLOY, ROOT, Container, containers

PRIVATE_ROOT = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
#: What docs/deploy.md's remedy leaves in the host's mount table: /run/netns bound on itself, shared.
REMEDIED = PRIVATE_ROOT + "44 27 254:0 /run/netns /run/netns rw,relatime shared:7 - ext4 /dev/vda rw\n"


def agent_containers() -> dict[str, Container]:
    return {c.spec["name"]: c for c in containers(DEPLOY / "agent")}


def propagated_host_paths() -> list[tuple[str, str]]:
    """(hostPath, mountPath) of every volume mounted with mountPropagation."""
    found = []
    for container in agent_containers().values():
        volumes = {v["name"]: v for v in container.pod["volumes"]}
        for mount in container.spec.get("volumeMounts", []):
            if "mountPropagation" in mount:
                found.append((volumes[mount["name"]]["hostPath"]["path"], mount["mountPath"]))
    return found


def host_proc(tmp_path: Path, mountinfo: str) -> Path:
    """A host's /proc/1 as the init container sees it with hostPID: its mount table and root,
    where /var/run links to /run as on every current distribution."""
    proc = tmp_path / "proc1"
    proc.mkdir(parents=True)
    (proc / "mountinfo").write_text(mountinfo)
    (proc / "root" / "run" / "netns").mkdir(parents=True)
    (proc / "root" / "var").mkdir()
    (proc / "root" / "var" / "run").symlink_to("/run")
    return proc


def check_host(proc: Path) -> subprocess.CompletedProcess[str]:
    argv = agent_containers()["check-host"].argv
    assert argv[:3] == ["podnetwork", "cni-agent", "--check-host"]
    return subprocess.run([sys.executable, "-m", *argv, f"--host-proc={proc}"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


def test_the_netns_host_path_is_mounted_where_it_is_and_is_the_one_both_containers_check() -> None:
    (host_path, mount_path), = propagated_host_paths()
    # A hostPath through a symlink (/var/run) is looked up by the runtime on the wrong mount.
    assert not host_path.startswith("/var/run/") and host_path == mount_path == "/run/netns"
    for name in ("check-host", "agent"):
        assert f"--netns-dir={host_path}" in agent_containers()[name].argv, name


def test_check_host_passes_on_a_node_prepared_as_the_docs_say_and_refuses_an_unprepared_one(
        tmp_path: Path) -> None:
    refused = check_host(host_proc(tmp_path / "bare", PRIVATE_ROOT))
    assert refused.returncode == 1, refused.stderr
    assert 'path "/run/netns" is mounted on "/" but it is not a shared or slave mount' in refused.stderr
    remedy = "mkdir -p /run/netns && mount --bind /run/netns /run/netns && mount --make-shared /run/netns"
    assert remedy in refused.stderr
    assert f"```sh\n{remedy}\n```" in (ROOT / "docs" / "deploy.md").read_text()
    prepared = check_host(host_proc(tmp_path / "prepared", REMEDIED))
    assert prepared.returncode == 0, prepared.stderr
