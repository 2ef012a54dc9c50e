"""How one agent runs (`AgentConfig`), and the names and paths it has on a node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.agent.delegates import invoke
from bridge.agent.shim import protocol

#: The agent's own network name, in the conflist it installs and in logs.
NETWORK_NAME = "multinetwork"
#: The shim's file name in the CNI bin dir, and the `type` of the agent's conflist.
PLUGIN_TYPE = "multinetwork"
DEFAULT_SOCKET = Path(protocol.DEFAULT_SOCKET)
DEFAULT_CACHE_DIR = Path("/var/lib/multinetwork/cache")
DEFAULT_CONF_DIR = Path("/etc/cni/net.d")
DEFAULT_CONF_FILE_NAME = "00-multinetwork.conflist"
#: The component the agent's Events about pods carry.
EVENT_COMPONENT = "podnetwork-cni-agent"


@dataclass(frozen=True)
class AddressWatchSettings:
    """How often one pod's status may be written by the address watch (`bridge.agent.pods.addresswatch`,
    whose module docstring says why these values)."""

    quiet: float = 0.5
    """Seconds without a change before the namespace is looked at."""
    max_delay: float = 2.0
    """Seconds after the first unseen change by which it is looked at, even during a storm."""
    min_interval: float = 2.0
    """Seconds between two looks at one pod (and so between two writes of its status)."""
    retry_max: float = 60.0
    """Longest wait before retrying a status write the API refused."""
    max_ips_per_interface: int = 64
    """IPs written per network-status entry; the first ones are kept (the plugin's first)."""
    max_status_bytes: int = 64 * 1024
    """Bytes of network-status JSON the watch writes at most: a quarter of the 256 KiB Kubernetes
    allows for all of a pod's annotations together, the rest left to the others."""

    def __post_init__(self) -> None:
        for name in ("quiet", "max_delay", "min_interval", "retry_max"):
            if getattr(self, name) < 0:
                raise ValueError(f"address watch setting {name} must not be negative")
        if self.max_delay < self.quiet:
            raise ValueError("address watch setting max_delay must be at least quiet")
        for name in ("max_ips_per_interface", "max_status_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"address watch setting {name} must be at least 1")


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
    """Requests the socket serves at once (more are answered CNI error 11, try again later), and
    connections it keeps waiting for their request (one more closes the oldest idle one)
    (`bridge.agent.daemon.server`)."""
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
    into the agent's container (`bridge.agent.delegates.hostpaths.netns_problem`). None: not checked."""
    node_netns: Path | None = None
    """The node's network namespace, where delegate plugins run (so where the bridge plugin makes
    its bridges) and where node access (docs/node-access.md) gives the node its paths and its
    nftables table. None: the agent's own, the node's when it runs with hostNetwork as the
    DaemonSet does; a test stands a node in a namespace of its own (`--node-netns`)."""
    patch_status: bool = True
    """Write `k8s.v1.cni.cncf.io/network-status` on the pod after ADD (spec 5), in the
    background once the runtime has its answer (`bridge.agent.pods.publisher`)."""
    durable_cache: bool = False
    """fsync every cache write (survives a power loss, ~10 ms per write); see `delegates.cache`."""
    watch_addresses: bool = True
    """Follow address changes on the attached interfaces into network-status (KEP Req 25;
    `bridge.agent.pods.addresswatch`). Only with `patch_status`."""
    address_watch: AddressWatchSettings = field(default_factory=AddressWatchSettings)
    """Debounce and rate bound of those status writes."""
    dra_state_dir: Path | None = None
    """The DRA driver's records of prepared claims (`podnetwork dra-driver --state-dir`): a pod
    with claims recorded there gets exactly their PodNetworks (`bridge.agent.cni.claims`).
    None: claims are not read."""
    dra_driver: str = "dra.multinetwork.x-k8s.io"
    """The DRA driver's name (`podnetwork dra-driver --driver-name`): a claim allocated to it that it
    did not record is an error, not another driver's."""

    @property
    def watching_addresses(self) -> bool:
        """Whether attached pods' addresses are followed into their network-status."""
        return self.watch_addresses and self.patch_status


__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_CONF_DIR",
    "DEFAULT_CONF_FILE_NAME",
    "DEFAULT_SOCKET",
    "EVENT_COMPONENT",
    "NETWORK_NAME",
    "PLUGIN_TYPE",
    "AgentConfig",
]
