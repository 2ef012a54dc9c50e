"""podnetwork.kube.peering reads kopf's peering objects as kopf does: the adapter's guard.

kopf's peering format is kopf's wire format, not its API (podnetwork/kube/peering.py says
why we read it). Here kopf itself takes part in peering against kmock's emulator over real
HTTP and writes its keep-alive; our reading of what it wrote must agree with kopf's own
(`kopf._core.engines.peering.Peer`, imported by this test only). A kopf upgrade that changes
the fields, their meaning or the liveness rule fails here.
"""

from __future__ import annotations

import datetime
from typing import Any

import kmock
import kopf
import pytest
from kopf._core.engines import peering as kopfs_peering

from podnetwork.kube import peering
from tests.api import kube_emulator
from tests.api.kube_emulator import Emulator, declare_resources, eventually

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(60)]

PEERINGS = "kopf.dev/v1/clusterkopfpeerings"


def status(k: Any) -> dict[str, Any]:
    return dict(dict(k.objects[PEERINGS, None, "podnetwork-controller"]).get("status") or {})


async def test_our_reading_of_kopfs_keepalive_matches_kopfs_own(kmock: Emulator) -> None:
    declare_resources(kmock)
    kmock.resources[PEERINGS] = kmock_resource()
    kmock.objects[PEERINGS, None, "podnetwork-controller"] = {
        "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
        "metadata": {"name": "podnetwork-controller", "resourceVersion": "0"}}
    identity = peering.identity()
    registry = kopf.OperatorRegistry()
    async with kube_emulator.operator(kmock, registry, standalone=False, peering_name="podnetwork-controller",
                                      priority=7, identity=identity):
        await eventually(lambda: bool(status(kmock).get(identity)))
        written = dict(status(kmock)[identity])
    (ours,) = peering.peers({identity: written})
    theirs = kopfs_peering.Peer(identity=kopfs_peering.Identity(identity), **written)
    assert (ours.priority, ours.lifetime, ours.lastseen) == (theirs.priority, theirs.lifetime, theirs.lastseen)
    assert ours.deadline == theirs.deadline and ours.priority == 7

    now = datetime.datetime.now(datetime.UTC)
    assert ours.alive(now) == (not theirs.is_dead) is True
    # kopf pauses the others while this live peer has the same or a higher priority, not itself.
    assert peering.outranked({identity: written}, "another", 7)
    assert peering.outranked({identity: written}, "another", 6)
    assert not peering.outranked({identity: written}, "another", 8)
    assert not peering.outranked({identity: written}, identity, 7)

    # Past its lifetime the same entry is dead, for kopf and for us.
    stale = {**written, "lastseen": (theirs.lastseen - theirs.lifetime - datetime.timedelta(seconds=1)).isoformat()}
    assert kopfs_peering.Peer(identity=kopfs_peering.Identity(identity), **stale).is_dead
    assert not peering.outranked({identity: stale}, "another", 0)


def kmock_resource() -> Any:
    return kmock.ResourceInfo(kind="ClusterKopfPeering", namespaced=False, verbs={"list", "watch", "get", "patch"})


def test_entries_kopf_removed_or_never_wrote_fully_are_read_with_kopfs_defaults() -> None:
    now = datetime.datetime.now(datetime.UTC)
    # kopf removes a peer by patching its entry to null; a missing lifetime or priority is kopf's default.
    found = peering.peers({"gone": None, "bare": {"lastseen": now.isoformat()}}, now)
    assert [(p.identity, p.priority, p.lifetime.total_seconds()) for p in found] == [("bare", 0, 60.0)]
    theirs = kopfs_peering.Peer(identity=kopfs_peering.Identity("bare"), lastseen=now.isoformat())
    assert (theirs.priority, theirs.lifetime) == (found[0].priority, found[0].lifetime)
