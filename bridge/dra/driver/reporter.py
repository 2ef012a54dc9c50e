"""The networkData of prepared claims, written on each claim's status as the pods' networks are attached.

The driver watches the pods of its node; for a pod's claim this driver prepared (found by the
pod's `status.resourceClaimStatuses` or `spec.resourceClaims[].resourceClaimName`), it computes
the `status.devices[]` entries of the attached devices (`bridge.dra.driver.netstatus`) and
applies them to the claim's status subresource by server-side apply, as field manager the driver
name, so the entries of other drivers of the claim are left alone (the list is keyed by driver,
pool, device and shareID). A write that would say the same again is skipped.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from lightkube.types import PatchType
from pydantic import ValidationError

from bridge.dra.driver import netstatus, views
from bridge.dra.driver.publisher import ResourceClaim
from bridge.dracontract import state
from podnetwork.ground import core
from podnetwork.kube import client as kube

logger = logging.getLogger(__name__)


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims a pod uses, by name (none when the pod does not read as a v1 Pod)."""
    try:
        parsed = views.Pod.model_validate(pod)
    except ValidationError:
        return []
    refs = [*parsed.status.resource_claim_statuses, *parsed.spec.resource_claims]
    return list(dict.fromkeys(r.resource_claim_name for r in refs if r.resource_claim_name))


def _meta(obj: Mapping[str, Any]) -> core.ObjectMeta:
    head = core.head_of(obj)
    return head.metadata if head else core.ObjectMeta()


class Reporter:
    def __init__(self, api: kube.AsyncApi, store: state.Store, *, driver: str, node: str) -> None:
        self.api, self.store, self.driver, self.node = api, store, driver, node
        self.written: dict[str, str] = {}
        self._pending: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()

    def forget(self, uid: str) -> None:
        self.written.pop(uid, None)

    def _pod(self, obj: dict[str, Any]) -> None:
        if claim_names(obj):
            meta = _meta(obj)
            self._pending[f"{meta.namespace}/{meta.name}"] = obj
            self._wake.set()

    def _listed(self, items: list[dict[str, Any]]) -> None:
        for obj in items:
            self._pod(obj)

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED":
            self._pod(obj)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(kube.list_and_watch(self.api, kube.Pod, on_list=self._listed,
                                                  on_event=self._event, fields={"spec.nodeName": self.node}))
            tasks.create_task(self._writer())

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, {}
            for key, pod in pending.items():
                try:
                    await self.report(pod)
                except kube.ApiError as exc:
                    logger.warning("cannot write the networkData of pod %s's claims: %s", key, exc)

    async def report(self, pod: dict[str, Any]) -> None:
        namespace = str(_meta(pod).namespace)
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for name in claim_names(pod):
            prepared = self.store.by_name(namespace, name)
            if prepared is None:
                continue
            statuses = netstatus.device_statuses(prepared, pod, driver=self.driver, now=now)
            key = netstatus.unchanged_key(statuses)
            if not statuses or self.written.get(prepared.uid) == key:
                continue
            body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": namespace}, "status": {"devices": statuses}}
            what = f"apply ResourceClaim {namespace}/{name}/status"
            await self.api.call(what, lambda c, body=body, name=name: c.patch(  # type: ignore[misc]
                ResourceClaim.Status, name, body, namespace=namespace, patch_type=PatchType.APPLY,
                field_manager=self.driver, force=True))
            self.written[prepared.uid] = key
            logger.info("ResourceClaim %s/%s: networkData written: %s", namespace, name, ", ".join(
                f"{s['device']} -> {s['networkData'].get('interfaceName')} {s['networkData'].get('ips', [])}"
                for s in statuses))


__all__ = ["Reporter", "claim_names"]
