"""`podnetwork cni-agent`: run the CNI agent on this node (and install its shim).

`command` is a `podnetwork.cli.Command` (help, configure, run, description), which
is all the CLI reads; the command layer knows nothing of the KEP, so the agent may use
it (`.importlinter`: the agent reaches PodNetworks only through `bridge.translate`).
Installing is a step of its own (`bridge.agent.node.install`), taken before the agent runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bridge.agent.daemon import agent as agent_mod
from bridge.agent.delegates import hostpaths, invoke
from bridge.agent.node import install, preflight, settings
from bridge.agent.node.install import DEFAULT_SHIM_PYTHON, install_shim
from bridge.dracontract import names as dra_names
from podnetwork.cli import Command
from podnetwork.cli.arguments import byte_count, positive_seconds, tcp_port
from podnetwork.cli.manifestlimits import add_limit_arguments
from podnetwork.kube import credentials

#: Where `podnetwork dra-driver` keeps its records by default (its --state-dir: `<kubelet plugins
#: dir>/<driver>/`); deploy/agent's DaemonSet mounts it read-only.
DEFAULT_DRA_STATE_DIR = os.path.join("/var/lib/kubelet/plugins", dra_names.DEFAULT_DRIVER)

log = logging.getLogger(__name__)


def _paths(text: str) -> tuple[Path, ...]:
    dirs = tuple(Path(p) for p in text.split(os.pathsep) if p)
    if not dirs:
        raise argparse.ArgumentTypeError("give at least one directory")
    return dirs


def configure(p: argparse.ArgumentParser) -> None:
    _paths_and_limits(p)
    _install_flags(p)
    _node_flags(p)
    _dra_flags(p)
    _serving_flags(p)


def _paths_and_limits(p: argparse.ArgumentParser) -> None:
    """The agent's paths on the node, its delegates' limits, what it follows."""
    p.add_argument(
        "--socket",
        type=Path,
        default=settings.DEFAULT_SOCKET,
        help="unix socket the shim connects to, mode 0600 (default: %(default)s)",
    )
    p.add_argument(
        "--cni-bin-dir",
        type=_paths,
        default=invoke.DEFAULT_BIN_DIRS,
        metavar="DIR[:DIR...]",
        help="the only directories delegate plugins are taken from "
        f"(default: {os.pathsep.join(map(str, invoke.DEFAULT_BIN_DIRS))})",
    )
    p.add_argument(
        "--cni-conf-dir",
        type=Path,
        default=settings.DEFAULT_CONF_DIR,
        help="on-disk delegate configurations, NPWG 3.4.1 (default: %(default)s)",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=settings.DEFAULT_CACHE_DIR,
        help="what the agent attached, per container (default: %(default)s)",
    )
    p.add_argument(
        "--default-network-conf",
        type=Path,
        metavar="FILE",
        help="CNI config (list) of the cluster default network. Without it: the NetworkAttachmentDefinition "
        "of the `default` PodNetwork when its provider is the NPWG bridge, else (no provider, as the "
        "controller creates it, or another) the node's own network: the first CNI configuration of "
        "--cni-conf-dir in lexical order, other than the agent's (docs/deploy.md)",
    )
    p.add_argument(
        "--plugin-timeout",
        type=positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="time one delegate plugin call may take (default: %(default)s)",
    )
    p.add_argument(
        "--max-request-bytes",
        type=byte_count,
        default=1024 * 1024,
        help="largest network configuration accepted (default: %(default)s)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=settings.AgentConfig.max_connections,
        metavar="N",
        help="requests the socket serves at once, and connections it keeps waiting for their request; a "
        "request over it is answered CNI error 11, try again later, and a connection over it closes the "
        "oldest idle one (default: %(default)s)",
    )
    p.add_argument(
        "--durable-cache",
        action="store_true",
        help="fsync every cache write, so records survive a power loss too (~10 ms per write)",
    )
    p.add_argument(
        "--watch-addresses",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="follow addresses added to or removed from the interfaces the agent attached (SLAAC, "
        "`ip addr` in the pod) into the pod's network-status, KEP Req 25; one netlink socket per pod, "
        "at most one status write per pod every 2 s (default: on; see docs/agent.md)",
    )


def _install_flags(p: argparse.ArgumentParser) -> None:
    """Installing the shim and the agent's conflist (`bridge.agent.node.install`)."""
    p.add_argument(
        "--install",
        action="store_true",
        help="install the shim into the CNI bin dir as `multinetwork` (the compiled one by default, see "
        "--compiled-shim), and write the agent's conflist once the default network is usable (NPWG 6.1)",
    )
    p.add_argument(
        "--uninstall",
        action="store_true",
        help="only remove what --install put on this node (the agent's conflist, then the shim), say "
        "what was removed, and exit 0; run in each agent's container before its DaemonSet is deleted "
        "(deploy/uninstall.sh), since a stopping agent removes its conflist but leaves the shim",
    )
    p.add_argument(
        "--install-bin-dir",
        type=Path,
        help="where --install puts the shim (default: the first --cni-bin-dir)",
    )
    p.add_argument(
        "--agent-conf-dir",
        type=Path,
        help="where --install writes the agent's conflist (default: --cni-conf-dir; NPWG 6.1.1 "
        "recommends a separate directory given to the kubelet)",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--compiled-shim",
        action="store_const",
        dest="shim",
        const="compiled",
        default="auto",
        help="with --install, install only the compiled shim (bridge/agent/shim/shim.c) and fail, saying "
        "why, when it can be neither taken prebuilt nor built. Default: the compiled shim where it can be "
        "had (--prebuilt-shim, else built with cc or gcc from PATH, statically; ~5 ms less per CNI call, "
        "docs/benchmarks.md), else the Python shim, with one warning saying why",
    )
    which.add_argument(
        "--python-shim",
        action="store_const",
        dest="shim",
        const="python",
        help="with --install, install the Python shim (bridge/agent/shim/shim.py, run by --shim-python)",
    )
    p.add_argument(
        "--prebuilt-shim",
        type=Path,
        metavar="FILE",
        help="the compiled shim to install, taken only if it is the build of this agent's shim.c and "
        f"protocol (default: {install.DEFAULT_PREBUILT_SHIM} if it exists, which the image's build stage "
        "makes; else it is built here)",
    )
    p.add_argument(
        "--shim-python",
        default=DEFAULT_SHIM_PYTHON,
        help="the node's python3 that runs the shim (default: %(default)s)",
    )


