"""What a node's ResourceSlices should say, and the writes that make them say it (pure).

One pool per node, named after the node. One device per PodNetwork the node offers (KEP-3698
Phase II requirement 18: the node's `multinetwork.x-k8s.io/podnetworks` annotation, absent for
every network, read as the scheduler extender reads it), that is Ready and not being deleted.
Each device carries the PodNetwork's name and provider as attributes and allows many
allocations at once (`allowMultipleAllocations`, gate DRAConsumableCapacity, beta and on in
v1.36): one device serves every pod of the node on that network.

`plan` compares the slices the API holds with those wanted and returns the writes; a pool's
slices are rewritten together under a new `pool.generation` when anything changed, because the
scheduler ignores slices of a pool's older generations (ResourcePool v1 `generation`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from bridge.dra.driver import views
from bridge.dra.objects import API_VERSION
from bridge.dracontract import names
from podnetwork.ground import constants, core
from podnetwork.ground.core import Node
from podnetwork.kep import api, conditions, plans

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Offer:
    """A device of the node's pool: the PodNetwork it stands for."""

    device: str
    podnetwork: str
    provider: str | None
    """None: the PodNetwork names no provider, and its device has no `provider` attribute."""


@dataclass(frozen=True)
class Left:
    """A PodNetwork that has no device on the node, and why (for the log)."""

    podnetwork: str
    reason: str


def offers(podnetworks: Iterable[Mapping[str, Any]],
           node: Mapping[str, Any] | None) -> tuple[list[Offer], list[Left]]:
    """The devices `node` offers (sorted by device name), and the PodNetworks left out with why. No
    node (not seen yet, or deleted): no device at all."""
    if node is None:
        return [], []
    try:
        offered = plans.node_offers(Node.model_validate(node))
    except ValidationError:
        offered = frozenset()
    annotation = constants.NODE_PODNETWORKS_ANNOTATION
    out: dict[str, Offer] = {}
    left: list[Left] = []
    for obj in podnetworks:
        head = core.head_of(obj)
        name = (head.metadata.name if head else None) or ""
        try:
            pn = api.parse(obj, constants.PODNETWORK_KIND)
        except (ValidationError, ValueError) as exc:
            left.append(Left(name, f"does not parse as a PodNetwork: {str(exc).splitlines()[0]}"))
            continue
        assert isinstance(pn, api.PodNetwork)
        if offered is not None and name not in offered:
            left.append(Left(name, f"the node's {annotation} annotation does not list it"))
        elif pn.metadata.deletion_timestamp:
            left.append(Left(name, "it is being deleted"))
        elif not conditions.is_ready(pn):
            ready = conditions.find(pn, "Ready")
            why = f"{ready.reason}: {ready.message}" if ready else "no Ready condition yet"
            left.append(Left(name, f"it is not Ready ({why})"))
        elif max(len(name), len(pn.spec.provider or "")) > names.MAX_ATTRIBUTE_STRING:
            left.append(Left(name, f"its name or provider is longer than {names.MAX_ATTRIBUTE_STRING} "
                             "characters, the most a device attribute holds"))
        else:
            device = names.device_name(name)
            if device in out:  # two names with one digest: refuse both rather than mix them up
                other = out[device].podnetwork
                left.append(Left(name, f"its device name {device} is that of PodNetwork {other}"))
                continue
            out[device] = Offer(device, name, pn.spec.provider)
    return [out[d] for d in sorted(out)], left


def _device(offer: Offer) -> dict[str, Any]:
    attributes = {names.ATTRIBUTE_PODNETWORK: {"string": offer.podnetwork}}
    if offer.provider is not None:
        attributes[names.ATTRIBUTE_PROVIDER] = {"string": offer.provider}
    return {"name": offer.device, "attributes": attributes, "allowMultipleAllocations": True}


def specs(offered: list[Offer], *, node: str, driver: str) -> dict[str, dict[str, Any]]:
    """The spec of each slice of the node's pool by slice name, without `pool.generation`: at most
    `MAX_DEVICES_PER_SLICE` devices each, and one slice with none when the node offers nothing (an
    empty pool says "nothing here" where no pool says "not published yet")."""
    chunks = [offered[i:i + names.MAX_DEVICES_PER_SLICE]
              for i in range(0, len(offered), names.MAX_DEVICES_PER_SLICE)] or [[]]
    return {names.slice_name(node, driver, i): {
        "driver": driver, "nodeName": node, "pool": {"name": node, "resourceSliceCount": len(chunks)},
        "devices": [_device(o) for o in chunk]} for i, chunk in enumerate(chunks)}


def _projected(spec: views.ResourceSliceSpec | None) -> views.ResourceSliceSpec | None:
    """The fields of a slice's spec this driver sets (the API server may add defaults to the rest):
    the view drops unknown keys; `pool.generation` is compared apart."""
    if spec is None:
        return None
    return spec.model_copy(update={"pool": spec.pool.model_copy(update={"generation": None})})


def _read(spec: object) -> views.ResourceSliceSpec | None:
    """A slice's spec as served; None when it does not read as one (it is then rewritten)."""
    try:
        return views.ResourceSliceSpec.model_validate(spec if spec is not None else {})
    except ValidationError:
        return None


@dataclass(frozen=True)
class Write:
    """One write: `create` a body, `update` (replace the spec of) `name`, or `delete` `name`."""

    verb: str
    name: str
    body: dict[str, Any] | None = None


def plan(observed: Mapping[str, Mapping[str, Any]], wanted: Mapping[str, Mapping[str, Any]]) -> list[Write]:
    """The writes that turn `observed` (the driver's slices on the node, by name, as the API serves
    them) into `wanted` (`specs`): none when each wanted slice holds its spec and all share one
    generation; else every wanted slice written under the next generation, extra ones deleted."""
    specs_now: dict[str, views.ResourceSliceSpec | None] = {}
    for n, o in observed.items():
        try:
            specs_now[n] = views.ResourceSlice.model_validate(o).spec
        except ValidationError:
            specs_now[n] = None
    generations = {(s.pool.generation if s else None) or 0 for s in specs_now.values()}
    if (set(specs_now) == set(wanted) and len(generations) == 1
            and all(specs_now[n] is not None and _projected(specs_now[n]) == _projected(_read(w))
                    for n, w in wanted.items())):
        return []
    next_generation = max(generations, default=0) + 1
    writes: list[Write] = []
    for name, spec in wanted.items():
        pooled = {**spec, "pool": {**spec["pool"], "generation": next_generation}}
        body = {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": {"name": name},
                "spec": pooled}
        writes.append(Write("update" if name in specs_now else "create", name, body))
    writes += [Write("delete", name) for name in sorted(set(specs_now) - set(wanted))]
    return writes


__all__ = ["Left", "Offer", "Write", "offers", "plan", "specs"]
