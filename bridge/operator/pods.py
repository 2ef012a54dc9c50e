"""What the bridge writes on a pod, decided from the pod and its translation. Pure.

- The selection: `k8s.v1.cni.cncf.io/networks` from the pod's KEP networks, once
  every PodNetwork and attachment it names is Ready, so that any NPWG
  implementation (Multus, or this project's agent) executes it. The bridge marks
  what it wrote with `bridge.multinetwork.x-k8s.io/networks-written` (a digest of
  the value), so it can tell its own annotation from a hand-written one: a
  hand-written selection that disagrees is never overwritten, it is reported in
  an Event. A pod whose translation is only the default network gets no
  annotation (NPWG 4: the annotation selects secondary networks). The bridge's
  own selection follows the KEP networks also once the pod is attached (it has
  `network-status`): that is hot-plug (KEP Story #8, Req 24), and the node's
  agent attaches or detaches what changed (`bridge.agent.daemon.hotplug`, as Multus's
  dynamic networks controller follows the same annotation). A selection that
  becomes empty is removed, with its marker.
- The reverse status: `multinetwork.x-k8s.io/pod-ips` and the attachment data
  `multinetwork.x-k8s.io/attachments` from `network-status`, in one write
  (see `bridge.translate.podips`, `reverse_status_patch`).
- The scheduling gate `multinetwork.x-k8s.io/npwg-selection` (Pod
  spec.schedulingGates, GA in Kubernetes 1.30): admission (`admission_patch`)
  adds it to a new pod that names a bridge network whose selection cannot be
  written yet; the bridge removes it in the same write that sets the selection
  (`selection`), or alone once it knows it will write nothing (`release_patch`),
  so kube-scheduler binds the pod, and kubelet runs CNI ADD, only after the
  selection is on the pod. See docs/bridge.md "The scheduling gate".

- The DRA claims (`claims`, with `podnetwork bridge --dra-claims DRIVER`): admission adds to a
  new pod one `spec.resourceClaims[]` entry per PodNetwork its networks name (not `default`),
  each from the template `bridge.dracontract.claims` names, so kube-scheduler's own DRA
  allocator places the pod on a node whose driver offers every one (docs/dra.md "Claims made
  at admission"). `templates_wanted` says which templates the bridge controller makes for it,
  `unclaimed` which networks a hot-plug added after the claims were fixed.

Every decision reads the typed view `podnetwork.ground.core.Pod`, built where the
pod enters (the operator's handlers, the admission request, the demo's store); the DRA
decisions read `ClaimedPod`, the same view with the pod's `spec.resourceClaims`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bridge import npwg, translate
from bridge.dracontract import claims as dra_claims
from bridge.translate import Translation, podips
from podnetwork.ground import constants
from podnetwork.ground.core import Pod, PodSchedulingGate, PodSpec, pod_event
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import activevalidation, conditions
from podnetwork.kep import networks as kep_networks
from podnetwork.kep.api import Network

#: Pod annotation: digest of the selection value the bridge wrote (see `bridge.translate.networks`).
WRITTEN_ANNOTATION = translate.WRITTEN_ANNOTATION
#: Event reason when a hand-written NPWG selection disagrees with the KEP networks.
CONFLICT_REASON = "SelectionDisagrees"
#: The component name events carry.
COMPONENT = "podnetwork-bridge"
#: Pod scheduling gate (spec.schedulingGates): the pod's NPWG selection is not written yet.
SCHEDULING_GATE = constants.NPWG_SELECTION_GATE
#: Event reason: something of the pod's networks NPWG cannot express (`Translation.warnings`).
TRANSLATION_WARNING_REASON = "TranslationWarning"
#: Event reason: the pod is held behind `SCHEDULING_GATE`, and why (a network missing, not Ready...).
#: kube-scheduler never sees a gated pod, so the extender cannot say it: the gate's holder does.
GATED_REASON = "SchedulingGated"
#: Event reason: isDefaultGW4/6 on a network whose NAD names no gateway of that family
#: (`translate.GatewayGap`): the bridge writes no selection for the pod.
GATEWAY_MISSING_REASON = translate.GATEWAY_MISSING_REASON
#: Event reason: a network added to a pod with bridge-made DRA claims after it was created (`unclaimed`).
NETWORK_WITHOUT_CLAIM_REASON = "NetworkWithoutClaim"


digest = translate.selection_digest


def annotations_of(pod: Pod) -> Mapping[str, str]:
    return pod.metadata.annotations or {}


def declared(pod: Pod) -> list[Network] | None:
    """The networks the pod names in its KEP annotation, or None when it names none.

    Raises `InvalidObject` when the annotation cannot be parsed.
    """
    text = pod.metadata.annotation(constants.NETWORKS_ANNOTATION)
    return None if text is None else kep_networks.parse(text)


def translation(
    pod: Pod, networks: Sequence[Network], namespace: str, objects: translate.Objects
) -> Translation:
    """`translate.translate` of the pod's networks, its attachments held to its admission record
    (`translate.admitted_networks`). Raises `translate.TranslationError`."""
    return translate.translate(networks, namespace, objects, translate.admitted_networks(annotations_of(pod)))


def attached(pod: Pod) -> bool:
    """The NPWG implementation has reported the pod's attachments (NPWG 5)."""
    return npwg.NETWORK_STATUS_ANNOTATION in annotations_of(pod)


