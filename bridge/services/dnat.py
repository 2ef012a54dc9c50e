"""The ClusterIP compiler: one client pod's nftables table and routes for the Services on its networks. Pure.

`compile_pod(pod, services, endpoints)` returns a `Ruleset`: libnftables JSON commands that
build the table `inet podnetwork_services` from nothing (the applier,
`bridge.agent.netns.nftables.apply(..., table=SERVICES)`, replaces the old table in the same
transaction), and the routes the pod needs (`Route`: each ClusterIP via the interface of
its Service's network; `bridge.agent.netns.clusterips` executes them with `ip route`).

Only Services on a network the pod is attached to, through an interface its status names,
and of a family the pod has an address of there, reach the table: a pod on no such network
gets nothing (`Ruleset.document` is None: the applier deletes the table and the routes).
Headless Services (no ClusterIP) get nothing: clients reach their endpoints directly.

The table, with `IF` the interface, `CIP` a ClusterIP, `P`/`N` its protocol and port:

- base chain `reject` (filter, hook output, priority -110: before the NAT at -100, as
  kube-proxy's): a new connection to `IF . CIP . P . N` with no endpoint to go to (no
  ready one, or a port the Service does not have) is refused, `tcp reset` for TCP and ICMP
  port unreachable otherwise, rather than left to time out; `served_v4`/`_v6` hold the
  keys that have endpoints, `cluster_ips_v4`/`_v6` the `IF . CIP` pairs;
- base chain `dnat` (nat, hook output, priority -100, the "dstnat" priority):
  `oifname . daddr . l4proto . dport` looked up in the verdict map `services_v4`/`_v6`, which
  jumps to the chain of that Service port and family;
- a chain per Service port and family (`svc_<h>`, `h` a digest of its map key, so that its name
  does not depend on the other Services): `dnat to numgen random mod K map {...}` over its K
  endpoints (address . port), one rule; with `sessionAffinity: ClientIP`, a chain per endpoint
  (`svc_<h>_ep_<e>`, `e` a digest of the endpoint's address and port) that records the client
  in a set of its own (`dynamic`, `timeout` the affinity's), and the Service chain first sends
  a client found in an endpoint's set to that endpoint, then balances the others.

Stable names make an update small: `bridge.services.changes.changes(old, new)` turns two compiled
tables into the commands that make one the other (the changed chains flushed and refilled, map
elements deleted and added), which the agent sends instead of the whole table.

The priorities compose with the MultiNetworkPolicy table (`inet podnetwork_policy`,
filter hooks at priority 0): the DNAT happens before the policy's output chain, so egress
policy sees the endpoint's address, as NetworkPolicy does for a Service's traffic. Only
the first packet of a connection meets the NAT chain; conntrack translates the rest and
the replies (whose source it turns back into the ClusterIP).

Which endpoints: the ready ones (`ready` nil counts as true); when none is ready, those
`serving` and `terminating` (kube-proxy's fallback for terminating endpoints); never one
that is neither. An address listed twice (two slices, during an update) counts once.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.services.model import (
    Address,
    ClientPod,
    Endpoint,
    Protocol,
    Service,
    ServicePort,
    SessionAffinity,
)

FAMILY = "inet"
TABLE = "podnetwork_services"
#: libnftables JSON schema version this module writes (libnftables-json(5), METAINFO).
JSON_SCHEMA_VERSION = 1
#: Priorities of the base chains: kube-proxy's ("dstnat - 10" to refuse, "dstnat" to translate).
REJECT_PRIORITY = -110
DNAT_PRIORITY = -100
#: The routing protocol number of the routes for ClusterIPs (`ip route ... proto 201`): how the
#: applier knows its own routes from everyone else's. 201 is no protocol of iproute2's
#: rt_protos list.
ROUTE_PROTOCOL = 201

Command = dict[str, Any]
Expression = dict[str, Any]

_NFT_PROTOCOL = {Protocol.TCP: "tcp", Protocol.UDP: "udp", Protocol.SCTP: "sctp"}
_ADDRESS_TYPE = {4: "ipv4_addr", 6: "ipv6_addr"}
_PAYLOAD = {4: "ip", 6: "ip6"}


@dataclass(frozen=True, order=True)
class Route:
    """A route the pod needs: `destination` (a ClusterIP as /32 or /128) via `interface`, source `source`.

    As `ip route replace DEST dev IF src SRC proto 201` in the pod's namespace. The source
    pins the client's address on that network, so a backend sees it, never eth0's.
    """

    destination: str
    interface: str
    source: str

    def argv(self) -> list[str]:
        """The arguments of `ip` (after `ip`) that make this route."""
        return ["route", "replace", self.destination, "dev", self.interface, "src", self.source,
                "proto", str(ROUTE_PROTOCOL)]


@dataclass(frozen=True)
class Ruleset:
    """What one pod's namespace should hold: the table's `commands` (empty: no table) and `routes`.

    `skipped` says, per Service left out for a reason the pod's owner may want to know
    (its network has no interface name in the pod's status, no address of a ClusterIP's
    family), why.
    """

    pod: str
    commands: tuple[Command, ...]
    routes: tuple[Route, ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def document(self) -> dict[str, Any] | None:
        """The table's content for `bridge.agent.netns.nftables.apply`, or None when no table should exist."""
        return transaction(self.commands) if self.commands else None


