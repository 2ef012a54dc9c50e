"""What the driver writes in a prepared claim's `status.devices[]` once the pod's network is attached:
KEP-4817 `networkData` (interface name, IPs as CIDRs, hardware address) and a Ready condition (pure).

The interface of a PodNetwork comes from the pod's KEP status, `multinetwork.x-k8s.io/pod-ips`
(`{ip, podNetwork, interfaceName}`, written by the bridge after the agent attached), and its
addresses and MAC from the pod's NPWG `k8s.v1.cni.cncf.io/network-status` entry of that
interface (written by the agent). A device whose PodNetwork is not attached (yet) gets no entry.
Any pod's annotations may hold anything (its tenant can write them): what cannot be read is left
out, never a failure.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Any

from bridge import npwg
from bridge.dra import objects as dra
from bridge.dracontract import state
from podnetwork.ground import constants, core

CONDITION_READY = "Ready"
REASON_ATTACHED = "InterfaceAttached"


def _interfaces_by_podnetwork(annotations: Mapping[str, str]) -> dict[str, str]:
    try:
        entries = json.loads(annotations.get(constants.POD_IPS_ANNOTATION) or "[]")
    except (ValueError, RecursionError):
        return {}
    out: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("podNetwork"), str) \
                and isinstance(entry.get("interfaceName"), str):
            out.setdefault(entry["podNetwork"], entry["interfaceName"])
    return out


def _status_by_interface(annotations: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    try:
        entries = npwg.parse_status(annotations.get(npwg.NETWORK_STATUS_ANNOTATION) or "[]")
    except ValueError:
        return {}
    return {e["interface"]: e for e in entries if isinstance(e.get("interface"), str)}


def cidr(value: object) -> str | None:
    """An NPWG status IP as a canonical CIDR (a bare address gets its host prefix); None for no address."""
    if not isinstance(value, str) or "%" in value:
        return None
    try:
        if "/" in value:
            return ipaddress.ip_interface(value).with_prefixlen
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    return f"{address}/{address.max_prefixlen}"


def device_statuses(prepared: state.PreparedClaim, pod: Mapping[str, Any], *, driver: str,
                    now: str) -> list[dict[str, Any]]:
    """The `status.devices[]` entries of the claim's attached devices (AllocatedDeviceStatus v1)."""
    head = core.head_of(pod)
    annotations = (head.metadata.annotations if head else None) or {}
    interfaces = _interfaces_by_podnetwork(annotations)
    statuses = _status_by_interface(annotations)
    out: list[dict[str, Any]] = []
    for device in prepared.devices:
        iface = interfaces.get(device.podnetwork or "")
        if iface is None:
            continue
        entry = statuses.get(iface, {})
        ips = [c for c in (cidr(ip) for ip in entry.get("ips") or []) if c][: dra.MAX_NETWORK_DATA_IPS]
        mac = entry.get("mac")
        data = dra.NetworkDeviceData(interface_name=iface, ips=ips or None,
                                     hardware_address=mac if isinstance(mac, str) and mac else None)
        status: dict[str, Any] = {"driver": driver, "pool": device.pool, "device": device.device}
        if device.share_id:
            status["shareID"] = device.share_id
        status["networkData"] = data.to_dict()
        status["conditions"] = [{"type": CONDITION_READY, "status": "True", "reason": REASON_ATTACHED,
                                 "message": f"PodNetwork {device.podnetwork} is attached as {iface}",
                                 "lastTransitionTime": now}]
        out.append(status)
    return out


def unchanged_key(statuses: list[dict[str, Any]]) -> str:
    """What two writes are compared by: everything but the conditions' times."""
    return json.dumps([{**s, "conditions": [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                                            for c in s.get("conditions") or []]} for s in statuses],
                      sort_keys=True)


__all__ = ["CONDITION_READY", "REASON_ATTACHED", "cidr", "device_statuses", "unchanged_key"]
