"""Services on PodNetworks: which Services the bridge serves, and the EndpointSlices of a
network's addresses it keeps for each. Pure.

A Service is served on PodNetwork `<name>` when it carries the annotation
`multinetwork.x-k8s.io/podnetwork: <name>` (docs/services.md). `plan` reads the Service, what
the bridge knows of that PodNetwork, the compact records (`PodRecord`) of the pods of the
Service's namespace and the slices of ours that exist for it, and returns what to write
(`ServicePlan`): slices to create, update and delete, and the Warnings the Service should carry.
`bridge.operator.serviceslices` applies it.

The slices follow the EndpointSlice API's conventions, as the upstream EndpointSlice controller
writes them: labels `endpointslice.kubernetes.io/managed-by` (ours) and
`kubernetes.io/service-name`, one `addressType` per slice, at most
`constants.MAX_ENDPOINTS_PER_SLICE` endpoints per slice, the Service's ports resolved per pod
(a named `targetPort` by the pod's container ports), and per endpoint `ready`, `serving` and
`terminating` as that controller sets them (serving: the pod's Ready condition; terminating:
`deletionTimestamp` set; ready: serving and not terminating, or the Service's
`publishNotReadyAddresses`).

Writes are minimal: an endpoint stays in the slice that holds it, new ones fill the slices with
room first, and only a slice whose content changed is written. Slice names are stable,
`<service>.<ipv4|ipv6>.<n>`: a Service's name is a DNS label (no dot), so no name the upstream
controller generates (`<service>-<random>`) can be one of ours.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.operator import pods as bridge_pods
from podnetwork.ground import constants
from podnetwork.ground import service as views
from podnetwork.ground.actions import Create, Delete, Patch

#: Address types by IP version (discovery.k8s.io/v1 `addressType`; FQDN is never ours).
FAMILIES: dict[str, int] = {"IPv4": 4, "IPv6": 6}
_FAMILY_OF = {4: "IPv4", 6: "IPv6"}

#: Service types a PodNetwork serves: ClusterIP (headless included). Absent means ClusterIP.
SERVED_TYPES = (None, "ClusterIP")

# Warning Event reasons on the Service (docs/services.md "Events").
UNSUPPORTED_TYPE = "UnsupportedServiceType"
PROXY_NAME_MISSING = "ServiceProxyNameMissing"
SELECTOR_MISSING = "SelectorMissing"
PODNETWORK_NOT_FOUND = "PodNetworkNotFound"
TARGET_PORT_NOT_FOUND = "TargetPortNotFound"
NO_ADDRESS_OF_FAMILY = "NoAddressOfFamily"
PODS_NOT_ON_PODNETWORK = "PodsNotOnPodNetwork"

#: How many pod names a PodsNotOnPodNetwork message lists before "and N more".
NAMES_SHOWN = 5


# --- what the bridge remembers of a pod ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NamedPort:
    """A container port with a name (what a Service's named `targetPort` resolves by)."""

    name: str
    port: int
    protocol: str


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What the Services of a namespace need of one pod, and nothing more (10,000 pods are held)."""

    name: str
    uid: str
    labels: Mapping[str, str]
    node: str | None
    ready: bool
    """The pod's Ready condition is True."""
    terminating: bool
    """`metadata.deletionTimestamp` is set."""
    addresses: tuple[tuple[str, str], ...]
    """(PodNetwork, IP) from `multinetwork.x-k8s.io/pod-ips`."""
    statuses: tuple[tuple[str, str], ...]
    """(network-status entry name, IP) from `k8s.v1.cni.cncf.io/network-status` (NPWG 5)."""
    declares: tuple[str, ...]
    """The PodNetworks its `multinetwork.x-k8s.io/networks` names."""
    attachments: tuple[str, ...]
    """The PodNetworkAttachments its `multinetwork.x-k8s.io/networks` names."""
    ports: tuple[NamedPort, ...]
    hostname: str | None = None
    subdomain: str | None = None


def _intern(values: Mapping[str, str] | None) -> dict[str, str]:
    # Label keys and values repeat across the pods of a workload: one string each.
    return {sys.intern(k): sys.intern(v) for k, v in (values or {}).items()}


def _ip(value: Any) -> str | None:
    """A bare address from an IP with or without a prefix length (NPWG 5.4), or None."""
    if not isinstance(value, str):
        return None
    try:
        return str(ipaddress.ip_interface(value).ip)
    except ValueError:
        return None


def _json_list(text: str | None) -> list[Any]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def pod_record(pod: views.EndpointPod) -> PodRecord | None:
    """The record of a pod, or None for one that ended (Succeeded or Failed: never an endpoint).

    Unreadable annotations read as empty: the pod then has no address on any network (the
    bridge and admission report those annotations; here the pod is only left out).
    """
    if pod.status.phase in ("Succeeded", "Failed"):
        return None
    meta = pod.metadata
    addresses = []
    for entry in _json_list(meta.annotation(constants.POD_IPS_ANNOTATION)):
        if isinstance(entry, dict) and isinstance(entry.get("podNetwork"), str):
            ip = _ip(entry.get("ip"))
            if ip is not None:
                addresses.append((sys.intern(entry["podNetwork"]), ip))
    statuses = []
    for entry in _json_list(meta.annotation(constants.NPWG_NETWORK_STATUS_ANNOTATION)):
        if (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and isinstance(entry.get("ips"), list)):
            statuses += [(sys.intern(entry["name"]), ip) for ip in map(_ip, entry["ips"]) if ip is not None]
    declares, attachments = [], []
    for entry in _json_list(meta.annotation(constants.NETWORKS_ANNOTATION)):
        if isinstance(entry, dict):
            if isinstance(entry.get("podNetworkName"), str):
                declares.append(sys.intern(entry["podNetworkName"]))
            if isinstance(entry.get("podNetworkAttachmentName"), str):
                attachments.append(sys.intern(entry["podNetworkAttachmentName"]))
    ports = tuple(NamedPort(sys.intern(p.name), p.container_port, sys.intern(p.protocol))
                  for c in pod.spec.containers or () for p in c.ports or () if p.name)
    return PodRecord(
        name=meta.name or "", uid=meta.uid or "", labels=_intern(meta.labels),
        node=sys.intern(pod.spec.node_name) if pod.spec.node_name else None,
        ready=pod.ready, terminating=meta.deletion_timestamp is not None,
        addresses=tuple(addresses), statuses=tuple(statuses), declares=tuple(declares),
        attachments=tuple(attachments), ports=ports, hostname=pod.spec.hostname, subdomain=pod.spec.subdomain)


# --- what the bridge remembers of a PodNetwork and of its own slices -------------------------


@dataclass(frozen=True)
class Network:
    """A PodNetwork as a Service sees it: its name and, for one of the bridge's, its NAD
    `(namespace, name)`, whose network-status entries hold the addresses of pods the KEP
    annotation does not describe (an NPWG selection written by hand)."""

    name: str
    nad: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One endpoint of a slice of ours: a pod's address of the slice's family."""

    pod: str
    uid: str
    addresses: tuple[str, ...]
    node: str | None
    ready: bool | None
    serving: bool | None
    terminating: bool | None
    hostname: str | None = None

    def to_dict(self, namespace: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "addresses": list(self.addresses),
            "conditions": {"ready": self.ready, "serving": self.serving, "terminating": self.terminating},
            "targetRef": {"kind": "Pod", "namespace": namespace, "name": self.pod, "uid": self.uid},
        }
        if self.node is not None:
            body["nodeName"] = self.node
        if self.hostname is not None:
            body["hostname"] = self.hostname
        return body


@dataclass(frozen=True, slots=True)
class Port:
    """One port of a slice: the Service port's name, the pod's port number, the protocol."""

    name: str
    port: int | None
    protocol: str
    app_protocol: str | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": self.name, "port": self.port, "protocol": self.protocol}
        if self.app_protocol is not None:
            body["appProtocol"] = self.app_protocol
        return body


Ports = tuple[Port, ...]


@dataclass(frozen=True)
class Slice:
    """A slice of ours as the API holds it, in the terms the planner compares."""

    name: str
    address_type: str
    ports: Ports
    endpoints: tuple[Endpoint, ...]
    labels: Mapping[str, str]
    owners: tuple[tuple[str, str, str, str, bool | None, bool | None], ...]
    resource_version: str = ""

    @property
    def service(self) -> str:
        return self.labels.get(constants.ENDPOINTSLICE_SERVICE_NAME_LABEL, "")


def slice_record(view: views.EndpointSlice) -> Slice:
    """A slice read from the API (any content: an edited slice compares as different)."""
    endpoints = tuple(
        Endpoint(pod=ep.target_ref.name or "" if ep.target_ref else "",
                 uid=ep.target_ref.uid or "" if ep.target_ref else "",
                 addresses=tuple(ep.addresses), node=ep.node_name, ready=ep.conditions.ready,
                 serving=ep.conditions.serving, terminating=ep.conditions.terminating, hostname=ep.hostname)
        for ep in view.endpoints or ())
    ports = tuple(Port(p.name or "", p.port, p.protocol or "TCP", p.app_protocol) for p in view.ports or ())
    owners = tuple((o.api_version, o.kind, o.name, o.uid, o.controller, o.block_owner_deletion)
                   for o in view.metadata.owner_references or ())
    return Slice(view.metadata.name or "", view.address_type, ports, endpoints,
                 dict(view.metadata.labels or {}), owners, view.metadata.resource_version or "")


# --- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceWarning:
    """A Warning Event the Service should carry (posted when it first appears)."""

    reason: str
    message: str


@dataclass(frozen=True)
class ServicePlan:
    """What to write for one Service: creates first, then updates, then deletes (so a consumer
    never sees an endpoint gone that only moved), and the Warnings it carries now."""

    creates: tuple[Create, ...] = ()
    updates: tuple[Patch, ...] = ()
    deletes: tuple[Delete, ...] = ()
    warnings: tuple[ServiceWarning, ...] = ()
    served: bool = False
    """The Service names a PodNetwork (whether or not it can be served)."""
    endpoints: int = 0
    """Endpoints in the slices once the plan applied."""

    @property
    def writes(self) -> int:
        return len(self.creates) + len(self.updates) + len(self.deletes)


def network_of(service: views.Service) -> str | None:
    """The PodNetwork a Service names, or None when it names none."""
    return service.metadata.annotation(constants.SERVICE_PODNETWORK_ANNOTATION)


def families(service: views.Service) -> tuple[str, ...]:
    """The address types of a Service's slices: its `ipFamilies`; else those of its cluster IPs;
    else (a headless Service the API server gave no family) both; else IPv4."""
    spec = service.spec
    if spec.ip_families:
        return tuple(dict.fromkeys(f for f in spec.ip_families if f in FAMILIES))
    found = []
    for ip in spec.cluster_ips or ([spec.cluster_ip] if spec.cluster_ip else []):
        bare = _ip(ip)
        if bare is not None:
            found.append(_FAMILY_OF[ipaddress.ip_address(bare).version])
    if found:
        return tuple(dict.fromkeys(found))
    return ("IPv4", "IPv6") if spec.headless else ("IPv4",)


def refusals(service: views.Service, network: Network | None) -> list[ServiceWarning]:
    """Why a Service that names a PodNetwork cannot be served at all (empty: it can)."""
    spec, name = service.spec, network_of(service) or ""
    out = []
    if spec.type not in SERVED_TYPES:
        out.append(ServiceWarning(UNSUPPORTED_TYPE, (
            f"type {spec.type} is not served on PodNetwork {name}: a Service on a PodNetwork is reached "
            "only from the pods of that network, by its ClusterIP or, headless, by its endpoints' "
            f"addresses; node ports, load balancers and external traffic arrive on the cluster "
            "network. Set type ClusterIP (or clusterIP: None) or remove "
            f"{constants.SERVICE_PODNETWORK_ANNOTATION}")))
    proxy = (service.metadata.labels or {}).get(constants.SERVICE_PROXY_NAME_LABEL)
    if proxy != constants.SERVICE_PROXY_NAME:
        had = "it has none" if proxy is None else f"it names proxy {proxy!r}"
        out.append(ServiceWarning(PROXY_NAME_MISSING, (
            f"not served on PodNetwork {name}: the Service needs the label "
            f"{constants.SERVICE_PROXY_NAME_LABEL}={constants.SERVICE_PROXY_NAME} so that kube-proxy "
            f"does not program it with cluster-network endpoints ({had}); add the label")))
    if not spec.selector:
        out.append(ServiceWarning(SELECTOR_MISSING, (
            f"not served on PodNetwork {name}: the Service has no selector, so no pod is its endpoint; "
            "add spec.selector (a Service without one has the endpoints you write yourself)")))
    if network is None:
        out.append(ServiceWarning(PODNETWORK_NOT_FOUND, (
            f"PodNetwork {name!r} (annotation {constants.SERVICE_PODNETWORK_ANNOTATION}) does not exist: "
            "create it, or name an existing PodNetwork (the PodNetwork's name, also for pods attached "
            "through a PodNetworkAttachment)")))
    return out


def selected(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """A Service's (equality-based) selector picks a pod with these labels."""
    return all(labels.get(k) == v for k, v in selector.items())


def _addresses(pod: PodRecord, network: Network, namespace: str) -> dict[int, str]:
    """The pod's address per IP version on `network`: from its pod IPs per PodNetwork; for a pod
    with none there, from its network-status entries of the network's NAD."""
    out: dict[int, str] = {}
    for net, ip in pod.addresses:
        if net == network.name:
            out.setdefault(ipaddress.ip_address(ip).version, ip)
    if out or network.nad is None:
        return out
    nad_ns, nad_name = network.nad
    for entry, ip in pod.statuses:
        if entry == f"{nad_ns}/{nad_name}" or (entry == nad_name and nad_ns == namespace):
            out.setdefault(ipaddress.ip_address(ip).version, ip)
    return out


def _declares(pod: PodRecord, network: Network, attachment_networks: Mapping[str, str]) -> bool:
    return network.name in pod.declares or any(attachment_networks.get(a) == network.name
                                                for a in pod.attachments)


def _resolve(service_port: views.ServicePort, pod: PodRecord) -> int | None:
    """The pod's port number for a Service port (named target ports by the pod's container ports,
    of the same protocol), or None when the pod names no such port."""
    target = service_port.target_port
    if target is None:
        return service_port.port
    if isinstance(target, int):
        return target
    for port in pod.ports:
        if port.name == target and port.protocol == service_port.protocol:
            return port.port
    return None


def labels_for(service: views.Service, network: str) -> dict[str, str]:
    """A slice's labels: the Service's own (as the upstream controller copies them), then the
    convention's and ours."""
    labels = {k: v for k, v in (service.metadata.labels or {}).items()
              if k not in (constants.SERVICE_HEADLESS_LABEL, constants.ENDPOINTSLICE_MANAGED_BY_LABEL,
                           constants.ENDPOINTSLICE_SERVICE_NAME_LABEL)}
    labels[constants.ENDPOINTSLICE_MANAGED_BY_LABEL] = constants.ENDPOINTSLICE_MANAGED_BY
    labels[constants.ENDPOINTSLICE_SERVICE_NAME_LABEL] = service.metadata.name or ""
    labels[constants.ENDPOINTSLICE_PODNETWORK_LABEL] = network
    if service.spec.headless:
        labels[constants.SERVICE_HEADLESS_LABEL] = ""
    return labels


Owner = tuple[str, str, str, str, bool | None, bool | None]
"""apiVersion, kind, name, uid, controller, blockOwnerDeletion of an ownerReference."""


def owners_for(service: views.Service) -> tuple[Owner, ...]:
    return (("v1", "Service", service.metadata.name or "", service.metadata.uid or "", True, True),)


def _owner_dicts(owners: Iterable[Owner]) -> list[dict[str, Any]]:
    return [{"apiVersion": a, "kind": k, "name": n, "uid": u, "controller": c, "blockOwnerDeletion": b}
            for a, k, n, u, c, b in owners]


def slice_name(service: str, address_type: str, index: int) -> str:
    return f"{service}.{address_type.lower()}.{index}"


GroupKey = tuple[str, Ports]


def _pack(service: str, groups: Mapping[GroupKey, Mapping[str, Endpoint]], existing: Mapping[str, Slice],
          ) -> tuple[dict[str, tuple[GroupKey, list[Endpoint]]], list[str]]:
    """Endpoints into slices: each stays where it is when its slice still fits it, new ones fill
    the slices of their group with room (in name order), then new slices. Returns the slices
    by name with their group and endpoints, and the names of existing slices left empty."""
    limit = constants.MAX_ENDPOINTS_PER_SLICE
    placed: set[tuple[str, str]] = set()
    kept: dict[str, tuple[GroupKey, list[Endpoint]]] = {}
    for name in sorted(existing):
        old = existing[name]
        key = (old.address_type, old.ports)
        group = groups.get(key, {})
        eps: list[Endpoint] = []
        for ep in old.endpoints:
            want = group.get(ep.pod)
            if want is not None and (old.address_type, ep.pod) not in placed and len(eps) < limit:
                eps.append(want)
                placed.add((old.address_type, ep.pod))
        kept[name] = (key, eps)
    used = set(existing)
    for key in sorted(groups, key=lambda k: (k[0], repr(k[1]))):
        pending = [ep for pod, ep in sorted(groups[key].items()) if (key[0], pod) not in placed]
        for name in sorted(kept):
            if not pending:
                break
            if kept[name][0] == key and len(kept[name][1]) < limit:
                room = limit - len(kept[name][1])
                kept[name][1].extend(pending[:room])
                pending = pending[room:]
        index = 0
        while pending:
            while slice_name(service, key[0], index) in used:
                index += 1
            name = slice_name(service, key[0], index)
            used.add(name)
            kept[name] = (key, pending[:limit])
            pending = pending[limit:]
    empty = [name for name, (_, eps) in kept.items() if not eps]
    return {n: v for n, v in kept.items() if v[1]}, empty


def _not_on_network(network: str, left_out: Sequence[str], total: int) -> ServiceWarning:
    shown = ", ".join(sorted(left_out)[:NAMES_SHOWN])
    more = f" and {len(left_out) - NAMES_SHOWN} more" if len(left_out) > NAMES_SHOWN else ""
    return ServiceWarning(PODS_NOT_ON_PODNETWORK, (
        f"{len(left_out)} of {total} pods the selector picks are not on PodNetwork {network} and are "
        f"left out of its endpoints: {shown}{more}"))


@dataclass
class _Gathered:
    """The selected pods of one Service on its PodNetwork, as endpoints grouped for slices."""

    groups: dict[GroupKey, dict[str, Endpoint]] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    """Selected pods that do not declare the network."""
    total: int = 0
    """Pods the selector selects."""
    candidates: int = 0
    """Of them, those with an address on the network."""
    resolved_by_some: set[int] = field(default_factory=set)
    """The indexes of the Service's ports some candidate resolves."""
    found_families: set[str] = field(default_factory=set)


def _gather(service: views.Service, network: Network, pods: Iterable[PodRecord],
            attachment_networks: Mapping[str, str]) -> _Gathered:
    """Each selected pod with an address on `network`: one endpoint per wanted family, grouped by
    (family, resolved ports); the pods left out and the ports resolved, for the warnings."""
    namespace = service.metadata.namespace or ""
    name = service.metadata.name or ""
    selector = service.spec.selector or {}
    spec_ports = service.spec.ports or []
    publish = bool(service.spec.publish_not_ready_addresses)
    wanted = families(service)
    out = _Gathered()
    for pod in pods:
        if not selected(selector, pod.labels):
            continue
        out.total += 1
        found = _addresses(pod, network, namespace)
        if not found:
            if not _declares(pod, network, attachment_networks):
                out.left_out.append(pod.name)
            continue  # on the network, not attached yet: no address to serve
        out.candidates += 1
        ports: list[Port] = []
        for i, sp in enumerate(spec_ports):
            number = _resolve(sp, pod)
            if number is not None:
                out.resolved_by_some.add(i)
                ports.append(Port(sp.name or "", number, sp.protocol, sp.app_protocol))
        hostname = pod.hostname if pod.hostname and pod.subdomain == name else None
        for version, ip in found.items():
            address_type = _FAMILY_OF[version]
            out.found_families.add(address_type)
            if address_type not in wanted:
                continue
            endpoint = Endpoint(
                pod=pod.name, uid=pod.uid, addresses=(ip,), node=pod.node,
                ready=publish or (pod.ready and not pod.terminating), serving=pod.ready,
                terminating=pod.terminating, hostname=hostname)
            out.groups.setdefault((address_type, tuple(ports)), {})[pod.name] = endpoint
    return out


def _port_warnings(service: views.Service, network_name: str, gathered: _Gathered) -> list[ServiceWarning]:
    """A port that targets a container port by a name none of the candidates declares."""
    spec_ports = service.spec.ports or []
    candidates = gathered.candidates
    return [ServiceWarning(TARGET_PORT_NOT_FOUND, (
        f"port {sp.name or sp.port} targets the container port named {sp.target_port!r} "
        f"({sp.protocol}), which none of the {candidates} selected pods on PodNetwork "
        f"{network_name} declares: name a port of theirs, or give the number"))
        for i, sp in enumerate(spec_ports) if candidates and i not in gathered.resolved_by_some]


def _family_warnings(service: views.Service, network_name: str, gathered: _Gathered) -> list[ServiceWarning]:
    """A family the Service wants that none of the candidates has an address of."""
    if not gathered.candidates:
        return []
    have = " and ".join(sorted(gathered.found_families)) or "none"
    return [ServiceWarning(NO_ADDRESS_OF_FAMILY, (
        f"none of the {gathered.candidates} selected pods on PodNetwork {network_name} has an "
        f"{address_type} address there (they have {have}); no {address_type} endpoints: "
        f"give the network an {address_type} range, or set the Service's ipFamilies to "
        "what it has"))
        for address_type in families(service) if address_type not in gathered.found_families]


def _writes(service: views.Service, network_name: str, groups: Mapping[GroupKey, Mapping[str, Endpoint]],
            slices: Mapping[str, Slice]) -> tuple[list[Create], list[Patch], tuple[Delete, ...], int]:
    """The slices that hold `groups`: created, patched where they differ, deleted when left empty;
    and how many endpoints they hold."""
    namespace = service.metadata.namespace or ""
    labels = labels_for(service, network_name)
    owners = owners_for(service)
    placed, empty = _pack(service.metadata.name or "", groups, slices)
    creates: list[Create] = []
    updates: list[Patch] = []
    count = 0
    for slice_name_, ((address_type, slice_ports), eps) in sorted(placed.items()):
        eps = sorted(eps, key=lambda e: e.pod)
        count += len(eps)
        old = slices.get(slice_name_)
        body_endpoints = [e.to_dict(namespace) for e in eps]
        body_ports = [p.to_dict() for p in slice_ports]
        if old is None:
            creates.append(Create({
                "apiVersion": views.ENDPOINTSLICE_API_VERSION, "kind": views.ENDPOINTSLICE_KIND,
                "metadata": {"name": slice_name_, "namespace": namespace, "labels": labels,
                             "ownerReferences": _owner_dicts(owners)},
                "addressType": address_type, "endpoints": body_endpoints, "ports": body_ports}))
            continue
        same = (tuple(sorted(old.endpoints, key=lambda e: e.pod)) == tuple(eps) and dict(old.labels) == labels
                and old.owners == owners)
        if same:
            continue
        label_patch: dict[str, str | None] = {k: None for k in old.labels if k not in labels}
        label_patch.update(labels)
        meta: dict[str, Any] = {"labels": label_patch, "ownerReferences": _owner_dicts(owners)}
        if old.resource_version:
            meta["resourceVersion"] = old.resource_version
        updates.append(Patch(views.ENDPOINTSLICE_KIND, slice_name_, namespace,
                             {"metadata": meta, "endpoints": body_endpoints, "ports": body_ports}))
    deletes = tuple(Delete(views.ENDPOINTSLICE_KIND, n, namespace) for n in sorted(empty))
    return creates, updates, deletes, count


def plan(service: views.Service, network: Network | None, pods: Iterable[PodRecord],
         slices: Mapping[str, Slice], attachment_networks: Mapping[str, str] | None = None) -> ServicePlan:
    """What to write for `service` (module docstring).

    `network` is the PodNetwork the Service names as the bridge knows it (None: unknown),
    `pods` the records of the pods of its namespace, `slices` ours of it by name, and
    `attachment_networks` the PodNetwork of each PodNetworkAttachment of its namespace.
    A Service that names no PodNetwork, or cannot be served, loses our slices.
    """
    namespace = service.metadata.namespace or ""
    drop_all = tuple(Delete(views.ENDPOINTSLICE_KIND, n, namespace) for n in sorted(slices))
    network_name = network_of(service)
    if network_name is None:
        return ServicePlan(deletes=drop_all)
    problems = refusals(service, network)
    if problems or network is None or not service.spec.selector:
        return ServicePlan(deletes=drop_all, warnings=tuple(problems), served=True)
    gathered = _gather(service, network, pods, attachment_networks or {})
    warnings: list[ServiceWarning] = []
    if gathered.left_out:
        warnings.append(_not_on_network(network_name, gathered.left_out, gathered.total))
    unnamed = _port_warnings(service, network_name, gathered)
    if unnamed:
        return ServicePlan(deletes=drop_all, warnings=(*warnings, *unnamed), served=True)
    warnings += _family_warnings(service, network_name, gathered)
    creates, updates, deletes, count = _writes(service, network_name, gathered.groups, slices)
    return ServicePlan(tuple(creates), tuple(updates), deletes, tuple(warnings), served=True, endpoints=count)


def service_event(service: views.Service, warning: ServiceWarning, *, now: str) -> dict[str, Any]:
    """A Warning Event about the Service, named from the Service and the message (posted once)."""
    meta = service.metadata
    name = meta.name or ""
    key = bridge_pods.digest(f"{meta.uid}/{warning.reason}/{warning.message}")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name[: 253 - len(key) - 1]}.{key}", "namespace": meta.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Service", "name": name, "namespace": meta.namespace,
                           "uid": meta.uid, "resourceVersion": meta.resource_version},
        "reason": warning.reason,
        "message": warning.message[:1024],
        "type": "Warning",
        "source": {"component": bridge_pods.COMPONENT},
        "reportingComponent": bridge_pods.COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


__all__ = [
    "FAMILIES",
    "Endpoint",
    "NamedPort",
    "Network",
    "PodRecord",
    "Port",
    "ServicePlan",
    "ServiceWarning",
    "Slice",
    "families",
    "labels_for",
    "network_of",
    "plan",
    "pod_record",
    "refusals",
    "selected",
    "service_event",
    "slice_name",
    "slice_record",
]
