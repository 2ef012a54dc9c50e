"""Conditions of PodNetwork and PodNetworkAttachment: pure decisions, no I/O.

The rules are the KEP's tables (KEP-3698 "PodNetwork" > "Status Conditions" and
"PodNetworkAttachment" > "Status Conditions"):

| object | Ready | reason |
| --- | --- | --- |
| PodNetwork | False | `AdministrativelyDisabled` when `spec.enabled` is false |
| PodNetwork | False | `ParamsNotReady` when `parametersRefs` is set and `ParamsReady` is absent or not True |
| PodNetwork | True | `Ready` otherwise |
| PodNetworkAttachment | False | `PodNetworkNotReady` when its PodNetwork is missing or not Ready |
| PodNetworkAttachment | False | `ParamsNotReady` as for PodNetwork |
| PodNetworkAttachment | True | `Ready` otherwise |

`ParamsReady` belongs to the provider (KEP "ParamsReady"): this module reads it
and never writes it. `InUse` (this project's addition, see docs/controller.md)
says who keeps the in-use finalizer on the object.

The entry points, `podnetwork_conditions` and `attachment_conditions`, return
the object's new `status.conditions` list, or `None` when nothing would change,
so a steady cluster makes no writes. `lastTransitionTime` moves only when a
condition's `status` changes (metav1.Condition semantics).

The decisions read the models of `podnetwork.kep.api`, parsed where objects enter
the program; what they return for the API (a conditions list, a patch) is JSON
with wire names, ready to send.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.constants import ConditionStatus, ConditionType, InUseReason, ReadyReason
from podnetwork.kep.api import Condition, KepObject, PodNetwork, PodNetworkAttachment

#: How many consumers the InUse message names before it only counts.
MESSAGE_SAMPLE = 5


@dataclass(frozen=True)
class Desired:
    """A condition as this controller wants it, before timestamps are decided."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True)
class Usage:
    """Who references an object: counts and a few names for the InUse message.

    `sample` holds at most `MESSAGE_SAMPLE` consumer names, already sorted,
    pods as `ns/name` and attachments as `pna ns/name`.
    """

    pods: int = 0
    attachments: int = 0
    sample: tuple[str, ...] = ()

    @property
    def in_use(self) -> bool:
        return self.pods + self.attachments > 0


NOT_IN_USE = Usage()


class Phase(StrEnum):
    """Lifecycle phases of the KEP ("PodNetwork" > "Lifecycle")."""

    CREATED = "Created"
    """No conditions yet."""
    NOT_READY = "NotReady"
    """Ready is False for a reason other than AdministrativelyDisabled."""
    READY = "Ready"
    """Ready is True and nothing references the object."""
    IN_USE = "InUse"
    """Ready or not, pods or attachments reference the object (deletion waits)."""
    DISABLED = "Disabled"
    """`spec.enabled` is false (Ready is False, AdministrativelyDisabled)."""


def now() -> str:
    """The current time as metav1.Time prints it (RFC 3339, seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find(obj: KepObject | None, type_: str) -> Condition | None:
    """The condition of `type_` on an object, or None."""
    if obj is None or obj.status is None:
        return None
    return obj.status.condition(type_)


def is_true(obj: KepObject | None, type_: str) -> bool:
    cond = find(obj, type_)
    return cond is not None and cond.status == ConditionStatus.TRUE.value


def is_ready(obj: KepObject | None) -> bool:
    """Whether the object's Ready condition is True (False when absent)."""
    return is_true(obj, ConditionType.READY)


def _params_not_ready(obj: KepObject) -> Desired | None:
    if not obj.spec.parameters_refs:
        return None
    params = find(obj, ConditionType.PARAMS_READY)
    if params is None:
        message = (
            f"parametersRefs is set and the provider has not reported {ConditionType.PARAMS_READY} yet"
        )
    elif params.status == ConditionStatus.TRUE.value:
        return None
    else:
        detail = ": ".join(p for p in (params.reason, params.message) if p)
        message = f"{ConditionType.PARAMS_READY} is {params.status}"
        if detail:
            message += f" ({detail})"
    return Desired(ConditionType.READY, ConditionStatus.FALSE, ReadyReason.PARAMS_NOT_READY, message)


def podnetwork_ready(pn: PodNetwork) -> Desired:
    """The Ready condition a PodNetwork should have (KEP "PodNetwork" > "Status Conditions")."""
    if not pn.spec.enabled:
        return Desired(
            ConditionType.READY,
            ConditionStatus.FALSE,
            ReadyReason.ADMINISTRATIVELY_DISABLED,
            "spec.enabled is false: no new pods may attach",
        )
    not_ready = _params_not_ready(pn)
    if not_ready is not None:
        return not_ready
    return Desired(ConditionType.READY, ConditionStatus.TRUE, ReadyReason.READY, "PodNetwork is ready")


