"""Builders of rtnetlink messages as the kernel writes them (linux/netlink.h, rtnetlink.h,
if_addr.h, if_link.h), for tests of `bridge.agent.netns.netlink`'s parsers."""

from __future__ import annotations

import ipaddress
import socket
import struct

IFA_ADDRESS, IFA_LOCAL, IFA_FLAGS = 1, 2, 8
IFLA_IFNAME = 3


def attr(kind: int, value: bytes) -> bytes:
    """One rtattr, padded to 4 bytes."""
    body = struct.pack("=HH", 4 + len(value), kind) + value
    return body + b"\0" * (-len(body) % 4)


def ip_attr(kind: int, ip: str) -> bytes:
    return attr(kind, ipaddress.ip_address(ip).packed)


def flags_attr(flags: int) -> bytes:
    return attr(IFA_FLAGS, struct.pack("=I", flags))


def message(msg_type: int, payload: bytes, *, flags: int = 0, seq: int = 0) -> bytes:
    """One nlmsghdr and its payload, padded to 4 bytes."""
    body = struct.pack("=IHHII", 16 + len(payload), msg_type, flags, seq, 0) + payload
    return body + b"\0" * (-len(body) % 4)


def address_payload(index: int, prefixlen: int, attrs: list[bytes], *, family: int = 0, flags: int = 0) -> bytes:
    """An ifaddrmsg and its attributes; the family is the first address attribute's unless given."""
    if not family:
        family = socket.AF_INET
        if attrs and struct.unpack_from("=H", attrs[0])[0] == 4 + 16:
            family = socket.AF_INET6
    return struct.pack("=BBBBI", family, prefixlen, flags, 0, index) + b"".join(attrs)


def link_payload(index: int, name: str) -> bytes:
    return struct.pack("=BxHiII", 0, 1, index, 0, 0) + attr(IFLA_IFNAME, name.encode() + b"\0")
