"""`podnetwork demo --cni-bin-dir`: a directory given that does not exist is a typo to say, not a
reason to skip the data-plane part quietly (exit 2, before anything runs); without the flag a
machine without the plugins still runs the control-plane part (docs/demo.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_missing_cni_bin_dir_given_explicitly_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    dirs = f"{tmp_path / 'bin'}:{tmp_path / 'nope'}"
    proc = subprocess.run([sys.executable, "-m", "podnetwork", "demo", "--cni-bin-dir", dirs], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert (f"podnetwork demo: --cni-bin-dir: {tmp_path / 'nope'} is not a directory; give the directories that "
            "hold the CNI plugins, or leave the flag out to skip the CNI part where they are missing") in proc.stderr
    assert proc.stdout == "", "nothing ran"
