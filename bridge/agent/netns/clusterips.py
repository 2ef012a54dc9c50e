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
never touches a route of anyone else (the CNI plugins', the agent's default routes). They are
listed and changed over rtnetlink, as the default routes are (`routes`, `netlink`): one netlink
socket opened in the namespace per change, no child process, the kernel's refusals in `ip`'s
wording. The table is nft's (`nftables`, one nsenter + nft run); an update that keeps the
routes is that one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import shutil
import socket
import struct
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass

from bridge.agent.netns import netlink, nftables
from bridge.agent.netns import routes as routes_mod
from bridge.services.dnat import ROUTE_PROTOCOL, Command, Route, Ruleset, transaction

log = logging.getLogger(__name__)
_said: set[str] = set()
"""Programs found missing, said once in the log."""
#: What conntrack -D says (with exit code 1) when nothing matched: no error for us.
_NOTHING_DELETED = "0 flow entries have been deleted"


async def apply(netns: str, ruleset: Ruleset, *, timeout: float = nftables.DEFAULT_TIMEOUT, nft: str = "nft",
                nsenter: str = "nsenter") -> None:
    """Makes the namespace at path `netns` hold `ruleset`: its table (or none) and exactly its routes.

    Raises nftables.NetnsGone when the namespace does not exist, nftables.NftablesError when nft
    refuses the table (which then stays as it was, and the routes too) or `ip` a route.
    """
    document = ruleset.document
    if document is None:
        await remove(netns, timeout=timeout, nft=nft, nsenter=nsenter)
        return
    await nftables.apply(netns, document, table=nftables.SERVICES, timeout=timeout, nft=nft, nsenter=nsenter)
    await sync_routes(netns, ruleset.routes, timeout=timeout)


async def update(netns: str, before: Ruleset, after: Ruleset, changes: Sequence[Command] | None, *,
                 timeout: float = nftables.DEFAULT_TIMEOUT, nft: str = "nft",
                 nsenter: str = "nsenter") -> bool:
    """Makes the namespace at path `netns`, which holds `before` (as we last wrote it), hold `after`:
    the table changed in place by `changes` (`bridge.services.changes.changes(before.commands,
    after.commands)`, one transaction), the routes listed and synced only when they differ.

    Whole, as `apply`, when `changes` is None or `after` has no table. When the in-place change is
    refused (the table is not what we last wrote: changed by hand, or gone), the table is replaced
    whole at once. True when written in place, False when whole. Raises as `apply`.
    """
    if changes is None or after.document is None or before.document is None:
        await apply(netns, after, timeout=timeout, nft=nft, nsenter=nsenter)
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
            await apply(netns, after, timeout=timeout, nft=nft, nsenter=nsenter)
            return False
    if before.routes != after.routes:
        await sync_routes(netns, after.routes, timeout=timeout)
    return True


async def remove(netns: str, *, timeout: float = nftables.DEFAULT_TIMEOUT, nft: str = "nft",
                 nsenter: str = "nsenter") -> None:
    """Deletes our routes and our table from the namespace at path `netns`, if it exists (idempotent)."""
    if not netns:
        return
    with contextlib.suppress(nftables.NetnsGone):
        await sync_routes(netns, (), timeout=timeout)
    await nftables.remove(netns, table=nftables.SERVICES, timeout=timeout, nft=nft, nsenter=nsenter)


async def routes(netns: str, *, timeout: float = nftables.DEFAULT_TIMEOUT) -> list[Route]:
    """Our routes in the namespace at path `netns` (protocol `ROUTE_PROTOCOL`, main table), sorted."""
    action = "list our routes"
    async with _session(netns, action, timeout) as link:
        return sorted(r.route for r in await _ours(link, netns, action))


async def sync_routes(netns: str, wanted: Iterable[Route], *,
                      timeout: float = nftables.DEFAULT_TIMEOUT) -> None:
    """Our routes in the namespace at path `netns` become exactly `wanted` (others' are never touched)."""
    target = sorted(set(wanted))
    action = "change our routes"
    async with _session(netns, action, timeout) as link:
        current = await _ours(link, netns, action)
        kept = {r.route for r in current}
        for stale in (r for r in current if r.route not in target):
            # The route as dumped, sent back as a deletion: exactly that route (what `ip route del` does).
            try:
                await link.request(netlink.RTM_DELROUTE, 0, stale.raw)
            except netlink.NetlinkError as exc:
                if exc.errno != errno.ESRCH:  # gone since the dump: what we wanted
                    raise _refused(netns, f"delete {stale.route.destination}", exc) from None
        missing = [r for r in target if r not in kept]
        indexes = await _indexes(link, netns, action) if missing else {}
        for route in missing:
            index = indexes.get(route.interface)
            if index is None:
                raise nftables.NftablesError(netns, f"ip {' '.join(route.argv())}",
                                             f'Cannot find device "{route.interface}"')
            try:
                await link.request(netlink.RTM_NEWROUTE, netlink.NLM_F_CREATE | NLM_F_REPLACE,
                                   route_message(route, index))
            except netlink.NetlinkError as exc:
                raise _refused(netns, f"ip {' '.join(route.argv())}", exc) from None


#: rtnetlink's numbers for what `ip route replace DEST dev IF src SRC proto 201` sends (rtnetlink(7)).
RTA_DST = 1
RTA_OIF = 4
RTA_PREFSRC = 7
RTA_TABLE = 15
RT_TABLE_MAIN = 254
RT_SCOPE_LINK = 253
RTN_UNICAST = 1
RTM_F_CLONED = 0x200
NLM_F_REPLACE = 0x100
_FAMILIES = {4: socket.AF_INET, 6: socket.AF_INET6}


