"""A node in a network namespace of the test, with the upstream netpol pods on real bridges.

`Node` stands, for one test (or one module of tests):

- a NODE namespace of its own (`pnnp-<tag>-node`): only `lo`, the bridges of the pods'
  networks and the pods' veths, and no default route. The bridge plugin turns
  `ip_forward` on in it (the setting is per namespace), so a pod's packet to a ClusterIP
  or any address outside the test's subnets reaches the node namespace and dies there
  (no route). `Node.assert_sealed()` checks that, and the fixtures call it before and
  after the test: no packet of a test can leave the machine.
- the upstream NetworkPolicy e2e topology: namespaces x, y, z, pods a, b, c, each pod a
  network namespace (`pnnp-<tag>-x-a`) with `eth0` (the cluster default network, the
  pods' default route), `net1` and optionally `net2`, each attached by the REAL bridge
  and host-local plugins (run inside the node namespace; IPAM files in a dataDir of the
  node's temporary directory), each network on its own bridge and /24;
- in each pod, `netpol_pod_support.py`: servers on TCP and UDP 80 and 81 (SCTP when the
  kernel has it) and a client, for `Node.probe`, which measures the whole matrix source
  pod -> destination pod x protocol/port with real sockets, every probe of every pod at
  once (a dropped packet costs one time-out for all), refusals confirmed once with a
  longer time-out so that a slow machine does not read as a policy.

`Node.close()` (the fixtures run it even when the test fails) stops the pods' programs and
deletes every namespace, which takes the bridges, veths and nftables tables with it, then
the temporary directory (IPAM files); `Node.leftovers()` lists what would remain.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.netns import nftables
from tests.cni.netpol_pod_support import sctp_unavailable

PREFIX = "pnnp-"
"""Every namespace of this harness starts with it (then a random tag): parallel runs do not clash."""

NAMESPACES = ("x", "y", "z")
POD_NAMES = ("a", "b", "c")
PORTS = (80, 81)
CNI_VERSION = "1.0.0"
POD_PROGRAM = Path(__file__).with_name("netpol_pod_support.py")

#: Each network: the pod's interface name -> its bridge in the node namespace and its /24.
#: The subnets exist only in the node namespace and the pods, so fixed ones do not clash.
NETWORKS: dict[str, tuple[str, str]] = {
    "eth0": ("pnbr0", "10.200.0.0/24"),
    "net1": ("pnbr1", "10.200.1.0/24"),
    "net2": ("pnbr2", "10.200.2.0/24"),
}


@dataclass(frozen=True, order=True)
class Probe:
    """One kind of connection: a protocol and a destination port (0 for ICMP)."""

    protocol: str
    port: int = 0

    def __str__(self) -> str:
        return f"{self.protocol}/{self.port}" if self.protocol != "ICMP" else "ICMP"


TCP80, TCP81, UDP80, UDP81 = Probe("TCP", 80), Probe("TCP", 81), Probe("UDP", 80), Probe("UDP", 81)
SCTP80, SCTP81 = Probe("SCTP", 80), Probe("SCTP", 81)
ICMP = Probe("ICMP")
DEFAULT_PROBES = (TCP80, TCP81, UDP80, UDP81, ICMP)


@dataclass(frozen=True)
class Pod:
    """One pod of the topology, with what a policy reads of it (upstream's labels and port names)."""

    namespace: str
    name: str
    netns: str
    """The namespace's name under /var/run/netns."""
    addresses: Mapping[str, str]
    """Interface (eth0, net1, net2) -> its IPv4 address, no prefix length."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def path(self) -> str:
        """Its network namespace as CNI_NETNS names it."""
        return f"/var/run/netns/{self.netns}"

    @property
    def labels(self) -> dict[str, str]:
        return {"pod": self.name}

    @property
    def namespace_labels(self) -> dict[str, str]:
        return {"ns": self.namespace}

    @property
    def container_ports(self) -> list[dict[str, Any]]:
        """The named ports of upstream's netpol pods: serve-80-tcp, serve-81-udp, ..."""
        return [{"name": f"serve-{port}-{proto.lower()}", "containerPort": port, "protocol": proto}
                for proto in ("TCP", "UDP", "SCTP") for port in PORTS]


Key = tuple[str, str, Probe]
"""(source pod key, destination pod key, probe)."""


@dataclass
class Matrix:
    """Source pod -> destination pod x probe -> connected, for the pods and probes measured."""

    pods: list[str]
    probes: list[Probe]
    connected: dict[Key, bool]

    @classmethod
    def expect(cls, pods: Sequence[str], probes: Sequence[Probe], allowed: Callable[[str, str, Probe], bool]) -> Matrix:
        return cls(list(pods), list(probes), {(s, d, p): allowed(s, d, p) for s in pods for d in pods for p in probes})

    def diff(self, expected: Matrix) -> str:
        """'' when both agree; else, per probe that differs, the grid of this matrix with the wrong cells marked."""
        parts = []
        for probe in self.probes:
            wrong = [k for k in self.connected if k[2] == probe and self.connected[k] != expected.connected.get(k)]
            if wrong:
                parts.append(f"{probe}: {len(wrong)} wrong (X: connected, .: not; !: not what was expected)\n"
                             + self.grid(probe, marked=set(wrong)))
        return "\n".join(parts)

    def grid(self, probe: Probe, marked: set[Key] | frozenset[Key] = frozenset()) -> str:
        width = max(len(p) for p in self.pods)
        lines = [" " * width + " -> " + " ".join(f"{d:>{width}}" for d in self.pods)]
        for src in self.pods:
            cells = []
            for dst in self.pods:
                key = (src, dst, probe)
                mark = ("X" if self.connected[key] else ".") + ("!" if key in marked else "")
                cells.append(f"{mark:>{width}}")
            lines.append(f"{src:>{width}}    " + " ".join(cells))
        return "\n".join(lines)


@dataclass
class _Program:
    """A pod's netpol_pod_support.py process."""

    proc: subprocess.Popen[str]

    def send(self, request: Mapping[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"a pod's program ended (exit code {self.proc.poll()}): {self._stderr()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, request: Mapping[str, Any]) -> dict[str, Any]:
        self.send(request)
        return self.receive()

    def _stderr(self) -> str:
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=2)
            assert self.proc.stderr is not None
            return self.proc.stderr.read()[-2000:]
        return "(no stderr)"

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def run(*argv: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()} {proc.stdout.strip()}")
    return proc


def nft_or_skip() -> None:
    """The `nft` program, or the test's end: skipped with the reason, failed in CI (`make test` installs it)."""
    if shutil.which("nft") is None:
        reason = "needs nftables (`nft`): apt-get install nftables (make system-deps)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@dataclass
class Node:
    """The node namespace, its networks and the x/y/z x a/b/c pods; see the module's docstring."""

    bin_dir: Path
    networks: tuple[str, ...] = ("eth0", "net1")
    namespaces: tuple[str, ...] = NAMESPACES
    pod_names: tuple[str, ...] = POD_NAMES
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pnnp-node-")))
    pods: dict[str, Pod] = field(default_factory=dict)
    sctp_unavailable: str = ""
    """'' when the pods' kernel makes SCTP sockets, else why not (see `sctp_or_skip`)."""
    _netns: list[str] = field(default_factory=list)
    _programs: dict[str, _Program] = field(default_factory=dict)

    # --- standing it up and taking it down -----------------------------------------------------

    @property
    def node_netns(self) -> str:
        return f"{PREFIX}{self.tag}-node"

    def start(self) -> Node:
        """Creates everything; on any failure removes what it made and raises."""
        try:
            self._add_netns(self.node_netns)
            run("ip", "-n", self.node_netns, "link", "set", "lo", "up")
            keys = [(ns, name) for ns in self.namespaces for name in self.pod_names]
            for ns, name in keys:
                self._add_netns(self._pod_netns(ns, name))
                # The kubelet's loopback plugin: a pod reaches itself over lo, policies or not.
                run("ip", "-n", self._pod_netns(ns, name), "link", "set", "lo", "up")
            # The first pod creates the bridges and their gateway addresses; the plugin does not
            # expect two of itself to create one bridge at once, so the others follow in parallel.
            if keys:
                self._attach(*keys[0])
            with ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(lambda k: self._attach(*k), keys[1:]))
            self.pods = {f"{ns}/{name}": self.pods[f"{ns}/{name}"] for ns, name in keys}
            for key in self.pods:
                self._start_program(key)
            for program in self._programs.values():
                ready = program.receive()
                self.sctp_unavailable = ready["sctp"]
            self.assert_sealed()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Removes everything this node made; safe to call twice and after a partial start."""
        for program in self._programs.values():
            program.stop()
        self._programs.clear()
        for name in reversed(self._netns):
            run("ip", "netns", "del", name, check=False)
        self._netns.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """This node's network namespaces still present, and its temporary directory if it is."""
        names = run("ip", "netns", "list").stdout.split()
        left = [n for n in names if n.startswith(f"{PREFIX}{self.tag}-")]
        return left + ([str(self.root)] if self.root.exists() else [])

    # --- pods attached by someone else (the agent, through its shim) ------------------------------

    def new_pod_netns(self, namespace: str, name: str) -> str:
        """A pod's network namespace (with `lo` up), for an ADD to attach; its CNI_NETNS path."""
        netns = self._pod_netns(namespace, name)
        self._add_netns(netns)
        run("ip", "-n", netns, "link", "set", "lo", "up")
        return f"/var/run/netns/{netns}"

    def join(self, namespace: str, name: str, addresses: Mapping[str, str]) -> Pod:
        """A pod attached elsewhere (`addresses`: interface -> IPv4) joins the probes: its servers and
        client start in its namespace."""
        key = f"{namespace}/{name}"
        self.pods[key] = Pod(namespace, name, self._pod_netns(namespace, name), dict(addresses))
        self._start_program(key)
        self.sctp_unavailable = self._programs[key].receive()["sctp"]
        return self.pods[key]

    def plugin_config(self, ifname: str) -> dict[str, Any]:
        """The bridge + host-local configuration list of one of the node's networks (`NETWORKS`), for
        an agent: the same network name, so pods it attaches and `attach`'s share one IPAM store."""
        plugin = self._bridge_config(ifname)
        return {"cniVersion": plugin.pop("cniVersion"), "name": plugin.pop("name"), "plugins": [plugin]}

    def attach(self, namespace: str, name: str) -> Pod:
        """A pod attached by the plugins directly (no agent: a pod of another node, as far as an
        agent knows), joined to the probes."""
        self.new_pod_netns(namespace, name)
        self._attach(namespace, name)
        return self.join(namespace, name, self.pods[f"{namespace}/{name}"].addresses)

    def _pod_netns(self, namespace: str, name: str) -> str:
        return f"{PREFIX}{self.tag}-{namespace}-{name}"

    def _add_netns(self, name: str) -> None:
        run("ip", "netns", "add", name)
        self._netns.append(name)

    def _attach(self, namespace: str, name: str) -> None:
        """The pod's interfaces, one CNI ADD of the bridge plugin each, run in the node namespace."""
        netns = self._pod_netns(namespace, name)
        addresses = {}
        for ifname in self.networks:
            result = self._plugin("ADD", netns, ifname)
            addresses[ifname] = result["ips"][0]["address"].split("/")[0]
        self.pods[f"{namespace}/{name}"] = Pod(namespace, name, netns, addresses)

    def _bridge_config(self, ifname: str) -> dict[str, Any]:
        bridge, subnet = NETWORKS[ifname]
        gateway = str(next(ipaddress.ip_network(subnet).hosts()))
        ipam: dict[str, Any] = {"type": "host-local", "ranges": [[{"subnet": subnet, "gateway": gateway}]],
                                "dataDir": str(self.root / "ipam")}
        if ifname == "eth0":  # the cluster default network carries the pods' default route
            ipam["routes"] = [{"dst": "0.0.0.0/0"}]
        return {"cniVersion": CNI_VERSION, "name": f"pnnp-{ifname}", "type": "bridge", "bridge": bridge,
                "isGateway": True, "ipMasq": False, "ipam": ipam}

    def _plugin(self, command: str, netns: str, ifname: str) -> dict[str, Any]:
        config = self._bridge_config(ifname)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": command, "CNI_CONTAINERID": netns,
               "CNI_NETNS": f"/var/run/netns/{netns}", "CNI_IFNAME": ifname, "CNI_PATH": str(self.bin_dir)}
        proc = run("nsenter", f"--net=/var/run/netns/{self.node_netns}", str(self.bin_dir / "bridge"),
                   input=json.dumps(config), env=env, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"bridge plugin {command} {netns} {ifname} failed: {proc.stdout} {proc.stderr}")
        result: dict[str, Any] = json.loads(proc.stdout) if proc.stdout.strip() else {}
        return result

    def _start_program(self, key: str) -> None:
        pod = self.pods[key]
        proc = subprocess.Popen(
            ["nsenter", f"--net={pod.path}", sys.executable, "-S", str(POD_PROGRAM), key],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self._programs[key] = _Program(proc)

    # --- nothing leaves --------------------------------------------------------------------------

    def assert_sealed(self) -> None:
        """The node namespace has no way out: no default route, no route but to its bridges,
        no link but lo, its bridges and the veths on them."""
        ns = self.node_netns
        bridges = {NETWORKS[n][0] for n in self.networks}
        links = json.loads(run("ip", "-n", ns, "-j", "link", "show").stdout or "[]")
        strangers = [link["ifname"] for link in links
                     if link["ifname"] != "lo" and link["ifname"] not in bridges and link.get("master") not in bridges]
        assert not strangers, f"the node namespace {ns} has links other than lo, its bridges and their ports: {strangers}"
        for family in ("-4", "-6"):
            routes = json.loads(run("ip", "-n", ns, "-j", family, "route", "show", "table", "all").stdout or "[]")
            default = [r for r in routes if r.get("dst") == "default"]
            assert not default, f"the node namespace {ns} has a default route: {default}"

    # --- traffic ---------------------------------------------------------------------------------

    def probe(self, probes: Sequence[Probe] = DEFAULT_PROBES, network: str = "net1", *,
              sources: Iterable[str] | None = None, destinations: Iterable[str] | None = None,
              timeout: float = 0.3, confirm_timeout: float = 1.0) -> Matrix:
        """Every source pod to every destination pod's address on `network`, each probe, with real sockets.

        A probe is connected when the server's echo came back (TCP, UDP, SCTP: a byte
        through the connection; ICMP: an echo reply). Each refusal is probed once more with
        `confirm_timeout`, so only a packet dropped twice reads as not connected.
        """
        srcs = list(sources or self.pods)
        dsts = list(destinations or self.pods)
        keys = [(s, d, p) for s in srcs for d in dsts for p in probes]
        connected = self._measure(keys, network, timeout)
        again = [k for k in keys if not connected[k]]
        if again:
            connected.update(self._measure(again, network, confirm_timeout))
        pods = list(dict.fromkeys(srcs + dsts))
        return Matrix(pods, list(probes), connected)

    def _measure(self, keys: Sequence[Key], network: str, timeout: float) -> dict[Key, bool]:
        by_source: dict[str, list[Key]] = {}
        for key in keys:
            by_source.setdefault(key[0], []).append(key)
        for src, mine in by_source.items():  # all sources at once: every program probes in parallel
            self._programs[src].send({"op": "probe", "timeout": timeout, "probes": [
                {"dst": self.pods[d].addresses[network], "protocol": p.protocol, "port": p.port} for _, d, p in mine]})
        results: dict[Key, bool] = {}
        for src, mine in by_source.items():
            results.update(zip(mine, self._programs[src].receive()["results"], strict=True))
        return results

    def reach(self, source: str, addresses: Sequence[str], probes: Sequence[Probe] = DEFAULT_PROBES,
              timeout: float = 0.5) -> dict[tuple[str, Probe], bool]:
        """From one pod to any addresses (e.g. ones no test namespace owns), every probe at once."""
        keys = [(address, probe) for address in addresses for probe in probes]
        answer = self._programs[source].ask({"op": "probe", "timeout": timeout, "probes": [
            {"dst": address, "protocol": probe.protocol, "port": probe.port} for address, probe in keys]})
        return dict(zip(keys, answer["results"], strict=True))

    def who(self, source: str, address: str, port: int, protocol: str = "TCP", *, count: int = 1,
            timeout: float = 1.0) -> list[dict[str, Any]]:
        """`count` new connections at once from `source` to `address:port`, each asking the "who" server
        it reaches (port `WHO_PORT` of a pod, maybe through a Service) which pod it is and whom it saw:
        `{"pod": "ns/name", "peer": "<source address seen>"}` or `{"error": "..."}` per connection."""
        answers: list[dict[str, Any]] = self._programs[source].ask(
            {"op": "who", "dst": address, "protocol": protocol, "port": port, "count": count,
             "timeout": timeout})["answers"]
        return answers

    @contextlib.contextmanager
    def connection(self, source: str, destination: str, port: int = 80, network: str = "net1",
                   timeout: float = 2.0) -> Iterator[Callable[[], bool]]:
        """A TCP connection from `source` to `destination`'s address on `network`, open for the block.

        Yields a function doing one round trip over it (True when the echo came back).
        """
        program = self._programs[source]
        conn = secrets.token_hex(4)
        opened = program.ask({"op": "open", "conn": conn, "dst": self.pods[destination].addresses[network],
                              "port": port, "timeout": timeout})
        assert opened["ok"], f"cannot connect {source} -> {destination}:{port} on {network}: {opened['error']}"
        try:
            yield lambda: bool(program.ask({"op": "echo", "conn": conn, "timeout": timeout})["ok"])
        finally:
            program.ask({"op": "close", "conn": conn})

    # --- our nftables table in a pod -------------------------------------------------------------

    def apply(self, pod: str, ruleset: Mapping[str, Any]) -> None:
        asyncio.run(nftables.apply(self.pods[pod].path, ruleset))

    def remove(self, pod: str) -> None:
        asyncio.run(nftables.remove(self.pods[pod].path))

    def exists(self, pod: str) -> bool:
        return asyncio.run(nftables.exists(self.pods[pod].path))

    def enforce(self, documents: Mapping[str, Mapping[str, Any] | None]) -> None:
        """Pod -> its ruleset (applied) or None (our table removed), every pod at once."""
        async def all_pods() -> None:
            await asyncio.gather(*(
                nftables.apply(self.pods[pod].path, doc) if doc is not None else nftables.remove(self.pods[pod].path)
                for pod, doc in documents.items()))
        asyncio.run(all_pods())

    def remove_all(self) -> None:
        """Our table out of every pod: what a test sharing the node leaves for the next."""
        self.enforce(dict.fromkeys(self.pods))

    def forget_connections(self) -> None:
        """Every pod's conntrack entries flushed: the next probes are new connections, judged by
        the tables now, not let through as part of a flow an earlier table allowed (a UDP
        exchange whose ephemeral source port happens to repeat within conntrack's timeout)."""
        for pod in self.pods.values():
            run("ip", "netns", "exec", pod.netns, "conntrack", "-F", check=False)


class InNode:
    """An `Exec` (bridge.agent.delegates.invoke) that runs each delegate plugin inside the node namespace: an
    agent given it makes its bridges and host ends of veths there, where no packet can leave."""

    def __init__(self, node: Node) -> None:
        self.node = node

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        proc = await asyncio.create_subprocess_exec(
            "nsenter", f"--net=/var/run/netns/{self.node.node_netns}", str(plugin), env=dict(env),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        return proc.returncode or 0, out, err


def sctp_or_skip() -> None:
    """Skips the test, naming the missing kernel module, where the kernel makes no SCTP sockets
    (modules are the kernel's, shared by every namespace: asking here answers for the pods)."""
    unavailable = sctp_unavailable()
    if unavailable:
        pytest.skip(f"SCTP probes need SCTP in the kernel: {unavailable}")


@contextlib.contextmanager
def standing(bin_dirs: Sequence[Path], networks: tuple[str, ...] = ("eth0", "net1"), *,
             namespaces: tuple[str, ...] = NAMESPACES, pod_names: tuple[str, ...] = POD_NAMES) -> Iterator[Node]:
    """A started `Node`, sealed before and after, closed and checked to leave nothing, even on failure."""
    nft_or_skip()
    bin_dir = next(d for d in bin_dirs if (d / "bridge").is_file())
    node = Node(bin_dir, networks=networks, namespaces=namespaces, pod_names=pod_names).start()
    try:
        yield node
        node.assert_sealed()
    finally:
        node.close()
    assert not node.leftovers(), f"the netpol node left {node.leftovers()}"
