"""What the suite reads of the objects it gets back, as pydantic views.

Each view declares the fields a test reads, under their wire names, and ignores the
rest. Pods, Nodes and Events are core objects the API server has already checked,
so their fields are typed; of the KEP objects, which the implementation under test
serves, the fields a test judges keep the value as sent (`Any`): `enabled` must be
`true`, not something that reads as true. `read` and `read_as` never fail: a field that does
not fit is seen as absent (the others are still read), an object that is not a mapping as an
empty one, and the test says what it missed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)


class _View(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    @field_validator("*", mode="wrap")
    @classmethod
    def _absent_if_unfit(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        """A field that does not fit reads as absent: what an implementation wrote wrong in one
        place must not hide what it wrote right in another (a test judges each field it reads)."""
        try:
            return handler(value)
        except ValidationError:
            assert info.field_name is not None
            return cls.model_fields[info.field_name].get_default(call_default_factory=True)


class Meta(_View):
    name: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    deletion_timestamp: str | None = Field(None, alias="deletionTimestamp")

    def annotation(self, key: str) -> str | None:
        return None if self.annotations is None else self.annotations.get(key)


class Status(_View):
    conditions: list[Any] | None = None
    """As sent (entries that are not objects are skipped by `Object.condition`): a test shows
    the condition it judged."""
    phase: str | None = None
    pod_ip: str | None = Field(None, alias="podIP")
    pod_ips: list[dict[str, Any]] | None = Field(None, alias="podIPs")


class ContainerPort(_View):
    name: str | None = None
    protocol: str | None = None
    container_port: int | None = Field(None, alias="containerPort")


class Container(_View):
    ports: list[ContainerPort] | None = None


class Spec(_View):
    """The spec fields the tests read, of a Pod, a Node, a Service or a KEP object."""

    node_name: str | None = Field(None, alias="nodeName")
    scheduling_gates: list[dict[str, Any]] | None = Field(None, alias="schedulingGates")
    unschedulable: Any = None
    taints: list[dict[str, Any]] | None = None
    provider: Any = None
    enabled: Any = None
    pod_network_name: Any = Field(None, alias="podNetworkName")
    containers: list[Container] | None = None
    ip_families: list[str] | None = Field(None, alias="ipFamilies")
    cluster_ips: list[Any] | None = Field(None, alias="clusterIPs")
    cluster_ip: Any = Field(None, alias="clusterIP")


class Object(_View):
    metadata: Meta = Field(default_factory=Meta)
    spec: Spec = Field(default_factory=Spec)
    status: Status = Field(default_factory=Status)

    def condition(self, type_: str) -> dict[str, Any] | None:
        """The condition `type_` in `status.conditions`, as sent, or None."""
        for cond in self.status.conditions or ():
            if isinstance(cond, dict) and cond.get("type") == type_:
                return cond
        return None


class Reference(_View):
    name: str | None = None


class Event(_View):
    """core/v1 or events.k8s.io/v1: the object it is about, and its text."""

    involved_object: Reference | None = Field(None, alias="involvedObject")
    regarding: Reference | None = None
    message: str | None = None
    note: str | None = None
    reason: str | None = None

    @property
    def about(self) -> str | None:
        """The name of the object it is about (core/v1 `involvedObject`, else `regarding`)."""
        ref = self.involved_object if self.involved_object is not None else self.regarding
        return None if ref is None else ref.name

    @property
    def text(self) -> str:
        return self.message or self.note or ""


class EndpointConditions(_View):
    """As sent (`Any`): a test judges that `ready` is `true`, not something that reads as true."""

    ready: Any = None
    serving: Any = None
    terminating: Any = None


class Endpoint(_View):
    addresses: list[Any] | None = None
    target_ref: Reference | None = Field(None, alias="targetRef")
    conditions: EndpointConditions = Field(default_factory=EndpointConditions)


class EndpointPort(_View):
    name: str | None = None
    port: Any = None


class EndpointSlice(_View):
    """discovery.k8s.io/v1 EndpointSlice: what the multi-network controller under test wrote."""

    metadata: Meta = Field(default_factory=Meta)
    address_type: Any = Field(None, alias="addressType")
    endpoints: list[Endpoint] | None = None
    ports: list[EndpointPort] | None = None


class DeviceAttribute(_View):
    """resource.k8s.io/v1 DeviceAttribute: one of its typed values (the tests read strings)."""

    string: str | None = None


class Device(_View):
    name: str | None = None
    attributes: dict[str, DeviceAttribute] | None = None
    allow_multiple_allocations: Any = Field(None, alias="allowMultipleAllocations")


class ResourcePool(_View):
    name: str | None = None
    generation: int | None = None
    resource_slice_count: int | None = Field(None, alias="resourceSliceCount")


class ResourceSliceSpec(_View):
    driver: str | None = None
    node_name: str | None = Field(None, alias="nodeName")
    pool: ResourcePool = Field(default_factory=ResourcePool)
    devices: list[Device] | None = None


class ResourceSlice(_View):
    """resource.k8s.io/v1 ResourceSlice: what the DRA driver under test publishes."""

    metadata: Meta = Field(default_factory=Meta)
    spec: ResourceSliceSpec = Field(default_factory=ResourceSliceSpec)


class AllocationResult(_View):
    """resource.k8s.io/v1 DeviceRequestAllocationResult: which device of which pool serves a request."""

    request: str | None = None
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    share_id: str | None = Field(None, alias="shareID")


class DeviceAllocation(_View):
    results: list[AllocationResult] | None = None


class Allocation(_View):
    devices: DeviceAllocation = Field(default_factory=DeviceAllocation)


class Consumer(_View):
    """resource.k8s.io/v1 ResourceClaimConsumerReference: who a claim is reserved for."""

    resource: str | None = None
    name: str | None = None
    uid: str | None = None


class NetworkData(_View):
    """resource.k8s.io/v1 NetworkDeviceData (KEP-4817): the interface a device became in the pod."""

    interface_name: str | None = Field(None, alias="interfaceName")
    ips: list[str] | None = None
    hardware_address: str | None = Field(None, alias="hardwareAddress")


class AllocatedDeviceStatus(_View):
    """resource.k8s.io/v1 AllocatedDeviceStatus: what a driver reports of one allocated device."""

    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    share_id: str | None = Field(None, alias="shareID")
    network_data: NetworkData | None = Field(None, alias="networkData")


class ResourceClaimStatus(_View):
    allocation: Allocation | None = None
    reserved_for: list[Consumer] | None = Field(None, alias="reservedFor")
    devices: list[AllocatedDeviceStatus] | None = None


class ResourceClaim(_View):
    metadata: Meta = Field(default_factory=Meta)
    status: ResourceClaimStatus = Field(default_factory=ResourceClaimStatus)


class PodClaimStatus(_View):
    """core/v1 PodResourceClaimStatus: the claim made for a pod's entry from a template."""

    name: str | None = None
    resource_claim_name: str | None = Field(None, alias="resourceClaimName")