def _dra_flags(p: argparse.ArgumentParser) -> None:
    """Where the DRA driver's records of prepared claims are (docs/dra.md)."""
    p.add_argument(
        "--dra-state-dir",
        default=DEFAULT_DRA_STATE_DIR,
        metavar="DIR",
        help="the records of claims `podnetwork dra-driver` prepared on this node (its --state-dir): a pod "
        "with claims recorded there gets exactly their PodNetworks (docs/dra.md); '' to not read claims "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--dra-driver-name",
        default=dra_names.DEFAULT_DRIVER,
        metavar="NAME",
        help="the DRA driver whose records --dra-state-dir holds (its --driver-name): a pod's claim "
        "allocated to it that it did not record fails the ADD with CNI error 11 (default: %(default)s)",
    )


def _node_flags(p: argparse.ArgumentParser) -> None:
    """The node: its name (hot-plug), what it must give the agent."""
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or None,
        metavar="NODE",
        help="this node's name: the agent then watches the pods bound to it and attaches or detaches "
        "the networks added to or removed from a running pod (hot-plug, docs/hotplug.md); "
        "default: $NODE_NAME; without it, or with --objects, hot-plug is off",
    )
    p.add_argument(
        "--policies",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="enforce MultiNetworkPolicy (k8s.cni.cncf.io) in this node's pods: the agent lists and watches "
        "policies, pods, namespaces, NADs and PodNetworks cluster-wide and writes an nftables table into "
        "each selected pod's namespace, before its ADD answers (docs/network-policy.md; default: on, "
        "with a cluster)",
    )
    p.add_argument(
        "--node-netns",
        type=Path,
        default=None,
        metavar="PATH",
        help="the node's network namespace: where delegate plugins run and where node access "
        "(docs/node-access.md) gives the node its paths and nftables table; default: the agent's own "
        "(the DaemonSet runs with hostNetwork). For a node standing in a namespace (tests)",
    )
    p.add_argument(
        "--services",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the ClusterIPs of Services on PodNetworks in this node's pods: the agent lists and "
        "watches the Services labelled "
        "service.kubernetes.io/service-proxy-name=podnetwork.multinetwork.x-k8s.io, "
        "the bridge's EndpointSlices and the PodNetworks cluster-wide, and writes DNAT rules and routes into "
        "each client pod's namespace (docs/services.md; default: on, with a cluster; fails open)",
    )
    p.add_argument(
        "--netns-dir",
        type=Path,
        default=hostpaths.DEFAULT_NETNS_DIR,
        metavar="DIR",
        help="where the runtime makes pods' network namespaces; the agent checks that mounts made there "
        "after it started reach it (mount propagation; a problem makes it not ready, docs/deploy.md) "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--check-host",
        action="store_true",
        help="only check that the node lets the agent see new network namespaces (the mount holding "
        "--netns-dir is shared or a slave on the host, as mountPropagation: HostToContainer needs), say "
        "so, and exit 0, or 1 with what the node needs (the DaemonSet's init container; needs hostPID)",
    )
    p.add_argument(
        "--host-proc",
        type=Path,
        default=hostpaths.HOST_PROC,
        metavar="DIR",
        help="the host's init process in /proc, for --check-host (default: %(default)s)",
    )


