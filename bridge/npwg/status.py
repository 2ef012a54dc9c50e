"""The status annotation `k8s.v1.cni.cncf.io/network-status` (5).

`status_entry` makes one status map from one CNI result; `parse_status` reads the
annotation back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from bridge.npwg.names import NETWORK_STATUS_ANNOTATION

# --- Status (5) ----------------------------------------------------------------------------

#: The CNI result formats this library reads (CNI SPEC.md, "Result"). A result of a newer
#: version may have changed meaning; reading it by its shape would report guesses as facts.
CNI_RESULT_VERSIONS: tuple[str, ...] = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")


class UnsupportedResultVersion(ValueError):
    """A CNI result whose `cniVersion` this library cannot read (5.3.2.1, 5.3.3.1 name the versions)."""


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() and p.isascii() for p in parts):
        raise UnsupportedResultVersion(
            f"CNI result cniVersion {version!r} is not a version of the form MAJOR.MINOR.PATCH"
        )
    return tuple(int(p) for p in parts)


def result_version_problem(result: Mapping[str, Any]) -> str | None:
    """Why `result` cannot be read (its `cniVersion` is malformed or newer than
    `CNI_RESULT_VERSIONS`), or None. A result without `cniVersion` is read by its shape."""
    if "cniVersion" not in result:
        return None
    version = result["cniVersion"]
    if not isinstance(version, str):
        return f"CNI result cniVersion must be a string, not {type(version).__name__}"
    try:
        if _version_tuple(version) > _version_tuple(CNI_RESULT_VERSIONS[-1]):
            return (
                f"CNI result cniVersion {version!r} is newer than any this project reads "
                f"({', '.join(CNI_RESULT_VERSIONS)}); its fields may mean something else"
            )
    except UnsupportedResultVersion as exc:
        return str(exc)
    return None


def _dns(result: Mapping[str, Any]) -> dict[str, Any] | None:
    dns = result.get("dns")
    if not isinstance(dns, dict):
        return None
    out = {k: dns[k] for k in ("nameservers", "domain", "search") if dns.get(k)}
    return out or None


def _is_default_destination(dst: Any) -> bool:
    return dst in ("0.0.0.0/0", "::/0")


def _result_gateways(result: Mapping[str, Any]) -> list[str]:
    routes: list[Any] = list(result.get("routes") or [])
    for legacy in ("ip4", "ip6"):
        block = result.get(legacy)
        if isinstance(block, dict):
            routes.extend(block.get("routes") or [])
    gateways = []
    for route in routes:
        if isinstance(route, dict) and _is_default_destination(route.get("dst")) and route.get("gw"):
            gateways.append(str(route["gw"]))
    return gateways


def _is_legacy(result: Mapping[str, Any]) -> bool:
    """Whether a result is of the 0.1.0/0.2.0 format (`ip4`/`ip6`) rather than 0.3.0+'s.

    The shape decides, the version only when the shape is silent: some plugins omit
    cniVersion, some echo a config version their result does not follow."""
    if "ips" in result or "interfaces" in result:
        return False
    if "ip4" in result or "ip6" in result:
        return True
    return _version_tuple(str(result.get("cniVersion", "0.1.0"))) < (0, 3, 0)


def _legacy_ips(result: Mapping[str, Any]) -> list[str]:
    """The addresses of a 0.1.0/0.2.0 result (5.3.2.1)."""
    ips: list[str] = []
    for block in (result.get("ip4"), result.get("ip6")):
        if isinstance(block, dict) and block.get("ip"):
            ips.append(str(block["ip"]))
    return ips


def _sandbox_addresses(
    result: Mapping[str, Any], ifname: str | None
) -> tuple[str | None, str | None, list[str]]:
    """(interface, mac, ips) of a 0.3.0+ result: its first interface with a `sandbox` (named, else
    `ifname`) and the addresses pointing at it; without one, no interface and the addresses of no
    interface (5.3.3.1)."""
    interfaces = result.get("interfaces") or []
    sandbox_index = next(
        (i for i, itf in enumerate(interfaces) if isinstance(itf, dict) and itf.get("sandbox")), None
    )
    entries = [e for e in result.get("ips") or [] if isinstance(e, dict) and e.get("address")]
    if sandbox_index is None:
        # No sandbox interface: the result does not say which interface is the pod's,
        # so the status does not either (the runtime's CNI_IFNAME may not be it).
        unbound = [e for e in entries if not isinstance(e.get("interface"), int) or e["interface"] < 0]
        return None, None, [str(e["address"]) for e in unbound]
    itf = interfaces[sandbox_index]
    ips = [str(e["address"]) for e in entries if e.get("interface") == sandbox_index]
    return itf.get("name") or ifname, itf.get("mac") or None, ips


def status_entry(
    name: str,
    cni_result: Mapping[str, Any] | None,
    *,
    default: bool,
    interface: str | None = None,
    default_route: Sequence[str] | None = None,
    device_info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One network-status map (5.3) from one attachment's CNI ADD result.

    `name` is `namespace/name` of the NAD (5.3.1) or the default network's name.
    From a 0.3.0+ result: `interface` and `mac` from the first interface with a
    `sandbox`, `ips` from the result's entries pointing at that interface, or from
    those with no interface index when no sandbox interface exists (5.3.3.1); from
    a 0.1.0/0.2.0 result, `ips` from `ip4`/`ip6` and `interface` from the
    `interface` argument (the CNI_IFNAME used, 5.3.2.1). A 0.3.0+ result without a
    sandbox interface gives no `interface` and no `mac` (5.3.2.1 sources them from that
    interface only; 5.3.3.1 rule 2 is the case where none exists). `dns` keeps `nameservers`,
    `domain` and `search` (5.3.6). With no result (None) the map is minimal (5.1.1).
    `default_route` is None unless the selection asked for the default route; then
    the entry carries it: the given gateways, or when the list is empty, the
    gateways of the result's default routes (5.3.6.4). IP addresses are reported
    as the result gives them, with their prefix length, as in 5.4's examples.
    Raises `UnsupportedResultVersion` for a result whose `cniVersion` is malformed or
    newer than `CNI_RESULT_VERSIONS`.
    """
    entry: dict[str, Any] = {"name": name}
    result: Mapping[str, Any] = cni_result or {}
    mac: str | None = None
    ips: list[str] = []
    if result:
        if problem := result_version_problem(result):
            raise UnsupportedResultVersion(f"{name}: {problem}")
        if _is_legacy(result):
            ips = _legacy_ips(result)
        else:
            interface, mac, ips = _sandbox_addresses(result, interface)
    if interface:
        entry["interface"] = interface
    if ips:
        entry["ips"] = ips
    if mac and interface:
        entry["mac"] = mac  # 5.3.4: "mac" only together with "interface"
    entry["default"] = bool(default)
    dns = _dns(result)
    if dns:
        entry["dns"] = dns
    if default_route is not None:
        entry["default-route"] = list(default_route) or _result_gateways(result)
    if device_info is not None:
        entry["device-info"] = dict(device_info)
    return entry


def parse_status(annotation: str) -> list[dict[str, Any]]:
    """Parse `k8s.v1.cni.cncf.io/network-status` (5): a JSON list of maps with a string `name`.

    Raises `ValueError` saying what is wrong; unknown keys are kept.
    """
    try:
        data = json.loads(annotation)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{NETWORK_STATUS_ANNOTATION}: not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValueError(f"{NETWORK_STATUS_ANNOTATION}: must be a JSON list of maps (5)")
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError(
                f"{NETWORK_STATUS_ANNOTATION}[{i}]: must be a map with a string \"name\" (5.3.1)"
            )
    return data


__all__ = [
    "CNI_RESULT_VERSIONS",
    "UnsupportedResultVersion",
    "parse_status",
    "result_version_problem",
    "status_entry",
]
