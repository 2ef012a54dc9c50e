"""`podnetwork demo --check` end to end: the whole system on this machine, as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demo.host import Footprint

pytestmark = pytest.mark.e2e

PODNETWORK = Path(sys.executable).with_name("podnetwork")


def run_demo(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], Footprint]:
    proc = subprocess.Popen(
        [str(PODNETWORK), "demo", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f"the demo took more than {timeout}s:\n{out}")
    # The demo names what it makes after its process id.
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, ""), Footprint(str(proc.pid))


def test_demo_check_passes_through_every_stage_and_leaves_nothing(cni_host: list[Path]) -> None:
    done, footprint = run_demo("--check")
    out = done.stdout
    assert done.returncode == 0, out
    for line in (
        'ok   the controller created the "default" PodNetwork and it is Ready',
        "ok   the bridge set ParamsReady=True on PodNetwork blue",
        "ok   admission auto-populated",
        "ok   static validation rejected the duplicate interfaceName with a field error",
        'FailedAndUnresolvableNodes: podnetwork "red" not found',
        "ok   db-1 was retried after the controller's requeue nudge and scheduled on node-a",
        'FailedNodes[node-b] = podnetwork "red" is not available on this node',
        "ok   blue is not Ready: AdministrativelyDisabled",
        "ok   late was nudged, retried and scheduled on node-b",
        "ok   web-a's selection names the NADs of its PodNetworks",
        "ok   the agent moved web-a's default route to blue0 via 198.18.1.1 (isDefaultGW4)",
        "ok   web-a has an IP on blue in 198.18.1.0/24",
        "ok   web-a's attachment data (KEP Req 17, for a downward-API volume) names each interface with its IPs and MAC",
        "ok   web-b has an IP on green in 198.18.2.0/24",
        "ok   web-a reaches web-b on blue",
        "ok   web-b reaches web-a on green",
        "ok   db-1 reaches db-2 on red",
        "ok   web-a's network-status lists 2001:2::a/64 on eth0",
        "ok   web-a's pod IPs list 2001:2::a on PodNetwork default",
        "ok   no link-local (fe80::/10) address is in the network-status",
        "ok   2001:2::a left web-a's network-status and pod IPs with the address",
        # hot-plug (KEP Story #8, Req 24)
        "ok   admission refused removing the default network from a running pod, saying why",
        "ok   the refused change left web-a's networks as they were",
        "ok   the bridge added red to web-a's NPWG selection",
        "ok   the agent attached red0 in web-a's existing namespace and left the others alone",
        "ok   web-a's network-status lists red on red0",
        "ok   web-a reaches db-1 on red",
        "ok   red's InUse now counts web-a too (3 pods)",
        "ok   the agent detached red0; web-a's other interfaces stayed",
        "ok   host-local released web-a's red address (only db-1's and db-2's remain)",
        "ok   red's InUse is back to db-1 and db-2",
        # network policy (KEP Phase III, Req 22): real TCP between the pods' namespaces
        "ok   web-b connects to web-a on blue before any policy",
        "ok   the bridge posted PolicyApplies on MultiNetworkPolicy demo/isolate-blue",
        "ok   web-b cannot connect to web-a on blue: isolate-blue denies ingress",
        "ok   web-b still connects to web-a on green: the policy names blue only",
        "ok   web-b connects to web-a on blue once allow-clients admits pods labelled role=client",
        "ok   with the policies deleted the agents removed every policy table",
        "node-a's agent: demo/web-a: table inet podnetwork_policy in ",
        # a pod on blue alone (the explicit list), node access, the kubelet's probe (KEP Req 19)
        "ok   solo has blue on eth0 and no other interface (no default network)",
        "ok   solo's network-status has one entry, blue on eth0, default true; its podIP is blue's",
        "ok   without node access node-c cannot reach solo (isolation is the default)",
        "ok   node-c's agent gave the node 198.18.1.1 on blue's bridge (node access)",
        "ok   the TCP probe from node-c's namespace reaches solo on blue",
        "ok   with solo gone node-c holds no address on blue and no node-access table",
        "ok   node-a's and node-b's agents (this machine's namespace) made no node path",
        # a Service on blue (KEP Phase III, Req 22): the bridge's slices, each agent's ClusterIP rules
        "ok   Service echo got a ClusterIP in 198.19.0.0/24",
        "ok   the bridge's EndpointSlices list echo-1 and echo-2 by their blue addresses, ready, on port 8080",
        "ok   no endpoint is a cluster-network address (198.18.0.0/24)",
        "ok   the agent routes the ClusterIP in client through blue0 from its blue address, with its table",
        "ok   pod plain (not on blue) has no Services table",
        "ok   client reached both echo-1 and echo-2 through the ClusterIP",
        "ok   every connection came from client's blue address",
        "ok   the bridge marked echo-2 not ready in the slice (echo-1 still ready)",
        "ok   every connection went to echo-1: the agent left not-ready echo-2 out",
        "ok   the Service's EndpointSlices are gone",
        "ok   with the Service deleted no pod's namespace holds its table or a route of it",
        "ok   the ClusterIP answers no more",
        "ok   with the last pod gone the finalizer was removed and red's delete completed",
        "ok   host-local released red's addresses",
        "ok   nothing of the demo is left",
    ):
        assert line in out, f"missing {line!r} in:\n{out}"
    assert "FAIL" not in out
    assert "all " in out and " checks passed" in out
    assert footprint.leftovers() == []


def test_demo_interrupted_twice_while_attaching_pods_removes_everything(cni_host: list[Path]) -> None:
    proc = subprocess.Popen(
        [str(PODNETWORK), "demo"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    footprint = Footprint(str(proc.pid))
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        seen.append(line)
        if "CNI ADD" in line:  # namespaces, bridges and IPAM leases exist now
            break
        assert time.monotonic() < deadline, "".join(seen)
    assert any(f.startswith("netns ") for f in footprint.leftovers()), "".join(seen)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # an impatient second Ctrl-C must not cut the cleanup short
    rest, _ = proc.communicate(timeout=60)
    out = "".join(seen) + rest
    assert proc.returncode == 130, out
    assert "interrupted" in out
    assert footprint.leftovers() == [], out


def test_demo_keep_leaves_its_resources_and_prints_how_to_remove_them(cni_host: list[Path]) -> None:
    done, footprint = run_demo("--keep", "-q")
    try:
        assert done.returncode == 0, done.stdout
        left = footprint.leftovers()
        assert any(item.startswith("netns ") for item in left), left
        assert any(item.startswith("link ") for item in left), left
        lines = done.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if "--keep:" in line)
        commands = [line.strip() for line in lines[start + 1 : start + 4]]
        assert all(cmd and not cmd.startswith("(") for cmd in commands), done.stdout
    finally:
        for cmd in commands if "commands" in locals() else []:
            subprocess.run(["bash", "-c", cmd], check=False, capture_output=True)
        # Whatever the printed commands missed, remove it here so no test leaks.
        for item in footprint.leftovers():
            kind, _, name = item.partition(" ")
            if kind == "netns":
                subprocess.run(["ip", "netns", "delete", name], check=False)
            elif kind == "link":
                subprocess.run(["ip", "link", "delete", name], check=False)
            else:
                subprocess.run(["rm", "-rf", name], check=False)
    assert footprint.leftovers() == []


FAILING_PLUGIN = """#!/bin/sh
# A CNI plugin that always fails, per the CNI spec's error format.
cat >/dev/null
echo '{"cniVersion": "1.0.0", "code": 999, "msg": "this test plugin always fails"}'
exit 1
"""


def test_demo_check_fails_and_says_why_when_the_plugins_fail(cni_host: list[Path], tmp_path: Path) -> None:
    for name in ("bridge", "host-local", "macvlan"):
        plugin = tmp_path / name
        plugin.write_text(FAILING_PLUGIN)
        plugin.chmod(0o755)
    done, footprint = run_demo("--check", "--cni-bin-dir", str(tmp_path))
    out = done.stdout
    assert done.returncode == 1, out
    assert "check(s) FAILED" in out
    assert "this test plugin always fails" in out
    assert footprint.leftovers() == [], out


def test_demo_without_the_cni_plugins_says_so_and_runs_the_control_plane(tmp_path: Path) -> None:
    done, footprint = run_demo("--check", "--cni-bin-dir", str(tmp_path))
    out = done.stdout
    assert done.returncode == 0, out
    assert "skip 4. attaching pods with the real CNI plugins: needs" in out
    assert "the CNI plugins bridge, host-local, macvlan in" in out or os.geteuid() != 0
    assert "ok   db-1 was retried after the controller's requeue nudge" in out
    assert "CNI ADD" not in out
    assert footprint.leftovers() == []


def test_demo_help_describes_the_flags() -> None:
    done = subprocess.run([str(PODNETWORK), "demo", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    for flag in ("--check", "--keep", "--cni-bin-dir", "--quiet", "--verbose", "--control-plane-only"):
        assert flag in done.stdout
