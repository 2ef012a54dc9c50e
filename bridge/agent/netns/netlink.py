"""rtnetlink over a stdlib `AF_NETLINK` socket: what the address watch and the route moves need.

The agent follows each pod's addresses on a netlink socket opened in the pod's
namespace (`bridge.agent.pods.addresswatch`) and moves default routes over another
(`bridge.agent.netns.routes`). pyroute2 did both for ~6.6 MB of imports and ~25 kB of
Python objects per watched pod (docs/benchmarks.md); what they need is a few
message shapes, packed and read with `struct` (linux/netlink.h, linux/rtnetlink.h,
linux/if_addr.h, linux/if_link.h):

- `nlmsghdr` (length, type, flags, sequence, port), then per type:
- RTM_NEWADDR / RTM_DELADDR: `ifaddrmsg` (family, prefix length, flags, scope,
  interface index) and the attributes IFA_ADDRESS, IFA_LOCAL, IFA_FLAGS;
- RTM_NEWLINK / RTM_DELLINK: `ifinfomsg` (family, type, index, flags, change) and
  IFLA_IFNAME;
- RTM_NEWROUTE / RTM_DELROUTE: `rtmsg` (`bridge.agent.netns.routes` reads and builds them);
- NLMSG_DONE ends a dump (its payload, when there is one, the dump's error),
  NLMSG_ERROR answers a request (a negative errno, or 0 for an acknowledgement, and
  with NETLINK_EXT_ACK the kernel's own words: `ack_text`).

The parsers are pure and take bytes the kernel wrote; they are still bounded and
never trust a length: a message or attribute whose length does not fit what is left
raises `Malformed` (a `ValueError`), and everything else is skipped, not guessed at.
`Reader` is the I/O: one socket read on the asyncio event loop (`loop.add_reader`),
its multicast events handed to a callback, its dumps awaited one at a time.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import itertools
import os
import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar, cast

NETLINK_ROUTE = 0
SOL_NETLINK = 270

# linux/netlink.h
NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSG_OVERRUN = 4
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
#: On an NLMSG_ERROR: the request's payload is not echoed; extended-ack TLVs follow.
NLM_F_CAPPED = 0x100
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1
#: Socket option: errors carry the kernel's message (NLMSGERR_ATTR_MSG).
NETLINK_EXT_ACK = 11
# linux/rtnetlink.h
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18
RTM_NEWADDR = 20
RTM_DELADDR = 21
RTM_GETADDR = 22
RTM_NEWROUTE = 24
RTM_DELROUTE = 25
RTM_GETROUTE = 26
#: Multicast groups as a bind(2) bitmask (the legacy RTMGRP_* values).
RTMGRP_LINK = 0x1
RTMGRP_IPV4_IFADDR = 0x10
RTMGRP_IPV6_IFADDR = 0x100
# linux/if_addr.h
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFA_FLAGS = 8
# linux/if_link.h
IFLA_IFNAME = 3

HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
RTATTR = struct.Struct("=HH")  # len, type
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
RTGENMSG = struct.Struct("=Bxxx")  # family (a dump request's body, padded to 4)
ERRNO = struct.Struct("=i")

#: Bytes read at once: a netlink datagram is at most a few pages (NLMSG_GOODSIZE, or the
#: dump's larger skb); a longer one is reported as truncated (MSG_TRUNC) and handled as lost.
RECV_BYTES = 65536
#: Datagrams read per wake-up of the event loop, so a storm in one pod cannot starve the rest.
READS_PER_WAKEUP = 64
#: Seconds a dump may take before it is given up (the kernel answers in microseconds).
DUMP_TIMEOUT = 10.0
#: Entries one dump may return: a namespace with more addresses than this is cut (the status
#: keeps at most 64 per interface anyway, `addresswatch.Settings`), so memory stays bounded.
MAX_DUMP_ENTRIES = 100_000

_ADDRESS_BYTES = {socket.AF_INET: 4, socket.AF_INET6: 16}


class Malformed(ValueError):
    """Bytes that are not the netlink messages they claim to be."""


class NetlinkError(OSError):
    """The kernel refused a request: its errno, and its own words (the extended ack) when it gave any."""

    def __init__(self, code: int, text: str = "") -> None:
        super().__init__(code, text or os.strerror(code))
        self.text = text


class Lost(Exception):
    """Messages were lost (ENOBUFS: the socket's buffer overran; a truncated datagram; a dump the
    kernel marked inconsistent): what was read is incomplete, dump again."""


@dataclass(frozen=True)
class Message:
    type: int
    flags: int
    seq: int
    payload: memoryview


def _align(n: int) -> int:
    return (n + 3) & ~3


def messages(data: bytes | bytearray | memoryview) -> Iterator[Message]:
    """The netlink messages of one datagram, in order. Raises `Malformed` at the first length
    that does not fit (what came before it was yielded already)."""
    view = memoryview(data)
    offset, end = 0, len(view)
    while offset < end:
        if end - offset < HEADER.size:
            raise Malformed(f"{end - offset} bytes left at offset {offset}: too short for a netlink header")
        length, msg_type, flags, seq, _port = HEADER.unpack_from(view, offset)
        if length < HEADER.size or length > end - offset:
            raise Malformed(f"message length {length} at offset {offset}: {end - offset} bytes left")
        yield Message(msg_type, flags, seq, view[offset + HEADER.size : offset + length])
        offset += _align(length)


def attributes(data: memoryview, offset: int) -> dict[int, memoryview]:
    """The rtattrs of a payload from `offset`, by type (the first of a type kept; nested and
    flag bits of the type masked off). Raises `Malformed` at a length that does not fit."""
    out: dict[int, memoryview] = {}
    end = len(data)
    while end - offset >= RTATTR.size:
        length, kind = RTATTR.unpack_from(data, offset)
        if length < RTATTR.size or length > end - offset:
            raise Malformed(f"attribute length {length} at offset {offset}: {end - offset} bytes left")
        out.setdefault(kind & 0x3FFF, data[offset + RTATTR.size : offset + length])
        offset += _align(length)
    return out


@dataclass(frozen=True)
class AddressEntry:
    """One address as RTM_NEWADDR reports it."""

    index: int
    ip: str
    prefixlen: int
    flags: int
    """IFA_F_* flags: the 32-bit IFA_FLAGS attribute when present, else ifaddrmsg's 8 bits."""