def transaction(commands: Iterable[Command]) -> dict[str, Any]:
    return {"nftables": [{"metainfo": {"json_schema_version": JSON_SCHEMA_VERSION}}, *commands]}


def _in_table() -> dict[str, Any]:
    return {"family": FAMILY, "table": TABLE}


def _match(left: Expression, right: Any, op: str = "==") -> Expression:
    return {"match": {"op": op, "left": left, "right": right}}


def _meta(key: str) -> Expression:
    return {"meta": {"key": key}}


def _payload(protocol: str, field: str) -> Expression:
    return {"payload": {"protocol": protocol, "field": field}}


def _rule(chain: str, *expr: Expression) -> Command:
    return {"add": {"rule": {**_in_table(), "chain": chain, "expr": list(expr)}}}


def _chain(name: str, comment: str = "", **base: Any) -> Command:
    chain: dict[str, Any] = {**_in_table(), "name": name, **base}
    if comment:
        chain["comment"] = comment[:128]
    return {"add": {"chain": chain}}


def _key(version: int) -> Expression:
    """`oifname . daddr . l4proto . dport`, the key of the Services' maps."""
    return {"concat": [_meta("oifname"), _payload(_PAYLOAD[version], "daddr"), _meta("l4proto"),
                       _payload("th", "dport")]}


@dataclass(frozen=True)
class _Backend:
    address: Address
    port: int


def backends(port: ServicePort, version: int, endpoints: Iterable[Endpoint]) -> list[_Backend]:
    """The (address, port) pairs a Service port of family `version` balances over, sorted, each once."""
    usable = [e for e in endpoints if e.address.version == version and e.port_for(port) is not None]
    chosen = [e for e in usable if e.ready] or [e for e in usable if e.serving and e.terminating]
    found = {_Backend(e.address, number) for e in chosen if (number := e.port_for(port)) is not None}
    return sorted(found, key=lambda b: (b.address, b.port))


def _target(backend: _Backend) -> Expression:
    return {"concat": [str(backend.address), backend.port]}


def _dnat(version: int, addr: Any, port: int | None = None) -> Expression:
    body: dict[str, Any] = {"family": _PAYLOAD[version], "addr": addr}
    if port is not None:
        body["port"] = port
    return {"dnat": body}


