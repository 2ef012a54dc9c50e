"""Live IP changes (KEP Story 9, Req 25): the addresses of the interfaces the agent
attached, followed into the pod's network-status.

An address added to or removed from an attached interface inside the pod (IPv6
SLAAC, DHCP run by the workload, `ip addr add` in the pod) changes the `ips` of
that interface's entry in `k8s.v1.cni.cncf.io/network-status` (NPWG 5.3.3); the
bridge then maps the status to the KEP pod IPs (`bridge.translate.podips`).

Decisions are pure and live at the top of this module:

- `updated_status`: the last status written, plus the addresses seen per
  interface, gives the new status. Link-local IPv6 (fe80::/10) is left out: every
  IPv6 interface has one, it reaches only its own link, CNI results never
  report it, and `podips` would otherwise take it as the PodNetwork's IPv6 pod
  IP (the KEP's pod IPs are the addresses other pods reach it on). IPv4
  link-local (169.254/16) is kept: a plugin only has one when its IPAM chose it.
  An address whose duplicate detection is still running (IFA_F_TENTATIVE) is
  not added until it finishes (the kernel then reports it again); an address
  whose detection failed (IFA_F_DADFAILED) is not a pod IP. An entry whose
  interface is not in the namespace keeps the IPs its CNI result gave.
- `cap_status`: what is written is bounded, at most `max_ips_per_interface`
  IPs per entry and `max_status_bytes` of network-status in all (a pod can add
  thousands of addresses, and Kubernetes allows 256 KiB for all of a pod's
  annotations together: over it, every write is refused). The first IPs are kept
  (the plugin's first); the cut is logged and reported once in a Warning Event
  on the pod (`cap_message`). Each change is logged as a summary
  (`change_summary`: counts and the first few addresses), never the whole lists.
- `flush_at`: when the next look at the namespace (and possibly a write) is
  due. A burst of changes is one write: the watch waits for `quiet` seconds
  without a change, at most `max_delay` after the first unseen one, and never
  sooner than `min_interval` after the previous look. With the defaults
  (`Settings`: 0.5 s, 2 s, 2 s) one pod's status is written at most once every
  2 s, whatever happens in it. A write the API refused is retried after 2 s,
  doubling to at most `retry_max` (60 s), until it passes or the next change.

The I/O (`AddressWatch`) is one netlink socket per watched pod, in the pod's
network namespace and subscribed to the link and address groups (RTMGRP_LINK,
RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR). A socket stays in the namespace it was
created in, so it is opened once, by a short-lived thread that enters the namespace
(`routes.socket_in`), and then read on the agent's event loop (`loop.add_reader`)
by `bridge.agent.netns.netlink`, a stdlib reader (no pyroute2): one file descriptor per
pod, no thread and no task reading per pod, and no child process. Events only mark
the pod as changed; the flush dumps the namespace's addresses on the same socket
and decides from that, so a lost or reordered event cannot leave the status wrong.
Lost events (ENOBUFS: a storm overran the socket's buffer) and a dump the kernel
marks interrupted mark the pod changed too, so it is dumped again. The socket also
hears link changes: interface names are dumped on the first look and again after an
interface came, went or was renamed (a link dump is ~10 times the bytes of an
address dump). docs/benchmarks.md "agent-addresswatch" has the measured cost per pod
(~4-6 kB of RSS).

Which pods are watched is the agent's cache: a pod is watched from the end of
its ADD to the start of its DEL, and when the agent starts, every complete
record is watched again (opening at most `OPEN_CONCURRENCY` namespaces at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.agent.delegates.cache import Record
from bridge.agent.netns import netlink, routes
from bridge.agent.node.settings import AddressWatchSettings as Settings

log = logging.getLogger(__name__)

#: Kernel address flags (linux/if_addr.h) the decision reads.
IFA_F_DADFAILED = 0x08
IFA_F_TENTATIVE = 0x40
#: Looks in a row whose dumps lost messages (a storm overran the socket) before the look is
#: given up; the loss itself marked the pod changed, so the next look comes after the debounce.
DUMP_ATTEMPTS = 3
#: What each pod's socket hears: links, IPv4 and IPv6 addresses.
GROUPS = netlink.RTMGRP_LINK | netlink.RTMGRP_IPV4_IFADDR | netlink.RTMGRP_IPV6_IFADDR
#: Namespaces entered at once when the agent starts and watches every recorded pod again:
#: each open is a thread that lives for the setns(2) and socket(2) calls only.
OPEN_CONCURRENCY = 8
#: Seconds a stopped watch is given to end (a DEL waits this long at most for it).
STOP_SECONDS = 5.0

_LINK_LOCAL_V6 = ipaddress.ip_network("fe80::/10")


@dataclass(frozen=True)
class Address:
    """One address the kernel reports on an interface."""

    ip: str
    """The address, without its prefix length."""
    prefixlen: int
    flags: int = 0
    """IFA_F_* flags (the 32-bit IFA_FLAGS attribute when present)."""

    @property
    def text(self) -> str:
        """As network-status writes IPs: with their prefix length (NPWG 5.4's examples)."""
        return f"{self.ip}/{self.prefixlen}"


# --- the decisions (pure) ------------------------------------------------------------------


def _key(text: Any) -> str | None:
    """An IP of the status (which may carry a prefix length) as a comparable address."""
    if not isinstance(text, str):
        return None
    try:
        return str(ipaddress.ip_interface(text).ip)
    except ValueError:
        return None


def is_pod_ip(address: Address) -> bool:
    """Whether an address on an attached interface may be reported as one of the pod's IPs."""
    if address.flags & IFA_F_DADFAILED:
        return False
    try:
        ip = ipaddress.ip_address(address.ip)
    except ValueError:
        return False
    return not (ip.version == 6 and ip in _LINK_LOCAL_V6)


def interface_ips(old: Sequence[Any], observed: Sequence[Address]) -> list[str]:
    """The `ips` of one entry: the old ones still present, in their order and spelling, then
    the new ones in the kernel's order. A tentative address is kept if already listed, not added."""
    usable = [a for a in observed if is_pod_ip(a)]
    present = {a.ip for a in usable}
    kept: list[str] = []
    seen: set[str] = set()
    for text in old:
        key = _key(text)
        if key is not None and key in present and key not in seen:
            kept.append(str(text))
            seen.add(key)
    for address in usable:
        if address.ip in seen or address.flags & IFA_F_TENTATIVE:
            continue
        kept.append(address.text)
        seen.add(address.ip)
    return kept


def updated_status(
    status: Sequence[Mapping[str, Any]], observed: Mapping[str, Sequence[Address]]
) -> list[dict[str, Any]]:
    """The network-status after a look at the pod's namespace.

    `status` is the last status written; `observed` maps each interface present in the
    namespace to its addresses. Each entry whose `interface` is present gets the
    interface's pod IPs as `ips` (NPWG 5.3.3), without the key when there are none
    (`ips` is optional, 5.3.3); every other key and entry is unchanged.
    """
    out: list[dict[str, Any]] = []
    for entry in status:
        new = dict(entry)
        interface = entry.get("interface")
        if isinstance(interface, str) and interface in observed:
            ips = interface_ips(entry.get("ips") or [], observed[interface])
            if ips:
                new["ips"] = ips
            else:
                new.pop("ips", None)
        out.append(new)
    return out


def _label(entry: Mapping[str, Any], index: int) -> str:
    interface = entry.get("interface")
    if isinstance(interface, str) and interface:
        return interface
    return f"entry {index} ({entry.get('name')})"


def cap_status(
    status: Sequence[Mapping[str, Any]], settings: Settings
) -> tuple[list[dict[str, Any]], dict[str, tuple[int, int]]]:
    """The status as written: at most `max_ips_per_interface` IPs per entry, fewer while its JSON
    is over `max_status_bytes` (halving the per-entry bound, down to one IP each: the entries'
    other keys are the plugins' and stay). Returns it and, per entry cut, (IPs kept, IPs seen)."""
    limit = settings.max_ips_per_interface
    while True:
        out: list[dict[str, Any]] = []
        cut: dict[str, tuple[int, int]] = {}
        for i, entry in enumerate(status):
            new = dict(entry)
            ips = entry.get("ips")
            if isinstance(ips, list) and len(ips) > limit:
                new["ips"] = ips[:limit]
                cut[_label(entry, i)] = (limit, len(ips))
            out.append(new)
        if limit <= 1 or len(json.dumps(out)) <= settings.max_status_bytes:
            return out, cut
        limit = max(1, limit // 2)


def cap_message(cut: Mapping[str, tuple[int, int]], settings: Settings) -> str:
    """What a Warning Event on the pod says when `cap_status` cut its addresses."""
    parts = [f"{kept} of {seen} addresses of {label}" for label, (kept, seen) in sorted(cut.items())]
    return (
        f"network-status lists only {', '.join(parts)}: the agent writes at most "
        f"{settings.max_ips_per_interface} per interface and {settings.max_status_bytes} bytes of "
        "network-status (Kubernetes allows 256 KiB for all of a pod's annotations); the other addresses "
        "are on the interface but not reported, nor in the pod's per-network pod IPs (docs/agent.md "
        '"Live IP changes")'
    )


def change_summary(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], *, shown: int = 3
) -> str:
    """A log line's worth of what changed in the entries' IPs: per entry that changed, the counts
    and the first few addresses added and removed (a pod may hold thousands)."""

    def few(ips: list[str]) -> str:
        more = f", ... ({len(ips) - shown} more)" if len(ips) > shown else ""
        return ", ".join(ips[:shown]) + more

    parts: list[str] = []
    for i, entry in enumerate(new):
        before = [str(ip) for ip in ((old[i].get("ips") if i < len(old) else None) or [])]
        after = [str(ip) for ip in (entry.get("ips") or [])]
        if before == after:
            continue
        had, has = set(before), set(after)
        added = [ip for ip in after if ip not in had]
        removed = [ip for ip in before if ip not in has]
        text = f"{_label(entry, i)}: {len(before)} -> {len(after)} IPs"
        if added:
            text += f", added {few(added)}"
        if removed:
            text += f", removed {few(removed)}"
        parts.append(text)
    return "; ".join(parts) or "no IP changed"


def flush_at(
    first_change: float, last_change: float, previous_look: float | None, settings: Settings
) -> float:
    """When the pod's namespace is next looked at, given when the first and the latest
    change not yet looked at happened and when it was last looked at (None: never)."""
    due = min(last_change + settings.quiet, first_change + settings.max_delay)
    if previous_look is not None:
        due = max(due, previous_look + settings.min_interval)
    return due


def retry_delay(failures: int, settings: Settings) -> float:
    """Seconds before retrying a write after `failures` (>= 1) failed writes in a row."""
    return float(min(settings.retry_max, max(settings.min_interval, 1.0) * 2 ** (failures - 1)))


# --- reading the kernel's messages ---------------------------------------------------------


def link_names(links: Sequence[tuple[int, str]]) -> dict[int, str]:
    """(index, name) of the links of one namespace (`netlink.parse_link`) -> index -> name."""
    return dict(links)


def observed_addresses(
    names: Mapping[int, str], addresses: Sequence[netlink.AddressEntry]
) -> dict[str, list[Address]]:
    """The addresses of one namespace (`netlink.parse_address`) -> interface name -> its
    addresses (every interface of `names`, with none when it has none)."""
    out: dict[str, list[Address]] = {name: [] for name in names.values()}
    for entry in addresses:
        name = names.get(entry.index)
        if name is not None:
            out[name].append(Address(entry.ip, entry.prefixlen, entry.flags))
    return out


# --- the watch (I/O) -----------------------------------------------------------------------

Publish = Callable[[Record, list[dict[str, Any]]], Awaitable[bool]]
"""Writes a status for a record's pod; False when the write did not happen (the agent logged why)."""
Report = Callable[[Record, str, str], None]
"""Tells the pod's users something (reason, message): a Warning Event; never blocks."""
REASON_CAPPED = "NetworkStatusCapped"


class _Wake:
    """asyncio.Event's set/clear/wait for one waiter, without its deque of waiters (~0.7 kB per
    watched pod, docs/benchmarks.md)."""

    __slots__ = ("_is_set", "_waiter")

    def __init__(self) -> None:
        self._is_set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._is_set = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def clear(self) -> None:
        self._is_set = False

    async def wait(self) -> None:
        if self._is_set:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class _PodWatch:
    """One pod's socket, its pending change and its last status (slotted: one per watched pod)."""

    __slots__ = ("_capped", "_clock", "_failures", "_first", "_last", "_looked", "_names", "_opening",
                 "_publish", "_report", "_settings", "_wake", "looks", "record", "status", "stopped", "task")

    def __init__(
        self,
        record: Record,
        status: list[dict[str, Any]],
        publish: Publish,
        settings: Settings,
        opening: asyncio.Semaphore,
        clock: Callable[[], float],
        report: Report | None = None,
    ) -> None:
        self.record = record
        self.status = status
        self._publish = publish
        self._report = report
        self._capped = False
        """Whether the last look cut addresses (reported once, until it no longer does)."""
        self._settings = settings
        self._opening = opening
        self._clock = clock
        self._first: float | None = None
        self._last: float = 0.0
        self._looked: float | None = None
        self._wake = _Wake()
        self._names: dict[int, str] | None = None
        """Interface index -> name in the pod's namespace, as last dumped."""
        self._failures = 0
        """Status writes refused in a row; the next retry waits `retry_delay` after the last look."""
        self.looks = 0
        """Flushes done (dumps of the namespace), for tests and the demo."""
        self.stopped = False
        """Set by `stop`: from then on nothing is written, whatever the task is doing."""
        self.task = asyncio.create_task(self._run(), name=f"address-watch {record.container_id[:12]}")

    def stop(self) -> None:
        """Ends the watch. It writes nothing from now on, even if the cancellation is lost (Python
        3.11's `asyncio.wait_for` may swallow one arriving with the event it waits for): the
        flag is checked before every write and every wait."""
        self.stopped = True
        self._wake.set()
        self.task.cancel()

    def changed(self) -> None:
        now = self._clock()
        if self._first is None:
            self._first = now
        self._last = now
        self._wake.set()

    async def _run(self) -> None:
        netns = self.record.netns
        reader: netlink.Reader | None = None
        try:
            # The first look too: when the agent starts, hundreds of dumps parsed at once
            # would raise the agent's peak memory for good (CPython keeps its arenas).
            async with self._opening:
                try:
                    sock = await routes.socket_in(netns)
                except OSError as exc:
                    log.warning(
                        "pod %s/%s: not watching its addresses: cannot open a netlink socket in %s: %s",
                        self.record.pod_namespace,
                        self.record.pod_name,
                        netns,
                        exc,
                    )
                    return
                try:
                    sock.bind((0, GROUPS))
                    reader = netlink.Reader(sock, self._event, self._lost)
                except BaseException:
                    sock.close()
                    raise
                # What changed while nothing watched (the agent restarted, or the ADD's last moments).
                if await self._flush(reader) is False:
                    self._failures = 1
                    self.changed()
            await self._loop(reader)
        except Exception as exc:  # a netlink failure: this pod's watch ends, the agent goes on
            log.warning(
                "pod %s/%s: address watch stopped: %s", self.record.pod_namespace, self.record.pod_name, exc
            )
        finally:
            if reader is not None:
                reader.close()

    def _event(self, msg_type: int) -> None:
        """A message the kernel multicast: an address or a link changed."""
        if msg_type in (netlink.RTM_NEWLINK, netlink.RTM_DELLINK):
            self._names = None  # an interface came, went or was renamed
        self.changed()

    def _lost(self) -> None:
        """Events were lost (the socket's buffer overran during a storm): look at everything again."""
        self._names = None
        self.changed()

    async def _loop(self, reader: netlink.Reader) -> None:
        while not self.stopped:
            await self._wake.wait()
            while not self.stopped:
                self._wake.clear()
                if self._first is None:
                    break
                due = flush_at(self._first, self._last, self._looked, self._settings)
                if self._failures and self._looked is not None:
                    due = max(due, self._looked + retry_delay(self._failures, self._settings))
                delay = due - self._clock()
                if delay <= 0:
                    break
                # Not asyncio.wait_for: on 3.11 it returns normally when the cancellation arrives
                # with the change it waits for, and the stopped watch would carry on.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
            if self.stopped or self._first is None:
                continue
            self._first = None
            if await self._flush(reader) is False:
                self._failures += 1
                self.changed()  # look again (and retry) after the backoff
            else:
                self._failures = 0

    async def _flush(self, reader: netlink.Reader) -> bool | None:
        """Looks at the namespace; writes the status if it changed. None: nothing to write."""
        self._looked = self._clock()
        self.looks += 1
        seen = await self._read(reader)
        if seen is None:
            return None
        new, cut = cap_status(updated_status(self.status, observed_addresses(*seen)), self._settings)
        if self.stopped:
            return None
        if cut and not self._capped:
            message = cap_message(cut, self._settings)
            log.warning("pod %s/%s: %s", self.record.pod_namespace, self.record.pod_name, message)
            if self._report is not None:
                self._report(self.record, REASON_CAPPED, message)
        self._capped = bool(cut)
        if new == self.status:
            return None
        log.info(
            "pod %s/%s: addresses changed: network-status %s",
            self.record.pod_namespace,
            self.record.pod_name,
            change_summary(self.status, new),
        )
        if not await self._publish(self.record, new):
            return False
        self.status = new
        return True

    async def _read(
        self, reader: netlink.Reader
    ) -> tuple[dict[int, str], list[netlink.AddressEntry]] | None:
        """The namespace's interface names and addresses; None when every dump lost messages
        (the loss marked the pod changed: it is looked at again after the debounce)."""
        for attempt in range(DUMP_ATTEMPTS):
            try:
                addresses = await reader.dump(netlink.RTM_GETADDR, netlink.parse_address)
                names = self._names
                if names is None or any(a.index not in names for a in addresses):
                    # Link messages are large (every IFLA attribute and counter): the names are
                    # dumped on the first look, and again after a link changed.
                    links = await reader.dump(netlink.RTM_GETLINK, netlink.parse_link)
                    names = self._names = link_names(links)
                return names, addresses
            except netlink.Lost as exc:
                self._names = None
                if attempt + 1 == DUMP_ATTEMPTS:
                    log.info(
                        "pod %s/%s: looking at its addresses again later: %s",
                        self.record.pod_namespace,
                        self.record.pod_name,
                        exc,
                    )
        return None


class AddressWatch:
    """The address watches of one agent, one per attached pod (keyed by container ID)."""

    def __init__(
        self,
        publish: Publish,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.monotonic,
        report: Report | None = None,
    ) -> None:
        self._publish = publish
        self._report = report
        self.settings = settings or Settings()
        self._clock = clock
        self._pods: dict[str, _PodWatch] = {}
        self._opening: asyncio.Semaphore | None = None

    def watch(self, record: Record, status: list[dict[str, Any]]) -> None:
        """Watches the record's namespace, whose status is `status` now; replaces an earlier
        watch of the same container (as after a change of its attachments)."""
        old = self._pods.pop(record.container_id, None)
        if old is not None:
            old.stop()
        if self._opening is None:
            self._opening = asyncio.Semaphore(OPEN_CONCURRENCY)
        self._pods[record.container_id] = _PodWatch(
            record, status, self._publish, self.settings, self._opening, self._clock, self._report
        )

    async def unwatch(self, container_id: str) -> None:
        """Stops watching a container (before its DEL tears its interfaces down): nothing is
        written for it from the moment this is called. Waits at most `STOP_SECONDS` for the
        watch to close its socket; the watch never waits for the container's lock, so a DEL
        holding it can wait here (docs/agent.md "Live IP changes")."""
        pod = self._pods.pop(container_id, None)
        if pod is None:
            return
        pod.stop()
        done, _ = await asyncio.wait({pod.task}, timeout=STOP_SECONDS)
        if not done:
            log.warning(
                "pod %s/%s: its address watch did not end within %.0f s of being stopped; it writes "
                "nothing more, and its socket closes when it ends",
                pod.record.pod_namespace,
                pod.record.pod_name,
                STOP_SECONDS,
            )

    async def close(self) -> None:
        for container_id in list(self._pods):
            await self.unwatch(container_id)

    def watched(self) -> list[str]:
        """Container IDs being watched (a watch that could not open its namespace, or whose
        socket failed, has ended and is not listed)."""
        return sorted(cid for cid, pod in self._pods.items() if not pod.task.done())

    def status_of(self, container_id: str) -> list[dict[str, Any]] | None:
        """The status a container's watch last wrote (or started from); None if not watched."""
        pod = self._pods.get(container_id)
        return pod.status if pod is not None else None

    def looks(self, container_id: str) -> int:
        """How many times a container's namespace was looked at (0 if not watched)."""
        pod = self._pods.get(container_id)
        return pod.looks if pod is not None else 0


__all__ = [
    "REASON_CAPPED",
    "Address",
    "AddressWatch",
    "Settings",
    "cap_message",
    "cap_status",
    "change_summary",
    "flush_at",
    "interface_ips",
    "is_pod_ip",
    "link_names",
    "observed_addresses",
    "retry_delay",
    "updated_status",
]
