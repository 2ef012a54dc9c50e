"""Delegate plugins behind symlinks the agent's container cannot follow (Debian's /opt/cni/bin links
into /usr/lib/cni) run from the host's root, as on a node.

The agent runs here in a mount namespace of its own where /usr/lib/cni is hidden (an empty
tmpfs over it), the way a container lacks the host's /usr/lib/cni, with a bin dir of symlinks
into /usr/lib/cni, as the package makes them. `invoke.find_plugin` resolves each link under the
host's root, and the real plugin runs from there. On a node that root is /proc/1/root (the
host's init, which `hostPID: true` shows the DaemonSet); here a process the test leaves in the
original mount namespace plays the host's init (a sandbox may forbid reading /proc/1/root).
Root and the CNI plugins (in /usr/lib/cni); nothing is left mounted: the namespace ends with
the process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cni

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = Path("/usr/lib/cni")

SCRIPT = """
import json, os, subprocess, sys
from pathlib import Path
from bridge.agent.delegates import invoke
bin_dir = Path(sys.argv[1])
assert not (bin_dir / "bridge").exists(), "the link must not resolve in this namespace"
found = invoke.find_plugin("bridge", [bin_dir], host_root=Path(sys.argv[2]))
done = subprocess.run([str(found)], env={"CNI_COMMAND": "VERSION", "PATH": os.environ["PATH"]},
                      input=b'{"cniVersion": "1.0.0"}', capture_output=True, timeout=30)
print(json.dumps({"found": str(found), "code": done.returncode, "out": done.stdout.decode()}))
"""


def test_a_plugin_linked_into_a_directory_the_container_lacks_runs_from_the_hosts_root(
        cni_host: list[Path], tmp_path: Path) -> None:
    if not (PLUGINS / "bridge").is_file():
        pytest.fail(f"needs the plugins in {PLUGINS} (apt-get install containernetworking-plugins)")
    unshare = shutil.which("unshare")
    assert unshare, "needs util-linux's unshare"
    bin_dir = tmp_path / "opt-cni-bin"
    bin_dir.mkdir()
    for plugin in ("bridge", "host-local"):
        (bin_dir / plugin).symlink_to(PLUGINS / plugin)  # absolute, as Debian's package links them
    script = tmp_path / "find_and_run.py"
    script.write_text(SCRIPT)
    host = subprocess.Popen(["sleep", "300"])  # the host's init, as seen through /proc
    try:
        host_root = f"/proc/{host.pid}/root"
        hide = f"mount -t tmpfs podnetwork-test {PLUGINS} && exec {sys.executable} {script} {bin_dir} {host_root}"
        done = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c", hide],
                              capture_output=True, text=True, timeout=120, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        host.kill()
        host.wait()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["found"] == f"{host_root}{PLUGINS}/bridge"
    assert report["code"] == 0
    assert "1.0.0" in json.loads(report["out"])["supportedVersions"]
    # This mount namespace still has the plugins: the tmpfs went with the child's.
    assert (PLUGINS / "bridge").is_file()
