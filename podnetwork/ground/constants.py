"""The names on the wire: API groups, versions, kinds, annotations, finalizer, conditions.

One name for one thing, spelled once: code, CRDs, docs and logs all take them from
here, in every layer (the KEP layer, the plumbing, the bridge, the agent, the
extender, the demo and the KEP conformance suite). Besides the KEP's own names, it
holds this project's (the bridge's NetworkSelectionOptions, its scheduling gate)
and the few names of the NPWG standard that layers below the bridge address: the
NetworkAttachmentDefinition's coordinates (`podnetwork.kube.client` lists and
watches NADs) and its two pod annotations (the conformance suite reads the
selection). `bridge.npwg.names` re-exports those as the standard's library.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

#: `apiVersion` of the KEP's kinds; as a type too, for the models' fields (a `Literal` type
#: needs the text itself, so the kinds' names are spelled as types and values below).
ApiVersion = Literal["multinetwork.x-k8s.io/v1alpha1"]
API_VERSION: ApiVersion = "multinetwork.x-k8s.io/v1alpha1"
GROUP, VERSION = API_VERSION.split("/")

PodNetworkKind = Literal["PodNetwork"]
PODNETWORK_KIND: PodNetworkKind = "PodNetwork"
PODNETWORK_PLURAL = "podnetworks"
PODNETWORK_SHORT = "pn"
AttachmentKind = Literal["PodNetworkAttachment"]
ATTACHMENT_KIND: AttachmentKind = "PodNetworkAttachment"
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
#: The bridge's scheduling gate: a pod naming a bridge network waits behind it until the bridge
#: has written the pod's NPWG selection (docs/bridge.md).
NPWG_SELECTION_GATE = f"{GROUP}/npwg-selection"

#: The bridge's own kind, NetworkSelectionOptions: the per-pod keys of an NPWG selection element
#: that a PodNetwork's parametersRefs may name (docs/bridge.md).
OPTIONS_GROUP = f"bridge.{GROUP}"
OPTIONS_VERSION = "v1alpha1"
OPTIONS_API_VERSION = f"{OPTIONS_GROUP}/{OPTIONS_VERSION}"
OPTIONS_KIND = "NetworkSelectionOptions"
OPTIONS_PLURAL = "networkselectionoptions"

# --- Names of the NPWG standard (multi-net spec v1.3) that layers below the bridge use ---------

#: API group, version and names of NetworkAttachmentDefinition (3.1).
NAD_GROUP = "k8s.cni.cncf.io"
NAD_VERSION = "v1"
NAD_API_VERSION = f"{NAD_GROUP}/{NAD_VERSION}"
NAD_KIND = "NetworkAttachmentDefinition"
NAD_PLURAL = "network-attachment-definitions"
NAD_SINGULAR = "network-attachment-definition"
NAD_SHORT = "net-attach-def"
#: Pod annotation selecting the secondary networks (4.1).
NPWG_NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
#: Pod annotation reporting the result of each attachment (5).
NPWG_NETWORK_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"

# --- MultiNetworkPolicy (the NPWG multi-networkpolicy API; KEP-3698 Phase III req 22) --------

#: API group, version and names of MultiNetworkPolicy, as the multi-networkpolicy project
#: defines them (its spec is NetworkPolicy's): docs/network-policy.md.
POLICY_GROUP = NAD_GROUP
POLICY_VERSION = "v1beta1"
POLICY_API_VERSION = f"{POLICY_GROUP}/{POLICY_VERSION}"
POLICY_KIND = "MultiNetworkPolicy"
POLICY_PLURAL = "multi-networkpolicies"
POLICY_SINGULAR = "multi-networkpolicy"
POLICY_SHORT = "multi-policy"
#: Policy annotation naming the NetworkAttachmentDefinitions a MultiNetworkPolicy applies to
#: (`name` in the policy's namespace or `namespace/name`, comma-separated), as the ecosystem spells it.
POLICY_FOR_NAD_ANNOTATION = "k8s.v1.cni.cncf.io/policy-for"
#: Policy annotation naming the PodNetworks a MultiNetworkPolicy applies to (comma-separated).
POLICY_FOR_PODNETWORK_ANNOTATION = f"{GROUP}/policy-for"

# --- Services on PodNetworks (KEP-3698 Phase III req 22; docs/services.md) -----------------

#: Service annotation naming the PodNetwork a Service is served on (by its PodNetwork's name; pods
#: attached through a PodNetworkAttachment of that PodNetwork count).
SERVICE_PODNETWORK_ANNOTATION = f"{GROUP}/podnetwork"
#: The Service label (a label, not an annotation) that makes kube-proxy leave a Service alone: its
#: informers select Services and EndpointSlices without it. Kubernetes' name (KEP-2447's
#: `service.kubernetes.io/service-proxy-name`).
SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
#: The value of `SERVICE_PROXY_NAME_LABEL` a Service on a PodNetwork must carry (a label value: no
#: slash, at most 63 characters): the proxy is this project's node side, not kube-proxy.
SERVICE_PROXY_NAME = f"podnetwork.{GROUP}"
#: The EndpointSlice labels of the API's convention (discovery.k8s.io/v1): which controller manages
#: a slice, and which Service it belongs to; and the label the EndpointSlice controller puts on the
#: slices of a headless Service (kube-proxy skips those too).
ENDPOINTSLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
ENDPOINTSLICE_SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SERVICE_HEADLESS_LABEL = "service.kubernetes.io/headless"
#: Our value of `ENDPOINTSLICE_MANAGED_BY_LABEL` (the upstream controller's is
#: `endpointslice-controller.k8s.io`): the slices the bridge writes of a network's addresses.
ENDPOINTSLICE_MANAGED_BY = f"endpointslice-controller.{GROUP}"
#: EndpointSlice label: the PodNetwork whose addresses a slice of ours holds (the Service's
#: annotation, under the same key, when the slice was written).
ENDPOINTSLICE_PODNETWORK_LABEL = SERVICE_PODNETWORK_ANNOTATION
#: At most this many endpoints in one EndpointSlice (the API's limit is 1000; 100 is the
#: EndpointSlice controller's default `--max-endpoints-per-slice`).
MAX_ENDPOINTS_PER_SLICE = 100

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
