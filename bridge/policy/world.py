"""What policy decisions read: pods, namespaces, networks and policies, kept small.

The edge (the agent's watches, a test) builds a `World` from typed views; the scope, the
evaluator and the rule compiler read only this. Memory matters (an agent keeps every pod of
the cluster that may be a peer): a pod keeps its namespace, name, labels, node, named
container ports and, per secondary network, its interface name and addresses — nothing else
of the Pod object.

Networks have one identity, `NetworkInfo.key`: the PodNetwork's name, or for a network
that is only a NetworkAttachmentDefinition (a pod selecting it with the NPWG annotation,
no PodNetwork), the NAD's `namespace/name`. The two cannot collide: a PodNetwork name has
no `/`. A NAD-backed PodNetwork is one network with both aliases (`podnetwork` and `nad`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Literal

from bridge.policy.model import MultiNetworkPolicy, Protocol

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
#: The protocols of a connection: those a policy port names, and ICMP (which no port names).
ConnectionProtocol = Protocol | Literal["ICMP"]
ICMP: Literal["ICMP"] = "ICMP"


@dataclass(frozen=True, slots=True)
class ContainerPort:
    """A named container port: what a policy's named port resolves to."""

    name: str
    protocol: Protocol
    port: int


@dataclass(frozen=True, slots=True)
class PodInterface:
    """A pod's attachment to one network: the network's key, the interface in the pod, its addresses."""

    network: str
    interface: str | None
    addresses: tuple[Address, ...]


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod as policies see it."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    node: str | None = None
    ports: tuple[ContainerPort, ...] = ()
    interfaces: tuple[PodInterface, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def on(self, network: str) -> tuple[PodInterface, ...]:
        """The pod's interfaces on `network` (usually one; two when it attached twice)."""
        return tuple(i for i in self.interfaces if i.network == network)

    def addresses_on(self, network: str) -> tuple[Address, ...]:
        return tuple(a for i in self.interfaces if i.network == network for a in i.addresses)

    def named_port(self, name: str, protocol: Protocol) -> int | None:
        """The number of the container port `name` with `protocol` (NetworkPolicy matches both), or None."""
        return next((p.port for p in self.ports if p.name == name and p.protocol == protocol), None)


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    name: str
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class NetworkInfo:
    """One secondary network and the names a policy may call it by.

    `podnetwork`: the PodNetwork's name, if one exists; `nad`: the backing (or only)
    NetworkAttachmentDefinition as `namespace/name`, if any. `key` is the identity.
    """

    podnetwork: str | None = None
    nad: str | None = None

    def __post_init__(self) -> None:
        if not self.podnetwork and not self.nad:
            raise ValueError("a network needs a PodNetwork name or a NetworkAttachmentDefinition")
        if self.nad is not None and self.nad.count("/") != 1:
            raise ValueError(f"a NetworkAttachmentDefinition is named namespace/name, not {self.nad!r}")

    @property
    def key(self) -> str:
        return self.podnetwork or self.nad or ""


def _freeze(labels: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(labels or {}))


@dataclass(frozen=True)
class World:
    """Everything a decision reads; built at the edge, read-only afterwards.

    `pods` and `namespaces` are keyed by `namespace/name` and name; `networks` by `NetworkInfo.key`.
    `address_index` maps (network, address) to the pods holding that address there. It is built
    from `pods` when first read: the rule compiler reads each pod's addresses instead, so the
    agent's passes (a world of every pod of the cluster, on every change) never build it.
    """

    pods: Mapping[str, PodInfo] = field(default_factory=dict)
    namespaces: Mapping[str, NamespaceInfo] = field(default_factory=dict)
    networks: Mapping[str, NetworkInfo] = field(default_factory=dict)
    policies: tuple[MultiNetworkPolicy, ...] = ()

    @classmethod
    def build(
        cls,
        pods: Iterable[PodInfo] = (),
        namespaces: Iterable[NamespaceInfo] = (),
        networks: Iterable[NetworkInfo] = (),
        policies: Iterable[MultiNetworkPolicy] = (),
    ) -> World:
        return cls(
            pods={p.key: p for p in pods},
            namespaces={n.name: n for n in namespaces},
            networks={n.key: n for n in networks},
            policies=tuple(policies),
        )

    @cached_property
    def address_index(self) -> Mapping[tuple[str, Address], tuple[str, ...]]:
        index: dict[tuple[str, Address], list[str]] = {}
        for pod in self.pods.values():
            for itf in pod.interfaces:
                for addr in itf.addresses:
                    index.setdefault((itf.network, addr), []).append(pod.key)
        return MappingProxyType({k: tuple(v) for k, v in index.items()})

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        """A namespace's labels; a namespace the world does not know has none (it matches only `{}`)."""
        ns = self.namespaces.get(name)
        return ns.labels if ns is not None else {}

    def pods_at(self, network: str, address: Address) -> tuple[PodInfo, ...]:
        return tuple(self.pods[k] for k in self.address_index.get((network, address), ()))


@dataclass(frozen=True, slots=True)
class Connection:
    """A connection attempt on one network: from an address to an address, protocol and destination port.

    Pods are found by address (`World.address_index`), as the data path sees them: a pod that
    sends from an address it does not hold on this network is an external peer. `port` is
    None for ICMP.
    """

    network: str
    source: Address
    destination: Address
    protocol: ConnectionProtocol
    port: int | None = None

    @classmethod
    def between(
        cls,
        world: World,
        source: str | Address,
        destination: str | Address,
        network: str,
        protocol: ConnectionProtocol,
        port: int | None = None,
        family: Literal[4, 6] = 4,
    ) -> Connection:
        """A connection between pods (`namespace/name`, their first address of `family` on `network`)
        or addresses. Raises `KeyError` for a pod without such an address."""

        def address(end: str | Address) -> Address:
            if not isinstance(end, str):
                return end
            found = [a for a in world.pods[end].addresses_on(network) if a.version == family]
            if not found:
                raise KeyError(f"pod {end} has no IPv{family} address on network {network}")
            return found[0]

        return cls(network, address(source), address(destination), protocol, port)


def pod_info(
    namespace: str,
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    node: str | None = None,
    ports: Iterable[ContainerPort] = (),
    interfaces: Iterable[PodInterface] = (),
) -> PodInfo:
    """A `PodInfo` with its labels copied into a read-only mapping."""
    return PodInfo(namespace, name, _freeze(labels), node, tuple(ports), tuple(interfaces))


def namespace_info(name: str, labels: Mapping[str, str] | None = None) -> NamespaceInfo:
    return NamespaceInfo(name, _freeze(labels))


def interface(network: str, interface: str | None, *addresses: str | Address) -> PodInterface:
    """A `PodInterface` from address texts (`10.0.0.5` or `10.0.0.5/24`: the prefix is dropped)."""
    parsed = tuple(a if not isinstance(a, str) else ipaddress.ip_interface(a).ip for a in addresses)
    return PodInterface(network, interface, parsed)


__all__ = [
    "ICMP",
    "Address",
    "Connection",
    "ConnectionProtocol",
    "ContainerPort",
    "NamespaceInfo",
    "NetworkInfo",
    "PodInfo",
    "PodInterface",
    "World",
    "interface",
    "namespace_info",
    "pod_info",
]
