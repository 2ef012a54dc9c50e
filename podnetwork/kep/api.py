"""Pydantic models of the KEP-3698 API objects.

The models are the single source of truth for the API: the CRD schemas in
`crds/` are tested against them field by field (tests/unit/api/test_models_match_crds.py).
JSON names are exactly those of the KEP's Go types (see docs/api.md for where
the KEP text disagrees with itself and which spelling we chose).

Round trip: for a valid object `obj`,
`Model.model_validate(obj).model_dump(by_alias=True, exclude_none=True) == obj`
(after API-server defaulting, i.e. `spec.enabled` present).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from podnetwork.ground import constants
from podnetwork.ground.constants import API_VERSION, ApiVersion, AttachmentKind, PodNetworkKind
from podnetwork.ground.core import ObjectMeta as ObjectMeta


class _Model(BaseModel):
    """Base: wire names by alias, Python names accepted too, unknown keys refused."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    def to_dict(self) -> dict[str, Any]:
        """The object as the API server would store it (wire names, no nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


#: `metav1.Condition` field patterns, as in the upstream OpenAPI schema: a type is
#: CamelCase or a qualified name (`example.com/Thing`), a reason is CamelCase.
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
#: Bounds that keep the CRD's CEL immutability rules within the API server's cost
#: budget (an unbounded list or string makes `self == oldSelf` too expensive).
MAX_PARAMETERS_REFS = 16


class Condition(_Model):
    """`metav1.Condition`."""

    type: str = Field(..., min_length=1, max_length=316, pattern=CONDITION_TYPE_PATTERN)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(..., min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    message: str = Field("", max_length=32768)
    last_transition_time: str = Field(..., alias="lastTransitionTime")
    observed_generation: int | None = Field(None, alias="observedGeneration", ge=0)


class ParametersRef(_Model):
    """A reference to an implementation-specific parameters object (KEP "PodNetwork")."""

    group: str = Field(..., max_length=253)
    """API group of the parameters object, e.g. `k8s.cni.cncf.io`; empty for the core group."""
    kind: str = Field(..., min_length=1, max_length=63)
    """What the provider calls the object's type; the KEP's example uses the resource
    plural (`network-attachment-definitions`), so any non-empty string is accepted."""
    name: str = Field(..., min_length=1, max_length=253)
    namespace: str | None = Field(None, min_length=1, max_length=63)


class PodNetworkSpec(_Model):
    enabled: bool = True
    """Administratively enable/disable the network. Defaults to true (KEP "Enabled")."""
    parameters_refs: list[ParametersRef] | None = Field(
        None, alias="parametersRefs", max_length=MAX_PARAMETERS_REFS
    )
    provider: str | None = Field(None, min_length=1, max_length=253)


class Status(_Model):
    """Status of PodNetwork and PodNetworkAttachment: at most 5 conditions keyed by type."""

    conditions: list[Condition] | None = Field(None, max_length=5)

    def condition(self, type_: str) -> Condition | None:
        for c in self.conditions or []:
            if c.type == type_:
                return c
        return None


class PodNetwork(_Model):
    """A logical network of the cluster. Cluster-scoped."""

    api_version: ApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: PodNetworkKind = constants.PODNETWORK_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodNetworkSpec = Field(default_factory=PodNetworkSpec)
    status: Status | None = None


class PodNetworkAttachmentSpec(_Model):
    pod_network_name: str = Field(..., alias="podNetworkName", min_length=1, max_length=253)
    """The PodNetwork this attachment connects to. Required."""
    parameters_refs: list[ParametersRef] | None = Field(
        None, alias="parametersRefs", max_length=MAX_PARAMETERS_REFS
    )


class PodNetworkAttachment(_Model):
    """Pod-level parameters of an attachment to a PodNetwork. Namespaced."""

    api_version: ApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: AttachmentKind = constants.ATTACHMENT_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodNetworkAttachmentSpec
    status: Status | None = None


class Network(_Model):
    """One entry of a pod's spec-style networks (KEP "Attaching PodNetwork to a Pod").

    Exactly one of `podNetworkName` and `podNetworkAttachmentName` must be set;
    that and the other static rules are checked by `podnetwork.kep.validation`, which
    reports them as field errors instead of failing the parse.
    """

    pod_network_name: str | None = Field(None, alias="podNetworkName")
    pod_network_attachment_name: str | None = Field(None, alias="podNetworkAttachmentName")
    interface_name: str | None = Field(None, alias="interfaceName")
    is_default_gw4: bool | None = Field(None, alias="isDefaultGW4")
    is_default_gw6: bool | None = Field(None, alias="isDefaultGW6")

    @property
    def reference(self) -> tuple[str, str]:
        """(kind, name) of what this entry references."""
        if self.pod_network_attachment_name:
            return (constants.ATTACHMENT_KIND, self.pod_network_attachment_name)
        return (constants.PODNETWORK_KIND, self.pod_network_name or "")


class PodIP(_Model):
    """One pod IP with the PodNetwork it belongs to (KEP "Status")."""

    ip: str
    pod_network: str = Field(..., alias="podNetwork")
    interface_name: str | None = Field(None, alias="interfaceName")


DEFAULT_NETWORKS: tuple[Network, ...] = (Network(pod_network_name=constants.DEFAULT_PODNETWORK),)
"""What auto-population sets on a pod that names no network (KEP "Auto-population")."""


KepObject = PodNetwork | PodNetworkAttachment
"""Either kind of this API: both carry `metadata`, `spec.parametersRefs` and `status.conditions`."""


def parse(obj: Mapping[str, Any], kind: str | None = None) -> KepObject:
    """A PodNetwork or PodNetworkAttachment read from the API, by `kind` (the object's own if None).

    Where objects enter the program (watch events, API responses, files). The CRD
    schemas are the models' (tests/unit/api/test_models_match_crds.py), so an object served by an API
    server always parses. Raises `pydantic.ValidationError` (a `ValueError`) naming
    every field that does not fit, or `ValueError` for another kind.
    """
    kind = kind or obj.get("kind")
    if kind == constants.ATTACHMENT_KIND:
        return PodNetworkAttachment.model_validate(_with_kind(obj, kind))
    if kind == constants.PODNETWORK_KIND:
        return PodNetwork.model_validate(_with_kind(obj, kind))
    raise ValueError(
        f"expected a {constants.PODNETWORK_KIND} or a {constants.ATTACHMENT_KIND}, not kind {kind!r}"
    )


def _with_kind(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    # Items of a list and kopf bodies of some events come without `kind`.
    return obj if "kind" in obj else {**obj, "kind": kind}
