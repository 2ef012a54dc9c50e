"""Pure decisions of an ADD: which network goes on which interface, and the default routes.

`placements`: the cluster default network first on the runtime's interface (NPWG 6.2), or, for a
pod whose KEP networks leave `default` out (KEP-3698: "only the listed PodNetworks will be
attached"), the first listed network there instead; the other networks after it, in order.

NPWG spec 4.2.1: an attachment is the tuple [container ID, network name, CNI_IFNAME];
a selection that names no interface gets one generated, unique in the pod
(`net1`, `net2`, ...). 4.1.2.1.5: a requested name already used by a previous
attachment fails the ADD.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bridge.agent.delegates.invoke import CNIError, ErrorCode, check_ifname
from bridge.agent.netns.routes import RouteAction, RouteOp

GENERATED_PREFIX = "net"


@dataclass(frozen=True)
class Planned:
    """One attachment the agent will make, fully resolved before anything runs."""

    name: str
    """network-status name: `namespace/nad`, or the default network's name."""
    ifname: str
    config: dict[str, Any]
    """The delegate CNI configuration (single or list), as `bridge.npwg.delegate_config` made it."""
    default: bool = False
    """On the runtime's interface, its result the runtime's answer, its network-status entry
    `"default": true` (NPWG 5.3.5): the cluster default network, or the first network of an
    explicit list (`placements`)."""
    default_route: tuple[str, ...] | None = None
    """Gateways for the pod's default route; () means "from this attachment's result"."""
    default_route_families: tuple[int, ...] | None = None
    """The IP versions whose default route moves here (the selection's families extension);
    None: the families of `default_route`, or of the result's gateways when that is ()."""
    podnetwork: str | None = None
    """The PodNetwork it attaches, for KEP networks (`selection.Selected.sources`)."""


def interface_names(primary: str, requested: Sequence[str | None]) -> list[str]:
    """The CNI_IFNAME of each selected attachment, in order (4.2.1, 4.1.2.1.5)."""
    check_ifname(primary)
    taken = {primary}
    for i, name in enumerate(requested):
        if name is None:
            continue
        check_ifname(name)
        if name in taken:
            raise CNIError(
                ErrorCode.INVALID_CONFIG,
                f"interface name {name!r} is used by two attachments",
                f"selection element {i} asks for {name!r}, which an earlier attachment already uses "
                "(NPWG multi-net spec 4.1.2.1.5); pick distinct interface names",
            )
        taken.add(name)
    out: list[str] = []
    counter = 0
    for name in requested:
        if name is not None:
            out.append(name)
            continue
        counter += 1
        while f"{GENERATED_PREFIX}{counter}" in taken:
            counter += 1
        generated = f"{GENERATED_PREFIX}{counter}"
        taken.add(generated)
        out.append(generated)
    return out


def placements(
    primary: str, requested: Sequence[str | None], *, explicit: bool
) -> list[tuple[int | None, str]]:
    """Where each network of an ADD goes, in the order they are attached: (index of the selected
    network in `requested`, or None for the cluster default network; its CNI_IFNAME).

    `requested` holds each selected network's own interface name (None: generated, 4.2.1).
    Without `explicit`, the cluster default network comes first on `primary` (the runtime's
    CNI_IFNAME, NPWG 6.2), then each selected network. With it (the pod's KEP networks leave
    out `default`), the first selected network takes `primary` in its place: the runtime reads
    the pod's IPs from that interface (CRI), so the network's own name is not applied; the
    rest are named as they would be after the default network.
    """
    if not explicit:
        return [(None, primary), *enumerate(interface_names(primary, requested))]
    if not requested:
        raise ValueError("an explicit list of networks holds at least one network")
    rest = interface_names(primary, requested[1:])
    return [(0, primary), *((i, name) for i, name in enumerate(rest, start=1))]


