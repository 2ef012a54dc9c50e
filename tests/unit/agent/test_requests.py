"""The agent's cache, its interface naming and default routes, its request parsing,
its object source and its command: everything but real plugins."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import stat
from pathlib import Path

import pytest

from bridge.cni import agent, cache, command, objects, plan
from bridge.cni.invoke import CNIError, ErrorCode
from podnetwork import cli, constants

# --- cache ---------------------------------------------------------------------------------


def record(container_id: str = "abc") -> cache.Record:
    return cache.Record(
        container_id=container_id,
        netns="/var/run/netns/x",
        ifname="eth0",
        cni_args=[["K8S_POD_NAME", "p"]],
        pod_namespace="ns",
        pod_name="p",
        attachments=[
            cache.Attachment("kubenet", "eth0", {"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"},
                             default=True, state=cache.State.ATTACHED, result={"ips": []}),
            cache.Attachment("ns/blue", "net1", {"cniVersion": "1.0.0", "name": "blue", "type": "macvlan"},
                             default_route=["10.0.0.1"]),
        ],
    )


def test_a_cache_record_survives_a_round_trip_through_disk(tmp_path: Path) -> None:
    c = cache.Cache(tmp_path / "cache")
    c.save(record())
    assert c.load("abc") == record()
    assert list(c.container_ids()) == ["abc"]
    assert stat.S_IMODE(os.stat(c.path("abc")).st_mode) == 0o600
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["abc.jsonl"]


def test_removing_a_record_twice_is_fine_and_a_missing_one_loads_as_none(tmp_path: Path) -> None:
    c = cache.Cache(tmp_path)
    c.save(record())
    c.remove("abc")
    c.remove("abc")
    assert c.load("abc") is None


@pytest.mark.parametrize("bad", ["../x", "a/b", ".hidden", "", "x" * 2000])
def test_a_container_id_that_is_not_a_safe_file_name_never_reaches_the_disk(tmp_path: Path, bad: str) -> None:
    with pytest.raises(CNIError) as caught:
        cache.Cache(tmp_path).path(bad)
    assert caught.value.code == ErrorCode.INVALID_ENVIRONMENT


def test_the_last_complete_line_of_the_journal_is_the_record(tmp_path: Path) -> None:
    c = cache.Cache(tmp_path, durable=True)
    first = record()
    c.save(first)
    second = record()
    second.complete = True
    c.save(second)
    assert c.load("abc") == second
    with c.path("abc").open("ab") as f:
        f.write(b'{"container_id": "abc", "netns')  # torn by a power loss
    assert c.load("abc") == second


def test_a_journal_without_a_readable_line_is_reported_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "abc.jsonl").write_text('{"container_id": ')
    with pytest.raises(cache.CacheError, match=r"abc\.jsonl"):
        cache.Cache(tmp_path).load("abc")


# --- interface names and default routes (NPWG 4.2.1, 4.1.2.1.5, 4.1.2.1.9) -----------------------


def test_unnamed_attachments_get_net1_net2_skipping_names_the_pod_asked_for() -> None:
    assert plan.interface_names("eth0", [None, "net2", None, None]) == ["net1", "net2", "net3", "net4"]
    assert plan.interface_names("eth0", ["net1", None]) == ["net1", "net2"]
    assert plan.interface_names("net1", [None]) == ["net2"]


@pytest.mark.parametrize("requested", [["eth0"], ["data", "data"]])
def test_an_interface_name_used_twice_fails_the_add(requested: list[str | None]) -> None:
    with pytest.raises(CNIError) as caught:
        plan.interface_names("eth0", requested)
    assert "4.1.2.1.5" in caught.value.details


@pytest.mark.parametrize("bad", ["a/b", "x" * 16, "has space", ".."])
def test_an_invalid_interface_name_fails_the_add(bad: str) -> None:
    with pytest.raises(CNIError):
        plan.interface_names("eth0", [bad])


def test_default_route_commands_replace_each_family_with_the_given_gateways_in_order() -> None:
    assert plan.default_route_commands("net1", ["10.0.0.1", "fd00::1", "10.0.0.254"]) == [
        ["ip", "-4", "route", "flush", "exact", "0.0.0.0/0"],
        ["ip", "-4", "route", "add", "default", "via", "10.0.0.1", "dev", "net1"],
        ["ip", "-4", "route", "add", "default", "via", "10.0.0.254", "dev", "net1", "metric", "1"],
        ["ip", "-6", "route", "flush", "exact", "::/0"],
        ["ip", "-6", "route", "add", "default", "via", "fd00::1", "dev", "net1"],
    ]
    with pytest.raises(CNIError):
        plan.default_route_commands("net1", ["gateway"])


def test_gateways_come_from_the_results_ips_else_its_default_routes() -> None:
    assert plan.result_gateways({"ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1"}]}) == ["10.1.0.1"]
    assert plan.result_gateways({"ips": [{"address": "10.1.0.2/24"}], "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.9"}]}) == ["10.1.0.9"]
    assert plan.result_gateways(None) == []


# --- requests ------------------------------------------------------------------------------


ADD_ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "c1",
    "CNI_NETNS": "/var/run/netns/x",
    "CNI_IFNAME": "eth0",
    "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p",
}


def test_a_valid_add_names_the_pod_and_delegates_ignore_unknown_args() -> None:
    req = agent.parse_request(ADD_ENV, b'{"cniVersion": "0.4.0", "runtimeConfig": {"portMappings": []}}')
    assert (req.pod_namespace, req.pod_name, req.cni_version) == ("ns", "p", "0.4.0")
    assert req.args.args[0] == ("IgnoreUnknown", "1")
    assert req.runtime_config == {"portMappings": []}


@pytest.mark.parametrize(
    ("change", "stdin", "code"),
    [
        ({"CNI_COMMAND": "NOPE"}, b"{}", 4),
        ({"CNI_CONTAINERID": ""}, b"{}", 4),
        ({"CNI_IFNAME": "bad/name"}, b"{}", 4),
        ({"CNI_NETNS": ""}, b"{}", 4),
        ({"CNI_ARGS": "K8S_POD_NAME=p"}, b"{}", 4),
        ({}, b"[1]", 6),
        ({}, b"{", 6),
        ({}, b'{"cniVersion": "0.2.0"}', 1),
        ({}, b'{"runtimeConfig": 3}', 7),
    ],
)
def test_a_malformed_request_is_a_cni_error_with_the_spec_code(change: dict[str, str], stdin: bytes, code: int) -> None:
    with pytest.raises(CNIError) as caught:
        agent.parse_request({**ADD_ENV, **change}, stdin)
    assert caught.value.code == code and caught.value.msg


def test_del_needs_no_pod_and_no_netns() -> None:
    req = agent.parse_request({"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0"}, b"{}")
    assert req.pod_name is None and req.args.netns == ""


# --- readiness (NPWG 6.1) ------------------------------------------------------------------------


async def test_the_agent_writes_its_conflist_only_once_the_default_network_is_usable(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    default_file = tmp_path / "default.conflist"
    conf_file = tmp_path / "net.d" / "00-multinetwork.conflist"
    a = agent.Agent(
        objects.MemoryObjects(),
        agent.AgentConfig(
            socket_path=tmp_path / "a.sock",
            cache_dir=tmp_path / "cache",
            bin_dirs=(bin_dir,),
            default_network=default_file,
            conf_file=conf_file,
            readiness_interval=0.05,
        ),
    )
    async with a:
        await asyncio.sleep(0.2)
        assert not conf_file.exists(), "no default network configuration yet"
        default_file.write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "kubenet",
            "plugins": [{"type": "bridge", "capabilities": {"portMappings": True}}],
        }))
        await asyncio.sleep(0.2)
        assert not conf_file.exists(), "the bridge plugin is not installed yet"
        (bin_dir / "bridge").write_text("#!/bin/sh\n")
        (bin_dir / "bridge").chmod(0o755)
        await asyncio.wait_for(a.conf_written.wait(), 5)
        assert json.loads(conf_file.read_text()) == {
            "cniVersion": "0.4.0",
            "name": "multinetwork",
            "plugins": [{"type": "multinetwork", "socketPath": str(tmp_path / "a.sock"),
                         "capabilities": {"portMappings": True}}],
        }
        assert stat.S_IMODE(os.stat(tmp_path / "a.sock").st_mode) == 0o600
    assert not conf_file.exists(), "a stopped agent takes its conflist away"
    assert not (tmp_path / "a.sock").exists()


async def test_without_a_default_network_conf_or_podnetwork_the_agent_says_what_to_create(tmp_path: Path) -> None:
    a = agent.Agent(objects.MemoryObjects(), agent.AgentConfig(cache_dir=tmp_path))
    problem = await a.default_network_problem()
    assert problem and "--default-network-conf" in problem and "PodNetwork 'default'" in problem


# --- objects -------------------------------------------------------------------------------


async def test_memory_objects_merge_patch_annotations_and_report_missing_objects() -> None:
    objs = objects.MemoryObjects([{"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "annotations": {"a": "1", "b": "2"}}}])
    await objs.patch_pod_annotations("ns", "p", {"a": None, "c": "3"})
    assert (await objs.get_pod("ns", "p"))["metadata"]["annotations"] == {"b": "2", "c": "3"}
    with pytest.raises(objects.NotFound, match="Pod ns/q not found"):
        await objs.patch_pod_annotations("ns", "q", {"a": "1"})
    with pytest.raises(objects.NotFound):
        await objs.get_podnetwork("default")


def test_the_agents_copies_of_api_names_match_the_kep_layer() -> None:
    assert objects.KEP_GROUP == constants.GROUP and objects.KEP_VERSION == constants.VERSION
    assert objects.KEP_NETWORKS_ANNOTATION == constants.NETWORKS_ANNOTATION
    assert objects.BRIDGE_PROVIDER == constants.BRIDGE_PROVIDER
    assert agent.DEFAULT_PODNETWORK == constants.DEFAULT_PODNETWORK


# --- command -------------------------------------------------------------------------------


def test_cni_agent_is_a_podnetwork_subcommand_with_its_options() -> None:
    parser = cli.build_parser({"cni-agent": command.command})
    args = parser.parse_args(["cni-agent", "--cni-bin-dir", "/x:/y", "--plugin-timeout", "5", "--install"])
    assert args.cni_bin_dir == (Path("/x"), Path("/y")) and args.plugin_timeout == 5 and args.install
    with pytest.raises(SystemExit):
        parser.parse_args(["cni-agent", "--plugin-timeout", "-1"])


def test_the_installed_shim_starts_with_the_nodes_python_isolated(tmp_path: Path) -> None:
    shim = command.install_shim(tmp_path, "/usr/bin/python3")
    assert shim == tmp_path / "multinetwork"
    assert shim.read_text().splitlines()[0] == "#!/usr/bin/python3 -IS"
    assert os.access(shim, os.X_OK)
    with pytest.raises(ValueError, match="absolute"):
        command.install_shim(tmp_path, "python3")


def test_a_missing_default_network_file_is_an_error_that_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    command.configure(parser)
    args = parser.parse_args(["--default-network-conf", str(tmp_path / "nope"), "--objects", str(tmp_path / "o.yaml")])
    assert command.run(args) == 2
    assert "nope: no such file" in capsys.readouterr().err


async def test_a_second_agent_on_the_same_socket_is_refused_and_the_first_keeps_serving(tmp_path: Path) -> None:
    config = agent.AgentConfig(socket_path=tmp_path / "a.sock", cache_dir=tmp_path / "cache")
    async with agent.Agent(objects.MemoryObjects(), config):
        second = agent.Agent(objects.MemoryObjects(), config)
        with pytest.raises(OSError, match="already listening"):
            await second.start()
        await second.stop()
        assert (tmp_path / "a.sock").is_socket()


def test_an_unreadable_objects_file_is_an_error_that_says_which_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    command.configure(parser)
    (tmp_path / "o.yaml").write_text("kind: Pod\nmetadata: {}\n")
    assert command.run(parser.parse_args(["--objects", str(tmp_path / "o.yaml"), "--cache-dir", str(tmp_path)])) == 1
    assert "object 0: an object needs a kind and metadata.name" in capsys.readouterr().err
    (tmp_path / "o.yaml").write_text("a: [\n")
    assert command.run(parser.parse_args(["--objects", str(tmp_path / "o.yaml"), "--cache-dir", str(tmp_path)])) == 1
    assert "not YAML/JSON" in capsys.readouterr().err
