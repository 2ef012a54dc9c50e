"""The CNI exec layer and config lists: pure pieces, and chains run against a recording Exec."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.agent.delegates import cache, conflist, invoke
from bridge.agent.delegates.invoke import CNIError, Command, ErrorCode, RuntimeArgs
from bridge.agent.delegates.records import Records
from bridge.agent.delegates.runner import Runner


def runner(executor: invoke.Exec, bins: list[Path]) -> Runner:
    """A runner of config lists over `executor`, with a 5 s timeout (its records stay unwritten)."""
    return Runner(executor, bins, 5, Records(cache.Cache(Path("/nonexistent/multinetwork-cache"))))


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# --- arguments -> environment --------------------------------------------------------------


def test_environment_carries_the_cni_variables_and_only_path_from_the_caller() -> None:
    args = RuntimeArgs(Command.ADD, "c1", "/var/run/netns/x", "net1", (("IgnoreUnknown", "1"), ("K8S_POD_NAME", "p")))
    env = invoke.environment(args, [Path("/a"), Path("/b")], base={"PATH": "/usr/bin", "SECRET": "no"})
    assert env == {
        "PATH": "/usr/bin",
        "CNI_COMMAND": "ADD",
        "CNI_PATH": f"/a{os.pathsep}/b",
        "CNI_CONTAINERID": "c1",
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": "net1",
        "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=p",
    }


def test_environment_of_a_del_without_netns_leaves_cni_netns_unset() -> None:
    env = invoke.environment(RuntimeArgs(Command.DEL, "c1", "", "eth0"), [Path("/a")], base={})
    assert "CNI_NETNS" not in env and env["CNI_COMMAND"] == "DEL"


def test_cni_args_without_an_equals_sign_are_an_invalid_environment() -> None:
    with pytest.raises(CNIError) as caught:
        invoke.parse_cni_args("K8S_POD_NAME=p;garbage")
    assert caught.value.code == ErrorCode.INVALID_ENVIRONMENT and "garbage" in caught.value.details


_arg_text = st.text(st.characters(blacklist_characters=";=\x00", blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=60)
@given(st.lists(st.tuples(_arg_text, st.text(st.characters(blacklist_characters=";\x00", blacklist_categories=("Cs",)), max_size=12)), max_size=5))
def test_cni_args_round_trip_through_their_text_form(pairs: list[tuple[str, str]]) -> None:
    assert invoke.parse_cni_args(invoke.format_cni_args(pairs)) == tuple(pairs)


# --- plugin lookup -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["../../bin/sh", "/bin/sh", "bridge/..", "..", ".", "a..b", "", "br idge", "-x", 7, None])
def test_a_plugin_type_that_is_not_a_bare_file_name_is_refused(tmp_path: Path, bad: Any) -> None:
    executable(tmp_path / "sh")
    with pytest.raises(CNIError) as caught:
        invoke.find_plugin(bad, [tmp_path])
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert "bare file name" in caught.value.details


@settings(max_examples=80)
@given(st.text(max_size=20))
def test_no_accepted_plugin_type_can_leave_the_bin_dir(plugin_type: str) -> None:
    try:
        name = invoke.check_plugin_type(plugin_type)
    except CNIError:
        return
    assert "/" not in name and ".." not in name and "\x00" not in name and not name.startswith(("-", "."))


def test_plugins_are_found_only_in_the_bin_dirs_first_dir_first(tmp_path: Path) -> None:
    first = executable(tmp_path / "one" / "bridge")
    executable(tmp_path / "two" / "bridge")
    executable(tmp_path / "two" / "macvlan")
    (tmp_path / "one" / "notexec").write_text("")
    dirs = [tmp_path / "one", tmp_path / "two"]
    assert invoke.find_plugin("bridge", dirs) == first
    assert invoke.find_plugin("macvlan", dirs) == tmp_path / "two" / "macvlan"
    with pytest.raises(CNIError) as caught:
        invoke.find_plugin("notexec", dirs)
    assert "failed to find plugin 'notexec'" in caught.value.msg and str(tmp_path / "two") in caught.value.details
    with pytest.raises(CNIError):
        invoke.find_plugin("sh", dirs)  # exists on PATH, not in the bin dirs


# --- decoding ------------------------------------------------------------------------------


def test_a_plugins_cni_error_is_passed_on_with_its_code_and_the_plugins_name() -> None:
    err = invoke.decode_failure("bridge", 1, b'{"cniVersion":"1.0.0","code":11,"msg":"busy","details":"retry"}', b"")
    assert (err.code, err.msg, err.details) == (11, "plugin bridge: busy", "retry")
    assert err.to_json("0.4.0") == {"cniVersion": "0.4.0", "code": 11, "msg": "plugin bridge: busy", "details": "retry"}


def test_a_failure_without_a_cni_error_says_what_the_plugin_printed() -> None:
    err = invoke.decode_failure("bridge", 2, b"", b"panic: oops\n")
    assert err.code == ErrorCode.PLUGIN_FAILED and "exit code 2" in err.msg and err.details == "panic: oops"


@pytest.mark.parametrize("stdout", [b"not json", b"[1,2]"])
def test_success_output_that_is_not_a_json_object_is_a_decoding_failure(stdout: bytes) -> None:
    with pytest.raises(CNIError) as caught:
        invoke.decode(stdout, expect_result=True)
    assert caught.value.code == ErrorCode.DECODING_FAILURE


def test_del_may_print_nothing_but_add_must_print_a_result() -> None:
    assert invoke.decode(b"\n", expect_result=False) is None
    with pytest.raises(CNIError):
        invoke.decode(b"", expect_result=True)


async def test_a_plugin_that_does_not_answer_in_time_is_killed_with_error_100(tmp_path: Path) -> None:
    slow = executable(tmp_path / "slow", "#!/bin/sh\nexec sleep 30\n")
    with pytest.raises(CNIError) as caught:
        await invoke.SubprocessExec().run(slow, {"PATH": "/usr/bin:/bin"}, b"{}", 0.3)
    assert caught.value.code == ErrorCode.PLUGIN_TIMEOUT and "slow" in caught.value.msg


async def test_a_plugin_gets_its_config_on_stdin_and_only_the_cni_environment(tmp_path: Path) -> None:
    echo = executable(tmp_path / "echo", '#!/bin/sh\nread conf\nprintf \'{"conf": %s, "cmd": "%s", "home": "%s"}\' "$conf" "$CNI_COMMAND" "$HOME"\n')
    result = await invoke.call(
        invoke.SubprocessExec(), "echo", {"name": "n", "x": 1}, RuntimeArgs(Command.ADD, "c", "/ns", "eth0"), [tmp_path], 5
    )
    assert result == {"conf": {"name": "n", "x": 1}, "cmd": "ADD", "home": ""}
    assert echo.exists()


def _plugin(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "plugin"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


async def test_a_timed_out_plugin_is_killed_with_its_children_within_the_timeout(tmp_path: Path) -> None:
    # A delegate such as `bridge` runs its IPAM plugin as a child; when that child hangs,
    # the per-call timeout must still bound the call and leave no process behind. The
    # child marks its own end: had the call waited for it instead of killing it, the
    # mark would be there (no clock is read).
    pidfile, finished = tmp_path / "child.pid", tmp_path / "child.finished"
    plugin = _plugin(tmp_path, f"(sleep 20; touch {finished}) &\necho $! > {pidfile}\nwait\n")
    with pytest.raises(invoke.CNIError) as caught:
        await invoke.SubprocessExec().run(plugin, {"PATH": os.environ["PATH"]}, b"{}", 0.5)
    assert caught.value.code == invoke.ErrorCode.PLUGIN_TIMEOUT
    child = int(pidfile.read_text())
    try:
        assert not finished.exists(), "the call waited for the hanging child instead of killing it"
        await asyncio.sleep(0.1)
        assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, 9)


async def test_a_plugin_the_kernel_cannot_execute_is_a_cni_error_not_an_oserror(tmp_path: Path) -> None:
    # No "#!" line: execve() fails with ENOEXEC. As a CNIError, DEL goes on with the
    # next attachment (NPWG 7.2) instead of stopping at a Python exception.
    plugin = tmp_path / "bridge"
    plugin.write_text("echo not a real plugin\n")
    plugin.chmod(0o755)
    args = invoke.RuntimeArgs(invoke.Command.DEL, "c1", "", "eth0")
    with pytest.raises(invoke.CNIError) as caught:
        await invoke.call(invoke.SubprocessExec(), "bridge", {"cniVersion": "1.0.0", "name": "n", "type": "bridge"},
                          args, [tmp_path], 5.0)
    assert "bridge" in str(caught.value)


# --- config lists --------------------------------------------------------------------------


@dataclass
class Recorder:
    """An Exec that records each call and answers ADD with a result naming the plugin."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    fail: str | None = None

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        conf = json.loads(stdin)
        self.calls.append((plugin.name, env["CNI_COMMAND"], conf))
        if plugin.name == self.fail:
            return 1, b'{"code": 7, "msg": "bad"}', b""
        if env["CNI_COMMAND"] == "ADD":
            return 0, json.dumps({"cniVersion": conf["cniVersion"], "by": plugin.name}).encode(), b""
        return 0, b"", b""


