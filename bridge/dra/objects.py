"""The objects `podnetwork export-dra` writes, as pydantic models with the API's JSON names.

Two groups:

- the DRA API, `resource.k8s.io/v1` (GA in Kubernetes 1.34): DeviceClass,
  ResourceClaimTemplate and the parts of them this export fills in, the pod's
  `spec.resourceClaims[]` entry (core/v1 PodResourceClaim), and KEP-4817's
  `NetworkDeviceData` (`status.devices[].networkData` of a ResourceClaim). Only the
  fields the export sets are modelled; each model refuses unknown keys, and
  tests/unit/dra/test_schema_shape.py checks every field name and every required
  field against the v1 API's own types (lightkube's generated `resource_v1` models);
- the drivers' opaque parameters (`opaque.parameters`, a RawExtension the API server
  stores as given and the driver reads): DRANET's `NetworkConfig` and the CNI DRA
  driver's `CNI` object, with the JSON names of their Go types.

Sources (docs/dra.md cites them): kubernetes.io API reference "DeviceClass v1",
"ResourceClaimTemplate v1", "ResourceClaim v1" (NetworkDeviceData); DRANET's
pkg/apis/types.go and its "Interface Configuration" page; the CNI DRA driver's
docs/design/device-configuration-api.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from podnetwork.ground import constants

API_GROUP = "resource.k8s.io"
ApiVersion = Literal["resource.k8s.io/v1"]
API_VERSION: ApiVersion = "resource.k8s.io/v1"

#: DRANET's driver name (its `AttrPrefix`, pkg/apis/attributes.go), the default.
DRANET_DRIVER = "dra.net"
CNI_DRIVER = "cni.dra.networking.x-k8s.io"
DRIVERS = (DRANET_DRIVER, CNI_DRIVER)

#: The one request of every exported template; config and containers name it.
REQUEST_NAME = "nic"
#: On DeviceClasses and templates: the PodNetwork they were exported from.
PODNETWORK_ANNOTATION = f"bridge.{constants.GROUP}/podnetwork"

#: OpaqueDeviceConfiguration.parameters "must be less than or equal to 10 Ki" (DRA v1 API).
MAX_PARAMETERS_BYTES = 10 * 1024
#: NetworkDeviceData limits (KEP-4817, DRA v1 API): bytes of the names, entries of `ips`.
MAX_INTERFACE_NAME_BYTES = 256
MAX_HARDWARE_ADDRESS_BYTES = 128
MAX_NETWORK_DATA_IPS = 16


class _Model(BaseModel):
    """Wire names by alias, unknown keys refused, output without nulls."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Meta(_Model):
    """The `metav1.ObjectMeta` fields the export sets."""

    name: str
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class TemplateMeta(_Model):
    """ResourceClaimTemplateSpec.metadata: only labels and annotations are allowed there."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


# --- resource.k8s.io/v1 ------------------------------------------------------------------------


class CELDeviceSelector(_Model):
    expression: str
    """A CEL expression over `device` (driver, attributes, capacity) that must be true."""


class DeviceSelector(_Model):
    cel: CELDeviceSelector | None = None


class OpaqueDeviceConfiguration(_Model):
    driver: str
    """The kubelet plugin that receives the parameters."""
    parameters: dict[str, Any]
    """Driver-specific; at most `MAX_PARAMETERS_BYTES` as JSON."""


class DeviceClassConfiguration(_Model):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(_Model):
    selectors: list[DeviceSelector] | None = None
    config: list[DeviceClassConfiguration] | None = None


class DeviceClass(_Model):
    """Cluster-scoped: which devices a request for this class may get."""

    api_version: ApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["DeviceClass"] = "DeviceClass"
    metadata: Meta
    spec: DeviceClassSpec


class ExactDeviceRequest(_Model):
    device_class_name: str = Field(..., alias="deviceClassName")
    selectors: list[DeviceSelector] | None = None
    allocation_mode: Literal["ExactCount", "All"] | None = Field(None, alias="allocationMode")
    count: int | None = Field(None, ge=1)


class DeviceRequest(_Model):
    name: str
    """A DNS label, unique in the claim; `config[].requests` and containers name it."""
    exactly: ExactDeviceRequest | None = None


class DeviceClaimConfiguration(_Model):
    requests: list[str] | None = None
    """The requests this configuration applies to (all when empty)."""
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(_Model):
    requests: list[DeviceRequest] | None = None
    config: list[DeviceClaimConfiguration] | None = None


class ResourceClaimSpec(_Model):
    devices: DeviceClaim | None = None


class ResourceClaimTemplateSpec(_Model):
    metadata: TemplateMeta | None = None
    spec: ResourceClaimSpec


class ResourceClaimTemplate(_Model):
    """Namespaced: the control plane makes one ResourceClaim from it per pod."""

    api_version: ApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["ResourceClaimTemplate"] = "ResourceClaimTemplate"
    metadata: Meta
    spec: ResourceClaimTemplateSpec


class PodResourceClaim(_Model):
    """core/v1 `Pod.spec.resourceClaims[]`: exactly one of the two sources is set."""

    name: str
    """A DNS label, unique in the pod."""
    resource_claim_name: str | None = Field(None, alias="resourceClaimName")
    resource_claim_template_name: str | None = Field(None, alias="resourceClaimTemplateName")


class NetworkDeviceData(_Model):
    """KEP-4817: `ResourceClaim.status.devices[].networkData`."""

    interface_name: str | None = Field(None, alias="interfaceName")
    ips: list[str] | None = Field(None, max_length=MAX_NETWORK_DATA_IPS)
    """CIDRs: the address with its prefix length, `192.0.2.5/24`, `2001:db8::5/64`."""
    hardware_address: str | None = Field(None, alias="hardwareAddress")


# --- DRANET's opaque parameters (driver dra.net) ---------------------------------------------


class DranetIPVlanAddressing(_Model):
    type: Literal["none", "static", "parentIPv6PrefixPodIPv4"]


class DranetIPVlan(_Model):
    """`interface.ipvlan`: make an ipvlan child of the selected device instead of moving it."""

    mode: Literal["l2", "l3", "l3s"] | None = None
    addressing: DranetIPVlanAddressing | None = None


class DranetInterface(_Model):
    name: str | None = None
    """The interface's name inside the pod."""
    addresses: list[str] | None = None
    """CIDRs."""
    dhcp: bool | None = None
    mtu: int | None = None
    hardware_addr: str | None = Field(None, alias="hardwareAddr")
    ipvlan: DranetIPVlan | None = None