def _serving_flags(p: argparse.ArgumentParser) -> None:
    """Metrics, the cluster (or a file of objects) the agent reads."""
    p.add_argument(
        "--metrics-port",
        type=tcp_port,
        metavar="PORT",
        help="serve Prometheus metrics over plain HTTP at GET /metrics on this TCP port "
        "(docs/metrics.md; default: not served: the agent shares the node's network namespace)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address of --metrics-port (default: %(default)s)",
    )
    p.add_argument(
        "--watch-cache-objects",
        type=int,
        default=None,
        metavar="N",
        help="keep NetworkAttachmentDefinitions, PodNetworks, PodNetworkAttachments and "
        "NetworkSelectionOptions by list+watch, at most N per kind, 0 for none "
        "(default: 1000; the pod itself is always read fresh; see bridge/agent/kube/watchcache.py)",
    )
    p.add_argument(
        "--watch-cache-kind-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="at most BYTES held per kind by the watch cache, as Python holds the objects; an object "
        "past the bound is read from the API when an ADD names it (default: 8 MiB)",
    )
    p.add_argument(
        "--watch-cache-object-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="the watch cache keeps no object larger than BYTES (default: 256 KiB); a larger one "
        "is read from the API when an ADD names it",
    )
    credentials.add_arguments(p)
    p.add_argument(
        "--objects",
        type=Path,
        metavar="FILE",
        help="serve from the objects in this YAML/JSON file instead of a cluster "
        "(pods, NADs; annotation patches stay in memory)",
    )
    add_limit_arguments(p, help="refuse an --objects file larger than this, e.g. 16Mi")


