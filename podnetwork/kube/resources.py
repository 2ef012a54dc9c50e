"""The kinds this project reads and writes, as lightkube resources, by their names on the wire.

Every resource is a lightkube generic resource (a dict), the core kinds too: bodies
stay as the API server sent them (`podnetwork.kube.client`). The group, version,
kind and plural of our own kinds and the NPWG's come from `podnetwork.ground.constants`.
"""

from __future__ import annotations

from lightkube.core.resource import NamespacedResource, api_info
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericNamespacedResource,
    create_global_resource,
    create_namespaced_resource,
)

from podnetwork.ground import constants

Resource = type[GenericGlobalResource] | type[GenericNamespacedResource]

PodNetwork = create_global_resource(constants.GROUP, constants.VERSION, constants.PODNETWORK_KIND,
                                    constants.PODNETWORK_PLURAL)
PodNetworkAttachment = create_namespaced_resource(constants.GROUP, constants.VERSION,
                                                  constants.ATTACHMENT_KIND, constants.ATTACHMENT_PLURAL)
NetworkAttachmentDefinition = create_namespaced_resource(constants.NAD_GROUP, constants.NAD_VERSION,
                                                         constants.NAD_KIND, constants.NAD_PLURAL)
NetworkSelectionOptions = create_namespaced_resource(constants.OPTIONS_GROUP, constants.OPTIONS_VERSION,
                                                     constants.OPTIONS_KIND, constants.OPTIONS_PLURAL)
#: The ecosystem's NetworkPolicy for secondary networks (crds/multi-networkpolicy.yaml).
MultiNetworkPolicy = create_namespaced_resource(constants.POLICY_GROUP, constants.POLICY_VERSION,
                                                constants.POLICY_KIND, constants.POLICY_PLURAL)
#: kopf's peering objects (deploy/peering/), read by the controller's demotion guard.
ClusterKopfPeering = create_global_resource("kopf.dev", "v1", "ClusterKopfPeering", "clusterkopfpeerings")
# The core kinds as generic resources too (group ""): bodies stay as sent (see the module doc).
Pod = create_namespaced_resource("", "v1", "Pod", "pods")
Node = create_global_resource("", "v1", "Node", "nodes")
Namespace = create_global_resource("", "v1", "Namespace", "namespaces")
Event = create_namespaced_resource("", "v1", "Event", "events")
#: Services on PodNetworks (`bridge.operator.serviceslices`): read, and given EndpointSlices.
Service = create_namespaced_resource("", "v1", "Service", "services")
Deployment = create_namespaced_resource("apps", "v1", "Deployment", "deployments")
StatefulSet = create_namespaced_resource("apps", "v1", "StatefulSet", "statefulsets")
DaemonSet = create_namespaced_resource("apps", "v1", "DaemonSet", "daemonsets")
ReplicaSet = create_namespaced_resource("apps", "v1", "ReplicaSet", "replicasets")
Job = create_namespaced_resource("batch", "v1", "Job", "jobs")
CronJob = create_namespaced_resource("batch", "v1", "CronJob", "cronjobs")
#: Created (never stored) to ask the API server's authorizers whether a subject may do something.
#: RBAC, read by `podnetwork graph` to draw who may `use` a PodNetwork. A ClusterRole also owns the
#: registered webhook configurations (`--webhook-owner`): deleting it deletes them.
ClusterRole = create_global_resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles")
Role = create_namespaced_resource("rbac.authorization.k8s.io", "v1", "Role", "roles")
ClusterRoleBinding = create_global_resource("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding",
                                            "clusterrolebindings")
RoleBinding = create_namespaced_resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings")

SubjectAccessReview = create_global_resource(
    "authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews")
MutatingWebhookConfiguration = create_global_resource(
    "admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations")
ValidatingWebhookConfiguration = create_global_resource(
    "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations")
#: The webhooks' serving certificate and CA, kept by the operators (`podnetwork.kube.webhooksecret`).
Secret = create_namespaced_resource("", "v1", "Secret", "secrets")
#: Whether a webhook Service has a ready backend before its configuration is registered.
EndpointSlice = create_namespaced_resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices")

BY_KIND: dict[str, Resource] = {
    api_info(r).resource.kind: r for r in (
        PodNetwork, PodNetworkAttachment, NetworkAttachmentDefinition, NetworkSelectionOptions,
        MultiNetworkPolicy, ClusterKopfPeering, Pod, Node, Namespace, Event, Deployment, StatefulSet,
        DaemonSet, ReplicaSet, Job, CronJob, MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
        Secret, EndpointSlice, ClusterRole, Service)
}


def kind_of(resource: Resource) -> str:
    return str(api_info(resource).resource.kind)


def api_version_of(resource: Resource) -> str:
    return str(api_info(resource).resource.api_version)


def plural_of(resource: Resource) -> str:
    return str(api_info(resource).plural)


def namespaced(resource: Resource) -> bool:
    return issubclass(resource, NamespacedResource)


def path_of(resource: Resource, namespace: str | None = None, name: str | None = None) -> str:
    """The URL path of a collection or an object (for messages and raw requests)."""
    version = api_version_of(resource)
    base = f"/apis/{version}" if "/" in version else f"/api/{version}"
    if namespace and namespaced(resource):
        base += f"/namespaces/{namespace}"
    base += f"/{plural_of(resource)}"
    return f"{base}/{name}" if name else base


__all__ = [
    "BY_KIND",
    "ClusterKopfPeering",
    "ClusterRole",
    "ClusterRoleBinding",
    "CronJob",
    "DaemonSet",
    "Deployment",
    "EndpointSlice",
    "Event",
    "Job",
    "MultiNetworkPolicy",
    "MutatingWebhookConfiguration",
    "Namespace",
    "NetworkAttachmentDefinition",
    "NetworkSelectionOptions",
    "Node",
    "Pod",
    "PodNetwork",
    "PodNetworkAttachment",
    "ReplicaSet",
    "Resource",
    "Role",
    "RoleBinding",
    "Secret",
    "Service",
    "StatefulSet",
    "SubjectAccessReview",
    "ValidatingWebhookConfiguration",
    "api_version_of",
    "kind_of",
    "namespaced",
    "path_of",
    "plural_of",
]
