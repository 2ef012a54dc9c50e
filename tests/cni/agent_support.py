"""A throwaway world for one CNI agent test: temp dirs, netns, bridges, objects, agent, shim.

Everything a test makes carries the test's random tag and is removed by
`World.cleanup()`, which the fixtures run even when the test fails: network
namespaces, the bridges the `bridge` plugin created, and the temp directory
holding the host-local IPAM dataDir, the agent's cache and socket.

Run as a script (`python agent_support.py CONFIG.json`) it is an agent in its own
process, for the tests that kill it with SIGKILL: `spawn_gated_agent` makes one
whose executor stops forever before the delegate ADD of one interface ("between
two delegate ADDs", or in the middle of a hot-plug), `spawn_agent` one that runs
its delegates as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.agent.daemon import agent as agent_mod
from bridge.agent.daemon import command
from bridge.agent.daemon.running import Running
from bridge.agent.delegates import invoke
from bridge.agent.kube.objects import MemoryObjects

CNI_VERSION = "1.0.0"
"""The cniVersion of a World whose test does not run once per version."""

TIER_PLUGINS = ("bridge", "host-local", "tuning")
"""The plugins the tier's networks run: a CNI version is covered only where each of them speaks it."""

KNOWN_GAPS: dict[str, str] = {
    "1.1.0": "the containernetworking-plugins package `make test` installs (Debian's 1.1.1) predates CNI 1.1; "
    "GC forwarding runs against a recording Exec in tests/unit/agent/test_gc.py",
}
"""Versions the agent speaks that the plugins CI installs do not, each with the reason.

In CI a version the plugins lack is a failure unless it is here; one that is here but
spoken is a failure too (tests/cni/test_cni_versions.py), so this stays the truth."""

