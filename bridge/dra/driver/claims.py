"""Which devices of this driver and node a ResourceClaim was allocated (pure).

The kubelet names a claim by namespace, name and uid; the driver reads it from the API and
prepares only what kube-scheduler allocated to it on this node: the results of
`status.allocation.devices.results[]` whose `driver` is this driver and whose `pool` is this
node's (one pool per node, named after it), on a claim whose `status.allocation.nodeSelector`,
when it names nodes by `metadata.name`, names this one. Anything else is a `ClaimProblem`, whose
message the kubelet shows in the pod's events (FailedPrepareDynamicResources).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from bridge.dra.driver import views
from podnetwork.ground import core


class ClaimProblem(ValueError):
    """Why a claim cannot be prepared here; the message is for the pod's events."""


@dataclass(frozen=True)
class Allocated:
    """A device of this driver allocated to the claim, and the claim's requests it serves."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    share_id: str | None = None
    """The result's `shareID`: kube-scheduler gives each allocation of a device that allows many
    (`allowMultipleAllocations`) an id of its own (gate DRAConsumableCapacity)."""


def _selected_nodes(allocation: views.AllocationResult) -> set[str] | None:
    """The nodes `allocation.nodeSelector` names by `metadata.name` (None: it names none that way)."""
    named: set[str] = set()
    for term in allocation.node_selector.node_selector_terms if allocation.node_selector else []:
        for field in term.match_fields:
            if field.key == "metadata.name" and field.operator == "In":
                named |= set(field.values)
    return named or None


def _parse(claim: Mapping[str, Any]) -> views.ResourceClaim:
    try:
        return views.ResourceClaim.model_validate(claim)
    except ValidationError as exc:
        head = core.head_of(claim)
        what = f"ResourceClaim {head.metadata.key}" if head else "the ResourceClaim"
        raise ClaimProblem(f"{what} as the API served it does not read as a resource.k8s.io/v1 "
                           f"ResourceClaim: {str(exc).splitlines()[0]}") from exc


def allocated(claim: Mapping[str, Any], *, uid: str, driver: str, node: str) -> list[Allocated]:
    """This driver's devices on `node` in the allocation of `claim` (the object the API served for
    the kubelet's claim of `uid`), by device in the order of the results. Raises `ClaimProblem`."""
    parsed = _parse(claim)
    meta = parsed.metadata
    what = f"ResourceClaim {meta.namespace}/{meta.name}"
    if meta.uid != uid:
        raise ClaimProblem(f"{what} has uid {meta.uid}, the kubelet asked for {uid}: it was deleted "
                           "and made again since the pod was scheduled")
    allocation = parsed.status.allocation
    if allocation is None or not allocation.model_fields_set:
        raise ClaimProblem(f"{what} is not allocated (no status.allocation): kube-scheduler allocates it "
                           "when it schedules the pod")
    nodes = _selected_nodes(allocation)
    if nodes is not None and node not in nodes:
        raise ClaimProblem(f"{what} is allocated for node(s) {', '.join(sorted(nodes))}, not for {node}")
    by_device: dict[tuple[str, str, str | None], list[str]] = {}
    others: set[str] = set()
    for result in allocation.devices.results:
        if result.driver != driver:
            continue
        pool, device = result.pool, result.device
        if pool != node:
            others.add(f"{pool}/{device}")
            continue
        key = (pool, device, result.share_id or None)
        by_device.setdefault(key, []).append(result.request)
    if others:
        raise ClaimProblem(f"{what} is allocated device(s) {', '.join(sorted(others))} of driver {driver} "
                           f"from another node's pool; this is node {node}")
    if not by_device:
        raise ClaimProblem(f"{what} has no device of driver {driver} allocated: the kubelet should not have "
                           "asked this driver to prepare it")
    return [Allocated(tuple(requests), pool, device, share)
            for (pool, device, share), requests in by_device.items()]


__all__ = ["Allocated", "ClaimProblem", "allocated"]
