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
import bridge.agent.agent, bridge.agent.running, bridge.agent.objects, bridge.agent.watchcache
import bridge.agent.hotplug, bridge.agent.addresswatch, bridge.agent.publisher
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_the_agent_and_its_command_import_none_of_the_heavy_clients_and_servers() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "bridge" in loaded and "podnetwork" in loaded, "the probe ran the agent's command"
    assert sorted(loaded & set(HEAVY)) == []
