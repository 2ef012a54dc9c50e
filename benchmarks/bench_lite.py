"""The CNI agent's API client, `podnetwork.kube.lite`: HTTP/1.1 framed by h11 against the
hand-written parser it had before (loaded from git, `--before REV`), in the same run.

- GET latency: `LiteApi.get` of one pod (4 KB of JSON with an API server's headers) over a
  kept-alive loopback connection, the two clients alternating request by request, against a
  server in a process of its own answering canned bytes: once with a Content-Length, once
  chunked in two chunks (as kube-apiserver sends a body larger than its write buffer). Median of
  `--requests` per client; the ratio h11 / hand-written is the figure.
- RSS: fresh interpreters that import what `podnetwork cni-agent` imports, once with the
  client as it is and once with the hand-written one put in its place; and what importing
  h11 alone adds on top of the rest (VmRSS, median of `--rss-runs`).

    .venv/bin/python benchmarks/bench_lite.py            # prints Markdown for docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from podnetwork.kube import credentials, lite  # noqa: E402

POD = json.dumps({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web", "namespace": "ns", "uid": "0f7b0c8e-4bd5-4c87-9a6c-3a4d3a2f1e01",
                 "resourceVersion": "123456", "labels": {"app": "web", "tier": "front"},
                 "annotations": {"k8s.v1.cni.cncf.io/networks": "blue, red", "note": "n" * 2000}},
    "spec": {"nodeName": "node-1", "containers": [{"name": f"c{i}", "image": "registry/app:1.0",
                                                   "ports": [{"containerPort": 8080}]} for i in range(8)]},
    "status": {"phase": "Running", "podIP": "10.0.0.7"},
}).encode()
HEADERS = (b"Audit-Id: 5a1f0c1e-7f1e-4b1e-9c1e-0a1f0c1e7f1e\r\nCache-Control: no-cache, private\r\n"
           b"Content-Type: application/json\r\nX-Kubernetes-Pf-Flowschema-Uid: 0b1c\r\n"
           b"X-Kubernetes-Pf-Prioritylevel-Uid: 0d1e\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n")
ANSWERS = {
    "content-length": b"HTTP/1.1 200 OK\r\n" + HEADERS + b"Content-Length: %d\r\n\r\n%s" % (len(POD), POD),
    "chunked": (b"HTTP/1.1 200 OK\r\n" + HEADERS + b"Transfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n%s\r\n" % (len(POD) // 2, POD[:len(POD) // 2])
                + b"%x\r\n%s\r\n" % (len(POD) - len(POD) // 2, POD[len(POD) // 2:])
                + b"0\r\n\r\n"),
}


async def serve(port_file: str) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                framing = "chunked" if b"/chunked/" in head.split(b"\r\n", 1)[0] else "content-length"
                writer.write(ANSWERS[framing])
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    Path(port_file).write_text(str(server.sockets[0].getsockname()[1]))
    await asyncio.Event().wait()


def before_module(rev: str) -> ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:podnetwork/kube/lite.py"],
                            capture_output=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "lite_before.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("lite_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def latencies(port: int, before: ModuleType, requests: int) -> dict[str, dict[str, float]]:
    creds = credentials.Credentials(server=f"http://127.0.0.1:{port}")
    clients = {"h11": lite.LiteApi(creds), "hand-written": before.LiteApi(creds)}
    out: dict[str, dict[str, float]] = {}
    try:
        for framing in ANSWERS:
            path = f"/api/v1/{framing}/pods/web" if framing == "chunked" else "/api/v1/namespaces/ns/pods/web"
            times: dict[str, list[float]] = {name: [] for name in clients}
            for i in range(requests + 200):
                order = list(clients) if i % 2 else list(reversed(clients))
                for name in order:
                    started = time.perf_counter()
                    got = await clients[name].get(path)
                    elapsed = time.perf_counter() - started
                    assert got["metadata"]["name"] == "web"
                    if i >= 200:  # after warm-up
                        times[name].append(elapsed)
            out[framing] = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    finally:
        for client in clients.values():
            await client.close()
    return out


RSS_PROBE = """
import sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
if sys.argv[1] == "before":
    import importlib.util
    spec = importlib.util.spec_from_file_location("podnetwork.kube.lite", sys.argv[2])
    module = importlib.util.module_from_spec(spec)
    sys.modules["podnetwork.kube.lite"] = module
    spec.loader.exec_module(module)
import asyncio, ssl, json
import bridge.agent.daemon.agent, bridge.agent.daemon.server, bridge.agent.kube.objects, bridge.agent.daemon.running
base = rss()
if sys.argv[1] == "h11":
    import h11
h11_added = rss() - base
import podnetwork.kube.lite, bridge.agent.kube.watchcache, bridge.agent.daemon.hotplug, bridge.agent.pods.publisher
print(rss(), h11_added, "h11" in sys.modules)
"""


def rss(runs: int, before_path: Path) -> dict[str, tuple[float, float]]:
    out = {}
    for variant in ("before", "h11"):
        totals, added = [], []
        for _ in range(runs):
            done = subprocess.run([sys.executable, "-c", RSS_PROBE, variant, str(before_path)], cwd=ROOT,
                                  capture_output=True, text=True, check=True)
            total, h11_added, loaded = done.stdout.split()
            assert (loaded == "True") == (variant == "h11"), done.stdout
            totals.append(int(total))
            added.append(int(h11_added))
        out[variant] = (statistics.median(totals) / 1024, statistics.median(added) / 1024)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="fdc3866", help="the commit whose lite.py is the hand-written parser")
    parser.add_argument("--requests", type=int, default=3000, help="timed GETs per client and framing")
    parser.add_argument("--rss-runs", type=int, default=5)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    before = before_module(args.before)
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)])
        try:
            for _ in range(100):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.05)
            times = asyncio.run(latencies(int(port_file.read_text()), before, args.requests))
        finally:
            server.terminate()
            server.wait()
        before_path = Path(tmp) / "lite_before.py"
        before_path.write_bytes(Path(before.__file__ or "").read_bytes())
        sizes = rss(args.rss_runs, before_path)
    print(f"GET of one pod ({len(POD)} bytes), median of {args.requests} per client, alternating:\n")
    print("| answer framed by | hand-written (before) | h11 | ratio h11 / hand-written |")
    print("| --- | ---: | ---: | ---: |")
    for framing, by in times.items():
        print(f"| {framing} | {by['hand-written']:.0f} µs | {by['h11']:.0f} µs | "
              f"**{by['h11'] / by['hand-written']:.2f}** |")
    print(f"\nRSS of a fresh interpreter importing what the agent imports (median of {args.rss_runs}):\n")
    print("| client | RSS | of which h11 |")
    print("| --- | ---: | ---: |")
    print(f"| hand-written (before) | {sizes['before'][0]:.1f} MB | - |")
    print(f"| h11 | {sizes['h11'][0]:.1f} MB | {sizes['h11'][1]:.2f} MB |")
    load = os.getloadavg()[0]
    print(f"\n{os.cpu_count()} CPUs, load average {load:.1f}, Python {sys.version.split()[0]}, "
          f"h11 {__import__('h11').__version__}, before = {args.before}.")


if __name__ == "__main__":
    main()
