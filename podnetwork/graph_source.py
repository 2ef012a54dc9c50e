"""Where `explain` and `graph` read objects from: manifest files or a cluster.

Both return plain dicts as the API serves them (camelCase, with `kind`), so
`podnetwork.graph.build` sees the same shapes either way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from podnetwork import constants, manifests

logger = logging.getLogger(__name__)


def from_files(inputs: Iterable[str], *, recursive: bool = False) -> list[dict[str, Any]]:
    """Objects from files, directories or `-`. Raises `manifests.ManifestError`."""
    return [doc.obj for doc in manifests.load(inputs, recursive=recursive)]


def _items(raw: Any, kind: str, api_version: str) -> list[dict[str, Any]]:
    data = json.loads(raw.data) if hasattr(raw, "data") else raw
    out = []
    for item in data.get("items") or []:
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", api_version)
        out.append(item)
    return out


def from_cluster(kubeconfig: str | None = None, *, context: str | None = None) -> list[dict[str, Any]]:
    """Pods, nodes, PodNetworks, attachments and their parameter objects from a cluster.

    One list call per kind (never per object), plus one get per distinct
    parameters object. Raises RuntimeError with a readable message when the
    cluster cannot be reached.
    """
    from kubernetes import client, config, dynamic
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, context=context)
        else:
            try:
                config.load_incluster_config()
            except ConfigException:
                config.load_kube_config(context=context)
    except (ConfigException, OSError) as exc:
        raise RuntimeError(f"cannot load cluster credentials: {exc}; pass --kubeconfig or -f FILES") from None
    api = client.ApiClient()
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    objects: list[dict[str, Any]] = []
    try:
        objects += _items(core.list_pod_for_all_namespaces(_preload_content=False), "Pod", "v1")
        objects += _items(core.list_node(_preload_content=False), "Node", "v1")
    except (ApiException, HTTPError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise RuntimeError(f"cannot list pods and nodes: {reason}") from None
    for plural, kind in ((constants.PODNETWORK_PLURAL, constants.PODNETWORK_KIND),
                         (constants.ATTACHMENT_PLURAL, constants.ATTACHMENT_KIND)):
        try:
            raw = custom.list_cluster_custom_object(constants.GROUP, constants.VERSION, plural)
        except ApiException as exc:
            raise RuntimeError(f"cannot list {plural} (are the CRDs installed?): {exc.reason}") from None
        objects += _items(raw, kind, constants.API_VERSION)
    wanted = {
        (ref.get("group") or "", ref.get("kind") or "", ref.get("namespace") or "", ref.get("name") or "")
        for obj in objects if obj["kind"] in (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND)
        for ref in (obj.get("spec") or {}).get("parametersRefs") or []
    }
    if wanted:
        dyn = dynamic.DynamicClient(api)
        for group, kind, namespace, name in sorted(wanted):
            try:
                # parametersRefs may name the kind or the resource (plural): try both.
                resource = dyn.resources.search(group=group, kind=kind) or dyn.resources.search(
                    group=group, name=kind)
                if not resource:
                    logger.warning("no resource %r in API group %r: is its CRD installed?", kind, group)
                    continue
                got = resource[0].get(name=name, namespace=namespace or None)
                objects.append(got.to_dict())
            except ApiException as exc:
                if exc.status != 404:
                    logger.warning("cannot read %s %s/%s: %s", kind, namespace, name, exc.reason)
    return objects


__all__ = ["from_cluster", "from_files"]
