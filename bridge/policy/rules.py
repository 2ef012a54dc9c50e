"""The rule compiler: one pod's nftables ruleset, enforcing the evaluator's semantics. Pure.

`compile_pod(world, pod)` returns the commands of libnftables' JSON (`nft -j`, see
libnftables-json(5)) for the pod's network namespace that build the whole table from nothing.
The applier (`bridge.agent.netns.nftables.apply`) puts "create the table if missing, delete it" in
front, so the document replaces the table in one transaction: the kernel applies it
atomically, a reader never sees half a ruleset, and conntrack entries outlive it:
established connections survive every update. `FAMILY` and `TABLE` name the table here, once;
the applier imports them.

The table, `inet podnetwork_policy`:

- base chains `input` and `output` (filter hooks, priority 0, policy accept); each starts
  with `ct state established,related accept` (replies of allowed connections, and their
  ICMP errors, pass), then jumps, by `iifname`/`oifname`, to the chain of each interface
  whose network isolates the pod in that direction;
- a chain per isolated interface and direction (`ingress_<n>`, `egress_<n>`, `n` the
  interface's place in the pod): `ct state invalid drop`; IPv6 neighbour discovery accepted
  (without it no address on the link resolves: a deviation documented in
  docs/network-policy.md); one `accept` per allowed (peers, protocol, port) of every applying
  policy; then `drop`;
- named sets of peer addresses per rule and family (`ipv4_addr`/`ipv6_addr`, `flags
  interval`): the selected pods' addresses on that network, and `ipBlock` CIDRs with their
  `except` cut out (`ipaddress.address_exclude`), merged. The pod's own addresses are left
  out of its own sets: its traffic to itself never crosses its interfaces (the kernel routes
  it through `lo`, and a packet arriving with one of its own addresses as source is a
  spoof), and the evaluator allows it anyway. So a pod's table does not depend on its own
  addresses, and the one written at ADD before its delegates gave any (bridge.agent.policy.apply)
  is the one a later pass compiles.

Interfaces of other networks, of networks no policy isolates the pod on, the cluster default
network's (`eth0`) and `lo` meet no rule of ours. A pod that no policy isolates anywhere gets
no table: `Ruleset.document` is None and the applier deletes the table
(`bridge.agent.netns.nftables.remove`).
Named ports resolve as the evaluator resolves them: for ingress against the pod itself, for
egress against each peer pod (one set per resolved port number).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.policy.evaluate import isolating, peer_selects_pod
from bridge.policy.model import IPNetwork, MultiNetworkPolicy, PolicyPeer, PolicyPort, PolicyType, Rule
from bridge.policy.scope import Scope, scopes
from bridge.policy.world import Address, PodInfo, PodInterface, World
from podnetwork.ground import constants

FAMILY = "inet"
TABLE = constants.POLICY_TABLE
#: libnftables JSON schema version this module writes (libnftables-json(5), METAINFO).
JSON_SCHEMA_VERSION = 1
#: ICMPv6 types of neighbour and router discovery (RFC 4861), accepted on isolated interfaces.
ND_TYPES = ("nd-neighbor-solicit", "nd-neighbor-advert", "nd-router-solicit", "nd-router-advert")

Command = dict[str, Any]
Expression = dict[str, Any]


@dataclass(frozen=True)
class Ruleset:
    """What one pod's namespace should hold: `commands` (empty: no table) and the interfaces that
    could not be enforced (`unenforced`: a network with no interface name in the pod's status)."""

    pod: str
    commands: tuple[Command, ...]
    unenforced: tuple[str, ...] = ()

    @property
    def document(self) -> dict[str, Any] | None:
        """The table's content for `bridge.agent.netns.nftables.apply`, or None when no table should exist."""
        return transaction(self.commands) if self.commands else None


def transaction(commands: Iterable[Command]) -> dict[str, Any]:
    return {"nftables": [{"metainfo": {"json_schema_version": JSON_SCHEMA_VERSION}}, *commands]}


def _table() -> dict[str, Any]:
    return {"family": FAMILY, "name": TABLE}


def _in_table() -> dict[str, Any]:
    """How a chain, a set or a rule names its table."""
    return {"family": FAMILY, "table": TABLE}


def _match(left: Expression, right: Any, op: str = "==") -> Expression:
    return {"match": {"op": op, "left": left, "right": right}}


def _meta(key: str) -> Expression:
    return {"meta": {"key": key}}


def _ct_state(*states: str) -> Expression:
    return _match({"ct": {"key": "state"}}, list(states) if len(states) > 1 else states[0], "in")


def _element(net: IPNetwork) -> Any:
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}


