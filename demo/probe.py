"""ICMP echo ("ping") from inside a network namespace, standard library only.

The demo proves connectivity between its pods with
`ip netns exec POD python -m demo.probe ADDRESS`, so it does not depend on
iputils being installed. It sends IPv4 or IPv6 echo requests on a raw socket
(root, as `ip netns exec` already needs) and exits 0 on the first matching
reply, 1 when none came in time, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import select
import socket
import struct
import sys
import time

ECHO_REQUEST_V4, ECHO_REPLY_V4 = 8, 0
ECHO_REQUEST_V6, ECHO_REPLY_V6 = 128, 129


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return int(~total & 0xFFFF)


def echo_request(ident: int, seq: int, payload: bytes, *, v6: bool) -> bytes:
    kind = ECHO_REQUEST_V6 if v6 else ECHO_REQUEST_V4
    header = struct.pack("!BBHHH", kind, 0, 0, ident, seq)
    if v6:
        return header + payload  # the kernel fills in the ICMPv6 checksum (pseudo-header)
    return struct.pack("!BBHHH", kind, 0, checksum(header + payload), ident, seq) + payload


def ping(address: str, *, count: int = 3, timeout: float = 1.0) -> bool:
    """True when `address` answers one of `count` echo requests within `timeout` seconds each."""
    ip = ipaddress.ip_address(address)
    v6 = ip.version == 6
    family, proto = (socket.AF_INET6, socket.IPPROTO_ICMPV6) if v6 else (socket.AF_INET, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    payload = b"podnetwork-demo"
    with socket.socket(family, socket.SOCK_RAW, proto) as sock:
        for seq in range(1, count + 1):
            sock.sendto(echo_request(ident, seq, payload, v6=v6), (str(ip), 0))
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select([sock], [], [], left)
                if not ready:
                    break
                packet, peer = sock.recvfrom(2048)
                # IPv4 raw sockets hand over the IP header too; skip it.
                icmp = packet if v6 else packet[(packet[0] & 0x0F) * 4 :]
                if len(icmp) < 8 or ipaddress.ip_address(peer[0]) != ip:
                    continue
                kind, _, _, rid, rseq = struct.unpack("!BBHHH", icmp[:8])
                if kind == (ECHO_REPLY_V6 if v6 else ECHO_REPLY_V4) and rid == ident and rseq == seq:
                    return True
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.probe", description=__doc__.splitlines()[0])
    parser.add_argument("address", help="IPv4 or IPv6 address to ping")
    parser.add_argument("--count", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1.0, help="seconds to wait for each reply")
    args = parser.parse_args(argv)
    try:
        ok = ping(args.address, count=args.count, timeout=args.timeout)
    except ValueError as exc:
        print(f"probe: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"probe: cannot send ICMP echo: {exc}", file=sys.stderr)
        return 1
    print(f"{args.address}: {'reply' if ok else 'no reply'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