@pytest.fixture
def bins(tmp_path: Path) -> list[Path]:
    for name in ("bridge", "tuning", "portmap"):
        executable(tmp_path / name)
    return [tmp_path]


CHAIN = {
    "cniVersion": "1.0.0",
    "name": "chain",
    "plugins": [
        {"type": "bridge", "name": "ignored", "cniVersion": "0.1.0", "capabilities": {"mac": True}},
        {"type": "tuning"},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}


def test_a_single_config_is_a_list_of_one_keeping_its_runtime_config() -> None:
    cl = conflist.load({"cniVersion": "0.4.0", "name": "n", "type": "bridge", "runtimeConfig": {"mac": "x"}})
    assert cl.name == "n" and cl.cni_version == "0.4.0" and len(cl.plugins) == 1
    assert cl.plugins[0]["runtimeConfig"] == {"mac": "x"}


@pytest.mark.parametrize(
    ("conf", "needle"),
    [
        ([], "JSON object"),
        ({"cniVersion": "1.0.0", "type": "bridge"}, '"name"'),
        ({"name": "n", "type": "bridge"}, '"cniVersion"'),
        ({"cniVersion": "1.0.0", "name": "n", "plugins": []}, '"plugins"'),
        ({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "../x"}]}, "plugins[0].type"),
        ({"cniVersion": "1.0.0", "name": "n", "type": "a/b"}, "type"),
    ],
)
def test_an_invalid_configuration_is_refused_before_anything_runs(conf: Any, needle: str) -> None:
    with pytest.raises(CNIError) as caught:
        conflist.load(conf)
    assert caught.value.code == ErrorCode.INVALID_CONFIG and needle in caught.value.details


