"""The shim <-> agent protocol is defined once (`bridge/agent/shim/protocol.py`) and every end speaks it:
the Python shim carries its text when installed, the server reads what `frame` writes, the
compiled shim is built with its constants and requires each of them, and the agent's error codes
and versions are its own. Pure, and the installed shim run as a process."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bridge.agent.daemon import server
from bridge.agent.delegates import invoke
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.node import install
from bridge.agent.shim import protocol, shim, shimbuild

AGENT = Path(protocol.__file__).parent


def test_the_protocol_module_imports_nothing_so_the_shim_can_carry_it() -> None:
    tree = ast.parse(Path(protocol.__file__).read_text())
    assert [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)] == []


def test_the_installed_shim_carries_the_protocol_in_place_of_its_import(tmp_path: Path) -> None:
    installed = install.install_shim(tmp_path, sys.executable).read_text()
    assert installed.startswith(f"#!{sys.executable} -IS\n")
    assert "bridge" not in "".join(line for line in installed.splitlines() if line.startswith(("import", "from")))
    assert install.shims_side() in installed
    # What the shim names of the protocol is defined in it, once; what only the agent needs is not.
    for name in ("DEFAULT_SOCKET", "MAX_STDIN_BYTES", "def frame", "def request_head", "def status_of"):
        assert len(re.findall(rf"^{name}\b", installed, re.M)) == 1, name
    assert "def unframe" not in installed and "REASONS" not in installed
    done = subprocess.run([sys.executable, "-IS", str(tmp_path / "multinetwork")], input=b"{}",
                          env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30)
    assert done.returncode == 0 and done.stdout.startswith(b'{"cniVersion": "1.1.0", "supportedVersions"')


def test_a_shim_source_without_the_protocol_markers_makes_no_script(tmp_path: Path) -> None:
    """Else the installed shim would import bridge.agent.shim.protocol on a node that has no such package."""
    source = tmp_path / "shim.py"
    source.write_text(install.SHIM_SOURCE.read_text().replace(install.PROTOCOL_BEGIN, "# moved"))
    with pytest.raises(ValueError, match="lacks the lines"):
        install.shim_script(sys.executable, source)


_name = st.binary(min_size=1, max_size=12).filter(lambda b: b"\n" not in b and b"=" not in b).map(lambda b: b"CNI_" + b)
_value = st.binary(max_size=20).filter(lambda b: b"\n" not in b)


@settings(max_examples=200)
@given(st.dictionaries(_name, _value, max_size=5), st.binary(max_size=200))
@example({}, b"\n{}")  # no variable, and stdin starting with a newline: read as the agent once did not
def test_what_the_shim_frames_the_agent_reads_back_byte_for_byte(variables: dict[bytes, bytes], stdin: bytes) -> None:
    body = protocol.frame(list(variables.items()), stdin)
    env, got = server.parse_body(body)
    assert got == stdin
    assert {k.encode("utf-8", "surrogateescape"): v.encode("utf-8", "surrogateescape") for k, v in env.items()} == variables


def test_a_variable_with_a_newline_cannot_be_framed() -> None:
    assert protocol.framable(b"CNI_IFNAME", b"eth0")
    assert not protocol.framable(b"CNI_IFNAME", b"eth0\nCNI_NETNS=/evil")
    assert not protocol.framable(b"CNI_X\n", b"")


def test_the_request_head_announces_the_bodys_length_on_the_api_path() -> None:
    head = protocol.request_head(42).decode()
    assert head.startswith(f"POST {protocol.API_PATH} HTTP/1.1\r\n")
    assert "Content-Length: 42\r\n" in head and head.endswith("\r\n\r\n")


def test_an_answer_carries_400_for_a_spec_code_and_500_for_ours() -> None:
    assert [protocol.answer_status(code) for code in (1, 7, 99, 100, 105)] == [400, 400, 400, 500, 500]
    assert protocol.status_of(b"HTTP/1.1 200 OK") == 200
    assert protocol.status_of(b"HTTP/1.1 2000 OK") is None


def test_the_compiled_shim_requires_exactly_the_constants_the_install_passes() -> None:
    required = set(re.findall(r"#ifndef (\w+)\n#error", (AGENT / "shim.c").read_text()))
    flags = shimbuild.compile_flags()
    passed = {flag[2:].split("=", 1)[0] for flag in flags}
    assert passed == required == {*shimbuild.COMPILED_CONSTANTS, "SHIM_BUILD"}
    assert f'-DAPI_PATH="{protocol.API_PATH}"' in flags
    assert f"-DAGENT_UNAVAILABLE={protocol.AGENT_UNAVAILABLE}" in flags


def test_the_shim_the_agent_and_the_protocol_share_their_codes_and_versions() -> None:
    assert shim.SUPPORTED_VERSIONS is protocol.SUPPORTED_VERSIONS is invoke.SUPPORTED_VERSIONS
    for name in ("AGENT_UNAVAILABLE", "REQUEST_TOO_LARGE", "INVALID_ENVIRONMENT", "IO_FAILURE", "DECODING_FAILURE",
                 "INVALID_CONFIG", "TRY_AGAIN_LATER", "INCOMPATIBLE_VERSION"):
        assert ErrorCode[name] == getattr(protocol, name), name
    with pytest.raises(CNIError) as caught:
        server.parse_body(b"CNI_COMMAND=ADD")
    assert caught.value.code == protocol.DECODING_FAILURE
