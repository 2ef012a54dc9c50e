"""One local container as the per-pod features' decisions see it (`Local`, from the agent's record),
and one change of its table (`Step`). Shared by the features' decisions and the reconciler that
applies them (`reconciler`), so it sits below both.

The agent's records know each local container's interfaces: the name in the pod and the network
(the NAD that attached it) and the addresses its delegate gave. A pod's status may not name them
yet (it is written after the ADD answers) or at all; the record always does, so the features
decide from the record (`local_of`, or `planned_local` while the ADD's delegates still run).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from bridge.agent.delegates.cache import Record, State
from bridge.policy.world import Address, PodInterface

UNKNOWN: Final = "unknown"
"""What is in a namespace the agent has not written to since it started: a table, or none."""
T = TypeVar("T")


@dataclass(frozen=True)
class Local:
    """One container of this node, as its record has it."""

    container_id: str
    pod: str
    """`namespace/name`."""
    netns: str
    interfaces: tuple[PodInterface, ...]
    """Its secondary interfaces: network named by its NAD's `namespace/name`, interface name,
    the addresses of the delegate's result."""


@dataclass(frozen=True)
class Step(Generic[T]):
    """Write `document` as the container's table, or remove the table (`document` None). `T` is
    what one table is made of: a policy's libnftables document (`Document`), or the Services'
    `servicetables.Tables` (table and routes)."""

    container_id: str
    pod: str
    netns: str
    document: T | None
    unenforced: tuple[str, ...] = ()


def _addresses(result: Mapping[str, Any] | None, ifname: str) -> tuple[Address, ...]:
    """The IPs of a delegate's result on the container's interface `ifname`."""
    if not isinstance(result, Mapping):
        return ()
    interfaces = result.get("interfaces")
    interfaces = interfaces if isinstance(interfaces, list) else []
    out: list[Address] = []
    for ip in result.get("ips") or ():
        if not isinstance(ip, Mapping) or not isinstance(ip.get("address"), str):
            continue
        index = ip.get("interface")
        if isinstance(index, int) and 0 <= index < len(interfaces):
            named = interfaces[index]
            if isinstance(named, Mapping) and named.get("name") != ifname:
                continue
        try:
            out.append(ipaddress.ip_interface(ip["address"]).ip)
        except ValueError:
            continue
    return tuple(out)


def local_of(record: Record) -> Local:
    """The container of `record`: its attached secondary interfaces (the default network's is not
    a policy's)."""
    interfaces = tuple(
        PodInterface(a.name, a.ifname, _addresses(a.result, a.ifname))
        for a in record.attachments
        if not a.default and a.state is State.ATTACHED
    )
    return Local(record.container_id, f"{record.pod_namespace}/{record.pod_name}", record.netns, interfaces)


def planned_local(record: Record, interfaces: Iterable[tuple[str, str]]) -> Local:
    """The container of `record` as its ADD plans it, before any delegate ran: its secondary
    interfaces as (network name, interface name), with no address yet. Its table compiles the
    same as with the addresses (`rules`: a pod's own addresses are in no set of its own), so the
    ADD can write it while the delegates run."""
    return Local(record.container_id, f"{record.pod_namespace}/{record.pod_name}", record.netns,
                 tuple(PodInterface(network, ifname, ()) for network, ifname in interfaces))


__all__ = ["UNKNOWN", "Local", "Step", "local_of", "planned_local"]
