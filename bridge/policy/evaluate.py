"""The reference evaluator: is one connection allowed, by NetworkPolicy's semantics? Pure.

It decides from a `World` alone, without rules, so that the rule compiler (`rules`) and the
real data path can be checked against it. Its semantics are NetworkPolicy's
(`networking.k8s.io/v1`), applied per network:

- A policy applies on the networks of its scope (`scope`), to the pods of its namespace that
  its `podSelector` selects. A pod is isolated for a direction (ingress, egress) on a network
  as soon as one applying policy of that type (`effective_policy_types`) selects it there.
- A connection passes when the source pod, if isolated for egress, has a rule allowing it,
  and the destination pod, if isolated for ingress, has a rule allowing it. What is allowed
  is the union of the rules of every applying policy.
- A rule allows a connection when one of its peers matches the other end (no peers: every
  peer) and one of its ports matches (no ports: every port and protocol).
- A peer with `podSelector` only selects pods of the policy's namespace; with
  `namespaceSelector` only, every pod of the selected namespaces; with both, pods matching
  both. An `ipBlock` matches by address, whether the address is a pod's or not (choice
  documented in docs/network-policy.md: it is what upstream implementations do, and what
  the data path can see).
- A named port resolves against the destination pod's container ports (with the rule's
  protocol): for ingress, the selected pod; for egress, the peer. A destination that is
  no pod has no named ports.
- ICMP matches only rules without ports, as upstream implementations do: a policy that
  lists ports allows no ICMP; a deny-all policy blocks it.
- Pods are recognized by address on the connection's network (`World.address_index`), as
  the data path recognizes them. A pod's traffic to itself is always allowed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bridge.policy.model import MultiNetworkPolicy, PolicyPeer, PolicyPort, PolicyType, Rule
from bridge.policy.scope import Scope, scopes
from bridge.policy.world import ICMP, Address, Connection, ConnectionProtocol, PodInfo, World


def selects(policy: MultiNetworkPolicy, pod: PodInfo) -> bool:
    """Whether `policy`'s `podSelector` selects `pod` (pods of the policy's namespace only)."""
    return pod.namespace == policy.namespace and policy.spec.pod_selector.matches(pod.labels)


def isolating(
    world: World, scope_of: Mapping[str, Scope], pod: PodInfo, network: str, direction: PolicyType
) -> list[MultiNetworkPolicy]:
    """The policies of type `direction` that apply to `pod` on `network`: empty means not isolated."""
    return [
        p
        for p in world.policies
        if selects(p, pod)  # first: most policies are of other namespaces
        and network in scope_of[p.key].networks
        and direction in p.spec.effective_policy_types()
    ]


def peer_selects_pod(world: World, policy: MultiNetworkPolicy, peer: PolicyPeer, pod: PodInfo) -> bool:
    """Whether a selector peer (`podSelector` and/or `namespaceSelector`) selects `pod`.
    An `ipBlock` peer selects no pod by identity: it matches addresses (`IPBlock.contains`)."""
    if peer.ip_block is not None:
        return False
    if peer.namespace_selector is None:
        in_namespace = pod.namespace == policy.namespace
    else:
        in_namespace = peer.namespace_selector.matches(world.namespace_labels(pod.namespace))
    return in_namespace and (peer.pod_selector is None or peer.pod_selector.matches(pod.labels))


def _peer_matches(
    world: World, policy: MultiNetworkPolicy, peer: PolicyPeer, address: Address, pods: Iterable[PodInfo]
) -> bool:
    if peer.ip_block is not None:
        return peer.ip_block.contains(address)
    return any(peer_selects_pod(world, policy, peer, pod) for pod in pods)


def port_matches(
    port: PolicyPort, protocol: ConnectionProtocol, number: int | None, destinations: Iterable[PodInfo]
) -> bool:
    """Whether one policy port matches a connection's protocol and destination port; a named
    port is looked up in the destination pods' container ports."""
    if protocol == ICMP or port.protocol != protocol:
        return False
    if port.port is None:
        return True
    if number is None:
        return False
    if isinstance(port.port, int):
        first, last = port.numeric_range() or (port.port, port.port)
        return first <= number <= last
    name = port.port
    return any(pod.named_port(name, port.protocol) == number for pod in destinations)


def _rule_allows(
    world: World,
    policy: MultiNetworkPolicy,
    rule: Rule,
    connection: Connection,
    peer_address: Address,
    peer_pods: tuple[PodInfo, ...],
    destinations: tuple[PodInfo, ...],
) -> bool:
    if rule.peers and not any(_peer_matches(world, policy, p, peer_address, peer_pods) for p in rule.peers):
        return False
    if not rule.ports:
        return True
    return any(port_matches(p, connection.protocol, connection.port, destinations) for p in rule.ports)


def _direction_allows(
    world: World,
    scope_of: Mapping[str, Scope],
    connection: Connection,
    direction: PolicyType,
    subjects: tuple[PodInfo, ...],
    peer_address: Address,
    peer_pods: tuple[PodInfo, ...],
    destinations: tuple[PodInfo, ...],
) -> bool:
    for pod in subjects:
        policies = isolating(world, scope_of, pod, connection.network, direction)
        if policies and not any(
            _rule_allows(world, p, rule, connection, peer_address, peer_pods, destinations)
            for p in policies
            for rule in p.rules(direction)
        ):
            return False
    return True


def allowed(world: World, connection: Connection, scope_of: Mapping[str, Scope] | None = None) -> bool:
    """Whether NetworkPolicy semantics let `connection` through on its network.

    `scope_of` (from `scope.scopes(world)`) may be passed to save computing it per call.
    """
    scope_of = scopes(world) if scope_of is None else scope_of
    sources = world.pods_at(connection.network, connection.source)
    destinations = world.pods_at(connection.network, connection.destination)
    if {p.key for p in sources} & {p.key for p in destinations}:
        return True
    egress = _direction_allows(
        world, scope_of, connection, PolicyType.EGRESS,
        sources, connection.destination, destinations, destinations,
    )
    return egress and _direction_allows(
        world, scope_of, connection, PolicyType.INGRESS,
        destinations, connection.source, sources, destinations,
    )


__all__ = ["allowed", "isolating", "peer_selects_pod", "port_matches", "selects"]
