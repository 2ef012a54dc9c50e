"""The workloads: every kind whose objects carry a pod template, and one typed view of them.

A Pod is its own template; a Deployment, StatefulSet, DaemonSet, ReplicaSet and Job
keep one at `spec.template`, a CronJob at `spec.jobTemplate.spec.template`. `KINDS`
says where, once, for every reader (`podnetwork migrate`, `podnetwork export-dra`).

`read(obj)` is the edge: it picks the kind by API group and kind, and reads the object
into the pydantic views below, which declare only the fields the readers use, under
their wire names, and ignore the rest (these objects are not ours). Like the views of
`podnetwork.ground.core`, they refuse what the API server refuses (an annotation that
is not a string, a `hostNetwork` that is not a boolean, a pod template that is not an
object): such an object raises `InvalidWorkload`, naming the fields, so the reader
reports it instead of guessing. The resulting `Workload` keeps the object as read
(`obj`) beside the view, for the readers that write it back changed.

Like the rest of the ground, it knows nothing of the KEP or the NPWG.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podnetwork.ground import excerpts
from podnetwork.ground.core import PodSchedulingGate
from podnetwork.ground.findings import ObjectRef


class WorkloadKind(StrEnum):
    """The kinds whose pod template can carry pod annotations."""

    POD = "Pod"
    DEPLOYMENT = "Deployment"
    STATEFULSET = "StatefulSet"
    DAEMONSET = "DaemonSet"
    REPLICASET = "ReplicaSet"
    JOB = "Job"
    CRONJOB = "CronJob"


@dataclass(frozen=True)
class KindInfo:
    group: str
    """The API group (`""`: core)."""
    template_path: tuple[str, ...]
    """Where the pod template sits in the object; empty for a Pod, which is its own template."""


_TEMPLATE = ("spec", "template")
KINDS: Mapping[WorkloadKind, KindInfo] = {
    WorkloadKind.POD: KindInfo("", ()),
    WorkloadKind.DEPLOYMENT: KindInfo("apps", _TEMPLATE),
    WorkloadKind.STATEFULSET: KindInfo("apps", _TEMPLATE),
    WorkloadKind.DAEMONSET: KindInfo("apps", _TEMPLATE),
    WorkloadKind.REPLICASET: KindInfo("apps", _TEMPLATE),
    WorkloadKind.JOB: KindInfo("batch", _TEMPLATE),
    WorkloadKind.CRONJOB: KindInfo("batch", ("spec", "jobTemplate", "spec", "template")),
}

#: Pod phases after which nothing attaches the pod again.
FINISHED_PHASES = ("Succeeded", "Failed")


def group_of(api_version: str) -> str:
    """`apps/v1` -> `apps`; `v1` -> `` (the core group)."""
    return api_version.rpartition("/")[0]


# --- The views ---------------------------------------------------------------------------------


class _View(BaseModel):
    """Wire names by alias, unknown keys dropped: these objects are not ours."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class OwnerReference(_View):
    kind: str | None = None
    name: str | None = None
    controller: bool | None = None


class WorkloadMeta(_View):
    """The workload's own metadata: who it is, its version, who controls it."""

    name: str | None = None
    namespace: str | None = None
    resource_version: str | None = Field(None, alias="resourceVersion")
    owner_references: list[OwnerReference] | None = Field(None, alias="ownerReferences")


class TemplateMeta(_View):
    """The pod template's metadata: its annotations are what the readers look at."""

    annotations: dict[str, str] | None = None


class PodMeta(WorkloadMeta):
    """A Pod's metadata is both: the workload's and its template's."""

    annotations: dict[str, str] | None = None


class PodResourceClaim(_View):
    """core/v1 `PodResourceClaim`: its name is what another claim of the pod may not reuse."""

    name: str


class TemplateSpec(_View):
    """The pod spec fields the readers use."""

    host_network: bool | None = Field(None, alias="hostNetwork", strict=True)
    resource_claims: list[PodResourceClaim] | None = Field(None, alias="resourceClaims")
    scheduling_gates: list[PodSchedulingGate] | None = Field(None, alias="schedulingGates")


