"""The objects a real-tier test makes, and taking them away again.

`Made` remembers what a test created (PodNetworks and other cluster-scoped objects, pods,
node annotations it changed) and removes it when the test ends, pass or fail: pods first,
so that the in-use finalizer lets the networks go, then each object, waited for until the
API server no longer has it. A network still held by its finalizer once its pods are gone
is a controller bug: the cleanup then strips the finalizer, so the cluster is left clean,
and fails the test saying so.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from tests.real.cluster_support import Api, ApiError, eventually

GROUP = "multinetwork.x-k8s.io"
PODNETWORKS = f"/apis/{GROUP}/v1alpha1/podnetworks"
FINALIZER = f"{GROUP}/in-use"
BRIDGE_PROVIDER = f"{GROUP}/npwg-bridge"
#: a provider nobody implements here: the bridge leaves such networks (and pods naming them) alone
OTHER_PROVIDER = "example.com/elsewhere"
NETWORKS = f"{GROUP}/networks"
NPWG_SELECTION = "k8s.v1.cni.cncf.io/networks"
#: a scheduling gate of the test's own: the pod is never scheduled, so it never needs a node
HOLD = {"name": "example.com/hold"}


def attachments(ns: str) -> str:
    return f"/apis/{GROUP}/v1alpha1/namespaces/{ns}/podnetworkattachments"


def nads(ns: str) -> str:
    return f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions"


def pods(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def condition(obj: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in (obj or {}).get("status", {}).get("conditions", []) or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def podnetwork_body(name: str, *, provider: str = OTHER_PROVIDER, enabled: bool = True,
                    refs: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"provider": provider, "enabled": enabled}
    if refs:
        spec["parametersRefs"] = [dict(r) for r in refs]
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "PodNetwork", "metadata": {"name": name}, "spec": spec}


def nad_ref(ns: str, name: str) -> dict[str, str]:
    return {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "namespace": ns, "name": name}


def nad_body(name: str, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    config = config or {"cniVersion": "1.0.0", "type": "bridge", "bridge": "pnr-unused",
                        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.77.0.0/24",
                                                                      "gateway": "10.77.0.1"}]]}}
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name}, "spec": {"config": json.dumps(config)}}


def events_of(api: Api, ns: str, name: str, reason: str | None = None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
    return [e for e in items if e.get("involvedObject", {}).get("name") == name
            and (reason is None or e.get("reason") == reason)]


class Made:
    """What one test made, removed in `close` (pods, then objects, then node annotations)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.objects: list[str] = []
        self.pod_namespaces: set[str] = set()
        self.node_annotations: list[tuple[str, str, str | None]] = []

    def podnetwork(self, name: str, **kw: Any) -> dict[str, Any]:
        return self.create(PODNETWORKS, podnetwork_body(name, **kw))

    def create(self, collection: str, body: Mapping[str, Any]) -> dict[str, Any]:
        made: dict[str, Any] = self.api.create(collection, body)
        self.objects.append(f"{collection}/{made['metadata']['name']}")
        return made

    def pod(self, ns: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.pod_namespaces.add(ns)
        made: dict[str, Any] = self.api.create(pods(ns), body)
        return made

    def annotate_node(self, node: str, key: str, value: str | None) -> None:
        """Set (or, with None, remove) a node annotation; `close` puts the old value back."""
        old = self.api.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations", {}).get(key)
        if not any(n == node and k == key for n, k, _ in self.node_annotations):
            self.node_annotations.append((node, key, old))
        self.api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"annotations": {key: value}}})

    def close(self) -> None:
        problems: list[str] = []
        for ns in self.pod_namespaces:
            self.api.request("DELETE", pods(ns), params={"gracePeriodSeconds": "0"})
        for ns in self.pod_namespaces:
            eventually(lambda ns=ns: not self.api.get(pods(ns))["items"], f"the pods of {ns} are gone", timeout=60)
        for path in reversed(self.objects):
            self.api.delete(path)
        for path in reversed(self.objects):
            try:
                eventually(lambda path=path: self.api.find(path) is None, f"{path} is gone", timeout=60)
            except AssertionError as error:
                problems.append(str(error))
                self.api.merge_patch(path, {"metadata": {"finalizers": None}})
        for node, key, old in self.node_annotations:
            try:
                self.api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"annotations": {key: old}}})
            except ApiError as error:  # the node may be gone with the test's own second node
                if error.code != 404:
                    raise
        if problems:
            raise AssertionError("cleanup: " + "; ".join(problems))
