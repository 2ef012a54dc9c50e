"""The cluster `default` PodNetwork and each node's view of it (pure decisions).

KEP-3698 "Default PodNetwork": the controller creates a PodNetwork named
`default` ("Automatic creation") unless told not to ("Manual creation"); until
it exists, every node reports "Default PodNetwork not found". "Network
Migration" lets a node name another PodNetwork as its default; until Node
grows the KEP's `overrideDefaultPodNetwork` field, the node annotation
`multinetwork.x-k8s.io/default-podnetwork` carries it.

Nodes get the condition `DefaultPodNetworkReady`: True when their default
PodNetwork exists and is Ready, False otherwise.
"""

from __future__ import annotations

from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.core import HasMetadata, Node, ObjectMeta
from podnetwork.kep import conditions
from podnetwork.kep.api import PodNetwork, PodNetworkSpec

#: Node condition type reporting the default PodNetwork's presence and readiness.
NODE_CONDITION = "DefaultPodNetworkReady"
REASON_READY = "DefaultPodNetworkReady"
#: KEP "Default PodNetwork": "Default PodNetwork not found".
REASON_NOT_FOUND = "DefaultPodNetworkNotFound"
REASON_NOT_READY = "DefaultPodNetworkNotReady"
NOT_FOUND_MESSAGE = "default PodNetwork not found in API"


def podnetwork(provider: str | None = None) -> dict[str, Any]:
    """The `default` PodNetwork the controller creates ("Automatic creation"), as the body to POST.

    It has no parametersRefs, so it is Ready as soon as the controller sees it:
    it stands for the network the cluster was installed with.
    """
    return PodNetwork(
        metadata=ObjectMeta(name=constants.DEFAULT_PODNETWORK),
        spec=PodNetworkSpec(enabled=True, provider=provider),
    ).to_dict()


def node_default_name(node: HasMetadata) -> str:
    """The PodNetwork a node treats as its default: the override annotation, else `default`."""
    override = (node.metadata.annotation(constants.NODE_DEFAULT_PODNETWORK_ANNOTATION) or "").strip()
    return override or constants.DEFAULT_PODNETWORK


def node_desired(name: str, pn: PodNetwork | None) -> conditions.Desired:
    """The node condition for a default PodNetwork called `name` (None when missing)."""
    status = constants.ConditionStatus
    if pn is None or pn.metadata.deletion_timestamp:
        message = (
            NOT_FOUND_MESSAGE
            if name == constants.DEFAULT_PODNETWORK
            else f'default PodNetwork "{name}" (node override) not found in API'
        )
        return conditions.Desired(NODE_CONDITION, status.FALSE, REASON_NOT_FOUND, message)
    if not conditions.is_ready(pn):
        ready = conditions.find(pn, constants.ConditionType.READY)
        why = f" ({ready.reason})" if ready and ready.reason else ""
        return conditions.Desired(
            NODE_CONDITION, status.FALSE, REASON_NOT_READY, f'default PodNetwork "{name}" is not Ready{why}'
        )
    return conditions.Desired(
        NODE_CONDITION, status.TRUE, REASON_READY, f'default PodNetwork "{name}" is Ready'
    )


def node_condition_patch(node: Node, pn: PodNetwork | None, *, now: str) -> dict[str, Any] | None:
    """A strategic-merge patch for the node's status, or None when its condition is right.

    Node conditions are merged by `type` under strategic merge patch, so the
    patch carries only this condition and leaves the kubelet's alone.
    `lastTransitionTime` moves only when the status changes; `lastHeartbeatTime`
    only when something changes, so a steady cluster makes no writes.
    """
    want = node_desired(node_default_name(node), pn)
    existing = [c.to_dict() for c in node.status.conditions or [] if c.type == NODE_CONDITION]
    merged = conditions.merge(existing, [want], now=now, generation=None)
    if merged is None:
        return None
    cond = merged[0]
    cond["lastHeartbeatTime"] = now
    return {"status": {"conditions": [cond]}}


__all__ = [
    "NODE_CONDITION",
    "NOT_FOUND_MESSAGE",
    "REASON_NOT_FOUND",
    "REASON_NOT_READY",
    "REASON_READY",
    "node_condition_patch",
    "node_default_name",
    "node_desired",
    "podnetwork",
]
