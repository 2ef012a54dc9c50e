"""What `podnetwork export-dra` reads from a cluster: one list per kind and scope.

Workloads, PodNetworkAttachments, NetworkAttachmentDefinitions and
NetworkSelectionOptions of the namespaces asked for (None: all), every
PodNetwork, and the NADs that PodNetworks name in other namespaces (a
PodNetwork is cluster-scoped, its NAD is not). Nothing is written.
"""

from __future__ import annotations

from typing import Any

from bridge import translate
from podnetwork.ground import constants, workloads


def read(
    kubeconfig: str | None, context: str | None, namespaces: list[str | None] | None
) -> list[dict[str, Any]]:
    """The objects, as the API serves them. Raises RuntimeError with a readable message."""
    from podnetwork.kube import client as kube
    from podnetwork.kube import credentials

    try:
        creds = credentials.resolve(kubeconfig, context)
        api = kube.Api(creds)
        api.client  # noqa: B018 (made now: unusable TLS material is reported as credentials)
    except credentials.CredentialsError as exc:
        raise RuntimeError(f"cannot load cluster credentials: {exc}; pass --kubeconfig or -f FILES") from None
    workload_resources = (kube.Pod, kube.Deployment, kube.StatefulSet, kube.DaemonSet, kube.ReplicaSet,
                          kube.Job, kube.CronJob)
    optional = (kube.PodNetworkAttachment, kube.NetworkAttachmentDefinition, kube.NetworkSelectionOptions)
    objects: list[dict[str, Any]] = []
    try:
        scopes: list[str | None] = namespaces or [None]
        for scope in scopes:
            for resource in workload_resources:
                objects += api.list(resource, scope).items
            for resource in optional:
                objects += _list_or_empty(api, resource, scope)
        objects += _list_or_empty(api, kube.PodNetwork, None)
        have = {workloads.identity(o, "") for o in objects if workloads.type_meta(o)[0] == constants.NAD_KIND}
        for ns, name in sorted(_podnetwork_nads(objects) - have):
            try:
                objects.append(api.get(kube.NetworkAttachmentDefinition, name, ns))
            except kube.NotFound:
                continue
    except (kube.ApiError, credentials.CredentialsError) as exc:
        reason = exc.message if isinstance(exc, kube.ApiError) else exc
        raise RuntimeError(f"cannot read the cluster: {reason}") from None
    finally:
        api.close()
    return objects


def _list_or_empty(api: Any, resource: Any, scope: str | None) -> list[dict[str, Any]]:
    from podnetwork.kube import client as kube

    try:
        return list(api.list(resource, scope).items)
    except kube.NotFound:  # the CRD is not installed: there are none
        return []


def _podnetwork_nads(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The NADs the PodNetworks name (with a namespace, as a cluster-scoped object must name them).
    A PodNetwork that does not fit its model names none: the export reports it."""
    wanted: set[tuple[str, str]] = set()
    for obj in objects:
        if workloads.type_meta(obj)[0] != constants.PODNETWORK_KIND:
            continue
        try:
            pn = translate.read(obj)
        except ValueError:
            continue
        if not isinstance(pn, translate.PodNetwork):
            continue
        nads, _options = translate.references(pn)
        wanted |= {(ns, name) for ns, name in nads if ns and name}
    return wanted
