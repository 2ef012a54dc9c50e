"""Every command answers a hostile environment (a kubeconfig that is not text, an API server
that answers what no Kubernetes API server sends) with a line that says what is wrong, never
a traceback. The commands run as processes, against servers on loopback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.unit.hostile_api_support import HostileApi, ok
from tests.unit.ports_support import free_port

#: One way to ask each command that reads the cluster for something, with --kubeconfig last.
CLUSTER_COMMANDS = {
    "migrate": ["migrate", "-A"],
    "export-dra": ["export-dra", "-A"],
    "conformance": ["conformance"],
    "explain": ["explain", "pod", "ns/web"],
    "graph": ["graph"],
}
#: The long-running ones: each must exit at once on a kubeconfig it cannot read.
SERVERS = {
    "controller": ["controller", "--no-webhook"],
    "bridge": ["bridge"],
    "scheduler-extender": ["scheduler-extender", "--port", str(free_port())],
    "cni-agent": ["cni-agent", "--node-name", "n1"],
}


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podnetwork", *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "default"}}],
    }))
    return path


@pytest.mark.parametrize("args", [*CLUSTER_COMMANDS.values(), *SERVERS.values()],
                         ids=[*CLUSTER_COMMANDS, *SERVERS])
def test_a_kubeconfig_that_is_not_utf8_is_named(tmp_path: Path, args: list[str]):
    path = tmp_path / "kc"
    path.write_bytes(b"apiVersion: v1\nkind: Config\ncurrent-context: \xff\xfe\n")
    proc = run([*args, "--kubeconfig", str(path)], tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode != 0
    assert f"{path}: not UTF-8 text (byte 45); save it as UTF-8" in proc.stderr, proc.stderr


@pytest.fixture(params=["a JSON list", "not JSON", "not HTTP"])
def babbling_server(request: pytest.FixtureRequest) -> Iterator[HostileApi]:
    answers = {"a JSON list": ok(b"[1, 2, 3]"), "not JSON": ok(b"{\"kind\": "),
               "not HTTP": b"\x00\xffhello\r\n\r\n"}
    server = HostileApi(lambda _line: [answers[request.param]])
    yield server
    server.close()


@pytest.mark.parametrize("args", CLUSTER_COMMANDS.values(), ids=CLUSTER_COMMANDS)
def test_an_api_server_that_answers_garbage_is_a_clear_error(tmp_path: Path, args: list[str],
                                                             babbling_server: HostileApi):
    path = kubeconfig(tmp_path / "kc", babbling_server.url)
    proc = run([*args, "--kubeconfig", str(path)], tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert "API server" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [SERVERS["controller"], SERVERS["bridge"]], ids=["controller", "bridge"])
def test_an_operator_refuses_a_server_that_is_no_api_server_before_kopf_starts(tmp_path: Path, args: list[str],
                                                                              babbling_server: HostileApi):
    # kopf's first discovery request would end the operator with a traceback.
    path = kubeconfig(tmp_path / "kc", babbling_server.url)
    proc = run([*args, "--kubeconfig", str(path)], tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert f"the server at {babbling_server.url} does not answer as a Kubernetes API server" in proc.stderr
