"""The address watch's rtnetlink reader (`bridge.agent.netns.netlink`): its parsers of the kernel's
bytes, fuzzed with hypothesis (they return or raise `Malformed`, nothing else, and never
yield more than the bytes hold), and its socket on the event loop, driven through a datagram
socketpair standing in for the kernel: dumps over several datagrams, the kernel's errors, a
dump the kernel marks interrupted, events between the parts of a dump, malformed datagrams.
The same reader against the kernel, compared with pyroute2, is in
tests/cni/test_live_ip_changes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.agent.netns import netlink
from tests.unit.netlink_support import (
    IFA_ADDRESS,
    IFA_LOCAL,
    address_payload,
    attr,
    flags_attr,
    ip_attr,
    link_payload,
    message,
)

# --- the parsers, fuzzed -----------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=2048))
def test_any_bytes_are_messages_or_malformed_and_never_more_messages_than_headers_fit(data: bytes) -> None:
    count = 0
    try:
        for msg in netlink.messages(data):
            count += 1
            assert len(msg.payload) <= len(data) - netlink.HEADER.size
            for parse in (netlink.parse_address, netlink.parse_link):
                with contextlib.suppress(netlink.Malformed):
                    parse(msg.payload)
    except netlink.Malformed:
        pass
    assert count <= len(data) // netlink.HEADER.size


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512), st.integers(0, 0xFFFF))
def test_any_payload_is_an_entry_none_or_malformed(payload: bytes, flags: int) -> None:
    # An error's text (the extended ack) is read or left out, never a failure of its own.
    assert isinstance(netlink.ack_text(flags, memoryview(payload)), str)
    assert netlink.error_of(memoryview(payload)) >= 0
    for parse in (netlink.parse_address, netlink.parse_link):
        with contextlib.suppress(netlink.Malformed):
            parse(memoryview(payload))
    try:
        attrs = netlink.attributes(memoryview(payload), 0)
    except netlink.Malformed:
        return
    assert sum(len(v) for v in attrs.values()) <= len(payload)


ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
junk_attr = st.builds(attr, st.integers(9, 200), st.binary(max_size=40))


@st.composite
def address_messages(draw: st.DrawFn) -> tuple[bytes, netlink.AddressEntry]:
    """A valid RTM_NEWADDR with its attributes in any order among unknown ones, and what it says."""
    v6 = draw(st.booleans())
    index = draw(st.integers(1, 2**31 - 1))
    prefixlen = draw(st.integers(0, 128 if v6 else 32))
    small = draw(st.integers(0, 255))
    big = draw(st.none() | st.integers(0, 2**32 - 1))
    address = draw(ipv6 if v6 else ipv4)
    attrs = [ip_attr(IFA_ADDRESS, address), *draw(st.lists(junk_attr, max_size=4))]
    local = None if v6 else draw(st.none() | ipv4)
    if local is not None:
        attrs.append(ip_attr(IFA_LOCAL, local))
    if big is not None:
        attrs.append(flags_attr(big))
    attrs = draw(st.permutations(attrs))
    family = socket.AF_INET6 if v6 else socket.AF_INET
    payload = address_payload(index, prefixlen, attrs, family=family, flags=small)
    ip = str(ipaddress.ip_address(local or address))
    return message(netlink.RTM_NEWADDR, payload), netlink.AddressEntry(index, ip, prefixlen,
                                                                        small if big is None else big)


@settings(max_examples=300, deadline=None)
@given(st.lists(address_messages(), max_size=8))
def test_valid_address_messages_read_back_as_what_they_say(built: list[tuple[bytes, netlink.AddressEntry]]) -> None:
    data = b"".join(raw for raw, _ in built)
    parsed = [netlink.parse_address(m.payload) for m in netlink.messages(data)]
    assert parsed == [entry for _, entry in built]


def test_an_address_of_another_family_or_without_an_address_is_skipped_not_guessed() -> None:
    assert netlink.parse_address(memoryview(address_payload(3, 24, [ip_attr(IFA_ADDRESS, "10.0.0.1")],
                                                            family=socket.AF_PACKET))) is None
    assert netlink.parse_address(memoryview(address_payload(3, 24, [flags_attr(0)]))) is None
    # An IPv4 message whose address attribute has the length of an IPv6 one.
    assert netlink.parse_address(memoryview(address_payload(3, 24, [ip_attr(IFA_ADDRESS, "fd00::1")],
                                                            family=socket.AF_INET))) is None


def test_a_link_name_is_read_up_to_its_nul_and_a_link_without_one_is_skipped() -> None:
    assert netlink.parse_link(memoryview(link_payload(7, "net1"))) == (7, "net1")
    no_name = struct.pack("=BxHiII", 0, 1, 7, 0, 0) + attr(4, b"\x00\x05\x00\x00")
    assert netlink.parse_link(memoryview(no_name)) is None


def test_a_length_past_the_end_is_malformed_and_what_came_before_it_was_read() -> None:
    good = message(netlink.RTM_NEWLINK, link_payload(2, "eth0"))
    bad = struct.pack("=IHHII", 4096, netlink.RTM_NEWLINK, 0, 0, 0)
    read: list[netlink.Message] = []
    with pytest.raises(netlink.Malformed, match="message length 4096"):
        read.extend(netlink.messages(good + bad))
    assert [netlink.parse_link(m.payload) for m in read] == [(2, "eth0")]


# --- the reader on the event loop, against a socketpair standing in for the kernel ------------------


class Kernel:
    """The far end of the reader's socket: answers dump requests with the datagrams a test gives."""

    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.theirs.setblocking(False)
        self.events: list[int] = []
        self.losses = 0
        self.reader = netlink.Reader(self.ours, self.events.append, self._lost)

    def _lost(self) -> None:
        self.losses += 1

    async def request(self) -> tuple[int, int]:
        """The (type, seq) of the next request the reader sent."""
        data = await asyncio.get_running_loop().sock_recv(self.theirs, 4096)
        (msg,) = netlink.messages(data)
        assert msg.flags & netlink.NLM_F_DUMP == netlink.NLM_F_DUMP
        return msg.type, msg.seq

    def send(self, *datagrams: bytes) -> None:
        for datagram in datagrams:
            self.theirs.send(datagram)

    def close(self) -> None:
        self.reader.close()
        self.theirs.close()