def _load_objects(path: Path, max_file_bytes: int) -> Any:
    """The objects of a YAML/JSON file (documents, lists, or `kind: List`), read as the manifest
    commands read theirs (`podnetwork.cli.manifests`: a regular file, within `max_file_bytes`,
    UTF-8, YAML aliases and nesting bounded); ValueError says what is wrong, starting with the path."""
    from bridge.agent.kube.objects import MemoryObjects
    from podnetwork.cli import manifestfiles, manifestlimits, manifestparse

    limits = manifestlimits.Limits(max_file_bytes=max_file_bytes)
    text = manifestfiles.read_file(path, limits=limits, stdin_hint=False)
    if path.suffix.lower() == ".json":
        parsed = manifestparse.parse_json(text, str(path), limits)
    else:
        parsed = manifestparse.parse_yaml(text, str(path), limits, manifestlimits.YAMLParser.AUTO)
    if parsed.error is not None:
        raise parsed.error
    docs: list[Any] = []
    for _, _, doc in parsed.documents:
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List":
            docs.extend(doc.get("items") or [])
        elif isinstance(doc, list):
            docs.extend(doc)
        else:
            docs.append(doc)
    store = MemoryObjects()
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: object {i} is not a mapping")
        try:
            store.put(doc)
        except ValueError as exc:
            raise ValueError(f"{path}: object {i}: {exc}") from None
    return store


Beside = Callable[[], Coroutine[Any, Any, None]]


async def serve(agent: agent_mod.Agent, stop: asyncio.Event, *, beside: Beside | None = None,
                metrics_port: int | None = None, metrics_host: str = "127.0.0.1") -> None:
    """Serve until `stop`; `beside()` runs while the socket is open (hot-plug's pod watch)."""
    from bridge.agent.daemon.running import Running  # the server: only when serving

    async with Running(agent, metrics_port=metrics_port, metrics_host=metrics_host):
        task = asyncio.create_task(beside(), name="cni-agent-beside") if beside is not None else None
        try:
            await stop.wait()
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


#: Bytes of asyncio's read buffer per TLS connection. Python 3.11 allocates 256 KiB per connection
#: (`asyncio.sslproto.SSLProtocol.max_size`), zeroed, so resident; the agent holds ~16 connections
#: to the API server (its watches, its pooled client): ~4 MB of read buffers that a TLS record
#: (16 KiB at most) never fills. At 64 KiB a kit node's idle agent measured 44.8 MB against 47.0-47.3
#: (docs/benchmarks.md, "The agent's RSS: where it goes, what was tried").
TLS_READ_BUFFER = 64 * 1024


def small_tls_read_buffers() -> None:
    """asyncio's TLS read buffer down to `TLS_READ_BUFFER` for the connections this process opens
    from now on. `max_size` is a class attribute each new connection reads; only the agent's
    command calls this (its process is the agent's alone)."""
    from asyncio import sslproto

    if getattr(sslproto.SSLProtocol, "max_size", 0) > TLS_READ_BUFFER:
        sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


def watch_children_by_pidfd() -> None:
    """Learn of plugin exits from a pidfd on the event loop (Linux 5.3+), as Python 3.12 does by
    default. 3.11's default starts a thread per child to wait for it: a plugin exec then took
    ~4 ms instead of ~2.3 ms, and 10 at once ~22 instead of ~12 (docs/benchmarks.md)."""
    if sys.version_info >= (3, 12):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))  # the kernel supports pidfds
    except (AttributeError, OSError):
        return  # an older kernel: keep the default
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)


def check_host(args: argparse.Namespace) -> int:
    """--check-host: what the kubelet will demand of the node for the agent's container, said first."""
    problem = hostpaths.host_netns_problem(args.netns_dir, proc=args.host_proc)
    if problem is not None:
        print(f"podnetwork cni-agent: the node is not ready for the agent: {problem}", file=sys.stderr)
        return 1
    print(f"podnetwork cni-agent: the node propagates mounts under {args.netns_dir} to containers")
    return 0