def _digest(value: Any) -> str:
    """16 hex digits naming what `value` is (a map key, an endpoint): a chain's stable name. 64 bits:
    two of a table's thousand chains share a name with odds of about 1 in 10**13."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


class _Builder:
    """The commands of one table, in an order nft accepts (declarations before their uses)."""

    def __init__(self) -> None:
        self.sets: list[Command] = []
        self.chains: list[Command] = []
        self.rules: list[Command] = []
        self.services: dict[int, list[Any]] = {4: [], 6: []}
        self.served: dict[int, list[Any]] = {4: [], 6: []}
        self.cluster_ips: dict[int, list[Any]] = {4: [], 6: []}

    def service_port(self, service: Service, port: ServicePort, version: int, interface: str,
                     cluster_ip: Address, found: Sequence[_Backend]) -> None:
        proto = _NFT_PROTOCOL[port.protocol]
        key = {"concat": [interface, str(cluster_ip), proto, port.port]}
        if not found or key in self.served[version]:
            return  # in cluster_ips, not served: the reject chain refuses it
        self.served[version].append(key)
        # Named by what it serves, never by its rank: a Service added or removed leaves the other
        # chains' names alone, so an update rewrites the chains that changed and no other (`changes`).
        chain = f"svc_{_digest(key)}"
        self.services[version].append([key, {"goto": {"target": chain}}])
        self.chains.append(_chain(chain, f"{service.key} {port} via {interface}"))
        is_proto = _match(_meta("l4proto"), proto)
        if service.session_affinity is not SessionAffinity.CLIENT_IP:
            if len(found) == 1:
                only = found[0]
                self.rules.append(_rule(chain, is_proto, _dnat(version, str(only.address), only.port)))
                return
            pick = {"map": {"key": {"numgen": {"mode": "random", "mod": len(found), "offset": 0}},
                            "data": {"set": [[k, _target(b)] for k, b in enumerate(found)]}}}
            self.rules.append(_rule(chain, is_proto, _dnat(version, pick)))
            return
        # ClientIP: a client seen in an endpoint's set goes there again; the others are balanced,
        # and each endpoint's chain records whom it got, for `affinity_timeout` after the last packet.
        # An endpoint's chain and set are named by the endpoint, so an update that keeps it keeps
        # its clients too.
        saddr = _payload(_PAYLOAD[version], "saddr")
        targets = []
        for k, backend in enumerate(found):
            ep_chain = f"{chain}_ep_{_digest(_target(backend))}"
            affinity = f"{ep_chain}_clients"
            self.sets.append({"add": {"set": {
                **_in_table(), "name": affinity, "type": _ADDRESS_TYPE[version],
                "flags": ["timeout"], "timeout": service.affinity_timeout}}})
            self.chains.append(_chain(ep_chain, f"{service.key} {port} -> {backend.address} {backend.port}"))
            self.rules.append(_rule(chain, _match(saddr, f"@{affinity}"), {"goto": {"target": ep_chain}}))
            record = {"set": {"op": "update", "elem": saddr, "set": f"@{affinity}"}}
            self.rules.append(_rule(ep_chain, record))
            self.rules.append(_rule(ep_chain, is_proto, _dnat(version, str(backend.address), backend.port)))
            targets.append([k, {"goto": {"target": ep_chain}}])
        pick_vmap = {"vmap": {"key": {"numgen": {"mode": "random", "mod": len(found), "offset": 0}},
                              "data": {"set": targets}}}
        self.rules.append(_rule(chain, pick_vmap))

    def commands(self) -> list[Command]:
        out: list[Command] = [{"add": {"table": {"family": FAMILY, "name": TABLE}}}]
        families = [v for v in (4, 6) if self.cluster_ips[v]]
        maps: list[Command] = []
        for version in families:
            concat = ["ifname", _ADDRESS_TYPE[version], "inet_proto", "inet_service"]
            out.append({"add": {"set": {**_in_table(), "name": f"cluster_ips_v{version}",
                                        "type": ["ifname", _ADDRESS_TYPE[version]],
                                        "elem": self.cluster_ips[version]}}})
            served: dict[str, Any] = {**_in_table(), "name": f"served_v{version}", "type": concat}
            services: dict[str, Any] = {**_in_table(), "name": f"services_v{version}", "type": concat,
                                        "map": "verdict"}
            if self.served[version]:  # nft refuses an empty `elem`
                served["elem"] = self.served[version]
                services["elem"] = self.services[version]
            out.append({"add": {"set": served}})
            maps.append({"add": {"map": services}})
        out.extend(self.sets)
        out.append(_chain("reject", "new connections to a ClusterIP port with no endpoint are refused",
                          type="filter", hook="output", prio=REJECT_PRIORITY, policy="accept"))
        out.append(_chain("dnat", "ClusterIP -> an endpoint, on the Service's network",
                          type="nat", hook="output", prio=DNAT_PRIORITY, policy="accept"))
        out.extend(self.chains)
        out.extend(maps)  # after the chains their verdicts name: nft resolves a goto when it reads it
        new = _match({"ct": {"key": "state"}}, "new", "in")
        for version in families:
            cluster_ip = {"concat": [_meta("oifname"), _payload(_PAYLOAD[version], "daddr")]}
            out.append(_rule("reject", new, _match(_key(version), f"@served_v{version}"), {"accept": None}))
            known = _match(cluster_ip, f"@cluster_ips_v{version}")
            out.append(_rule("reject", new, _match(_meta("l4proto"), "tcp"), known,
                             {"reject": {"type": "tcp reset"}}))
            out.append(_rule("reject", new, known, {"reject": {"type": "icmpx", "expr": "port-unreachable"}}))
            out.append(_rule("dnat", {"vmap": {"key": _key(version), "data": f"@services_v{version}"}}))
        out.extend(self.rules)
        return out


def compile_pod(pod: ClientPod, services: Iterable[Service],
                endpoints: Mapping[str, Sequence[Endpoint]]) -> Ruleset:
    """The table and routes of `pod` for `services`; `endpoints` maps a Service's key to its endpoints."""
    builder = _Builder()
    routes: set[Route] = set()
    skipped: list[str] = []
    for service in sorted(services, key=lambda s: s.key):
        if service.headless:
            continue
        on_network = [a for a in pod.attachments if a.network == service.network]
        # A pod attached twice to the network routes a ClusterIP one way: by its first named interface.
        for itf in [a for a in on_network if a.interface][:1]:
            assert itf.interface is not None
            for cluster_ip in service.cluster_ips:
                version = cluster_ip.version
                source = next((a for a in itf.addresses if a.version == version), None)
                if source is None:
                    skipped.append(f"Service {service.key}: ClusterIP {cluster_ip} is IPv{version}, and the "
                                   f"pod has no IPv{version} address on network {service.network} "
                                   f"({itf.interface})")
                    continue
                key = {"concat": [itf.interface, str(cluster_ip)]}
                if key not in builder.cluster_ips[version]:
                    builder.cluster_ips[version].append(key)
                routes.add(Route(str(ipaddress.ip_network(cluster_ip)), itf.interface, str(source)))
                for port in service.ports:
                    found = backends(port, version, endpoints.get(service.key, ()))
                    builder.service_port(service, port, version, itf.interface, cluster_ip, found)
        if on_network and not any(a.interface for a in on_network):
            skipped.append(f"Service {service.key}: the pod's status names no interface on network "
                           f"{service.network}, so its ClusterIP cannot be routed there")
    if not routes:
        return Ruleset(pod.key, (), (), tuple(skipped))
    return Ruleset(pod.key, tuple(builder.commands()), tuple(sorted(routes)), tuple(skipped))


__all__ = [
    "DNAT_PRIORITY",
    "FAMILY",
    "JSON_SCHEMA_VERSION",
    "REJECT_PRIORITY",
    "ROUTE_PROTOCOL",
    "TABLE",
    "Route",
    "Ruleset",
    "backends",
    "compile_pod",
    "transaction",
]
