"""`podnetwork dra-driver`: its help, the DeviceClass it prints, and bad arguments refused before anything
is made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DRIVER = "dra.multinetwork.x-k8s.io"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podnetwork", "dra-driver", *args], capture_output=True,
                          text=True, timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})


def test_help_names_the_flags_and_defaults() -> None:
    done = run("--help")
    assert done.returncode == 0
    for flag in ("--node-name", "--driver-name", "--kubelet-plugins-dir", "--kubelet-registry-dir", "--state-dir",
                 "--print-device-class", "/var/lib/kubelet/plugins", DRIVER):
        assert flag in done.stdout


def test_the_printed_device_class_selects_the_drivers_devices() -> None:
    done = run("--print-device-class", "--driver-name", "net.example.com")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout) == {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "net.example.com"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "net.example.com"'}}]}}


@pytest.mark.parametrize(("args", "said"), [
    ([], "no node name: pass --node-name"),
    (["--node-name", "Bad_Node"], "is not a DNS subdomain"),
    (["--node-name", "n1", "--driver-name", "Not A Driver"], "is not a DNS subdomain of at most 63"),
    (["--node-name", "n1", "--kubelet-plugins-dir", "/" + "d" * 90], "shorten --kubelet-plugins-dir"),
    (["--node-name", "n1", "--kubelet-registry-dir", "/" + "d" * 80], "shorten --kubelet-registry-dir"),
    (["--node-name", "n1", "--kubeconfig", "/nonexistent/kubeconfig"], "cannot load cluster credentials"),
], ids=["no-node", "bad-node", "bad-driver", "long-plugins", "long-registry", "no-credentials"])
def test_bad_arguments_exit_2_saying_what_to_fix_and_make_nothing(args: list[str], said: str,
                                                                 tmp_path: Path) -> None:
    done = run(*args, "--state-dir", str(tmp_path / "state"), *(
        [] if any(a.startswith("--kubelet-plugins-dir") for a in args) else
        ["--kubelet-plugins-dir", "/nonexistent-pn/plugins"]))
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert list(tmp_path.iterdir()) == []
