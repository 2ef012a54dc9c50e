"""Reverse status: NPWG `network-status` -> KEP `multinetwork.x-k8s.io/pod-ips` and
`multinetwork.x-k8s.io/attachments` (the attachment data for the workload). Pure.

Whichever NPWG implementation attached the pod (Multus, or this project's
agent), it reports each attachment in `k8s.v1.cni.cncf.io/network-status`
(NPWG 5). This module maps those entries back to PodNetworks through the pod's
translation, and keeps at most one IP per family per PodNetwork (KEP "Status").

Matching an entry to a selection element (NPWG 5.3.1, 4.2):

- the entry with `"default": true` is the `default` PodNetwork (NPWG 5.2), except for a
  pod whose KEP networks leave out `default` (KEP: the list is explicit): this project's
  agent then attaches the first listed network on the pod's primary interface and marks
  its entry default (5.3.5), so that entry is the first network's when its name matches
  and no other entry of that name does. An NPWG implementation that cannot leave the
  default network out (Multus, NPWG 6.2) reports it beside the listed ones: it stays the
  `default` PodNetwork;
- other entries match an element by `name`, written `namespace/name` (5.3.1) or,
  as some implementations do, a bare name meaning the pod's namespace; when the
  element names its interface, the entry's `interface` must agree (or be absent);
  elements selecting the same NAD twice (4.2) are told apart by interface, then
  take the remaining entries in order.

Entries that match nothing (a hand-written selection, another tool's networks)
are left out: they belong to no PodNetwork.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from typing import Any

from bridge import npwg
from bridge.translate.networks import Source, Translation
from podnetwork.ground import constants
from podnetwork.kep.api import PodIP


def status_address(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address of an NPWG status IP, which may carry a prefix length (5.4)."""
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_interface(value).ip
    except ValueError:
        return None


def _names_match(entry_name: str, element: npwg.NetworkSelectionElement, pod_namespace: str) -> bool:
    if "/" in entry_name:
        return entry_name == element.ref
    return entry_name == element.name and element.namespace == pod_namespace


def match(
    status: Sequence[Mapping[str, Any]], translation: Translation, pod_namespace: str
) -> list[tuple[Source, Mapping[str, Any]]]:
    """Pair status entries with the sources they report on, in the pod's network order."""
    used: set[int] = set()
    pairs: list[tuple[Source, Mapping[str, Any]]] = []
    default_entry = next((i for i, e in enumerate(status) if e.get("default") is True), None)
    if default_entry is not None and translation.includes_default:
        used.add(default_entry)
        assert translation.default_source is not None
        pairs.append((translation.default_source, status[default_entry]))
    # The first element of an explicit list may hold the primary interface (module docstring).
    primary = translation.elements[0] if translation.elements and not translation.includes_default else None
    # Elements that name their interface pick first, so an element that does not
    # cannot take the entry of a named one (4.2: the same NAD selected twice).
    order = sorted(
        zip(translation.elements, translation.sources, strict=True), key=lambda p: p[0].interface is None
    )
    for element, source in order:
        named = [
            i
            for i, entry in enumerate(status)
            if i not in used
            and isinstance(entry.get("name"), str)
            and _names_match(entry["name"], element, pod_namespace)
        ]
        candidates = [i for i in named if i != default_entry]
        if element.interface is not None:
            # An entry without "interface" (a pre-0.3.0 result, 5.3.2.1) may still be ours.
            candidates = [i for i in candidates if status[i].get("interface") in (element.interface, None)]
            candidates.sort(key=lambda i: status[i].get("interface") is None)
        if not candidates and element is primary and default_entry in named:
            # On the runtime's interface, whatever interfaceName said (the runtime names it).
            candidates = [default_entry]
        if candidates:
            used.add(candidates[0])
            pairs.append((source, status[candidates[0]]))
    if default_entry is not None and default_entry not in used:
        # The cluster default network, attached though the pod does not list it (NPWG 6.2).
        used.add(default_entry)
        pairs.append((Source(constants.DEFAULT_PODNETWORK, None, None, -1), status[default_entry]))
    pairs.sort(key=lambda p: p[0].index)
    return pairs