class Refused(Exception):
    """The command cannot run as asked: said on stderr as `error: <message>`, exit `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def check_flags(args: argparse.Namespace) -> None:
    """Flags whose values argparse cannot judge alone; `Refused` (exit 2) names the first wrong."""
    if args.max_connections < 1:
        raise Refused(f"--max-connections {args.max_connections}: give 1 or more", 2)
    if args.watch_cache_objects is not None and args.watch_cache_objects < 0:
        raise Refused(f"--watch-cache-objects {args.watch_cache_objects}: give 0 (no cache) or more", 2)
    for flag, value in (("--watch-cache-kind-bytes", args.watch_cache_kind_bytes),
                        ("--watch-cache-object-bytes", args.watch_cache_object_bytes)):
        if value is not None and value < 1:
            raise Refused(f"{flag} {value}: give 1 or more (--watch-cache-objects 0 turns the cache off)", 2)
    if args.default_network_conf is not None and not args.default_network_conf.is_file():
        raise Refused(f"--default-network-conf {args.default_network_conf}: no such file", 2)


def check_paths(args: argparse.Namespace, config: settings.AgentConfig) -> None:
    """The paths the agent will create things in, before it creates any: `Refused` (exit 2)
    names the first it cannot use, so a refused start leaves nothing behind."""
    checks = [("--socket", config.socket_path, preflight.socket_problem),
              ("--cache-dir", config.cache_dir, preflight.directory_problem)]
    if args.install:
        bin_flag = "--install-bin-dir" if args.install_bin_dir is not None else "--cni-bin-dir"
        conf_flag = "--agent-conf-dir" if args.agent_conf_dir is not None else "--cni-conf-dir"
        checks += [(bin_flag, Path(args.install_bin_dir or config.bin_dirs[0]), preflight.directory_problem),
                   (conf_flag, Path(args.agent_conf_dir or config.conf_dir), preflight.directory_problem)]
    for flag, path, problem_of in checks:
        problem = problem_of(path)
        if problem is not None:
            raise Refused(f"{flag} {path}: {problem}", 2)


def agent_config(args: argparse.Namespace) -> settings.AgentConfig:
    return settings.AgentConfig(
        socket_path=args.socket,
        cache_dir=args.cache_dir,
        bin_dirs=tuple(args.cni_bin_dir),
        conf_dir=args.cni_conf_dir,
        default_network=args.default_network_conf,
        plugin_timeout=args.plugin_timeout,
        max_request_bytes=args.max_request_bytes,
        max_connections=args.max_connections,
        durable_cache=args.durable_cache,
        watch_addresses=args.watch_addresses,
        netns_dir=args.netns_dir,
        node_netns=args.node_netns,
        dra_state_dir=Path(args.dra_state_dir) if args.dra_state_dir else None,
        dra_driver=args.dra_driver_name,
    )


def install_step(args: argparse.Namespace, config: settings.AgentConfig) -> Path:
    """--install: the shim into the CNI bin dir now; the path the agent writes its conflist to
    once its default network is usable (NPWG 6.1)."""
    bin_dir = args.install_bin_dir or config.bin_dirs[0]
    try:
        shim = install.install(bin_dir, args.shim_python, shim=args.shim, prebuilt=prebuilt_shim(args))
    except install.NoCompiledShim as exc:
        raise Refused(f"--compiled-shim: {exc}; install a C compiler (cc) where the agent runs, or give "
                      "--prebuilt-shim, or drop --compiled-shim to accept the Python shim") from None
    except (OSError, ValueError) as exc:
        raise Refused(f"cannot install the shim into {bin_dir}: {exc}") from None
    kind = "the compiled shim" if shim.compiled else "the Python shim"
    print(f"installed {shim.path}: {kind} ({shim.how})", file=sys.stderr)
    return Path(args.agent_conf_dir or config.conf_dir) / settings.DEFAULT_CONF_FILE_NAME


def prebuilt_shim(args: argparse.Namespace) -> Path | None:
    """The compiled shim to take prebuilt: --prebuilt-shim, else the image's if it is there."""
    if args.prebuilt_shim is not None:
        return Path(args.prebuilt_shim)
    return install.DEFAULT_PREBUILT_SHIM if install.DEFAULT_PREBUILT_SHIM.exists() else None


