"""What the bridge does, decided from what it knows: planners that return actions. Pure.

Each planner reads a pod (or a PodNetwork or attachment) and the objects the bridge
holds in memory, and returns a value listing what to do; `bridge.operator.controller.Bridge`
applies it (on a cluster, under kopf; in the demo, over its store). The rules are in
`bridge.operator.pods` and `bridge.translate`; this module says which apply, and in
what order.

A pod meets the bridge twice:

- before it is scheduled, `selection`: its NPWG selection `k8s.v1.cni.cncf.io/networks`
  once every object it names is Ready, the scheduling gate removed in the same write
  (or alone, when the bridge will write none), and the Events that say why it waits
  (`SchedulingGated`), what NPWG cannot express (`TranslationWarning`), a missing
  gateway (`DefaultGatewayMissing`) or a hand-written selection that disagrees
  (`SelectionDisagrees`). While it runs, the same plan follows a change of its
  networks (hot-plug);
- after the agent attached it, `reverse_status`: `multinetwork.x-k8s.io/pod-ips` and the
  attachment data `multinetwork.x-k8s.io/attachments` from `network-status`.

`params_action` plans ParamsReady on the bridge's PodNetworks and attachments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bridge import npwg, translate
from bridge.operator import pods
from bridge.translate import Translation, params
from podnetwork.ground import constants
from podnetwork.ground.actions import Patch
from podnetwork.ground.core import Pod
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import conditions
from podnetwork.kep.api import Condition

#: (kind, namespace, name) of a PodNetwork ("" namespace) or attachment.
Ref = tuple[str, str, str]


@dataclass
class BridgeSettings:
    """What `podnetwork bridge` was asked to do."""

    params_ready: bool = True
    """Write ParamsReady on the bridge's PodNetworks and attachments. Default on."""
    write_selection: bool = True
    """Write `k8s.v1.cni.cncf.io/networks` on pods. Off when a mutating webhook or the
    CNI agent translates on its own and nothing else needs the annotation."""
    write_pod_ips: bool = True
    """Write `multinetwork.x-k8s.io/pod-ips` from `network-status`. Default on."""
    write_attachments: bool = True
    """Write `multinetwork.x-k8s.io/attachments` (the attachment data for the workload, KEP
    Phase II requirement 17) from `network-status`, in the same write. Default on."""
    dra_driver: str | None = None
    """`--dra-claims DRIVER`: admission adds DRA claims to new pods, and the controller makes the
    ResourceClaimTemplates they come from (`bridge.dracontract.claims`). Default off."""


# --- before scheduling: the selection and the gate ---------------------------------------


@dataclass(frozen=True)
class Wait:
    """The pod waits for its networks, and why (logged); it is planned again when an object changes."""

    reason: str


@dataclass(frozen=True)
class Release:
    """Remove the bridge's scheduling gate from a pod it will write no selection for."""

    patch: Patch
    """From the pod's resourceVersion, keeping the other gates."""
    why: str


@dataclass(frozen=True)
class WriteSelection:
    """Write the pod's selection (or remove it), and the gate with it, from its resourceVersion; or only
    remove the gate when the selection already says what the translation says."""

    patch: Patch

    @property
    def selection(self) -> str | None:
        """The selection written (None: removed), or None when the patch writes no selection."""
        annotations = self.patch.body.get("metadata", {}).get("annotations", {})
        value = annotations.get(npwg.NETWORKS_ANNOTATION)
        return value if isinstance(value, str) else None

    @property
    def writes_selection(self) -> bool:
        return "annotations" in self.patch.body.get("metadata", {})

    @property
    def removes_gate(self) -> bool:
        return "spec" in self.patch.body


@dataclass(frozen=True)
class PostEvent:
    """A Warning Event on the pod (each one posted once)."""

    reason: str
    message: str
    while_gated: bool = False
    """Posted only if the pod still carries the gate once the writes before it applied."""


PodStep = Wait | Release | WriteSelection | PostEvent


@dataclass(frozen=True)
class PodActions:
    """What the bridge does about one pod before it is scheduled (and, while it runs, about a
    change of its networks): the steps in order, whether it waits, and its translation."""

    steps: tuple[PodStep, ...] = ()
    waits: bool | None = False
    """Kept to be planned again when a PodNetwork, attachment, NAD or options object changes
    (True), forgotten (False), or left as it was (None: under `--no-selection`)."""
    translation: Translation | None = None
    """The pod's translation, for `reverse_status`; None when it has none (no reverse status)."""
    ignored: str | None = None
    """Why the pod's networks annotation was not read (logged at debug: admission reports it)."""


def _pod_patch(pod: Pod, body: Mapping[str, Any]) -> Patch:
    return Patch("Pod", pod.metadata.name or "", pod.metadata.namespace or "", body)


def _release(pod: Pod, why: str) -> tuple[Release, ...]:
    body = pods.release_patch(pod)
    return () if body is None else (Release(_pod_patch(pod, body), why),)


def _gated(messages: list[str]) -> tuple[PostEvent, ...]:
    return tuple(PostEvent(pods.GATED_REASON, message, while_gated=True) for message in messages)


