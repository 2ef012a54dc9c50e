"""A pod's selected networks, as the agent attaches them: the NPWG selection elements, in order
(`Selected`).

In this order of authority:

- the pod's spec-style networks (`multinetwork.x-k8s.io/networks`), decided as the bridge
  decides them, by the same functions of `bridge.translate` (the agent's only view of
  PodNetworks, `.importlinter`): `parse_networks` (the one parser of that annotation, as
  admission's), `admitted_networks`, `translate`, and `refusal`; the agent fetches exactly
  the PodNetworks, PodNetworkAttachments, NADs and NetworkSelectionOptions they reference
  (`Found`). When they leave out `default`, the selection is explicit (KEP-3698: "only the
  listed PodNetworks will be attached"): no cluster default network, the first element on
  the runtime's interface (`plan.placements`);
- else the NPWG selection `k8s.v1.cni.cncf.io/networks` (`bridge.npwg.parse_selection`); an
  invalid one is ignored with a warning, as NPWG 4.1.2.1.x says. Never explicit: the cluster
  default network comes first (NPWG 6.2).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from bridge import npwg, translate
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube.objects import NotFound, ObjectSource
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.ground.fielderrors import InvalidObject

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Selected:
    """A pod's selected networks: the selection elements, and whether they are all it gets."""

    elements: list[npwg.NetworkSelectionElement] = field(default_factory=list)
    """In the pod's order; the same list the bridge writes as the NPWG selection."""
    explicit: bool = False
    """The pod's KEP networks leave out `default`: `elements[0]` takes the runtime's interface
    in place of the cluster default network, which is not attached (never with no element)."""
    sources: list[translate.Source] = field(default_factory=list)
    """For KEP networks, where each element came from (same index): its PodNetwork, attachment
    and place in the pod's list; empty for an NPWG selection, which names no PodNetwork. What a
    per-PodNetwork choice of the agent (such as a path from the node) is keyed by."""
    claimed: bool = False
    """The networks are the pod's ResourceClaims' (`bridge.agent.cni.claims`)."""


def fetchable(key: tuple[str, str]) -> bool:
    """A (namespace, name) that names one object in an API path."""
    namespace, name = key
    return npwg.subdomain_problem(name) is None and npwg.name_problem(namespace, max_length=63) is None


@dataclass
class Found:
    """The objects fetched for one translation, keyed as `bridge.translate.Objects` wants them.

    Missing ones are left out, and so are names no API path may carry (`..`, `a/b`): the
    translation then reports them by name. One that does not fit its schema fails the fetch
    (`objects.read_object`: CNI error 7 naming its fields)."""

    source: ObjectSource
    podnetworks: dict[str, translate.PodNetwork] = field(default_factory=dict)
    attachments: dict[tuple[str, str], translate.PodNetworkAttachment] = field(default_factory=dict)
    nads: dict[tuple[str, str], npwg.NetworkAttachmentDefinition] = field(default_factory=dict)
    options: dict[tuple[str, str], translate.NetworkSelectionOptions] = field(default_factory=dict)

    def objects(self) -> translate.Objects:
        return translate.Objects(self.podnetworks, self.attachments, self.nads, self.options)

    async def follow_refs(self, obj: translate.PodNetwork | translate.PodNetworkAttachment) -> None:
        """Fetches the NADs and NetworkSelectionOptions an object's parametersRefs name (as
        `translate.references` reads them)."""
        nads, options = translate.references(obj)
        for key in sorted(nads):
            if key not in self.nads and fetchable(key):
                with contextlib.suppress(NotFound):
                    self.nads[key] = await self.source.get_nad(*key)
        for key in sorted(options):
            if key not in self.options and fetchable(key):
                with contextlib.suppress(NotFound):
                    self.options[key] = await self.source.get_selection_options(*key)

    async def fetch(self, networks: list[translate.Network], namespace: str) -> None:
        """Everything the translation of `networks` reads (`bridge.translate.translate`): each
        attachment and what it names; each PodNetwork, and its NAD unless the attachment that
        led to it names its own (the translation then never reads the PodNetwork's)."""
        for net in networks:
            pn_name = net.pod_network_name
            own_nad = False
            if net.pod_network_attachment_name:
                key = (namespace, net.pod_network_attachment_name)
                attachment = self.attachments.get(key)  # fetched once per ADD (`claims` asks first)
                if attachment is None:
                    with contextlib.suppress(NotFound):
                        attachment = self.attachments[key] = await self.source.get_attachment(*key)
                        await self.follow_refs(attachment)
                if attachment is not None:
                    pn_name = attachment.spec.pod_network_name
                    own_nad = bool(translate.references(attachment)[0])
            if not pn_name or pn_name == constants.DEFAULT_PODNETWORK:
                continue
            if pn_name not in self.podnetworks:
                with contextlib.suppress(NotFound):
                    self.podnetworks[pn_name] = await self.source.get_podnetwork(pn_name)
            podnetwork = self.podnetworks.get(pn_name)
            if podnetwork is not None and not own_nad:
                await self.follow_refs(podnetwork)


