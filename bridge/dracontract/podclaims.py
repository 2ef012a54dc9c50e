"""A pod's ResourceClaims, by the names the kubelet prepares them under.

A pod names its claims in `spec.resourceClaims[]` (core/v1 `PodResourceClaim`): either a claim of
its own (`resourceClaimName`) or a template (`resourceClaimTemplateName`), from which the
resourceclaim controller makes a claim and writes its generated name in
`status.resourceClaimStatuses[]` (`PodResourceClaimStatus`, matched by `name`; a null
`resourceClaimName` there means no claim was needed). The kubelet prepares every one of them
before it asks the runtime for the pod's sandbox (KEP-4381, "Kubelet"); the CNI agent reads them
here to find the driver's records of them (`bridge.dracontract.prepared`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from podnetwork.ground import core


class _View(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class PodResourceClaimStatus(_View):
    """`status.resourceClaimStatuses[]`: the claim generated for the pod's claim `name`."""

    name: str = ""
    resource_claim_name: str | None = Field(None, alias="resourceClaimName")


class PodResourceClaim(PodResourceClaimStatus):
    """`spec.resourceClaims[]`."""

    resource_claim_template_name: str | None = Field(None, alias="resourceClaimTemplateName")


class PodSpec(core.PodSpec):
    # None as the API may serve null for an empty list: it means what absence means.
    resource_claims: list[PodResourceClaim] | None = Field(None, alias="resourceClaims")


class PodStatus(core.PodStatus):
    resource_claim_statuses: list[PodResourceClaimStatus] | None = Field(None, alias="resourceClaimStatuses")


class Pod(core.Pod):
    """`podnetwork.ground.core.Pod` and the claims it uses."""

    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


@dataclass(frozen=True)
class ClaimName:
    """One entry of `spec.resourceClaims`, and the ResourceClaim it stands for."""

    entry: str
    """The pod's name for it (`spec.resourceClaims[].name`)."""
    claim: str | None
    """The ResourceClaim's name in the pod's namespace; None: made from a template and not
    generated yet (no `status.resourceClaimStatuses[]` entry names it)."""


def claim_names(pod: core.Pod) -> list[ClaimName]:
    """The pod's claims in `spec.resourceClaims` order; one a template made no claim for (its status
    entry's `resourceClaimName` is null: none was needed) is left out. A pod read through another
    view than `Pod` has none."""
    if not isinstance(pod, Pod) or not pod.spec.resource_claims:
        return []
    generated = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses or ()}
    out: list[ClaimName] = []
    for entry in pod.spec.resource_claims:
        if entry.resource_claim_name:
            out.append(ClaimName(entry.name, entry.resource_claim_name))
        elif entry.name not in generated:
            out.append(ClaimName(entry.name, None))
        elif generated[entry.name]:
            out.append(ClaimName(entry.name, generated[entry.name]))
    return out


__all__ = ["ClaimName", "Pod", "PodResourceClaim", "PodResourceClaimStatus", "PodSpec", "PodStatus",
           "claim_names"]