def _block_networks(peer: PolicyPeer) -> list[IPNetwork]:
    """An ipBlock as disjoint networks: its CIDR with every `except` cut out."""
    assert peer.ip_block is not None
    remaining: list[IPNetwork] = [peer.ip_block.network()]
    for cut in peer.ip_block.excepted():
        next_remaining: list[IPNetwork] = []
        for net in remaining:
            if net.version == cut.version and cut.subnet_of(net):  # type: ignore[arg-type]
                next_remaining.extend(net.address_exclude(cut))  # type: ignore[arg-type]
            elif net.version == cut.version and net.subnet_of(cut):  # type: ignore[arg-type]
                continue
            else:
                next_remaining.append(net)
        remaining = next_remaining
    return remaining


def _collapse(nets: Iterable[IPNetwork]) -> dict[int, list[IPNetwork]]:
    by_family: dict[int, list[IPNetwork]] = {4: [], 6: []}
    for net in nets:
        by_family[net.version].append(net)
    return {v: _merged(n) for v, n in by_family.items() if n}


def _merged(nets: list[IPNetwork]) -> list[IPNetwork]:
    """Disjoint networks covering `nets`, in order. Two prefixes are either disjoint or one holds
    the other, so dropping every network inside another is enough: neighbours are not merged into
    a wider prefix (an interval set holds them side by side; `ipaddress.collapse_addresses`, which
    merges them, cost most of a pass over 110 pods with an `ipBlock` beside pods' addresses)."""
    if all(n.prefixlen == n.max_prefixlen for n in nets):
        return sorted(set(nets))
    out: list[IPNetwork] = []
    end = -1
    for net in sorted(set(nets), key=lambda n: (int(n.network_address), n.prefixlen)):
        if int(net.network_address) > end:
            out.append(net)
            end = int(net.broadcast_address)
    return out


