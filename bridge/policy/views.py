"""The edge's builders: a `World`'s parts from the typed views of Pod, Namespace, PodNetwork and NAD.

Each keeps only what policies read (`world`'s docstring). A pod's addresses per network come
from what its attachments reported:

- `k8s.v1.cni.cncf.io/network-status` (NPWG 5), for networks backed by a
  NetworkAttachmentDefinition: an entry's `name` (`namespace/name`, or a bare name meaning
  the pod's namespace, as `bridge.translate.podips` reads it) picks the network, its
  `interface` and `ips` (prefix lengths dropped) are kept; the default network's entry
  (`"default": true`) is not a secondary network and is left out;
- `multinetwork.x-k8s.io/pod-ips` (KEP "Status"), per PodNetwork: `ip`, `podNetwork`,
  `interfaceName`.

Both are read and merged per (network, interface): the bridge writes pod-ips from
network-status, and a pod of a KEP-native implementation has only pod-ips. An annotation that
does not parse, or an entry naming an unknown network, adds nothing: the pod is then no peer
on that network (a policy that selects it does not open to it). The agent enforcing a pod's
own rules knows its interfaces from its own records; this reading serves peers on every node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from bridge import npwg, translate
from bridge.policy.model import Protocol
from bridge.policy.world import (
    Address,
    ContainerPort,
    NamespaceInfo,
    NetworkInfo,
    PodInfo,
    PodInterface,
    namespace_info,
    pod_info,
)
from bridge.translate.podips import status_address
from podnetwork.ground import constants
from podnetwork.ground.core import Namespace, ObjectMeta, PartialObjectMetadata


def container_ports(pod: Mapping[str, Any]) -> list[ContainerPort]:
    """The named ports of a Pod object's containers (`spec.containers[].ports[]`); others are dropped."""
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    out: list[ContainerPort] = []
    for container in containers if isinstance(containers, list) else ():
        ports = container.get("ports") if isinstance(container, Mapping) else None
        for port in ports if isinstance(ports, list) else ():
            if not isinstance(port, Mapping):
                continue
            name, number, protocol = port.get("name"), port.get("containerPort"), port.get("protocol", "TCP")
            if (
                isinstance(name, str) and name
                and isinstance(number, int) and not isinstance(number, bool)
                and protocol in Protocol.__members__.values()
            ):
                out.append(ContainerPort(name, Protocol(protocol), number))
    return out


Reported = tuple[str, str | None, Address]
"""(network key, interface name or None, address): one address a pod reports on one network."""


def _status_interfaces(meta: ObjectMeta, by_nad: Mapping[str, str]) -> Iterable[Reported]:
    text = meta.annotation(constants.NPWG_NETWORK_STATUS_ANNOTATION)
    if not text:
        return
    try:
        entries = npwg.parse_status(text)
    except ValueError:
        return
    for entry in entries:
        if entry.get("default") is True:
            continue
        name = entry["name"]
        network = by_nad.get(name if "/" in name else f"{meta.namespace}/{name}")
        interface = entry.get("interface") if isinstance(entry.get("interface"), str) else None
        ips = entry.get("ips")
        if network is None or not isinstance(ips, list):
            continue
        for raw in ips:
            if (address := status_address(raw)) is not None:
                yield network, interface, address


def _pod_ips_interfaces(
    meta: ObjectMeta, by_podnetwork: Mapping[str, str]
) -> Iterable[Reported]:
    text = meta.annotation(constants.POD_IPS_ANNOTATION)
    if not text:
        return
    try:
        entries = json.loads(text)
    except (ValueError, RecursionError):
        return
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping):
            continue
        network = by_podnetwork.get(entry.get("podNetwork"))  # type: ignore[arg-type]
        address = status_address(entry.get("ip"))
        interface = entry.get("interfaceName") if isinstance(entry.get("interfaceName"), str) else None
        if network is not None and address is not None:
            yield network, interface, address


class _AsReported(Mapping[str, str]):
    """Every name is its own network key: networks as the pod's annotations name them."""

    def __getitem__(self, key: str) -> str:
        if not isinstance(key, str):
            raise KeyError(key)
        return key

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def pod_interfaces(meta: ObjectMeta, networks: Iterable[NetworkInfo]) -> list[PodInterface]:
    """A pod's secondary interfaces, from its network-status and pod-ips annotations, merged.

    An entry without an interface name joins the pod's only named interface on that network, if
    there is exactly one (pod-ips written before the interface was known)."""
    nets = list(networks)
    by_nad = {n.nad: n.key for n in nets if n.nad}
    by_podnetwork = {n.podnetwork: n.key for n in nets if n.podnetwork}
    return _merged(meta, by_nad, by_podnetwork)


