"""Typed views of what a Service on a PodNetwork involves: the Service, the fields of a Pod its
endpoints come from, and the EndpointSlice (discovery.k8s.io/v1).

As `podnetwork.ground.core`: each view declares only the fields this project reads, under their
wire names, and ignores the rest; the decisions read attributes. The bridge writes EndpointSlices
from these (`bridge.operator.services`), and a node side that programs a Service reads the same
Service and slices.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from podnetwork.ground.core import Condition, ObjectMeta

#: `apiVersion` of EndpointSlice.
ENDPOINTSLICE_API_VERSION = "discovery.k8s.io/v1"
ENDPOINTSLICE_KIND = "EndpointSlice"


class _View(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class ServicePort(_View):
    """One `spec.ports` entry; `targetPort` is a number or the name of a container port."""

    name: str | None = None
    protocol: str = "TCP"
    port: int
    target_port: int | str | None = Field(None, alias="targetPort")
    app_protocol: str | None = Field(None, alias="appProtocol")


class ServiceSpec(_View):
    type: str | None = None
    cluster_ip: str | None = Field(None, alias="clusterIP")
    cluster_ips: list[str] | None = Field(None, alias="clusterIPs")
    selector: dict[str, str] | None = None
    ports: list[ServicePort] | None = None
    ip_families: list[str] | None = Field(None, alias="ipFamilies")
    publish_not_ready_addresses: bool | None = Field(None, alias="publishNotReadyAddresses")

    @property
    def headless(self) -> bool:
        return self.cluster_ip == "None"


class Service(_View):
    """`v1.Service`: metadata and the spec fields that decide its endpoints."""

    api_version: str = Field("v1", alias="apiVersion")
    kind: str = "Service"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ServiceSpec = Field(default_factory=ServiceSpec)


class ContainerPort(_View):
    name: str | None = None
    container_port: int = Field(alias="containerPort")
    protocol: str = "TCP"


class Container(_View):
    ports: list[ContainerPort] | None = None


class EndpointPodSpec(_View):
    node_name: str | None = Field(None, alias="nodeName")
    hostname: str | None = None
    subdomain: str | None = None
    containers: list[Container] | None = None


class EndpointPodStatus(_View):
    phase: str | None = None
    conditions: list[Condition] | None = None


class EndpointPod(_View):
    """`v1.Pod` as an endpoint: labels, annotations (its addresses per network), node, named
    ports, the Ready condition, and whether it is terminating (`metadata.deletionTimestamp`)."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: EndpointPodSpec = Field(default_factory=EndpointPodSpec)
    status: EndpointPodStatus = Field(default_factory=EndpointPodStatus)

    @property
    def ready(self) -> bool:
        """The pod's Ready condition is True (what the EndpointSlice controller calls serving)."""
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions or ())


class EndpointConditions(_View):
    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None


class ObjectReference(_View):
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None


class Endpoint(_View):
    addresses: list[str]
    conditions: EndpointConditions = Field(default_factory=EndpointConditions)
    target_ref: ObjectReference | None = Field(None, alias="targetRef")
    node_name: str | None = Field(None, alias="nodeName")
    hostname: str | None = None


class EndpointPort(_View):
    name: str | None = None
    port: int | None = None
    protocol: str | None = None
    app_protocol: str | None = Field(None, alias="appProtocol")


class OwnerReference(_View):
    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = Field(None, alias="blockOwnerDeletion")


class EndpointSliceMeta(ObjectMeta):
    owner_references: list[OwnerReference] | None = Field(None, alias="ownerReferences")


class EndpointSlice(_View):
    """`discovery.k8s.io/v1` EndpointSlice: one address type, its ports, its endpoints."""

    api_version: str = Field(ENDPOINTSLICE_API_VERSION, alias="apiVersion")
    kind: str = ENDPOINTSLICE_KIND
    metadata: EndpointSliceMeta = Field(default_factory=EndpointSliceMeta)
    address_type: str = Field(alias="addressType")
    endpoints: list[Endpoint] | None = None
    ports: list[EndpointPort] | None = None


__all__ = [
    "ENDPOINTSLICE_API_VERSION",
    "ENDPOINTSLICE_KIND",
    "Container",
    "ContainerPort",
    "Endpoint",
    "EndpointConditions",
    "EndpointPod",
    "EndpointPodSpec",
    "EndpointPodStatus",
    "EndpointPort",
    "EndpointSlice",
    "EndpointSliceMeta",
    "ObjectReference",
    "OwnerReference",
    "Service",
    "ServicePort",
    "ServiceSpec",
]