class PodTemplate(_View):
    """core/v1 `PodTemplateSpec`."""

    metadata: TemplateMeta | None = None
    spec: TemplateSpec | None = None


class _PodStatus(_View):
    phase: str | None = None


class _Pod(_View):
    metadata: PodMeta | None = None
    spec: TemplateSpec | None = None
    status: _PodStatus | None = None


class _Templated(_View):
    template: PodTemplate | None = None


class _Controller(_View):
    """Deployment, StatefulSet, DaemonSet, ReplicaSet, Job: the template at `spec.template`."""

    metadata: WorkloadMeta | None = None
    spec: _Templated | None = None


class _JobTemplate(_View):
    spec: _Templated | None = None


class _CronJobSpec(_View):
    job_template: _JobTemplate | None = Field(None, alias="jobTemplate")


class _CronJob(_View):
    metadata: WorkloadMeta | None = None
    spec: _CronJobSpec | None = None


class _TypeMeta(_View):
    api_version: str | None = Field(None, alias="apiVersion")
    kind: str | None = None


class _LooseMeta(_View):
    name: Any = None
    namespace: Any = None


class _Loose(_View):
    """Any object, leniently: its type and name, as far as they can be read."""

    api_version: Any = Field(None, alias="apiVersion")
    kind: Any = None
    metadata: _LooseMeta | Any = None


def type_meta(obj: Mapping[str, Any]) -> tuple[str | None, str]:
    """(kind, API group) of any object: None and `` where they are not strings."""
    loose = _Loose.model_validate(obj)
    kind = loose.kind if isinstance(loose.kind, str) else None
    return kind, group_of(loose.api_version) if isinstance(loose.api_version, str) else ""


def identity(obj: Mapping[str, Any], default_namespace: str) -> tuple[str, str]:
    """(namespace, name) of any object, for sorting objects and naming one that does not fit its
    view: the namespace is `default_namespace` when it names none."""
    meta = _Loose.model_validate(obj).metadata
    if not isinstance(meta, _LooseMeta):
        return default_namespace, ""
    return str(meta.namespace or default_namespace), str(meta.name or "")


# --- The workload ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """An object with a pod template (or a Pod), as read."""

    kind: WorkloadKind
    api_version: str
    namespace: str
    """The object's namespace, or the one the reader gave for objects that name none."""
    name: str
    template: PodTemplate
    obj: Mapping[str, Any]
    """The object as read, for readers that write it back changed."""
    resource_version: str | None = None
    owner: ObjectRef | None = None
    """The workload that controls this one, when there is one (a ReplicaSet's Pod)."""
    phase: str | None = None
    """A Pod's `status.phase`."""
    source: str = ""
    """Where it was read: `FILE:doc N`, or empty for a cluster."""

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(str(self.kind), self.namespace, self.name)

    @property
    def template_path(self) -> tuple[str, ...]:
        return KINDS[self.kind].template_path

    @property
    def annotations_path(self) -> str:
        """`spec.template.metadata.annotations` and the like: where the template's annotations are."""
        return ".".join((*self.template_path, "metadata", "annotations"))

    @property
    def annotations(self) -> Mapping[str, str]:
        """The pod template's annotations."""
        meta = self.template.metadata
        return {} if meta is None or meta.annotations is None else meta.annotations

    @property
    def spec(self) -> TemplateSpec:
        return self.template.spec or TemplateSpec()

    @property
    def host_network(self) -> bool:
        return self.spec.host_network is True

    @property
    def finished(self) -> bool:
        """A Pod in phase Succeeded or Failed: nothing attaches it again."""
        return self.kind == WorkloadKind.POD and self.phase in FINISHED_PHASES


class InvalidWorkload(ValueError):
    """An object of a workload kind that does not fit the view: which fields, and where it was read."""

    def __init__(self, ref: ObjectRef, errors: str, source: str = "") -> None:
        super().__init__(f"{ref}: does not fit its schema: {errors}")
        self.ref = ref
        self.errors = errors
        self.source = source

    @property
    def message(self) -> str:
        return f"does not fit its schema: {self.errors}"


#: Field errors named in one message; the rest are counted.
_MAX_ERRORS = 5