@dataclass(frozen=True)
class Dumped:
    """One route of ours as the kernel dumped it: what it is, and its message (to delete it by)."""

    route: Route
    raw: bytes


def route_message(route: Route, index: int) -> bytes:
    """The rtmsg and attributes of `route` on the interface of index `index`: a directly reached
    destination (scope link, no gateway), its source, our protocol, the main table."""
    destination = ipaddress.ip_network(route.destination)
    family = _FAMILIES[destination.version]
    body = netlink.RTMSG.pack(family, destination.prefixlen, 0, 0, RT_TABLE_MAIN, ROUTE_PROTOCOL,
                              RT_SCOPE_LINK, RTN_UNICAST, 0)
    body += _attr(RTA_DST, destination.network_address.packed)
    body += _attr(RTA_OIF, struct.pack("=I", index))
    if route.source:
        body += _attr(RTA_PREFSRC, ipaddress.ip_address(route.source).packed)
    return body


def parse_route(payload: memoryview, names: Mapping[int, str]) -> Dumped | None:
    """An RTM_NEWROUTE payload -> our route (main table, protocol `ROUTE_PROTOCOL`, not a cached
    clone), its interface named by `names` (index -> name); None for anyone else's.
    Raises `netlink.Malformed`."""
    if len(payload) < netlink.RTMSG.size:
        raise netlink.Malformed(f"route message of {len(payload)} bytes, shorter than rtmsg")
    family, dst_len, _src, _tos, table, protocol, _scope, _type, flags = netlink.RTMSG.unpack_from(payload)
    attrs = netlink.attributes(payload, netlink.RTMSG.size)
    extended = attrs.get(RTA_TABLE)
    if extended is not None and len(extended) == 4:
        table = struct.unpack("=I", extended)[0]
    if protocol != ROUTE_PROTOCOL or table != RT_TABLE_MAIN or flags & RTM_F_CLONED:
        return None
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    size = 4 if family == socket.AF_INET else 16
    dst, oif, src = attrs.get(RTA_DST), attrs.get(RTA_OIF), attrs.get(RTA_PREFSRC)
    if dst is None or len(dst) != size or oif is None or len(oif) != 4:
        raise netlink.Malformed("a route of ours without its destination or interface")
    address = ipaddress.ip_address(bytes(dst))
    index = struct.unpack("=I", oif)[0]
    source = str(ipaddress.ip_address(bytes(src))) if src is not None and len(src) == size else ""
    network = ipaddress.ip_network(f"{address}/{dst_len}", strict=False)
    return Dumped(Route(str(network), names.get(index, f"if{index}"), source), bytes(payload))


def _attr(kind: int, value: bytes) -> bytes:
    body = netlink.RTATTR.pack(netlink.RTATTR.size + len(value), kind) + value
    return body + b"\0" * (-len(body) % 4)


@contextlib.asynccontextmanager
async def _session(netns: str, action: str, timeout: float) -> AsyncIterator[netlink.Reader]:
    """A netlink socket in the namespace at path `netns` for one change within `timeout` seconds;
    a namespace that does not exist is `nftables.NetnsGone`, a time-out an `NftablesError`."""
    try:
        async with asyncio.timeout(timeout):
            try:
                sock = await routes_mod.socket_in(netns)
            except FileNotFoundError:
                raise nftables.NetnsGone(netns, action, "the network namespace does not exist (any more)") \
                    from None
            except OSError as exc:
                raise nftables.NftablesError(netns, action, f"cannot enter it: {exc.strerror}") from None
            try:
                sock.setsockopt(netlink.SOL_NETLINK, netlink.NETLINK_EXT_ACK, 1)  # the kernel's own words
                link = netlink.Reader(sock, _ignore, _nothing_lost)
            except BaseException:
                sock.close()
                raise
            try:
                yield link
            finally:
                link.close()
    except TimeoutError:
        raise nftables.NftablesError(netns, action, f"timed out after {timeout:g} s") from None


async def _indexes(link: netlink.Reader, netns: str, action: str) -> dict[str, int]:
    """Interface name -> index, in the namespace of `link`."""
    try:
        links = await link.dump(netlink.RTM_GETLINK, netlink.parse_link)
    except (netlink.NetlinkError, netlink.Lost, netlink.Malformed, OSError) as exc:
        raise nftables.NftablesError(netns, action, f"listing the interfaces: {exc}") from None
    return {name: index for index, name in links}


async def _ours(link: netlink.Reader, netns: str, action: str) -> list[Dumped]:
    """Our routes of both families, as dumped."""
    names = {index: name for name, index in (await _indexes(link, netns, action)).items()}
    found: list[Dumped] = []
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            found += await link.dump(netlink.RTM_GETROUTE, lambda raw: parse_route(raw, names), family)
        except (netlink.NetlinkError, netlink.Lost, netlink.Malformed, OSError) as exc:
            raise nftables.NftablesError(netns, action, f"listing the routes: {exc}") from None
    return found


def _refused(netns: str, action: str, exc: netlink.NetlinkError) -> nftables.NftablesError:
    return nftables.NftablesError(netns, action, routes_mod.ip_wording(exc))


def _ignore(_msg_type: int) -> None:
    return None  # the socket joins no multicast group: nothing arrives unasked


def _nothing_lost() -> None:
    return None


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


__all__ = ["Dumped", "apply", "flush_udp", "parse_route", "remove", "route_message", "routes", "sync_routes",
           "update"]
