"""Hardening: whatever a runtime hands the shim or the agent, the answer is CNI protocol data.

A real agent listens on its unix socket (in a thread of its own); requests reach
it as raw HTTP bodies and through the real shim executable. Hypothesis throws at
them CNI environments and configurations with bytes that are not UTF-8, lone
surrogates, over-long IDs and names, odd commands and malformed JSON. Every answer
must be a CNI result or a CNI error JSON (an int `code`, a `msg`), never a
traceback and never the catch-all "internal agent error" / "internal shim error".

The agent's delegates are a stand-in that answers like a plugin: fuzzed network
namespaces must never reach a real plugin.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.agent.cni.request import parse_request
from bridge.agent.daemon import agent, command, server
from bridge.agent.daemon.running import Running
from bridge.agent.delegates.invoke import CNIError
from bridge.agent.kube import objects
from bridge.agent.shim import shim

VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
INTERNAL = {"internal agent error", "internal shim error"}


class AnswersLikeAPlugin:
    """ADD gets a result with one interface and address; every other command succeeds."""

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        conf = json.loads(stdin)
        if env.get("CNI_COMMAND") != "ADD":
            return 0, b"", b""
        result = {"cniVersion": conf["cniVersion"], "interfaces": [{"name": env["CNI_IFNAME"], "sandbox": env["CNI_NETNS"]}],
                  "ips": [{"address": "10.9.0.2/24", "interface": 0}]}
        return 0, json.dumps(result).encode(), b""


class ServedAgent:
    """An agent on its socket, served by an event loop in a thread of its own."""

    def __init__(self, root: Path) -> None:
        bin_dir = root / "bin"
        bin_dir.mkdir()
        (bin_dir / "bridge").write_text("#!/bin/sh\nexit 1\n")  # present for the plan; never run
        (bin_dir / "bridge").chmod(0o755)
        self.shim = command.install_shim(root / "shimbin", sys.executable)
        blue = {"cniVersion": "1.1.0", "name": "blue", "type": "bridge"}
        store = objects.MemoryObjects([
            {"kind": "Pod", "metadata": {"name": "web", "namespace": "default",
                                         "annotations": {"k8s.v1.cni.cncf.io/networks": "blue"}}},
            {"kind": "NetworkAttachmentDefinition", "metadata": {"name": "blue", "namespace": "default"},
             "spec": {"config": json.dumps(blue)}},
        ])
        self.config = agent.AgentConfig(
            socket_path=root / "agent.sock", cache_dir=root / "cache", bin_dirs=(bin_dir,), conf_dir=root / "net.d",
            default_network={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"}, plugin_timeout=5,
        )
        self.agent = agent.Agent(store, self.config, executor=AnswersLikeAPlugin())
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.running = Running(self.agent)
        asyncio.run_coroutine_threadsafe(self.running.start(), self.loop).result(20)

    def post(self, body: bytes) -> tuple[int, bytes]:
        head = f"POST {server.API_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        response = shim.exchange(str(self.config.socket_path), head.encode() + body, 30)
        header, _, payload = response.partition(b"\r\n\r\n")  # the agent sends a Content-Length, never chunks
        return int(header.split()[1]), payload

    def run_shim(self, env: Mapping[bytes, bytes], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([str(self.shim)], input=stdin, env=dict(env), capture_output=True, timeout=60)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.running.stop(), self.loop).result(20)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedAgent]:
    a = ServedAgent(tmp_path_factory.mktemp("fuzz-agent"))
    try:
        yield a
    finally:
        a.close()


def assert_cni_answer(ok: bool, payload: bytes, what: object) -> None:
    """`ok`: the caller saw success (HTTP 200, or shim exit 0)."""
    if ok:
        assert not payload.strip() or isinstance(json.loads(payload), dict), what
        return
    answer = json.loads(payload)
    assert isinstance(answer, dict) and isinstance(answer.get("code"), int), (what, answer)
    assert isinstance(answer.get("msg"), str) and answer["msg"], (what, answer)
    assert answer["msg"] not in INTERNAL, (what, answer)


# --- strategies ----------------------------------------------------------------------------

_line = st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\0" not in b)
_odd_text = st.text(
    st.one_of(
        st.characters(exclude_categories=()),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=()),  # lone surrogates
        st.sampled_from("./\\\"\n\0;="),
    ),
    max_size=30,
)


def _of(*known: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.sampled_from(known), _line)


_ref = st.sampled_from([b"default", b"web", b"..", b".", b"", b"Web", b"a" * 254, b"web\xff", b"%2e%2e", b"a/b"])
_cni_args = st.one_of(
    st.lists(
        st.tuples(st.sampled_from([b"K8S_POD_NAMESPACE", b"K8S_POD_NAME", b"IgnoreUnknown", b"X"]),
                  st.one_of(_ref, _line.filter(lambda b: b";" not in b))),
        max_size=4,
    ).map(lambda pairs: b";".join(k + b"=" + v for k, v in pairs)),
    _line,
)
#: A request the agent would carry out; each example perturbs a few of its variables.
VALID_ENV = {
    b"CNI_COMMAND": b"ADD",
    b"CNI_CONTAINERID": b"ctr1",
    b"CNI_NETNS": b"/var/run/netns/fuzz",
    b"CNI_IFNAME": b"eth0",
    b"CNI_ARGS": b"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web",
    b"CNI_PATH": b"/opt/cni/bin",
}
ODD_VALUES: dict[bytes, st.SearchStrategy[bytes]] = {
    b"CNI_COMMAND": _of(b"ADD", b"DEL", b"CHECK", b"VERSION", b"STATUS", b"GC", b"add", b""),
    b"CNI_CONTAINERID": _of(b"ctr2", b"c" * 249, b"c" * 250, b"c" * 1100, b"..", b"-x", b"ctr\xff", b""),
    b"CNI_NETNS": _of(b"", b"rel/ns", b"/x\xff"),
    b"CNI_IFNAME": _of(b"net1", b"", b"x" * 16, b"a/b", b"\xc3\xa0", b".."),
    b"CNI_ARGS": _cni_args,
    b"CNI_PATH": _line,
    b"CNI_OTHER": _line,
}


@st.composite
def _environments(draw: st.DrawFn) -> dict[bytes, bytes]:
    env = dict(VALID_ENV)
    env[b"CNI_COMMAND"] = draw(st.sampled_from([b"ADD", b"ADD", b"DEL", b"DEL", b"CHECK", b"GC", b"STATUS", b"VERSION"]))
    for name in draw(st.lists(st.sampled_from(sorted(ODD_VALUES)), min_size=1, max_size=2, unique=True)):
        env[name] = draw(ODD_VALUES[name])
    if draw(st.integers(0, 4)) == 0:
        del env[draw(st.sampled_from(sorted(env)))]
    return env


ENVIRONMENTS = _environments()
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _odd_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_odd_text, inner, max_size=3),
    max_leaves=10,
)
_attachments = st.lists(
    st.fixed_dictionaries({"containerID": st.sampled_from(["ctr1", "ctr2", "x"]) | _odd_text,
                           "ifname": st.sampled_from(["eth0", "net1"])}) | _json,
    max_size=3,
)


def _configs(socket_paths: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    conf = st.fixed_dictionaries(
        {"cniVersion": st.one_of(*[st.sampled_from(VERSIONS)] * 4, st.sampled_from(["9.9.9", "", 1]), _odd_text)},
        optional={
            "name": st.sampled_from(["multinetwork"]) | _odd_text,
            "type": st.just("multinetwork"),
            "socketPath": socket_paths,
            "runtimeConfig": st.dictionaries(st.sampled_from(["portMappings", "ips", "mac"]) | _odd_text, _json, max_size=2) | _json,
            "cni.dev/valid-attachments": _attachments,
            "prevResult": _json,
            "args": _json,
        },
    )
    return st.one_of(
        *[conf.map(lambda c: json.dumps(c).encode())] * 4,  # lone surrogates become "\ud800" escapes
        st.binary(max_size=120),
        st.sampled_from([b"", b"[" * 20000, b'{"cniVersion": "1.0.0"', b"\xff\xfe{}", b"null", b"[]"]),
    )


# --- the agent's request handler, over its socket ------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(env=ENVIRONMENTS, stdin=_configs(_odd_text))
def test_the_agent_answers_any_cni_request_with_cni_protocol_data(
    served: ServedAgent, env: dict[bytes, bytes], stdin: bytes
) -> None:
    body = b"".join(k + b"=" + v + b"\n" for k, v in env.items()) + b"\n" + stdin
    status, payload = served.post(body)
    assert_cni_answer(status == 200, payload, (body[:300], status))


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=300) | st.lists(_line, max_size=4).map(lambda lines: b"\n".join(lines) + b"\n\n{}"))
def test_the_agent_answers_any_request_body_with_cni_protocol_data(served: ServedAgent, body: bytes) -> None:
    status, payload = served.post(body)
    assert_cni_answer(status == 200, payload, (body[:300], status))


# --- the shim, executed as the runtime does --------------------------------------------------


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(env=ENVIRONMENTS, data=st.data())
def test_the_shim_answers_any_environment_and_configuration_with_cni_protocol_data(
    served: ServedAgent, env: dict[bytes, bytes], data: st.DataObject
) -> None:
    agent_socket = str(served.config.socket_path)
    stdin = data.draw(_configs(st.one_of(st.just(agent_socket), st.just(agent_socket), _odd_text)))
    full_env = {b"PATH": os.environb.get(b"PATH", b"/usr/bin:/bin"), **{k: v for k, v in env.items()}}
    proc = served.run_shim(full_env, stdin)
    assert proc.stderr == b"", proc.stderr.decode(errors="replace")
    assert proc.returncode in (0, 1)
    assert_cni_answer(proc.returncode == 0, proc.stdout, (env, stdin[:300]))


# --- socketPath values that cannot be a file (item 4) ---------------------------------------


@pytest.mark.parametrize("escaped", [r"\ud800", r"\udcff", r"/run/a\u0000b", r"\udfff/agent.sock"])
def test_a_socket_path_that_cannot_name_a_file_gets_a_cni_error_and_no_traceback(served: ServedAgent, escaped: str) -> None:
    stdin = ('{"cniVersion": "1.0.0", "name": "multinetwork", "type": "multinetwork", "socketPath": "' + escaped + '"}').encode()
    env = {b"PATH": b"/usr/bin:/bin", b"CNI_COMMAND": b"ADD", b"CNI_CONTAINERID": b"ctr-sock", b"CNI_NETNS": b"/var/run/netns/x",
           b"CNI_IFNAME": b"eth0", b"CNI_ARGS": b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web"}
    proc = served.run_shim(env, stdin)
    assert proc.stderr == b""
    assert proc.returncode == 1
    answer = json.loads(proc.stdout)
    assert answer == {
        "cniVersion": "1.0.0",
        "code": 7,
        "msg": "invalid socketPath in the network configuration",
        "details": f"{json.loads(stdin)['socketPath']!r} cannot be a file path; it must name the agent's unix socket",
    }


# --- what an accepted ADD puts into the API's URL path (item 3) -------------------------------

_PATH_SAFE = set("abcdefghijklmnopqrstuvwxyz0123456789-.")


@settings(max_examples=300, deadline=None)
@given(cni_args=_cni_args)
def test_an_accepted_add_names_the_pod_with_segments_no_http_client_can_reinterpret(cni_args: bytes) -> None:
    env = {**{k.decode(): v.decode() for k, v in VALID_ENV.items() if k != b"CNI_ARGS"},
           "CNI_ARGS": cni_args.decode("utf-8", "surrogateescape")}
    try:
        request = parse_request(env, b'{"cniVersion": "1.0.0"}')
    except CNIError as exc:
        assert exc.code == 4, exc
        return
    for segment in (request.pod_namespace, request.pod_name):
        assert segment and set(segment) <= _PATH_SAFE and segment not in (".", ".."), request
        assert segment[0].isalnum() and segment[-1].isalnum(), request
