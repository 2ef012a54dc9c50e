"""Typed views of Kubernetes objects this project reads but does not own.

Each view declares only the fields this project reads, under their wire names
(aliases); Python names are accepted too. Views of objects only read (Pod, Node,
Namespace) ignore the rest of the object, so a large pod costs no more to read
than a small one. `ObjectMeta` and `Condition` keep unknown keys: the KEP models
embed `ObjectMeta` and write it back, and a node's conditions carry fields
(`lastHeartbeatTime`) a status patch must keep.

A view is built once, where an object enters the program (a watch event, an API
response, a request body, a manifest file), with `View.model_validate(obj)`; the
decisions then read attributes. A view refuses what the API server itself refuses
(a label that is not a string, a `nodeName` that is not a string): on a real
cluster parsing cannot fail, so each edge decides, and documents, what an
unreadable object means for it.

This module imports nothing of podnetwork: it is the "how Kubernetes spells it"
layer under the KEP layer.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _View(BaseModel):
    """Base of the read-only views: wire names by alias, unknown keys dropped."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class ObjectMeta(BaseModel):
    """The subset of `metav1.ObjectMeta` this project reads; other keys are kept."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = Field(None, alias="resourceVersion")
    creation_timestamp: str | None = Field(None, alias="creationTimestamp")
    deletion_timestamp: str | None = Field(None, alias="deletionTimestamp")
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None

    @property
    def key(self) -> str:
        """`namespace/name` (`/name` when cluster-scoped): how logs and indexes name an object."""
        return f"{self.namespace or ''}/{self.name or ''}"

    def annotation(self, key: str) -> str | None:
        return None if self.annotations is None else self.annotations.get(key)


class HasMetadata(Protocol):
    """Anything with `metadata`: every view here and the KEP models."""

    @property
    def metadata(self) -> ObjectMeta: ...


class Condition(BaseModel):
    """A condition as `metav1.Condition` and `NodeCondition` both spell it; other keys are kept.

    Lenient on purpose (only `type` and `status` are required): it reads
    conditions other components wrote. The KEP objects' own conditions are
    `podnetwork.kep.api.Condition`, with the CRD's rules.
    """

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(None, alias="lastTransitionTime")
    observed_generation: int | None = Field(None, alias="observedGeneration")

    def to_dict(self) -> dict[str, Any]:
        """The condition as the API server stores it (wire names, no nulls, other keys kept)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class PartialObjectMetadata(_View):
    """Any object, seen as its type and metadata only (`metav1.PartialObjectMetadata`)."""

    api_version: str = Field("", alias="apiVersion")
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


def head_of(obj: Any) -> PartialObjectMetadata | None:
    """`obj` seen as its type and metadata, or None when it does not fit (not a mapping, a name or
    a label that is not a string): for edges that read only what every object has."""
    try:
        return PartialObjectMetadata.model_validate(obj)
    except ValidationError:
        return None


class PodOS(_View):
    name: str = ""


class PodSchedulingGate(_View):
    name: str


class PodSpec(_View):
    node_name: str | None = Field(None, alias="nodeName")
    host_network: bool | None = Field(None, alias="hostNetwork", strict=True)
    os: PodOS | None = None
    scheduling_gates: list[PodSchedulingGate] | None = Field(None, alias="schedulingGates")


class PodStatus(_View):
    phase: str | None = None


class Pod(_View):
    """`v1.Pod`: metadata, where it runs, what it is waiting for, its phase."""

    api_version: str = Field("v1", alias="apiVersion")
    kind: str = "Pod"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


class NodeSpec(_View):
    unschedulable: bool | None = Field(None, strict=True)


class NodeStatus(_View):
    conditions: list[Condition] | None = None


class Node(_View):
    """`v1.Node`: metadata, whether it is cordoned, its conditions."""

    api_version: str = Field("v1", alias="apiVersion")
    kind: str = "Node"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.status.conditions or () if c.type == type_), None)


class Namespace(_View):
    """`v1.Namespace`: its metadata (name, annotations) is all this project reads."""

    api_version: str = Field("v1", alias="apiVersion")
    kind: str = "Namespace"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


def pod_event(pod: Pod, reason: str, message: str, *, key: str, type_: str, now: str, component: str,
              node: str | None = None) -> dict[str, Any]:
    """A core/v1 Event about `pod`, named `<pod>.<key>` (`key`: a digest the caller picks, so that
    the same report is posted once); `node` for a reporter that runs on one node."""
    return object_event("v1", "Pod", pod.metadata, reason, message, key=key, type_=type_, now=now,
                        component=component, node=node)


def object_event(api_version: str, kind: str, meta: ObjectMeta, reason: str, message: str, *, key: str,
                 type_: str, now: str, component: str, node: str | None = None) -> dict[str, Any]:
    """A core/v1 Event about any namespaced object (`involvedObject` from its kind and metadata),
    named `<object>.<key>` as `pod_event` names its Events."""
    name = meta.name or ""
    source: dict[str, str] = {"component": component}
    if node is not None:
        source["host"] = node
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name[: 253 - len(key) - 1]}.{key}", "namespace": meta.namespace},
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "namespace": meta.namespace,
            "uid": meta.uid,
            "resourceVersion": meta.resource_version,
        },
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": source,
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    if node is not None:
        body["reportingInstance"] = node
    return body


__all__ = [
    "Condition",
    "HasMetadata",
    "Namespace",
    "Node",
    "NodeSpec",
    "NodeStatus",
    "ObjectMeta",
    "PartialObjectMetadata",
    "Pod",
    "PodOS",
    "PodSchedulingGate",
    "PodSpec",
    "PodStatus",
    "head_of",
    "object_event",
    "pod_event",
]
