"""What the CNI agent's imports weigh: VmRSS after each layer of them, in fresh interpreters.

The agent's RSS before its first pod is mostly what it imports (issue 35: <= 40 MB after 1,000
pods, every feature on). This imports what `podnetwork cni-agent` imports, one layer after the
other, in a fresh interpreter per run (three runs, the median of each step), and prints what each
layer adds: the interpreter, asyncio (which imports ssl), `importlib.metadata` (the CLI finds its
subcommands by entry point; pydantic's plugin loader imports it too), the API client's parsers
(h11; yaml, for a kubeconfig file), pydantic itself, its first model class (the schema builder and
pydantic_core's validators), the project's models the agent reads (`podnetwork.ground.core` and
`.nad`, `bridge.translate` with the KEP models, `bridge.policy.model`), and the rest of the agent.

Run:  .venv/bin/python benchmarks/bench_agent_imports.py   (no root, ~5 s)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

STEPS: tuple[tuple[str, str], ...] = (
    ("the interpreter", ""),
    ("asyncio (and ssl)", "import asyncio, ssl"),
    ("importlib.metadata (the CLI's entry points)", "import importlib.metadata"),
    ("h11, yaml (the API client; a kubeconfig file)", "import h11, yaml"),
    ("pydantic, imported", "import pydantic"),
    ("pydantic, a first model class", "class _M(pydantic.BaseModel):\n    x: int = 0"),
    ("the models the agent reads (ground.core, ground.nad, bridge.translate, bridge.policy.model)",
     "import podnetwork.ground.core, podnetwork.ground.nad, bridge.translate, bridge.policy.model"),
    ("the rest of the agent (command, agent, server, watch cache, hot-plug, address watch)",
     "import bridge.agent.daemon.command, bridge.agent.daemon.agent, bridge.agent.daemon.server, "
     "bridge.agent.kube.watchcache, bridge.agent.daemon.hotplug, bridge.agent.pods.addresswatch, "
     "bridge.agent.pods.publisher"),
)

PROBE = """
import json, sys
def rss():
    with open("/proc/self/status") as f:
        return {k: int(v.split()[0]) for k, v in (l.split(":", 1) for l in f) if k in ("VmRSS", "RssAnon", "RssFile")}
out = [rss()]
for code in json.loads(sys.argv[1]):
    exec(code)
    out.append(rss())
pyd = sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_core"))
print(json.dumps({"rss": out[1:], "modules": len(sys.modules), "pydantic_modules": len(pyd)}))
"""


def one_run() -> dict[str, object]:
    codes = [code for _, code in STEPS]
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(codes)], capture_output=True, text=True,
                          check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="fresh interpreters (default: %(default)s)")
    args = parser.parse_args()
    runs = [one_run() for _ in range(args.runs)]
    print("| layer | VmRSS added | of which anonymous | of which file-backed | VmRSS after |")
    print("| --- | ---: | ---: | ---: | ---: |")
    before = {"VmRSS": 0.0, "RssAnon": 0.0, "RssFile": 0.0}
    for i, (label, _) in enumerate(STEPS):
        now = {key: statistics.median(r["rss"][i][key] for r in runs) / 1024  # type: ignore[index]
               for key in before}
        added = {key: now[key] - before[key] for key in now}
        print(f"| {label} | {added['VmRSS']:.1f} MB | {added['RssAnon']:.1f} | {added['RssFile']:.1f} "
              f"| {now['VmRSS']:.1f} MB |")
        before = now
    print(f"\nModules loaded: {runs[0]['modules']}, of which pydantic and pydantic_core: "
          f"{runs[0]['pydantic_modules']} ({args.runs} fresh interpreters, medians; Python "
          f"{sys.version.split()[0]}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
