"""bridge.agent.netns.clusterips without the kernel: the rtnetlink messages of a pod's ClusterIP
routes, built as `ip route replace DEST dev IF src SRC proto 201` sends them and read back from a
dump, ours told from anyone else's by the protocol number. The real thing, in real namespaces:
tests/cni/test_service_cluster_ips.py.
"""

from __future__ import annotations

import socket
import struct

import pytest

from bridge.agent.netns import clusterips, netlink
from bridge.services.dnat import ROUTE_PROTOCOL, Route

NAMES = {7: "net1", 9: "net2"}


def test_a_route_read_back_from_its_own_message_is_the_same_route() -> None:
    for route, index in ((Route("10.96.0.1/32", "net1", "10.1.0.9"), 7),
                         (Route("fd00:96::1/128", "net2", "fd00:1::9"), 9),
                         (Route("10.96.0.0/24", "net1", ""), 7)):
        dumped = clusterips.parse_route(memoryview(clusterips.route_message(route, index)), NAMES)
        assert dumped is not None and dumped.route == route


def test_the_message_is_a_direct_route_of_ours_in_the_main_table() -> None:
    body = clusterips.route_message(Route("10.96.0.1/32", "net1", "10.1.0.9"), 7)
    family, dst_len, _, _, table, protocol, scope, kind, _ = netlink.RTMSG.unpack_from(body)
    assert (family, dst_len, table, protocol, scope, kind) == (
        socket.AF_INET, 32, clusterips.RT_TABLE_MAIN, ROUTE_PROTOCOL, clusterips.RT_SCOPE_LINK, clusterips.RTN_UNICAST)
    attrs = netlink.attributes(memoryview(body), netlink.RTMSG.size)
    assert bytes(attrs[clusterips.RTA_DST]) == socket.inet_aton("10.96.0.1")
    assert struct.unpack("=I", attrs[clusterips.RTA_OIF])[0] == 7
    assert bytes(attrs[clusterips.RTA_PREFSRC]) == socket.inet_aton("10.1.0.9")


def _with(body: bytes, **fields: int) -> memoryview:
    values = list(netlink.RTMSG.unpack_from(body))
    for name, value in fields.items():
        values[["family", "dst_len", "src_len", "tos", "table", "protocol", "scope", "type", "flags"].index(name)] = value
    return memoryview(netlink.RTMSG.pack(*values) + body[netlink.RTMSG.size:])


def test_routes_of_anyone_else_a_cached_clone_or_another_table_are_not_ours() -> None:
    body = clusterips.route_message(Route("10.96.0.1/32", "net1", "10.1.0.9"), 7)
    assert clusterips.parse_route(_with(body, protocol=3), NAMES) is None  # the kernel's, a plugin's (boot)
    assert clusterips.parse_route(_with(body, table=100), NAMES) is None
    assert clusterips.parse_route(_with(body, flags=clusterips.RTM_F_CLONED), NAMES) is None


def test_a_route_of_ours_without_its_destination_or_a_short_message_is_malformed() -> None:
    head = netlink.RTMSG.pack(socket.AF_INET, 32, 0, 0, clusterips.RT_TABLE_MAIN, ROUTE_PROTOCOL,
                              clusterips.RT_SCOPE_LINK, clusterips.RTN_UNICAST, 0)
    with pytest.raises(netlink.Malformed, match="without its destination or interface"):
        clusterips.parse_route(memoryview(head), NAMES)
    with pytest.raises(netlink.Malformed, match="shorter than rtmsg"):
        clusterips.parse_route(memoryview(head[:5]), NAMES)
