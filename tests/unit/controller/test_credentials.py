"""Commands check their credentials before starting an operator (kopf would retry forever)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from podnetwork.kube import credentials


def write_kubeconfig(path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    return path


def test_a_usable_kubeconfig_is_no_problem(tmp_path: Path):
    assert credentials.login_problem(str(write_kubeconfig(tmp_path / "kc"))) is None


def test_a_missing_kubeconfig_is_named_in_the_problem(tmp_path: Path):
    problem = credentials.login_problem(str(tmp_path / "missing"))
    assert problem is not None and str(tmp_path / "missing") in problem


def test_an_unknown_context_is_a_problem(tmp_path: Path):
    problem = credentials.login_problem(str(write_kubeconfig(tmp_path / "kc")), "nope")
    assert problem is not None and "nope" in problem


def test_the_controller_exits_with_a_clear_line_instead_of_retrying_a_login(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "podnetwork", "controller", "--kubeconfig", str(tmp_path / "missing"),
         "--no-webhook"],
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 2
    assert "cannot reach a cluster" in proc.stderr and "--kubeconfig" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_failing_credential_plugin_is_a_problem_before_the_operator_starts(tmp_path: Path):
    path = write_kubeconfig(tmp_path / "kc")
    data = yaml.safe_load(path.read_text())
    data["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                         "command": sys.executable, "args": ["-c", "raise SystemExit('expired')"]}}
    path.write_text(yaml.safe_dump(data))
    problem = credentials.login_problem(str(path))
    assert problem is not None and "credential plugin (exec) failed" in problem and "expired" in problem


def test_an_unreadable_certificate_authority_is_a_problem(tmp_path: Path):
    path = write_kubeconfig(tmp_path / "kc")
    data = yaml.safe_load(path.read_text())
    data["clusters"][0]["cluster"]["certificate-authority"] = "ca.pem"  # relative: next to the kubeconfig
    path.write_text(yaml.safe_dump(data))
    problem = credentials.login_problem(str(path))
    assert problem is not None and f"{tmp_path / 'ca.pem'}: no such file" in problem