def selection(pod: Pod, objects: translate.Objects, settings: BridgeSettings) -> PodActions:
    """The bridge's actions for a pod before it is scheduled (module docstring).

    A pod that ended, is being deleted or runs on the host network holds nothing. A pod
    whose networks cannot be read or that names none loses the gate (the bridge writes
    it no selection). A translation that fails waits, says why while the pod is gated,
    and releases the gate for good when a network is another provider's. Otherwise the
    translation's notices are posted while the selection is still the bridge's to write,
    and the selection is written once every object the pod names is Ready.
    """
    namespace = pod.metadata.namespace or ""
    ended = pod.status.phase in ("Succeeded", "Failed") or bool(pod.metadata.deletion_timestamp)
    if ended or pod.spec.host_network:
        return PodActions()
    try:
        nets = pods.declared(pod)
    except InvalidObject as exc:
        return PodActions(_release(pod, "its networks annotation is invalid"), ignored=str(exc))
    if nets is None:
        return PodActions(_release(pod, "it names no networks"))
    try:
        translation = pods.translation(pod, nets, namespace, objects)
    except translate.TranslationError as exc:
        released = _release(pod, str(exc)) if exc.reason is translate.Reason.NOT_BRIDGE_PROVIDER else ()
        gated = _gated(pods.gate_messages(nets, namespace, objects, exc))
        return PodActions((Wait(str(exc)), *released, *gated), waits=True)
    if not settings.write_selection:
        released = _release(pod, "the bridge runs with --no-selection")
        return PodActions(released, waits=None, translation=translation)
    steps: list[PodStep] = []
    if pods.ours_to_write(pod):
        # What NPWG cannot express, and a refusal, while it still matters: once
        # attached, the selection was read. Each is posted (and logged) once.
        steps += [PostEvent(reason, message) for reason, message in pods.notices(translation)]
    blockers = pods.not_ready(nets, namespace, objects)
    # An attached pod waits too: a network added to it (hot-plug) is selected once Ready.
    if blockers:
        steps += [Wait("; ".join(blockers)), *_gated(pods.gate_notices(pod, nets, namespace, objects))]
        return PodActions(tuple(steps), waits=True, translation=translation)
    decision = pods.selection(pod, translation)
    if decision.patch is not None:
        steps.append(WriteSelection(_pod_patch(pod, decision.patch)))
    if decision.conflict is not None:
        steps.append(PostEvent(pods.CONFLICT_REASON, decision.conflict))
    # A refused selection (a gateway missing) waits: a change of the NAD re-evaluates it.
    return PodActions(tuple(steps), waits=decision.refused is not None, translation=translation)


# --- after the agent: the reverse status -------------------------------------------------

Digests = tuple[str, dict[str, str]]
"""What the bridge last wrote on a pod from its network-status: the status's digest, and the
digest of each annotation value written."""


@dataclass(frozen=True)
class ReverseStatus:
    """What `network-status` says back in KEP terms, to write on the pod."""

    patch: Patch | None = None
    """`pod-ips` and `attachments` in one merge patch; None when nothing is to be written."""
    written: Digests | None = None
    """What the bridge remembers once the patch applied."""
    problem: str | None = None
    """The network-status cannot be read (logged as a warning; nothing is written)."""

    @property
    def keys(self) -> list[str]:
        return list(self.patch.body.get("metadata", {}).get("annotations", {}) if self.patch else {})


def reverse_status(pod: Pod, translation: Translation, settings: BridgeSettings,
                   last: Digests | None) -> ReverseStatus:
    """The pod's `pod-ips` and attachment data from its `network-status`
    (`pods.reverse_status_patch`), unless `last` shows this copy of the pod is older than
    what the bridge already wrote (a watch replaying kopf's listing, a reconnect)."""
    if not (settings.write_pod_ips or settings.write_attachments):
        return ReverseStatus()
    try:
        body = pods.reverse_status_patch(pod, translation, pod_ips=settings.write_pod_ips,
                                         attachment_data=settings.write_attachments)
    except ValueError as exc:
        return ReverseStatus(problem=str(exc))
    if body is None:
        return ReverseStatus()
    # Digests, not texts: one entry per pod stays small whatever the status holds.
    status = pods.digest(pod.metadata.annotation(npwg.NETWORK_STATUS_ANNOTATION) or "")
    changes: dict[str, str] = body["metadata"]["annotations"]
    digests = {key: pods.digest(value) for key, value in changes.items()}
    if last is not None and last[0] == status and digests.items() <= last[1].items():
        return ReverseStatus()  # an older copy of the pod: this was written already
    before = last[1] if last is not None and last[0] == status else {}
    return ReverseStatus(_pod_patch(pod, body), (status, {**before, **digests}))


# --- ParamsReady -------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteParams:
    """ParamsReady on a bridge PodNetwork or attachment (status subresource, from its resourceVersion)."""

    ref: Ref
    patch: Patch
    desired: conditions.Desired
    before: Condition | None
    """ParamsReady as it was (None: absent)."""


def params_action(ref: Ref, objects: translate.Objects, *, now: str) -> WriteParams | None:
    """ParamsReady to write on `ref` (`bridge.translate.params`), or None: not the bridge's, gone,
    or already right."""
    kind, namespace, name = ref
    body: translate.PodNetwork | translate.PodNetworkAttachment | None
    if kind == constants.PODNETWORK_KIND:
        body = objects.podnetworks.get(name)
        desired = None if body is None else params.podnetwork_params(body, objects)
    else:
        body = objects.attachments.get((namespace, name))
        desired = None if body is None else params.attachment_params(
            body, objects.podnetworks.get(body.spec.pod_network_name), objects)
    if body is None or desired is None:
        return None
    new = params.conditions_after(body, desired, now=now)
    if new is None:
        return None
    patch = Patch(kind, name, namespace or None, conditions.status_patch(body, new), status=True)
    return WriteParams(ref, patch, desired, conditions.find(body, constants.ConditionType.PARAMS_READY))


__all__ = [
    "BridgeSettings",
    "Digests",
    "PodActions",
    "PodStep",
    "PostEvent",
    "Ref",
    "Release",
    "ReverseStatus",
    "Wait",
    "WriteParams",
    "WriteSelection",
    "params_action",
    "reverse_status",
    "selection",
]
