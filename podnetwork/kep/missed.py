"""Deletions the controller's watches missed: the resync of PodNetworks and attachments, and the
sweep of ghost consumers.

After a watch expires (410 Gone) kopf lists again and reports what it lists, never
DELETED for what vanished in the gap (kopf's `continuous_watch`). So a deleted
PodNetwork could stay in memory (its attachments Ready), a deleted attachment stay a
consumer, and a deleted pod keep a finalizer forever. `resync` lists the two small
kinds every `--resync-interval`; pods are never listed (issue #3: no full pod lists):
`sweep_ghosts` reads, at each flush, only the consumers that keep a deletion waiting.
What is gone is forgotten through the controller, whose plans then follow.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from podnetwork.ground import constants
from podnetwork.ground.core import PartialObjectMetadata, Pod
from podnetwork.kep import api as models
from podnetwork.kep import inuse, plans, reading
from podnetwork.kep.api import KepObject, Network
from podnetwork.kep.inuse import Ref
from podnetwork.kube import client as kube
from podnetwork.kube import writes

# The controller's logger: these lines keep the name they always had.
logger = logging.getLogger("podnetwork.kep.controller")

#: GETs per flush spent checking that the consumers keeping a deletion waiting still exist.
GHOST_CHECKS = 20


class Controller(Protocol):
    """What of `podnetwork.kep.controller.Controller` this module uses."""

    objects: dict[Ref, KepObject]
    index: inuse.Index
    pending: set[Ref]

    def checked_api(self) -> writes.Api: ...

    def namespace_profile(self, name: str) -> list[Network] | None: ...

    async def reconcile(self, ref: Ref, *, urgent: bool = True) -> None: ...

    async def forget_podnetwork(self, ref: Ref) -> None: ...

    def forget_attachment(self, ref: Ref) -> None: ...


async def sweep_ghosts(ctl: Controller) -> None:
    """Forget consumers the API no longer has, where a deletion waits on them: only objects being
    deleted are checked, with at most `GHOST_CHECKS` GETs per flush."""
    budget = GHOST_CHECKS
    for ref, body in list(ctl.objects.items()):
        if budget <= 0:
            break
        if not body.metadata.deletion_timestamp or not ctl.index.in_use(ref):
            continue
        attachments, pods = ctl.index.some_consumers(ref, budget)
        for kind, keys in ((constants.ATTACHMENT_KIND, attachments), ("Pod", pods)):
            for key in keys:
                budget -= 1
                if not await _check_consumer(ctl, kind, key):
                    return
    refs, ctl.pending = ctl.pending, set()
    for changed in sorted(refs):
        await ctl.reconcile(changed)


async def _check_consumer(ctl: Controller, kind: str, key: str) -> bool:
    """Read one consumer and put it in the index as it is (gone: out); False when the API failed."""
    namespace, _, name = key.partition("/")
    resource = kube.Pod if kind == "Pod" else kube.PodNetworkAttachment
    obj: dict[str, Any] | None
    try:
        obj = await ctl.checked_api().get(resource, name, namespace)
    except kube.NotFound:
        obj = None
    except kube.ApiError as exc:
        logger.warning("cannot check %s %s (%s); next flush", kind, key, exc)
        return False
    if kind == "Pod":
        pod = None if obj is None else reading.read(Pod.model_validate, obj, f"pod {key}")
        ctl.pending |= (ctl.index.remove_pod(key) if pod is None
                        else ctl.index.set_pod(pod, ctl.namespace_profile(namespace)))
    else:
        pna = None if obj is None else reading.read_kep(obj, kind)
        ctl.pending |= (ctl.index.remove_attachment(key) if obj is None
                        else ctl.index.set_attachment(pna)
                        if isinstance(pna, models.PodNetworkAttachment) else set())
    if obj is None:
        logger.info("forgot %s %s: gone from the API without a DELETED event", kind, key)
    return True


async def resync(ctl: Controller) -> None:
    """Drop PodNetworks and attachments the API no longer has (both kinds are small: one list each)."""
    api = ctl.checked_api()
    gone: list[Ref] = []
    for kind, resource in ((constants.PODNETWORK_KIND, kube.PodNetwork),
                           (constants.ATTACHMENT_KIND, kube.PodNetworkAttachment)):
        try:
            listing = await api.list(resource)
        except kube.ApiError as exc:
            logger.warning("cannot list %s for the resync (%s); next resync", kube.plural_of(resource), exc)
            return
        present = {inuse.ref_of(PartialObjectMetadata.model_validate({"kind": kind, **item}))
                   for item in listing.items}
        gone += plans.gone_after_listing(list(ctl.objects.items()), kind, present, listing.resource_version)
    for ref in gone:
        logger.info("forgot %s %s: gone from the API without a DELETED event", ref.kind, ref)
        if ref.kind == constants.PODNETWORK_KIND:
            await ctl.forget_podnetwork(ref)
        else:
            ctl.forget_attachment(ref)
    refs, ctl.pending = ctl.pending, set()
    for changed in sorted(refs):
        await ctl.reconcile(changed)


__all__ = ["GHOST_CHECKS", "resync", "sweep_ghosts"]
