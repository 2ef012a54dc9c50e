"""Objects for the DRA export tests: NADs, PodNetworks, attachments, options and workloads as dicts."""

from __future__ import annotations

import json
from typing import Any

from bridge.dra import export

NETWORKS = "multinetwork.x-k8s.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"


def nad(name: str, config: dict[str, Any] | None, namespace: str = "default") -> dict[str, Any]:
    spec = {} if config is None else {"config": json.dumps({"cniVersion": "1.0.0", "name": name, **config})}
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def podnetwork(name: str, nad_name: str | None = None, *, namespace: str = "default", enabled: bool = True,
               provider: str = "multinetwork.x-k8s.io/npwg-bridge") -> dict[str, Any]:
    spec: dict[str, Any] = {"enabled": enabled, "provider": provider}
    if nad_name:
        spec["parametersRefs"] = [{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition",
                                   "name": nad_name, "namespace": namespace}]
    return {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": name},
            "spec": spec}


def attachment(name: str, pod_network: str, *, options: str | None = None, nad_name: str | None = None,
               namespace: str = "default") -> dict[str, Any]:
    refs = []
    if nad_name:
        refs.append({"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": nad_name})
    if options:
        refs.append({"group": "bridge.multinetwork.x-k8s.io", "kind": "NetworkSelectionOptions", "name": options})
    spec: dict[str, Any] = {"podNetworkName": pod_network}
    if refs:
        spec["parametersRefs"] = refs
    return {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetworkAttachment",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def options(name: str, spec: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "bridge.multinetwork.x-k8s.io/v1alpha1", "kind": "NetworkSelectionOptions",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def pod(name: str, nets: list[dict[str, Any]] | None, *, namespace: str = "default",
        annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    ann = dict(annotations or {})
    if nets is not None:
        ann[NETWORKS] = json.dumps(nets)
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if ann:
        meta["annotations"] = ann
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def deployment(name: str, nets: list[dict[str, Any]], namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}, "annotations": {NETWORKS: json.dumps(nets)}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


HOST_DEVICE = {"type": "host-device", "device": "ens5"}


def run(*objs: dict[str, Any], driver: str = export.DRANET_DRIVER) -> export.Export:
    inventory = export.Inventory()
    for obj in objs:
        inventory.add(obj)
    return export.export(inventory, export.Settings(driver=driver))


def parameters(result: export.Export, template: str) -> dict[str, Any]:
    """The opaque parameters of the one request of a template of the export."""
    found = [t for t in result.templates if t.metadata.name == template]
    assert len(found) == 1, [t.metadata.name for t in result.templates]
    devices = found[0].spec.spec.devices
    assert devices is not None and devices.config is not None
    opaque = devices.config[0].opaque
    assert opaque is not None
    return opaque.parameters


def only_claims(result: export.Export) -> list[export.Claim]:
    assert len(result.workloads) == 1, [u for u in result.unexpressible]
    return result.workloads[0].claims
