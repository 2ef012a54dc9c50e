"""`podnetwork controller` arguments: feature gates, peering and priority, usage errors."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import subprocess
import sys
import time
from typing import Any

import kopf
import pytest

from podnetwork import cli
from podnetwork.commands import controller as command


def test_feature_gates_parse_like_kube_components():
    assert command.parse_feature_gates("MultiNetwork=false, ") == {"MultiNetwork": False}
    assert command.multinetwork_enabled({}) is True
    assert command.multinetwork_enabled(command.parse_feature_gates("MultiNetwork=false")) is False
    with pytest.raises(ValueError, match=r"'MultiNetwork': expected NAME=true"):
        command.parse_feature_gates("MultiNetwork")


def test_an_unknown_feature_gate_is_refused_as_kube_components_refuse_it(tmp_path):
    # A misspelt MultiNetwork=false would otherwise leave the controller writing.
    proc = subprocess.run([sys.executable, "-m", "podnetwork", "controller", "--no-webhook",
                           "--feature-gates", "MultiNetwrok=false", "--kubeconfig", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 2
    assert proc.stderr == ("podnetwork controller: unknown feature gate 'MultiNetwrok'; known gates: MultiNetwork\n")


def test_bad_feature_gate_is_a_usage_error(capsys):
    assert cli.main(["controller", "--feature-gates", "MultiNetwork=maybe"]) == 2
    assert "expected NAME=true or NAME=false" in capsys.readouterr().err


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.command.configure(parser)
    return parser.parse_args(argv)


def test_priority_takes_an_integer_and_is_absent_by_default():
    assert parse("--peering", "p", "--priority", "-7").priority == -7
    assert parse("--peering", "p").priority is None


def test_start_time_priority_is_higher_for_the_replica_that_started_first():
    before = time.time_ns() // 1_000
    first = command.parse_priority("start-time")
    time.sleep(0.002)
    second = command.parse_priority("start-time")
    after = time.time_ns() // 1_000
    assert -after <= second < first <= -before


def test_bad_priority_is_a_usage_error_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["controller", "--peering", "p", "--priority", "high"])
    assert exc.value.code == 2
    assert "invalid priority 'high': expected an integer or 'start-time'" in capsys.readouterr().err


def test_priority_without_peering_is_refused(capsys):
    assert cli.main(["controller", "--priority", "5"]) == 2
    assert "add --peering NAME" in capsys.readouterr().err


async def spawned_settings(args: argparse.Namespace) -> kopf.OperatorSettings:
    """The settings kopf derives from the options `serve` passes to `kopf.operator`."""
    settings = kopf.OperatorSettings()
    tasks = await kopf.spawn_tasks(registry=kopf.OperatorRegistry(), settings=settings,
                                   clusterwide=True, stop_flag=asyncio.Event(),
                                   **command.peering_options(args))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return settings


async def test_peering_name_and_priority_reach_kopfs_settings():
    settings = await spawned_settings(parse("--peering", "podnetwork-controller", "--priority", "42"))
    assert settings.peering.name == "podnetwork-controller"
    assert settings.peering.priority == 42
    assert settings.peering.mandatory is True
    assert settings.peering.standalone is False
    assert settings.peering.clusterwide is True


async def test_without_peering_the_operator_is_standalone_at_kopfs_default_priority():
    settings = await spawned_settings(parse())
    assert settings.peering.standalone is True
    assert settings.peering.mandatory is False
    assert settings.peering.priority == 0


def keepalive(priority: int, *, age: float = 0.0, lifetime: int = 60) -> dict[str, Any]:
    seen = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=age)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


def test_a_live_peer_with_the_same_or_a_higher_priority_outranks_as_kopf_pauses():
    assert command.outranked({"me": keepalive(5), "b": keepalive(6)}, "me", 5)
    assert command.outranked({"me": keepalive(5), "b": keepalive(5)}, "me", 5)
    assert not command.outranked({"me": keepalive(5), "b": keepalive(4)}, "me", 5)


def test_dead_peers_own_entry_and_removed_entries_outrank_nobody():
    assert not command.outranked({"b": keepalive(9, age=61)}, "me", 5)
    assert not command.outranked({"me": keepalive(9)}, "me", 5)
    assert not command.outranked({"b": None}, "me", 5)


async def test_a_side_watch_that_fails_is_logged_and_run_again(caplog):
    calls: list[int] = []

    async def run() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("403 Forbidden")

    await asyncio.wait_for(command.retrying("watching namespaces", run, backoff=0), 5)
    assert calls == [0, 1]
    assert "watching namespaces failed (RuntimeError: 403 Forbidden); retrying in 0s" in caplog.text
