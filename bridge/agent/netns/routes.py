"""Applies `RouteOp`s (moving a pod's default routes; `bridge.agent.cni.plan.default_route_ops` decides
them) over rtnetlink inside the pod's netns.

The namespace is entered once per `apply`, to open one netlink socket: a socket
stays in the namespace it was created in, so every request after that runs on the
agent's event loop (`bridge.agent.netns.netlink`, stdlib `AF_NETLINK`) without entering anything again.
setns(2) moves only the calling thread, so the socket is opened by a short-lived
thread of its own: a pooled thread would carry the pod's namespace into unrelated
work, and the event loop's thread must never leave the agent's namespace.

No child process is involved (the agent used to run `nsenter --net=… ip route …`),
so an agent killed during a route change leaves nothing running that could finish
the change later (compare `bridge.agent.delegates.orphans`).

The effect is that of the `ip` commands `RouteOp.argv` names, and failures read
the same: CNI error 5 "<ip command> failed in <netns>" with `ip`'s own wording in
the details ("Error: Nexthop has invalid gateway.", `Cannot find device "net1"`),
and CNI error 100 when the whole change outlasts the timeout; the kernel's own words
come with its errors because the socket asks for extended acks (NETLINK_EXT_ACK).
The messages are built and read with `struct` (rtmsg with RTA_GATEWAY, RTA_OIF,
RTA_PRIORITY; ifinfomsg with IFLA_IFNAME): pyroute2, which did this before, cost
~6.6 MB of RSS and ~55 ms on the first move (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.netns import netlink


class RouteAction(StrEnum):
    FLUSH_DEFAULT = "flush-default"
    """Remove every default route of the family from the main table (`ip route flush exact`)."""
    ADD_DEFAULT = "add-default"
    """Add a default route via `gateway` on `ifname` (`ip route add default via … dev …`)."""


@dataclass(frozen=True)
class RouteOp:
    """One step of moving a pod's default route, applied in the pod's netns by `apply`."""

    family: Literal[4, 6]
    action: RouteAction
    gateway: str | None = None
    ifname: str | None = None
    metric: int | None = None
    """None: the kernel's default (0 for IPv4, 1024 for IPv6), as `ip` leaves it."""

    def __post_init__(self) -> None:
        if self.action is RouteAction.ADD_DEFAULT:
            if self.gateway is None or self.ifname is None:
                raise ValueError(f"adding a default route needs a gateway and an interface: {self}")
            if ipaddress.ip_address(self.gateway).version != self.family:
                raise ValueError(f"gateway {self.gateway} is not an IPv{self.family} address")
            if self.metric is not None and self.metric < 0:
                raise ValueError(f"metric {self.metric} is negative")
        elif (self.gateway, self.ifname, self.metric) != (None, None, None):
            raise ValueError(f"flushing default routes takes no gateway, interface or metric: {self}")

    def argv(self) -> list[str]:
        """The `ip` command with the same effect: what errors and logs name the step by."""
        flag = f"-{self.family}"
        if self.action is RouteAction.FLUSH_DEFAULT:
            return ["ip", flag, "route", "flush", "exact", "0.0.0.0/0" if self.family == 4 else "::/0"]
        assert self.gateway is not None and self.ifname is not None
        cmd = ["ip", flag, "route", "add", "default", "via", self.gateway, "dev", self.ifname]
        if self.metric is not None:
            cmd += ["metric", str(self.metric)]
        return cmd


CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0
RT_TABLE_MAIN = 254
#: The protocol `ip route add` gives a route; tools and the tests see it as "proto boot".
RTPROT_BOOT = 3
RT_SCOPE_UNIVERSE = 0
RTN_UNICAST = 1
RTM_F_CLONED = 0x200
#: linux/rtnetlink.h route attributes.
RTA_OIF = 4
RTA_GATEWAY = 5
RTA_PRIORITY = 6
RTA_TABLE = 15
#: `ip route flush` dumps and deletes until a dump finds nothing; a namespace whose
#: default routes reappear this many times in a row is being changed by someone else.
MAX_FLUSH_ROUNDS = 10