def parse_address(payload: memoryview) -> AddressEntry | None:
    """An RTM_NEWADDR / RTM_DELADDR payload; None for a family other than IPv4 and IPv6 or a
    message without an address. Raises `Malformed`."""
    if len(payload) < IFADDRMSG.size:
        raise Malformed(f"address message of {len(payload)} bytes, shorter than ifaddrmsg")
    family, prefixlen, flags, _scope, index = IFADDRMSG.unpack_from(payload)
    size = _ADDRESS_BYTES.get(family)
    if size is None:
        return None
    attrs = attributes(payload, IFADDRMSG.size)
    # IPv4's IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer's on
    # point-to-point links); IPv6 has IFA_ADDRESS only.
    raw = attrs.get(IFA_LOCAL) if family == socket.AF_INET else None
    if raw is None or len(raw) != size:
        raw = attrs.get(IFA_ADDRESS)
    if raw is None or len(raw) != size:
        return None
    extended = attrs.get(IFA_FLAGS)
    if extended is not None and len(extended) == 4:
        flags = struct.unpack("=I", extended)[0]
    # ipaddress's spelling, the one the status's IPs are compared in (`addresswatch`); it differs
    # from inet_ntop(3)'s for IPv4-mapped IPv6 addresses.
    return AddressEntry(index, str(ipaddress.ip_address(bytes(raw))), prefixlen, flags)