def result_gateways(result: Mapping[str, Any] | None) -> list[str]:
    """The gateways a CNI result offers for a default route: its IPs' gateways, else its default routes."""
    if not result:
        return []
    # Pre-0.3.0 results (CNI 0.1.0/0.2.0) carry the same data in "ip4"/"ip6" blocks.
    legacy = [b for b in (result.get("ip4"), result.get("ip6")) if isinstance(b, Mapping)]
    entries = [*(result.get("ips") or []), *legacy]
    routes = [*(result.get("routes") or []), *(r for b in legacy for r in b.get("routes") or [])]
    found: list[str] = []
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("gateway"):
            found.append(str(entry["gateway"]))
    if not found:
        for route in routes:
            if isinstance(route, Mapping) and route.get("dst") in ("0.0.0.0/0", "::/0") and route.get("gw"):
                found.append(str(route["gw"]))
    return list(dict.fromkeys(found))


FAMILY_NAMES = {"ipv4": 4, "ipv6": 6}


def route_families(value: Any) -> tuple[int, ...] | None:
    """The IP versions named by the families extension key (`["ipv4"]`, ...); None when absent."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not value
        or any(not isinstance(v, str) or v not in FAMILY_NAMES for v in value)
    ):
        raise CNIError(
            ErrorCode.INVALID_CONFIG,
            "invalid default-route families",
            f"{value!r} must be a non-empty list of {sorted(FAMILY_NAMES)}",
        )
    return tuple(sorted({FAMILY_NAMES[v] for v in value}))


def _by_family(gateways: Sequence[str]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for gw in gateways:
        try:
            out.setdefault(ipaddress.ip_address(gw).version, []).append(gw)
        except ValueError:
            raise CNIError(
                ErrorCode.INVALID_CONFIG, "invalid default-route gateway", f"{gw!r} is not an IP address"
            ) from None
    return out


def route_gateways(
    listed: Sequence[str],
    families: Sequence[int] | None,
    result: Mapping[str, Any] | None,
) -> list[str]:
    """The gateways whose default routes an attachment takes over, IPv4 first (4.1.2.1.9).

    Only the families that move are in the answer, so `default_route_ops` leaves
    the other families' default routes (those of the default network) alone. With
    `families` given, each family takes the listed gateways of that family, else the
    gateways of that family in the attachment's own CNI result; a family with neither
    fails. Without it (a plain NPWG selection), the families are those of the listed
    gateways, or, when the list is empty, those of the result's gateways.
    """
    given = _by_family(listed)
    from_result = _by_family(result_gateways(result))
    if families is None:
        chosen = given or from_result
        if not chosen:
            raise CNIError(
                ErrorCode.INVALID_CONFIG,
                "no gateway for the default route",
                "its CNI result names no gateway; give one in default-route or in the IPAM config",
            )
        return [gw for _, gws in sorted(chosen.items()) for gw in gws]
    out: list[str] = []
    for family in sorted(set(families)):
        gws = given.get(family) or from_result.get(family)
        if not gws:
            raise CNIError(
                ErrorCode.INVALID_CONFIG,
                f"no IPv{family} gateway for the default route",
                f"the pod asks for the IPv{family} default route here, but neither default-route nor "
                f"the CNI result names an IPv{family} gateway; give one in the IPAM config or in "
                "default-route",
            )
        out.extend(gws)
    return out


def default_route_ops(ifname: str, gateways: Sequence[str]) -> list[RouteOp]:
    """The steps that move the pod's default route(s) to `ifname` (4.1.2.1.9).

    Per address family present in `gateways`: drop every default route of that
    family, then add one via each gateway, in order, with rising metrics.
    """
    ops: list[RouteOp] = []
    for version, gws in sorted(_by_family(gateways).items()):
        family: Literal[4, 6] = 4 if version == 4 else 6
        ops.append(RouteOp(family, RouteAction.FLUSH_DEFAULT))
        for metric, gw in enumerate(gws):
            ops.append(RouteOp(family, RouteAction.ADD_DEFAULT, gw, ifname, metric or None))
    return ops


def default_route_commands(ifname: str, gateways: Sequence[str]) -> list[list[str]]:
    """`default_route_ops` as the equivalent `ip` argument lists."""
    return [op.argv() for op in default_route_ops(ifname, gateways)]