def ours_to_write(pod: Pod) -> bool:
    """The bridge's translation decides the pod's selection: the pod is not attached yet and
    has no selection, or only one the bridge wrote. (A hand-written one is the user's.)"""
    if attached(pod):
        return False
    return pod.metadata.annotation(npwg.NETWORKS_ANNOTATION) is None or translate.written_by_bridge(
        annotations_of(pod)
    )


def not_ready(
    networks: Sequence[Network], pod_namespace: str, objects: translate.Objects
) -> list[str]:
    """Why the pod's selection cannot be written yet: one line per object not Ready."""
    problems: list[str] = []
    for net in networks:
        if net.pod_network_attachment_name:
            key = (pod_namespace, net.pod_network_attachment_name)
            pna = objects.attachments.get(key)
            if pna is None or not conditions.is_ready(pna):
                what = translate.describe(constants.ATTACHMENT_KIND, key[1], key[0])
                problems.append(f"{what} is {'missing' if pna is None else 'not Ready'}")
                continue
            pn_name = pna.spec.pod_network_name
        else:
            pn_name = net.pod_network_name or ""
        pn = objects.podnetworks.get(pn_name)
        if not conditions.is_ready(pn):
            what = translate.describe(constants.PODNETWORK_KIND, pn_name)
            problems.append(f"{what} is {'missing' if pn is None else 'not Ready'}")
    return problems


def gate_notices(
    pod: Pod,
    networks: Sequence[Network],
    pod_namespace: str,
    objects: translate.Objects,
    error: translate.TranslationError | None = None,
) -> list[str]:
    """Why a pod the bridge holds behind its scheduling gate waits (`gate_messages`); nothing for
    a pod without the gate: kube-scheduler and the extender speak for it."""
    return gate_messages(networks, pod_namespace, objects, error) if gated(pod) else []


def gate_messages(
    networks: Sequence[Network],
    pod_namespace: str,
    objects: translate.Objects,
    error: translate.TranslationError | None = None,
) -> list[str]:
    """Why a pod behind the bridge's scheduling gate waits: one message per cause.

    Worded as the scheduler extender words its FailedScheduling (`podnetwork.kep.activevalidation`):
    a PodNetwork or attachment missing or not Ready, a PodNetwork reached twice. When those
    checks pass but the translation still fails (`error`: an attachment replaced since
    admission, parameters that cannot be read), its message.
    """
    podnetworks: dict[str, activevalidation.Readiness] = {}
    attachments: dict[tuple[str, str], activevalidation.AttachmentState] = {}
    for net in networks:
        pn_name = net.pod_network_name
        if net.pod_network_attachment_name:
            key = (pod_namespace, net.pod_network_attachment_name)
            pna = objects.attachments.get(key)
            if pna is None:
                continue
            attachments[key] = activevalidation.AttachmentState(
                pna.spec.pod_network_name, activevalidation.readiness_of(pna))
            pn_name = pna.spec.pod_network_name
        pn = objects.podnetworks.get(pn_name or "")
        if pn is not None:
            podnetworks[pn.metadata.name or ""] = activevalidation.readiness_of(pn)
    _, problems = activevalidation.resolve(pod_namespace, networks, podnetworks, attachments)
    if not problems and error is not None and error.reason is not translate.Reason.NOT_BRIDGE_PROVIDER:
        problems = [str(error)]
    return [f"{problem}; the pod stays behind scheduling gate {SCHEDULING_GATE} until its networks exist and "
            "are Ready" for problem in problems]