def test_a_cni_version_newer_than_ours_is_incompatible() -> None:
    with pytest.raises(CNIError) as caught:
        conflist.load({"cniVersion": "2.0.0", "name": "n", "type": "bridge"})
    assert caught.value.code == ErrorCode.INCOMPATIBLE_VERSION


async def test_add_injects_name_and_version_and_chains_prev_result_forward(bins: list[Path]) -> None:
    rec = Recorder()
    cl = conflist.load(CHAIN)
    result = await runner(rec, bins).add_list(
        cl, RuntimeArgs(Command.ADD, "c", "/ns", "eth0"),
        runtime_config={"portMappings": [{"hostPort": 80}], "mac": "02:00:00:00:00:01", "bandwidth": {}},
    )
    assert [(p, c) for p, c, _ in rec.calls] == [("bridge", "ADD"), ("tuning", "ADD"), ("portmap", "ADD")]
    confs = [conf for _, _, conf in rec.calls]
    assert all(c["name"] == "chain" and c["cniVersion"] == "1.0.0" for c in confs)
    assert "prevResult" not in confs[0]
    assert confs[1]["prevResult"]["by"] == "bridge" and confs[2]["prevResult"]["by"] == "tuning"
    # runtimeConfig only for the capabilities each plugin declares
    assert confs[0]["runtimeConfig"] == {"mac": "02:00:00:00:00:01"}
    assert "runtimeConfig" not in confs[1]
    assert confs[2]["runtimeConfig"] == {"portMappings": [{"hostPort": 80}]}
    assert result == {"cniVersion": "1.0.0", "by": "portmap"}


async def test_add_stops_at_the_first_failing_plugin(bins: list[Path]) -> None:
    rec = Recorder(fail="tuning")
    with pytest.raises(CNIError) as caught:
        await runner(rec, bins).add_list(conflist.load(CHAIN), RuntimeArgs(Command.ADD, "c", "/ns", "eth0"))
    assert caught.value.msg == "plugin tuning: bad"
    assert [p for p, _, _ in rec.calls] == ["bridge", "tuning"]


async def test_a_missing_plugin_fails_the_add_before_any_plugin_runs(tmp_path: Path) -> None:
    executable(tmp_path / "bridge")
    rec = Recorder()
    with pytest.raises(CNIError):
        await runner(rec, [tmp_path]).add_list(conflist.load(CHAIN), RuntimeArgs(Command.ADD, "c", "/ns", "eth0"))
    assert rec.calls == []


async def test_del_runs_in_reverse_with_the_cached_result(bins: list[Path]) -> None:
    rec = Recorder()
    cached = {"cniVersion": "1.0.0", "by": "portmap"}
    await runner(rec, bins).delete_list(conflist.load(CHAIN), RuntimeArgs(Command.ADD, "c", "", "eth0"), cached)
    assert [(p, c) for p, c, _ in rec.calls] == [("portmap", "DEL"), ("tuning", "DEL"), ("bridge", "DEL")]
    assert all(conf["prevResult"] == cached for _, _, conf in rec.calls)


async def test_del_of_a_pre_0_4_0_list_gets_no_prev_result(bins: list[Path]) -> None:
    rec = Recorder()
    old = {**CHAIN, "cniVersion": "0.3.1"}
    await runner(rec, bins).delete_list(conflist.load(old), RuntimeArgs(Command.DEL, "c", "", "eth0"), {"x": 1})
    assert all("prevResult" not in conf for _, _, conf in rec.calls)


async def test_check_runs_in_order_from_0_4_0_and_not_when_disabled(bins: list[Path]) -> None:
    rec = Recorder()
    args = RuntimeArgs(Command.CHECK, "c", "/ns", "eth0")
    checking = runner(rec, bins)
    assert await checking.check_list(conflist.load(CHAIN), args, {"r": 1}) is True
    assert [(p, c) for p, c, _ in rec.calls] == [("bridge", "CHECK"), ("tuning", "CHECK"), ("portmap", "CHECK")]
    rec.calls.clear()
    assert await checking.check_list(conflist.load({**CHAIN, "disableCheck": True}), args, None) is False
    assert rec.calls == []
    with pytest.raises(CNIError) as caught:
        await checking.check_list(conflist.load({**CHAIN, "cniVersion": "0.3.1"}), args, None)
    assert caught.value.code == ErrorCode.INCOMPATIBLE_VERSION and rec.calls == []