_FAMILIES = {4: socket.AF_INET, 6: socket.AF_INET6}


async def apply(netns: str, ops: Sequence[RouteOp], timeout: float) -> None:
    """Applies `ops` in order inside the network namespace at path `netns`; stops at the first failure.

    Raises CNIError 5 naming the failing step, or 100 when all of it takes longer than `timeout` seconds.
    """
    if not ops:
        return
    progress = [ops[0]]  # the step under way, for the timeout's message
    try:
        await asyncio.wait_for(_apply(netns, ops, progress), timeout)
    except TimeoutError:
        raise CNIError(
            ErrorCode.PLUGIN_TIMEOUT, f"{' '.join(progress[0].argv())} timed out in {netns}"
        ) from None


async def _apply(netns: str, ops: Sequence[RouteOp], progress: list[RouteOp]) -> None:
    try:
        sock = await socket_in(netns)
    except OSError as exc:
        raise _failed(ops[0], netns, f"cannot enter network namespace {netns}: {exc.strerror}") from None
    try:
        sock.setsockopt(netlink.SOL_NETLINK, netlink.NETLINK_EXT_ACK, 1)  # the kernel's own words in errors
        link = netlink.Reader(sock, _ignore, _nothing_lost)
    except BaseException:
        sock.close()
        raise
    indexes: dict[str, int] = {}  # each interface looked up once, however many gateways and families
    try:
        for op in ops:
            progress[0] = op
            try:
                if op.action is RouteAction.FLUSH_DEFAULT:
                    await _flush_default(link, op, netns)
                else:
                    await _add_default(link, op, netns, indexes)
            except netlink.NetlinkError as exc:
                raise _failed(op, netns, ip_wording(exc)) from None
    finally:
        link.close()


def _ignore(_msg_type: int) -> None:
    return None  # the socket joins no multicast group: nothing arrives unasked


def _nothing_lost() -> None:
    return None


@dataclass(frozen=True)
class _Route:
    """A dumped route: what `_is_default` reads, and the message as the kernel wrote it."""

    family: int
    dst_len: int
    table: int
    flags: int
    raw: bytes


def _parse_route(payload: memoryview) -> _Route:
    if len(payload) < netlink.RTMSG.size:
        raise netlink.Malformed(f"route message of {len(payload)} bytes, shorter than rtmsg")
    family, dst_len, _src, _tos, table, _proto, _scope, _type, flags = netlink.RTMSG.unpack_from(payload)
    extended = netlink.attributes(payload, netlink.RTMSG.size).get(RTA_TABLE)
    if extended is not None and len(extended) == 4:
        table = struct.unpack("=I", extended)[0]
    return _Route(family, dst_len, table, flags, bytes(payload))


async def _flush_default(link: netlink.Reader, op: RouteOp, netns: str) -> None:
    """`ip -N route flush exact <default>`: every default route of the family in the main table."""
    family = _FAMILIES[op.family]
    for _ in range(MAX_FLUSH_ROUNDS):
        routes = await link.dump(netlink.RTM_GETROUTE, _parse_route, family)
        doomed = [r for r in routes if _is_default(r, family)]
        if not doomed:
            return
        for route in doomed:
            # The route as dumped, sent back as a deletion: it matches exactly that route (what `ip` does).
            try:
                await link.request(netlink.RTM_DELROUTE, 0, route.raw)
            except netlink.NetlinkError as exc:
                if exc.errno != errno.ESRCH:  # gone since the dump: what the flush wanted
                    raise
    raise _failed(
        op,
        netns,
        f"default routes kept reappearing after {MAX_FLUSH_ROUNDS} rounds of deleting them; "
        "something else in the pod's namespace is adding them",
    )


def _is_default(route: _Route, family: int) -> bool:
    return (
        route.family == family
        and route.dst_len == 0
        and route.table == RT_TABLE_MAIN
        and not route.flags & RTM_F_CLONED
    )


