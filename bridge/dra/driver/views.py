"""What the driver reads from the API, as read-only pydantic views with the API's JSON names.

`bridge.dra.objects` models what the export writes (unknown keys refused); these are the other
direction: the parts of a served ResourceClaim (`status.allocation`, resource.k8s.io/v1
AllocationResult), ResourceSlice (`spec`) and Pod (`spec.resourceClaims[]`,
`status.resourceClaimStatuses[]`) the driver reads, unknown keys dropped and absent fields
defaulting to what absence means. The Pod view extends `podnetwork.ground.core.Pod`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from podnetwork.ground import core


class _View(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # the API may serve `null` for an empty list or object: it means what absence means
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


# --- ResourceClaim v1: status.allocation ------------------------------------------------------


class NodeSelectorRequirement(_View):
    key: str = ""
    operator: str = ""
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(_View):
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list, alias="matchFields")


class NodeSelector(_View):
    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list, alias="nodeSelectorTerms")


class DeviceRequestAllocationResult(_View):
    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    share_id: str | None = Field(None, alias="shareID")


class DeviceAllocationResult(_View):
    results: list[DeviceRequestAllocationResult] = Field(default_factory=list)


class AllocationResult(_View):
    devices: DeviceAllocationResult = Field(default_factory=DeviceAllocationResult)
    node_selector: NodeSelector | None = Field(None, alias="nodeSelector")


class ResourceClaimStatus(_View):
    allocation: AllocationResult | None = None


class ResourceClaim(_View):
    metadata: core.ObjectMeta = Field(default_factory=core.ObjectMeta)
    status: ResourceClaimStatus = Field(default_factory=ResourceClaimStatus)


# --- ResourceSlice v1: spec -------------------------------------------------------------------


class ResourcePool(_View):
    name: str | None = None
    generation: StrictInt | None = None
    resource_slice_count: int | None = Field(None, alias="resourceSliceCount")


class Device(_View):
    name: str | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    allow_multiple_allocations: bool = Field(False, alias="allowMultipleAllocations")


class ResourceSliceSpec(_View):
    driver: str | None = None
    node_name: str | None = Field(None, alias="nodeName")
    pool: ResourcePool = Field(default_factory=ResourcePool)
    devices: list[Device] = Field(default_factory=list)


class ResourceSlice(_View):
    spec: ResourceSliceSpec = Field(default_factory=ResourceSliceSpec)


# --- Pod v1: the claims it uses ---------------------------------------------------------------


class ClaimReference(_View):
    """A `spec.resourceClaims[]` or `status.resourceClaimStatuses[]` entry: only the name it resolved to."""

    resource_claim_name: str | None = Field(None, alias="resourceClaimName")


class PodSpec(core.PodSpec):
    resource_claims: list[ClaimReference] = Field(default_factory=list, alias="resourceClaims")


class PodStatus(core.PodStatus):
    resource_claim_statuses: list[ClaimReference] = Field(default_factory=list,
                                                          alias="resourceClaimStatuses")


class Pod(core.Pod):
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


__all__ = [
    "AllocationResult",
    "ClaimReference",
    "Device",
    "DeviceAllocationResult",
    "DeviceRequestAllocationResult",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Pod",
    "PodSpec",
    "PodStatus",
    "ResourceClaim",
    "ResourceClaimStatus",
    "ResourcePool",
    "ResourceSlice",
    "ResourceSliceSpec",
]