async def translated(source: ObjectSource, namespace: str, annotations: Mapping[str, str]) -> Selected:
    """The selection of a pod with spec-style networks, decided as the bridge decides it; a
    CNIError (7 for an annotation that cannot be read, 105 for a refused translation) otherwise."""
    found = Found(source)
    return await decided(found, parsed(annotations), namespace, annotations)


def parsed(annotations: Mapping[str, str]) -> list[translate.Network]:
    """The pod's spec-style networks (CNIError 7 when they cannot be read)."""
    try:
        return translate.parse_networks(annotations[constants.NETWORKS_ANNOTATION])
    except InvalidObject as exc:
        raise CNIError(ErrorCode.INVALID_CONFIG, f"invalid pod annotation {constants.NETWORKS_ANNOTATION}",
                       str(exc)) from None


async def decided(found: Found, networks: list[translate.Network], namespace: str,
                  annotations: Mapping[str, str]) -> Selected:
    """The selection of `networks` (the pod's spec-style networks, or those its claims give,
    `bridge.agent.cni.claims`), translated as the bridge translates them (`translated`)."""
    what = f"pod annotation {constants.NETWORKS_ANNOTATION}"
    try:
        # Attachments are held to what admission recorded of them: one re-created since to
        # name another PodNetwork was never checked for `use` (docs/controller.md).
        admitted = translate.admitted_networks(annotations)
    except translate.TranslationError as exc:
        raise CNIError(ErrorCode.INVALID_CONFIG, "invalid pod annotation "
                       f"{translate.ATTACHMENT_NETWORKS_ANNOTATION}", str(exc)) from None
    await found.fetch(networks, namespace)
    try:
        translation = translate.translate(networks, namespace, found.objects(), admitted)
    except translate.TranslationError as exc:
        raise CNIError(
            ErrorCode.DELEGATION_FAILED, f"cannot translate the pod's networks ({exc.reason})", str(exc)
        ) from None
    if (refused := translate.refusal(translation)) is not None:
        raise CNIError(
            ErrorCode.DELEGATION_FAILED,
            f"cannot translate the pod's networks ({translate.GATEWAY_MISSING_REASON})",
            f"{refused}. The bridge writes no {npwg.NETWORKS_ANNOTATION} for such a pod either",
        )
    for warning in translation.warnings:
        if not translation.includes_default and warning == translate.DEFAULT_LEFT_OUT_WARNING:
            continue  # true of Multus; this agent honours the list
        log.info("%s: %s", what, warning)
    if not translation.includes_default and not translation.elements:
        # Admission refuses an empty list; the bridge writes no selection for it, so an NPWG
        # implementation attaches the default network alone, and so does this agent.
        log.warning("%s lists no network; attaching the cluster default network alone, as for a pod "
                    "without the annotation", what)
    explicit = not translation.includes_default and bool(translation.elements)
    return Selected(translation.elements, explicit=explicit, sources=translation.sources)


async def of(source: ObjectSource, pod: Pod) -> Selected:
    """The pod's selected networks in order (module docstring)."""
    namespace = pod.metadata.namespace or "default"
    annotations = pod.metadata.annotations or {}
    if constants.NETWORKS_ANNOTATION in annotations:
        return await translated(source, namespace, annotations)
    return Selected(npwg_selection(pod))


def npwg_selection(pod: Pod) -> list[npwg.NetworkSelectionElement]:
    """The pod's NPWG selection annotation, read as NPWG 4.1.2.1 says (invalid: ignored)."""
    namespace = pod.metadata.namespace or "default"
    annotation = (pod.metadata.annotations or {}).get(npwg.NETWORKS_ANNOTATION)
    if not annotation:
        return []
    try:
        elements = npwg.parse_selection(annotation, namespace)
    except npwg.InvalidSelection as exc:
        # NPWG 4.1.2.1.x: an invalid annotation "shall be invalid and ignored".
        log.warning("pod %s/%s: ignoring its selection annotation: %s", namespace, pod.metadata.name, exc)
        return []
    for warning in npwg.ignored_key_warnings(elements):
        log.warning("pod %s/%s: %s", namespace, pod.metadata.name, warning)
    return elements


__all__ = ["Found", "Selected", "fetchable", "npwg_selection", "of", "translated"]
