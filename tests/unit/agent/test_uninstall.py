"""`podnetwork cni-agent --uninstall` as a process, on directories of the test standing for a node's
CNI bin and conf dirs: it removes exactly what --install put there (the agent's conflist, the shim
and the Python shim beside a compiled one), leaves the node's own files, and a second run finds
nothing and still exits 0 (deploy/uninstall.sh runs it in every agent's container)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bridge.agent.node import install

ROOT = Path(__file__).resolve().parents[3]


def uninstall(bin_dir: Path, conf_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podnetwork", "cni-agent", "--uninstall",
                           f"--cni-bin-dir={bin_dir}", f"--cni-conf-dir={conf_dir}"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_uninstall_removes_the_conflist_and_the_shim_and_nothing_else_and_may_run_again(tmp_path: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    bin_dir.mkdir()
    conf_dir.mkdir()
    (bin_dir / "bridge").write_text("the node's plugin")
    (conf_dir / "10-flannel.conflist").write_text("{}")
    installed = install.install(bin_dir, sys.executable)
    install.write_conflist(conf_dir / "00-multinetwork.conflist", {"cniVersion": "1.0.0", "name": "n",
                                                                   "plugins": [{"type": "bridge"}]},
                           tmp_path / "agent.sock")
    assert installed.path == bin_dir / "multinetwork"

    done = uninstall(bin_dir, conf_dir)
    assert done.returncode == 0, done.stderr
    assert f"removed {conf_dir / '00-multinetwork.conflist'}, {bin_dir / 'multinetwork'}" in done.stdout
    assert sorted(p.name for p in bin_dir.iterdir()) == ["bridge"]
    assert sorted(p.name for p in conf_dir.iterdir()) == ["10-flannel.conflist"]

    again = uninstall(bin_dir, conf_dir)
    assert again.returncode == 0, again.stderr
    assert "nothing to remove" in again.stdout
