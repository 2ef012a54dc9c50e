"""A pod's networks from its ResourceClaims of the DRA driver (`podnetwork dra-driver`, docs/dra.md).

The kubelet prepares a pod's claims (NodePrepareResources) before it asks the runtime for the
pod's sandbox, and the driver records each one in its state dir (`bridge.dracontract.state`),
with the PodNetwork each allocated device stands for. At ADD, a pod with claims the driver
recorded gets **exactly** their PodNetworks, decided by the same rules as the spec-style
networks (`selection.decided`: the bridge's translation, `plan.interface_names`):

- its `multinetwork.x-k8s.io/networks` annotation, when it has one, gives the order, the
  interface names and the default routes of the networks it names (admission may make claims
  from it and leave it on the pod); a claimed PodNetwork it does not name comes after them; an
  entry naming a PodNetwork no claim holds is refused (`Unclaimed`): kube-scheduler placed the
  pod by its claims, so nothing says the node offers that network;
- without the annotation, the cluster default network first (as NPWG 6.2 and an unannotated pod
  have it), then the claimed PodNetworks in `spec.resourceClaims` order, each device of a claim
  in the order of its record, on NPWG's default names (`net1`, `net2`, ...).

A claim of the pod with no record is read from the API (one GET, only for such claims): another
driver's is left to it; one allocated to this driver was not prepared on this node (the kubelet
prepares every claim before it creates the sandbox, so the driver lost its records, or the agent
reads another folder), CNI error 11 (try again later) saying so, which the kubelet retries. So is
a claim made from a template that names no generated claim yet, and a recorded device that stood
for no PodNetwork.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bridge import translate
from bridge.agent.cni import selection
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube.objects import NotFound, ObjectSource
from bridge.dracontract import podclaims, prepared
from podnetwork.ground import constants
from podnetwork.ground.core import Pod

log = logging.getLogger(__name__)


class Unclaimed(ValueError):
    """The pod's annotation names a PodNetwork that none of its claims holds."""


Lookup = Callable[[str, str], prepared.Prepared | None]


def claimed_podnetworks(namespace: str, names: Sequence[podclaims.ClaimName],
                        lookup: Lookup) -> tuple[list[str] | None, list[str]]:
    """The PodNetworks of the pod's recorded claims, in order, each once (None when no claim of the
    pod is recorded), and the claims not recorded. CNIError 11 for a claim not generated yet or a
    device that stood for no PodNetwork."""
    found: list[str] = []
    unrecorded: list[str] = []
    for each in names:
        if each.claim is None:
            raise CNIError(ErrorCode.TRY_AGAIN_LATER,
                           f"the pod's claim {each.entry!r} names no ResourceClaim yet",
                           "its template's claim is not generated (no status.resourceClaimStatuses entry)")
        record = lookup(namespace, each.claim)
        if record is None:
            unrecorded.append(each.claim)
            continue
        for index, podnetwork in enumerate(record.podnetworks):
            if podnetwork is None:
                raise CNIError(ErrorCode.TRY_AGAIN_LATER,
                               f"ResourceClaim {namespace}/{each.claim}: its device {index} stood for no "
                               "PodNetwork when the driver prepared it",
                               "the PodNetwork was no longer offered on this node; the kubelet retries")
            if podnetwork not in found:
                found.append(podnetwork)
    return (found if len(unrecorded) < len(names) else None), unrecorded


def allocated_drivers(claim: Mapping[str, Any]) -> set[str]:
    """The drivers a served ResourceClaim is allocated to (`status.allocation.devices.results[].driver`).
    Read from the JSON as served, without a model: the agent reads no other field of it."""
    step: Any = claim
    for key in ("status", "allocation", "devices", "results"):
        step = step.get(key) if isinstance(step, Mapping) else None
    return {r["driver"] for r in step if isinstance(r, Mapping) and isinstance(r.get("driver"), str)} \
        if isinstance(step, list) else set()