def _host(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> IPNetwork:
    return ipaddress.ip_network(address)


class _Builder:
    """Collects sets and rules of one pod's table, naming sets in order."""

    def __init__(self, memo: Memo, own: frozenset[IPNetwork] = frozenset()) -> None:
        self.sets: list[Command] = []
        self.count = 0
        self.memo = memo
        self.own = own
        """The pod's own addresses, left out of its sets (module docstring)."""

    def address_set(self, elements: list[Any], version: int) -> str:
        name = f"peers_{self.count}_v{version}"
        self.count += 1
        self.sets.append(
            {
                "add": {
                    "set": {
                        **_in_table(),
                        "name": name,
                        "type": "ipv4_addr" if version == 4 else "ipv6_addr",
                        "flags": ["interval"],
                        "elem": elements,
                    }
                }
            }
        )
        return name


def _port_matches(port: PolicyPort, number: int | None) -> list[Expression]:
    """Expressions for one policy port; `number` is a named port's resolved number."""
    out = [_match(_meta("l4proto"), port.protocol.value.lower())]
    dport = {"payload": {"protocol": "th", "field": "dport"}}
    if number is not None:
        out.append(_match(dport, number))
    elif (numeric := port.numeric_range()) is not None:
        first, last = numeric
        out.append(_match(dport, first if first == last else {"range": [first, last]}))
    return out


class Memo:
    """What compiling the pods of one `World` shares: each rule's peer addresses (collapsed per
    family) are computed once, whichever local pod the rule applies to, and only the pods of the
    namespaces a selector can select are looked at. Valid for that one world (keys are the
    identities of its policies and rules)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.by_namespace: dict[str, list[PodInfo]] = {}
        for pod in world.pods.values():
            self.by_namespace.setdefault(pod.namespace, []).append(pod)
        self.peers: dict[tuple[int, int, str], dict[int, list[IPNetwork]]] = {}
        self.named: dict[tuple[int, int, int, str], dict[int, dict[int, list[IPNetwork]]]] = {}
        self.hosts: dict[Address, IPNetwork] = {}
        self.rendered: dict[int, tuple[list[IPNetwork], list[Any]]] = {}
        self.places: dict[int, tuple[list[IPNetwork], dict[IPNetwork, int]]] = {}

    def host(self, address: Address) -> IPNetwork:
        """`address` as a one-address network (ipaddress's constructor is slow; addresses repeat)."""
        net = self.hosts.get(address)
        if net is None:
            net = self.hosts[address] = _host(address)
        return net

    def elements(self, nets: list[IPNetwork]) -> list[Any]:
        """A set's elements in libnftables JSON, rendered once per list of networks."""
        found = self.rendered.get(id(nets))
        if found is None or found[0] is not nets:
            found = self.rendered[id(nets)] = (nets, [_element(n) for n in nets])
        return found[1]

    def elements_but(self, nets: list[IPNetwork], left_out: frozenset[IPNetwork]) -> list[Any]:
        """`elements(nets)` without those of `left_out` (a pod's own addresses: one or two, so
        the shared rendering is cut where they are rather than rendered again per pod)."""
        rendered = self.elements(nets)
        if not left_out:
            return rendered
        found = self.places.get(id(nets))
        if found is None or found[0] is not nets:
            found = self.places[id(nets)] = (nets, {n: i for i, n in enumerate(nets)})
        cuts = sorted(i for n in left_out if (i := found[1].get(n)) is not None)
        if not cuts:
            return rendered
        out: list[Any] = []
        start = 0
        for i in cuts:
            out.extend(rendered[start:i])
            start = i + 1
        out.extend(rendered[start:])
        return out

    def candidates(self, policy: MultiNetworkPolicy, peer: PolicyPeer) -> Iterable[PodInfo]:
        """The pods `peer` may select: those of the policy's namespace, or of the namespaces its
        namespaceSelector selects (each still to be checked with `peer_selects_pod`)."""
        if peer.namespace_selector is None:
            return self.by_namespace.get(policy.namespace, ())
        selector = peer.namespace_selector
        return [pod for ns, pods in self.by_namespace.items()
                if selector.matches(self.world.namespace_labels(ns)) for pod in pods]

    def selected(self, policy: MultiNetworkPolicy, peer: PolicyPeer) -> Iterable[PodInfo]:
        world = self.world
        return (pod for pod in self.candidates(policy, peer) if peer_selects_pod(world, policy, peer, pod))


def _peer_nets(
    memo: Memo, policy: MultiNetworkPolicy, rule: Rule, network: str
) -> dict[int, list[IPNetwork]]:
    """The addresses `rule`'s peers allow on `network`, collapsed per IP version."""
    key = (id(policy), id(rule), network)
    if key not in memo.peers:
        nets: list[IPNetwork] = []
        for peer in rule.peers:
            if peer.ip_block is not None:
                nets.extend(_block_networks(peer))
            else:
                for pod in memo.selected(policy, peer):
                    nets.extend(memo.host(a) for a in pod.addresses_on(network))
        memo.peers[key] = _collapse(nets)
    return memo.peers[key]


def _address_matches(
    builder: _Builder, collapsed: dict[int, list[IPNetwork]] | None, field: str
) -> list[list[Expression]]:
    """One list of expressions per family the peers cover; `[[]]` for any peer (None)."""
    if collapsed is None:
        return [[]]
    out = []
    for version, merged in sorted(collapsed.items()):
        elements = builder.memo.elements_but(merged, builder.own)
        if not elements:
            continue
        name = builder.address_set(elements, version)
        address = {"payload": {"protocol": "ip" if version == 4 else "ip6", "field": field}}
        out.append([_match(address, f"@{name}")])
    return out


def _egress_named(
    memo: Memo, policy: MultiNetworkPolicy, rule: Rule, port: PolicyPort, network: str
) -> dict[int, dict[int, list[IPNetwork]]]:
    """For an egress named port: the peer addresses grouped by the number the name has on each peer
    pod, collapsed per IP version."""
    assert isinstance(port.port, str)
    key = (id(policy), id(rule), id(port), network)
    if key in memo.named:
        return memo.named[key]
    if rule.peers and all(p.ip_block is None for p in rule.peers):
        candidates = {pod.key: pod for p in rule.peers for pod in memo.candidates(policy, p)}
        pods: Iterable[PodInfo] = candidates.values()
    else:
        pods = memo.world.pods.values()
    groups: dict[int, list[IPNetwork]] = {}
    for pod in pods:
        number = pod.named_port(port.port, port.protocol)
        if number is None:
            continue
        for address in pod.addresses_on(network):
            if not rule.peers or any(
                p.ip_block.contains(address)
                if p.ip_block is not None
                else peer_selects_pod(memo.world, policy, p, pod)
                for p in rule.peers
            ):
                groups.setdefault(number, []).append(memo.host(address))
    memo.named[key] = {number: _collapse(nets) for number, nets in groups.items()}
    return memo.named[key]


def _rule_bodies(
    memo: Memo, builder: _Builder, policy: MultiNetworkPolicy, rule: Rule, direction: PolicyType,
    pod: PodInfo, network: str,
) -> list[list[Expression]]:
    """The match expressions of each nftables rule that accepts what `rule` allows."""
    field = "saddr" if direction is PolicyType.INGRESS else "daddr"
    peers = _peer_nets(memo, policy, rule, network) if rule.peers else None
    if not rule.ports:
        return _address_matches(builder, peers, field)
    bodies: list[list[Expression]] = []
    for port in rule.ports:
        if isinstance(port.port, str) and direction is PolicyType.EGRESS:
            for number, nets in sorted(_egress_named(memo, policy, rule, port, network).items()):
                for addr in _address_matches(builder, nets, field):
                    bodies.append(addr + _port_matches(port, number))
            continue
        named: int | None = None
        if isinstance(port.port, str):
            named = pod.named_port(port.port, port.protocol)
            if named is None:
                continue  # the pod has no such port: this entry allows nothing
        for addr in _address_matches(builder, peers, field):
            bodies.append(addr + _port_matches(port, named))
    return bodies


def _chain_rules(chain: str, bodies: Iterable[list[Expression]]) -> list[Command]:
    return [{"add": {"rule": {**_in_table(), "chain": chain, "expr": body}}} for body in bodies]


def _interface_chain(
    memo: Memo, builder: _Builder, policies: list[MultiNetworkPolicy], direction: PolicyType,
    pod: PodInfo, itf: PodInterface, chain: str,
) -> list[Command]:
    bodies: list[list[Expression]] = [
        [_ct_state("invalid"), {"drop": None}],
        [
            _match(_meta("l4proto"), "ipv6-icmp"),
            _match({"payload": {"protocol": "icmpv6", "field": "type"}}, {"set": list(ND_TYPES)}),
            {"accept": None},
        ],
    ]
    for policy in policies:
        for rule in policy.rules(direction):
            allowing = _rule_bodies(memo, builder, policy, rule, direction, pod, itf.network)
            bodies.extend([*b, {"accept": None}] for b in allowing)
    bodies.append([{"drop": None}])
    comment = f"{direction.value.lower()} on {itf.interface} ({itf.network})"
    declaration = {"add": {"chain": {**_in_table(), "name": chain, "comment": comment[:128]}}}
    return [declaration, *_chain_rules(chain, bodies)]


_DIRECTIONS = ((PolicyType.INGRESS, "input", "iifname"), (PolicyType.EGRESS, "output", "oifname"))


def compile_pod(
    world: World, pod_key: str, scope_of: Mapping[str, Scope] | None = None, memo: Memo | None = None
) -> Ruleset:
    """The ruleset of the pod `namespace/name` (which must be in `world.pods`). Compiling many pods
    of one world, pass one `Memo(world)` to them all: what their rules share is computed once."""
    scope_of = scopes(world) if scope_of is None else scope_of
    memo = Memo(world) if memo is None or memo.world is not world else memo
    pod = world.pods[pod_key]
    builder = _Builder(memo, frozenset(memo.host(a) for i in pod.interfaces for a in i.addresses))
    chains: list[Command] = []
    jumps: dict[str, list[Command]] = {"input": [], "output": []}
    unenforced: list[str] = []
    for n, itf in enumerate(pod.interfaces):
        for direction, base, key in _DIRECTIONS:
            policies = isolating(world, scope_of, pod, itf.network, direction)
            if not policies:
                continue
            if not itf.interface:
                unenforced.append(
                    f"network {itf.network}: the pod's status names no interface, so "
                    f"{direction.value.lower()} policies {', '.join(p.key for p in policies)} "
                    "cannot be enforced"
                )
                continue
            chain = f"{direction.value.lower()}_{n}"
            chains.extend(_interface_chain(memo, builder, policies, direction, pod, itf, chain))
            jump = [_match(_meta(key), itf.interface), {"jump": {"target": chain}}]
            jumps[base].extend(_chain_rules(base, [jump]))
    if not chains:
        return Ruleset(pod_key, (), tuple(unenforced))
    # The applier prepends "add, delete" (replacing the old table in the same transaction).
    commands: list[Command] = [{"add": {"table": _table()}}]
    for base in ("input", "output"):
        hooked = {"type": "filter", "hook": base, "prio": 0, "policy": "accept"}
        commands.append({"add": {"chain": {**_in_table(), "name": base, **hooked}}})
        commands.extend(_chain_rules(base, [[_ct_state("established", "related"), {"accept": None}]]))
    commands.extend(builder.sets)
    commands.extend(chains)
    commands.extend(jumps["input"] + jumps["output"])
    return Ruleset(pod_key, tuple(commands), tuple(unenforced))


def local_pods(world: World, node: str) -> list[str]:
    """The keys of the pods on `node`, sorted: those whose namespaces an agent there writes to."""
    return sorted(p.key for p in world.pods.values() if p.node == node)


__all__ = [
    "FAMILY",
    "JSON_SCHEMA_VERSION",
    "ND_TYPES",
    "TABLE",
    "Memo",
    "Ruleset",
    "compile_pod",
    "local_pods",
    "transaction",
]