def _entry(index: int, ip: str, seq: int, *, flags: int = netlink.NLM_F_MULTI) -> bytes:
    return message(netlink.RTM_NEWADDR, address_payload(index, 24, [ip_attr(IFA_ADDRESS, ip)]), flags=flags, seq=seq)


def _done(seq: int, code: int = 0, *, flags: int = netlink.NLM_F_MULTI) -> bytes:
    return message(netlink.NLMSG_DONE, struct.pack("=i", code), flags=flags, seq=seq)


async def test_a_dump_over_several_datagrams_with_events_between_them_ends_at_done() -> None:
    kernel = Kernel()
    try:
        dump = asyncio.create_task(kernel.reader.dump(netlink.RTM_GETADDR, netlink.parse_address))
        msg_type, seq = await kernel.request()
        assert msg_type == netlink.RTM_GETADDR
        event = message(netlink.RTM_NEWLINK, link_payload(5, "net9"))  # multicast: seq 0
        kernel.send(_entry(1, "10.0.0.1", seq) + _entry(2, "10.0.0.2", seq), event, _entry(3, "10.0.0.3", seq),
                    _done(seq))
        entries = await asyncio.wait_for(dump, 5)
        assert [(e.index, e.ip) for e in entries] == [(1, "10.0.0.1"), (2, "10.0.0.2"), (3, "10.0.0.3")]
        assert kernel.events == [netlink.RTM_NEWLINK]
        assert kernel.losses == 0
    finally:
        kernel.close()


async def test_the_kernel_s_refusal_of_a_dump_is_an_oserror_with_its_errno() -> None:
    kernel = Kernel()
    try:
        dump = asyncio.create_task(kernel.reader.dump(netlink.RTM_GETLINK, netlink.parse_link))
        _, seq = await kernel.request()
        kernel.send(message(netlink.NLMSG_ERROR, struct.pack("=i", -errno.EPERM) + b"\0" * 16, seq=seq))
        with pytest.raises(OSError) as refused:
            await asyncio.wait_for(dump, 5)
        assert refused.value.errno == errno.EPERM
    finally:
        kernel.close()


async def test_a_dump_the_kernel_marks_interrupted_is_lost_and_the_next_one_is_read_whole() -> None:
    kernel = Kernel()
    try:
        dump = asyncio.create_task(kernel.reader.dump(netlink.RTM_GETADDR, netlink.parse_address))
        _, seq = await kernel.request()
        kernel.send(_entry(1, "10.0.0.1", seq),
                    _entry(2, "10.0.0.2", seq, flags=netlink.NLM_F_MULTI | netlink.NLM_F_DUMP_INTR),
                    _done(seq, flags=netlink.NLM_F_MULTI | netlink.NLM_F_DUMP_INTR))
        with pytest.raises(netlink.Lost, match="interrupted"):
            await asyncio.wait_for(dump, 5)
        again = asyncio.create_task(kernel.reader.dump(netlink.RTM_GETADDR, netlink.parse_address))
        _, seq2 = await kernel.request()
        assert seq2 != seq
        kernel.send(_entry(1, "10.0.0.1", seq), _entry(2, "10.0.0.9", seq2), _done(seq2))  # a stale part: ignored
        assert [e.ip for e in await asyncio.wait_for(again, 5)] == ["10.0.0.9"]
    finally:
        kernel.close()


async def test_a_malformed_datagram_fails_the_dump_as_lost_and_says_messages_were_lost() -> None:
    kernel = Kernel()
    try:
        dump = asyncio.create_task(kernel.reader.dump(netlink.RTM_GETADDR, netlink.parse_address))
        _, seq = await kernel.request()
        kernel.send(_entry(1, "10.0.0.1", seq)[:-3])
        with pytest.raises(netlink.Lost, match="malformed"):
            await asyncio.wait_for(dump, 5)
        assert kernel.losses == 1
        # The socket keeps working: an event after it is heard.
        kernel.send(message(netlink.RTM_DELADDR, address_payload(1, 24, [ip_attr(IFA_ADDRESS, "10.0.0.1")])))
        for _ in range(100):
            if kernel.events:
                break
            await asyncio.sleep(0.01)
        assert kernel.events == [netlink.RTM_DELADDR]
    finally:
        kernel.close()


async def test_a_closed_reader_fails_its_pending_dump_instead_of_hanging() -> None:
    kernel = Kernel()
    dump = asyncio.create_task(kernel.reader.dump(netlink.RTM_GETADDR, netlink.parse_address))
    await kernel.request()
    kernel.close()
    with pytest.raises(OSError):
        await asyncio.wait_for(dump, 5)
