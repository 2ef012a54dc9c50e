"""`podnetwork npwg-conformance` as a user runs it: root, real network namespaces, its API on loopback.

Every scenario passes against this project's shim and agent (started by the harness,
or by a `--daemon` line), and against a Multus-like delegating plugin that is not
ours (`fake_delegating_plugin_support.py`, pointed at the harness's kubeconfig
through its own configuration). Each fault put into that plugin fails exactly the
scenarios that check the broken rule, with messages naming its section, and the
exit status says so. Nothing is left behind: no namespace, no temporary directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from conformance.npwg import scenarios
from tests.cni.agent_support import World

pytestmark = pytest.mark.cni

FAKE = Path(__file__).with_name("fake_delegating_plugin_support.py")
EVERY_SCENARIO = {s.id for s in scenarios.SCENARIOS}

FAKE_CONF = """{
  "cniVersion": "${CNI_VERSION}", "name": "fake-multus", "type": "fake-multus",
  "kubeconfig": "${KUBECONFIG}", "confDir": "${CNI_CONF_DIR}", "binDir": "${CNI_BIN_DIR}",
  "cacheDir": "${RUN_DIR}/fake-cache", "clusterNetwork": "${DEFAULT_NETWORK_CONF}",
  "capabilities": {"portMappings": true, "bandwidth": true},
  "misbehave": MISBEHAVE
}"""


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("npwgc-")}


def harness(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Runs the command with its own TMPDIR; returns the process and its JSON report."""
    report = tmp_path / "report.json"
    # TMPDIR is short (the session's directory, not tmp_path): the harness puts its agent's socket
    # under it, and an AF_UNIX path has at most 107 bytes; pytest's basetemp grows under xdist
    # (.../pytest-N/popen-gwN/<test name>/), which once pushed the socket's path past that.
    tmp = Path(tempfile.mkdtemp(prefix="npwg-"))
    try:
        before = _netns()
        proc = subprocess.run(
            [sys.executable, "-m", "podnetwork.cli", "npwg-conformance", *args, "--report", str(report)],
            env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=600, check=False,
        )
        left_behind = list(tmp.iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert left_behind == [], f"the harness left {left_behind} behind"
    assert report.exists(), proc.stdout + proc.stderr
    doc = json.loads(report.read_text())
    # Only this run's own namespaces: another run of the harness on the machine makes its own.
    prefix = doc["netnsPrefix"]
    assert prefix.startswith("npwgc-"), doc
    left = {name for name in _netns() - before if name.startswith(prefix)}
    assert not left, f"the harness left network namespaces behind: {left}"
    return proc, doc


def results(report: dict[str, Any]) -> dict[str, str]:
    return {s["id"]: s["result"] for s in report["scenarios"]}


def fake_plugin(tmp_path: Path, misbehave: list[str]) -> tuple[Path, Path]:
    plugin = tmp_path / "bin" / "fake-multus"
    plugin.parent.mkdir()
    plugin.write_text(f"#!{sys.executable} -I\n{FAKE.read_text()}")
    plugin.chmod(0o755)
    conf = tmp_path / "fake-multus.json"
    conf.write_text(FAKE_CONF.replace("MISBEHAVE", json.dumps(misbehave)))
    return plugin, conf


def test_every_scenario_passes_against_this_projects_shim_and_the_agent_the_harness_starts(
    cni_host: list[Path], tmp_path: Path
) -> None:
    world = World(cni_host)  # only for its installed shim; the harness starts the agent itself
    try:
        proc, report = harness(tmp_path, "--plugin", str(world.shim))
    finally:
        asyncio.run(world.cleanup())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert results(report) == dict.fromkeys(EVERY_SCENARIO, "passed"), proc.stdout
    assert report["kind"] == "NPWGConformanceReport"
    assert report["result"] == "success"
    assert report["summary"] == {"passed": len(EVERY_SCENARIO), "failed": 0, "skipped": 0}
    assert "15 passed, 0 failed, 0 skipped" in proc.stdout


def test_the_shim_passes_with_an_explicit_conf_and_the_agent_as_daemon(cni_host: list[Path], tmp_path: Path) -> None:
    """The documented form for our shim: its conf names the socket, the daemon line starts the agent."""
    world = World(cni_host)
    conf = tmp_path / "multinetwork.json"
    conf.write_text(json.dumps({
        "cniVersion": "${CNI_VERSION}", "name": "multinetwork", "type": "multinetwork",
        "socketPath": "${RUN_DIR}/agent.sock", "capabilities": {"portMappings": True},
    }))
    daemon = (
        "podnetwork cni-agent --kubeconfig ${KUBECONFIG} --socket ${RUN_DIR}/agent.sock "
        "--cni-bin-dir ${CNI_BIN_DIR} --cni-conf-dir ${CNI_CONF_DIR} --cache-dir ${RUN_DIR}/cache "
        "--default-network-conf ${DEFAULT_NETWORK_CONF}"
    ).replace("podnetwork ", f"{Path(sys.executable).parent / 'podnetwork'} ", 1)
    try:
        proc, report = harness(
            tmp_path, "--plugin", str(world.shim), "--conf", str(conf), "--daemon", daemon,
            "--daemon-ready", "${RUN_DIR}/agent.sock", "--scenario", "runtime-config", "--scenario", "network-status",
        )
    finally:
        asyncio.run(world.cleanup())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert results(report) == {"runtime-config": "passed", "network-status": "passed"}


def test_a_delegating_plugin_that_is_not_ours_passes_every_scenario(cni_host: list[Path], tmp_path: Path) -> None:
    plugin, conf = fake_plugin(tmp_path, [])
    proc, report = harness(tmp_path, "--plugin", str(plugin), "--conf", str(conf))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert results(report) == dict.fromkeys(EVERY_SCENARIO, "passed"), proc.stdout


FAULTS = [
    # (fault, the scenarios that must fail, the section every failure names, run every scenario?)
    ("del-forward", {"del-reverse", "add-failure"}, "NPWG 7.2:", True),
    ("no-name-injection", {"name-injection"}, "NPWG 3.4.2:", True),
    ("continue-after-failure", {"add-failure"}, "NPWG 7.2:", False),
    ("runtime-config-everywhere", {"runtime-config"}, "NPWG 7.5:", False),
    ("default-last", {"default-first"}, "NPWG 6.2:", False),
    ("no-capability-check", {f"key-{c.key}" for c in scenarios.KEY_CASES}, "NPWG 4.1.2.1.", False),
    ("status-last-sandbox", {"network-status"}, "NPWG 5.3.", False),
]


@pytest.mark.parametrize(("fault", "failing", "section", "everything"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_misbehaving_delegating_plugin_fails_the_scenario_of_the_broken_rule_naming_its_section(
    cni_host: list[Path], tmp_path: Path, fault: str, failing: set[str], section: str, everything: bool
) -> None:
    """The two faults the issue names run every scenario (all others must still pass); the rest
    run the scenarios that must catch them, plus `interface-names` as one that must not fail."""
    plugin, conf = fake_plugin(tmp_path, [fault])
    chosen = [] if everything else [arg for s in sorted(failing | {"interface-names"}) for arg in ("--scenario", s)]
    proc, report = harness(tmp_path, "--plugin", str(plugin), "--conf", str(conf), *chosen)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    got = results(report)
    assert set(got) == (EVERY_SCENARIO if everything else failing | {"interface-names"})
    assert {i for i, r in got.items() if r == "failed"} == failing, proc.stdout
    assert all(r == "passed" for i, r in got.items() if i not in failing), proc.stdout
    for scenario in report["scenarios"]:
        if scenario["id"] in failing:
            assert scenario["failures"] and all(f.startswith(section) for f in scenario["failures"]), scenario
            assert f"FAIL {scenario['id']}" in proc.stdout and scenario["failures"][0] in proc.stdout
    assert report["result"] == "failure"


def test_a_daemon_that_dies_and_a_plugin_that_cannot_execute_are_clear_errors_that_leave_nothing(
    cni_host: list[Path], tmp_path: Path
) -> None:
    conf = tmp_path / "conf.json"
    conf.write_text('{"cniVersion": "${CNI_VERSION}", "name": "m", "type": "m"}')
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    base = [sys.executable, "-m", "podnetwork.cli", "npwg-conformance", "--conf", str(conf)]
    daemon = tmp_path / "daemon"
    daemon.write_text("#!/bin/sh\necho 'cannot bind the socket' >&2\nexit 3\n")
    daemon.chmod(0o755)
    proc = subprocess.run([*base, "--plugin", "/bin/true", "--daemon", str(daemon), "--daemon-ready", "${RUN_DIR}/s"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "error: --daemon exited 3 before" in proc.stderr and "cannot bind the socket" in proc.stderr
    not_a_program = tmp_path / "plugin"
    not_a_program.write_text("plain text")
    not_a_program.chmod(0o755)
    proc = subprocess.run([*base, "--plugin", str(not_a_program)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    assert f"error: --plugin {not_a_program}: cannot execute it: [Errno 8] Exec format error" in proc.stderr
    assert list(tmp.iterdir()) == []


# What Multus v4.2.4 (thin) does where the fake's default differs (../shared/evidence/ holds a run of
# the harness against Multus itself; docs/npwg-conformance.md "Peers" classifies each verdict).
MULTUS_LIKE = ["config-file-order", "no-capability-check", "runtime-config-everywhere", "ifname-from-netns",
               "no-check", "status-per-sandbox"]
MULTUS_DEPARTURES = {"config-source-order", *(f"key-{c.key}" for c in scenarios.KEY_CASES), "runtime-config",
                     "network-status"}


def test_a_plugin_that_does_what_multus_does_fails_exactly_where_multus_departs_from_the_spec(
    cni_host: list[Path], tmp_path: Path
) -> None:
    plugin, conf = fake_plugin(tmp_path, MULTUS_LIKE)
    proc, report = harness(tmp_path, "--plugin", str(plugin), "--conf", str(conf))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    got = results(report)
    assert {i for i, r in got.items() if r == "failed"} == MULTUS_DEPARTURES, proc.stdout
    by_id = {s["id"]: s for s in report["scenarios"]}
    # An interface name already in the pod's namespace is refused as Multus refuses it (4.1.2.1.5),
    # now that the harness's delegates make the interfaces they report.
    assert got["key-interface"] == "passed", by_id["key-interface"]
    # A CHECK that reaches no attachment breaks no NPWG rule (4.2.1 rules tuples): a note.
    assert got["interface-names"] == "passed", by_id["interface-names"]
    assert any(n.startswith("CHECK reached none of the selected attachments") for n in by_id["interface-names"]["notes"])
    sections = sorted({f.split(":")[0] for f in by_id["network-status"]["failures"]})
    assert sections == ["NPWG 5.1.1", "NPWG 5.3.3, 5.3.3.1", "NPWG 5.3.5"], by_id["network-status"]["failures"]
    assert not any("marked the default network" in f for f in by_id["network-status"]["failures"])
    assert by_id["config-source-order"]["failures"][0].startswith("NPWG 3.4.1: ")