def object_source(args: argparse.Namespace) -> Any:
    """What the agent reads the cluster through: --objects, else the API (behind the watch cache)."""
    if args.objects is not None:
        try:
            return _load_objects(args.objects, args.max_file_size)
        except (OSError, ValueError) as exc:  # a ManifestError is a ValueError
            raise Refused(f"--objects {exc}", 2) from None
    from bridge.agent.kube import watchcache
    from bridge.agent.kube.objects import KubernetesObjects

    try:
        objects: Any = KubernetesObjects(args.kubeconfig, args.context)
        limit = watchcache.MAX_OBJECTS if args.watch_cache_objects is None else args.watch_cache_objects
        if limit > 0:
            objects = watchcache.CachedObjects(
                objects, max_objects=limit,
                max_bytes=args.watch_cache_kind_bytes or watchcache.MAX_KIND_BYTES,
                max_object_bytes=args.watch_cache_object_bytes or watchcache.MAX_OBJECT_BYTES)
    except Exception as exc:
        raise Refused(f"cannot reach the cluster: {exc}; give --kubeconfig (or run in a pod), "
                      "or --objects FILE to serve without a cluster") from None
    return objects


def policy_enforcer(args: argparse.Namespace, objects: Any, api: Any) -> Any:
    """MultiNetworkPolicy enforcement (`bridge.agent.policy.apply`) fed by list + watch: the watch
    cache's NAD and PodNetwork watches when it has them (one watch per kind), its own otherwise."""
    if not args.policies:
        log.info("policies: not enforced (--no-policies)")
        return None
    from bridge.agent.kube import watchcache
    from bridge.agent.policy.apply import Enforcer
    from bridge.agent.policy.state import KINDS, PolicyState

    enforcer = Enforcer(PolicyState(node=args.node_name))
    mirrors = objects.mirrors if isinstance(objects, watchcache.CachedObjects) else {}
    for kind in KINDS:
        if kind.name in mirrors:
            mirrors[kind.name].listeners.append(enforcer.state)
    enforcer.follow(api, [kind for kind in KINDS if kind.name not in mirrors])
    return enforcer


def service_clusterips(args: argparse.Namespace, objects: Any, api: Any) -> Any:
    """The Services' ClusterIPs in this node's pods (`bridge.agent.services.apply`) fed by list + watch: the
    watch cache's PodNetwork watch when it has one (one watch per kind), its own otherwise."""
    if not args.services:
        log.info("services: ClusterIPs not served in pods (--no-services)")
        return None
    from bridge.agent.kube import watchcache
    from bridge.agent.services.apply import ClusterIPs
    from bridge.agent.services.state import KINDS, ServiceState

    served = ClusterIPs(ServiceState())
    mirrors = objects.mirrors if isinstance(objects, watchcache.CachedObjects) else {}
    for kind in KINDS:
        if kind.name in mirrors:
            mirrors[kind.name].listeners.append(served.state)
    served.follow(api, [kind for kind in KINDS if kind.name not in mirrors])
    return served


def node_agent(args: argparse.Namespace, objects: Any, config: settings.AgentConfig) -> tuple[agent_mod.Agent,
                                                                                               Beside | None]:
    """The agent, with Events about its pods and its node when it has a cluster; and hot-plug's
    pod watch to run beside it with --node-name."""
    if args.objects is not None:
        log.info("hot-plug is off: --objects serves no watch")
        return agent_mod.Agent(objects, config), None
    from bridge.agent.daemon import hotplug
    from bridge.agent.kube.objects import KubernetesObjects
    from bridge.agent.node import readiness

    # Warning Events about pods (the address watch's cap), with the object source's client.
    kube = objects if isinstance(objects, KubernetesObjects) else objects.source
    agent = agent_mod.Agent(objects, config, events=hotplug.KubernetesEvents(kube.api),
                            enforcer=policy_enforcer(args, objects, kube.api),
                            services=service_clusterips(args, objects, kube.api))
    if not args.node_name:
        log.info("hot-plug is off: no --node-name")
        return agent, None
    try:
        pods_api = hotplug.node_api(args.kubeconfig, args.context)
    except Exception as exc:
        raise Refused(f"cannot reach the cluster for hot-plug: {exc}") from None
    node_name = args.node_name
    # Each change of readiness as an Event on this node too (kubectl describe node).
    agent.readiness = readiness.Reporter(node_name, hotplug.KubernetesEvents(pods_api))

    async def beside() -> None:
        await hotplug.follow_node(agent, pods_api, node_name)

    return agent, beside


