"""ADD then DEL of a pod through shim -> agent -> plugins, against the same plugin configs executed directly.

The pod has the cluster default network and two bridge networks (three
`bridge` + `host-local` attachments). The three paths run on the same bridges
and namespace, interleaved iteration by iteration, so machine noise hits them alike:

- direct: the three config lists executed the way a runtime's libcni does
  (`bridge.agent.conflist.add`/`delete`: one exec per plugin, IPAM chained by the
  plugin itself), no agent;
- agent: the installed `multinetwork` shim executed as a runtime would, talking to
  the agent running as in production: its own process, `podnetwork cni-agent`
  (served from an `--objects` file instead of a cluster), reading the pod, writing
  its cache, running the same three config lists and patching network-status;
- in-process: an agent inside this process called directly (`Agent.handle`), to
  separate the shim's cost (an interpreter start per call) from the agent's.

The agent used to run inside this process too, on the event loop that spawns and
reaps the shim, so the harness's own child-process bookkeeping (and the GIL) could
be charged to the shim path only. Measured, that made no visible difference, but
the agent now runs the way it is deployed so the question does not arise.

Needs root and the CNI plugins. Run:  sudo .venv/bin/python benchmarks/bench_agent.py [-n 30]
Prints a Markdown table for docs/benchmarks.md. Cleans up its netns, bridges and IPAM files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bridge.agent import agent, command, conflist, invoke
from bridge.agent.invoke import Command, RuntimeArgs
from bridge.agent.objects import MemoryObjects
from bridge.agent.running import Running

BIN_DIRS = tuple(d for d in invoke.DEFAULT_BIN_DIRS if d.is_dir())


def network(name: str, bridge: str, subnet: str, ipam_dir: Path, default: bool = False) -> dict[str, Any]:
    ipam: dict[str, Any] = {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": str(ipam_dir)}
    if default:
        ipam["routes"] = [{"dst": "0.0.0.0/0"}]
    return {"cniVersion": "1.0.0", "name": name, "plugins": [{"type": "bridge", "bridge": bridge, "isGateway": True, "ipam": ipam}]}


async def run(iterations: int, warmup: int, shim_python: str = sys.executable) -> dict[str, Any]:
    tag = secrets.token_hex(3)
    root = Path(tempfile.mkdtemp(prefix="pn-bench-agent-"))
    netns_name = f"pnbench-{tag}"
    bridges = [f"pn{tag}b{i}" for i in range(3)]
    octet = secrets.randbelow(200) + 20
    ipam_dir = root / "ipam"
    nets = [
        network("kubenet", bridges[0], f"10.{octet}.0.0/24", ipam_dir, default=True),
        network("blue", bridges[1], f"10.{octet}.1.0/24", ipam_dir),
        network("red", bridges[2], f"10.{octet}.2.0/24", ipam_dir),
    ]
    objects_list = (
        [
            {"kind": "NetworkAttachmentDefinition", "metadata": {"name": n["name"], "namespace": "default"},
             "spec": {"config": json.dumps(n)}}
            for n in nets[1:]
        ]
        + [{"kind": "Pod", "metadata": {"name": "bench", "namespace": "default",
                                         "annotations": {"k8s.v1.cni.cncf.io/networks": "blue,red"}}}]
    )
    objects = MemoryObjects(json.loads(json.dumps(objects_list)))
    # The in-process agent's own socket and cache; the shim talks to the separate process.
    config = agent.AgentConfig(
        socket_path=root / "agent.sock", cache_dir=root / "cache", bin_dirs=BIN_DIRS,
        conf_dir=root / "net.d", default_network=nets[0],
    )
    shim = command.install_shim(root / "bin", shim_python)
    # The agent as deployed: its own process, `podnetwork cni-agent`, same objects and config.
    objects_file = root / "objects.json"
    objects_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects_list}))
    default_conf = root / "default.conflist"
    default_conf.write_text(json.dumps(nets[0]))
    agent_cmd = [
        str(Path(sys.executable).with_name("podnetwork")), "cni-agent", "--objects", str(objects_file),
        "--socket", str(config.socket_path), "--cache-dir", str(root / "cache-agent"),
        "--cni-conf-dir", str(config.conf_dir), "--default-network-conf", str(default_conf),
        "--cni-bin-dir", os.pathsep.join(map(str, BIN_DIRS)),
    ]
    runtime_conf = json.dumps({"cniVersion": "1.0.0", "name": "multinetwork", "type": "multinetwork",
                               "socketPath": str(config.socket_path)}).encode()
    netns = f"/var/run/netns/{netns_name}"
    cni_args = (("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "default"), ("K8S_POD_NAME", "bench"))
    executor = invoke.SubprocessExec()
    lists = [conflist.load(n) for n in nets]
    ifnames = ["eth0", "net1", "net2"]

    async def direct(i: int) -> float:
        start = time.perf_counter()
        results = []
        for cl, ifname in zip(lists, ifnames, strict=True):
            args = RuntimeArgs(Command.ADD, f"direct-{i}", netns, ifname, cni_args)
            results.append(await conflist.add(executor, cl, args, BIN_DIRS, 60))
        for cl, ifname, result in reversed(list(zip(lists, ifnames, results, strict=True))):
            args = RuntimeArgs(Command.DEL, f"direct-{i}", netns, ifname, cni_args)
            await conflist.delete(executor, cl, args, BIN_DIRS, 60, result)
        return time.perf_counter() - start

    async def shim_call(cmd: str, container_id: str) -> None:
        env = {"PATH": os.environ.get("PATH", ""), "CNI_COMMAND": cmd, "CNI_CONTAINERID": container_id,
               "CNI_NETNS": netns, "CNI_IFNAME": "eth0", "CNI_PATH": str(shim.parent),
               "CNI_ARGS": invoke.format_cni_args(cni_args)}
        proc = await asyncio.create_subprocess_exec(str(shim), env=env, stdin=-1, stdout=-1, stderr=-1)
        out, _ = await proc.communicate(runtime_conf)
        if proc.returncode != 0:
            raise RuntimeError(f"shim {cmd} failed: {out.decode()}")

    async def in_process(i: int) -> float:
        env = {"CNI_CONTAINERID": f"inproc-{i}", "CNI_NETNS": netns, "CNI_IFNAME": "eth0",
               "CNI_ARGS": invoke.format_cni_args(cni_args)}
        start = time.perf_counter()
        await a.agent.handle({**env, "CNI_COMMAND": "ADD"}, runtime_conf)
        await a.agent.handle({**env, "CNI_COMMAND": "DEL"}, runtime_conf)
        return time.perf_counter() - start

    async def through_agent(i: int) -> float:
        start = time.perf_counter()
        await shim_call("ADD", f"agent-{i}")
        await shim_call("DEL", f"agent-{i}")
        return time.perf_counter() - start

    subprocess.run(["ip", "netns", "add", netns_name], check=True)
    inproc_config = agent.AgentConfig(
        socket_path=root / "inproc.sock", cache_dir=root / "cache-inproc", bin_dirs=BIN_DIRS,
        conf_dir=root / "net.d", default_network=nets[0],
    )
    a = Running(agent.Agent(objects, inproc_config))
    with open(root / "agent.log", "wb") as agent_log:
        server = subprocess.Popen(agent_cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=agent_log)
    await a.start()
    try:
        await wait_for_socket(config.socket_path, server, root / "agent.log")
        direct_times, agent_times, inproc_times = [], [], []
        for i in range(warmup + iterations):
            d, s, p = await direct(i), await through_agent(i), await in_process(i)
            if i >= warmup:
                direct_times.append(d)
                agent_times.append(s)
                inproc_times.append(p)
        leftovers = [p for p in ipam_dir.rglob("*") if p.is_file() and p.name != "lock" and not p.name.startswith("last_")]
        assert not leftovers, f"IPAM reservations left: {leftovers}"
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        await a.stop()
        subprocess.run(["ip", "netns", "del", netns_name], check=False)
        for br in bridges:
            subprocess.run(["ip", "link", "del", br], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
    d_med, a_med = statistics.median(direct_times), statistics.median(agent_times)
    return {
        "iterations": iterations,
        "attachments": len(nets),
        "direct_median_ms": d_med * 1000,
        "agent_median_ms": a_med * 1000,
        "direct_mean_ms": statistics.mean(direct_times) * 1000,
        "agent_mean_ms": statistics.mean(agent_times) * 1000,
        "inproc_median_ms": statistics.median(inproc_times) * 1000,
        "inproc_mean_ms": statistics.mean(inproc_times) * 1000,
        "ratio": a_med / d_med,
        "overhead_per_attachment_ms": (a_med - d_med) * 1000 / len(nets),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "shim_python": shim_python,
    }


async def wait_for_socket(path: Path, server: subprocess.Popen[bytes], log: Path) -> None:
    """Until the agent process accepts connections (it binds, chmods, then listens)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"podnetwork cni-agent exited {server.returncode}: {log.read_text()[-2000:]}")
        try:
            _, writer = await asyncio.open_unix_connection(str(path))
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise RuntimeError(f"podnetwork cni-agent did not listen on {path} within 30 s")