def pod_ips(
    status: Sequence[Mapping[str, Any]], translation: Translation, pod_namespace: str
) -> list[dict[str, Any]]:
    """The KEP pod IPs (`{"ip", "podNetwork", "interfaceName"}`) from NPWG status entries.

    At most one IP per family per PodNetwork, the first the entry lists; IPs are
    bare addresses (the status may carry prefix lengths). The interface name is
    the entry's, else the KEP `interfaceName`, else omitted.
    """
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for source, entry in match(status, translation, pod_namespace):
        interface = entry.get("interface") if isinstance(entry.get("interface"), str) else None
        interface = interface or source.interface
        for raw in entry.get("ips") or []:
            addr = status_address(raw)
            if addr is None or (source.pod_network, addr.version) in seen:
                continue
            seen.add((source.pod_network, addr.version))
            out.append(
                PodIP(ip=str(addr), pod_network=source.pod_network, interface_name=interface).to_dict()
            )
    return out


def claimed_pod_ips(current: str | None, ips: Sequence[Mapping[str, Any]],
                    status: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The entries of the pod's current pod-ips that `ips` (the translation's) cannot know and
    that still hold: of a PodNetwork `ips` names nowhere, on an interface network-status still
    reports. The CNI agent writes such entries for the networks of a pod's DRA claims
    (docs/dra.md), which its annotation need not name; the bridge keeps them instead of
    overwriting them, and they go with their interface (a DEL, a hot-unplug)."""
    try:
        entries = json.loads(current or "[]")
    except (ValueError, RecursionError):
        return []
    known = {e.get("podNetwork") for e in ips}
    interfaces = {e.get("interface") for e in status if isinstance(e.get("interface"), str)}
    return [dict(e) for e in entries if isinstance(entries, list) and isinstance(e, dict)
            and isinstance(e.get("podNetwork"), str) and e["podNetwork"] not in known
            and isinstance(e.get("ip"), str) and e.get("interfaceName") in interfaces]


def format_pod_ips(ips: Sequence[Mapping[str, Any]]) -> str:
    """The `multinetwork.x-k8s.io/pod-ips` annotation value (compact JSON)."""
    return json.dumps(list(ips), separators=(",", ":"))


def _cidr(value: Any) -> str | None:
    """An NPWG status IP (5.3.3: with or without a prefix length) as a CIDR.

    An address without a prefix (Multus reports bare IPs) is written with the
    full-length prefix, /32 or /128: the status does not say its subnet, and
    KEP-4817's `ips` are CIDRs.
    """
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_interface(value).with_prefixlen
    except ValueError:
        return None


def attachments(
    status: Sequence[Mapping[str, Any]], translation: Translation, pod_namespace: str
) -> list[dict[str, Any]]:
    """The data of each attachment for the workload (KEP Phase II requirement 17), in the pod's network order.

    One map per status entry that matches the pod's networks (`match`): `podNetwork`,
    `podNetworkAttachment` when the pod named one, then KEP-4817's `networkData`
    fields (DRA ResourceClaim status, `NetworkDeviceData`): `interfaceName` (the
    entry's `interface`, else the KEP `interfaceName`), `ips` as CIDRs (every IP the
    entry lists, unlike pod IPs' one per family) and `hardwareAddress` (the entry's
    `mac`). A field with no value is left out. Implementation-agnostic: nothing of
    NPWG (NAD names, device-info) is in it.
    """
    out: list[dict[str, Any]] = []
    for source, entry in match(status, translation, pod_namespace):
        data: dict[str, Any] = {"podNetwork": source.pod_network}
        if source.attachment:
            data["podNetworkAttachment"] = source.attachment
        interface = entry.get("interface") if isinstance(entry.get("interface"), str) else None
        if interface or source.interface:
            data["interfaceName"] = interface or source.interface
        cidrs = [c for c in (_cidr(raw) for raw in entry.get("ips") or []) if c is not None]
        if cidrs:
            data["ips"] = list(dict.fromkeys(cidrs))
        mac = entry.get("mac")
        if isinstance(mac, str) and mac:
            data["hardwareAddress"] = mac
        out.append(data)
    return out


def format_attachments(data: Sequence[Mapping[str, Any]]) -> str:
    """The `multinetwork.x-k8s.io/attachments` annotation value (compact JSON)."""
    return json.dumps(list(data), separators=(",", ":"))


__all__ = ["attachments", "claimed_pod_ips", "format_attachments", "format_pod_ips", "match", "pod_ips",
           "status_address"]
