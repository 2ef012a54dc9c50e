"""What the CNI agent's imports weigh: VmRSS after each layer of them, in fresh interpreters.

The agent's RSS before its first pod is mostly what it imports (issue 35: <= 40 MB after 1,000
pods, every feature on). This imports what `podnetwork cni-agent` imports, one layer after the
other, in a fresh interpreter per run (three runs, the median of each step), and prints what each
layer adds: the interpreter, asyncio (which imports ssl), `importlib.metadata` (the CLI finds its
subcommands by entry point; pydantic's plugin loader imports it too), the API client's parsers
(h11; yaml, for a kubeconfig file), pydantic itself, its first model class (the schema builder and
pydantic_core's validators), the project's models the agent reads (`podnetwork.ground.core` and
`.nad`, `bridge.translate` with the KEP models, `bridge.policy.model`), the rest of the agent, and what
`--metrics-port` adds (prometheus_client; the listener is on asyncio streams and h11).

`--without-pydantic` is a prototype's measure, not an agent that runs: the same imports with a
stand-in `pydantic` package first on the path (its names, no validation, no schema), so the rows
say what the agent would weigh if it read its objects without pydantic (issue 35, target 2)
while every other import stays.

Run:  .venv/bin/python benchmarks/bench_agent_imports.py [--without-pydantic]   (no root, ~5 s)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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
    ("the metrics listener (only with --metrics-port: prometheus_client)", "import bridge.agent.daemon.metrics"),
)

#: The stand-in of --without-pydantic: what the modules the agent imports use of pydantic's names
#: at import time (class bodies, `Field`, `ConfigDict`, validators' decorators, `model_fields`).
STANDIN = """
class ValidationError(ValueError):
    pass
def ConfigDict(**kw):
    return kw
def Field(default=None, **kw):
    return default
def field_validator(*a, **k):
    return lambda f: f
model_validator = field_validator
class _Info:
    alias = None
class BaseModel:
    model_config = {}
    def __init__(self, **kw):
        self.__dict__.update(kw)
    def __init_subclass__(cls, **kw):
        cls.model_fields = {name: _Info() for name in cls.__dict__.get("__annotations__", {})}
    @classmethod
    def model_validate(cls, obj):
        return cls(**obj)
class TypeAdapter:
    def __init__(self, t):
        self.t = t
"""

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


def one_run(path: str | None = None) -> dict[str, object]:
    codes = [code for _, code in STEPS]
    env = {**os.environ, "PYTHONPATH": path} if path else None
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(codes)], capture_output=True, text=True,
                          check=True, env=env)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="fresh interpreters (default: %(default)s)")
    parser.add_argument("--without-pydantic", action="store_true",
                        help="a stand-in pydantic (names only) first on the path: the prototype's weight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="standin-") as where:
        path = None
        if args.without_pydantic:
            (Path(where) / "pydantic").mkdir()
            (Path(where) / "pydantic" / "__init__.py").write_text(STANDIN)
            path = where
        runs = [one_run(path) for _ in range(args.runs)]
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
