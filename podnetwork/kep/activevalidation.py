"""KEP "Active validations": what stops a pod's networks from being used now, in one wording.

A pod's networks pass the static rules (`podnetwork.kep.validation`) at admission; whether
the objects they name exist and are Ready can only be told later, against the cluster.
Two components hold a pod that fails these checks and say why: the scheduler extender
(FailedScheduling, `scheduler_plugin.decision`) and the NPWG bridge, which holds a new pod
behind its scheduling gate before kube-scheduler ever sees it (an Event on the pod,
`bridge.operator.controller`). Both read the problems from `resolve`, so a user reads the
same sentence whichever holds the pod (KEP: "These errors will be presented as Pod Events").

Pure: the callers hand in what they know of the objects, as `Readiness` and `AttachmentState`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from podnetwork.ground import constants
from podnetwork.kep import conditions
from podnetwork.kep.api import KepObject, Network


@dataclass(frozen=True, slots=True)
class Readiness:
    """The Ready condition of a PodNetwork or PodNetworkAttachment, as the checks read it."""

    ready: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class AttachmentState:
    """A PodNetworkAttachment: which PodNetwork it attaches to, and whether it is Ready."""

    pod_network_name: str
    readiness: Readiness


def readiness_of(obj: KepObject) -> Readiness:
    """Read the Ready condition; a missing one or a terminating object is not Ready."""
    if obj.metadata.deletion_timestamp:
        return Readiness(False, "Terminating", "the object is being deleted")
    cond = conditions.find(obj, constants.ConditionType.READY)
    if cond is None:
        return Readiness(False, "ConditionMissing", "the controller has not set the Ready condition yet")
    return Readiness(cond.status == constants.ConditionStatus.TRUE.value, cond.reason, cond.message)


def not_found(kind: str, name: str) -> str:
    return f'{kind.lower()} "{name}" not found'


def not_ready(kind: str, name: str, reason: str, message: str) -> str:
    """The object's Ready condition, copied: `<reason>: <message>` (no dangling colon)."""
    detail = f"{reason}: {message}" if message else reason or "no reason given"
    return f'{kind.lower()} "{name}" is not Ready: {detail}'


def resolve(
    namespace: str,
    nets: Sequence[Network],
    podnetworks: Mapping[str, Readiness],
    attachments: Mapping[tuple[str, str], AttachmentState],
) -> tuple[list[str], list[str]]:
    """The PodNetwork names a pod of `namespace` needs, in its order, and every problem with them:
    a missing or not-Ready PodNetwork or attachment, and a PodNetwork reached twice (KEP "Active
    validations": "a single Pod references a given PodNetwork only 1 time", attachments included).
    """
    needed: list[str] = []
    problems: list[str] = []
    referrer: dict[str, str] = {}
    for net in nets:
        kind, name = net.reference
        attachment_ready = True
        if kind == constants.ATTACHMENT_KIND:
            attachment = attachments.get((namespace, name))
            if attachment is None:
                problems.append(not_found(kind, name))
                continue
            attachment_ready = attachment.readiness.ready
            if not attachment_ready:
                r = attachment.readiness
                problems.append(not_ready(kind, name, r.reason, r.message))
            pn_name, via = attachment.pod_network_name, f'podnetworkattachment "{name}"'
        else:
            pn_name, via = name, f'podNetworkName "{name}"'
        pn = podnetworks.get(pn_name)
        suffix = "" if kind == constants.PODNETWORK_KIND else f" (referenced by {via})"
        if pn is None:
            problems.append(not_found(constants.PODNETWORK_KIND, pn_name) + suffix)
        elif not pn.ready and attachment_ready:
            # A not-Ready attachment already says PodNetworkNotReady: say it once. A Ready one
            # over a not-Ready network is stale (the controller has not caught up): hold the pod.
            problems.append(not_ready(constants.PODNETWORK_KIND, pn_name, pn.reason, pn.message))
        if pn_name in referrer:
            problems.append(
                f'podnetwork "{pn_name}" is referenced more than once: by {referrer[pn_name]} and by {via}'
            )
            continue
        referrer[pn_name] = via
        needed.append(pn_name)
    return needed, problems


__all__ = ["AttachmentState", "Readiness", "not_found", "not_ready", "readiness_of", "resolve"]
