"""CNI 1.1 GC: tear down the containers the runtime no longer lists, then GC every delegate.

The runtime built its list of valid attachments before sending GC; an ADD that arrived after
the GC request is missing from it without being stale, so its container is kept
(`records.Records.added_since`). Then GC is forwarded to the delegates, as a delegating plugin
must (CNI spec 1.1 "GC"), while no delegate ADD runs (`records.Records.no_adds`).
"""

from __future__ import annotations

import json
import logging

from bridge.agent.cni.attachments import Attachments
from bridge.agent.cni.request import Request
from bridge.agent.delegates import cache
from bridge.agent.delegates.conflist import VALID_ATTACHMENTS, ConfList
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.delegates.records import Records
from bridge.agent.delegates.runner import Runner

log = logging.getLogger(__name__)


class Collector:
    """GC of one agent's containers and delegates (module docstring)."""

    def __init__(self, records: Records, runner: Runner, attachments: Attachments) -> None:
        self.records = records
        self.runner = runner
        self.attachments = attachments

    async def gc(self, request: Request, arrival: int) -> None:
        """Tears down the recorded containers `request` does not list as valid (unless their ADD
        arrived after it, at `arrival`), then forwards GC to the delegates."""
        valid = request.conf.get(VALID_ATTACHMENTS)
        if not isinstance(valid, list):
            return
        keep = {a.get("containerID") for a in valid if isinstance(a, dict)}
        for container_id in list(self.records.cache.container_ids()):
            if container_id in keep:
                continue
            async with self.records.lock(container_id):
                await self._stale(container_id, arrival)
        async with self.records.no_adds():
            await self.forward()

    async def _stale(self, container_id: str, arrival: int) -> None:
        """Tears down a container the runtime's list leaves out (its lock held)."""
        if self.records.added_since(container_id, arrival):
            log.info("GC: keeping container %s, whose ADD arrived after the GC request", container_id)
            return
        try:
            record = self.records.cache.load(container_id)
        except cache.CacheError as exc:
            aside = self.records.move_aside(container_id)
            log.error("GC: container %s: %s; moved it to %s, inspect it", container_id, exc, aside)
            return
        if record is None:
            return
        try:
            await self.attachments.teardown(record, raise_errors=False)
        except CNIError as exc:  # its delegates outlived SIGKILL: the next GC or DEL retries
            log.error("GC: container %s not torn down: %s", container_id, exc)
            return
        self.records.forget(container_id)

    async def forward(self) -> None:
        """GC of every delegate network the cache knows, with that network's attachments to keep.

        A delegating plugin must pass GC on to its delegates (CNI spec 1.1 "GC"), but the
        runtime's list names the agent's attachments (container, eth0), not the delegates'
        (container, net1, ...). The agent's records, after the stale ones are gone, are
        that list per delegate. Networks are grouped by CNI network name: plugins such as
        host-local keep their state per name, so a GC must list every attachment of that
        name, whichever NetworkAttachmentDefinition made it. Attachments still recorded
        (kept, a DEL that failed, an ADD cut short) all count as valid: a DEL frees them.
        """
        keep: dict[str, list[dict[str, str]]] = {}
        configs: dict[str, dict[str, ConfList]] = {}
        for container_id in self.records.cache.container_ids():
            try:
                record = self.records.cache.load(container_id)
            except cache.CacheError as exc:
                log.warning("GC: skipping container %s: %s", container_id, exc)
                continue
            if record is None:
                continue
            for attachment in record.attachments:
                try:
                    cl = self.runner.load(attachment.config, attachment.name)
                except CNIError as exc:
                    log.warning("GC: container %s: %s", container_id, exc)
                    continue
                entry = {"containerID": container_id, "ifname": attachment.ifname}
                if entry not in keep.setdefault(cl.name, []):
                    keep[cl.name].append(entry)
                configs.setdefault(cl.name, {})[json.dumps(cl.to_json(), sort_keys=True)] = cl
        if self.attachments.node_access is not None:
            # The node's own addresses on macvlan/ipvlan networks are reserved in the pods' pools.
            for name, entries in self.attachments.node_access.reservations().items():
                keep.setdefault(name, []).extend(e for e in entries if e not in keep[name])
        problems: list[str] = []
        for name, variants in configs.items():
            for cl in variants.values():
                try:
                    await self.runner.gc(cl, keep[name])
                except CNIError as exc:
                    problems.append(str(exc))
        if problems:
            raise CNIError(
                ErrorCode.PLUGIN_FAILED, "GC failed in some delegate networks", "; ".join(problems)
            )


__all__ = ["Collector"]