NPWG_NETWORKS = "k8s.v1.cni.cncf.io/networks"
NPWG_STATUS = "k8s.v1.cni.cncf.io/network-status"
KEP_NETWORKS = "multinetwork.x-k8s.io/networks"


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def spoken_versions(bin_dirs: Sequence[Path], plugin: str) -> frozenset[str]:
    """The CNI versions an installed plugin speaks, from its own answer to VERSION; empty when it is missing."""
    try:
        path = invoke.find_plugin(plugin, bin_dirs)
    except invoke.CNIError:
        return frozenset()
    # Any version the runtime speaks will do: VERSION answers with every version the plugin speaks.
    request = json.dumps({"cniVersion": invoke.SUPPORTED_VERSIONS[0]}).encode()
    env = {"CNI_COMMAND": "VERSION", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = subprocess.run([str(path)], input=request, env=env, capture_output=True, timeout=30, check=False)
    try:
        return frozenset(json.loads(proc.stdout)["supportedVersions"])
    except (ValueError, KeyError, TypeError) as exc:
        raise AssertionError(f"{path} answered VERSION with {proc.stdout!r} (stderr {proc.stderr!r})") from exc


def by_version(versions: Iterable[str]) -> list[str]:
    return sorted(versions, key=invoke.version_tuple)


@dataclass
class Answer:
    """What the runtime saw from one shim execution."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout) if self.stdout.strip() else None


@dataclass
class World:
    bin_dirs: list[Path]
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pn-agent-test-")))
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    objects: MemoryObjects = field(default_factory=MemoryObjects)
    agent: agent_mod.Agent | None = None
    running: Running | None = None
    netns: list[str] = field(default_factory=list)
    bridges: list[str] = field(default_factory=list)
    octet: int = field(default_factory=lambda: secrets.randbelow(200) + 20)
    cni_version: str = CNI_VERSION
    """The cniVersion of every configuration this world writes, the runtime's included."""

    def __post_init__(self) -> None:
        self.shim = command.install_shim(self.root / "bin", sys.executable)
        self.ipam_dir = self.root / "ipam"
        self.cache_dir = self.root / "cache"
        self.socket = self.root / "agent.sock"

    # --- networks and objects ------------------------------------------------------------

    def bridge(self, index: int) -> str:
        name = f"pn{self.tag}b{index}"
        if name not in self.bridges:
            self.bridges.append(name)
        return name

    def subnet(self, index: int) -> str:
        return f"10.{self.octet}.{index}.0/24"

    def network(self, name: str, index: int, *, ipam: Mapping[str, Any] | None = None, **bridge: Any) -> dict[str, Any]:
        """A bridge + host-local config list on its own bridge and /24, IPAM files under our temp dir."""
        ipam_conf = {
            "type": "host-local",
            "ranges": [[{"subnet": self.subnet(index), "gateway": self.subnet(index).replace(".0/24", ".1")}]],
            "dataDir": str(self.ipam_dir),
            **(ipam or {}),
        }
        plugin = {"type": "bridge", "bridge": self.bridge(index), "isGateway": True, "ipam": ipam_conf, **bridge}
        return {"cniVersion": self.cni_version, "name": name, "plugins": [plugin]}

    def default_network(self) -> dict[str, Any]:
        conf = self.network("kubenet", 0)
        conf["plugins"][0]["ipam"]["routes"] = [{"dst": "0.0.0.0/0"}]
        return conf

    def nad(self, name: str, config: Mapping[str, Any] | str, namespace: str = "default") -> dict[str, Any]:
        obj = {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"config": config if isinstance(config, str) else json.dumps(config)},
        }
        self.objects.put(obj)
        return obj

    def pod(self, name: str, annotations: Mapping[str, str] | None = None, namespace: str = "default") -> dict[str, Any]:
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": secrets.token_hex(8), "annotations": dict(annotations or {})},
        }
        self.objects.put(obj)
        return obj

    def make_netns(self) -> str:
        name = f"pn-{self.tag}-{len(self.netns)}"
        run("ip", "netns", "add", name)
        self.netns.append(name)
        return f"/var/run/netns/{name}"

    # --- the agent -----------------------------------------------------------------------

    def agent_config(self, **overrides: Any) -> agent_mod.AgentConfig:
        values: dict[str, Any] = {
            "socket_path": self.socket,
            "cache_dir": self.cache_dir,
            "bin_dirs": tuple(self.bin_dirs),
            "conf_dir": self.root / "net.d",
            "default_network": self.default_network(),
            "plugin_timeout": 30.0,
        }
        values.update(overrides)
        return agent_mod.AgentConfig(**values)

    async def start_agent(self, *, executor: invoke.Exec | None = None, enforcer: Any = None,
                          services: Any = None, events: Any = None, **overrides: Any) -> agent_mod.Agent:
        self.agent = agent_mod.Agent(self.objects, self.agent_config(**overrides), executor=executor,
                                     enforcer=enforcer, services=services, events=events)
        self.running = Running(self.agent)
        await self.running.start()
        return self.agent

    async def stop_agent(self) -> None:
        if self.running is not None:
            await self.running.stop()
            self.running = None
            self.agent = None

    def runtime_conf(self, **extra: Any) -> dict[str, Any]:
        return {"cniVersion": self.cni_version, "name": "multinetwork", "type": "multinetwork", "socketPath": str(self.socket), **extra}

    async def cni(
        self,
        command_: str,
        container_id: str,
        netns: str = "",
        pod: str = "",
        *,
        ifname: str = "eth0",
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        namespace: str = "default",
    ) -> Answer:
        """Executes the shim the way a container runtime does."""
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "CNI_COMMAND": command_,
            "CNI_CONTAINERID": container_id,
            "CNI_NETNS": netns,
            "CNI_IFNAME": ifname,
            "CNI_PATH": str(self.shim.parent),
            "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={pod}",
        }
        full_env.update(env or {})
        full_env = {k: v for k, v in full_env.items() if v is not None}
        proc = await asyncio.create_subprocess_exec(
            str(self.shim), env=full_env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        data = json.dumps(self.runtime_conf()).encode() if stdin is None else stdin
        out, err = await proc.communicate(data)
        if self.agent is not None:
            # network-status is written after the answer (bridge.agent.pods.publisher); the tests
            # that read it right after an ADD read what the agent has written by then.
            await self.agent.status.idle()
        return Answer(proc.returncode or 0, out.decode(), err.decode())

    # --- what is left on the host --------------------------------------------------------

    def interfaces(self, netns_path: str) -> list[str]:
        """Interfaces in a netns other than lo."""
        name = Path(netns_path).name
        links = json.loads(run("ip", "-n", name, "-j", "link", "show").stdout or "[]")
        return sorted(link["ifname"] for link in links if link["ifname"] != "lo")

    def addresses(self, netns_path: str, ifname: str) -> list[str]:
        name = Path(netns_path).name
        data = json.loads(run("ip", "-n", name, "-j", "-4", "addr", "show", "dev", ifname).stdout or "[]")
        return [f"{a['local']}/{a['prefixlen']}" for link in data for a in link.get("addr_info", [])]

    def default_route_dev(self, netns_path: str) -> list[str]:
        name = Path(netns_path).name
        routes = json.loads(run("ip", "-n", name, "-j", "-4", "route", "show", "default").stdout or "[]")
        return [r.get("dev", "") for r in routes]

    def bridge_ports(self) -> list[str]:
        """Host interfaces (veths) still enslaved to one of our bridges."""
        ports: list[str] = []
        for br in self.bridges:
            proc = run("ip", "-j", "link", "show", "master", br, check=False)
            if proc.returncode == 0:
                ports += [link["ifname"] for link in json.loads(proc.stdout or "[]")]
        return ports

    def reservations(self) -> list[str]:
        """host-local reservation files (an IP each) under our dataDir."""
        if not self.ipam_dir.exists():
            return []
        return sorted(
            f"{p.parent.name}/{p.name}"
            for p in self.ipam_dir.rglob("*")
            if p.is_file() and p.name != "lock" and not p.name.startswith("last_reserved_ip")
        )

    def cached(self) -> list[str]:
        return sorted(p.name for p in self.cache_dir.glob("*.jsonl")) if self.cache_dir.exists() else []

    def leftovers(self) -> dict[str, list[str]]:
        """Everything attachments could have left behind; all empty means nothing is left."""
        return {
            "interfaces": [f"{Path(ns).name}:{i}" for ns in self.netns for i in self.interfaces(f"/var/run/netns/{ns}")],
            "bridge ports": self.bridge_ports(),
            "IPAM reservations": self.reservations(),
            "cache records": self.cached(),
        }

    async def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            await self.stop_agent()
        for ns in self.netns:
            run("ip", "netns", "del", ns, check=False)
        for br in self.bridges:
            run("ip", "link", "del", br, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def status_of(world: World, pod: str) -> list[dict[str, Any]]:
    """The pod's NPWG network-status annotation as the agent wrote it."""
    annotations = world.objects.get("Pod", "default", pod)["metadata"]["annotations"]
    return json.loads(annotations[NPWG_STATUS])


NOTHING_LEFT = {"interfaces": [], "bridge ports": [], "IPAM reservations": [], "cache records": []}


def bridge_podnetwork(world: World, name: str, nad: str) -> None:
    """A PodNetwork of the bridge provider whose parameters are NAD default/`nad`."""
    world.objects.put(
        {
            "apiVersion": "multinetwork.x-k8s.io/v1alpha1",
            "kind": "PodNetwork",
            "metadata": {"name": name},
            "spec": {
                "enabled": True,
                "provider": "multinetwork.x-k8s.io/npwg-bridge",
                "parametersRefs": [
                    {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": nad, "namespace": "default"}
                ],
            },
        }
    )


# --- the agent in its own process, for the SIGKILL test ------------------------------------


@dataclass
class GatingExec:
    """Runs plugins for real, except that the first ADD for `gate_ifname` never starts:
    it writes `marker` and waits forever (until the process is killed)."""

    gate_ifname: str
    marker: Path
    real: invoke.SubprocessExec = field(default_factory=invoke.SubprocessExec)

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        if env.get("CNI_COMMAND") == "ADD" and env.get("CNI_IFNAME") == self.gate_ifname:
            self.marker.write_text("gated")
            await asyncio.Event().wait()
        return await self.real.run(plugin, env, stdin, timeout)


def spawn_gated_agent(
    world: World, gate_ifname: str | None, marker: Path | None, *, hotplug_trigger: Path | None = None
) -> subprocess.Popen[bytes]:
    """The agent in its own process; with `gate_ifname`, stopped before that interface's ADD.

    With `hotplug_trigger`: once that file appears (write it whole, e.g. by a rename), the agent
    hot-plugs the pod it holds (JSON), as its pod watch would on a change of the pod's networks."""
    config = {
        "objects": [world.objects.get(k, ns, n) for (k, ns, n) in list(world.objects._store)],
        "socket": str(world.socket),
        "cache_dir": str(world.cache_dir),
        "bin_dirs": [str(d) for d in world.bin_dirs],
        "default_network": world.default_network(),
        "gate_ifname": gate_ifname,
        "marker": str(marker) if marker else None,
        "hotplug_trigger": str(hotplug_trigger) if hotplug_trigger else None,
    }
    path = world.root / "gated-agent.json"
    path.write_text(json.dumps(config))
    return subprocess.Popen([sys.executable, __file__, str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def spawn_agent(world: World) -> subprocess.Popen[bytes]:
    """The agent in its own process, running its delegates as usual (to be killed mid-delegate)."""
    return spawn_gated_agent(world, None, None)


async def wait_for_socket(world: World, process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not world.socket.exists():
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        assert time.monotonic() < deadline, "the agent process did not open its socket"
        await asyncio.sleep(0.05)


async def _gated_main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    agent = agent_mod.Agent(
        MemoryObjects(config["objects"]),
        agent_mod.AgentConfig(
            socket_path=Path(config["socket"]),
            cache_dir=Path(config["cache_dir"]),
            bin_dirs=tuple(Path(d) for d in config["bin_dirs"]),
            default_network=config["default_network"],
        ),
        executor=GatingExec(config["gate_ifname"], Path(config["marker"])) if config["gate_ifname"] else None,
    )
    await Running(agent).start()
    if config.get("hotplug_trigger"):
        from bridge.agent.daemon import hotplug
        from podnetwork.ground.core import Pod

        class NoEvents:
            async def post_event(self, body: Mapping[str, Any]) -> None:
                pass

        trigger = Path(config["hotplug_trigger"])
        while not trigger.exists():
            await asyncio.sleep(0.05)
        pod = Pod.model_validate(json.loads(trigger.read_text()))
        await hotplug.HotPlug(agent, NoEvents(), "node").handle(pod)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_gated_main(sys.argv[1]))
