"""Node access and API access for a PodNetwork's pods (KEP-3698 Phase II requirements 19-21): the
pure decisions. The I/O is `bridge.agent.access.apply`'s; docs/node-access.md is the user's guide.

- `switches`: a PodNetwork's two opt-in annotations, `multinetwork.x-k8s.io/node-access` and
  `multinetwork.x-k8s.io/api-access` (an annotation, not a spec field: the KEP keeps
  implementation details out of PodNetwork's spec, and the PodNetwork is the cluster admin's).
- `path_for`: how the node reaches the network, from its NAD's CNI configuration, or a
  `Refusal` saying why it cannot:
  - `bridge` with `host-local` IPAM: the node's address on the network's bridge is each
    range's gateway (its `gateway`, else the subnet's first address: host-local's own
    default), an address host-local never gives a pod. With `isGateway: true` the bridge
    plugin already puts exactly that address on the bridge at each ADD; the agent then adds
    nothing, and never removes it (the plugin's, and the NAD's choice).
  - `macvlan` (mode `bridge`) and `ipvlan` (modes `l2`, `l3`): a sub-interface of the node on
    the same master and in the same mode, its address reserved through the NAD's own IPAM
    (so no pod is ever given it), released when the path goes;
  - anything else: refused.
- `ruleset`: the agent's nftables table in the node's namespace. Forwarded traffic from a
  path's interface is dropped unless it goes to the API's addresses (API access), forwarded
  traffic to it unless it is a reply; the node's own sockets take from it only replies (and
  the API, when local), so a node path opens the network's pods to the node, not the node (or
  what it routes to) to the pods. With API access, traffic from the network's subnets to the
  API's addresses leaves with the node's address (masquerade).
- `api_addresses`: the Kubernetes API as a pod reaches it: the `default/kubernetes` Service's
  ClusterIPs and its ready endpoints' addresses.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podnetwork.ground import constants

DOC = "docs/node-access.md"
#: The NAD types a node path can be made for.
BRIDGE, MACVLAN, IPVLAN = "bridge", "macvlan", "ipvlan"
#: The bridge plugin's bridge when its config names none (containernetworking/plugins, bridge).
DEFAULT_BRIDGE = "cni0"
#: Modes in which a node-side sub-interface talks to the pods' on the same master.
SUB_INTERFACE_MODES = {MACVLAN: ("bridge",), IPVLAN: ("l2", "l3")}
DEFAULT_MODES = {MACVLAN: "bridge", IPVLAN: "l2"}
#: ICMPv6 types of neighbour discovery (RFC 4861): IPv6's ARP, let in on a node path.
ND_TYPES = ("nd-neighbor-solicit", "nd-neighbor-advert")
JSON_SCHEMA_VERSION = 1


class Refusal(ValueError):
    """A node path cannot be made for this network; the message says why and what would do."""


@dataclass(frozen=True)
class Switches:
    node: bool = False
    api: bool = False


def switches(annotations: Mapping[str, str] | None) -> Switches:
    """A PodNetwork's switches; `Refusal` for a value other than "true"/"false", or API access
    without node access (its route goes through the node's address on the network)."""
    found: dict[str, bool] = {}
    for key in (constants.NODE_ACCESS_ANNOTATION, constants.API_ACCESS_ANNOTATION):
        value = (annotations or {}).get(key)
        if value not in (None, constants.SWITCH_ON, constants.SWITCH_OFF):
            raise Refusal(f"annotation {key}: {str(value)[:64]!r} is neither {constants.SWITCH_ON!r} nor "
                          f"{constants.SWITCH_OFF!r}")
        found[key] = value == constants.SWITCH_ON
    node, api = found[constants.NODE_ACCESS_ANNOTATION], found[constants.API_ACCESS_ANNOTATION]
    if api and not node:
        raise Refusal(f"annotation {constants.API_ACCESS_ANNOTATION} needs "
                      f"{constants.NODE_ACCESS_ANNOTATION}: \"true\" too: the pods reach the API through "
                      f"the node's address on the network ({DOC})")
    return Switches(node, api)


@dataclass(frozen=True)
class Path:
    """How the node reaches one PodNetwork's pods (module docstring)."""

    podnetwork: str
    kind: str
    """`bridge`, `macvlan` or `ipvlan`."""
    interface: str
    """The node's interface on the network: the bridge, or the sub-interface the agent makes."""
    subnets: tuple[str, ...]
    """The network's subnets (the IPAM's ranges), for the source NAT of API access."""
    addresses: tuple[str, ...] = ()
    """The node's addresses (CIDR) on a bridge; a sub-interface's come from `ipam` when made."""
    by_plugin: bool = False
    """The bridge plugin gives the bridge these addresses itself (`isGateway`): never added or
    removed by the agent."""
    master: str = ""
    mode: str = ""
    mtu: int | None = None
    ipam: Mapping[str, Any] = field(default_factory=dict)
    """The IPAM configuration a sub-interface's address is reserved with (the NAD's own)."""
    cni_version: str = "1.0.0"
    network_name: str = ""
    """The CNI network's name: host-local keeps each network's reservations under it, so the
    node's is taken from the pods' pool."""

    def key(self) -> dict[str, Any]:
        """What identifies the path: a change of it replaces the node's path."""
        return {"kind": self.kind, "interface": self.interface, "subnets": list(self.subnets),
                "addresses": list(self.addresses), "by_plugin": self.by_plugin, "master": self.master,
                "mode": self.mode, "mtu": self.mtu, "ipam": dict(self.ipam),
                "network_name": self.network_name}


def node_link_name(podnetwork: str) -> str:
    """The node-side sub-interface of a macvlan/ipvlan PodNetwork: a short digest of its name."""
    return constants.NODE_LINK_PREFIX + hashlib.sha256(podnetwork.encode()).hexdigest()[:8]


def _plugins(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    plugins = config.get("plugins") if "plugins" in config else [config]
    if not isinstance(plugins, list) or not plugins or not all(isinstance(p, Mapping) for p in plugins):
        raise Refusal("its NAD's CNI configuration holds no plugin")
    return plugins


def host_local_gateways(ipam: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(subnet, gateway/prefix) of each range set of a host-local IPAM config, as host-local
    reads it: `ranges` (the first range of each set), else the legacy top-level `subnet`; a
    range without `gateway` has its subnet's first address as gateway (never allocated)."""
    sets = ipam.get("ranges")
    if sets is None and ipam.get("subnet"):
        sets = [[{"subnet": ipam["subnet"], "gateway": ipam.get("gateway")}]]
    if not isinstance(sets, list) or not sets:
        raise Refusal("its host-local IPAM names no range (ranges or subnet)")
    out: list[tuple[str, str]] = []
    for index, ranges in enumerate(sets):
        first = ranges[0] if isinstance(ranges, list) and ranges and isinstance(ranges[0], Mapping) else None
        try:
            if first is None:
                raise ValueError("not a list of ranges")
            subnet = ipaddress.ip_network(str(first.get("subnet")), strict=False)
            given = first.get("gateway")
            gateway = ipaddress.ip_address(given) if given else subnet.network_address + 1
        except (ValueError, TypeError) as exc:
            raise Refusal(f"its host-local IPAM range set {index} cannot be read: {exc}") from None
        if gateway not in subnet:
            raise Refusal(f"its host-local IPAM gateway {gateway} is outside its subnet {subnet}")
        out.append((str(subnet), f"{gateway}/{subnet.prefixlen}"))
    return out


def path_for(podnetwork: str, config: Mapping[str, Any]) -> Path:
    """The node's path to `podnetwork`, whose NAD holds the CNI `config` (single or list: its
    first plugin makes the interface); `Refusal` when there is none (module docstring)."""
    first = _plugins(config)[0]
    kind = first.get("type")
    ipam = first.get("ipam") if isinstance(first.get("ipam"), Mapping) else {}
    assert isinstance(ipam, Mapping)
    version = str(config.get("cniVersion") or first.get("cniVersion") or "1.0.0")
    if kind == BRIDGE:
        if ipam.get("type") != "host-local":
            raise Refusal(f"a bridge network's node address is its host-local range's gateway, and its "
                          f"IPAM is {ipam.get('type')!r}; use host-local IPAM ({DOC})")
        pairs = host_local_gateways(ipam)
        bridge = str(first.get("bridge") or DEFAULT_BRIDGE)
        by_plugin = bool(first.get("isGateway")) or bool(first.get("isDefaultGateway"))
        return Path(podnetwork, BRIDGE, bridge, tuple(s for s, _ in pairs), tuple(a for _, a in pairs),
                    by_plugin=by_plugin, cni_version=version)
    if kind in (MACVLAN, IPVLAN):
        master = first.get("master")
        if not isinstance(master, str) or not master:
            raise Refusal(f"its {kind} configuration names no master; name it, so that the node's "
                          f"sub-interface is made on the pods' master ({DOC})")
        mode = str(first.get("mode") or DEFAULT_MODES[kind])
        if mode not in SUB_INTERFACE_MODES[kind]:
            raise Refusal(f"a node-side {kind} sub-interface talks to the pods' only in mode "
                          f"{' or '.join(SUB_INTERFACE_MODES[kind])}, and the network's is {mode!r} ({DOC})")
        if not ipam.get("type"):
            raise Refusal(f"its {kind} configuration has no IPAM to reserve the node's address from ({DOC})")
        subnets: tuple[str, ...] = ()
        if ipam.get("type") == "host-local":
            subnets = tuple(s for s, _ in host_local_gateways(ipam))
        mtu = first.get("mtu")
        return Path(podnetwork, kind, node_link_name(podnetwork), subnets, master=master, mode=mode,
                    mtu=mtu if isinstance(mtu, int) and mtu > 0 else None, ipam=dict(ipam),
                    cni_version=version, network_name=str(config.get("name") or podnetwork))
    raise Refusal(f"the node reaches a network's pods only for NAD types {BRIDGE}, {MACVLAN} and {IPVLAN}; "
                  f"this one's is {str(kind)[:64]!r}, so its pods stay isolated from the node ({DOC})")


def api_addresses(service: Mapping[str, Any] | None, slices: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The Kubernetes API's addresses: the Service's ClusterIPs, then its endpoints' (ready or
    with no condition, discovery.k8s.io/v1), in order, without repeats; junk is skipped."""
    found: list[str] = []
    # why: the agent keeps pydantic out (its RSS); junk is skipped key by key, as the doc says
    spec = (service or {}).get("spec") or {}
    cluster_ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    candidates = list(cluster_ips) if isinstance(cluster_ips, list) else []
    for piece in slices:
        for endpoint in piece.get("endpoints") or []:
            if not isinstance(endpoint, Mapping):
                continue
            conditions = endpoint.get("conditions") or {}  # why: as `spec` above
            if isinstance(conditions, Mapping) and conditions.get("ready") is False:
                continue
            addresses = endpoint.get("addresses") or []
            candidates.extend(addresses if isinstance(addresses, list) else [])
    for candidate in candidates:
        try:
            address = str(ipaddress.ip_address(str(candidate)))
        except ValueError:
            continue  # "None" (headless) or a name
        if address not in found:
            found.append(address)
    return tuple(found)


def family(address: str) -> int:
    return ipaddress.ip_interface(address).version


def via(node_addresses: Sequence[str], api: Sequence[str]) -> list[tuple[str, str]]:
    """(API address, the node's address of its family) of each API address the node can carry."""
    hops = {family(a): a.split("/")[0] for a in reversed(node_addresses)}
    return [(address, hops[family(address)]) for address in api if family(address) in hops]


# --- the nftables table (libnftables JSON) ------------------------------------------------------


def _match(left: dict[str, Any], right: Any, op: str = "==") -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def _meta(key: str) -> dict[str, Any]:
    return {"meta": {"key": key}}


def _addr(proto: str, which: str) -> dict[str, Any]:
    return {"payload": {"protocol": proto, "field": which}}


def _prefix(subnet: str) -> dict[str, Any]:
    net = ipaddress.ip_network(subnet, strict=False)
    return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}


REPLIES = _match({"ct": {"key": "state"}}, ["established", "related"], "in")
SETS = {4: ("api4", "ipv4_addr", "ip"), 6: ("api6", "ipv6_addr", "ip6")}


@dataclass(frozen=True)
class Active:
    """A node path as the table scopes it: its interface, subnets, and whether API access is on."""

    interface: str
    subnets: tuple[str, ...]
    api: bool


def ruleset(paths: Sequence[Active], api: Sequence[str]) -> dict[str, Any] | None:
    """The node's table for `paths` (module docstring); None: no path, no table."""
    if not paths:
        return None
    table = {"family": "inet", "table": constants.NODE_ACCESS_TABLE}
    commands: list[dict[str, Any]] = [
        {"metainfo": {"json_schema_version": JSON_SCHEMA_VERSION}},
        {"add": {"table": {"family": "inet", "name": constants.NODE_ACCESS_TABLE}}},
    ]
    by_family = {v: [a for a in api if family(a) == v] for v in SETS}
    for version, (name, type_, _) in SETS.items():
        body: dict[str, Any] = {**table, "name": name, "type": type_}
        if by_family[version]:
            body["elem"] = by_family[version]
        commands.append({"add": {"set": body}})
    chains = {"forward": ("filter", "forward", 0), "input": ("filter", "input", 0),
              "postrouting": ("nat", "postrouting", 100)}
    for name, (type_, hook, prio) in chains.items():
        commands.append({"add": {"chain": {**table, "name": name, "type": type_, "hook": hook, "prio": prio,
                                           "policy": "accept"}}})

    def rule(chain: str, *expr: dict[str, Any]) -> None:
        commands.append({"add": {"rule": {**table, "chain": chain, "expr": list(expr)}}})

    for path in sorted(paths, key=lambda p: p.interface):
        inside, iface = _match(_meta("iifname"), path.interface), path.interface
        outside_in = _match(_meta("oifname"), iface, "!=")
        if path.api:
            for _, (name, _, proto) in SETS.items():
                to_api = _match(_addr(proto, "daddr"), f"@{name}")
                rule("forward", inside, outside_in, to_api, {"accept": None})
        rule("forward", inside, outside_in, {"drop": None})
        to_it = _match(_meta("oifname"), iface)
        rule("forward", to_it, _match(_meta("iifname"), iface, "!="), REPLIES, {"accept": None})
        rule("forward", to_it, _match(_meta("iifname"), iface, "!="), {"drop": None})
        rule("input", inside, REPLIES, {"accept": None})
        rule("input", inside, _match(_addr("icmpv6", "type"), {"set": list(ND_TYPES)}), {"accept": None})
        if path.api:
            for _, (name, _, proto) in SETS.items():
                rule("input", inside, _match(_addr(proto, "daddr"), f"@{name}"), {"accept": None})
        rule("input", inside, {"drop": None})
        if path.api:
            for subnet in path.subnets:
                proto = SETS[ipaddress.ip_network(subnet, strict=False).version][2]
                name = SETS[ipaddress.ip_network(subnet, strict=False).version][0]
                rule("postrouting", _match(_addr(proto, "saddr"), _prefix(subnet)),
                     _match(_addr(proto, "daddr"), f"@{name}"), _match(_meta("oifname"), iface, "!="),
                     {"masquerade": None})
    return {"nftables": commands}


__all__ = ["Active", "Path", "Refusal", "Switches", "api_addresses", "host_local_gateways", "node_link_name",
           "path_for", "ruleset", "switches", "via"]