def _message(err: Any) -> str:
    # The views' class names mean nothing to the user: an object is an object.
    return "Input should be an object" if err["type"] == "model_type" else str(err["msg"])


def _field_errors(exc: ValidationError) -> str:
    errors = exc.errors()
    shown = [
        f"{excerpts.cut('.'.join(str(p) for p in err['loc'])) or '(object)'}: {_message(err)}"
        for err in errors[:_MAX_ERRORS]
    ]
    if len(errors) > _MAX_ERRORS:
        shown.append(f"and {len(errors) - _MAX_ERRORS} more")
    return "; ".join(shown)


_KIND_NAMES = frozenset(str(kind) for kind in WorkloadKind)


def _type_of(obj: Any) -> tuple[WorkloadKind, str] | None:
    """The workload kind and `apiVersion` of an object, or None for other kinds."""
    if not isinstance(obj, Mapping):
        return None
    try:
        meta = _TypeMeta.model_validate(obj)
    except ValidationError:
        return None
    if meta.kind not in _KIND_NAMES or meta.api_version is None:
        return None
    kind = WorkloadKind(meta.kind)
    return (kind, meta.api_version) if group_of(meta.api_version) == KINDS[kind].group else None


def kind_of(obj: Any) -> WorkloadKind | None:
    """The workload kind of an object by its `apiVersion` and `kind`, or None for other kinds."""
    found = _type_of(obj)
    return None if found is None else found[0]


def _owner(meta: WorkloadMeta, namespace: str) -> ObjectRef | None:
    for ref in meta.owner_references or ():
        if ref.controller and ref.kind in _KIND_NAMES:
            return ObjectRef(str(ref.kind), namespace, str(ref.name))
    return None


def _view(kind: WorkloadKind, obj: Mapping[str, Any]) -> tuple[WorkloadMeta, PodTemplate, str | None]:
    """The workload's metadata, its pod template and (for a Pod) its phase. Raises ValidationError."""
    if kind == WorkloadKind.POD:
        pod = _Pod.model_validate(obj)
        meta = pod.metadata or PodMeta()
        template = PodTemplate(metadata=TemplateMeta(annotations=meta.annotations), spec=pod.spec)
        return meta, template, None if pod.status is None else pod.status.phase
    if kind == WorkloadKind.CRONJOB:
        cron = _CronJob.model_validate(obj)
        job = cron.spec.job_template if cron.spec else None
        holder = job.spec if job else None
        return cron.metadata or WorkloadMeta(), (holder.template if holder else None) or PodTemplate(), None
    controller = _Controller.model_validate(obj)
    holder = controller.spec
    return controller.metadata or WorkloadMeta(), (holder.template if holder else None) or PodTemplate(), None


def read(obj: Any, *, default_namespace: str = "default", source: str = "") -> Workload | None:
    """The workload view of an object; None when it is not of a workload kind.

    `default_namespace` is the namespace of an object that names none (a manifest file's).
    Raises `InvalidWorkload` for an object of a workload kind that does not fit the view.
    """
    found = _type_of(obj)
    if found is None:
        return None
    kind, api_version = found
    try:
        meta, template, phase = _view(kind, obj)
    except ValidationError as exc:
        namespace, name = identity(obj, default_namespace)
        raise InvalidWorkload(ObjectRef(str(kind), namespace, name), _field_errors(exc), source) from None
    namespace = meta.namespace or default_namespace
    return Workload(
        kind=kind,
        api_version=api_version,
        namespace=namespace,
        name=meta.name or "",
        template=template,
        obj=obj,
        resource_version=meta.resource_version,
        owner=_owner(meta, namespace),
        phase=phase,
        source=source,
    )


__all__ = [
    "FINISHED_PHASES",
    "KINDS",
    "InvalidWorkload",
    "KindInfo",
    "OwnerReference",
    "PodMeta",
    "PodResourceClaim",
    "PodTemplate",
    "TemplateMeta",
    "TemplateSpec",
    "Workload",
    "WorkloadKind",
    "WorkloadMeta",
    "group_of",
    "identity",
    "kind_of",
    "read",
    "type_meta",
]
