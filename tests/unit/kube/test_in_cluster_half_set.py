"""In-cluster credentials half given: the message says exactly which of KUBERNETES_SERVICE_HOST,
KUBERNETES_SERVICE_PORT and the service account token is missing (every pod has all three, so
one alone is a wrong environment, not "not in a pod"). The command runs as a process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CASES = [
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1"},
     "in-cluster: KUBERNETES_SERVICE_HOST is set but KUBERNETES_SERVICE_PORT is not; a pod has both: "
     "set KUBERNETES_SERVICE_PORT, or unset KUBERNETES_SERVICE_HOST"),
    ({"KUBERNETES_SERVICE_PORT": "443"},
     "in-cluster: KUBERNETES_SERVICE_PORT is set but KUBERNETES_SERVICE_HOST is not; a pod has both: "
     "set KUBERNETES_SERVICE_HOST, or unset KUBERNETES_SERVICE_PORT"),
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": ""},
     "in-cluster: KUBERNETES_SERVICE_HOST is set but KUBERNETES_SERVICE_PORT is empty; a pod has both: "
     "set KUBERNETES_SERVICE_PORT, or unset KUBERNETES_SERVICE_HOST"),
    ({}, "in-cluster: not in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set)"),
]


@pytest.mark.parametrize(("env", "message"), CASES, ids=["host only", "port only", "empty port", "neither"])
def test_the_missing_half_of_the_in_cluster_environment_is_named(tmp_path: Path, env: dict[str, str],
                                                                  message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "podnetwork", "graph"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env})
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
