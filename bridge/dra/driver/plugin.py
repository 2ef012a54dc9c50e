"""The kubelet plugin's behaviour: what GetInfo says, and prepare/unprepare per claim.

`Plugin.prepare` answers each claim of a NodePrepareResources on its own (by uid): a claim
already prepared gets the devices recorded then (the kubelet asks again after a restart of
either side); another is read from the API, checked to be allocated devices of this driver on
this node (`bridge.dra.driver.claims`), recorded on disk (`bridge.dracontract.state`) and
answered with those devices. `Plugin.unprepare` forgets a claim; one it does not know is
already released. A problem with one claim is that claim's `error` (the kubelet shows it in the
pod's events and retries), never a failed call.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable
from typing import Any, Protocol

from bridge.dra.driver import claims
from bridge.dra.driver.protos import dra_v1_pb2 as dra_pb
from bridge.dra.driver.protos import pluginregistration_v1_pb2 as reg_pb
from bridge.dracontract import names, state

logger = logging.getLogger(__name__)


class ClaimReader(Protocol):
    async def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim as the API serves it, None when there is none. Raises on failure
        (the message is shown as the claim's error)."""
        ...


class Registration:
    """The Registration service: GetInfo and the kubelet's verdict (`registered` once it said yes)."""

    def __init__(self, driver: str, endpoint: str) -> None:
        self.driver, self.endpoint = driver, endpoint
        self.registered = asyncio.Event()

    def info(self) -> reg_pb.PluginInfo:
        logger.debug("the kubelet asked GetInfo")
        return reg_pb.PluginInfo(type=names.PLUGIN_TYPE, name=self.driver, endpoint=self.endpoint,
                                 supported_versions=list(names.SUPPORTED_VERSIONS))

    def notified(self, status: reg_pb.RegistrationStatus) -> None:
        if status.plugin_registered:
            logger.info("the kubelet registered DRA driver %s (DRAPlugin at %s)", self.driver, self.endpoint)
            self.registered.set()
        else:
            logger.error("the kubelet refused to register DRA driver %s: %s", self.driver,
                         status.error or "(no reason given)")
            self.registered.clear()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Plugin:
    """The DRAPlugin service of `driver` on `node`."""

    def __init__(self, *, driver: str, node: str, store: state.Store, reader: ClaimReader,
                 podnetwork_of: Callable[[str], str | None]) -> None:
        self.driver, self.node, self.store, self.reader = driver, node, store, reader
        self.podnetwork_of = podnetwork_of
        """The PodNetwork a device of this node stands for now (None: unknown)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self.on_release: Callable[[str], None] | None = None
        """Told the uid of each claim released (the reporter forgets what it wrote)."""

    def _lock(self, uid: str) -> asyncio.Lock:
        return self._locks.setdefault(uid, asyncio.Lock())

    async def prepare(
            self, request: dra_pb.NodePrepareResourcesRequest) -> dra_pb.NodePrepareResourcesResponse:
        answers = await asyncio.gather(*(self._prepare_one(c) for c in request.claims))
        return dra_pb.NodePrepareResourcesResponse(claims={c.uid: a for c, a in zip(request.claims, answers,
                                                                                    strict=True)})

    async def unprepare(
            self, request: dra_pb.NodeUnprepareResourcesRequest) -> dra_pb.NodeUnprepareResourcesResponse:
        answers = await asyncio.gather(*(self._unprepare_one(c) for c in request.claims))
        return dra_pb.NodeUnprepareResourcesResponse(claims={c.uid: a for c, a in zip(request.claims, answers,
                                                                                      strict=True)})

    @staticmethod
    def _devices(prepared: state.PreparedClaim) -> list[dra_pb.Device]:
        return [dra_pb.Device(request_names=d.request_names, pool_name=d.pool, device_name=d.device,
                              share_id=d.share_id) for d in prepared.devices]

    async def _prepare_one(self, claim: dra_pb.Claim) -> dra_pb.NodePrepareResourceResponse:
        what = f"ResourceClaim {claim.namespace}/{claim.name} (uid {claim.uid})"
        if problem := state.uid_problem(claim.uid):
            logger.warning("prepare %s: refused: %s", what, problem)
            return dra_pb.NodePrepareResourceResponse(error=problem)
        async with self._lock(claim.uid):
            try:
                return await self._prepare_locked(claim, what)
            except (claims.ClaimProblem, state.StateError) as exc:
                logger.warning("prepare %s: not prepared: %s", what, exc)
                return dra_pb.NodePrepareResourceResponse(error=str(exc))

    async def _prepare_locked(self, claim: dra_pb.Claim, what: str) -> dra_pb.NodePrepareResourceResponse:
        done = self.store.get(claim.uid)
        if done is not None:
            logger.info("prepare %s: already prepared at %s: %s", what, done.prepared_at,
                        ", ".join(d.device for d in done.devices))
            return dra_pb.NodePrepareResourceResponse(devices=self._devices(done))
        try:
            obj = await self.reader.claim(claim.namespace, claim.name)
        except Exception as exc:  # any failure to read is this claim's error; the kubelet retries
            raise claims.ClaimProblem(f"cannot read {what} from the API: {exc}") from None
        if obj is None:
            raise claims.ClaimProblem(f"{what} does not exist (any more)")
        devices = claims.allocated(obj, uid=claim.uid, driver=self.driver, node=self.node)
        prepared = state.PreparedClaim(
            uid=claim.uid, namespace=claim.namespace, name=claim.name, prepared_at=_now(),
            devices=[state.PreparedDevice(request_names=list(d.request_names), pool=d.pool, device=d.device,
                                          share_id=d.share_id, podnetwork=self.podnetwork_of(d.device))
                     for d in devices])
        self.store.put(prepared)
        logger.info("prepare %s: prepared %s", what, ", ".join(
            f"{d.device} (PodNetwork {d.podnetwork or 'unknown: not published on this node now'}, "
            f"request {'/'.join(d.request_names)})" for d in prepared.devices))
        return dra_pb.NodePrepareResourceResponse(devices=self._devices(prepared))

    async def _unprepare_one(self, claim: dra_pb.Claim) -> dra_pb.NodeUnprepareResourceResponse:
        what = f"ResourceClaim {claim.namespace}/{claim.name} (uid {claim.uid})"
        if problem := state.uid_problem(claim.uid):
            logger.warning("unprepare %s: refused: %s", what, problem)
            return dra_pb.NodeUnprepareResourceResponse(error=problem)
        async with self._lock(claim.uid):
            try:
                if self.store.remove(claim.uid):
                    logger.info("unprepare %s: released", what)
                    if self.on_release is not None:
                        self.on_release(claim.uid)
                else:
                    logger.info("unprepare %s: was not prepared here (or already released): nothing to do",
                                what)
            except state.StateError as exc:
                logger.warning("unprepare %s: failed: %s", what, exc)
                return dra_pb.NodeUnprepareResourceResponse(error=str(exc))
        self._locks.pop(claim.uid, None)
        return dra_pb.NodeUnprepareResourceResponse()


__all__ = ["ClaimReader", "Plugin", "Registration"]