def markdown(r: dict[str, Any]) -> str:
    return (
        f"| path | median ADD+DEL ({r['attachments']} attachments) | mean |\n"
        "| --- | --- | --- |\n"
        f"| plugins executed directly (baseline) | {r['direct_median_ms']:.1f} ms | {r['direct_mean_ms']:.1f} ms |\n"
        f"| shim -> agent (`podnetwork cni-agent` process) -> plugins | {r['agent_median_ms']:.1f} ms | {r['agent_mean_ms']:.1f} ms |\n"
        f"| agent in-process, no shim (`Agent.handle`) | {r['inproc_median_ms']:.1f} ms | {r['inproc_mean_ms']:.1f} ms |\n\n"
        f"Ratio agent/direct (medians): **{r['ratio']:.2f}** (target < 1.3). "
        f"Overhead per attachment: **{r['overhead_per_attachment_ms']:.1f} ms** "
        f"({r['iterations']} interleaved iterations, {r['cpus']} CPUs, Python {r['python']}, "
        f"shim run by {r['shim_python']})."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON too")
    parser.add_argument(
        "--shim-python",
        default="/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable,
        help="interpreter of the shim, as `podnetwork cni-agent --shim-python` (default: %(default)s, "
        "what deploy/agent uses)",
    )
    args = parser.parse_args()
    if os.geteuid() != 0 or not BIN_DIRS:
        print("bench_agent: needs root and the CNI plugins (apt-get install containernetworking-plugins)", file=sys.stderr)
        return 2
    result = asyncio.run(run(args.iterations, args.warmup, args.shim_python))
    print(markdown(result))
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