def reported_interfaces(meta: ObjectMeta) -> list[PodInterface]:
    """A pod's secondary interfaces as its annotations name their networks, whatever networks
    exist: a network-status entry's NAD as `namespace/name`, a pod-ips entry's PodNetwork by
    name (the two never collide: a PodNetwork name has no `/`). For a keeper of many pods whose
    networks come and go (the agent): `keyed` maps them to `NetworkInfo.key`s later."""
    same = _AsReported()
    # The cluster default network is not a policy's (networks_of leaves it out too).
    return [i for i in _merged(meta, same, same) if i.network != constants.DEFAULT_PODNETWORK]


def keyed(interfaces: Iterable[PodInterface], by_nad: Mapping[str, str]) -> tuple[PodInterface, ...]:
    """`reported_interfaces` with each NAD named by its network's key (`by_nad`: a NAD-backed
    PodNetwork's name); one interface reported twice (network-status and pod-ips) becomes one.

    What is the same as reported is the same object: the agent keeps every pod keyed between
    passes (`PolicyState.world`), beside the pods as reported."""
    found: dict[tuple[str, str | None], list[PodInterface]] = {}
    for itf in interfaces:
        found.setdefault((by_nad.get(itf.network, itf.network), itf.interface), []).append(itf)
    out = []
    for (network, interface), same in found.items():
        own = same[0].addresses
        if len(same) == 1 and (len(own) < 2 or len(set(own)) == len(own)):  # nothing to merge
            out.append(same[0] if same[0].network == network else PodInterface(network, interface, own))
            continue
        addresses: list[Address] = []
        for itf in same:
            addresses.extend(a for a in itf.addresses if a not in addresses)
        out.append(PodInterface(network, interface, tuple(addresses)))
    return tuple(out)


def _merged(
    meta: ObjectMeta, by_nad: Mapping[str, str], by_podnetwork: Mapping[str, str]
) -> list[PodInterface]:
    found: dict[tuple[str, str | None], list[Address]] = {}
    for network, interface, address in [
        *_status_interfaces(meta, by_nad),
        *_pod_ips_interfaces(meta, by_podnetwork),
    ]:
        if interface is None:
            named = [k for k in found if k[0] == network and k[1] is not None]
            if len(named) == 1:
                interface = named[0][1]
        addresses = found.setdefault((network, interface), [])
        if address not in addresses:
            addresses.append(address)
    return [PodInterface(network, interface, tuple(addrs)) for (network, interface), addrs in found.items()]


def pod_from_object(obj: Mapping[str, Any], networks: Iterable[NetworkInfo]) -> PodInfo:
    """A `PodInfo` from a Pod object (a watch event's, an API response's)."""
    meta = PartialObjectMetadata.model_validate(obj).metadata
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return pod_info(
        meta.namespace or "",
        meta.name or "",
        meta.labels,
        node=node if isinstance(node, str) else None,
        ports=container_ports(obj),
        interfaces=pod_interfaces(meta, networks),
    )


def namespace_from_view(namespace: Namespace) -> NamespaceInfo:
    return namespace_info(namespace.metadata.name or "", namespace.metadata.labels)


def network_of(podnetwork: translate.PodNetwork) -> NetworkInfo:
    """A PodNetwork as a network; a bridge one (`multinetwork.x-k8s.io/npwg-bridge`) with its NAD alias."""
    nad = None
    refs = podnetwork.spec.parameters_refs or []
    if translate.is_bridge(podnetwork) and len(refs) == 1:
        ref = refs[0]
        if ref.group == npwg.NAD_GROUP and ref.kind in translate.NAD_KINDS and ref.namespace:
            nad = f"{ref.namespace}/{ref.name}"
    return NetworkInfo(podnetwork=podnetwork.metadata.name or "", nad=nad)


def networks_of(
    podnetworks: Iterable[translate.PodNetwork], nads: Iterable[npwg.NetworkAttachmentDefinition]
) -> list[NetworkInfo]:
    """Every network: each PodNetwork (with its NAD if bridge-backed), then each NAD no PodNetwork
    is backed by, as a network of its own (pods selecting it with the NPWG annotation).
    The cluster default PodNetwork is left out: MultiNetworkPolicy does not govern it."""
    named = [p for p in podnetworks if p.metadata.name]
    out = [network_of(p) for p in named if p.metadata.name != constants.DEFAULT_PODNETWORK]
    backing = {n.nad for n in out if n.nad}
    for nad in nads:
        key = f"{nad.metadata.namespace}/{nad.metadata.name}"
        if nad.metadata.namespace and nad.metadata.name and key not in backing:
            out.append(NetworkInfo(nad=key))
    return out


__all__ = [
    "container_ports",
    "keyed",
    "namespace_from_view",
    "network_of",
    "networks_of",
    "pod_from_object",
    "pod_interfaces",
    "reported_interfaces",
]
