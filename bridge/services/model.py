"""What the ClusterIP compiler reads: a Service on a PodNetwork, its endpoints, one client pod.

Built at the edge (`bridge.services.views` from Service and EndpointSlice objects, or by a
test) and read-only afterwards. A Service here is already known to be served on a network:
the edge resolved its `multinetwork.x-k8s.io/podnetwork` annotation (a PodNetworkAttachment
counts as its PodNetwork) into `Service.network`, the key the pod's attachments use.

An endpoint is one address of one EndpointSlice, with the slice's ports (a slice has one
address type and one port list, discovery.k8s.io/v1): which port a Service port reaches on
it is the slice port of the same name and protocol, already resolved per pod by whoever
wrote the slice (named target ports included).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import StrEnum

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Kubernetes' default for `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours).
DEFAULT_AFFINITY_TIMEOUT = 10800
#: Its bounds (core/v1 validation: 0 < timeout <= 86400).
MAX_AFFINITY_TIMEOUT = 86400


class Protocol(StrEnum):
    """A Service port's protocol, as the API spells it."""

    TCP = "TCP"
    UDP = "UDP"
    SCTP = "SCTP"


class SessionAffinity(StrEnum):
    NONE = "None"
    CLIENT_IP = "ClientIP"


@dataclass(frozen=True, slots=True)
class ServicePort:
    """One entry of `spec.ports`. `name` is '' for the single unnamed port a Service may have."""

    port: int
    protocol: Protocol = Protocol.TCP
    name: str = ""
    target_port: int | str | None = None
    """What the slice writer resolved (kept for messages): the endpoints carry the number."""

    def __str__(self) -> str:
        named = f"{self.name} " if self.name else ""
        return f"{named}{self.protocol.value}/{self.port}"


@dataclass(frozen=True)
class Service:
    """A Service served on one PodNetwork. No `cluster_ips`: headless (`clusterIP: None`)."""

    namespace: str
    name: str
    network: str
    cluster_ips: tuple[Address, ...] = ()
    ports: tuple[ServicePort, ...] = ()
    session_affinity: SessionAffinity = SessionAffinity.NONE
    affinity_timeout: int = DEFAULT_AFFINITY_TIMEOUT
    """Seconds a client stays with its endpoint under `ClientIP` affinity."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def headless(self) -> bool:
        return not self.cluster_ips


@dataclass(frozen=True, slots=True)
class EndpointPort:
    """One port of an EndpointSlice: the name of the Service port it serves, and its number on the pods."""

    name: str
    protocol: Protocol
    port: int


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One endpoint address with its slice's ports and conditions (nil ready/serving read as true)."""

    address: Address
    ports: tuple[EndpointPort, ...]
    ready: bool = True
    serving: bool = True
    terminating: bool = False

    def port_for(self, port: ServicePort) -> int | None:
        """The number `port` reaches on this endpoint, or None when its slice has no such port."""
        return next((p.port for p in self.ports if p.name == port.name and p.protocol == port.protocol), None)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A client pod on one network: the network's key, its interface in the pod, its addresses there."""

    network: str
    interface: str | None
    addresses: tuple[Address, ...]


@dataclass(frozen=True)
class ClientPod:
    namespace: str
    name: str
    attachments: tuple[Attachment, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def attachment(network: str, interface: str | None, *addresses: str | Address) -> Attachment:
    """An `Attachment` from address texts (`10.0.0.5` or `10.0.0.5/24`: the prefix is dropped)."""
    parsed = tuple(a if not isinstance(a, str) else ipaddress.ip_interface(a).ip for a in addresses)
    return Attachment(network, interface, parsed)


__all__ = [
    "DEFAULT_AFFINITY_TIMEOUT",
    "MAX_AFFINITY_TIMEOUT",
    "Address",
    "Attachment",
    "ClientPod",
    "Endpoint",
    "EndpointPort",
    "Protocol",
    "Service",
    "ServicePort",
    "SessionAffinity",
    "attachment",
]