@dataclass(frozen=True)
class SelectionDecision:
    """What to do about a pod's NPWG selection."""

    patch: dict[str, Any] | None = None
    """Merge patch for the pod (carries resourceVersion), or None."""
    conflict: str | None = None
    """Event message when a hand-written selection disagrees, or None."""
    refused: str | None = None
    """Event message when the bridge will not write the selection (a `GatewayGap`), or None.
    The pod keeps its scheduling gate; a change of its NAD re-evaluates it."""


def refusal(translation: Translation) -> str | None:
    """Why the bridge writes no selection for this translation, or None when it may.

    An element whose `default-route` lacks a gateway of a requested family
    (`translate.GatewayGap`) is never written: Multus treats any `default-route`
    list, `[]` included, as a gateway request, removes the pod's default route of
    that family and adds none (NPWG 4.1.2.1.9; docs/bridge.md "Default routes with
    Multus"). Writing the selection without `default-route` would attach the pod
    with its default route silently on the cluster network, against what it asked.
    """
    refused = translate.refusal(translation)  # the rule the agent follows too
    if refused is None:
        return None
    return (
        refused
        + f". The bridge does not write {npwg.NETWORKS_ANNOTATION} for this pod"
        + f" (it stays gated by {SCHEDULING_GATE} when created through the bridge's webhook)"
    )


def notices(translation: Translation) -> list[tuple[str, str]]:
    """(Event reason, message) for everything the pod's owner should know of its translation.

    Every translation warning, except those a `GatewayGap` stands for, which are
    reported as the refusal (one `GATEWAY_MISSING_REASON` message, `refusal`).
    """
    gap_warnings = {gap.warning for gap in translation.gateway_gaps}
    out = [(TRANSLATION_WARNING_REASON, w) for w in translation.warnings if w not in gap_warnings]
    refused = refusal(translation)
    if refused is not None:
        out.append((GATEWAY_MISSING_REASON, refused))
    return out


def _same(text: str, translation: Translation, pod_namespace: str) -> bool:
    try:
        return npwg.parse_selection(text, pod_namespace) == translation.elements
    except npwg.InvalidSelection:
        return False


def selection(pod: Pod, translation: Translation) -> SelectionDecision:
    """Write, keep, or report the pod's `k8s.v1.cni.cncf.io/networks` (module docstring).

    Call it once every object the pod names is Ready. A pod carrying
    `SCHEDULING_GATE` loses it in the same patch that writes the selection, and
    in a patch of its own when there is nothing to write (the selection agrees,
    a hand-written one disagrees): the decision is final then.
    """
    namespace = pod.metadata.namespace or ""
    have = pod.metadata.annotation(npwg.NETWORKS_ANNOTATION)
    wanted = translation.annotation
    if have is None and not translation.elements:
        return SelectionDecision(patch=release_patch(pod))
    if have is not None and _same(have, translation, namespace):
        return SelectionDecision(patch=release_patch(pod))
    if have is not None and pod.metadata.annotation(WRITTEN_ANNOTATION) != digest(have):
        return SelectionDecision(
            patch=release_patch(pod),
            conflict=(
                f"{npwg.NETWORKS_ANNOTATION} was not written by the bridge and disagrees with "
                f"{constants.NETWORKS_ANNOTATION}: the pod has {have}, its PodNetworks translate to "
                f"{wanted}; the bridge leaves it as it is (remove it to let the bridge write it)"
            ),
        )
    refused = refusal(translation)
    if refused is not None:
        return SelectionDecision(refused=refused)
    # Here the selection is the bridge's own (or absent) and differs from the translation:
    # before the pod is attached an update of what the agent will read, after it a
    # hot-plug (KEP Req 24), which the node's agent follows.
    annotations: dict[str, str | None] = (
        {npwg.NETWORKS_ANNOTATION: wanted, WRITTEN_ANNOTATION: digest(wanted)}
        if translation.elements
        else {npwg.NETWORKS_ANNOTATION: None, WRITTEN_ANNOTATION: None}
    )
    patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
    if pod.metadata.resource_version:
        patch["metadata"]["resourceVersion"] = pod.metadata.resource_version
    if gated(pod):
        patch["spec"] = _gates_without_ours(pod)
    return SelectionDecision(patch=patch)


