"""Shared test fixtures.

Tests that need root and the real CNI plugins ask for the `cni_host` fixture:
outside CI they are skipped with the reason; in CI (CI=true, root, plugins
installed by `make test`) a missing prerequisite is a failure, never a skip.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CNI_BIN_DIRS = [Path("/opt/cni/bin"), Path("/usr/lib/cni")]
REQUIRED_PLUGINS = ("bridge", "host-local", "loopback")


def _cni_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`)"
    for plugin in REQUIRED_PLUGINS:
        if not any((d / plugin).is_file() for d in CNI_BIN_DIRS):
            return f"needs the CNI plugin {plugin!r} (apt-get install containernetworking-plugins)"
    return None


@pytest.fixture(scope="session")
def cni_host() -> list[Path]:
    """The CNI bin dirs, on a host where namespaces and plugins are usable."""
    missing = _cni_missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CNI tier cannot run in CI: {missing}")
        pytest.skip(missing)
    return [d for d in CNI_BIN_DIRS if d.is_dir()]
