"""`podnetwork cni-agent`: its options, the shim it installs, its start-up errors, and one
agent per socket."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from bridge.agent.daemon import agent, command
from bridge.agent.daemon.running import Running
from bridge.agent.kube import objects
from podnetwork import cli


def test_cni_agent_is_a_podnetwork_subcommand_with_its_options() -> None:
    parser = cli.build_parser({"cni-agent": command.command})
    args = parser.parse_args(["cni-agent", "--cni-bin-dir", "/x:/y", "--plugin-timeout", "5", "--install"])
    assert args.cni_bin_dir == (Path("/x"), Path("/y")) and args.plugin_timeout == 5 and args.install
    with pytest.raises(SystemExit):
        parser.parse_args(["cni-agent", "--plugin-timeout", "-1"])


def test_the_address_watch_is_on_unless_turned_off() -> None:
    parser = cli.build_parser({"cni-agent": command.command})
    assert parser.parse_args(["cni-agent"]).watch_addresses is True
    assert parser.parse_args(["cni-agent", "--no-watch-addresses"]).watch_addresses is False
    assert agent.AgentConfig().watch_addresses is True


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


def test_a_negative_watch_cache_bound_is_an_error_that_says_what_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    command.configure(parser)
    args = parser.parse_args(["--watch-cache-objects", "-1", "--socket", str(tmp_path / "a.sock")])
    assert command.run(args) == 2
    assert "--watch-cache-objects -1: give 0 (no cache) or more" in capsys.readouterr().err
    assert not (tmp_path / "a.sock").exists(), "nothing started"


@pytest.mark.parametrize("flag", ["--watch-cache-kind-bytes", "--watch-cache-object-bytes"])
def test_a_watch_cache_byte_bound_below_one_is_an_error_that_says_what_to_give(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    command.configure(parser)
    args = parser.parse_args([flag, "0", "--socket", str(tmp_path / "a.sock")])
    assert command.run(args) == 2
    assert f"{flag} 0: give 1 or more (--watch-cache-objects 0 turns the cache off)" in capsys.readouterr().err
    assert not (tmp_path / "a.sock").exists(), "nothing started"


async def test_a_second_agent_on_the_same_socket_is_refused_and_the_first_keeps_serving(tmp_path: Path) -> None:
    config = agent.AgentConfig(socket_path=tmp_path / "a.sock", cache_dir=tmp_path / "cache")
    async with Running(agent.Agent(objects.MemoryObjects(), config)):
        second = Running(agent.Agent(objects.MemoryObjects(), config))
        with pytest.raises(OSError, match="already listening"):
            await second.start()
        await second.stop()
        assert (tmp_path / "a.sock").is_socket()


def test_an_unreadable_objects_file_is_an_error_that_says_which_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    command.configure(parser)
    (tmp_path / "o.yaml").write_text("kind: Pod\nmetadata: {}\n")
    assert command.run(parser.parse_args(["--objects", str(tmp_path / "o.yaml"), "--cache-dir", str(tmp_path)])) == 2
    assert "object 0: an object needs a kind and metadata.name" in capsys.readouterr().err
    (tmp_path / "o.yaml").write_text("a: [\n")
    assert command.run(parser.parse_args(["--objects", str(tmp_path / "o.yaml"), "--cache-dir", str(tmp_path)])) == 2
    assert f"--objects {tmp_path / 'o.yaml'}:doc 1: " in capsys.readouterr().err



async def test_metrics_port_serves_the_agents_metrics_on_loopback_until_the_agent_stops(tmp_path: Path) -> None:
    import asyncio

    import httpx

    from tests.api.controller_support import free_port
    from tests.api.metrics_support import scrape, value

    parser = cli.build_parser({"cni-agent": command.command})
    args = parser.parse_args(["cni-agent", "--metrics-port", "9102"])
    assert (args.metrics_port, args.metrics_host) == (9102, "127.0.0.1")
    assert parser.parse_args(["cni-agent"]).metrics_port is None
    with pytest.raises(SystemExit):
        parser.parse_args(["cni-agent", "--metrics-port", "0"])

    config = agent.AgentConfig(socket_path=tmp_path / "a.sock", cache_dir=tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "c1.jsonl").write_text("")
    port = free_port()
    stop = asyncio.Event()
    serving = asyncio.create_task(command.serve(agent.Agent(objects.MemoryObjects(), config), stop, metrics_port=port))
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        for _ in range(200):
            if (tmp_path / "a.sock").is_socket():
                break
            await asyncio.sleep(0.02)
        samples = await scrape(url)
        assert value(samples, "podnetwork_agent_cache_records") == 1
        # A second agent wanting the same metrics port is refused with the flags to change.
        taken = Running(agent.Agent(objects.MemoryObjects(), agent.AgentConfig(
            socket_path=tmp_path / "b.sock", cache_dir=tmp_path / "cache-b")), metrics_port=port)
        with pytest.raises(OSError, match="--metrics-port"):
            await taken.start()
        assert not (tmp_path / "b.sock").exists()
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(url)
