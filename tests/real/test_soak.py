"""The churn soak at CI size (tests/soak/soak.py, docs/reliability.md): 100 pods with 0-3 PodNetworks
through a real kubelet while the agent, the bridge, the controller, kube-apiserver, the kubelet and
containerd are SIGKILLed 10 times between them, and nothing of the pods is left on the node; the
servers behind a Service on a PodNetwork, under a MultiNetworkPolicy, answer the allowed clients and
only them at every count.

It runs the soak as its own process on a cluster of its own (own folder, ports, node, bridges):
it kills the cluster's parts, which the session's shared cluster must not see.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.real.cluster_support import REPO, binaries, node_prerequisites

#: Seconds the soak may take (221-300 s here, at load 5-26), and then to clean up after a SIGTERM.
SOAK_SECONDS, CLEANUP_SECONDS = 900, 240


@pytest.mark.timeout(SOAK_SECONDS + CLEANUP_SECONDS + 60)
def test_a_hundred_pods_through_ten_kills_leave_nothing_behind(tmp_path: Path) -> None:
    binaries()  # the kit, as the session's fixtures need it (a KitMissing says how to get it)
    missing = node_prerequisites()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the soak cannot run in CI: {missing}", pytrace=False)
        pytest.skip(missing)
    report = tmp_path / "soak.json"
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "soak" / "soak.py"), "--pods", "100", "--kills",
                             "10", "--check-every", "90", "--report", str(report)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=SOAK_SECONDS)
    except BaseException:
        # a timeout (ours, pytest-timeout's) or Ctrl-C: subprocess would SIGKILL the soak, leaving its
        # cluster running; on SIGTERM it removes everything it made
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=CLEANUP_SECONDS)
        raise
    assert report.exists(), f"the soak ended without a report ({proc.returncode}):\n{stdout[-4000:]}\n" \
                            f"{stderr[-4000:]}"
    result = json.loads(report.read_text())
    assert result["pods"] == 100
    assert len(result["kills"]) == 10
    assert {k["target"] for k in result["kills"]} == {"agent", "bridge", "controller", "kube-apiserver", "kubelet",
                                                      "containerd"}
    assert [k for k in result["kills"] if k["recovery"] is None] == []
    assert result["leaks"] == [], json.dumps({"leaks": result["leaks"], "kills": result["kills"],
                                              "checks": result["checks"]}, indent=1)[:8000]
    assert result["checks"][-1]["label"] == "final" and result["checks"][-1]["sandboxes"] == 0
    # The policy and the Service carried traffic: probes at the counts (settled pods, judged: none
    # wrong) and every few seconds during the churn (tallied; a denied client is never answered even
    # then, since a server's policy is in place before it runs). At CI size a count may find no
    # client of a role settled (the last pods made, or a kill just before), so the roles are asked of
    # the run as a whole, and of the counts only that they judged some.
    probed = [c["probes"] for c in result["checks"]]
    churn = result["traffic"]["churn"]
    assert sum(p["allowed"] + p["denied"] for p in probed) > 0, probed
    assert result["traffic"]["counted"]["wrong"] == 0, result["traffic"]
    assert sum(p["allowed"] for p in probed) + churn["allowed_answered"] + churn["allowed_unanswered"] > 0, \
        (probed, churn)
    assert sum(p["denied"] for p in probed) + churn["denied_answered"] + churn["denied_unanswered"] > 0, \
        (probed, churn)
    assert churn["denied_answered"] == 0, result["traffic"]
    assert proc.returncode == 0, stdout[-3000:]
