"""What the agent reports about its pods: network-status, live address changes, Warning Events.

- network-status (NPWG 5) is written after the runtime has its answer, by the publisher
  (`bridge.agent.pods.publisher.StatusPublisher`: one write per pod at a time, retried); once a
  record's status is written its record is marked (`status_published`), so a restarted agent
  writes what an earlier one left pending (`republish_pending`);
- a DEL withdraws its container's status (`withdraw`): what was not yet written is dropped, and
  the pod's status as the DEL leaves it (another container of the pod still attached here, else
  none: `[]`, as Multus writes on DEL) is queued behind the write in flight, so the last write
  reports the latest state even when the ADD's write lands after the DEL;
- while a pod runs, the addresses of its attached interfaces are followed into its
  network-status (KEP Req 25, `bridge.agent.pods.addresswatch`): `watch`, `watch_recorded`,
  and `observed`, the address watch's way back;
- Warning Events about a pod (`report`) go to the event sink, in the background.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from datetime import UTC, datetime
from typing import Any

from bridge import npwg
from bridge.agent.delegates import cache
from bridge.agent.delegates.cache import Record
from bridge.agent.delegates.invoke import CNIError
from bridge.agent.delegates.records import Records, shape, unfinished
from bridge.agent.kube.objects import EventSink, ObjectSource
from bridge.agent.node.settings import EVENT_COMPONENT, AgentConfig
from bridge.agent.pods import addresswatch, publisher
from bridge.translate import podips
from podnetwork.ground import constants
from podnetwork.ground.core import ObjectMeta, Pod, pod_event

log = logging.getLogger(__name__)


def status_entries(record: Record) -> list[dict[str, Any]]:
    """The network-status (5) the record's CNI results give."""
    return [
        npwg.status_entry(
            a.name, a.result, default=a.default, interface=a.ifname, default_route=a.default_route
        )
        for a in record.attachments
    ]


