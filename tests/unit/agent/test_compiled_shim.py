"""The compiled shim (`bridge/agent/shim/shim.c`, `install_shim(shim="compiled")`): what it forwards is
byte for byte what the Python shim forwards, what it prints of the agent's answer is the same, and
everything else (VERSION, a variable with a newline, no agent, an unusual configuration) is the
Python shim's own answer. One table of inputs (`tests/unit/shim_table_support.py`) and random
answers of a broken agent run through both, which must answer alike; an agent that accepts no
connection gets both to answer 102 within their connect bound. Built with this machine's `cc`;
a real unix-socket peer records requests. Which shim `--install` picks: test_default_shim.py."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.agent.daemon import command
from bridge.agent.shim import shim
from tests.unit import shim_table_support as table
from tests.unit.agent.test_shim_process import PYTHON, _Recorder

OK = b'HTTP/1.1 200 OK\r\nContent-Length: 24\r\nConnection: close\r\n\r\n{"cniVersion": "1.0.0"}\n'


@pytest.fixture
def shims(tmp_path: Path) -> tuple[Path, Path]:
    """(compiled, python) shims, installed as `--install` does."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the compiled shim cannot be built (the Python one is used)")
    compiled = command.install_shim(tmp_path / "cbin", PYTHON, shim="compiled")
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


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(compiled shim, Python shim, launcher), built once for the table and the fuzzing."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the compiled shim cannot be built (the Python one is used)")
    root = tmp_path_factory.mktemp("shims")
    compiled = command.install_shim(root / "cbin", PYTHON, shim="compiled")
    assert compiled.read_bytes()[:4] == b"\x7fELF", "built, not the fallback"
    return compiled, command.install_shim(root / "pbin", PYTHON), table.build_launcher(root)


@pytest.mark.parametrize("case", table.TABLE, ids=[case.name for case in table.TABLE])
def test_both_shims_answer_every_row_of_the_table_alike(
    built: tuple[Path, Path, Path], tmp_path: Path, case: table.Case
) -> None:
    compiled_exe, python_exe, launcher = built
    compiled = table.run(compiled_exe, case, tmp_path, launcher)
    python = table.run(python_exe, case, tmp_path, launcher)
    assert compiled == python
    assert python.code() == case.code, python.stdout[:500]
    assert case.words.encode() in python.stdout, python.stdout[:500]
    assert bool(python.requests) == case.reaches_agent
    if python.returncode:
        assert python.stdout.isascii() or case.code < 100, "the shims' own errors are ASCII JSON"
        json.loads(python.stdout)


_status = st.one_of(
    st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 500 Oops", b"HTTP/1.0 404", b"HTTP/1.1 2000 OK",
                     b"HTTP/1.1 20 OK", b"HTTP/1.1  200 OK", b"http/1.1 200 OK", b"HTTP/1.1 400 Bad"]),
    st.binary(max_size=20),
)
_answers = st.builds(
    lambda status, headers, sep, body: status + b"".join(b"\r\n" + h for h in headers) + sep + body,
    _status,
    st.lists(st.one_of(st.sampled_from([b"Content-Length: 3", b"Transfer-Encoding: chunked", b"X: \xff"]),
                       st.binary(max_size=20)), max_size=3),
    st.sampled_from([b"\r\n\r\n", b"\n\n", b"\r\n", b""]),
    st.one_of(st.binary(max_size=300), st.sampled_from([b" {\"code\": 7}\x0b", b"\xc3", b"{"])),
)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("fuzz")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=_answers, version=st.one_of(st.just(b"1.0.0"), st.binary(max_size=8).filter(
    lambda b: b'"' not in b and b"\\" not in b)))
def test_whatever_a_broken_agent_answers_both_shims_print_the_same(
    built: tuple[Path, Path, Path], fuzz_dir: Path, answer: bytes, version: bytes
) -> None:
    case = table.Case("fuzzed", answer, stdin=table.conf().replace(b'"1.0.0"', b'"' + version + b'"'))
    compiled_exe, python_exe, launcher = built
    compiled = table.run(compiled_exe, case, fuzz_dir, launcher)
    python = table.run(python_exe, case, fuzz_dir, launcher)
    assert compiled == python


def test_an_agent_that_accepts_no_connection_gets_102_from_both_shims_within_their_connect_bound(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    path = tmp_path / "stuck.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)  # never accepted: the queue fills, as a stuck agent's does
    queued: list[socket.socket] = []
    try:
        while True:
            waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            waiting.setblocking(False)
            try:
                waiting.connect(str(path))
            except BlockingIOError:
                waiting.close()
                break
            queued.append(waiting)
        stdin = table.conf().replace(table.SOCK, bytes(path))
        env = {b"CNI_COMMAND": b"ADD", b"CNI_CONTAINERID": b"c1", b"CNI_IFNAME": b"eth0"}
        runs = [subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
                for exe in built[:2]]  # both at once: each waits its bound
        outputs = []
        for process in runs:
            try:
                out, _ = process.communicate(stdin, timeout=120)  # a safety net, not a measure
            except subprocess.TimeoutExpired:
                for other in runs:
                    other.kill()
                    other.communicate()
                raise
            outputs.append((process.returncode, out))
    finally:
        for waiting in queued:
            waiting.close()
        listener.close()
    assert outputs[0] == outputs[1]
    error = json.loads(outputs[0][1])
    assert (outputs[0][0], error["code"], error["msg"]) == (1, 102, "the multinetwork agent is not reachable")
    assert error["details"] == (f"{path}: the agent did not accept the connection within "
                                f"{shim.CONNECT_TIMEOUT_SECONDS} s (its queue of connections is full: it is stuck "
                                "or overloaded)")