class DranetRoute(_Model):
    destination: str | None = None
    gateway: str | None = None


class DranetNetworkConfig(_Model):
    """DRANET's `NetworkConfig`, the `opaque.parameters` of driver `dra.net`."""

    interface: DranetInterface
    routes: list[DranetRoute] | None = None


# --- The CNI DRA driver's opaque parameters (driver cni.dra.networking.x-k8s.io) -------------

CniApiVersion = Literal["cni.dra.networking.x-k8s.io/v1alpha1"]
CNI_PARAMETERS_API_VERSION: CniApiVersion = "cni.dra.networking.x-k8s.io/v1alpha1"


class CniParameters(_Model):
    """The CNI DRA driver's `CNI` object: one interface, made by running `config`."""

    api_version: CniApiVersion = Field(
        CNI_PARAMETERS_API_VERSION, alias="apiVersion"
    )
    kind: Literal["CNI"] = "CNI"
    if_name: str = Field(..., alias="ifName")
    config: dict[str, Any]
    """The CNI configuration (or configuration list) as a JSON object."""


__all__ = [
    "API_GROUP",
    "API_VERSION",
    "CNI_DRIVER",
    "CNI_PARAMETERS_API_VERSION",
    "DRANET_DRIVER",
    "DRIVERS",
    "MAX_HARDWARE_ADDRESS_BYTES",
    "MAX_INTERFACE_NAME_BYTES",
    "MAX_NETWORK_DATA_IPS",
    "MAX_PARAMETERS_BYTES",
    "PODNETWORK_ANNOTATION",
    "REQUEST_NAME",
    "CELDeviceSelector",
    "CniParameters",
    "DeviceClaim",
    "DeviceClaimConfiguration",
    "DeviceClass",
    "DeviceClassConfiguration",
    "DeviceClassSpec",
    "DeviceRequest",
    "DeviceSelector",
    "DranetIPVlan",
    "DranetIPVlanAddressing",
    "DranetInterface",
    "DranetNetworkConfig",
    "DranetRoute",
    "ExactDeviceRequest",
    "Meta",
    "NetworkDeviceData",
    "OpaqueDeviceConfiguration",
    "PodResourceClaim",
    "ResourceClaimSpec",
    "ResourceClaimTemplate",
    "ResourceClaimTemplateSpec",
    "TemplateMeta",
]