def attachment_ready(pna: PodNetworkAttachment, podnetwork: PodNetwork | None) -> Desired:
    """The Ready condition of a PodNetworkAttachment, given its PodNetwork (None when missing).

    KEP "PodNetworkAttachment" > "Status Conditions": Ready needs the referenced
    PodNetwork's Ready to be True, then the attachment's own ParamsReady.
    """
    name = pna.spec.pod_network_name
    if podnetwork is None:
        return Desired(
            ConditionType.READY,
            ConditionStatus.FALSE,
            ReadyReason.PODNETWORK_NOT_READY,
            f'PodNetwork "{name}" not found',
        )
    if not is_ready(podnetwork):
        ready = find(podnetwork, ConditionType.READY)
        if ready is None:
            detail = "it has no Ready condition yet"
        else:
            detail = f"its Ready condition is {ready.status}"
            if ready.reason:
                detail += f" ({ready.reason})"
        return Desired(
            ConditionType.READY,
            ConditionStatus.FALSE,
            ReadyReason.PODNETWORK_NOT_READY,
            f'PodNetwork "{name}" is not Ready: {detail}',
        )
    not_ready = _params_not_ready(pna)
    if not_ready is not None:
        return not_ready
    return Desired(
        ConditionType.READY, ConditionStatus.TRUE, ReadyReason.READY, "PodNetworkAttachment is ready"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def in_use(usage: Usage) -> Desired:
    """The InUse condition: True while pods or attachments reference the object.

    The message names up to `MESSAGE_SAMPLE` consumers and the counts, e.g.
    `in use by 3 pods: ns/a, ns/b, ns/c`, so `kubectl get` shows why a delete waits.
    """
    if not usage.in_use:
        return Desired(
            ConditionType.IN_USE,
            ConditionStatus.FALSE,
            InUseReason.NOT_IN_USE,
            "not referenced by any running pod or PodNetworkAttachment",
        )
    counts = []
    if usage.attachments:
        counts.append(_plural(usage.attachments, "attachment"))
    if usage.pods:
        counts.append(_plural(usage.pods, "pod"))
    total = usage.pods + usage.attachments
    names = ", ".join(usage.sample[:MESSAGE_SAMPLE])
    more = total - len(usage.sample[:MESSAGE_SAMPLE])
    if more > 0 and names:
        names += f" and {more} more"
    message = f"in use by {' and '.join(counts)}" + (f": {names}" if names else "")
    return Desired(ConditionType.IN_USE, ConditionStatus.TRUE, InUseReason.IN_USE, message)


def merge(
    existing: Sequence[Mapping[str, Any]],
    desired: Sequence[Desired],
    *,
    now: str,
    generation: int | None,
) -> list[dict[str, Any]] | None:
    """Merge desired conditions into an existing list; None when nothing changes.

    Conditions of other types (the provider's ParamsReady, anyone else's) are
    kept as they are and where they are. A desired condition keeps its old
    `lastTransitionTime` unless its `status` changes; `observedGeneration` is
    set to `generation` (when known).
    """
    result = [dict(c) for c in existing]
    changed = False
    for want in desired:
        new: dict[str, Any] = {
            "type": want.type,
            "status": str(want.status),
            "reason": str(want.reason),
            "message": want.message,
        }
        if generation is not None:
            new["observedGeneration"] = generation
        index = next((i for i, c in enumerate(result) if c.get("type") == want.type), None)
        if index is None:
            new["lastTransitionTime"] = now
            result.append(new)
            changed = True
            continue
        old = result[index]
        same_status = old.get("status") == new["status"] and bool(old.get("lastTransitionTime"))
        new["lastTransitionTime"] = old["lastTransitionTime"] if same_status else now
        if any(old.get(k) != v for k, v in new.items()):
            result[index] = new
            changed = True
    return result if changed else None


def holds(existing: Condition | None, want: Desired, *, generation: int | None) -> bool:
    """Whether `existing` already says what `want` says: `merge` would leave it as it is."""
    return (
        existing is not None
        and bool(existing.last_transition_time)
        and (existing.status, existing.reason, existing.message) == (want.status, want.reason, want.message)
        and (generation is None or existing.observed_generation == generation)
    )


def _wire(obj: KepObject) -> list[dict[str, Any]]:
    return [c.to_dict() for c in (obj.status.conditions or [])] if obj.status else []


def podnetwork_conditions(pn: PodNetwork, usage: Usage, *, now: str) -> list[dict[str, Any]] | None:
    """The PodNetwork's new `status.conditions` (Ready and InUse), or None when unchanged."""
    return merge(
        _wire(pn), [podnetwork_ready(pn), in_use(usage)], now=now, generation=pn.metadata.generation
    )


def attachment_conditions(
    pna: PodNetworkAttachment,
    podnetwork: PodNetwork | None,
    usage: Usage,
    *,
    now: str,
) -> list[dict[str, Any]] | None:
    """The attachment's new `status.conditions` (Ready and InUse), or None when unchanged."""
    return merge(
        _wire(pna),
        [attachment_ready(pna, podnetwork), in_use(usage)],
        now=now,
        generation=pna.metadata.generation,
    )


def status_patch(obj: KepObject, conditions: list[dict[str, Any]]) -> dict[str, Any]:
    """A merge patch for the status subresource.

    A merge patch replaces the whole list, so it carries `resourceVersion`: a
    real API server then refuses it (409) if the provider changed ParamsReady in
    between, instead of losing that change; the next event retries.
    """
    patch: dict[str, Any] = {"status": {"conditions": conditions}}
    if rv := obj.metadata.resource_version:
        patch["metadata"] = {"resourceVersion": rv}
    return patch


def phase(obj: KepObject) -> Phase:
    """The KEP lifecycle phase an object is in, read from its spec and conditions."""
    if isinstance(obj, PodNetwork) and not obj.spec.enabled:
        return Phase.DISABLED
    if is_true(obj, ConditionType.IN_USE) or constants.IN_USE_FINALIZER in (obj.metadata.finalizers or []):
        return Phase.IN_USE
    ready = find(obj, ConditionType.READY)
    if ready is None:
        return Phase.CREATED
    return Phase.READY if ready.status == ConditionStatus.TRUE.value else Phase.NOT_READY


__all__ = [
    "MESSAGE_SAMPLE",
    "NOT_IN_USE",
    "Desired",
    "Phase",
    "Usage",
    "attachment_conditions",
    "attachment_ready",
    "find",
    "holds",
    "in_use",
    "is_ready",
    "merge",
    "now",
    "phase",
    "podnetwork_conditions",
    "podnetwork_ready",
    "status_patch",
]