async def check_unrecorded(source: ObjectSource, namespace: str, unrecorded: Sequence[str], driver: str,
                           folder: str) -> None:
    """CNIError 11 when a claim the driver did not record is allocated to it: not prepared on this
    node (the kubelet prepares before it creates the sandbox, so this is a driver that lost its
    records, or another --dra-state-dir). Claims of other drivers are left to them."""
    for name in unrecorded:
        try:
            drivers = allocated_drivers(await source.get_resource_claim(namespace, name))
        except NotFound:
            log.info("ResourceClaim %s/%s is gone; not attached by claims", namespace, name)
            continue
        if driver in drivers:
            raise CNIError(
                ErrorCode.TRY_AGAIN_LATER,
                f"ResourceClaim {namespace}/{name} is allocated to {driver} but not prepared on this node",
                f"no record of it in {folder}: the kubelet prepares a pod's claims before it creates the "
                "sandbox, and retries; check that the DRA driver runs on this node and that the agent's "
                "--dra-state-dir is the driver's --state-dir")


def networks(claimed: Sequence[str], annotated: Sequence[translate.Network] | None,
             annotated_podnetworks: Sequence[str | None]) -> list[translate.Network]:
    """The networks to translate for a pod whose claims hold `claimed` (module docstring).

    `annotated_podnetworks`: the PodNetwork of each annotated entry (same index; None for an
    attachment that was not found, left to the translation to report)."""
    if annotated is None:
        return [translate.Network(pod_network_name=constants.DEFAULT_PODNETWORK),
                *(translate.Network(pod_network_name=pn) for pn in claimed)]
    wanted = set(claimed)
    kept: list[translate.Network] = []
    unclaimed: list[str] = []
    for net, podnetwork in zip(annotated, annotated_podnetworks, strict=True):
        if podnetwork is None or podnetwork == constants.DEFAULT_PODNETWORK or podnetwork in wanted:
            kept.append(net)
        else:
            unclaimed.append(podnetwork)
    if unclaimed:
        raise Unclaimed(
            f"its {constants.NETWORKS_ANNOTATION} names {', '.join(unclaimed)}, which none of its "
            f"ResourceClaims holds (they hold {', '.join(claimed) or 'none'}); a pod with claims of the "
            "DRA driver gets exactly their networks: claim it too, or leave it out of the annotation")
    named = set(annotated_podnetworks)
    return kept + [translate.Network(pod_network_name=pn) for pn in claimed if pn not in named]


async def selected(source: ObjectSource, pod: Pod, records: prepared.Records,
                   driver: str) -> selection.Selected | None:
    """The pod's networks from its recorded claims (module docstring); None when it has none."""
    namespace = pod.metadata.namespace or "default"
    claimed, unrecorded = claimed_podnetworks(namespace, podclaims.claim_names(pod), records.by_name)
    if unrecorded:
        await check_unrecorded(source, namespace, unrecorded, driver, str(records.folder))
    if claimed is None:
        return None
    annotations: Mapping[str, str] = pod.metadata.annotations or {}
    found = selection.Found(source)
    annotated: list[translate.Network] | None = None
    of_entries: list[str | None] = []
    if constants.NETWORKS_ANNOTATION in annotations:
        annotated = selection.parsed(annotations)
        await found.fetch(annotated, namespace)  # the attachments, to know their PodNetworks
        for net in annotated:
            if net.pod_network_attachment_name:
                attachment = found.attachments.get((namespace, net.pod_network_attachment_name))
                of_entries.append(attachment.spec.pod_network_name if attachment is not None else None)
            else:
                of_entries.append(net.pod_network_name)
    try:
        chosen = networks(claimed, annotated, of_entries)
    except Unclaimed as exc:
        raise CNIError(ErrorCode.DELEGATION_FAILED, "the pod's networks and its claims disagree",
                       str(exc)) from None
    log.info("pod %s/%s: attaching the PodNetworks of its ResourceClaims: %s", namespace, pod.metadata.name,
             ", ".join(claimed) or "none")
    decided = await selection.decided(found, chosen, namespace, annotations)
    return dataclasses.replace(decided, claimed=True)


__all__ = ["Lookup", "Unclaimed", "allocated_drivers", "check_unrecorded", "claimed_podnetworks", "networks",
           "selected"]
