"""The CNI agent against the plugins executed directly: ADD and DEL, 1-3 attachments, sequential and parallel.

What the issue (#13) asks a comparison to be, as deployed:

- the agent is its own process, `podnetwork cni-agent`, reading pods and NADs over
  HTTP from an API server and writing network-status through it, in a process of its
  own (this script run with `--serve-api`); the agent gets a kubeconfig, never
  `--objects`. By default the API is a small aiohttp server (GET by name, merge-patch
  of annotations) answering in ~0.5 ms, as the API the issue measured did (~1 ms);
  `--api kmock` serves kmock's emulator (`tests.api.kube_emulator.Emulator`) instead,
  which takes ~5 ms per request here and so measures mostly itself;
- the runtime side is the installed `multinetwork` shim executed as a runtime would
  (by the node's `/usr/bin/python3 -IS`, as in `deploy/agent`);
- the baseline is the same config lists executed directly, the way a runtime's
  libcni does (`bridge.agent.delegates.runner.Runner.add_list`/`delete_list`: one exec per plugin, IPAM
  chained by the plugin), in the same run, interleaved iteration by iteration (which
  path goes first alternates), on the same bridges and network namespaces.

Each pod has the cluster default network (a conflist file, `--default-network-conf`)
and 0, 1 or 2 more bridge networks (NADs `blue`, `red`): 1, 2, 3 attachments, each
`bridge` + `host-local`. Measured separately: ADD and DEL of one pod at a time, and
of 10 pods at once (each path's 10 ADDs, then 10 DELs, started together; the wall
time of the batch). Every ADD is checked to have made the interfaces it should (one
IPv4 address each), every DEL to have left no interface; at the end of each
scenario no IPAM reservation and no cache record is left, and every pod the agent
attached had its network-status list its attachments, then `[]` after its DEL.

Where an ADD's time goes: the agent logs each ADD's phases (`pod` read, `plan` with
its NAD reads, `cache` writes, `exec <ifname>` per attachment, `routes`, `status`
handed to the publisher), the publisher how long each write took after the answer;
the shim's own cost is a STATUS call through it (start, connect, request, the
agent's readiness check, answer, exit).

Last, the agent's RSS (VmRSS) before any pod and after 100, 250, 500 and 1,000 pods
(3 attachments each, ADD then DEL, 10 at a time). `--tls` serves the API over TLS (a
self-signed certificate made with openssl): a real API server is always TLS, and each of the
agent's connections (its watches, its pooled client) then holds its TLS state, asyncio's 256 KiB
read buffer among it; over plain HTTP the RSS is that much lower than a node's agent's.

`--compiled-shim` has the runtime run the compiled shim (what `podnetwork cni-agent
--install` installs by default, and the DaemonSet) instead of the Python one (the fallback); `--compare-shims` adds ADD/DEL of one
attachment through each, interleaved.

Needs root and the CNI plugins. Run:  sudo .venv/bin/python benchmarks/bench_agent.py  (or `make bench-agent`)
Prints Markdown for docs/benchmarks.md. Cleans up its netns, bridges, IPAM files and processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import secrets
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.api.kube_emulator, run as a script from anywhere

from bridge.agent.daemon import command  # noqa: E402
from bridge.agent.delegates import cache, conflist, invoke  # noqa: E402
from bridge.agent.delegates.invoke import Command, RuntimeArgs  # noqa: E402
from bridge.agent.delegates.records import Records  # noqa: E402
from bridge.agent.delegates.runner import Runner  # noqa: E402

BIN_DIRS = tuple(d for d in invoke.DEFAULT_BIN_DIRS if d.is_dir())
NAD_RESOURCE = "k8s.cni.cncf.io/v1/network-attachment-definitions"
POD_RESOURCE = "v1/pods"
STATUS = "k8s.v1.cni.cncf.io/network-status"
#: The small API's record of the network-status writes to one pod (`serve_small_api`).
STATUS_HISTORY = "/bench/network-status/"
PARALLEL = 10
SECONDARY = ("blue", "red")
RSS_MARKS = (100, 250, 500, 1000)
#: The node the benchmark's pods are bound to, and the agent's `--node-name` (hot-plug on, as the
#: DaemonSet runs it with NODE_NAME) unless `--no-hotplug`.
NODE_NAME = "bench-node"


# --- the API server process ------------------------------------------------------------------------


async def serve_api(seed: Path, url_file: Path) -> None:
    """kmock's emulator on a loopback port, seeded with the objects of `seed`; writes its URL."""
    import kmock

    from tests.api.kube_emulator import Emulator

    async with Emulator() as k, kmock.Server(k) as server:
        k.resources[POD_RESOURCE] = kmock.ResourceInfo(kind="Pod", namespaced=True, verbs={"get", "patch", "list"})
        k.resources[NAD_RESOURCE] = kmock.ResourceInfo(
            kind="NetworkAttachmentDefinition", namespaced=True, verbs={"get", "list"})
        for resource, obj in json.loads(seed.read_text()):
            meta = obj["metadata"]
            meta.setdefault("resourceVersion", "1")
            k.objects[resource, meta.get("namespace"), meta["name"]] = obj
        url_file.write_text(str(server.url))
        await asyncio.Event().wait()


