"""The demo's world: its namespace, nodes and networks, and the manifests and condition views its
stages share (`demo.demo`, `demo.controlstory`, `demo.hotplug`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from bridge import npwg
from podnetwork.ground import constants
from podnetwork.ground.constants import ConditionType
from podnetwork.ground.core import Condition

NS = "demo"
PN: tuple[str, str] = (constants.API_VERSION, constants.PODNETWORK_KIND)
PNA: tuple[str, str] = (constants.API_VERSION, constants.ATTACHMENT_KIND)
NAD = (npwg.NAD_API_VERSION, npwg.NAD_KIND)
POD = ("v1", "Pod")
NODE = ("v1", "Node")
NODE_A, NODE_B = "node-a", "node-b"


@dataclass(frozen=True)
class Net:
    """One network of the demo and the CNI configuration behind it."""

    name: str
    plugin: str
    """`bridge` or `macvlan`."""
    link: str
    """Suffix of the Linux bridge (or macvlan parent) name."""
    subnet: str
    gateway: str | None = None
    """Named in the IPAM range, so the bridge's translation can give `default-route` a gateway."""

    def config(self, link_name: str, ipam_dir: Path) -> dict[str, Any]:
        subnet: dict[str, Any] = {"subnet": self.subnet}
        if self.gateway:
            subnet["gateway"] = self.gateway
        ipam = {"type": "host-local", "ranges": [[subnet]], "dataDir": str(ipam_dir)}
        if self.plugin == "bridge":
            # No gateway and no masquerade: the network is a plain L2 segment between pods,
            # nothing is added to the host's routing table.
            plugin = {
                "type": "bridge",
                "bridge": link_name,
                "isGateway": False,
                "ipMasq": False,
                "ipam": ipam,
            }
        else:
            plugin = {"type": "macvlan", "master": link_name, "mode": "bridge", "ipam": ipam}
        return {"cniVersion": "1.0.0", "name": f"demo-{self.name}", "plugins": [plugin]}


DEFAULT = Net("default", "bridge", "d", "198.18.0.0/24")
BLUE = Net("blue", "bridge", "b", "198.18.1.0/24", gateway="198.18.1.1")
GREEN = Net("green", "macvlan", "m", "198.18.2.0/24")
RED = Net("red", "bridge", "r", "198.18.3.0/24")
SECONDARY = (BLUE, GREEN, RED)


def pod_manifest(name: str, nets: list[dict[str, Any]] | None, node: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"app": "demo"}}
    if nets is not None:
        meta["annotations"] = {constants.NETWORKS_ANNOTATION: json.dumps(nets)}
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def podnetwork_manifest(net: Net) -> dict[str, Any]:
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.PODNETWORK_KIND,
        "metadata": {"name": net.name},
        "spec": {
            "enabled": True,
            "provider": constants.BRIDGE_PROVIDER,
            "parametersRefs": [
                {"group": npwg.NAD_GROUP, "kind": npwg.NAD_PLURAL, "name": net.name, "namespace": NS}
            ],
        },
    }


class _Status(BaseModel):
    model_config = ConfigDict(extra="ignore")

    conditions: list[Condition] | None = None


class _Conditioned(BaseModel):
    """Any object of the demo's store, seen as its status conditions."""

    model_config = ConfigDict(extra="ignore")

    status: _Status | None = None


def conditions_of(obj: dict[str, Any] | None) -> list[Condition]:
    """The status conditions of `obj` (none for None, or an object without them)."""
    status = _Conditioned.model_validate(obj if obj is not None else {}).status
    return list(status.conditions or []) if status is not None else []


def condition_summary(obj: dict[str, Any] | None) -> str:
    if obj is None:
        return "(gone)"
    parts = []
    for cond in conditions_of(obj):
        text = f"{cond.type}={cond.status}"
        if cond.status != "True" or cond.type == ConditionType.IN_USE:
            text += f" ({cond.reason}: {cond.message})"
        parts.append(text)
    if obj["metadata"].get("deletionTimestamp"):
        parts.append("deleting, finalizers " + ",".join(obj["metadata"].get("finalizers") or []))
    return ", ".join(parts) or "(no conditions yet)"


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in conditions_of(obj):
        if cond.type == type_:
            return cond.to_dict()
    return {}