def _index(payload: memoryview) -> int:
    if len(payload) < netlink.IFINFOMSG.size:
        raise netlink.Malformed(f"link message of {len(payload)} bytes, shorter than ifinfomsg")
    return int(netlink.IFINFOMSG.unpack_from(payload)[2])


def _attr(kind: int, value: bytes) -> bytes:
    body = netlink.RTATTR.pack(netlink.RTATTR.size + len(value), kind) + value
    return body + b"\0" * (-len(body) % 4)


async def _add_default(link: netlink.Reader, op: RouteOp, netns: str, indexes: dict[str, int]) -> None:
    """`ip -N route add default via GW dev IF [metric M]`."""
    assert op.ifname is not None
    if op.ifname not in indexes:
        query = netlink.IFINFOMSG.pack(0, 0, 0, 0, 0) + _attr(netlink.IFLA_IFNAME, op.ifname.encode() + b"\0")
        try:
            found = await link.request(netlink.RTM_GETLINK, 0, query, _index)
        except netlink.NetlinkError as exc:
            if exc.errno != errno.ENODEV:
                raise
            raise _failed(op, netns, f'Cannot find device "{op.ifname}"') from None
        if not found:
            raise _failed(op, netns, f'Cannot find device "{op.ifname}"')
        indexes[op.ifname] = found[0]
    family = _FAMILIES[op.family]
    body = netlink.RTMSG.pack(family, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST, 0)
    body += _attr(RTA_GATEWAY, socket.inet_pton(family, str(op.gateway)))
    body += _attr(RTA_OIF, struct.pack("=I", indexes[op.ifname]))
    if op.metric is not None:
        body += _attr(RTA_PRIORITY, struct.pack("=I", op.metric))
    await link.request(netlink.RTM_NEWROUTE, netlink.NLM_F_CREATE | netlink.NLM_F_EXCL, body)


def _failed(op: RouteOp, netns: str, details: str) -> CNIError:
    return CNIError(ErrorCode.IO_FAILURE, f"{' '.join(op.argv())} failed in {netns}", details)


def ip_wording(exc: netlink.NetlinkError) -> str:
    """A kernel refusal as `ip` prints it: the extended ack's text if any, else the errno's."""
    code = int(exc.errno or 0)
    if exc.text and exc.text != os.strerror(code):
        return f"Error: {exc.text}."
    return f"RTNETLINK answers: {os.strerror(code)}"


async def socket_in(netns: str, prepare: Callable[[], object] | None = None) -> socket.socket:
    """A netlink socket in the namespace at path `netns`, opened by a thread of its own (which
    first runs `prepare`, if given: slow work kept off the event loop)."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[socket.socket] = loop.create_future()

    def deliver(result: socket.socket | BaseException) -> None:
        if opened.cancelled():  # `apply` timed out meanwhile: nobody will close it otherwise
            if isinstance(result, socket.socket):
                result.close()
        elif isinstance(result, BaseException):
            opened.set_exception(result)
        else:
            opened.set_result(result)

    def run() -> None:
        result: socket.socket | BaseException
        try:
            if prepare is not None:
                prepare()
            result = open_in(netns)
        except BaseException as exc:
            result = exc
        try:
            loop.call_soon_threadsafe(deliver, result)
        except RuntimeError:  # the loop is closed: the agent is gone
            if isinstance(result, socket.socket):
                result.close()

    # The thread ends inside the pod's namespace; it never runs anything else.
    threading.Thread(target=run, name=f"netns {netns}", daemon=True).start()
    return await opened


def open_in(netns: str) -> socket.socket:
    """An rtnetlink socket in the namespace at path `netns`; the calling thread stays in it."""
    fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(fd)
    finally:
        os.close(fd)
    return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_ROUTE)


def setns(fd: int) -> None:
    if sys.version_info >= (3, 12):
        os.setns(fd, os.CLONE_NEWNET)
        return
    result = _libc().setns(fd, CLONE_NEWNET)
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@functools.cache
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)
