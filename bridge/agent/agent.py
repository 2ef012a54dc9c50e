"""The CNI agent: this project's NPWG delegating plugin (multi-net spec 2.4), KEP "Agent-based" model.

The runtime runs the shim (`bridge.agent.shim`), which forwards the CNI request here
over a unix socket (`bridge.agent.server`). On ADD the agent reads the pod, attaches
the cluster default network first (6.2), then each selected network in order
(4.2), rolls back on the first failure (7.2), records every attachment on disk
before executing it (`bridge.agent.cache`), moves the default route when a
selection asks for it (4.1.2.1.9), returns the default network's result to the
runtime, then writes `k8s.v1.cni.cncf.io/network-status` (5) in the background
(`bridge.agent.publisher`). DEL needs only the
cache; before it tears down a record an earlier agent process wrote, it stops the
delegates that process may have left running (`bridge.agent.orphans`). Operations
for one container are serialized; different containers run in parallel (7.3).

Embedding: `Agent(objects, AgentConfig(...))`, then `await agent.start()` /
`await agent.stop()`; `await agent.handle(env, stdin)` runs one request without
the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bridge import npwg, translate
from bridge.agent import addresswatch, cache, conflist, invoke, node, orphans, plan, readiness, routes
from bridge.agent import objects as objects_mod
from bridge.agent import publisher as publisher_mod
from bridge.agent.cache import Attachment, Record, State
from bridge.agent.invoke import CNIError, Command, ErrorCode, RuntimeArgs
from bridge.agent.objects import NotFound, ObjectSource
from podnetwork.ground import constants
from podnetwork.ground.core import ObjectMeta, Pod, pod_event

log = logging.getLogger(__name__)

#: The agent's own network name, in the conflist it installs and in logs.
NETWORK_NAME = "multinetwork"
#: The shim's file name in the CNI bin dir, and the `type` of the agent's conflist.
PLUGIN_TYPE = "multinetwork"
DEFAULT_SOCKET = Path("/run/multinetwork/agent.sock")
DEFAULT_CACHE_DIR = Path("/var/lib/multinetwork/cache")
DEFAULT_CONF_DIR = Path("/etc/cni/net.d")
DEFAULT_CONF_FILE_NAME = "00-multinetwork.conflist"
#: The component the agent's Events about pods carry.
EVENT_COMPONENT = "podnetwork-cni-agent"


#: The files libcni (and so the runtimes) read CNI configurations from, in lexical order.
CONF_EXTENSIONS = (".conf", ".conflist", ".json")


def node_default_file(conf_dir: Path, own: Path | None) -> tuple[Path, str] | None:
    """(path, text) of the CNI configuration the runtime would run without the agent: the first
    file of `conf_dir` in lexical order with a CNI extension, other than `own` (the agent's conflist)
    and any other configuration of the agent's shim. A file that cannot be read as JSON is returned
    as it is (the runtime would pick it too, and fail on it): loading it names it."""
    try:
        names = sorted(e.name for e in os.scandir(conf_dir) if e.name.endswith(CONF_EXTENSIONS))
    except OSError:
        return None
    for name in names:
        path = conf_dir / name
        if own is not None and path == own:
            continue
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue  # a directory, or gone since the listing
        with contextlib.suppress(ValueError, RecursionError):
            parsed = json.loads(text)
            plugins = parsed.get("plugins") if isinstance(parsed, dict) and "plugins" in parsed else [parsed]
            if isinstance(plugins, list) and any(isinstance(p, dict) and p.get("type") == PLUGIN_TYPE
                                                 for p in plugins):
                continue  # the agent's shim: it would delegate to itself
        return path, text
    return None


def _fetchable(key: tuple[str, str]) -> bool:
    """A (namespace, name) that names one object in an API path."""
    namespace, name = key
    return npwg.subdomain_problem(name) is None and npwg.name_problem(namespace, max_length=63) is None


@dataclass
class AgentConfig:
    """How one agent runs. Every path is the node's (the DaemonSet mounts them from the host)."""

    socket_path: Path = DEFAULT_SOCKET
    """Unix socket the shim connects to; created with mode 0600 (root only)."""
    cache_dir: Path = DEFAULT_CACHE_DIR
    """One JSON record per container: what was attached, written before each delegate ADD."""
    bin_dirs: tuple[Path, ...] = invoke.DEFAULT_BIN_DIRS
    """The only places delegate plugins are looked up in, first match wins (`--cni-bin-dir`)."""
    conf_dir: Path = DEFAULT_CONF_DIR
    """Where on-disk delegate configurations are found (NPWG 3.4.1 rules 2 and 3)."""
    default_network: Mapping[str, Any] | Path | None = None
    """The cluster default network: a CNI config (list) or a file holding one. None: the
    `default` PodNetwork's NetworkAttachmentDefinition, through the bridge's translation."""
    plugin_timeout: float = 60.0
    """Seconds one delegate plugin call may take before it is killed (CNI error 100)."""
    max_request_bytes: int = 1024 * 1024
    """Largest request body accepted on the socket (CNI error 103 above it)."""
    max_connections: int = 128
    """Connections the socket serves at once; more are answered CNI error 11 (try again later)
    (`bridge.agent.server`)."""
    read_timeout: float = 10.0
    """Seconds a client has, from connecting, to send its whole request (the shim sends it at once)."""
    conf_file: Path | None = None
    """Where to write the agent's own conflist once the default network is usable (6.1);
    None: never write one (embedded use)."""
    readiness_interval: float = 2.0
    """Seconds between checks of the agent's readiness while it is not ready (6.1)."""
    recheck_interval: float = 30.0
    """Seconds between checks once ready, so a change (the default network gone) is reported."""
    netns_dir: Path | None = None
    """Where the runtime makes pods' network namespaces; checked at start for mounts propagating
    into the agent's container (`bridge.agent.node.netns_problem`). None: not checked."""
    patch_status: bool = True
    """Write `k8s.v1.cni.cncf.io/network-status` on the pod after ADD (spec 5), in the
    background once the runtime has its answer (`bridge.agent.publisher`)."""
    durable_cache: bool = False
    """fsync every cache write (survives a power loss, ~10 ms per write); see `bridge.agent.cache`."""
    watch_addresses: bool = True
    """Follow address changes on the attached interfaces into network-status (KEP Req 25;
    `bridge.agent.addresswatch`). Only with `patch_status`."""
    address_watch: addresswatch.Settings = field(default_factory=addresswatch.Settings)
    """Debounce and rate bound of those status writes."""


class _Phases:
    """Where one request's time went, for its log line (`benchmarks/bench_agent.py` reads it).

    Spans of the same name add up (the cache is written before each delegate)."""

    def __init__(self) -> None:
        self.spans: dict[str, float] = {}

    @contextlib.contextmanager
    def timed(self, name: str) -> Any:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spans[name] = self.spans.get(name, 0.0) + time.perf_counter() - start

    def __str__(self) -> str:
        return ", ".join(f"{name} {seconds * 1000:.2f}" for name, seconds in self.spans.items())


@dataclass
class _Found:
    """Objects fetched for one translation, keyed as `bridge.translate.Objects` wants them."""

    podnetworks: dict[str, translate.PodNetwork] = field(default_factory=dict)
    attachments: dict[tuple[str, str], translate.PodNetworkAttachment] = field(default_factory=dict)
    nads: dict[tuple[str, str], npwg.NetworkAttachmentDefinition] = field(default_factory=dict)
    options: dict[tuple[str, str], translate.NetworkSelectionOptions] = field(default_factory=dict)

    def objects(self) -> translate.Objects:
        # The object source read each into its model (`objects.read_object`).
        return translate.Objects(self.podnetworks, self.attachments, self.nads, self.options)


@dataclass
class _Request:
    args: RuntimeArgs
    conf: dict[str, Any]
    cni_version: str
    pod_namespace: str | None
    pod_name: str | None
    runtime_config: dict[str, Any] = field(default_factory=dict)
    phases: _Phases = field(default_factory=_Phases)


def parse_request(env: Mapping[str, str], stdin: bytes) -> _Request:
    """A forwarded CNI request -> validated parameters; CNI error 4/6/7/1 when it is malformed."""
    raw_command = env.get("CNI_COMMAND", "")
    try:
        command = Command(raw_command)
    except ValueError:
        raise CNIError(
            ErrorCode.INVALID_ENVIRONMENT,
            "invalid CNI_COMMAND",
            f"{raw_command!r}; expected one of {', '.join(c.value for c in Command)}",
        ) from None
    try:
        conf = json.loads(stdin) if stdin.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise CNIError(
            ErrorCode.DECODING_FAILURE, "network configuration is not valid JSON", str(exc)
        ) from None
    if not isinstance(conf, dict):
        raise CNIError(ErrorCode.DECODING_FAILURE, "network configuration must be a JSON object")
    version = conf.get("cniVersion", invoke.LATEST_VERSION)
    if command is not Command.VERSION and version not in invoke.SUPPORTED_VERSIONS:
        raise CNIError(
            ErrorCode.INCOMPATIBLE_VERSION,
            f"unsupported cniVersion {version!r}",
            f"the agent speaks {', '.join(invoke.SUPPORTED_VERSIONS)}",
        )
    runtime_config = conf.get("runtimeConfig") or {}
    if not isinstance(runtime_config, dict):
        raise CNIError(
            ErrorCode.INVALID_CONFIG, "invalid network configuration", '"runtimeConfig" must be an object'
        )
    try:
        cni_args = invoke.parse_cni_args(env.get("CNI_ARGS", ""))
    except CNIError:
        if command is not Command.DEL:
            raise
        cni_args = ()  # DEL reads only the container's record; the pod is named in logs only
    if not any(k == "IgnoreUnknown" for k, _ in cni_args):
        # Delegates must accept the pod's K8S_* args they do not know, as under the kubelet.
        cni_args = (("IgnoreUnknown", "1"), *cni_args)
    args = RuntimeArgs(
        command,
        env.get("CNI_CONTAINERID", ""),
        env.get("CNI_NETNS", ""),
        env.get("CNI_IFNAME", ""),
        cni_args,
    )
    if command in (Command.ADD, Command.DEL, Command.CHECK):
        # DEL needs only the container ID: its record has the rest.
        required = (("CNI_CONTAINERID", args.container_id),) if command is Command.DEL else (
            ("CNI_CONTAINERID", args.container_id), ("CNI_IFNAME", args.ifname))
        for var, value in required:
            if not value:
                raise CNIError(ErrorCode.INVALID_ENVIRONMENT, f"{var} is required for {command.value}")
        # DEL takes any ID and interface name: one that ADD refuses was never attached (no agent
        # could write its record, or hand the name to a plugin), so its DEL succeeds (_del);
        # refusing it would keep the pod forever (CRI: tear-down must eventually succeed).
        if command is not Command.DEL:
            invoke.check_container_id(args.container_id)
            invoke.check_ifname(args.ifname)
    if command in (Command.ADD, Command.CHECK) and not args.netns:
        raise CNIError(ErrorCode.INVALID_ENVIRONMENT, f"CNI_NETNS is required for {command.value}")
    if args.netns and not os.path.isabs(args.netns):
        raise CNIError(ErrorCode.INVALID_ENVIRONMENT, "CNI_NETNS must be an absolute path", args.netns)
    namespace, name = args.arg("K8S_POD_NAMESPACE"), args.arg("K8S_POD_NAME")
    if command is Command.ADD and not (namespace and name):
        raise CNIError(
            ErrorCode.INVALID_ENVIRONMENT,
            "CNI_ARGS must name the pod",
            "K8S_POD_NAMESPACE and K8S_POD_NAME are required for ADD (the kubelet sets them)",
        )
    problems = pod_ref_problems(namespace, name)
    if command is Command.ADD and problems:
        var, value, problem = problems[0]
        raise CNIError(
            ErrorCode.INVALID_ENVIRONMENT,
            f"invalid {var} in CNI_ARGS",
            f"{value[:80]!r} {problem}; it must name the pod as the Kubernetes API does (the kubelet "
            "sets it from the pod)",
        )
    if problems:
        # Only ADD reads the pod; elsewhere the names are just logged, so a bad one is dropped
        # rather than failing a DEL (tear-down must eventually succeed).
        namespace = name = None
    return _Request(args, conf, version, namespace, name, runtime_config)


def pod_ref_problems(namespace: str | None, name: str | None) -> list[tuple[str, str, str]]:
    """(variable, value, problem) for each given pod reference that is not a Kubernetes name.

    They become a path of the API request: an unchecked `..` would make the HTTP client
    collapse `/namespaces/<ns>/pods/..` into the Namespace itself, `.` into the pod list.
    """
    problems: list[tuple[str, str, str]] = []
    if namespace is not None and (problem := npwg.name_problem(namespace, max_length=npwg.NAMESPACE_MAX)):
        problems.append(("K8S_POD_NAMESPACE", namespace, f"is not a namespace name: it {problem}"))
    if name is not None and (problem := npwg.subdomain_problem(name)):
        problems.append(("K8S_POD_NAME", name, f"is not a pod name: it {problem}"))
    return problems


def _default_version(config: Mapping[str, Any]) -> str:
    """The version the default network runs at, which the agent's own conflist speaks:
    CNI 1.1's `cniVersions` chosen as libcni does, else `cniVersion`, else the latest."""
    if "cniVersions" in config:
        with contextlib.suppress(CNIError):  # conflist.load reports it, with context
            return conflist.chosen_version(config)
    return str(config.get("cniVersion") or invoke.LATEST_VERSION)


def unfinished(record: Record) -> list[Attachment]:
    """The attachments of a complete record that are not attached: a hot-plug (which records
    its intent in the running pod's record, then runs the delegate) cut short by a crash."""
    if not record.complete:
        return []
    return [a for a in record.attachments if a.state is not State.ATTACHED]


def _shape(record: Record) -> list[tuple[str, str, bool]]:
    """What a network-status is made of: each attachment's network, interface and state."""
    return [(a.name, a.ifname, a.state is State.ATTACHED) for a in record.attachments] + [
        ("", "", record.complete)
    ]


class Agent:
    """The delegating plugin. Safe to run several in one process (distinct sockets and caches)."""

    def __init__(
        self,
        objects: ObjectSource,
        config: AgentConfig,
        *,
        executor: invoke.Exec | None = None,
        events: objects_mod.EventSink | None = None,
    ) -> None:
        self.objects = objects
        self.config = config
        self.events = events
        """Where Warning Events about pods go (`report`); None: the log only."""
        self._reporting: set[asyncio.Task[None]] = set()
        self._owner = os.path.abspath(config.cache_dir)
        """Marks this agent's delegates (`orphans`): its cache dir, which no other agent shares."""
        self.executor: invoke.Exec = orphans.Marking(executor or invoke.SubprocessExec(), self._owner)
        self.cache = cache.Cache(config.cache_dir, durable=config.durable_cache)
        self._written: set[str] = set()
        """Containers whose record on disk this process wrote. For any other record, a delegate
        of an earlier agent process may still be running, and is stopped before tear-down."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiters: dict[str, int] = {}
        self._arrivals = itertools.count()
        """Orders requests as they arrive (a counter: no clock can go backwards)."""
        self._add_arrival: dict[str, int] = {}
        """When the latest ADD of each container arrived, for GC (CNI 1.1); dropped by its DEL."""
        self._gate = asyncio.Condition()
        self._adds_running = 0
        self._gc_forwarding = False
        """While GC runs in the delegates, no delegate ADD may reserve what they would free."""
        self._readiness: asyncio.Task[None] | None = None
        self.readiness = readiness.Reporter()
        """Logs each change of readiness (and, given a node and a sink, posts a Node Event)."""
        self.host_problem: str | None = None
        """What the node denies the agent (`bridge.agent.node`), found at start; None: nothing."""
        self._finishing: set[asyncio.Task[None]] = set()
        """Roll-backs of hot-plugs an earlier agent process left unfinished (`start`)."""
        self.conf_written = asyncio.Event()
        """Set once the agent's own conflist is in place (6.1)."""
        self.address_watch = addresswatch.AddressWatch(
            self._publish_observed, config.address_watch, report=self.report)
        """One watch per attached pod while `watch_addresses` (KEP Req 25)."""
        self.status = publisher_mod.StatusPublisher(objects.patch_pod_annotations)
        """Writes network-status after the runtime got its answer (NPWG 5); also for other
        parts of the agent that report a pod's attachments anew."""

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Makes the cache directory, queues the network-status writes an earlier agent process
        left pending, and watches the addresses of the pods already recorded. The socket is not
        the agent's: `running.Running` serves it."""
        self.cache.ensure()
        if self.config.netns_dir is not None:
            self.host_problem = node.netns_problem(self.config.netns_dir)
        self._roll_back_unfinished()
        if self.config.patch_status:
            self._republish()
        self._watch_recorded()

    def _roll_back_unfinished(self) -> None:
        """For each complete record with an attachment not attached (an earlier agent process was
        killed during a hot-plug), a task that takes the container's lock at once and rolls that
        attachment back: every CNI request for the container waits for it (tasks run in the order
        they were made, and these are made before the socket is served)."""
        for container_id in list(self.cache.container_ids()):
            with contextlib.suppress(cache.CacheError):  # DEL deals with an unreadable record
                record = self.cache.load(container_id)
                if record is not None and unfinished(record):
                    task = asyncio.create_task(
                        self._roll_back(container_id), name=f"roll-back {container_id[:12]}")
                    self._finishing.add(task)
                    task.add_done_callback(self._finishing.discard)

    async def _roll_back(self, container_id: str) -> None:
        async with self._container_lock(container_id):
            try:
                record = self.cache.load(container_id)
            except cache.CacheError:
                return
            undone = unfinished(record) if record is not None else []
            if record is None or not undone:
                return
            log.warning(
                "container %s (pod %s/%s): an earlier agent was stopped while attaching %s to the running "
                "pod; rolling that back (its pod watch attaches the network anew)",
                container_id, record.pod_namespace, record.pod_name,
                ", ".join(f"{a.name} as {a.ifname}" for a in undone),
            )
            try:
                await self._stop_orphans(container_id)  # its delegate may still be running
            except CNIError as exc:
                log.error("container %s: not rolled back: %s; CHECK reports it partly attached, and its DEL "
                          "retries", container_id, exc)
                return
            problems = []
            for attachment in reversed(undone):
                cni_args = tuple((str(k), str(v)) for k, v in record.cni_args)
                args = RuntimeArgs(Command.DEL, container_id, record.netns, attachment.ifname, cni_args)
                if invoke.environment_problem(args) is None:
                    try:
                        loaded = conflist.load(attachment.config, what=f"network {attachment.name!r}")
                        await conflist.delete(self.executor, loaded, args, self.config.bin_dirs,
                                              self.config.plugin_timeout, attachment.result)
                    except CNIError as exc:
                        problems.append(f"{attachment.name} ({attachment.ifname}): {exc}")
                        continue
                record.attachments.remove(attachment)
            self._save(record)
        if problems:
            log.error("container %s: rolling back failed for %s; still recorded, so CHECK reports it partly "
                      "attached (106) and its DEL retries", container_id, "; ".join(problems))
            return
        if self.config.patch_status and not record.status_published:
            self._publish(record)
        self._watch_addresses(record)

    def _republish(self) -> None:
        for container_id in list(self.cache.container_ids()):
            with contextlib.suppress(cache.CacheError):  # DEL deals with an unreadable record
                record = self.cache.load(container_id)
                if (record is not None and record.complete and not record.status_published
                        and not unfinished(record)):  # _roll_back publishes those
                    log.info("container %s: writing the network-status an earlier agent left pending",
                             container_id)
                    self._publish(record)

    def announce(self) -> None:
        """When `conf_file` is set, start waiting for the default network, then write the
        agent's conflist (6.1): only once something serves the socket it names."""
        if self.config.conf_file is not None and self._readiness is None:
            self._readiness = asyncio.create_task(self._install_conf_when_ready(), name="cni-agent-readiness")

    async def stop(self) -> None:
        """Removes the agent's conflist: without the agent, the node is not ready. Stops
        publishing: a write still pending is recorded, and the next agent makes it."""
        for task in list(self._finishing):
            task.cancel()
        if self._finishing:
            await asyncio.wait(set(self._finishing))
        await self.address_watch.close()
        if self._reporting:
            await asyncio.wait(set(self._reporting), timeout=5)
        await self.status.close()
        if self._readiness is not None:
            self._readiness.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._readiness
            self._readiness = None
        if self.conf_written.is_set() and self.config.conf_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.config.conf_file.unlink()
            self.conf_written.clear()
        await self.readiness.close()

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- readiness (6.1) ---------------------------------------------------------------

    async def readiness_problem(self) -> str | None:
        """Why the agent cannot attach a pod now, or None (GET /v1/ready, CNI STATUS, the
        readiness probe): what the node denies it, else the default network's problem. Each
        change is reported once (`readiness`)."""
        problem = self.host_problem or await self.default_network_problem()
        self.readiness.update(problem)
        return problem

    async def default_network_problem(self) -> str | None:
        """Why the default network is not usable now, or None when a pod could attach to it."""
        try:
            name, config = await self._default_network({})
            conflist.resolve(conflist.load(config, what=f"default network {name!r}"), self.config.bin_dirs)
        except CNIError as exc:
            return str(exc)
        version = _default_version(config)
        if version not in invoke.SUPPORTED_VERSIONS:
            # The agent's conflist speaks the default network's version (own_conflist), and
            # parse_request refuses a version it does not speak: every pod would fail.
            return (
                f"the default network {name!r} has cniVersion {version!r}, which this agent does not speak "
                f"(it speaks {', '.join(invoke.SUPPORTED_VERSIONS)}); set the cniVersion of the default "
                "network's configuration (--default-network-conf or the default PodNetwork's "
                "NetworkAttachmentDefinition) to one of those that its plugins also support"
            )
        return None

    def own_conflist(self, default_config: Mapping[str, Any]) -> dict[str, Any]:
        """The conflist the runtime reads: the shim as the only plugin, speaking the default
        network's cniVersion and offering the capabilities its plugins declare (7.5)."""
        capabilities: dict[str, bool] = {}
        for delegate in npwg.plugins_of(default_config):
            for cap, on in (delegate.get("capabilities") or {}).items():
                if on is True:
                    capabilities[cap] = True
        plugin: dict[str, Any] = {"type": PLUGIN_TYPE, "socketPath": str(self.config.socket_path)}
        if capabilities:
            plugin["capabilities"] = capabilities
        return {
            "cniVersion": _default_version(default_config),
            "name": NETWORK_NAME,
            "plugins": [plugin],
        }

    async def _install_conf_when_ready(self) -> None:
        """Writes the agent's conflist once it is ready, then keeps checking (more slowly), so a
        later change is reported too."""
        assert self.config.conf_file is not None
        while True:
            problem = await self.readiness_problem()
            if problem is None and not self.conf_written.is_set():
                _, default_config = await self._default_network({})
                write_atomically(
                    self.config.conf_file, json.dumps(self.own_conflist(default_config), indent=2)
                )
                self.conf_written.set()
                log.info("default network usable; wrote %s", self.config.conf_file)
            ready = problem is None and self.conf_written.is_set()
            await asyncio.sleep(self.config.recheck_interval if ready else self.config.readiness_interval)

    # --- requests ----------------------------------------------------------------------

    async def handle(self, env: Mapping[str, str], stdin: bytes) -> dict[str, Any] | None:
        """One CNI request; returns the result (None when the command has none), raises CNIError."""
        request = parse_request(env, stdin)
        command = request.args.command
        arrival = next(self._arrivals)
        if command is Command.ADD:
            self._add_arrival[request.args.container_id] = arrival
        if command is Command.VERSION:
            return {"cniVersion": request.cni_version, "supportedVersions": list(invoke.SUPPORTED_VERSIONS)}
        if command is Command.STATUS:
            problem = await self.readiness_problem()
            if problem:
                raise CNIError(50, "the agent cannot attach pods now", problem)
            return None
        if command is Command.GC:
            await self._gc(request, arrival)
            return None
        async with self._container_lock(request.args.container_id):
            started = time.monotonic()
            result: dict[str, Any] | None = None
            if command is Command.ADD:
                async with self._add_slot():
                    result = await self._add(request)
            elif command is Command.DEL:
                await self._del(request)
                self._add_arrival.pop(request.args.container_id, None)
            else:
                await self._check(request)
            log.info(
                "%s container %s (pod %s/%s) done in %.1f ms (%s)",
                command.value,
                request.args.container_id,
                request.pod_namespace or "-",
                request.pod_name or "-",
                (time.monotonic() - started) * 1000,
                request.phases,
            )
            return result

    @contextlib.asynccontextmanager
    async def _container_lock(self, container_id: str) -> Any:
        lock = self._locks.setdefault(container_id, asyncio.Lock())
        self._waiters[container_id] = self._waiters.get(container_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._waiters[container_id] -= 1
            if not self._waiters[container_id]:
                del self._waiters[container_id]
                del self._locks[container_id]

    @contextlib.asynccontextmanager
    async def _add_slot(self) -> Any:
        """Held by each ADD; none starts while GC is forwarded to the delegates."""
        async with self._gate:
            await self._gate.wait_for(lambda: not self._gc_forwarding)
            self._adds_running += 1
        try:
            yield
        finally:
            async with self._gate:
                self._adds_running -= 1
                self._gate.notify_all()

    @contextlib.asynccontextmanager
    async def _no_adds(self) -> Any:
        """Waits for running ADDs to finish and holds new ones back (one GC at a time)."""
        async with self._gate:
            await self._gate.wait_for(lambda: not self._gc_forwarding)
            self._gc_forwarding = True
            await self._gate.wait_for(lambda: self._adds_running == 0)
        try:
            yield
        finally:
            async with self._gate:
                self._gc_forwarding = False
                self._gate.notify_all()

    async def _default_network(self, k8s_runtime_config: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """(status name, delegate config) of the cluster default network: --default-network-conf;
        else the `default` PodNetwork's NetworkAttachmentDefinition when the bridge provides it;
        else the node's own (`node_default_file`)."""
        source = self.config.default_network
        if source is None:
            return await self._default_from_podnetwork(k8s_runtime_config)
        if isinstance(source, Path):
            try:
                text = source.read_text()
            except OSError as exc:
                raise CNIError(
                    ErrorCode.INVALID_CONFIG, "cannot read the default network configuration", str(exc)
                ) from None
            return self._default_from_text(text, str(source), k8s_runtime_config)
        return self._default_from_text(json.dumps(dict(source)), str(source), k8s_runtime_config)

    @staticmethod
    def _default_from_text(
        text: str, source: str, k8s_runtime_config: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        try:
            parsed = npwg.load_cni_config(text, f"default network {source}")
            name = str(parsed.get("name") or "default")
            config = npwg.delegate_config(
                None, name, "", text, None, is_default=True, k8s_runtime_config=k8s_runtime_config
            )
        except npwg.DelegationError as exc:
            raise CNIError(
                ErrorCode.INVALID_CONFIG, "invalid default network configuration", str(exc)
            ) from None
        return name, config

    def _default_from_node(
        self, podnetwork: translate.PodNetwork, k8s_runtime_config: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """The network the node had before the agent: the runtime's choice without the agent's conflist."""
        found = node_default_file(self.config.conf_dir, self.config.conf_file)
        if found is None:
            provider = f"provider {podnetwork.spec.provider}" if podnetwork.spec.provider else "no provider"
            raise CNIError(
                ErrorCode.INVALID_CONFIG,
                "no cluster default network on this node",
                f"the PodNetwork {constants.DEFAULT_PODNETWORK!r} ({provider}) "
                f"is the network the node was installed with, and {self.config.conf_dir} holds no CNI "
                "configuration (.conf, .conflist, .json) other than this agent's: install the cluster's "
                "network plugin first (it writes its configuration there), or give --default-network-conf "
                f"FILE, or create {constants.DEFAULT_PODNETWORK!r} with provider {constants.BRIDGE_PROVIDER} "
                "and one "
                "NetworkAttachmentDefinition (docs/deploy.md \"The cluster default network\")",
            )
        path, text = found
        return self._default_from_text(text, str(path), k8s_runtime_config)

    async def _follow_refs(
        self, obj: translate.PodNetwork | translate.PodNetworkAttachment, found: _Found
    ) -> None:
        """Fetches the NADs and NetworkSelectionOptions an object's parametersRefs name
        (as `translate.references` reads them).

        Missing ones are left out, and so are names no API path may carry (`..`, `a/b`):
        the translation then reports them by name.
        """
        nads, options = translate.references(obj)
        for key in sorted(nads):
            if key not in found.nads and _fetchable(key):
                with contextlib.suppress(NotFound):
                    found.nads[key] = await self.objects.get_nad(*key)
        for key in sorted(options):
            if key not in found.options and _fetchable(key):
                with contextlib.suppress(NotFound):
                    found.options[key] = await self.objects.get_selection_options(*key)

    async def _default_from_podnetwork(
        self, k8s_runtime_config: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """The `default` PodNetwork's NetworkAttachmentDefinition, through the translation."""
        try:
            podnetwork = await self.objects.get_podnetwork(constants.DEFAULT_PODNETWORK)
        except NotFound:
            raise CNIError(
                ErrorCode.INVALID_CONFIG,
                "no cluster default network",
                f"the PodNetwork {constants.DEFAULT_PODNETWORK!r} does not exist: `podnetwork controller` "
                "creates it "
                "(KEP \"Default PodNetwork\"; deploy/controller), or create it yourself; or give "
                "--default-network-conf FILE",
            ) from None
        if not translate.is_bridge(podnetwork):
            # Another provider, or none (as the controller creates it): the network the cluster
            # was installed with, which the node's own CNI configuration runs (KEP "Default PodNetwork").
            return self._default_from_node(podnetwork, k8s_runtime_config)
        found = _Found()
        await self._follow_refs(podnetwork, found)
        try:
            (namespace, name), nad = translate.podnetwork_nad(podnetwork, found.objects())
            config = npwg.delegate_config(
                None,
                name,
                namespace,
                nad.spec.config,
                self.config.conf_dir,
                is_default=True,
                k8s_runtime_config=k8s_runtime_config,
            )
        except (translate.TranslationError, npwg.DelegationError) as exc:
            raise CNIError(
                ErrorCode.INVALID_CONFIG, "the cluster default network is unusable", str(exc)
            ) from None
        return npwg.nad_ref(namespace, name), config

    async def _selection(self, pod: Pod) -> list[npwg.NetworkSelectionElement]:
        """The pod's secondary networks in order.

        The pod's spec-style networks (`multinetwork.x-k8s.io/networks`) are the source
        of truth, through the bridge's translation; without them, the NPWG selection
        annotation `k8s.v1.cni.cncf.io/networks`.
        """
        namespace = pod.metadata.namespace or "default"
        annotations = pod.metadata.annotations or {}
        if constants.NETWORKS_ANNOTATION in annotations:
            try:
                # Attachments are held to what admission recorded of them: one re-created since to
                # name another PodNetwork was never checked for `use` (docs/controller.md).
                admitted = translate.admitted_networks(annotations)
            except translate.TranslationError as exc:
                raise CNIError(ErrorCode.INVALID_CONFIG, "invalid pod annotation "
                               f"{translate.ATTACHMENT_NETWORKS_ANNOTATION}", str(exc)) from None
            text = annotations[constants.NETWORKS_ANNOTATION]
            return await self._translated(namespace, text, admitted)
        annotation = annotations.get(npwg.NETWORKS_ANNOTATION)
        if not annotation:
            return []
        try:
            elements = npwg.parse_selection(annotation, namespace)
        except npwg.InvalidSelection as exc:
            # NPWG 4.1.2.1.x: an invalid annotation "shall be invalid and ignored".
            log.warning("pod %s/%s: ignoring its selection annotation: %s", namespace, pod.metadata.name, exc)
            return []
        for warning in npwg.ignored_key_warnings(elements):
            log.warning("pod %s/%s: %s", namespace, pod.metadata.name, warning)
        return elements

    async def _translated(
        self, namespace: str, text: str, admitted: Mapping[str, str] | None = None
    ) -> list[npwg.NetworkSelectionElement]:
        what = f"pod annotation {constants.NETWORKS_ANNOTATION}"
        try:
            raw = json.loads(text)
            if not isinstance(raw, list):
                raise ValueError("must be a JSON list")
            networks = [translate.Network.model_validate(item) for item in raw]
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
            raise CNIError(ErrorCode.INVALID_CONFIG, f"invalid {what}", str(exc)) from None
        found = _Found()
        for net in networks:
            pn_name = net.pod_network_name
            if net.pod_network_attachment_name:
                key = (namespace, net.pod_network_attachment_name)
                with contextlib.suppress(NotFound):
                    attachment = await self.objects.get_attachment(*key)
                    found.attachments[key] = attachment
                    await self._follow_refs(attachment, found)
                    pn_name = attachment.spec.pod_network_name
            if pn_name and pn_name != constants.DEFAULT_PODNETWORK and pn_name not in found.podnetworks:
                with contextlib.suppress(NotFound):
                    found.podnetworks[pn_name] = podnetwork = await self.objects.get_podnetwork(pn_name)
                    await self._follow_refs(podnetwork, found)
        try:
            translation = translate.translate(networks, namespace, found.objects(), admitted)
        except translate.TranslationError as exc:
            raise CNIError(
                ErrorCode.DELEGATION_FAILED, f"cannot translate the pod's networks ({exc.reason})", str(exc)
            ) from None
        for warning in translation.warnings:
            log.info("%s: %s", what, warning)
        return translation.elements

    async def plan_attachments(self, request: _Request, pod: Pod) -> list[plan.Planned]:
        """Every attachment of this ADD, resolved and validated before anything executes."""
        default_name, default_config = await self._default_network(request.runtime_config)
        elements = await self._selection(pod)
        ifnames = plan.interface_names(request.args.ifname, [e.interface for e in elements])
        planned = [plan.Planned(default_name, request.args.ifname, default_config, default=True)]
        for element, ifname in zip(elements, ifnames, strict=True):
            planned.append(await self.plan_selected(element, ifname))
        for p in planned:  # all configs valid and all plugins present, before the first exec
            self.check_planned(p)
        return planned

    async def plan_selected(self, element: npwg.NetworkSelectionElement, ifname: str) -> plan.Planned:
        """One selected network's attachment as `ifname`, resolved from its NAD (4.1.2.1, 3.4)."""
        try:
            nad = await self.objects.get_nad(element.namespace, element.name)
        except NotFound:
            raise CNIError(
                ErrorCode.DELEGATION_FAILED,
                f"NetworkAttachmentDefinition {element.ref} not found",
                "the pod selects it in k8s.v1.cni.cncf.io/networks; create it or fix the selection",
            ) from None
        nad_config = nad.spec.config
        try:
            config = npwg.delegate_config(
                element, element.name, element.namespace, nad_config, self.config.conf_dir
            )
        except npwg.DelegationError as exc:
            raise CNIError(
                ErrorCode.DELEGATION_FAILED, f"cannot attach {element.ref}", str(exc)
            ) from None
        route = tuple(element.default_route) if element.default_route is not None else None
        families = (
            plan.route_families(element.extensions.get(translate.DEFAULT_ROUTE_FAMILIES_KEY))
            if route is not None
            else None
        )
        return plan.Planned(
            element.ref,
            ifname,
            config,
            default=False,
            default_route=route,
            default_route_families=families,
        )

    def check_planned(self, p: plan.Planned) -> None:
        """A planned attachment's configuration loads and its plugins are installed; CNIError if not."""
        loaded = conflist.load(p.config, what=f"network {p.name!r}")
        if any(plugin.get("type") == PLUGIN_TYPE for plugin in loaded.plugins):
            # The agent's own shim as a delegate would call back into this ADD and wait
            # for the container's lock it holds; killed by the timeout, it would still
            # run later as an ADD of its own that nothing deletes.
            raise CNIError(
                ErrorCode.DELEGATION_FAILED,
                f"cannot attach {p.name}: its plugin {PLUGIN_TYPE!r} is this agent itself",
                "a network's configuration must name the plugins to run (bridge, macvlan, ...), "
                f"not the {PLUGIN_TYPE!r} shim",
            )
        conflist.resolve(loaded, self.config.bin_dirs)

    def _load(self, container_id: str) -> Record | None:
        """The container's record, for ADD and CHECK; an unreadable one is a CNI error.

        Only DEL moves an unreadable record aside: the runtime DELs after a failed ADD.
        """
        try:
            return self.cache.load(container_id)
        except cache.CacheError as exc:
            raise CNIError(
                ErrorCode.IO_FAILURE,
                f"the agent's record of container {container_id} is unreadable",
                f"{exc}; DEL this container: the agent then moves the file aside and starts afresh",
            ) from None

    async def _add(self, request: _Request) -> dict[str, Any] | None:
        args = request.args
        record = self._load(args.container_id)
        if record is not None and record.complete:
            if record.ifname != args.ifname:
                raise CNIError(
                    ErrorCode.INVALID_CONFIG,
                    f"container {args.container_id} is already attached on {record.ifname}",
                    f"ADD asked for {args.ifname}; DEL it first",
                )
            if self.config.patch_status and not record.status_published:
                self._publish(record)  # its status was never written: this ADD repairs it
            return record.result  # CRI: set-up of an already set-up pod is skipped
        if record is not None:
            # A previous ADD was cut short (agent killed): undo it before starting over.
            await self._teardown(record, args)
        assert request.pod_namespace and request.pod_name
        phases = request.phases
        try:
            with phases.timed("pod"):
                pod = await self.objects.get_pod(request.pod_namespace, request.pod_name)
        except NotFound:
            raise CNIError(
                ErrorCode.POD_NOT_FOUND,
                f"pod {request.pod_namespace}/{request.pod_name} not found",
                "the agent reads the pod's networks from the API before attaching them",
            ) from None
        with phases.timed("plan"):
            planned = await self.plan_attachments(request, pod)
        record = Record(
            container_id=args.container_id,
            netns=args.netns,
            ifname=args.ifname,
            cni_args=[list(p) for p in args.args],
            pod_namespace=request.pod_namespace,
            pod_name=request.pod_name,
            # The runtime's word first: the sandbox is that pod's, whatever the API holds by now.
            pod_uid=args.arg("K8S_POD_UID") or pod.metadata.uid or "",
        )
        stage = "setting up"
        try:
            for p in planned:
                stage = f"attaching {p.name} as {p.ifname}"
                attachment = Attachment(
                    name=p.name,
                    ifname=p.ifname,
                    config=p.config,
                    default=p.default,
                    default_route=list(p.default_route) if p.default_route is not None else None,
                )
                record.attachments.append(attachment)
                with phases.timed("cache"):
                    self._save(record)  # the intent, before the delegate runs
                try:
                    with phases.timed(f"exec {p.ifname}"):
                        attachment.result = await conflist.add(
                            self.executor,
                            conflist.load(p.config, what=f"network {p.name!r}"),
                            args.with_ifname(p.ifname),
                            self.config.bin_dirs,
                            self.config.plugin_timeout,
                        )
                except CNIError:
                    attachment.state = State.FAILED
                    raise
                attachment.state = State.ATTACHED  # saved with the next intent, or the final record
            stage = "moving the default route"
            with phases.timed("routes"):
                await self._apply_default_routes(record, planned)
        except BaseException as exc:
            problems = await self._teardown(record, args, raise_errors=False)
            if isinstance(exc, CNIError):
                exc.msg = f"{stage} failed: {exc.msg}"
                if problems:
                    exc.details = f"{exc.details}; rollback also failed: {'; '.join(problems)}".lstrip("; ")
            raise
        default = record.attachments[0]
        record.complete = True
        record.result = default.result
        record.status_published = not self.config.patch_status
        with phases.timed("cache"):
            self._save(record)
        if self.config.patch_status:
            with phases.timed("status"):
                entries = self._publish(record)
            self._watch_addresses(record, entries)
        return record.result

    async def _apply_default_routes(self, record: Record, planned: list[plan.Planned]) -> None:
        for attachment, p in zip(record.attachments, planned, strict=True):
            if attachment.default_route is None:
                continue
            try:
                gateways = plan.route_gateways(
                    attachment.default_route, p.default_route_families, attachment.result
                )
            except CNIError as exc:
                exc.msg = f"{attachment.name} should carry the default route: {exc.msg}"
                raise
            # Only the families that move: the status then reports what was applied (5.3.6.4).
            attachment.default_route = list(gateways)
            await routes.apply(
                record.netns, plan.default_route_ops(attachment.ifname, gateways), self.config.plugin_timeout
            )

    @staticmethod
    def _status_entries(record: Record) -> list[dict[str, Any]]:
        """The network-status (5) the record's CNI results give."""
        return [
            npwg.status_entry(
                a.name, a.result, default=a.default, interface=a.ifname, default_route=a.default_route
            )
            for a in record.attachments
        ]

    def _publish(self, record: Record) -> list[dict[str, Any]]:
        """Queues the record's network-status (spec 5: the runtime does not wait for it), and
        marks the record once it is written, so a restarted agent knows what is left.
        Returns the entries queued."""
        entries = self._status_entries(record)
        container_id = record.container_id

        async def written() -> None:
            async with self._container_lock(container_id):
                try:
                    current = self._load(container_id)
                    # Not a record a DEL removed, nor a later ADD's (its own write marks it).
                    if current is not None and current.complete and current.result == record.result:
                        current.status_published = True
                        self._save(current)
                except (CNIError, cache.CacheError, OSError) as exc:
                    # The status is written; only the mark is lost, and an unmarked record is
                    # written again by the next ADD or CHECK. An unreadable file is the DEL's to
                    # move aside (`_load`), not this callback's.
                    log.warning("pod %s/%s: network-status written, but the record of container %s cannot "
                                "be marked so (%s); the next ADD or CHECK writes the status again",
                                record.pod_namespace, record.pod_name, container_id, exc)

        self.status.publish(
            record.pod_namespace, record.pod_name, entries, owner=container_id, on_written=written,
            uid=record.pod_uid,
        )
        return entries

    async def _write_status(self, record: Record, entries: list[dict[str, Any]] | None = None) -> bool:
        """Queues the pod's network-status with the publisher: `entries` (what the address
        watch saw), else the record's. The publisher retries until it is written (or the pod
        is gone), so this is True once queued; hot-plug calls it."""
        return self._queue_status(record, entries)

    def _queue_status(self, record: Record, entries: list[dict[str, Any]] | None = None) -> bool:
        if entries is None:
            if record.status_published:  # a new status (hot-plug): a restarted agent writes it
                record.status_published = False
                self._save(record)
            self._publish(record)
        else:
            self.status.publish(record.pod_namespace, record.pod_name, entries, owner=record.container_id,
                                uid=record.pod_uid)
        return True

    # --- live IP changes (KEP Story 9, Req 25) -----------------------------------------

    def _watch_addresses(self, record: Record, entries: list[dict[str, Any]] | None = None) -> None:
        """Follows the addresses of a complete record's interfaces into its pod's network-status
        (`entries`: that status, when the caller has it already)."""
        if not (self.config.watch_addresses and self.config.patch_status and record.complete):
            return
        try:
            if entries is None:
                entries = self._status_entries(record)
        except npwg.UnsupportedResultVersion as exc:
            log.warning(
                "pod %s/%s: not watching its addresses: %s", record.pod_namespace, record.pod_name, exc
            )
            return
        self.address_watch.watch(record, entries)

    def _watch_recorded(self) -> None:
        """After a restart: every complete record is watched again (its first look writes the
        status if the addresses changed while no agent watched)."""
        if not (self.config.watch_addresses and self.config.patch_status):
            return
        for container_id in self.cache.container_ids():
            try:
                record = self.cache.load(container_id)
            except cache.CacheError:
                continue  # its DEL deals with it
            if record is not None and not unfinished(record):  # _roll_back watches those
                self._watch_addresses(record)

    async def _publish_observed(self, record: Record, entries: list[dict[str, Any]]) -> bool:
        """Queues what the address watch saw; False when not now (the watch looks again later).

        Never waits for the container's lock: a DEL holds it while it stops the watch and waits
        for the watch to end, so a watch waiting for it would hang that DEL. While an ADD, DEL,
        CHECK or hot-plug holds the container, the watch looks again after its backoff. The
        checks and the queueing below do not await, so nothing interleaves with them."""
        container_id = record.container_id
        if container_id in self._waiters:
            log.debug("pod %s/%s: its container is busy; looking at its addresses again later",
                      record.pod_namespace, record.pod_name)
            return False
        try:
            current = self.cache.load(container_id)
        except cache.CacheError:
            current = None
        if current is None or _shape(current) != _shape(record):
            # The pod's attachments changed since the watch began (or its record is gone):
            # this status would undo that. Watch again from the record as it is now; this
            # watch ends once the call below replaces it.
            log.info(
                "pod %s/%s: its attachments changed; watching its addresses again",
                record.pod_namespace,
                record.pod_name,
            )
            if current is not None:
                asyncio.get_running_loop().call_soon(self._watch_addresses, current)
            return False
        return self._queue_status(record, entries)

    def report(self, record: Record, reason: str, message: str) -> None:
        """Posts a Warning Event about the record's pod, in the background (a failure is logged)."""
        if self.events is None:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod = Pod(metadata=ObjectMeta(name=record.pod_name, namespace=record.pod_namespace,
                                      uid=record.pod_uid or None))
        key = hashlib.sha256(f"{record.pod_uid}/{reason}/{message}/{now}".encode()).hexdigest()[:16]
        body = pod_event(pod, reason, message, key=key, type_="Warning", now=now, component=EVENT_COMPONENT)
        task = asyncio.create_task(self._post_event(record, body), name=f"event {record.pod_name}")
        self._reporting.add(task)
        task.add_done_callback(self._reporting.discard)

    async def _post_event(self, record: Record, body: Mapping[str, Any]) -> None:
        assert self.events is not None
        try:
            await self.events.post_event(body)
        except Exception as exc:  # an Event is a report; the log has said it already
            log.warning("pod %s/%s: event not posted: %s", record.pod_namespace, record.pod_name, exc)

    def _save(self, record: Record) -> None:
        self.cache.save(record)
        self._written.add(record.container_id)

    async def _stop_orphans(self, container_id: str) -> None:
        """Unless this process wrote the container's record, stops the delegates an earlier
        agent process left running for it: a DEL must not run, let alone succeed, while a
        delegate ADD may still be creating what it removes. CNI error 11 if they outlive SIGKILL."""
        if container_id not in self._written:
            await orphans.stop(self._owner, container_id)

    async def _teardown(self, record: Record, args: RuntimeArgs, *, raise_errors: bool = True) -> list[str]:
        """DEL every attempted attachment in reverse, past failures (7.2); the failures' messages."""
        # Before the interfaces go: their removal is not a change of the pod's addresses.
        await self.address_watch.unwatch(record.container_id)
        await self._stop_orphans(record.container_id)
        # A status not yet written would report interfaces this DEL removes.
        self.status.cancel(record.pod_namespace, record.pod_name, record.container_id)
        netns = args.netns or record.netns
        problems: list[str] = []
        for attachment in list(reversed(record.attachments)):
            cni_args = tuple((str(k), str(v)) for k, v in record.cni_args)
            del_args = RuntimeArgs(Command.DEL, record.container_id, netns, attachment.ifname, cni_args)
            if unpassable := invoke.environment_problem(del_args):
                # A record of an agent that accepted such a name (a lone surrogate in an
                # interfaceName): its ADD could not start the plugin either, so nothing of it
                # exists to remove, and a DEL that tried would fail forever.
                log.warning(
                    "container %s: dropping %s (%r) from its record without a DEL: %s, so no plugin "
                    "ever ran with it",
                    record.container_id,
                    attachment.name,
                    attachment.ifname,
                    unpassable,
                )
                record.attachments.remove(attachment)
                continue
            try:
                await conflist.delete(
                    self.executor,
                    conflist.load(attachment.config, what=f"network {attachment.name!r}"),
                    del_args,
                    self.config.bin_dirs,
                    self.config.plugin_timeout,
                    attachment.result,
                )
            except CNIError as exc:
                if attachment.state is not State.FAILED:
                    problems.append(f"{attachment.name} ({attachment.ifname}): {exc}")
                    continue
                log.info("DEL after the failed ADD of %s (%s): %s", attachment.name, attachment.ifname, exc)
            # Not saved after each success: a DEL retried after a crash repeats the DEL of
            # attachments already gone, which the CNI spec requires plugins to accept.
            record.attachments.remove(attachment)
        if record.attachments:
            record.complete = False
            self._save(record)  # keep what failed, so the runtime's next DEL retries it
        else:
            self.cache.remove(record.container_id)
            self._written.discard(record.container_id)
        if problems and raise_errors:
            raise CNIError(
                ErrorCode.PLUGIN_FAILED,
                f"DEL failed for {len(problems)} attachment(s) of container {record.container_id}",
                "; ".join(problems),
            )
        return problems

    async def _del(self, request: _Request) -> None:
        container_id = request.args.container_id
        try:
            invoke.check_container_id(container_id)
        except CNIError as exc:
            log.info(
                "DEL of container %r: %s (%s); ADD refuses such an ID, so it never had a record: "
                "nothing to tear down",
                container_id[:64],
                exc.msg,
                exc.details[:120],
            )
            return
        try:
            record = self.cache.load(container_id)
        except cache.CacheError as exc:
            await self.address_watch.unwatch(container_id)
            await self._stop_orphans(container_id)
            # The record names no attachment to DEL; refusing every DEL would keep the pod
            # forever (CRI: tear-down must eventually succeed). Keep the file for a human,
            # report it to this DEL, and let the runtime's retry succeed.
            aside = self.cache.move_aside(container_id)
            self._written.discard(container_id)
            log.error(
                "container %s: its cache record is unreadable (%s); moved it to %s. Inspect that file for "
                "the attachments it held (interfaces in netns %s, IPAM reservations such as host-local's "
                "files under /var/lib/cni/networks) and remove them by hand",
                container_id,
                exc,
                aside,
                request.args.netns or "unknown",
            )
            raise CNIError(
                ErrorCode.IO_FAILURE,
                f"the agent's record of container {container_id} is unreadable; "
                "its attachments may be left behind",
                f"moved to {aside} for inspection (see the agent's log); the next DEL succeeds",
            ) from None
        if record is None:
            return  # CRI: tear-down of a torn-down pod succeeds
        await self._teardown(record, request.args)

    async def _check(self, request: _Request) -> None:
        if invoke.version_tuple(request.cni_version) < (0, 4, 0):
            raise CNIError(ErrorCode.INCOMPATIBLE_VERSION, f"cniVersion {request.cni_version} has no CHECK")
        record = self._load(request.args.container_id)
        if record is None:
            raise CNIError(
                ErrorCode.UNKNOWN_CONTAINER,
                f"container {request.args.container_id} is not attached",
                "no ADD is recorded for it",
            )
        if not record.complete or unfinished(record):
            # Not code 3: that tells the runtime no DEL is needed, and these attachments need one.
            raise CNIError(
                ErrorCode.ATTACHMENT_INCOMPLETE,
                f"container {request.args.container_id} is only partly attached",
                "its ADD (or a network added to the running pod) was cut short, or a DEL failed for some "
                "attachment; DEL it, then ADD again",
            )
        for attachment in record.attachments:
            cl = conflist.load(attachment.config, what=f"network {attachment.name!r}")
            if invoke.version_tuple(cl.cni_version) < (0, 4, 0):
                continue  # that delegate's version has no CHECK; nothing to ask it
            await conflist.check(
                self.executor,
                cl,
                request.args.with_ifname(attachment.ifname),
                self.config.bin_dirs,
                self.config.plugin_timeout,
                attachment.result,
            )
        if self.config.patch_status and not record.status_published:
            self._publish(record)  # its status was never written: this CHECK repairs it

    async def _gc(self, request: _Request, arrival: int) -> None:
        """CNI 1.1 GC: tear down recorded containers the runtime no longer lists as valid.

        The runtime built its list before sending GC; an ADD that arrived after the GC
        request is missing from it without being stale, so its container is kept.
        """
        valid = request.conf.get("cni.dev/valid-attachments")
        if not isinstance(valid, list):
            return
        keep = {a.get("containerID") for a in valid if isinstance(a, dict)}
        for container_id in list(self.cache.container_ids()):
            if container_id in keep:
                continue
            async with self._container_lock(container_id):
                if self._add_arrival.get(container_id, -1) > arrival:
                    log.info("GC: keeping container %s, whose ADD arrived after the GC request", container_id)
                    continue
                try:
                    record = self.cache.load(container_id)
                except cache.CacheError as exc:
                    aside = self.cache.move_aside(container_id)
                    log.error("GC: container %s: %s; moved it to %s, inspect it", container_id, exc, aside)
                    continue
                if record is not None:
                    stale = RuntimeArgs(Command.DEL, container_id)
                    try:
                        await self._teardown(record, stale, raise_errors=False)
                    except CNIError as exc:  # its delegates outlived SIGKILL: the next GC or DEL retries
                        log.error("GC: container %s not torn down: %s", container_id, exc)
                        continue
                    self._add_arrival.pop(container_id, None)
        async with self._no_adds():
            await self._forward_gc()

    async def _forward_gc(self) -> None:
        """GC of every delegate network the cache knows, with that network's attachments to keep.

        A delegating plugin must pass GC on to its delegates (CNI spec 1.1 "GC"), but the
        runtime's list names the agent's attachments (container, eth0), not the delegates'
        (container, net1, ...). The agent's records, after the stale ones are gone, are
        that list per delegate. Networks are grouped by CNI network name: plugins such as
        host-local keep their state per name, so a GC must list every attachment of that
        name, whichever NetworkAttachmentDefinition made it. Attachments still recorded
        (kept, a DEL that failed, an ADD cut short) all count as valid: a DEL frees them.
        """
        keep: dict[str, list[dict[str, str]]] = {}
        configs: dict[str, dict[str, conflist.ConfList]] = {}
        for container_id in self.cache.container_ids():
            try:
                record = self.cache.load(container_id)
            except cache.CacheError as exc:
                log.warning("GC: skipping container %s: %s", container_id, exc)
                continue
            if record is None:
                continue
            for attachment in record.attachments:
                try:
                    cl = conflist.load(attachment.config, what=f"network {attachment.name!r}")
                except CNIError as exc:
                    log.warning("GC: container %s: %s", container_id, exc)
                    continue
                entry = {"containerID": container_id, "ifname": attachment.ifname}
                if entry not in keep.setdefault(cl.name, []):
                    keep[cl.name].append(entry)
                configs.setdefault(cl.name, {})[json.dumps(cl.to_json(), sort_keys=True)] = cl
        problems: list[str] = []
        timeout = self.config.plugin_timeout
        for name, variants in configs.items():
            for cl in variants.values():
                try:
                    await conflist.gc(self.executor, cl, keep[name], self.config.bin_dirs, timeout)
                except CNIError as exc:
                    problems.append(str(exc))
        if problems:
            raise CNIError(
                ErrorCode.PLUGIN_FAILED, "GC failed in some delegate networks", "; ".join(problems)
            )


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