def parse_link(payload: memoryview) -> tuple[int, str] | None:
    """An RTM_NEWLINK / RTM_DELLINK payload -> (interface index, name); None without a name.
    Raises `Malformed`."""
    if len(payload) < IFINFOMSG.size:
        raise Malformed(f"link message of {len(payload)} bytes, shorter than ifinfomsg")
    index = IFINFOMSG.unpack_from(payload)[2]
    raw = attributes(payload, IFINFOMSG.size).get(IFLA_IFNAME)
    if raw is None:
        return None
    name = bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")
    return (index, name) if name else None


def _dump_body(msg_type: int, family: int) -> bytes:
    """The body of a dump request: the family, in the header the kernel reads for that type."""
    if msg_type == RTM_GETLINK:
        return IFINFOMSG.pack(family, 0, 0, 0, 0)
    if msg_type == RTM_GETROUTE:
        return RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
    return RTGENMSG.pack(family)


def dump_request(msg_type: int, seq: int, family: int = socket.AF_UNSPEC) -> bytes:
    """A dump of every address (RTM_GETADDR), link (RTM_GETLINK) or route (RTM_GETROUTE)."""
    body = _dump_body(msg_type, family)
    return HEADER.pack(HEADER.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def _nothing(_payload: memoryview) -> None:
    return None


def error_of(payload: memoryview) -> int:
    """The errno an NLMSG_ERROR or NLMSG_DONE payload carries (0: none)."""
    if len(payload) < ERRNO.size:
        return 0
    return -min(0, int(ERRNO.unpack_from(payload)[0]))


def ack_text(flags: int, payload: memoryview) -> str:
    """The kernel's message in an NLMSG_ERROR (the extended ack's NLMSGERR_ATTR_MSG), or ""."""
    if not flags & NLM_F_ACK_TLVS or len(payload) < ERRNO.size + HEADER.size:
        return ""
    offset = ERRNO.size + HEADER.size
    if not flags & NLM_F_CAPPED:  # the request's own payload is echoed before the TLVs
        offset = ERRNO.size + _align(HEADER.unpack_from(payload, ERRNO.size)[0])
    if offset > len(payload):
        return ""
    try:
        raw = attributes(payload, offset).get(NLMSGERR_ATTR_MSG)
    except Malformed:
        return ""
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace") if raw is not None else ""


# --- the socket on the event loop ------------------------------------------------------------

T = TypeVar("T")
_seqs = itertools.count(1)
#: One receive buffer for every socket: they are all read on the event loop's thread, one
#: datagram at a time, and parsed before the next read.
_buffer = bytearray(RECV_BYTES)


@dataclass
class _Dump:
    seq: int
    parse: Callable[[memoryview], object | None]
    done: asyncio.Future[list[object]]
    entries: list[object]


class Reader:
    """One rtnetlink socket, read on the running event loop. Multicast messages (events) go to
    `on_event(type)`; `on_lost()` is called when messages were lost (the socket's buffer
    overran, ENOBUFS): a change may have been missed, look at everything again.

    Slotted and lock-free (one dump at a time is the caller's rule): one per watched pod."""

    __slots__ = ("_dump", "_fd", "_loop", "_on_event", "_on_lost", "_sock")

    def __init__(
        self, sock: socket.socket, on_event: Callable[[int], None], on_lost: Callable[[], None]
    ) -> None:
        self._sock = sock
        self._on_event = on_event
        self._on_lost = on_lost
        self._dump: _Dump | None = None
        self._loop = asyncio.get_running_loop()
        sock.setblocking(False)
        self._fd = sock.fileno()
        self._loop.add_reader(self._fd, self._readable)

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            self._fd = -1
        self._sock.close()
        self._fail(OSError(errno.EBADF, "the netlink socket was closed"))

    def _fail(self, exc: BaseException) -> None:
        dump, self._dump = self._dump, None
        if dump is not None and not dump.done.done():
            dump.done.set_exception(exc)

    def _readable(self) -> None:
        for _ in range(READS_PER_WAKEUP):
            try:
                n = self._sock.recv_into(_buffer, RECV_BYTES, socket.MSG_TRUNC)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self._lost()
                    continue
                self._fail(exc)
                self._on_lost()
                return
            if n > RECV_BYTES:  # a datagram longer than the buffer: its tail is gone
                self._lost()
                continue
            self._handle(memoryview(_buffer)[:n])

    def _lost(self) -> None:
        self._fail(Lost("netlink messages were lost (the socket's buffer overran)"))
        self._on_lost()

    def _handle(self, data: memoryview) -> None:
        try:
            for msg in messages(data):
                dump = self._dump
                if dump is not None and msg.seq == dump.seq:
                    self._dump_message(dump, msg)
                elif msg.seq == 0 and msg.type not in (NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN):
                    self._on_event(msg.type)
        except Malformed as exc:
            self._fail(Lost(f"a malformed netlink message: {exc}"))
            self._on_lost()

    def _dump_message(self, dump: _Dump, msg: Message) -> None:
        if msg.type == NLMSG_ERROR or msg.type == NLMSG_DONE:
            code = error_of(msg.payload)
            self._dump = None
            if dump.done.done():
                return
            if code:
                text = ack_text(msg.flags, msg.payload) if msg.type == NLMSG_ERROR else ""
                dump.done.set_exception(NetlinkError(code, text))
            elif msg.flags & NLM_F_DUMP_INTR:
                dump.done.set_exception(Lost("the dump was interrupted by a change"))
            else:
                dump.done.set_result(dump.entries)
            return
        if msg.flags & NLM_F_DUMP_INTR:
            # Entries read so far may be inconsistent; the kernel ends the dump with NLMSG_DONE.
            dump.entries.clear()
            dump.parse = _interrupted
        if len(dump.entries) < MAX_DUMP_ENTRIES:
            entry = dump.parse(msg.payload)
            if entry is not None:
                dump.entries.append(entry)

    async def dump(self, msg_type: int, parse: Callable[[memoryview], T | None], family: int = 0) -> list[T]:
        """Every entry of a dump (RTM_GETADDR, RTM_GETLINK, RTM_GETROUTE), each parsed by `parse` as
        it arrives (what it returns None for is skipped). Raises `Lost` when messages were lost (dump
        again), `Malformed` for a message `parse` refused, `NetlinkError` for the kernel's refusal,
        OSError for a timeout. One exchange at a time: RuntimeError while another is under way."""
        return await self._exchange(msg_type, NLM_F_DUMP, _dump_body(msg_type, family), parse)

    async def request(
        self, msg_type: int, flags: int, body: bytes, parse: Callable[[memoryview], T | None] = _nothing
    ) -> list[T]:
        """Sends one request (NLM_F_REQUEST | NLM_F_ACK | `flags`) and returns its answers, each
        parsed by `parse`, once the kernel acknowledged it. Raises as `dump`."""
        return await self._exchange(msg_type, NLM_F_ACK | flags, body, parse)

    async def _exchange(
        self, msg_type: int, flags: int, body: bytes, parse: Callable[[memoryview], T | None]
    ) -> list[T]:
        if self._dump is not None:
            raise RuntimeError("a netlink dump is already under way on this socket")
        seq = next(_seqs) & 0xFFFFFFFF or next(_seqs)
        done: asyncio.Future[list[object]] = self._loop.create_future()
        self._dump = _Dump(seq, parse, done, [])
        try:
            head = HEADER.pack(HEADER.size + len(body), msg_type, NLM_F_REQUEST | flags, seq, 0)
            self._sock.send(head + body)
            async with asyncio.timeout(DUMP_TIMEOUT):
                entries = await done
        except TimeoutError:
            raise OSError(errno.ETIMEDOUT, f"netlink: no answer in {DUMP_TIMEOUT:.0f} s") from None
        finally:
            if self._dump is not None and self._dump.seq == seq:
                self._dump = None
        return cast(list[T], entries)  # each entry is what `parse` returned


def _interrupted(_payload: memoryview) -> None:
    return None


__all__ = [
    "AddressEntry",
    "Lost",
    "Malformed",
    "Message",
    "NetlinkError",
    "Reader",
    "ack_text",
    "attributes",
    "dump_request",
    "error_of",
    "messages",
    "parse_address",
    "parse_link",
]
