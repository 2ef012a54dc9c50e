"""The CNI agent runs on every node: what it imports is its memory (issue 13: <= 45 MB).

`podnetwork cni-agent` loads its own command module only, and the modules it runs with
(the agent, its server, object source, watch cache, hot-plug and address watch) import
none of the heavy clients and servers the other commands use: lightkube and httpx (the
agent has `podnetwork.kube.lite`), kopf, aiohttp (its server is on asyncio streams),
uvicorn and FastAPI, prometheus_client (only with --metrics-port), the conformance suites.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("lightkube", "httpx", "httpx2", "kopf", "aiohttp", "uvicorn", "fastapi", "starlette",
         "prometheus_client", "conformance", "kubernetes", "cryptography", "networkx")

PROBE = """
import json, sys
from podnetwork import cli
sys.argv = ["podnetwork", "cni-agent", "--help"]
try:
    cli.main()
except SystemExit:
    pass
import bridge.agent.daemon.agent, bridge.agent.daemon.running, bridge.agent.kube.objects, bridge.agent.kube.watchcache
import bridge.agent.daemon.hotplug, bridge.agent.pods.addresswatch, bridge.agent.pods.publisher
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_the_agent_and_its_command_import_none_of_the_heavy_clients_and_servers() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "bridge" in loaded and "podnetwork" in loaded, "the probe ran the agent's command"
    assert sorted(loaded & set(HEAVY)) == []


IN_CLUSTER = """
import json, sys
from pathlib import Path
from podnetwork.kube import credentials
import bridge.agent.daemon.command, bridge.agent.daemon.running, bridge.agent.daemon.hotplug
account = Path({account!r})
found = credentials.resolve(environ={{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}},
                            service_account=account)
credentials.check(found)
print(json.dumps([found.source, "yaml" in sys.modules]))
"""


def test_the_agent_with_in_cluster_credentials_never_loads_the_yaml_parser(tmp_path: Path) -> None:
    """The DaemonSet's agent reads its service account: a YAML parser would be ~1 MB of its RSS
    for nothing (it reads kubeconfig files only)."""
    (tmp_path / "token").write_text("t0ken")
    (tmp_path / "namespace").write_text("kube-system")
    done = subprocess.run([sys.executable, "-c", IN_CLUSTER.format(account=str(tmp_path))],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["in-cluster service account", False]