def scheduling_gates(pod: Pod) -> list[PodSchedulingGate]:
    return list(pod.spec.scheduling_gates or [])


def gated(pod: Pod) -> bool:
    """The pod carries the bridge's scheduling gate."""
    return any(gate.name == SCHEDULING_GATE for gate in scheduling_gates(pod))


def _gate(gate: PodSchedulingGate) -> dict[str, Any]:
    # `v1.PodSchedulingGate` has one field, `name`: the view keeps all of it, so the
    # gate written back is the gate the API server stored.
    return {"name": gate.name}


def _gates_without_ours(pod: Pod) -> dict[str, Any]:
    # A merge patch (RFC 7386) replaces a list whole, so it carries the gates that
    # remain (other controllers' own), and null when none do (deleting the field).
    # The resourceVersion sent with it turns a concurrent change of the list into
    # a 409, never into a gate lost or restored.
    rest = [_gate(gate) for gate in scheduling_gates(pod) if gate.name != SCHEDULING_GATE]
    return {"schedulingGates": rest or None}


def release_patch(pod: Pod) -> dict[str, Any] | None:
    """Merge patch removing the bridge's scheduling gate (keeping any other), or None if ungated.

    For pods the bridge will write nothing for; `selection` removes the gate
    together with the selection it writes.
    """
    if not gated(pod):
        return None
    patch: dict[str, Any] = {"spec": _gates_without_ours(pod)}
    rv = pod.metadata.resource_version
    if rv:
        patch["metadata"] = {"resourceVersion": rv}
    return patch


def pod_ips_patch(pod: Pod, translation: Translation) -> dict[str, Any] | None:
    """Merge patch setting `multinetwork.x-k8s.io/pod-ips` from `network-status`, or None.

    Raises `ValueError` when the status annotation is malformed.
    """
    return reverse_status_patch(pod, translation, pod_ips=True, attachment_data=False)


def reverse_status_patch(
    pod: Pod, translation: Translation, *, pod_ips: bool = True, attachment_data: bool = True
) -> dict[str, Any] | None:
    """One merge patch for what `network-status` says back in KEP terms, or None when nothing changed.

    `multinetwork.x-k8s.io/pod-ips` (`podips.pod_ips`) and, with `attachment_data`,
    `multinetwork.x-k8s.io/attachments` (`podips.attachments`, docs/attachment-data.md):
    both in the same write, so a change of the status is one write, and a steady pod
    none. An annotation is written when its value differs from the pod's (never
    created empty). Raises `ValueError` when the status annotation is malformed.
    """
    text = pod.metadata.annotation(npwg.NETWORK_STATUS_ANNOTATION)
    if text is None:
        return None
    namespace = pod.metadata.namespace or ""
    status = npwg.parse_status(text)
    wanted: dict[str, tuple[str, bool]] = {}
    if pod_ips:
        ips = podips.pod_ips(status, translation, namespace)
        ips += podips.claimed_pod_ips(pod.metadata.annotation(constants.POD_IPS_ANNOTATION), ips, status)
        wanted[constants.POD_IPS_ANNOTATION] = (podips.format_pod_ips(ips), bool(ips))
    if attachment_data:
        data = podips.attachments(status, translation, namespace)
        wanted[constants.ATTACHMENTS_ANNOTATION] = (podips.format_attachments(data), bool(data))
    changes = {
        key: value
        for key, (value, any_data) in wanted.items()
        if (current := pod.metadata.annotation(key)) != value and (current is not None or any_data)
    }
    if not changes:
        return None
    return {"metadata": {"annotations": changes}}


def event(
    pod: Pod, reason: str, message: str, *, now: str, type_: str = "Warning"
) -> dict[str, Any]:
    """A core/v1 Event about the pod, named from the pod and the message so it is posted once."""
    meta = pod.metadata
    return pod_event(pod, reason, message, key=digest(f"{meta.uid}/{reason}/{message}"), type_=type_, now=now,
                     component=COMPONENT)


def _pointer(key: str) -> str:
    """A JSON Pointer token (RFC 6901) for an annotation key."""
    return key.replace("~", "~0").replace("/", "~1")


