"""Services' ClusterIPs in a client pod's network namespace: the table and the routes, applied and removed.

`bridge.services.dnat.compile_pod` decides, per pod, the table `inet podnetwork_services` and
the routes that send each ClusterIP through its network's interface; this module makes a
namespace hold exactly that:

- `apply(netns, ruleset)`: the table first (one nft transaction, `bridge.agent.netns.nftables`),
  then the routes, so that a ClusterIP routed to the network's interface always meets its
  rules; a ruleset with no table is `remove`.
- `update(netns, before, after, changes)`: from what we last wrote to the new ruleset in place:
  only the changed chains and elements (`bridge.services.changes`, one transaction that keeps
  the table), the routes only when they changed; whole (`apply`) when there is no old table or
  the table is not what we wrote.
- `remove(netns)`: the routes first, then the table, for the same reason the other way round.
  Idempotent; a namespace that is gone is no error (its routes and tables went with it).
- `routes(netns)`: the routes of ours there now.
- `flush_udp(netns, pairs)`: deletes the conntrack entries of UDP flows from the ClusterIP to an
  endpoint that left (`conntrack -D -p udp --orig-dst CLUSTERIP --dst-nat ENDPOINT`, as
  kube-proxy does): UDP has no end, so without it a flow keeps its old endpoint, gone or not,
  until the entry times out. Without the `conntrack` program (Debian package `conntrack`) it
  says so once in the log and does nothing.

The routes are ours by their routing protocol number (`ip route ... proto 201`,
`dnat.ROUTE_PROTOCOL`): `apply` deletes those it no longer wants, replaces the others, and
never touches a route of anyone else (the CNI plugins', the agent's default routes). Each
`ip` run enters the namespace by nsenter as nft does (`nftables.run_in`), with its time-out.
A change is made in at most three runs: the table, the routes listed per family, one batch;
an update that keeps the routes, in one.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import shutil
from collections.abc import Iterable, Sequence

from bridge.agent.netns import nftables
from bridge.services.dnat import ROUTE_PROTOCOL, Command, Route, Ruleset, transaction

log = logging.getLogger(__name__)
_said: set[str] = set()
"""Programs found missing, said once in the log."""
#: What conntrack -D says (with exit code 1) when nothing matched: no error for us.
_NOTHING_DELETED = "0 flow entries have been deleted"


async def apply(netns: str, ruleset: Ruleset, *, timeout: float = nftables.DEFAULT_TIMEOUT, nft: str = "nft",
                ip: str = "ip", nsenter: str = "nsenter") -> None:
    """Makes the namespace at path `netns` hold `ruleset`: its table (or none) and exactly its routes.

    Raises nftables.NetnsGone when the namespace does not exist, nftables.NftablesError when nft
    refuses the table (which then stays as it was, and the routes too) or `ip` a route.
    """
    document = ruleset.document
    if document is None:
        await remove(netns, timeout=timeout, nft=nft, ip=ip, nsenter=nsenter)
        return
    await nftables.apply(netns, document, table=nftables.SERVICES, timeout=timeout, nft=nft, nsenter=nsenter)
    await sync_routes(netns, ruleset.routes, timeout=timeout, ip=ip, nsenter=nsenter)


async def update(netns: str, before: Ruleset, after: Ruleset, changes: Sequence[Command] | None, *,
                 timeout: float = nftables.DEFAULT_TIMEOUT, nft: str = "nft", ip: str = "ip",
                 nsenter: str = "nsenter") -> bool:
    """Makes the namespace at path `netns`, which holds `before` (as we last wrote it), hold `after`:
    the table changed in place by `changes` (`bridge.services.changes.changes(before.commands,
    after.commands)`, one transaction), the routes listed and synced only when they differ.

    Whole, as `apply`, when `changes` is None or `after` has no table. When the in-place change is
    refused (the table is not what we last wrote: changed by hand, or gone), the table is replaced
    whole at once. True when written in place, False when whole. Raises as `apply`.
    """
    if changes is None or after.document is None or before.document is None:
        await apply(netns, after, timeout=timeout, nft=nft, ip=ip, nsenter=nsenter)
        return False
    if changes:
        try:
            await nftables.change(netns, transaction(changes), table=nftables.SERVICES, timeout=timeout,
                                  nft=nft, nsenter=nsenter)
        except nftables.NetnsGone:
            raise
        except nftables.NftablesError as exc:
            log.warning("services: netns %s: the table is not what the agent last wrote (%s); replacing it "
                        "whole", netns, exc)
            await apply(netns, after, timeout=timeout, nft=nft, ip=ip, nsenter=nsenter)
            return False
    if before.routes != after.routes:
        await sync_routes(netns, after.routes, timeout=timeout, ip=ip, nsenter=nsenter)
    return True


async def remove(netns: str, *, timeout: float = nftables.DEFAULT_TIMEOUT, nft: str = "nft", ip: str = "ip",
                 nsenter: str = "nsenter") -> None:
    """Deletes our routes and our table from the namespace at path `netns`, if it exists (idempotent)."""
    if not netns:
        return
    with contextlib.suppress(nftables.NetnsGone):
        await sync_routes(netns, (), timeout=timeout, ip=ip, nsenter=nsenter)
    await nftables.remove(netns, table=nftables.SERVICES, timeout=timeout, nft=nft, nsenter=nsenter)


async def routes(netns: str, *, timeout: float = nftables.DEFAULT_TIMEOUT, ip: str = "ip",
                 nsenter: str = "nsenter") -> list[Route]:
    """Our routes in the namespace at path `netns` (protocol `ROUTE_PROTOCOL`, main table), sorted."""
    program = _program(netns, ip, "list our routes")
    found: list[Route] = []
    for family in ("-4", "-6"):
        action = f"list our routes ({family})"
        argv = [program, "-j", family, "route", "show", "table", "main", "proto", str(ROUTE_PROTOCOL)]
        out = await nftables.run_in(netns, action, argv, timeout=timeout, nsenter=nsenter)
        try:
            entries = json.loads(out or b"[]")
            found.extend(Route(str(ipaddress.ip_network(e["dst"])), str(e["dev"]), str(e.get("prefsrc", "")))
                         for e in entries)
        except (ValueError, KeyError, TypeError, AttributeError):
            said = out[:200].decode(errors="replace")
            raise nftables.NftablesError(netns, action, f"ip answered what is not its JSON: {said}") from None
    return sorted(found)


async def sync_routes(netns: str, wanted: Iterable[Route], *, timeout: float = nftables.DEFAULT_TIMEOUT,
                      ip: str = "ip", nsenter: str = "nsenter") -> None:
    """Our routes in the namespace at path `netns` become exactly `wanted` (others' are never touched)."""
    target = sorted(set(wanted))
    current = await routes(netns, timeout=timeout, ip=ip, nsenter=nsenter)
    lines = [_line(["route", "del", r.destination, "dev", r.interface, "proto", str(ROUTE_PROTOCOL)])
             for r in current if r not in target]
    lines += [_line(r.argv()) for r in target if r not in current]
    if not lines:
        return
    program = _program(netns, ip, "change our routes")
    await nftables.run_in(netns, "change our routes", [program, "-batch", "-"], "".join(lines).encode(),
                          timeout=timeout, nsenter=nsenter)


async def flush_udp(netns: str, pairs: Iterable[tuple[str, str]], *,
                    timeout: float = nftables.DEFAULT_TIMEOUT, conntrack: str = "conntrack",
                    nsenter: str = "nsenter") -> int:
    """Deletes the conntrack entries of UDP flows in the namespace at path `netns` from each pair's
    ClusterIP translated to its endpoint; how many `conntrack` runs it made (0 without the program).

    Raises nftables.NetnsGone when the namespace does not exist, nftables.NftablesError when
    conntrack fails otherwise than by finding nothing.
    """
    wanted = list(pairs)
    if not wanted:
        return 0
    program = shutil.which(conntrack)
    if program is None:
        if conntrack not in _said:
            _said.add(conntrack)
            log.warning("services: the conntrack program (%s) is not installed (Debian package "
                        "conntrack): UDP flows to an endpoint that left keep it until their conntrack "
                        "entries expire",
                        conntrack)
        return 0
    for cluster_ip, endpoint in wanted:
        action = f"flush UDP conntrack entries {cluster_ip} -> {endpoint}"
        argv = [program, "-D", "-p", "udp", "--orig-dst", cluster_ip, "--dst-nat", endpoint]
        try:
            await nftables.run_in(netns, action, argv, timeout=timeout, nsenter=nsenter)
        except nftables.NetnsGone:
            raise
        except nftables.NftablesError as exc:
            if _NOTHING_DELETED not in str(exc):
                raise
    return len(wanted)


def _line(argv: Sequence[str]) -> str:
    return " ".join(argv) + "\n"


def _program(netns: str, ip: str, action: str) -> str:
    program = shutil.which(ip)
    if program is None:
        raise nftables.NftablesError(netns, action,
                                     f"the ip program ({ip}) is not installed: install iproute2")
    return program


__all__ = ["apply", "flush_udp", "remove", "routes", "sync_routes", "update"]
