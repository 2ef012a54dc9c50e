"""A reader of the libnftables JSON that `bridge.policy.rules` writes: it walks a packet through it.

Only the subset the compiler emits is understood (`ct state`, `meta iifname/oifname/l4proto`,
`ip/ip6 saddr/daddr @set`, `th dport`, `icmpv6 type`, accept/drop/jump); anything else
fails the test loudly, so a compiler change that this reader does not know cannot pass
unnoticed. The kernel is the judge of record (tests/cni); this one lets unit tests compare
the compiled rules with the reference evaluator on every case in milliseconds.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

_L4 = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}


@dataclass(frozen=True)
class Packet:
    """The first packet of a connection (conntrack state `new`) as one namespace's hook sees it."""

    interface: str
    source: ipaddress.IPv4Address | ipaddress.IPv6Address
    destination: ipaddress.IPv4Address | ipaddress.IPv6Address
    protocol: str  # TCP, UDP, SCTP or ICMP (an echo request)
    port: int | None = None
    ct_state: str = "new"


class Table:
    def __init__(self, document: dict[str, Any]) -> None:
        self.sets: dict[str, list[ipaddress.IPv4Network | ipaddress.IPv6Network]] = {}
        self.chains: dict[str, list[list[dict[str, Any]]]] = {}
        self.policies: dict[str, str] = {}
        for command in document["nftables"]:
            if "metainfo" in command:
                continue
            ((verb, body),) = command.items()
            ((kind, obj),) = body.items()
            if kind == "table":
                if verb == "delete":
                    self.sets.clear()
                    self.chains.clear()
                continue
            assert verb == "add", command
            if kind == "set":
                self.sets[obj["name"]] = [self._network(e) for e in obj.get("elem", [])]
            elif kind == "chain":
                self.chains.setdefault(obj["name"], [])
                if "hook" in obj:
                    self.policies[obj["name"]] = obj["policy"]
            elif kind == "rule":
                self.chains[obj["chain"]].append(obj["expr"])
            else:
                raise AssertionError(f"unknown command {command}")

    @staticmethod
    def _network(element: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        if isinstance(element, dict):
            prefix = element["prefix"]
            return ipaddress.ip_network(f"{prefix['addr']}/{prefix['len']}")
        return ipaddress.ip_network(element)

    def _value(self, left: dict[str, Any], packet: Packet, hook: str) -> Any:
        if "ct" in left:
            return packet.ct_state
        if "meta" in left:
            key = left["meta"]["key"]
            if key in ("iifname", "oifname"):
                assert (key == "iifname") == (hook == "input"), (key, hook)
                return packet.interface
            if key == "l4proto":
                if packet.protocol == "ICMP":
                    return "icmp" if packet.source.version == 4 else "ipv6-icmp"
                return _L4[packet.protocol]
        if "payload" in left:
            payload = left["payload"]
            if payload["protocol"] in ("ip", "ip6"):
                if (payload["protocol"] == "ip") != (packet.source.version == 4):
                    return None
                return packet.source if payload["field"] == "saddr" else packet.destination
            if payload["protocol"] == "th" and payload["field"] == "dport":
                return packet.port
            if payload["protocol"] == "icmpv6" and payload["field"] == "type":
                return "echo-request" if packet.protocol == "ICMP" and packet.source.version == 6 else None
        raise AssertionError(f"unknown expression {left}")

    def _matches(self, match: dict[str, Any], packet: Packet, hook: str) -> bool:
        value = self._value(match["left"], packet, hook)
        right = match["right"]
        if value is None:
            return False
        if isinstance(right, str) and right.startswith("@"):
            return any(value in net for net in self.sets[right[1:]])
        if isinstance(right, dict) and "range" in right:
            first, last = right["range"]
            return bool(first <= value <= last)
        if isinstance(right, dict) and "set" in right:
            return value in right["set"]
        if match["op"] == "in" and isinstance(right, list):
            return value in right
        return bool(value == right)

    def _run(self, chain: str, packet: Packet, hook: str) -> bool | None:
        for rule in self.chains[chain]:
            *matches, verdict = rule
            if not all(self._matches(m["match"], packet, hook) for m in matches):
                continue
            if "accept" in verdict:
                return True
            if "drop" in verdict:
                return False
            if "jump" in verdict:
                result = self._run(verdict["jump"]["target"], packet, hook)
                if result is not None:
                    return result
                continue
            raise AssertionError(f"unknown verdict {verdict}")
        return None

    def passes(self, hook: str, packet: Packet) -> bool:
        """Whether the table lets `packet` through hook `input` or `output`."""
        if hook not in self.chains:
            return True
        result = self._run(hook, packet, hook)
        return self.policies[hook] == "accept" if result is None else result


def passes(document: dict[str, Any] | None, hook: str, packet: Packet) -> bool:
    """`document` None: no table, everything passes."""
    return True if document is None else Table(document).passes(hook, packet)
