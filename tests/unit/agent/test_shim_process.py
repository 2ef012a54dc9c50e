"""The shim's start-up cost (docs/benchmarks.md): installed (the protocol's text inlined), it imports
nothing beyond `_socket`, and reading the environment from `posix.environ` keeps the request framing
byte for byte."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.agent.daemon import server
from bridge.agent.node import install
from bridge.agent.shim import shim

PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


class _Recorder:
    """A unix-socket peer that records one request and answers like the agent would."""

    def __init__(self, path: Path, answer: bytes) -> None:
        self.path = path
        self.answer = answer
        self.requests: list[bytes] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(4)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests.append(body)
                conn.sendall(self.answer)

    def close(self) -> None:
        self._sock.close()


@pytest.fixture(scope="module")
def python_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python shim as `--install` installs it (`--python-shim`, or the fallback): one file, the
    protocol inlined."""
    return install.install_shim(tmp_path_factory.mktemp("bin"), PYTHON)


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[_Recorder]:
    answer = b'HTTP/1.1 200 OK\r\nContent-Length: 24\r\nConnection: close\r\n\r\n{"cniVersion": "1.0.0"}\n'
    rec = _Recorder(tmp_path / "agent.sock", answer)
    yield rec
    rec.close()


def _run_shim(exe: Path, conf: bytes, env: dict[bytes, bytes], *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PYTHON, "-IS", *extra, str(exe)], input=conf, env=env, capture_output=True, timeout=30)


def _imports(stderr: bytes) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.decode().splitlines()
        if line.startswith("import time:") and not line.rstrip().endswith("imported package")
    }


def test_forwarding_a_request_imports_only_socket_beyond_the_interpreters_own_start(python_shim: Path, recorder: _Recorder) -> None:
    conf = json.dumps({"cniVersion": "1.0.0", "name": "m", "type": "multinetwork", "socketPath": str(recorder.path)})
    env = {b"CNI_COMMAND": b"ADD", b"CNI_CONTAINERID": b"c1", b"CNI_NETNS": b"/x", b"CNI_IFNAME": b"eth0"}
    done = _run_shim(python_shim, conf.encode(), env, "-X", "importtime")
    assert done.returncode == 0, done.stdout
    bare = subprocess.run([PYTHON, "-IS", "-X", "importtime", "-c", "pass"], capture_output=True, check=True)
    assert _imports(done.stderr) - _imports(bare.stderr) == {"_socket"}
    assert len(recorder.requests) == 1


def test_cni_variables_reach_the_agent_byte_for_byte_and_nothing_else_does(python_shim: Path, recorder: _Recorder) -> None:
    conf = json.dumps({"cniVersion": "1.0.0", "name": "m", "type": "multinetwork", "socketPath": str(recorder.path)})
    env = {
        b"CNI_COMMAND": b"ADD",
        b"CNI_CONTAINERID": b"c1",
        b"CNI_ARGS": b"K8S_POD_NAME=caf\xe9;IgnoreUnknown=1",  # not UTF-8: passed as the runtime gave it
        b"PATH": b"/usr/bin",
        b"NOT_CNI_SECRET": b"x",
    }
    done = _run_shim(python_shim, conf.encode(), env)
    assert done.returncode == 0, done.stdout
    assert done.stdout == b'{"cniVersion": "1.0.0"}\n'
    parsed_env, stdin = server.parse_body(recorder.requests[0])
    assert stdin == conf.encode()
    assert set(parsed_env) == {"CNI_COMMAND", "CNI_CONTAINERID", "CNI_ARGS"}
    assert parsed_env["CNI_ARGS"].encode("utf-8", "surrogateescape") == b"K8S_POD_NAME=caf\xe9;IgnoreUnknown=1"


def test_a_cni_variable_with_a_newline_is_refused_without_contacting_the_agent(python_shim: Path, recorder: _Recorder) -> None:
    conf = json.dumps({"cniVersion": "0.4.0", "name": "m", "type": "multinetwork", "socketPath": str(recorder.path)})
    done = _run_shim(python_shim, conf.encode(), {b"CNI_COMMAND": b"ADD", b"CNI_IFNAME": b"eth0\nCNI_NETNS=/evil"})
    assert done.returncode == 1
    error = json.loads(done.stdout)
    assert (error["cniVersion"], error["code"], error["msg"]) == ("0.4.0", 4, "invalid CNI_IFNAME")
    assert recorder.requests == []


def test_a_del_whose_container_id_holds_a_newline_succeeds_without_the_agent(python_shim: Path, recorder: _Recorder) -> None:
    """ADD refuses such an ID (above), so nothing was attached under it: refusing its DEL would
    keep the pod forever."""
    conf = json.dumps({"cniVersion": "1.0.0", "name": "m", "type": "multinetwork", "socketPath": str(recorder.path)})
    done = _run_shim(python_shim, conf.encode(), {b"CNI_COMMAND": b"DEL", b"CNI_CONTAINERID": b"ctr\nx", b"CNI_IFNAME": b"eth0"})
    assert (done.returncode, done.stdout) == (0, b"")
    assert recorder.requests == []


def test_a_del_leaves_out_any_other_variable_with_a_newline(python_shim: Path, recorder: _Recorder) -> None:
    conf = json.dumps({"cniVersion": "1.0.0", "name": "m", "type": "multinetwork", "socketPath": str(recorder.path)})
    done = _run_shim(python_shim, conf.encode(), {b"CNI_COMMAND": b"DEL", b"CNI_CONTAINERID": b"ctr1",
                                     b"CNI_IFNAME": b"eth0\nCNI_NETNS=/evil", b"CNI_ARGS": b"K8S_POD_NAME=web"})
    assert done.returncode == 0, done.stdout
    (body,) = recorder.requests
    head = body.partition(b"\n\n")[0]
    assert sorted(head.split(b"\n")) == [b"CNI_ARGS=K8S_POD_NAME=web", b"CNI_COMMAND=DEL", b"CNI_CONTAINERID=ctr1"]


def test_version_is_answered_from_the_environment_without_the_agent(python_shim: Path, tmp_path: Path) -> None:
    conf = json.dumps({"cniVersion": "1.0.0", "name": "m", "type": "multinetwork", "socketPath": str(tmp_path / "none")})
    done = _run_shim(python_shim, conf.encode(), {b"CNI_COMMAND": b"VERSION"})
    assert done.returncode == 0
    assert json.loads(done.stdout)["supportedVersions"] == list(shim.SUPPORTED_VERSIONS)


def test_a_large_result_is_printed_whole_although_the_shim_skips_interpreter_finalization(python_shim: Path, tmp_path: Path) -> None:
    result = json.dumps({"cniVersion": "1.0.0", "dns": {"search": ["s" * 60] * 4000}}).encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(result), result)
    rec = _Recorder(tmp_path / "big.sock", answer)
    try:
        conf = json.dumps({"cniVersion": "1.0.0", "name": "m", "type": "multinetwork", "socketPath": str(rec.path)})
        done = _run_shim(python_shim, conf.encode(), {b"CNI_COMMAND": b"ADD", b"CNI_CONTAINERID": b"c1"})
    finally:
        rec.close()
    assert done.returncode == 0
    assert len(result) > 200_000
    assert done.stdout == result
