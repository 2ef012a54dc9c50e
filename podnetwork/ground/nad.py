"""A typed view of the NetworkAttachmentDefinition (NPWG multi-net spec 3.1, 3.2).

Beside the views of Pod, Node and Namespace (`podnetwork.ground.core`), as the
objects every layer reads; `bridge.npwg` offers it as part of the standard's library.

Read once where a NAD enters the program (a watch event, an API response, a
file), with `NetworkAttachmentDefinition.model_validate(obj)`; the decisions
read `nad.spec.config`. Like the views of `podnetwork.ground.core`, it declares
only what this project reads and drops the rest, and it refuses what the CRD of
3.1 refuses: a `spec` that is not an object, a `spec.config` that is not a
string. Whether the config is executable CNI JSON is the caller's question
(`load_cni_config`), as 3.2.4 allows a NAD without config at all.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from podnetwork.ground.constants import NAD_API_VERSION, NAD_KIND
from podnetwork.ground.core import ObjectMeta


class _View(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class NetworkAttachmentDefinitionSpec(_View):
    config: str | None = Field(None, strict=True)
    """The CNI configuration as JSON text; None or blank: the NPWG implementation finds it (3.2.4)."""


class NetworkAttachmentDefinition(_View):
    """`k8s.cni.cncf.io/v1` NetworkAttachmentDefinition: its metadata and CNI configuration."""

    api_version: str = Field(NAD_API_VERSION, alias="apiVersion")
    kind: str = NAD_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NetworkAttachmentDefinitionSpec = Field(default_factory=NetworkAttachmentDefinitionSpec)


__all__ = ["NetworkAttachmentDefinition", "NetworkAttachmentDefinitionSpec"]
