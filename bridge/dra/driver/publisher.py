"""The node's ResourceSlices kept equal to what it offers: three watches and one writer.

The driver lists and watches the PodNetworks, its own Node (by `metadata.name`) and its own
ResourceSlices (by `spec.nodeName` and `spec.driver`); after any event, once all three are
listed, it computes the slices the node should have (`bridge.dra.driver.slices`) and makes the
writes that differ. Watching its own slices is what brings them back when something else
deletes them: the kubelet deletes every ResourceSlice of its node when it starts, and those of a
driver whose plugin went away (30 s after, unless it registers again).

Slices name the Node as their owner, so deleting the Node deletes them (garbage collection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from bridge.dra.driver import slices
from bridge.dra.objects import API_GROUP
from podnetwork.ground import core
from podnetwork.kube import client as kube

logger = logging.getLogger(__name__)

ResourceSlice = create_global_resource(API_GROUP, "v1", "ResourceSlice", "resourceslices")
ResourceClaim = create_namespaced_resource(API_GROUP, "v1", "ResourceClaim", "resourceclaims")

#: What must be listed before the first write: a slice computed without one of them could take
#: devices away that are there.
_SOURCES = ("podnetworks", "node", "resourceslices")


def _meta(obj: dict[str, Any] | None) -> core.ObjectMeta:
    """A served object's metadata; empty for no object, or one whose metadata does not read."""
    head = None if obj is None else core.head_of(obj)
    return head.metadata if head else core.ObjectMeta()