async def until_signalled(agent: agent_mod.Agent, objects: Any, beside: Beside | None,
                          args: argparse.Namespace) -> None:
    """Serves until SIGINT or SIGTERM, then closes the object source."""
    from bridge.agent.kube import watchcache
    from bridge.agent.kube.objects import KubernetesObjects

    watch_children_by_pidfd()
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        if not stop.is_set():
            log.warning("podnetwork cni-agent: %s received, stopping (removing the socket and "
                        "the conflist)", sig.name)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    if isinstance(objects, watchcache.CachedObjects):
        objects.start()
    try:
        await serve(agent, stop, beside=beside, metrics_port=args.metrics_port,
                    metrics_host=args.metrics_host)
    finally:
        if isinstance(objects, KubernetesObjects | watchcache.CachedObjects):
            await objects.close()


def uninstall(args: argparse.Namespace) -> int:
    """--uninstall: the conflist first (the runtime stops calling the shim), then the shim."""
    conf_file = Path(args.agent_conf_dir or args.cni_conf_dir) / settings.DEFAULT_CONF_FILE_NAME
    bin_dir = Path(args.install_bin_dir or args.cni_bin_dir[0])
    try:
        removed = [conf_file] if conf_file.exists() else []
        install.remove_conflist(conf_file)
        removed += install.remove_shim(bin_dir)
    except OSError as exc:
        print(f"error: cannot remove what --install put on this node: {exc}", file=sys.stderr)
        return 1
    print(f"podnetwork cni-agent: removed {', '.join(map(str, removed))}" if removed else
          f"podnetwork cni-agent: nothing to remove ({conf_file}, {bin_dir / settings.PLUGIN_TYPE})")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.check_host:
        return check_host(args)
    if args.uninstall:
        return uninstall(args)
    if not getattr(args, "verbose", 0):
        # Readiness changes are rare and matter at 3 a.m.: shown at the default verbosity.
        logging.getLogger("bridge.agent.node.readiness").setLevel(logging.INFO)
    small_tls_read_buffers()  # before the first connection to the API server
    try:
        config = agent_config(args)
        check_flags(args)
        check_paths(args, config)
        if args.install:
            config.conf_file = install_step(args, config)
        objects = object_source(args)
        agent, beside = node_agent(args, objects, config)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    try:
        asyncio.run(until_signalled(agent, objects, beside, args))
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


command = Command(
    help="run the CNI agent (the NPWG delegating plugin) on this node",
    configure=configure,
    run=run,
    description=(
        "Run the CNI agent: the runtime executes the `multinetwork` shim, which forwards each CNI\n"
        "request over --socket to this agent. The agent attaches the cluster default network, then\n"
        "each network the pod selects, by executing the delegate plugins from --cni-bin-dir.\n\n"
        "With --install it first installs the shim into the CNI bin dir (the compiled shim: the image's\n"
        "prebuilt one, else built with the node's cc; without either the Python shim, with a warning\n"
        "saying why) and, once the default network is usable, writes its conflist so the runtime starts\n"
        "using it (NPWG multi-net spec 6.1).\n\n"
        "example:\n"
        "  podnetwork cni-agent --install --default-network-conf /etc/cni/net.d/10-default.conflist \\\n"
        "      --agent-conf-dir /etc/cni/multinetwork.d"
    ),
)

__all__ = ["DEFAULT_SHIM_PYTHON", "command", "install_shim", "watch_children_by_pidfd"]
