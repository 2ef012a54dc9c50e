"""ParamsReady for the bridge's PodNetworks and attachments: pure decisions.

KEP-3698 "ParamsReady": the provider, owner of the objects named in
`parametersRefs`, says whether they are usable; reasons are the provider's.
The bridge's rules:

- True, `ParametersReady`: a bridge PodNetwork's one NAD exists and its CNI JSON is
  executable; an attachment's NAD override and NetworkSelectionOptions exist and are valid.
- False, `ParametersNotFound`: a referenced NAD or NetworkSelectionOptions does not exist.
- False, `InvalidParameters`: wrong count of references, a PodNetwork's NAD reference
  without namespace, CNI JSON that does not parse, a plugin `type` with a path, invalid
  options, a NAD name NPWG cannot select (3.3).
- False, `UnsupportedParametersKind`: a reference of another group/kind.

Objects of other providers, and attachments without `parametersRefs`, get no
decision (None): the bridge leaves them alone.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from bridge import npwg
from bridge.translate import refs
from bridge.translate.refs import Objects, TranslationError
from podnetwork.ground.constants import ConditionStatus, ConditionType
from podnetwork.kep import conditions
from podnetwork.kep.api import PodNetwork, PodNetworkAttachment


class ParamsReason(StrEnum):
    """Reasons of the ParamsReady condition the bridge writes."""

    READY = "ParametersReady"
    """True: every reference resolves to a valid object."""
    NOT_FOUND = "ParametersNotFound"
    """False: a referenced object does not exist."""
    INVALID = "InvalidParameters"
    """False: a referenced object, or the references themselves, are invalid."""
    UNSUPPORTED_KIND = "UnsupportedParametersKind"
    """False: a reference names a group/kind the bridge does not read."""


_REASONS = {
    refs.Reason.PARAMETERS_NOT_FOUND: ParamsReason.NOT_FOUND,
    refs.Reason.INVALID_PARAMETERS: ParamsReason.INVALID,
    refs.Reason.UNSUPPORTED_PARAMETERS_KIND: ParamsReason.UNSUPPORTED_KIND,
}



def _false(exc: TranslationError) -> conditions.Desired:
    reason = _REASONS.get(exc.reason, ParamsReason.INVALID)
    return conditions.Desired(ConditionType.PARAMS_READY, ConditionStatus.FALSE, reason, str(exc))


def podnetwork_params(podnetwork: PodNetwork, objects: Objects) -> conditions.Desired | None:
    """ParamsReady of a PodNetwork, or None when its provider is not the bridge."""
    if not refs.is_bridge(podnetwork):
        return None
    try:
        key, _ = refs.podnetwork_nad(podnetwork, objects)
    except TranslationError as exc:
        return _false(exc)
    return conditions.Desired(
        ConditionType.PARAMS_READY,
        ConditionStatus.TRUE,
        ParamsReason.READY,
        f"{refs.describe(npwg.NAD_KIND, key[1], key[0])} is usable",
    )


def attachment_params(
    attachment: PodNetworkAttachment, podnetwork: PodNetwork | None, objects: Objects
) -> conditions.Desired | None:
    """ParamsReady of a PodNetworkAttachment, given its PodNetwork (None when missing).

    None when the PodNetwork is missing or not the bridge's (its provider is
    unknown, so the attachment is not ours) or when the attachment has no
    `parametersRefs` (KEP: Ready then does not depend on ParamsReady).
    """
    if podnetwork is None or not refs.is_bridge(podnetwork):
        return None
    if not attachment.spec.parameters_refs:
        return None
    try:
        params = refs.attachment_params(attachment, objects)
    except TranslationError as exc:
        return _false(exc)
    parts = []
    if params.nad is not None:
        parts.append(refs.describe(npwg.NAD_KIND, params.nad[1], params.nad[0]))
    if params.options_key is not None:
        parts.append(refs.describe(refs.OPTIONS_KIND, params.options_key[1], params.options_key[0]))
    return conditions.Desired(
        ConditionType.PARAMS_READY,
        ConditionStatus.TRUE,
        ParamsReason.READY,
        f"{' and '.join(parts)} {'are' if len(parts) > 1 else 'is'} usable",
    )


def conditions_after(
    obj: PodNetwork | PodNetworkAttachment, desired: conditions.Desired, *, now: str
) -> list[dict[str, Any]] | None:
    """The object's `status.conditions` with ParamsReady set, or None when unchanged."""
    existing = [c.to_dict() for c in (obj.status.conditions or [])] if obj.status is not None else []
    return conditions.merge(existing, [desired], now=now, generation=obj.metadata.generation)


__all__ = [
    "ParamsReason",
    "attachment_params",
    "conditions_after",
    "podnetwork_params",
]