def object_path(resource: str, obj: dict[str, Any]) -> str:
    """The API path of one object: `v1/pods` -> /api/v1/namespaces/NS/pods/NAME, a group's under /apis."""
    meta = obj["metadata"]
    *group_version, plural = resource.split("/")
    base = "/api/" if len(group_version) == 1 else "/apis/"
    where = f"namespaces/{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{base}{'/'.join(group_version)}/{where}{plural}/{meta['name']}"


def _collection(path: str) -> str:
    """An object's path -> its collection across namespaces (/apis/G/V/namespaces/NS/P/N -> /apis/G/V/P)."""
    parts = path.split("/")
    if "namespaces" in parts:
        i = parts.index("namespaces")
        parts = parts[:i] + parts[i + 2:]
    return "/".join(parts[:-1])


async def serve_small_api(seed: Path, url_file: Path) -> None:
    """The API as the issue measured it (answers in about 1 ms): GET of one object by name, and
    merge-patch of pod annotations (a None value removes the key), each write bumping
    `resourceVersion`; 404 as a Kubernetes Status. Collections are listed and watched (the
    agent's watch cache, and hot-plug's watch of its node's pods with a `spec.nodeName` field
    selector); a watch hears MODIFIED for each patch, as hot-plug hears the agent's own
    network-status writes on a real API server. And, for the benchmark's checks only, how many
    entries each network-status written to a pod had, in order, at `/bench/network-status/NS/NAME`
    (a DEL withdraws the ADD's, writing `[]`: the API no longer shows what the ADD wrote)."""
    from aiohttp import web

    store: dict[str, dict[str, Any]] = {}
    watchers: dict[str, list[tuple[str | None, asyncio.Queue[dict[str, Any]]]]] = {}
    written: dict[str, list[int]] = {}
    revision = 1

    def node_of(request: web.Request) -> str | None:
        selector = request.query.get("fieldSelector", "")
        return selector.removeprefix("spec.nodeName=") if selector.startswith("spec.nodeName=") else None

    def selected(obj: dict[str, Any], node: str | None) -> bool:
        return node is None or (obj.get("spec") or {}).get("nodeName") == node
    for resource, obj in json.loads(seed.read_text()):
        obj["metadata"].setdefault("resourceVersion", "1")
        store[object_path(resource, obj)] = obj

    def not_found(path: str) -> web.Response:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                  "code": 404, "message": f"{path} not found"}, status=404)

    async def get(request: web.Request) -> web.StreamResponse:
        if request.path.startswith(STATUS_HISTORY):
            ns, name = request.path.removeprefix(STATUS_HISTORY).split("/", 1)
            return web.json_response(written.get(f"/api/v1/namespaces/{ns}/pods/{name}", []))
        obj = store.get(request.path)
        if obj is not None:
            return web.json_response(obj)
        # A collection, across namespaces (the agent's watch cache): its objects, or a watch on
        # it, which stays quiet: nothing changes while the benchmark runs.
        node = node_of(request)
        items = [o for path, o in store.items() if _collection(path) == request.path and selected(o, node)]
        collection = "/namespaces/" not in request.path and request.path.count("/") == (
            3 if request.path.startswith("/api/") else 4)
        if not collection:
            return not_found(request.path)
        if request.query.get("watch"):
            stream = web.StreamResponse(headers={"Content-Type": "application/json"})
            stream.enable_chunked_encoding()
            await stream.prepare(request)
            queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            mine = (node, queue)
            watchers.setdefault(request.path, []).append(mine)
            try:
                async with asyncio.timeout(float(request.query.get("timeoutSeconds", "300"))):
                    while True:
                        event = await queue.get()
                        await stream.write(json.dumps(event).encode() + b"\n")
            except TimeoutError:
                pass
            finally:
                watchers[request.path].remove(mine)
            return stream
        return web.json_response({"kind": "List", "apiVersion": "v1",
                                  "metadata": {"resourceVersion": str(revision)}, "items": items})

    async def patch(request: web.Request) -> web.Response:
        nonlocal revision
        obj = store.get(request.path)
        if obj is None:
            return not_found(request.path)
        body = await request.json()
        annotations = obj["metadata"].setdefault("annotations", {})
        for key, value in ((body.get("metadata") or {}).get("annotations") or {}).items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
            if key == STATUS and isinstance(value, str):
                written.setdefault(request.path, []).append(len(json.loads(value)))
        revision += 1
        obj["metadata"]["resourceVersion"] = str(revision)
        for node, queue in watchers.get(_collection(request.path), []):
            if selected(obj, node):
                queue.put_nowait({"type": "MODIFIED", "object": obj})
        return web.json_response(obj)

    app = web.Application()
    app.router.add_get("/{tail:.*}", get)
    app.router.add_patch("/{tail:.*}", patch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tls = None
    if os.environ.get("BENCH_API_CERT"):  # --tls: as a real API server, each connection a TLS one
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(os.environ["BENCH_API_CERT"], os.environ["BENCH_API_KEY"])
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    url_file.write_text(f"{'https' if tls else 'http'}://127.0.0.1:{port}")
    await asyncio.Event().wait()


# --- the world ------------------------------------------------------------------------------------------


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def network(name: str, bridge: str, subnet: str, ipam_dir: Path, default: bool = False) -> dict[str, Any]:
    ipam: dict[str, Any] = {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": str(ipam_dir)}
    if default:
        ipam["routes"] = [{"dst": "0.0.0.0/0"}]
    plugin = {"type": "bridge", "bridge": bridge, "isGateway": True, "ipam": ipam}
    return {"cniVersion": "1.0.0", "name": name, "plugins": [plugin]}


def pod_object(name: str, attachments: int) -> dict[str, Any]:
    annotations = {"k8s.v1.cni.cncf.io/networks": ",".join(SECONDARY[: attachments - 1])} if attachments > 1 else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": secrets.token_hex(8),
                         "annotations": annotations},
            "spec": {"nodeName": NODE_NAME}, "status": {"phase": "Running"}}


