"""A Pod's `k8s.v1.cni.cncf.io/network-status` as KEP-4817 `networkData` per claim: what the
driver would write in the ResourceClaim's `status.devices[]`. Pure.

Any pod's status may hold anything (its tenant can write it): what cannot be read is
left out with a note, never a failure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge import npwg, translate
from bridge.dra import objects as dra
from bridge.dra.claims import Mapped
from bridge.dra.devices import ipam_subnets
from bridge.dra.objects import REQUEST_NAME
from bridge.dra.parameters import with_prefix
from bridge.dra.reasons import Cannot
from bridge.translate import podips
from podnetwork.ground import excerpts
from podnetwork.ground.findings import Finding
from podnetwork.ground.workloads import Workload, WorkloadKind

NETWORK_DATA_KIND = "NetworkDataExport"
NETWORK_DATA_API_VERSION = translate.OPTIONS_API_VERSION


@dataclass
class NetworkDataEntry:
    """KEP-4817 data of one claim of one pod, from its NPWG network-status."""

    pod: str
    pod_claim: str
    pod_network: str
    driver: str
    data: dra.NetworkDeviceData

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "resourceClaimName": self.pod_claim,
            "podNetwork": self.pod_network,
            "request": REQUEST_NAME,
            "driver": self.driver,
            "networkData": self.data.to_dict(),
        }


def _cidr(ip: str, subnets: Sequence[str]) -> tuple[str, bool] | None:
    """An NPWG status IP as a CIDR, and whether the prefix was known (else a host prefix);
    None when it is no address. Any pod's status may hold anything (its tenant can write it)."""
    if "%" in ip:  # an IPv6 zone: Python reads one, a CIDR of KEP-4817 has none
        return None
    try:
        if "/" in ip:
            return ipaddress.ip_interface(ip).with_prefixlen, True
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return None
    try:
        return with_prefix(ip, subnets, ""), True
    except Cannot:
        return f"{addr}/{addr.max_prefixlen}", False


def network_data(
    wl: Workload, mapped: Mapped, objs: translate.Objects, driver: str, notes: list[Finding]
) -> list[NetworkDataEntry]:
    """The networkData of each claim of a Pod that has a network-status; what cannot be read is noted."""
    text = wl.annotations.get(npwg.NETWORK_STATUS_ANNOTATION)
    if wl.kind != WorkloadKind.POD or text is None:
        return []
    try:
        status = npwg.parse_status(text)
    except ValueError as exc:
        message = f"no networkData: {npwg.NETWORK_STATUS_ANNOTATION} cannot be read: {exc}"
        notes.append(Finding(wl.ref, message, source=wl.source))
        return []
    by_index = {c.index: c for c in mapped.claims}
    subnets_of = {(e.namespace, e.name): _subnets_of(objs.nads.get((e.namespace, e.name)))
                  for e in mapped.translation.elements}
    out: list[NetworkDataEntry] = []
    for source, entry in podips.match(status, mapped.translation, wl.namespace):
        claim = by_index.get(source.index)
        if claim is None:
            continue
        element = mapped.translation.elements[mapped.translation.sources.index(source)]
        ips: list[str] = []
        for ip in entry.get("ips") or []:
            if not isinstance(ip, str):
                continue
            read = _cidr(ip, subnets_of.get((element.namespace, element.name), []))
            if read is None:
                notes.append(Finding(wl.ref, f"networkData of {claim.pod_claim}: {excerpts.value(ip)} in "
                                     f"{npwg.NETWORK_STATUS_ANNOTATION} is not an IP address: left out",
                                     source=wl.source))
                continue
            cidr, known = read
            if not known:
                notes.append(Finding(wl.ref, f"networkData of {claim.pod_claim}: the prefix length of {ip} "
                                     "is unknown (not in network-status nor the IPAM subnets): "
                                     f"written {cidr}", source=wl.source))
            ips.append(cidr)
        if len(ips) > dra.MAX_NETWORK_DATA_IPS:
            limit = dra.MAX_NETWORK_DATA_IPS
            notes.append(Finding(wl.ref, f"networkData of {claim.pod_claim}: {len(ips)} IPs, KEP-4817 allows "
                                 f"{limit}: the first {limit} are written", source=wl.source))
        iface = entry.get("interface")
        mac = entry.get("mac")
        data = dra.NetworkDeviceData(
            interface_name=iface if isinstance(iface, str) else None,
            ips=ips[: dra.MAX_NETWORK_DATA_IPS] or None,
            hardware_address=mac if isinstance(mac, str) else None,
        )
        out.append(NetworkDataEntry(f"{wl.namespace}/{wl.name}", claim.pod_claim, claim.pod_network,
                                    driver, data))
    return out


def _subnets_of(nad: npwg.NetworkAttachmentDefinition | None) -> list[str]:
    if nad is None or not nad.spec.config:
        return []
    try:
        plugins = npwg.plugins_of(npwg.load_cni_config(nad.spec.config, "spec.config"))
    except npwg.DelegationError:
        return []
    ipam = plugins[0].get("ipam")
    return ipam_subnets(ipam) if isinstance(ipam, Mapping) else []


def network_data_document(entries: Iterable[NetworkDataEntry]) -> dict[str, Any]:
    """The networkData of every exported claim, in one document that is never sent to a
    cluster: a ResourceClaim's status is the driver's to write."""
    return {
        "apiVersion": NETWORK_DATA_API_VERSION,
        "kind": NETWORK_DATA_KIND,
        "items": [e.to_dict() for e in entries],
    }


__all__ = ["NETWORK_DATA_API_VERSION", "NETWORK_DATA_KIND", "NetworkDataEntry", "network_data",
           "network_data_document"]