def may_be_bridged(networks: Sequence[Network], pod_namespace: str, objects: translate.Objects) -> bool:
    """The pod names a network the bridge provides, or one it cannot tell yet (missing object).

    The `default` PodNetwork is the cluster-wide default network, never in a
    selection (NPWG 4). A missing PodNetwork or attachment counts: it may be
    created as a bridge network after the pod, and the controller releases the
    gate of a pod that turns out to name none.
    """
    for net in networks:
        pn_name = net.pod_network_name
        if net.pod_network_attachment_name:
            pna = objects.attachments.get((pod_namespace, net.pod_network_attachment_name))
            if pna is None:
                return True
            pn_name = pna.spec.pod_network_name
        if pn_name == constants.DEFAULT_PODNETWORK:
            continue
        podnetwork = objects.podnetworks.get(pn_name or "")
        if podnetwork is None or translate.is_bridge(podnetwork):
            return True
    return False


def _gate_ops(pod: Pod) -> list[dict[str, Any]]:
    if gated(pod):
        return []
    if pod.spec.scheduling_gates:
        return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": SCHEDULING_GATE}}]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": SCHEDULING_GATE}]}]


@dataclass(frozen=True)
class AdmissionDecision:
    """The bridge webhook's answer for a new pod: JSON Patch operations and warnings."""

    ops: list[dict[str, Any]]
    warnings: list[str]
    """The translation's warnings and refusal (`notices`), for the AdmissionReview's
    `warnings`: kubectl prints them to whoever created the pod."""


def admission_patch(
    pod: Pod, objects: translate.Objects, namespace: str | None = None, *, dra_driver: str | None = None
) -> list[dict[str, Any]]:
    """The operations of `admission` (JSON Patch, RFC 6902)."""
    return admission(pod, objects, namespace, dra_driver=dra_driver).ops


def admission(pod: Pod, objects: translate.Objects, namespace: str | None = None, *,
              dra_driver: str | None = None) -> AdmissionDecision:
    """What the bridge's mutating webhook returns for a new pod.

    For a pod that names a bridge network (`may_be_bridged`): the selection, when
    every object the pod names is Ready and the translation succeeds (the same
    rules as `selection`); otherwise `SCHEDULING_GATE` in spec.schedulingGates,
    which the controller removes when it writes the selection. Nothing for other
    pods, for a pod that already has a selection (the bridge never overwrites
    one it did not write), for a pod created with spec.nodeName (the API server
    refuses gates on a bound pod) and for one naming a network of another
    provider (the bridge can never translate it). A pod whose translation has a
    `GatewayGap` gets the gate, never the selection (`refusal`). Never raises for
    bad input: a pod whose networks cannot be read gets no patch (validation is
    admission's other half). `namespace` is the admission request's, for pods whose
    metadata does not carry one yet. The warnings are the translation's (`notices`),
    whenever it succeeds, so the pod's creator sees them at `kubectl apply`.

    With `dra_driver` (`--dra-claims`), also the pod's DRA claims (`claims`), whatever the
    NPWG part decided: the claims place the pod, the selection still says how to attach it.
    The claims already on the pod are read from a `ClaimedPod` (a plain `Pod` has none).
    """
    nothing = AdmissionDecision([], [])
    try:
        nets = declared(pod)
    except InvalidObject:
        return nothing
    namespace = pod.metadata.namespace or namespace or ""
    if nets is None or pod.spec.host_network or not namespace:
        return nothing
    decided = _selection_admission(pod, nets, namespace, objects)
    if dra_driver is None:
        return decided
    claimed = claims(pod if isinstance(pod, ClaimedPod) else ClaimedPod.of(pod), nets, namespace, objects)
    return AdmissionDecision(decided.ops + claimed.ops, decided.warnings + claimed.warnings)