class PodClaimsStatus(_View):
    resource_claim_statuses: list[PodClaimStatus] | None = Field(None, alias="resourceClaimStatuses")


class PodClaims(_View):
    """A pod's claims as its status names them."""

    metadata: Meta = Field(default_factory=Meta)
    status: PodClaimsStatus = Field(default_factory=PodClaimsStatus)


V = TypeVar("V", bound=_View)


def read_as(obj: Mapping[str, Any] | None, view: type[V]) -> V:
    """`obj` seen through `view`; an absent object, or one that does not fit, as an empty one."""
    if obj is not None:
        try:
            return view.model_validate(obj)
        except ValidationError:
            pass
    return view()


def read(obj: Mapping[str, Any] | None) -> Object:
    """`obj` seen as an `Object` (metadata, spec, status), or an empty one."""
    return read_as(obj, Object)


__all__ = ["AllocatedDeviceStatus", "Allocation", "AllocationResult", "Consumer", "Container",
           "ContainerPort", "Device", "DeviceAllocation", "DeviceAttribute", "Endpoint",
           "EndpointConditions", "EndpointPort", "EndpointSlice", "Event", "Meta", "NetworkData", "Object",
           "PodClaimStatus", "PodClaims", "PodClaimsStatus", "Reference", "ResourceClaim",
           "ResourceClaimStatus", "ResourcePool", "ResourceSlice", "ResourceSliceSpec", "Spec", "Status",
           "read", "read_as"]
