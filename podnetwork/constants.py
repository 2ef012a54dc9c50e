"""The names of the API: group, version, annotations, finalizer, conditions.

One name for one thing: code, CRDs, docs and logs all take them from here.
"""

from __future__ import annotations

from enum import StrEnum

GROUP = "multinetwork.x-k8s.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

PODNETWORK_KIND = "PodNetwork"
PODNETWORK_PLURAL = "podnetworks"
PODNETWORK_SHORT = "pn"
ATTACHMENT_KIND = "PodNetworkAttachment"
ATTACHMENT_PLURAL = "podnetworkattachments"
ATTACHMENT_SHORT = "pna"
CATEGORY = "multinetwork"

#: The cluster default PodNetwork (KEP "Default PodNetwork").
DEFAULT_PODNETWORK = "default"

#: Pod annotation holding the spec-style networks: a JSON list of `Network`.
NETWORKS_ANNOTATION = f"{GROUP}/networks"
#: Pod annotation holding the KEP "Status" pod IPs: a JSON list of `PodIP`.
POD_IPS_ANNOTATION = f"{GROUP}/pod-ips"
#: Pod annotation holding the data of each attachment for the workload (KEP Phase II
#: requirement 17), for a downward-API volume: docs/attachment-data.md.
ATTACHMENTS_ANNOTATION = f"{GROUP}/attachments"
#: Namespace annotation: the networks auto-populated for pods of that namespace
#: (KEP Story #6, Phase IV requirement 23).
NAMESPACE_DEFAULT_NETWORKS_ANNOTATION = f"{GROUP}/default-networks"
#: Node annotation: per-node override of the default PodNetwork (KEP "Network Migration").
NODE_DEFAULT_PODNETWORK_ANNOTATION = f"{GROUP}/default-podnetwork"
#: Node annotation: JSON list of the PodNetwork names available on the node
#: (KEP Phase II requirement 18). Absent means every network is available.
NODE_PODNETWORKS_ANNOTATION = f"{GROUP}/podnetworks"
#: Pod annotation recording, at admission, the PodNetwork of each PodNetworkAttachment the pod
#: names: a JSON object `{"<attachment>": "<PodNetwork>"}`. Written by the controller's mutating
#: webhook with `--enforce-use-permission`; an attachment re-created afterwards to name another
#: PodNetwork is refused where networks are resolved (docs/controller.md "Permission to use a
#: PodNetwork").
ATTACHMENT_NETWORKS_ANNOTATION = f"{GROUP}/attachment-networks"
#: Namespace label: `disabled` leaves the namespace out of pod admission (docs/controller.md
#: "What admission does not see"); setting it needs `NAMESPACE_EXEMPTION_VERB`.
ADMISSION_LABEL = f"{GROUP}/admission"
#: The verb (on resource `namespaces` of `GROUP`, resourceName the namespace) a user needs to
#: set `ADMISSION_LABEL` to `disabled` (crds/admission-exemption-protection.yaml).
NAMESPACE_EXEMPTION_VERB = "exempt"
#: Pod annotation the controller touches to make kube-scheduler retry a pod.
REQUEUED_AT_ANNOTATION = f"{GROUP}/requeued-at"
#: The RBAC verb on `podnetworks` that `--enforce-use-permission` asks for (docs/controller.md
#: "Permission to use a PodNetwork").
USE_VERB = "use"

#: Finalizer that blocks deletion of a PodNetwork or attachment while in use.
IN_USE_FINALIZER = f"{GROUP}/in-use"

#: Provider of PodNetworks whose parameters are NPWG NetworkAttachmentDefinitions.
BRIDGE_PROVIDER = f"{GROUP}/npwg-bridge"

#: Feature gate name (KEP "Feature gate").
FEATURE_GATE = "MultiNetwork"


class ConditionType(StrEnum):
    """Condition types of PodNetwork and PodNetworkAttachment (positive polarity)."""

    READY = "Ready"
    """True when pods may attach. Written by the PodNetwork controller."""
    PARAMS_READY = "ParamsReady"
    """True when the parametersRefs objects are usable. Written by the provider only."""
    IN_USE = "InUse"
    """True while pods (or attachments) reference the object. Written by the controller."""


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ReadyReason(StrEnum):
    """Reasons of the Ready condition (KEP "Status Conditions" tables)."""

    READY = "Ready"
    """True: the object is valid and every condition it depends on is True."""
    PARAMS_NOT_READY = "ParamsNotReady"
    """False: parametersRefs is set and ParamsReady is absent or not True."""
    ADMINISTRATIVELY_DISABLED = "AdministrativelyDisabled"
    """False (PodNetwork): spec.enabled is false."""
    PODNETWORK_NOT_READY = "PodNetworkNotReady"
    """False (PodNetworkAttachment): its PodNetwork is missing or not Ready."""


class InUseReason(StrEnum):
    IN_USE = "InUse"
    NOT_IN_USE = "NotInUse"
