"""The few API calls a live migration makes, and the resources it reads and writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge import npwg
from bridge.migrate.objects import FIELD_MANAGER, OPTIONS_KIND
from podnetwork.ground import constants
from podnetwork.ground.workloads import WorkloadKind
from podnetwork.kube import client as kube

#: The kinds the migration reads and writes, as `podnetwork.kube` resources.
Resource = kube.Resource
WORKLOAD_RESOURCES: dict[WorkloadKind, Resource] = {
    WorkloadKind.POD: kube.Pod,
    WorkloadKind.DEPLOYMENT: kube.Deployment,
    WorkloadKind.STATEFULSET: kube.StatefulSet,
    WorkloadKind.DAEMONSET: kube.DaemonSet,
    WorkloadKind.REPLICASET: kube.ReplicaSet,
    WorkloadKind.JOB: kube.Job,
    WorkloadKind.CRONJOB: kube.CronJob,
}
NAD = kube.NetworkAttachmentDefinition
PODNETWORK = kube.PodNetwork
ATTACHMENT = kube.PodNetworkAttachment
OPTIONS = kube.NetworkSelectionOptions
BY_KIND: dict[str, Resource] = {
    **{str(kind): resource for kind, resource in WORKLOAD_RESOURCES.items()},
    npwg.NAD_KIND: NAD,
    constants.PODNETWORK_KIND: PODNETWORK,
    constants.ATTACHMENT_KIND: ATTACHMENT,
    OPTIONS_KIND: OPTIONS,
}

#: The API server refused a request (`status`) or did not answer (`status` 0).
ApiError = kube.ApiError


class Cluster:
    """The few API calls the migration makes, over one `podnetwork.kube.Api`."""

    def __init__(self, api: kube.Api) -> None:
        self.api = api

    def list(self, resource: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every object of a resource (in a namespace, or everywhere), following pagination."""
        return self.api.list(resource, namespace).items

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get(resource, name, namespace)
        except kube.NotFound:
            return None

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply of a whole object we own (`force` stays false: a field another
        manager owns with another value is a conflict reported to the user)."""
        resource = BY_KIND[str(obj["kind"])]
        meta = obj["metadata"]
        return self.api.patch(resource, meta["name"], dict(obj), namespace=meta.get("namespace"),
                              patch_type="apply", field_manager=FIELD_MANAGER)

    def merge_patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> Any:
        return self.api.patch(resource, name, dict(patch), namespace=namespace, patch_type="merge",
                              field_manager=FIELD_MANAGER)

    def delete(self, resource: Resource, namespace: str | None, name: str, uid: str | None) -> None:
        try:
            self.api.delete(resource, name, namespace, uid=uid)
        except kube.NotFound:
            return


def list_or_empty(cluster: Cluster, resource: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
    """`cluster.list`, or nothing when the resource's CRD is not installed."""
    try:
        return cluster.list(resource, namespace)
    except ApiError as exc:
        if exc.status == 404:
            return []
        raise


__all__ = [
    "ATTACHMENT",
    "BY_KIND",
    "NAD",
    "OPTIONS",
    "PODNETWORK",
    "WORKLOAD_RESOURCES",
    "ApiError",
    "Cluster",
    "Resource",
    "list_or_empty",
]