@dataclass
class World:
    root: Path
    tag: str
    shim_python: str
    api: str
    agent_env: list[str] = field(default_factory=list)
    compiled_shim: bool = False
    compare_shims: bool = False
    no_hotplug: bool = False
    tls: bool = False
    ipam_dir: Path = field(init=False)
    bridges: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    nets: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    api_url: str = ""

    def __post_init__(self) -> None:
        self.ipam_dir = self.root / "ipam"
        octet = secrets.randbelow(200) + 20
        names = ("kubenet", *SECONDARY)
        self.bridges = [f"pn{self.tag}b{i}" for i in range(3)]
        # /16s: the RSS run keeps up to PARALLEL pods per path alive, host-local never reuses an
        # address at once, and 1,000 pods cycle through.
        self.nets = [network(n, b, f"10.{octet + i}.0.0/16", self.ipam_dir, default=(i == 0))
                     for i, (n, b) in enumerate(zip(names, self.bridges, strict=True))]
        self.lists = [conflist.load(n) for n in self.nets]
        self.socket = self.root / "agent.sock"
        self.cache_dir = self.root / "cache"
        self.shim = command.install_shim(self.root / "bin", self.shim_python,
                                        shim="compiled" if self.compiled_shim else "python")
        self.python_shim = command.install_shim(self.root / "pybin", self.shim_python)
        self.compiled = (command.install_shim(self.root / "cbin", self.shim_python, shim="compiled")
                         if self.compare_shims else None)
        self.runtime_conf = json.dumps({"cniVersion": "1.0.0", "name": "multinetwork", "type": "multinetwork",
                                        "socketPath": str(self.socket)}).encode()
        # The direct path: config lists run as a runtime's libcni runs them (no record is written).
        self.direct = Runner(invoke.SubprocessExec(), BIN_DIRS, 60, Records(cache.Cache(self.root / "direct")))

    def pod(self, name: str, attachments: int) -> str:
        self.pods.append(pod_object(name, attachments))
        return name

    def make_netns(self) -> str:
        name = f"pnbench-{self.tag}-{len(self.netns)}"
        run("ip", "netns", "add", name)
        self.netns.append(name)
        return f"/var/run/netns/{name}"

    # --- processes ---

    async def start(self, agent_args: list[str]) -> None:
        seed = self.root / "seed.json"
        objects: list[tuple[str, dict[str, Any]]] = [
            (NAD_RESOURCE, {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                            "metadata": {"name": n["name"], "namespace": "default"},
                            "spec": {"config": json.dumps(n)}})
            for n in self.nets[1:]
        ] + [(POD_RESOURCE, p) for p in self.pods]
        seed.write_text(json.dumps(objects))
        url_file = self.root / "api-url"
        api_log = open(self.root / "api.log", "wb")  # noqa: SIM115 (lives as long as the process)
        api_env = dict(os.environ)
        if self.tls:
            api_env.update(self.make_certificate())
        self.processes.append(subprocess.Popen(
            [sys.executable, __file__, "--serve-api", self.api, str(seed), str(url_file)],
            stdin=subprocess.DEVNULL, stdout=api_log, stderr=api_log, env=api_env))
        deadline = time.monotonic() + 60
        while not url_file.exists() or not url_file.read_text():
            if self.processes[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the API server did not start: {(self.root / 'api.log').read_text()[-2000:]}")
            await asyncio.sleep(0.05)
        self.api_url = url_file.read_text().rstrip("/")
        from tests.api.kube_emulator import write_kubeconfig

        kubeconfig = write_kubeconfig(self.root / "kubeconfig", self.api_url)
        if self.tls:  # the server's self-signed certificate is its own authority
            config = yaml.safe_load(kubeconfig.read_text())
            config["clusters"][0]["cluster"]["certificate-authority"] = str(self.root / "tls" / "api.crt")
            kubeconfig.write_text(yaml.safe_dump(config))
        default_conf = self.root / "default.conflist"
        default_conf.write_text(json.dumps(self.nets[0]))
        agent_cmd = [
            str(Path(sys.executable).with_name("podnetwork")), "-v", "cni-agent", "--kubeconfig", str(kubeconfig),
            "--socket", str(self.socket), "--cache-dir", str(self.cache_dir),
            "--cni-conf-dir", str(self.root / "net.d"), "--default-network-conf", str(default_conf),
            "--cni-bin-dir", os.pathsep.join(map(str, BIN_DIRS)),
            *([] if self.no_hotplug else ["--node-name", NODE_NAME]), *agent_args,
        ]
        self.agent_log = self.root / "agent.log"
        env = {**os.environ, **dict(e.split("=", 1) for e in self.agent_env)}
        env.pop("NODE_NAME", None)  # hot-plug on or off as asked, whatever this shell has
        with open(self.agent_log, "wb") as log:
            self.agent = subprocess.Popen(agent_cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        self.processes.append(self.agent)
        await self.wait_for_socket()

    def make_certificate(self) -> dict[str, str]:
        """A self-signed certificate for 127.0.0.1 (openssl), as the API server's environment."""
        where = self.root / "tls"
        where.mkdir()
        run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(where / "api.key"), "-out", str(where / "api.crt"))
        return {"BENCH_API_CERT": str(where / "api.crt"), "BENCH_API_KEY": str(where / "api.key")}

    async def wait_for_socket(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.agent.poll() is not None:
                raise RuntimeError(f"podnetwork cni-agent exited {self.agent.returncode}: "
                                   f"{self.agent_log.read_text()[-2000:]}")
            try:
                _, writer = await asyncio.open_unix_connection(str(self.socket))
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            return
        raise RuntimeError(f"podnetwork cni-agent did not listen on {self.socket} within 60 s")

    def cpu_seconds(self) -> float:
        """CPU time of the agent process so far (user + system, not its children's)."""
        fields = Path(f"/proc/{self.agent.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.agent.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def tcp_connections(self) -> int:
        """The agent's TCP connections now (to the API server: its watches, its pooled client)."""
        listed = run("ss", "-tnp", check=False).stdout.splitlines()
        return sum(1 for line in listed if f"pid={self.agent.pid}," in line)

    def cleanup(self) -> None:
        for proc in reversed(self.processes):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for ns in self.netns:
            run("ip", "netns", "del", ns, check=False)
        for br in self.bridges:
            run("ip", "link", "del", br, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    # --- the two paths ---

    def cni_args(self, pod: str) -> tuple[tuple[str, str], ...]:
        return (("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "default"), ("K8S_POD_NAME", pod))

    async def direct_add(self, container: str, netns: str, pod: str, attachments: int) -> list[dict[str, Any]]:
        results = []
        for i, cl in enumerate(self.lists[:attachments]):
            args = RuntimeArgs(Command.ADD, container, netns, "eth0" if i == 0 else f"net{i}", self.cni_args(pod))
            results.append(await self.direct.add_list(cl, args))
        return results

    async def direct_del(self, container: str, netns: str, pod: str, attachments: int,
                         results: list[dict[str, Any]]) -> None:
        for i in reversed(range(attachments)):
            args = RuntimeArgs(Command.DEL, container, netns, "eth0" if i == 0 else f"net{i}", self.cni_args(pod))
            await self.direct.delete_list(self.lists[i], args, results[i])

    async def call(self, cmd: str, container: str, netns: str, pod: str, shim: Path | None = None) -> bytes:
        env = {"PATH": os.environ.get("PATH", ""), "CNI_COMMAND": cmd, "CNI_CONTAINERID": container,
               "CNI_NETNS": netns, "CNI_IFNAME": "eth0", "CNI_PATH": str(self.shim.parent),
               "CNI_ARGS": invoke.format_cni_args(self.cni_args(pod))}
        proc = await asyncio.create_subprocess_exec(str(shim or self.shim), env=env, stdin=-1, stdout=-1, stderr=-1)
        out, _ = await proc.communicate(self.runtime_conf)
        if proc.returncode != 0:
            raise RuntimeError(f"shim {cmd} {container} failed: {out.decode()}")
        return out

    # --- checks (never timed) ---

    def check_attached(self, netns: str, attachments: int) -> None:
        links = json.loads(run("ip", "-n", Path(netns).name, "-j", "-4", "addr", "show").stdout or "[]")
        got = {link["ifname"]: [a["local"] for a in link.get("addr_info", [])] for link in links
               if link["ifname"] != "lo"}
        want = ["eth0", *(f"net{i}" for i in range(1, attachments))]
        if sorted(got) != sorted(want) or any(len(got[i]) != 1 for i in want):
            raise AssertionError(f"{netns}: expected {want} with one IPv4 address each, found {got}")

    def check_detached(self, netns: str) -> None:
        links = json.loads(run("ip", "-n", Path(netns).name, "-j", "link", "show").stdout or "[]")
        left = [link["ifname"] for link in links if link["ifname"] != "lo"]
        if left:
            raise AssertionError(f"{netns}: interfaces left after DEL: {left}")

    def check_nothing_left(self) -> None:
        reservations = [p for p in self.ipam_dir.rglob("*")
                        if p.is_file() and p.name != "lock" and not p.name.startswith("last_")]
        records = list(self.cache_dir.glob("*.jsonl"))
        ports = [p for br in self.bridges
                 for p in json.loads(run("ip", "-j", "link", "show", "master", br, check=False).stdout or "[]")]
        if reservations or records or ports:
            raise AssertionError(f"left behind: IPAM {reservations}, cache {records}, bridge ports {ports}")

    async def check_status(self, pods: dict[str, int]) -> None:
        """Every pod the agent attached had its attachments in network-status, and its DEL then
        withdrew them (`[]`); both written after the answers, so waited for: up to 30 s. The small
        API keeps the count of entries of each write; with kmock only the DEL's `[]` is seen."""
        import aiohttp

        deadline = time.monotonic() + 30
        verify = ssl.create_default_context(cafile=str(self.root / "tls" / "api.crt")) if self.tls else None
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=verify if verify else True)) as session:
            for pod, attachments in pods.items():
                while True:
                    async with session.get(f"{self.api_url}/api/v1/namespaces/default/pods/{pod}") as resp:
                        body = await resp.json()
                    text = (body["metadata"].get("annotations") or {}).get(STATUS)
                    history = [attachments, 0]
                    if self.api == "small":
                        async with session.get(f"{self.api_url}{STATUS_HISTORY}default/{pod}") as resp:
                            history = await resp.json()
                    if text == "[]" and attachments in history and history[-1] == 0:
                        break
                    if time.monotonic() > deadline:
                        raise AssertionError(f"pod {pod}: network-status {text!r} (entries written: {history}), "
                                             f"expected {attachments} entries, then [] after its DEL")
                    await asyncio.sleep(0.05)


# --- the scenarios ----------------------------------------------------------------------------------------


@dataclass
class Series:
    add: list[float] = field(default_factory=list)
    delete: list[float] = field(default_factory=list)


async def timed(work: Awaitable[Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = await work
    return time.perf_counter() - start, value


async def sequential(w: World, attachments: int, iterations: int, warmup: int,
                     names: list[str]) -> tuple[Series, Series]:
    direct, agent = Series(), Series()
    netns = w.make_netns()

    async def via_direct(i: int, pod: str) -> tuple[float, float]:
        container = f"d{attachments}s{i}"
        t_add, results = await timed(w.direct_add(container, netns, pod, attachments))
        w.check_attached(netns, attachments)
        t_del, _ = await timed(w.direct_del(container, netns, pod, attachments, results))
        w.check_detached(netns)
        return t_add, t_del

    async def via_agent(i: int, pod: str) -> tuple[float, float]:
        container = f"a{attachments}s{i}"
        t_add, _ = await timed(w.call("ADD", container, netns, pod))
        w.check_attached(netns, attachments)
        t_del, _ = await timed(w.call("DEL", container, netns, pod))
        w.check_detached(netns)
        return t_add, t_del

    for i in range(warmup + iterations):
        if i % 2 == 0:
            d, a = await via_direct(i, names[i]), await via_agent(i, names[i])
        else:
            a, d = await via_agent(i, names[i]), await via_direct(i, names[i])
        if i >= warmup:
            for series, (t_add, t_del) in ((direct, d), (agent, a)):
                series.add.append(t_add)
                series.delete.append(t_del)
    await w.check_status({n: attachments for n in names[: warmup + iterations]})
    w.check_nothing_left()
    return direct, agent


async def parallel(w: World, attachments: int, rounds: int, names: list[list[str]],
                   spaces: list[str]) -> tuple[Series, Series]:
    direct, agent = Series(), Series()

    async def via_direct(r: int, pods: list[str]) -> tuple[float, float]:
        containers = [f"d{attachments}p{r}x{j}" for j in range(PARALLEL)]
        t_add, results = await timed(asyncio.gather(*(
            w.direct_add(c, ns, p, attachments) for c, ns, p in zip(containers, spaces, pods, strict=True))))
        for ns in spaces:
            w.check_attached(ns, attachments)
        t_del, _ = await timed(asyncio.gather(*(
            w.direct_del(c, ns, p, attachments, res)
            for c, ns, p, res in zip(containers, spaces, pods, results, strict=True))))
        for ns in spaces:
            w.check_detached(ns)
        return t_add, t_del

    async def via_agent(r: int, pods: list[str]) -> tuple[float, float]:
        containers = [f"a{attachments}p{r}x{j}" for j in range(PARALLEL)]
        t_add, _ = await timed(asyncio.gather(*(
            w.call("ADD", c, ns, p) for c, ns, p in zip(containers, spaces, pods, strict=True))))
        for ns in spaces:
            w.check_attached(ns, attachments)
        t_del, _ = await timed(asyncio.gather(*(
            w.call("DEL", c, ns, p) for c, ns, p in zip(containers, spaces, pods, strict=True))))
        for ns in spaces:
            w.check_detached(ns)
        return t_add, t_del

    for r in range(rounds):
        if r % 2 == 0:
            d, a = await via_direct(r, names[r]), await via_agent(r, names[r])
        else:
            a, d = await via_agent(r, names[r]), await via_direct(r, names[r])
        for series, (t_add, t_del) in ((direct, d), (agent, a)):
            series.add.append(t_add)
            series.delete.append(t_del)
    await w.check_status({p: attachments for batch in names for p in batch})
    w.check_nothing_left()
    return direct, agent


async def shim_overhead(w: World, iterations: int) -> list[float]:
    """STATUS through the shim: its start, connect, request, the agent's readiness check (the
    default network's file and plugins, ~0.2 ms), answer, exit. (VERSION would not reach the agent,
    and the compiled shim hands it to the Python one.)"""
    times = []
    for _ in range(iterations):
        t, _ = await timed(w.call("STATUS", "", "", "x"))
        times.append(t)
    return times


async def compare_shims(w: World, iterations: int, names: list[str]) -> dict[str, dict[str, float]]:
    """ADD and DEL of one attachment through the Python shim and through the compiled one, interleaved."""
    netns = w.make_netns()
    times: dict[str, dict[str, list[float]]] = {"python": {"add": [], "del": []}, "compiled": {"add": [], "del": []}}
    assert w.compiled is not None
    if w.compiled.read_bytes()[:4] != b"\x7fELF":
        raise RuntimeError("the compiled shim was not built (no C compiler?): nothing to compare")
    for i, pod in enumerate(names[:iterations]):
        order = (("python", w.python_shim), ("compiled", w.compiled))
        for label, shim in order if i % 2 == 0 else reversed(order):
            container = f"cmp{label[0]}{i}"
            t_add, _ = await timed(w.call("ADD", container, netns, pod, shim))
            w.check_attached(netns, 1)
            t_del, _ = await timed(w.call("DEL", container, netns, pod, shim))
            w.check_detached(netns)
            times[label]["add"].append(t_add)
            times[label]["del"].append(t_del)
    w.check_nothing_left()
    return {label: {op: med(ts) for op, ts in ops.items()} for label, ops in times.items()}


async def rss_run(w: World, names: list[str], spaces: list[str]) -> list[tuple[int, int]]:
    marks = [(0, w.rss_kib())]
    for start in range(0, len(names), PARALLEL):
        batch = names[start:start + PARALLEL]
        containers = [f"rss{start + j}" for j in range(len(batch))]
        await asyncio.gather(*(w.call("ADD", c, ns, p) for c, ns, p in zip(containers, spaces, batch, strict=False)))
        await asyncio.gather(*(w.call("DEL", c, ns, p) for c, ns, p in zip(containers, spaces, batch, strict=False)))
        done = start + len(batch)
        if done in RSS_MARKS:
            marks.append((done, w.rss_kib()))
    for ns in spaces:
        w.check_detached(ns)
    w.check_nothing_left()
    return marks


# --- the agent's log: per-phase breakdown -----------------------------------------------------------------

_DONE = re.compile(r"ADD container (\S+) \(pod \S+\) done in ([\d.]+) ms \((.*)\)$")
_WRITTEN = re.compile(r"pod default/(\S+): network-status written in ([\d.]+) ms")


def phases_from_log(text: str, prefix: str) -> tuple[dict[str, float], float, float | None]:
    """Median per phase (ms), median total, median status write after the answer, over ADDs of
    containers whose ID starts with `prefix`."""
    spans: dict[str, list[float]] = {}
    totals: list[float] = []
    pods: set[str] = set()
    for line in text.splitlines():
        m = _DONE.search(line)
        if not m or not m.group(1).startswith(prefix):
            continue
        totals.append(float(m.group(2)))
        for part in filter(None, m.group(3).split(", ")):
            name, value = part.rsplit(" ", 1)
            spans.setdefault(name, []).append(float(value))
        pod = re.search(r"\(pod default/(\S+)\)", line)
        if pod:
            pods.add(pod.group(1))
    writes = [float(m.group(2)) for line in text.splitlines() if (m := _WRITTEN.search(line)) and m.group(1) in pods]
    return ({k: statistics.median(v) for k, v in spans.items()}, statistics.median(totals) if totals else 0.0,
            statistics.median(writes) if writes else None)


# --- main ---------------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    w = World(Path(tempfile.mkdtemp(prefix="pn-bench-agent-")), secrets.token_hex(3), args.shim_python, args.api,
              args.agent_env, args.compiled_shim, args.compare_shims, args.no_hotplug, args.tls)
    counts = (1, 2, 3)
    seq_names = {k: [w.pod(f"s{k}-{i}", k) for i in range(args.warmup + args.iterations)] for k in counts}
    par_names = {k: [[w.pod(f"p{k}-{r}-{j}", k) for j in range(PARALLEL)] for r in range(args.rounds)]
                 for k in counts}
    rss_names = [w.pod(f"r-{i}", 3) for i in range(args.rss_pods)]
    cmp_names = [w.pod(f"c-{i}", 1) for i in range(args.iterations if args.compare_shims else 0)]
    result: dict[str, Any] = {"sequential": {}, "parallel": {}, "phases": {}, "cpu_ms": {}}
    # The direct path waits for its plugins the way the agent does (a pidfd on the event loop),
    # so neither is charged the thread per child of Python 3.11's default.
    command.watch_children_by_pidfd()
    try:
        await w.start(args.agent_arg)
        result["load_before"] = os.getloadavg()[0]
        result["rss_idle_kib"] = w.rss_kib()
        result["api_connections"] = w.tcp_connections()
        result["shim_version_ms"] = statistics.median(await shim_overhead(w, 20)) * 1000
        for k in counts:
            cpu = w.cpu_seconds()
            d, a = await sequential(w, k, args.iterations, args.warmup, seq_names[k])
            result["sequential"][k] = {"direct": d.__dict__, "agent": a.__dict__}
            result["cpu_ms"][k] = (w.cpu_seconds() - cpu) * 1000 / (args.iterations + args.warmup)
        spaces = [w.make_netns() for _ in range(PARALLEL)]
        for k in counts:
            d, a = await parallel(w, k, args.rounds, par_names[k], spaces)
            result["parallel"][k] = {"direct": d.__dict__, "agent": a.__dict__}
        log_text = w.agent_log.read_text()
        for k in counts:
            spans, total, write = phases_from_log(log_text, f"a{k}s")
            result["phases"][k] = {"spans": spans, "total": total, "status_write_after_answer": write}
        if args.compare_shims:
            result["shims"] = await compare_shims(w, args.iterations, cmp_names)
        if args.rss_pods:
            result["rss_kib"] = await rss_run(w, rss_names, spaces)
        result["load_after"] = os.getloadavg()[0]
    finally:
        w.cleanup()
    return result


def med(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def markdown(r: dict[str, Any], args: argparse.Namespace) -> str:
    out = [f"Sequential: {args.iterations} pods per row after {args.warmup} warm-ups; parallel: {args.rounds} "
           f"rounds of {PARALLEL} pods at once. Medians; ratio = agent / direct, same run, interleaved.", "",
           "| attachments | direct ADD | agent ADD | ADD ratio | direct DEL | agent DEL | DEL ratio |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k, row in r["sequential"].items():
        d, a = row["direct"], row["agent"]
        out.append(f"| {k} | {med(d['add']):.1f} ms | {med(a['add']):.1f} ms | **{med(a['add']) / med(d['add']):.2f}** "
                   f"| {med(d['delete']):.1f} ms | {med(a['delete']):.1f} ms "
                   f"| **{med(a['delete']) / med(d['delete']):.2f}** |")
    out += ["", f"| attachments | {PARALLEL} ADDs at once, direct | agent | ADD ratio | {PARALLEL} DELs, direct "
            "| agent | DEL ratio |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k, row in r["parallel"].items():
        d, a = row["direct"], row["agent"]
        out.append(f"| {k} | {med(d['add']):.1f} ms | {med(a['add']):.1f} ms | **{med(a['add']) / med(d['add']):.2f}** "
                   f"| {med(d['delete']):.1f} ms | {med(a['delete']):.1f} ms "
                   f"| **{med(a['delete']) / med(d['delete']):.2f}** |")
    names = sorted({n for p in r["phases"].values() for n in p["spans"]},
                   key=lambda n: (["pod", "plan", "cache"].index(n) if n in ("pod", "plan", "cache") else 3, n))
    out += ["", "Where a sequential ADD's time goes (medians, ms; `exec <ifname>` is one attachment's plugins):", "",
            "| phase | " + " | ".join(f"{k} attachment(s)" for k in r["phases"]) + " |",
            "| --- |" + " ---: |" * len(r["phases"])]
    out.append("| shim start + request + answer + exit (STATUS through the shim) |"
               + f" {r['shim_version_ms']:.2f} |" * len(r["phases"]))
    for n in names:
        out.append(f"| {n} |" + "".join(f" {p['spans'].get(n, 0.0):.2f} |" for p in r["phases"].values()))
    out.append("| agent's whole ADD (its log) |" + "".join(f" {p['total']:.2f} |" for p in r["phases"].values()))
    out.append("| agent ADD through the shim (above) |"
               + "".join(f" {med(r['sequential'][k]['agent']['add']):.2f} |" for k in r["phases"]))
    out.append("| CPU of the agent process per pod (ADD + DEL, its own, not its plugins') |"
               + "".join(f" {r['cpu_ms'][k]:.2f} |" for k in r["phases"]))
    out.append("| network-status write, after the answer (not in the ADD) |" + "".join(
        f" {p['status_write_after_answer']:.2f} |" if p["status_write_after_answer"] is not None else " - |"
        for p in r["phases"].values()))
    if "shims" in r:
        py, cc = r["shims"]["python"], r["shims"]["compiled"]
        out += ["", "The shim: ADD and DEL of one attachment through the Python shim and the compiled one "
                "(`--compiled-shim`), interleaved, medians:", "",
                "| shim | ADD | DEL |", "| --- | ---: | ---: |",
                f"| Python (`-IS`) | {py['add']:.2f} ms | {py['del']:.2f} ms |",
                f"| compiled | {cc['add']:.2f} ms | {cc['del']:.2f} ms |",
                f"| gain per call | {py['add'] - cc['add']:.2f} ms | {py['del'] - cc['del']:.2f} ms |"]
    if "rss_kib" in r:
        out += ["", "Agent RSS (VmRSS) by pods attached and detached so far (3 attachments each, 10 at a time):", "",
                "| pods | " + " | ".join(str(n) for n, _ in r["rss_kib"]) + " |",
                "| --- |" + " ---: |" * len(r["rss_kib"]),
                "| RSS |" + "".join(f" {kib / 1024:.1f} MB |" for _, kib in r["rss_kib"])]
    out += ["", f"Idle RSS after start: {r['rss_idle_kib'] / 1024:.1f} MB. {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, {'compiled shim' if args.compiled_shim else 'shim run by ' + args.shim_python}; load average {r['load_before']:.2f} "
            f"before, {r['load_after']:.2f} after. Agent: hot-plug {'off' if args.no_hotplug else 'on'}"
            f"{', ' + ' '.join(args.agent_arg) if args.agent_arg else ''}; address watch, watch cache as the flags say "
            f"(on by default); API over {'TLS' if args.tls else 'plain HTTP'}, {r['api_connections']} TCP "
            "connections of the agent's at idle."]
    return "\n".join(out)


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve-api":
        serve = serve_api if sys.argv[2] == "kmock" else serve_small_api
        asyncio.run(serve(Path(sys.argv[3]), Path(sys.argv[4])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--iterations", type=int, default=40, help="sequential pods per row (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=8, help=f"rounds of {PARALLEL} pods at once (default: %(default)s)")
    parser.add_argument("--rss-pods", type=int, default=1000, help="pods for the RSS run, 0 to skip (default: %(default)s)")
    parser.add_argument(
        "--api", choices=("small", "kmock"), default="small",
        help="the API server process: a small aiohttp one answering in ~0.5 ms (default), or kmock's "
        "emulator (~5 ms per request here)")
    parser.add_argument("--compiled-shim", action="store_true",
                        help="the runtime runs the compiled shim (`podnetwork cni-agent --compiled-shim`); "
                        "default: the Python shim, which `--install` installs only where the compiled one "
                        "cannot be had")
    parser.add_argument("--compare-shims", action="store_true",
                        help="also time ADD/DEL of one attachment through the Python and the compiled shim")
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON too")
    parser.add_argument("--agent-env", action="append", default=[], metavar="NAME=VALUE",
                        help="one more environment variable for podnetwork cni-agent (e.g. PYTHONPATH=DIR to "
                        "measure an older checkout of the agent)")
    parser.add_argument("--agent-arg", action="append", default=[], help="one more argument for podnetwork cni-agent")
    parser.add_argument("--tls", action="store_true",
                        help="serve the API over TLS (a self-signed certificate, openssl): as a real API server, "
                             "each of the agent's connections holds its TLS state (the small API only)")
    parser.add_argument("--no-hotplug", action="store_true",
                        help=f"run the agent without --node-name (hot-plug off); default: --node-name {NODE_NAME}, "
                        "as the DaemonSet runs it")
    parser.add_argument(
        "--shim-python",
        default="/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable,
        help="interpreter of the shim, as `podnetwork cni-agent --shim-python` (default: %(default)s, "
        "what deploy/agent uses)",
    )
    parser.add_argument(
        "--cni-bin-dir", type=Path, action="append", default=None, metavar="DIR",
        help="where both paths take the plugins from, repeatable (default: those of "
        f"{', '.join(map(str, invoke.DEFAULT_BIN_DIRS))} that exist; on a machine where a cluster's set-up "
        "rewrites /opt/cni/bin, --cni-bin-dir /usr/lib/cni keeps the plugins still during the run)")
    args = parser.parse_args()
    if args.tls and args.api != "small":
        parser.error("--tls serves the small API only")
    if args.cni_bin_dir:
        global BIN_DIRS
        BIN_DIRS = tuple(args.cni_bin_dir)
    if os.geteuid() != 0 or not BIN_DIRS:
        print("bench_agent: needs root and the CNI plugins (apt-get install containernetworking-plugins)", file=sys.stderr)
        return 2
    result = asyncio.run(bench(args))
    print(markdown(result, args))
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
