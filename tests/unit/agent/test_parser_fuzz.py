"""Fuzzing what the agent and the shim parse: every input is a CNIError or a value, nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.agent.cni.request import parse_request
from bridge.agent.daemon import server
from bridge.agent.delegates.invoke import CNIError
from bridge.agent.node import install
from bridge.agent.shim import shim


@settings(max_examples=150)
@given(st.text())
def test_the_shims_json_strings_are_read_back_exactly_by_a_real_json_parser(text: str) -> None:
    assert json.loads(shim.json_string(text)) == text


@settings(max_examples=150)
@given(
    st.dictionaries(st.sampled_from(["name", "type", "cniVersion", "other"]), st.text(max_size=20), max_size=4),
    st.text(max_size=30),
    st.sampled_from([None, 0, 2]),
)
def test_the_shims_field_scanner_finds_the_value_a_json_parser_finds_or_gives_up(
    extra: dict[str, str], value: str, indent: int | None
) -> None:
    data = json.dumps({**extra, "socketPath": value}, indent=indent).encode()
    found = shim.string_field(data, "socketPath")
    assert found is None or found == value
    if '"' not in value and "\\" not in value and value.isprintable() and value.isascii():
        assert found == value


def test_the_shim_answers_version_itself_and_says_when_the_agent_is_away(tmp_path: Path) -> None:
    installed = install.install_shim(tmp_path, sys.executable)

    def run(command: str, stdin: bytes) -> tuple[int, dict]:
        proc = subprocess.run(
            [sys.executable, "-IS", str(installed)], input=stdin, capture_output=True,
            env={"CNI_COMMAND": command, "CNI_CONTAINERID": "c"}, check=False,
        )
        return proc.returncode, json.loads(proc.stdout)

    assert run("VERSION", b'{"cniVersion": "0.4.0"}') == (0, {"cniVersion": "0.4.0", "supportedVersions": list(shim.SUPPORTED_VERSIONS)})
    code, error = run("ADD", b'{"cniVersion": "1.0.0", "socketPath": "/nonexistent/agent.sock"}')
    assert code == 1 and error["code"] == 102 and "/nonexistent/agent.sock" in error["details"]
    code, error = run("ADD", b'{"cniVersion": 1, oops')
    assert code == 1 and error["code"] == 6


@settings(max_examples=150)
@given(st.binary(max_size=200))
def test_any_request_body_is_a_cni_request_or_a_decoding_error(body: bytes) -> None:
    try:
        env, stdin = server.parse_body(body)
    except CNIError as exc:
        assert exc.code == 6
        return
    assert all(k.startswith("CNI_") for k in env) and body.endswith(stdin)


_env_values = st.one_of(st.text(max_size=20), st.sampled_from(["ADD", "DEL", "CHECK", "VERSION", "/var/run/netns/x", "eth0", "c1"]))


@settings(max_examples=150)
@given(
    st.dictionaries(
        st.sampled_from(["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS"]), _env_values
    ),
    st.one_of(st.binary(max_size=60), st.builds(lambda d: json.dumps(d).encode(), st.dictionaries(st.text(max_size=8), st.text(max_size=8)))),
)
def test_any_environment_and_stdin_parse_to_a_request_or_a_cni_error(env: dict[str, str], stdin: bytes) -> None:
    try:
        request = parse_request(env, stdin)
    except CNIError as exc:
        assert exc.code in (1, 4, 6, 7) and exc.msg
        return
    assert request.args.command.value == env["CNI_COMMAND"]