class Publisher:
    """Publishes `node`'s pool of `driver` through `api` (`run`), and says which PodNetwork a device
    of it stands for (`podnetwork_of`)."""

    def __init__(self, api: kube.AsyncApi, *, driver: str, node: str, retry_delay: float = 2.0,
                 patience: float = 30.0) -> None:
        self.api, self.driver, self.node, self.retry_delay = api, driver, node, retry_delay
        self.patience = patience
        """Seconds after which a listing not done yet is logged as a warning (the API may not answer)."""
        self.podnetworks: dict[str, dict[str, Any]] = {}
        self.node_obj: dict[str, Any] | None = None
        self.slices: dict[str, dict[str, Any]] = {}
        self.listed: set[str] = set()
        self.published = asyncio.Event()
        """Set once the node's slices are as wanted (and again after each change that was written)."""
        self._dirty = asyncio.Event()
        self._devices: dict[str, str] = {}
        self._said: tuple[object, ...] | None = None

    def podnetwork_of(self, device: str) -> str | None:
        return self._devices.get(device)

    # -- the watches' callbacks -----------------------------------------------------------------------
    def _changed(self) -> None:
        self._dirty.set()

    def _podnetworks_listed(self, items: list[dict[str, Any]]) -> None:
        self.podnetworks = {str(o["metadata"]["name"]): o for o in items}
        self.listed.add("podnetworks")
        self._changed()

    def _podnetwork_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            self.podnetworks.pop(name, None)
        else:
            self.podnetworks[name] = obj
        self._changed()

    def _node_listed(self, items: list[dict[str, Any]]) -> None:
        self.node_obj = items[0] if items else None
        self.listed.add("node")
        self._changed()

    def _node_event(self, kind: str, obj: dict[str, Any]) -> None:
        annotations_before = _meta(self.node_obj).annotations
        self.node_obj = None if kind == "DELETED" else obj
        # a heartbeat changes the status every few seconds; only the annotations and presence matter
        if kind != "MODIFIED" or annotations_before != _meta(obj).annotations:
            self._changed()

    def _slices_listed(self, items: list[dict[str, Any]]) -> None:
        self.slices = {str(o["metadata"]["name"]): o for o in items}
        self.listed.add("resourceslices")
        self._changed()

    def _slice_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            self.slices.pop(name, None)
            logger.info("ResourceSlice %s was deleted", name)
        else:
            self.slices[name] = obj
        self._changed()

    # -- the writer -----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Until cancelled."""
        mine = {"spec.nodeName": self.node, "spec.driver": self.driver}
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(kube.list_and_watch(self.api, kube.PodNetwork, on_list=self._podnetworks_listed,
                                                  on_event=self._podnetwork_event))
            tasks.create_task(kube.list_and_watch(self.api, kube.Node, on_list=self._node_listed,
                                                  on_event=self._node_event,
                                                  fields={"metadata.name": self.node}))
            tasks.create_task(kube.list_and_watch(self.api, ResourceSlice, on_list=self._slices_listed,
                                                  on_event=self._slice_event, fields=mine))
            tasks.create_task(self._writer())
            tasks.create_task(self._watchdog())

    async def _watchdog(self) -> None:
        await asyncio.sleep(self.patience)
        missing = [s for s in _SOURCES if s not in self.listed]
        if missing:
            logger.warning("node %s: %s not listed after %.0f s, so no ResourceSlice is published yet: "
                           "does the API server at %s answer, and may this driver list them? "
                           "(-v shows each attempt)",
                           self.node, ", ".join(missing), self.patience, self.api.credentials.server)

    async def _writer(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if not self.listed.issuperset(_SOURCES):
                continue
            try:
                await self.reconcile()
            except kube.ApiError as exc:
                logger.warning("cannot publish node %s's ResourceSlices: %s; again in %ss", self.node, exc,
                               self.retry_delay)
                await asyncio.sleep(self.retry_delay)
                self._dirty.set()

    def _say(self, offered: list[slices.Offer], left: list[slices.Left]) -> None:
        said = (tuple(offered), tuple(left), self.node_obj is None)
        if said == self._said:
            return
        self._said = said
        if self.node_obj is None:
            logger.warning("node %s does not exist (yet): no ResourceSlice published", self.node)
            return
        shown = [o.podnetwork if o.device == o.podnetwork else f"{o.podnetwork} (device {o.device})"
                 for o in offered]
        logger.info("node %s offers %d PodNetwork(s) as devices of %s: %s", self.node, len(offered),
                    self.driver, ", ".join(shown) or "none")
        for one in left:
            logger.info("PodNetwork %s has no device on node %s: %s", one.podnetwork, self.node, one.reason)

    async def reconcile(self) -> None:
        """One pass: the writes that make the node's slices what it offers now. Raises `ApiError`."""
        offered, left = slices.offers(self.podnetworks.values(), self.node_obj)
        self._devices = {o.device: o.podnetwork for o in offered}
        self._say(offered, left)
        wanted = {} if self.node_obj is None else slices.specs(offered, node=self.node, driver=self.driver)
        writes = slices.plan(self.slices, wanted)
        for write in writes:
            await self._write(write)
        if writes:
            logger.info("node %s's ResourceSlices written: %s", self.node,
                        ", ".join(f"{w.verb} {w.name}" for w in writes))
        self.published.set()

    async def _write(self, write: slices.Write) -> None:
        if write.verb == "delete":
            with contextlib.suppress(kube.NotFound):
                await self.api.delete(ResourceSlice, write.name)
            self.slices.pop(write.name, None)
            return
        assert write.body is not None
        if write.verb == "update":
            try:
                obj = await self.api.patch(ResourceSlice, write.name, [
                    {"op": "replace", "path": "/spec", "value": write.body["spec"]}], patch_type="json")
            except kube.NotFound:  # deleted meanwhile (the kubelet wipes slices): make it again
                obj = await self._create(write.body)
        else:
            obj = await self._create(write.body)
        self.slices[write.name] = obj

    async def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        uid = _meta(self.node_obj).uid
        if uid:
            body = {**body, "metadata": {**body["metadata"], "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid,
                 "controller": True}]}}
        try:
            return await self.api.create(ResourceSlice, body)
        except kube.Conflict:  # made meanwhile, by an earlier run of this driver: take it over
            return await self.api.patch(ResourceSlice, str(body["metadata"]["name"]), [
                {"op": "replace", "path": "/spec", "value": body["spec"]}], patch_type="json")


class ApiClaims:
    """Reads ResourceClaims for the kubelet's prepare calls (a short retry: the kubelet retries too)."""

    def __init__(self, api: kube.AsyncApi) -> None:
        self.api = api

    async def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.api.get(ResourceClaim, name, namespace)
        except kube.NotFound:
            return None


__all__ = ["ApiClaims", "Publisher", "ResourceClaim", "ResourceSlice"]