def _selection_admission(pod: Pod, nets: Sequence[Network], namespace: str,
                         objects: translate.Objects) -> AdmissionDecision:
    """`admission`'s NPWG part: the selection, the gate, or nothing."""
    nothing = AdmissionDecision([], [])
    if npwg.NETWORKS_ANNOTATION in annotations_of(pod) or not may_be_bridged(nets, namespace, objects):
        return nothing
    if pod.spec.node_name or gated(pod):
        # Gated: an earlier pass (reinvocationPolicy IfNeeded) decided, and warned.
        return nothing
    try:
        translated = translation(pod, nets, namespace, objects)
    except translate.TranslationError as exc:
        if exc.reason is translate.Reason.NOT_BRIDGE_PROVIDER:
            return nothing
        return AdmissionDecision(_gate_ops(pod), [])
    warnings = [message for _, message in notices(translated)]
    if not_ready(nets, namespace, objects) or refusal(translated) is not None:
        return AdmissionDecision(_gate_ops(pod), warnings)
    meta = pod.metadata.model_copy(update={"namespace": namespace})
    decision = selection(pod.model_copy(update={"metadata": meta}), translated)
    if decision.patch is None or "annotations" not in decision.patch.get("metadata", {}):
        return AdmissionDecision([], warnings)
    # The pod has annotations (it carries the KEP one), so adding keys under them is valid.
    return AdmissionDecision([
        {"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value}
        for key, value in decision.patch["metadata"]["annotations"].items()
    ], warnings)


def referenced(networks: Sequence[Network], pod_namespace: str) -> tuple[set[str], set[tuple[str, str]]]:
    """(PodNetwork names, attachment keys) the pod names directly."""
    pns = {n.pod_network_name for n in networks if n.pod_network_name}
    pnas = {(pod_namespace, n.pod_network_attachment_name) for n in networks if n.pod_network_attachment_name}
    return pns, pnas


# --- DRA: claims made at admission (--dra-claims) -------------------------------------------------

class PodResourceClaim(BaseModel):
    """A `spec.resourceClaims[]` entry (`v1.PodResourceClaim`), all three of its fields: an entry
    read here names the claim or template the API server stored."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    name: str
    resource_claim_name: str | None = Field(None, alias="resourceClaimName")
    resource_claim_template_name: str | None = Field(None, alias="resourceClaimTemplateName")

    def entry(self) -> dict[str, str]:
        return self.model_dump(by_alias=True, exclude_none=True)


class ClaimedPodSpec(PodSpec):
    resource_claims: list[PodResourceClaim] | None = Field(None, alias="resourceClaims")


class ClaimedPod(Pod):
    """`Pod` with `spec.resourceClaims`: what the DRA decisions read. A separate view, so the pod
    views the scheduler extender checks field by field (`scheduler_plugin.wire`) stay as they are."""

    spec: ClaimedPodSpec = Field(default_factory=ClaimedPodSpec)

    @classmethod
    def of(cls, pod: Pod) -> ClaimedPod:
        """A plain `Pod` read as having no claims (its view dropped them, if it had any)."""
        return cls.model_validate(pod.model_dump(by_alias=True, exclude_none=True))

    def claim_entries(self) -> list[dict[str, str]]:
        return [claim.entry() for claim in self.spec.resource_claims or []]


@dataclass(frozen=True)
class ClaimsDecision:
    """The DRA part of the webhook's answer: JSON Patch operations and warnings."""

    ops: list[dict[str, Any]]
    warnings: list[str]


def claimed_podnetworks(networks: Sequence[Network], pod_namespace: str,
                        objects: translate.Objects) -> list[str] | None:
    """The PodNetworks a pod's claims ask for: each network of its annotation but `default`, an
    attachment read as its PodNetwork, in the annotation's order, each once (KEP static validation
    refuses a PodNetwork named twice; through an attachment it can still be reached twice).

    None when an attachment is not in memory: its PodNetwork cannot be told, and claims cannot be
    added later (`spec.resourceClaims` is immutable), so the pod gets none and follows the
    annotation path. A PodNetwork missing or not Ready is claimed all the same: its device appears
    once it is Ready on a node, and kube-scheduler waits for it.
    """
    found: list[str] = []
    for net in networks:
        pn_name = net.pod_network_name or ""
        if net.pod_network_attachment_name:
            pna = objects.attachments.get((pod_namespace, net.pod_network_attachment_name))
            if pna is None:
                return None
            pn_name = pna.spec.pod_network_name
        if pn_name and pn_name != constants.DEFAULT_PODNETWORK and pn_name not in found:
            found.append(pn_name)
    return found


def claims(pod: ClaimedPod, networks: Sequence[Network], pod_namespace: str,
           objects: translate.Objects) -> ClaimsDecision:
    """The `spec.resourceClaims[]` entries to add to a new pod (`bridge.dracontract.claims`).

    Idempotent: an entry already on the pod (a second pass of the webhook) is not added again, and
    the pod's own claims stay. An entry of the pod's whose name is one the bridge would use for
    another template is the pod's: the bridge adds none under that name, and warns. A pod created
    with `spec.nodeName` gets none: it skips kube-scheduler, which allocates claims.
    """
    if pod.spec.node_name:
        return ClaimsDecision([], [])
    wanted = claimed_podnetworks(networks, pod_namespace, objects)
    if wanted is None:
        return ClaimsDecision([], [
            "a PodNetworkAttachment the pod names is not known yet, so its PodNetwork cannot be claimed: "
            "the pod gets no ResourceClaims and is placed and attached by its annotation only"])
    have = pod.claim_entries()
    names_taken = {entry["name"]: entry for entry in have}
    adds: list[dict[str, str]] = []
    warnings: list[str] = []
    for pn in wanted:
        entry = dra_claims.claim_entry(pn)
        taken = names_taken.get(entry["name"])
        if taken == entry:
            continue
        if taken is not None:
            warnings.append(f"spec.resourceClaims already has an entry named {entry['name']!r} that does not "
                            f"name template {entry['resourceClaimTemplateName']}: PodNetwork {pn} gets no "
                            "claim from the bridge")
            continue
        adds.append(entry)
        names_taken[entry["name"]] = entry
    if not adds:
        return ClaimsDecision([], warnings)
    if not have:
        return ClaimsDecision([{"op": "add", "path": "/spec/resourceClaims", "value": adds}], warnings)
    return ClaimsDecision([{"op": "add", "path": "/spec/resourceClaims/-", "value": entry} for entry in adds],
                          warnings)


def _dra_networks(pod: ClaimedPod, objects: translate.Objects) -> tuple[list[str], set[str]]:
    """(the PodNetworks the pod's annotation claims, the names of the claim entries on the pod)."""
    try:
        nets = declared(pod)
    except InvalidObject:
        return [], set()
    namespace = pod.metadata.namespace or ""
    wanted = claimed_podnetworks(nets or [], namespace, objects) or []
    return wanted, {entry["name"] for entry in pod.claim_entries()
                    if entry.get("resourceClaimTemplateName", "").startswith(dra_claims.TEMPLATE_PREFIX)}


def templates_wanted(pod: ClaimedPod, objects: translate.Objects, driver: str) -> list[dict[str, Any]]:
    """The ResourceClaimTemplates the pod's bridge-made claims need in its namespace: what the
    bridge controller makes (kube-controller-manager makes the pod's claims from them)."""
    wanted, entries = _dra_networks(pod, objects)
    namespace = pod.metadata.namespace or ""
    return [dra_claims.template(pn, namespace, driver) for pn in wanted
            if dra_claims.claim_name(pn) in entries]


def unclaimed(pod: ClaimedPod, objects: translate.Objects) -> list[str]:
    """The PodNetworks of a pod with bridge-made claims that have no claim: added to its annotation
    after creation (hot-plug; its claims cannot change). Nothing for a pod without such claims."""
    wanted, entries = _dra_networks(pod, objects)
    if not entries:
        return []
    return [pn for pn in wanted if dra_claims.claim_name(pn) not in entries]


def unclaimed_message(podnetworks: Sequence[str]) -> str:
    return (f"PodNetwork(s) {', '.join(podnetworks)} were added to {constants.NETWORKS_ANNOTATION} after the "
            "pod was created: spec.resourceClaims cannot change, so they have no ResourceClaim. "
            "kube-scheduler did not place the pod by them and no claim reports them; they are attached "
            "through the annotation (hot-plug), where the node offers them")


__all__ = [
    "CONFLICT_REASON",
    "GATED_REASON",
    "GATEWAY_MISSING_REASON",
    "NETWORK_WITHOUT_CLAIM_REASON",
    "SCHEDULING_GATE",
    "TRANSLATION_WARNING_REASON",
    "WRITTEN_ANNOTATION",
    "AdmissionDecision",
    "ClaimedPod",
    "ClaimedPodSpec",
    "ClaimsDecision",
    "PodResourceClaim",
    "SelectionDecision",
    "admission",
    "admission_patch",
    "attached",
    "claimed_podnetworks",
    "claims",
    "declared",
    "digest",
    "event",
    "gate_messages",
    "gate_notices",
    "gated",
    "may_be_bridged",
    "not_ready",
    "notices",
    "ours_to_write",
    "pod_ips_patch",
    "referenced",
    "refusal",
    "release_patch",
    "reverse_status_patch",
    "scheduling_gates",
    "selection",
    "templates_wanted",
    "translation",
    "unclaimed",
    "unclaimed_message",
]
