"""Where `explain` and `graph` read objects from: manifest files or a cluster.

Both return plain dicts as the API serves them (camelCase, with `kind`), so
`podnetwork.kep.graph.build` sees the same shapes either way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podnetwork.cli import manifests
from podnetwork.ground import constants

logger = logging.getLogger(__name__)


def from_files(inputs: Iterable[str], *, recursive: bool = False) -> list[dict[str, Any]]:
    """Objects from files, directories or `-`. Raises `manifests.ManifestError`."""
    return [doc.obj for doc in manifests.load(inputs, recursive=recursive)]


def from_cluster(kubeconfig: str | None = None, *, context: str | None = None) -> list[dict[str, Any]]:
    """Pods, nodes, PodNetworks, attachments and their parameter objects from a cluster, and
    the roles granting `use` of a PodNetwork with their bindings.

    One list call per kind (never per object), plus one get per distinct
    parameters object. Raises RuntimeError with a readable message when the
    cluster cannot be reached.
    """
    from podnetwork.kube import client as kube
    from podnetwork.kube import credentials

    try:
        creds = credentials.resolve(kubeconfig, context)
        api = kube.Api(creds)
        api.client  # noqa: B018 (made now: unusable TLS material is reported as credentials)
    except credentials.CredentialsError as exc:
        raise RuntimeError(f"cannot load cluster credentials: {exc}; pass --kubeconfig or -f FILES") from None
    try:
        return _read(api)
    finally:
        api.close()


def _read(api: Any) -> list[dict[str, Any]]:
    from podnetwork.kube import client as kube
    from podnetwork.kube import credentials

    objects: list[dict[str, Any]] = []
    try:
        objects += api.list(kube.Pod).items
        objects += api.list(kube.Node).items
    except (kube.ApiError, credentials.CredentialsError) as exc:
        reason = exc.message if isinstance(exc, kube.ApiError) else exc
        raise RuntimeError(f"cannot list pods and nodes: {reason}") from None
    for resource in (kube.PodNetwork, kube.PodNetworkAttachment):
        try:
            objects += api.list(resource).items
        except kube.ApiError as exc:
            raise RuntimeError(f"cannot list {kube.plural_of(resource)} (are the CRDs installed?): "
                               f"{exc.reason or exc.message}") from None
    wanted = {
        (ref.group or "", ref.kind or "", ref.namespace or "", ref.name or "")
        for obj in objects if obj["kind"] in (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND)
        for ref in _parameters_refs(obj)
    }
    for group, kind, namespace, name in sorted(wanted):
        try:
            resource = api.discover(group, kind)
            if resource is None:
                logger.warning("no resource %r in API group %r: is its CRD installed?", kind, group)
                continue
            objects.append(api.get(resource, name, namespace or None))
        except kube.NotFound:
            continue
        except kube.ApiError as exc:
            logger.warning("cannot read %s %s/%s: %s", kind, namespace, name, exc.reason or exc.message)
    return objects + _rbac(api)


class _View(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class _ParametersRef(_View):
    group: str | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None


class _Spec(_View):
    parameters_refs: list[_ParametersRef] | None = Field(None, alias="parametersRefs")


class _Referrer(_View):
    """A PodNetwork or attachment, seen as what its parameters name: leniently, so that the
    objects named are drawn even beside a PodNetwork that does not fit its model (the graph
    shows that one INVALID)."""

    spec: _Spec | None = None


def _parameters_refs(obj: dict[str, Any]) -> list[_ParametersRef]:
    try:
        spec = _Referrer.model_validate(obj).spec
    except ValidationError:
        return []
    return [] if spec is None else list(spec.parameters_refs or ())


def _rbac(api: Any) -> list[dict[str, Any]]:
    """Roles granting `use` of a PodNetwork and the bindings to them; none, with a warning, when
    the credentials may not list RBAC (the graph is still drawn, without who may use what)."""
    from podnetwork.kep import graph
    from podnetwork.kube import client as kube

    found: list[dict[str, Any]] = []
    for resource in (kube.ClusterRole, kube.Role, kube.ClusterRoleBinding, kube.RoleBinding):
        try:
            found += api.list(resource).items
        except kube.ApiError as exc:
            logger.warning("cannot list %s, so the graph shows no permission to use PodNetworks: %s",
                           kube.plural_of(resource), exc.reason or exc.message)
            return []
    return [dict(obj) for obj in graph.referenced_roles(found)]


__all__ = ["from_cluster", "from_files"]
