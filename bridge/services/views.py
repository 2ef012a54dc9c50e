"""The edge's readers: a Service and its EndpointSlices (discovery.k8s.io/v1) as the compiler's types.

Objects come from watches and may be anything; what does not fit is skipped with a log line
naming the object and the field, and the rest is kept: one bad port does not take a
Service's other ports down, one bad endpoint not its slice. Nothing raises.

- `service(obj)`: a Service annotated `multinetwork.x-k8s.io/podnetwork` of type ClusterIP
  (or no type), else None. `spec.clusterIPs` (or `spec.clusterIP`), `None` meaning headless;
  `spec.ports[]` (`port`, `protocol` default TCP, `name`, `targetPort`); `sessionAffinity`
  and `sessionAffinityConfig.clientIP.timeoutSeconds`.
- `slice_endpoints(obj)`: the Service key (`namespace/<kubernetes.io/service-name>`) and the
  endpoints of one slice of address type IPv4 or IPv6 (FQDN is skipped): each endpoint's first
  address (the API's rule: consumers use the first), its conditions (`ready` and `serving` nil
  read as true, `terminating` nil as false) and the slice's ports, a nil port (which means "all
  ports", for Services without ports) skipped.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from bridge.services.model import (
    DEFAULT_AFFINITY_TIMEOUT,
    MAX_AFFINITY_TIMEOUT,
    Address,
    Endpoint,
    EndpointPort,
    Protocol,
    Service,
    ServicePort,
    SessionAffinity,
)
from podnetwork.ground import constants

logger = logging.getLogger(__name__)

#: The EndpointSlice labels of Kubernetes' conventions (discovery.k8s.io/v1).
SERVICE_NAME_LABEL = constants.ENDPOINTSLICE_SERVICE_NAME_LABEL
MANAGED_BY_LABEL = constants.ENDPOINTSLICE_MANAGED_BY_LABEL
#: The Service types served on a PodNetwork; others are the slice controller's to refuse.
SERVED_TYPES = ("ClusterIP",)
MAX_PORT = 65535


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any], Mapping[str, Any]]:
    raw = obj.get("metadata")
    meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    namespace, name = meta.get("namespace"), meta.get("name")
    labels, annotations = meta.get("labels"), meta.get("annotations")
    return (
        namespace if isinstance(namespace, str) else "",
        name if isinstance(name, str) else "",
        labels if isinstance(labels, Mapping) else {},
        annotations if isinstance(annotations, Mapping) else {},
    )


def _port_number(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PORT:
        return value
    return None


def _protocol(value: Any) -> Protocol | None:
    if value is None:
        return Protocol.TCP
    return Protocol(value) if value in Protocol.__members__.values() else None


def _address(value: Any) -> Address | None:
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _service_ports(key: str, ports: Any) -> list[ServicePort]:
    out: list[ServicePort] = []
    seen: set[tuple[Protocol, int]] = set()
    for index, raw in enumerate(ports if isinstance(ports, list) else ()):
        where = f"Service {key}: spec.ports[{index}]"
        if not isinstance(raw, Mapping):
            logger.warning("%s is not an object; skipped", where)
            continue
        number, protocol = _port_number(raw.get("port")), _protocol(raw.get("protocol"))
        name, target = raw.get("name", ""), raw.get("targetPort")
        if number is None:
            logger.warning("%s.port %r is not a port number (1-65535); skipped", where, raw.get("port"))
        elif protocol is None:
            logger.warning("%s.protocol %r is not one of TCP, UDP, SCTP; skipped", where, raw.get("protocol"))
        elif not isinstance(name, str) and name is not None:
            logger.warning("%s.name %r is not text; skipped", where, name)
        elif (protocol, number) in seen:
            logger.warning("%s repeats %s/%s; skipped", where, protocol.value, number)
        else:
            seen.add((protocol, number))
            if isinstance(target, bool) or not isinstance(target, int | str):
                target = None
            out.append(ServicePort(number, protocol, name or "", target))
    return out


def _cluster_ips(key: str, spec: Mapping[str, Any]) -> tuple[Address, ...] | None:
    """The ClusterIPs; () for headless; None when there is none yet (not allocated): nothing to serve."""
    raw = spec.get("clusterIPs")
    if not isinstance(raw, list) or not raw:
        single = spec.get("clusterIP")
        raw = [single] if isinstance(single, str) and single else []
    if not raw:
        return None
    if raw[0] == "None":
        return ()
    out: list[Address] = []
    for index, value in enumerate(raw):
        address = _address(value)
        if address is None:
            logger.warning("Service %s: spec.clusterIPs[%d] %r is not an IP address; skipped",
                           key, index, value)
        elif all(a.version != address.version for a in out):
            out.append(address)
    return tuple(out) if out else None


def service(obj: Mapping[str, Any], network: str | None = None) -> Service | None:
    """The Service served on a PodNetwork, or None (not annotated, not ClusterIP, no ClusterIP yet).

    `network`: the network's key when the edge resolved the annotation (a PodNetworkAttachment
    to its PodNetwork); the annotation's value otherwise.
    """
    namespace, name, _, annotations = _meta(obj)
    key = f"{namespace}/{name}"
    named = annotations.get(constants.SERVICE_PODNETWORK_ANNOTATION)
    if not namespace or not name or not isinstance(named, str) or not named:
        return None
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        logger.warning("Service %s: spec is not an object; not served", key)
        return None
    kind = spec.get("type", "ClusterIP")
    if kind not in SERVED_TYPES:
        logger.info("Service %s: type %r is not served on a PodNetwork (only ClusterIP and headless)",
                    key, kind)
        return None
    cluster_ips = _cluster_ips(key, spec)
    if cluster_ips is None:
        return None
    affinity = SessionAffinity.NONE
    timeout = DEFAULT_AFFINITY_TIMEOUT
    if spec.get("sessionAffinity") == SessionAffinity.CLIENT_IP.value:
        affinity = SessionAffinity.CLIENT_IP
        config = spec.get("sessionAffinityConfig")
        client = config.get("clientIP") if isinstance(config, Mapping) else None
        seconds = client.get("timeoutSeconds") if isinstance(client, Mapping) else None
        if isinstance(seconds, int) and not isinstance(seconds, bool) and 0 < seconds <= MAX_AFFINITY_TIMEOUT:
            timeout = seconds
        elif seconds is not None:
            logger.warning("Service %s: sessionAffinityConfig.clientIP.timeoutSeconds %r is not 1-%d; "
                           "using %d", key, seconds, MAX_AFFINITY_TIMEOUT, DEFAULT_AFFINITY_TIMEOUT)
    ports = tuple(_service_ports(key, spec.get("ports")))
    return Service(namespace, name, network or named, cluster_ips, ports, affinity, timeout)


def _slice_ports(key: str, ports: Any) -> list[EndpointPort]:
    out = []
    for index, raw in enumerate(ports if isinstance(ports, list) else ()):
        if not isinstance(raw, Mapping):
            logger.warning("EndpointSlice %s: ports[%d] is not an object; skipped", key, index)
            continue
        number, protocol = _port_number(raw.get("port")), _protocol(raw.get("protocol"))
        name = raw.get("name")
        if number is None or protocol is None or not isinstance(name, str | None):
            logger.warning("EndpointSlice %s: ports[%d] (%r) needs a port 1-65535, a protocol of TCP, UDP, "
                           "SCTP and a text name; skipped", key, index, dict(raw))
            continue
        out.append(EndpointPort(name or "", protocol, number))
    return out


def _condition(conditions: Mapping[str, Any], name: str, default: bool) -> bool:
    value = conditions.get(name)
    return value if isinstance(value, bool) else default


def slice_endpoints(obj: Mapping[str, Any],
                    managed_by: str | None = None) -> tuple[str, tuple[Endpoint, ...]] | None:
    """(the Service's key, the slice's endpoints), or None for a slice of no Service, of another manager
    (when `managed_by` is given), or of address type FQDN."""
    namespace, name, labels, _ = _meta(obj)
    key = f"{namespace}/{name}"
    owner = labels.get(SERVICE_NAME_LABEL)
    if not namespace or not isinstance(owner, str) or not owner:
        return None
    if managed_by is not None and labels.get(MANAGED_BY_LABEL) != managed_by:
        return None
    address_type = obj.get("addressType")
    family = {"IPv4": 4, "IPv6": 6}.get(address_type) if isinstance(address_type, str) else None
    if family is None:
        if address_type != "FQDN":
            logger.warning("EndpointSlice %s: addressType %r is not IPv4, IPv6 or FQDN; skipped",
                           key, address_type)
        return None
    ports = tuple(_slice_ports(key, obj.get("ports")))
    endpoints: list[Endpoint] = []
    raw_endpoints = obj.get("endpoints")
    for index, raw in enumerate(raw_endpoints if isinstance(raw_endpoints, list) else ()):
        addresses = raw.get("addresses") if isinstance(raw, Mapping) else None
        address = _address(addresses[0]) if isinstance(addresses, list) and addresses else None
        if address is None or address.version != family:
            logger.warning("EndpointSlice %s: endpoints[%d] has no first address of IPv%d (%r); skipped",
                           key, index, family, addresses)
            continue
        assert isinstance(raw, Mapping)
        conditions = raw.get("conditions")
        conditions = conditions if isinstance(conditions, Mapping) else {}
        ready = _condition(conditions, "ready", True)
        endpoints.append(Endpoint(address, ports, ready, _condition(conditions, "serving", ready),
                                  _condition(conditions, "terminating", False)))
    return f"{namespace}/{owner}", tuple(endpoints)


def endpoints_by_service(slices: Iterable[Mapping[str, Any]],
                         managed_by: str | None = None) -> dict[str, tuple[Endpoint, ...]]:
    """Every slice's endpoints, grouped by their Service's key (what `dnat.compile_pod` takes)."""
    out: dict[str, list[Endpoint]] = {}
    for obj in slices:
        found = slice_endpoints(obj, managed_by)
        if found is not None:
            out.setdefault(found[0], []).extend(found[1])
    return {key: tuple(endpoints) for key, endpoints in out.items()}


__all__ = [
    "MANAGED_BY_LABEL",
    "SERVED_TYPES",
    "SERVICE_NAME_LABEL",
    "endpoints_by_service",
    "service",
    "slice_endpoints",
]
