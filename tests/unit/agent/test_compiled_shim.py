"""The compiled shim (`bridge/agent/shim.c`, `install_shim(compiled=True)`): what it forwards is
byte for byte what the Python shim forwards, what it prints of the agent's answer is the same, and
everything else (VERSION, a variable with a newline, no agent, an unusual configuration) is the
Python shim's own answer. Built with this machine's `cc`; a real unix-socket peer records requests."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bridge.agent import command, shim
from tests.unit.agent.test_shim_process import PYTHON, _Recorder

OK = b'HTTP/1.1 200 OK\r\nContent-Length: 24\r\nConnection: close\r\n\r\n{"cniVersion": "1.0.0"}\n'


@pytest.fixture
def shims(tmp_path: Path) -> tuple[Path, Path]:
    """(compiled, python) shims, installed as `--install` does."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the compiled shim cannot be built (the Python one is used)")
    compiled = command.install_shim(tmp_path / "cbin", PYTHON, compiled=True)
    assert compiled.read_bytes()[:4] == b"\x7fELF", "built, not the fallback"
    return compiled, command.install_shim(tmp_path / "pbin", PYTHON)


def run(exe: Path, conf: bytes, env: dict[bytes, bytes]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(exe)], input=conf, env=env, capture_output=True, timeout=30)


def conf(socket_path: Path | str, **extra: object) -> bytes:
    return json.dumps({"cniVersion": "1.0.0", "name": "m", "type": "multinetwork", **extra,
                       "socketPath": str(socket_path)}).encode()


ENV = {b"CNI_COMMAND": b"ADD", b"CNI_CONTAINERID": b"c1", b"CNI_ARGS": b"K8S_POD_NAME=caf\xe9;IgnoreUnknown=1",
       b"CNI_IFNAME": b"eth0", b"PATH": b"/usr/bin", b"NOT_CNI_SECRET": b"x"}


def test_a_request_reaches_the_agent_byte_for_byte_as_from_the_python_shim(
    shims: tuple[Path, Path], tmp_path: Path
) -> None:
    answers = {}
    for exe in shims:
        rec = _Recorder(tmp_path / f"{exe.parent.name}.sock", OK)
        try:
            done = run(exe, conf(rec.path, runtimeConfig={"socketPath": "/elsewhere"}), ENV)
        finally:
            rec.close()
        assert done.returncode == 0, done.stdout
        (request,) = rec.requests
        answers[exe.parent.name] = (done.stdout, request.replace(str(rec.path).encode(), b"SOCK"))
    assert answers["cbin"] == answers["pbin"]
    assert answers["cbin"][0] == b'{"cniVersion": "1.0.0"}\n'


@pytest.mark.parametrize("answer,code,printed", [
    (b'HTTP/1.1 400 Bad Request\r\nContent-Length: 40\r\n\r\n{"cniVersion": "1.0.0", "code": 7, "msg": "x"}  ', 1,
     b'{"cniVersion": "1.0.0", "code": 7, "msg": "x"}\n'),
    (b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nboom", 1, None),
])
def test_the_agents_error_answers_are_printed_as_the_python_shim_prints_them(
    shims: tuple[Path, Path], tmp_path: Path, answer: bytes, code: int, printed: bytes | None
) -> None:
    outputs = []
    for exe in shims:
        rec = _Recorder(tmp_path / f"{exe.parent.name}.sock", answer)
        try:
            done = run(exe, conf(rec.path), ENV)
        finally:
            rec.close()
        assert done.returncode == code
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    if printed is not None:
        assert outputs[0] == printed
    else:
        error = json.loads(outputs[0])
        assert (error["code"], error["msg"], error["details"]) == (102, "the agent answered HTTP 500", "boom")


def test_what_the_fast_path_does_not_take_is_the_python_shims_answer(shims: tuple[Path, Path], tmp_path: Path) -> None:
    rec = _Recorder(tmp_path / "agent.sock", OK)
    cases = [
        (conf(rec.path), {b"CNI_COMMAND": b"VERSION"}),  # answered without the agent
        (conf(rec.path), {b"CNI_COMMAND": b"ADD", b"CNI_IFNAME": b"eth0\nCNI_NETNS=/evil"}),  # refused
        (conf(tmp_path / "nobody-listens"), {b"CNI_COMMAND": b"ADD"}),  # no agent: 102 in the Python words
        (conf("\\ud800"), {b"CNI_COMMAND": b"ADD"}),  # an escaped path that cannot name a file
        (b"", {b"CNI_COMMAND": b"DEL"}),  # no configuration at all
    ]
    try:
        for stdin, env in cases:
            compiled, python = (run(exe, stdin, env) for exe in shims)
            assert (compiled.returncode, compiled.stdout) == (python.returncode, python.stdout), (stdin, env)
    finally:
        rec.close()
    assert rec.requests == [], "none of these reached the agent"
    assert json.loads(run(shims[0], conf(rec.path), {b"CNI_COMMAND": b"VERSION"}).stdout)["supportedVersions"] == list(
        shim.SUPPORTED_VERSIONS)


def test_a_large_result_is_printed_whole(shims: tuple[Path, Path], tmp_path: Path) -> None:
    result = json.dumps({"cniVersion": "1.0.0", "dns": {"search": ["s" * 60] * 4000}}).encode()
    rec = _Recorder(tmp_path / "big.sock", b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(result), result))
    try:
        done = run(shims[0], conf(rec.path), ENV)
    finally:
        rec.close()
    assert done.returncode == 0 and done.stdout == result


def test_without_a_compiler_the_python_shim_is_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no cc to be found
    installed = command.install_shim(tmp_path / "bin", PYTHON, compiled=True)
    assert installed.read_text().splitlines()[0] == f"#!{PYTHON} -IS"