def claimed_pod_ips(record: Record, entries: list[dict[str, Any]]) -> dict[str, str]:
    """`multinetwork.x-k8s.io/pod-ips` of a pod attached by its claims (`Record.claimed`), as the
    bridge writes it for annotated pods (`bridge.translate.podips.pod_ips`: the first IP per
    family per PodNetwork, bare): the DRA driver's networkData is read from it (docs/dra.md)."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for attachment, entry in zip(record.attachments, entries, strict=True):
        podnetwork = attachment.podnetwork or (constants.DEFAULT_PODNETWORK if attachment.default else None)
        if podnetwork is None:
            continue
        for raw in entry.get("ips") or []:
            address = podips.status_address(raw)
            if address is None or (podnetwork, address.version) in seen:
                continue
            seen.add((podnetwork, address.version))
            out.append({"ip": str(address), "podNetwork": podnetwork, "interfaceName": attachment.ifname})
    return {constants.POD_IPS_ANNOTATION: podips.format_pod_ips(out)}


class Reports:
    """The reports of one agent about its pods (module docstring)."""

    def __init__(self, objects: ObjectSource, config: AgentConfig, records: Records,
                 events: EventSink | None = None) -> None:
        self.config = config
        self.records = records
        self.events = events
        """Where Warning Events about pods go (`report`); None: the log only."""
        self._reporting: set[asyncio.Task[None]] = set()
        self._attached: dict[tuple[str, str], dict[str, str]] = {}
        """The containers this agent attached completely, per pod (namespace, name): container ID
        -> the pod's UID. A DEL reads it for what the pod's status is after it (`withdraw`)."""
        self.publisher = publisher.StatusPublisher(objects.patch_pod_annotations)
        """Writes network-status after the runtime got its answer (NPWG 5); also for other
        parts of the agent that report a pod's attachments anew."""
        self.address_watch = addresswatch.AddressWatch(self.observed, config.address_watch,
                                                       report=self.report)
        """One watch per attached pod while the config says so (KEP Req 25)."""

    async def close(self) -> None:
        """Stops the watches and the Events in flight (for at most 5 s), then the publisher: a
        write still pending is recorded, and the next agent makes it."""
        await self.address_watch.close()
        if self._reporting:
            await asyncio.wait(set(self._reporting), timeout=5)
        await self.publisher.close()

    # --- network-status ---

    def unbound(self, record: Record) -> bool:
        """Whether the record names no pod UID and an earlier agent process wrote it (its runtime
        passed no K8S_POD_UID, and that agent kept none): its status could only be written by the
        pod's name, and this process cannot tell that pod from one re-created under the name since.
        Nothing is written for it (logged)."""
        if record.pod_uid or self.records.wrote(record.container_id):
            return False
        log.info("pod %s/%s: the record of container %s names no pod UID (an earlier agent's); its "
                 "network-status is not written, since the pod of that name may be another one by now",
                 record.pod_namespace, record.pod_name, record.container_id)
        return True

    def publish(self, record: Record) -> list[dict[str, Any]]:
        """Queues the record's network-status (spec 5: the runtime does not wait for it), and
        marks the record once it is written, so a restarted agent knows what is left.
        Returns the entries queued (none are for a record `unbound`)."""
        entries = status_entries(record)
        container_id = record.container_id
        if self.unbound(record):
            return entries

        async def written() -> None:
            async with self.records.lock(container_id):
                try:
                    current = self.records.load(container_id)
                    # Not a record a DEL removed, nor a later ADD's (its own write marks it).
                    if current is not None and current.complete and current.result == record.result:
                        current.status_published = True
                        self.records.save(current)
                except (CNIError, cache.CacheError, OSError) as exc:
                    # The status is written; only the mark is lost, and an unmarked record is
                    # written again by the next ADD or CHECK. An unreadable file is the DEL's to
                    # move aside (`Records.load`), not this callback's.
                    log.warning("pod %s/%s: network-status written, but the record of container %s cannot "
                                "be marked so (%s); the next ADD or CHECK writes the status again",
                                record.pod_namespace, record.pod_name, container_id, exc)

        self.publisher.publish(
            record.pod_namespace, record.pod_name, entries, owner=container_id, on_written=written,
            uid=record.pod_uid, also=claimed_pod_ips(record, entries) if record.claimed else None,
        )
        return entries

    def publish_unless_published(self, record: Record) -> None:
        """Queues the record's network-status if it was never written (an ADD or CHECK repairs it)."""
        if self.config.patch_status and not record.status_published:
            self.publish(record)

    def republish(self, record: Record, entries: list[dict[str, Any]] | None = None) -> None:
        """Queues the pod's network-status anew: `entries` (what the address watch saw), else the
        record's, whose mark is reset first (a hot-plug: a restarted agent writes it). The
        publisher retries until it is written, or the pod is gone."""
        if entries is not None:
            if not self.unbound(record):
                self.publisher.publish(record.pod_namespace, record.pod_name, entries,
                                       owner=record.container_id, uid=record.pod_uid)
            return
        if record.status_published:
            record.status_published = False
            self.records.save(record)
        self.publish(record)

    def republish_pending(self) -> None:
        """After a restart: queues the status an earlier agent process left unwritten."""
        for record in self.records.readable():
            if record.complete and not record.status_published and not unfinished(record):
                # (A record with an unfinished hot-plug is published by its roll-back.)
                log.info("container %s: writing the network-status an earlier agent left pending",
                         record.container_id)
                self.publish(record)

    def cancel(self, record: Record) -> bool:
        """Drops the record's status not yet written: it would report interfaces a DEL removes.
        True if a write of it was pending or in flight."""
        return self.publisher.cancel(record.pod_namespace, record.pod_name, record.container_id)

    def attached(self, record: Record) -> None:
        """The record is complete: its container counts among its pod's attached ones."""
        self._attached.setdefault((record.pod_namespace, record.pod_name), {})[record.container_id] = (
            record.pod_uid)

    def track_recorded(self) -> None:
        """After a restart: every complete record counts among its pod's attached containers."""
        for record in self.records.readable():
            if record.complete:
                self.attached(record)

    def withdraw(self, record: Record, *, reported: bool) -> None:
        """After the container's DEL (`reported`: its status was queued, so it may be on the pod):
        queues the pod's status as the DEL leaves it, behind the write in flight, so that a write of
        the ADD's status that lands after the DEL is corrected. The status is that of another
        container of the same pod (UID) still attached here (a sandbox re-created before the old
        one's DEL came), else `[]`: the pod has no attachment now (Multus writes the same on DEL).
        Its owner is no container: a retried DEL of this one does not cancel it."""
        key = (record.pod_namespace, record.pod_name)
        containers = self._attached.get(key, {})
        containers.pop(record.container_id, None)
        if not containers:
            self._attached.pop(key, None)
        if not (self.config.patch_status and reported and record.pod_name) or self.unbound(record):
            return
        for other, uid in list(containers.items()):
            if uid != record.pod_uid:
                continue
            try:
                current = self.records.cache.load(other)
            except cache.CacheError:
                current = None
            if current is None or not current.complete:
                continue
            # What its address watch last saw, else what its record says.
            entries = self.address_watch.status_of(other)
            try:
                if entries is None:
                    entries = status_entries(current)
            except npwg.UnsupportedResultVersion:
                continue
            log.info("pod %s/%s: container %s is deleted; writing the status of its container %s",
                     *key, record.container_id, other)
            self.publisher.publish(*key, entries, owner=other, uid=current.pod_uid)
            return
        self.publisher.publish(*key, [], uid=record.pod_uid)

    # --- live IP changes (KEP Story 9, Req 25) ---

    def watch(self, record: Record, entries: list[dict[str, Any]] | None = None) -> None:
        """Follows the addresses of a complete record's interfaces into its pod's network-status
        (`entries`: that status, when the caller has it already)."""
        if not (self.config.watching_addresses and record.complete):
            return
        try:
            if entries is None:
                entries = status_entries(record)
        except npwg.UnsupportedResultVersion as exc:
            log.warning(
                "pod %s/%s: not watching its addresses: %s", record.pod_namespace, record.pod_name, exc
            )
            return
        self.address_watch.watch(record, entries)

    async def unwatch(self, container_id: str) -> None:
        """Stops following the container's addresses: its interfaces are about to go."""
        await self.address_watch.unwatch(container_id)

    def watch_recorded(self) -> None:
        """After a restart: every complete record is watched again (its first look writes the
        status if the addresses changed while no agent watched)."""
        if not self.config.watching_addresses:
            return
        for record in self.records.readable():
            if not unfinished(record):  # its roll-back watches it
                self.watch(record)

    async def observed(self, record: Record, entries: list[dict[str, Any]]) -> bool:
        """Queues what the address watch saw; False when not now (the watch looks again later).

        Never waits for the container's lock: a DEL holds it while it stops the watch and waits
        for the watch to end, so a watch waiting for it would hang that DEL. While an ADD, DEL,
        CHECK or hot-plug holds the container, the watch looks again after its backoff. The
        checks and the queueing below do not await, so nothing interleaves with them."""
        container_id = record.container_id
        if self.records.busy(container_id):
            log.debug("pod %s/%s: its container is busy; looking at its addresses again later",
                      record.pod_namespace, record.pod_name)
            return False
        try:
            current = self.records.cache.load(container_id)
        except cache.CacheError:
            current = None
        if current is None or shape(current) != shape(record):
            # The pod's attachments changed since the watch began (or its record is gone):
            # this status would undo that. Watch again from the record as it is now; this
            # watch ends once the call below replaces it.
            log.info(
                "pod %s/%s: its attachments changed; watching its addresses again",
                record.pod_namespace,
                record.pod_name,
            )
            if current is not None:
                asyncio.get_running_loop().call_soon(self.watch, current)
            return False
        self.republish(record, entries)
        return True

    # --- Events ---

    def report(self, record: Record, reason: str, message: str) -> None:
        """Posts a Warning Event about the record's pod, in the background (a failure is logged)."""
        if self.events is None:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod = Pod(metadata=ObjectMeta(name=record.pod_name, namespace=record.pod_namespace,
                                      uid=record.pod_uid or None))
        key = hashlib.sha256(f"{record.pod_uid}/{reason}/{message}/{now}".encode()).hexdigest()[:16]
        body = pod_event(pod, reason, message, key=key, type_="Warning", now=now, component=EVENT_COMPONENT)
        task = asyncio.create_task(self._post_event(record, body), name=f"event {record.pod_name}")
        self._reporting.add(task)
        task.add_done_callback(self._reporting.discard)

    async def _post_event(self, record: Record, body: dict[str, Any]) -> None:
        assert self.events is not None
        try:
            await self.events.post_event(body)
        except Exception as exc:  # an Event is a report; the log has said it already
            log.warning("pod %s/%s: event not posted: %s", record.pod_namespace, record.pod_name, exc)


__all__ = ["Reports", "status_entries"]
