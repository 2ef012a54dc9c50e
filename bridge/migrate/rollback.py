"""`podnetwork migrate --rollback PLAN`: undo an applied plan.

It restores each workload's NPWG annotation if the workload still carries exactly
what the migration wrote, then deletes the objects the plan created (attachments,
options, networks) that still carry the migration's label and origin and that no
Pod, workload or attachment uses.

The plan file is read at the edge into the models below: a plan whose records lack
what a restore needs is refused before the cluster is asked anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bridge.migrate.cluster import (
    ATTACHMENT,
    BY_KIND,
    PODNETWORK,
    WORKLOAD_RESOURCES,
    ApiError,
    Cluster,
    Resource,
    list_or_empty,
)
from bridge.migrate.objects import (
    FIELD_MANAGER,
    MIGRATED_BY_LABEL,
    NPWG_NETWORKS_ANNOTATION,
    OPTIONS_KIND,
    OPTIONS_PLURAL,
    ORIGIN_ANNOTATION,
)
from bridge.migrate.output import PLAN_KIND
from bridge.translate import WRITTEN_ANNOTATION, field_errors, written_by_bridge
from podnetwork.cli import manifests
from podnetwork.ground import constants, workloads
from podnetwork.ground.core import ObjectMeta, PartialObjectMetadata
from podnetwork.ground.workloads import InvalidWorkload, WorkloadKind
from podnetwork.kep import networks as kep_networks


@dataclass(frozen=True)
class Outcome:
    """What happened to one object."""

    ref: str
    ok: bool
    message: str

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'FAILED'} {self.ref}: {self.message}"


def nest(path: tuple[str, ...], leaf: dict[str, Any]) -> dict[str, Any]:
    """`leaf` under `path`: ("spec", "template"), {...} -> {"spec": {"template": {...}}}."""
    out = leaf
    for key in reversed(path):
        out = {key: out}
    return out


# --- the plan file -----------------------------------------------------------------------------


class _Read(BaseModel):
    """The plan file is ours, but may have been edited: the fields read are checked, others ignored."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class WorkloadRecord(_Read):
    """One workload of the MigrationPlan document (`bridge.migrate.output.plan_header`)."""

    kind: str
    namespace: str
    name: str
    annotations_path: str = Field(alias="annotationsPath")
    before: dict[str, str]
    after: dict[str, str]

    @field_validator("before")
    @classmethod
    def _has_the_selection(cls, value: dict[str, str]) -> dict[str, str]:
        if NPWG_NETWORKS_ANNOTATION not in value:
            raise ValueError(f"needs the {NPWG_NETWORKS_ANNOTATION} annotation the rollback restores")
        return value

    @field_validator("after")
    @classmethod
    def _has_the_networks(cls, value: dict[str, str]) -> dict[str, str]:
        if constants.NETWORKS_ANNOTATION not in value:
            raise ValueError(f"needs the {constants.NETWORKS_ANNOTATION} annotation the migration wrote")
        return value

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class PlanHeader(_Read):
    workloads: list[WorkloadRecord] | None = None


class _PlannedMeta(_Read):
    name: str
    namespace: str | None = None
    annotations: dict[str, str] | None = None


class PlannedRecord(_Read):
    """An object the plan created (one of the kinds a migration writes)."""

    kind: str
    metadata: _PlannedMeta

    @property
    def ref(self) -> str:
        namespace = self.metadata.namespace
        return f"{self.kind} {namespace + '/' if namespace else ''}{self.metadata.name}"

    @property
    def origin(self) -> str | None:
        return (self.metadata.annotations or {}).get(ORIGIN_ANNOTATION)


#: The kinds of the objects a plan creates, in the order a rollback deletes them.
_DELETE_ORDER = (constants.ATTACHMENT_KIND, OPTIONS_KIND, constants.PODNETWORK_KIND)


@dataclass
class PlanFile:
    header: PlanHeader
    objects: list[PlannedRecord]
    """The objects the plan created; documents of other kinds are not ours to delete."""


def read_plan(text: str, label: str, limits: manifests.Limits = manifests.DEFAULT_LIMITS) -> PlanFile:
    """A plan file, read. Raises `manifests.ManifestError` naming what does not fit."""
    loaded = manifests.load_text(text, label, limits=limits)
    if loaded.errors:
        raise loaded.errors[0]
    docs = [d.obj for d in loaded.documents]
    if not docs or workloads.type_meta(docs[0])[0] != PLAN_KIND:
        raise manifests.ManifestError(
            label, f"not a plan file: the first document must be a {PLAN_KIND} (written by -o)"
        )
    try:
        header = PlanHeader.model_validate(docs[0])
    except ValidationError as exc:
        raise manifests.ManifestError(label, f"not a usable plan file: {field_errors(exc)}") from None
    objects: list[PlannedRecord] = []
    for index, doc in enumerate(docs[1:], start=2):
        if workloads.type_meta(doc)[0] not in _DELETE_ORDER:
            continue
        try:
            objects.append(PlannedRecord.model_validate(doc))
        except ValidationError as exc:
            raise manifests.ManifestError(
                label, f"document {index} is not an object the plan created: {field_errors(exc)}") from None
    return PlanFile(header, objects)


def load_plan(path: str, limits: manifests.Limits = manifests.DEFAULT_LIMITS) -> PlanFile:
    """The plan file of `--rollback`, read by the manifest reader with its guards
    (regular file, size, aliases, depth). Raises `manifests.ManifestError`."""
    return read_plan(manifests.read_file(path, limits=limits, stdin_hint=False), path, limits)


# --- restoring workloads -----------------------------------------------------------------------


def _restore_workload(cluster: Cluster, record: WorkloadRecord) -> Outcome:
    ref = record.ref
    if record.kind not in WORKLOAD_RESOURCES:
        return Outcome(ref, False, "unknown workload kind in the plan")
    resource = WORKLOAD_RESOURCES[WorkloadKind(record.kind)]
    obj = cluster.get(resource, record.namespace, record.name)
    if obj is None:
        return Outcome(ref, True, "gone; nothing to restore")
    try:
        wl = workloads.read(obj)
    except InvalidWorkload as exc:
        return Outcome(ref, False, f"left as is: it {exc.message}")
    if wl is None or record.annotations_path != wl.annotations_path:
        where = "" if wl is None else f" ({wl.annotations_path})"
        return Outcome(ref, False, f"left as is: the plan's annotationsPath {record.annotations_path} is "
                       f"not where a {record.kind} keeps its pod template's annotations{where}; "
                       "restore it by hand")
    now = wl.annotations
    npwg_key, kep_key = NPWG_NETWORKS_ANNOTATION, constants.NETWORKS_ANNOTATION
    # `before` holds the KEP annotation too when the migration replaced `default` alone (a live Pod's)
    if now.get(kep_key) == record.before.get(kep_key) and now.get(npwg_key) == record.before[npwg_key]:
        return Outcome(ref, True, "already restored")
    # the bridge translates a live Pod's migrated networks back into a selection of its own (marked
    # by its digest): that one is the migration's outcome, not a change since
    bridge_wrote = written_by_bridge(now)
    if now.get(kep_key) != record.after[kep_key] or (npwg_key in now and not bridge_wrote):
        return Outcome(
            ref,
            False,
            f"left as is: its {kep_key} annotation changed since the migration; restore it by hand",
        )
    annotations = {npwg_key: record.before[npwg_key], kep_key: record.before.get(kep_key)}
    if WRITTEN_ANNOTATION in now:
        annotations[WRITTEN_ANNOTATION] = None
    patch = nest((*wl.template_path, "metadata"), {"annotations": annotations})
    if wl.resource_version:
        patch.setdefault("metadata", {})["resourceVersion"] = wl.resource_version
    cluster.merge_patch(resource, record.namespace, record.name, patch)
    return Outcome(ref, True, f"{npwg_key} restored")


# --- what is still used ------------------------------------------------------------------------


class _ParametersRef(_Read):
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None


class _AttachmentSpec(_Read):
    pod_network_name: str | None = Field(None, alias="podNetworkName")
    parameters_refs: list[_ParametersRef] | None = Field(None, alias="parametersRefs")


class _Attachment(_Read):
    """A live PodNetworkAttachment, seen as what it references. Not the KEP model: deciding what is
    still used must not overlook an attachment for a field this version does not know."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: _AttachmentSpec = Field(default_factory=_AttachmentSpec)


@dataclass
class Usage:
    """What still references PodNetworks, attachments and options: running Pods,
    top-level workloads, and attachments (read once per rollback)."""

    podnetworks: set[str]
    attachments: set[tuple[str, str]]
    by_attachment: dict[tuple[str, str], tuple[str, set[tuple[str, str]]]]
    """Each live attachment -> (its PodNetwork, the options it names)."""

    @classmethod
    def read(cls, cluster: Cluster) -> Usage:
        """Raises ApiError, or ValueError for an object whose references cannot be read."""
        usage = cls(set(), set(), {})
        for resource in WORKLOAD_RESOURCES.values():
            for obj in cluster.list(resource):
                usage._add_workload(obj)
        for obj in list_or_empty(cluster, ATTACHMENT, None):
            try:
                pna = _Attachment.model_validate(obj)
            except ValidationError as exc:
                kind = constants.ATTACHMENT_KIND
                raise ValueError(f"a {kind} cannot be read: {field_errors(exc)}") from None
            usage._add_attachment(pna)
        return usage

    def _add_workload(self, obj: dict[str, Any]) -> None:
        try:
            wl = workloads.read(obj)
        except InvalidWorkload as exc:
            raise ValueError(str(exc)) from None
        # KEP "InUse indicator": finished pods do not count; an owned template is its owner's
        # business, its pods count.
        if wl is None or wl.finished or (wl.owner is not None and wl.kind != WorkloadKind.POD):
            return
        text = wl.annotations.get(constants.NETWORKS_ANNOTATION)
        try:
            nets = kep_networks.parse(text) if text is not None else []
        except ValueError:
            return
        for net in nets:
            if net.pod_network_name:
                self.podnetworks.add(net.pod_network_name)
            if net.pod_network_attachment_name:
                self.attachments.add((wl.namespace, net.pod_network_attachment_name))

    def _add_attachment(self, pna: _Attachment) -> None:
        if pna.metadata.deletion_timestamp:
            return
        namespace = pna.metadata.namespace or ""
        options = {
            (ref.namespace or namespace, str(ref.name))
            for ref in pna.spec.parameters_refs or ()
            if ref.kind in (OPTIONS_KIND, OPTIONS_PLURAL)
        }
        key = (namespace, str(pna.metadata.name))
        self.by_attachment[key] = (str(pna.spec.pod_network_name), options)

    def uses(self, resource: Resource, namespace: str | None, name: str) -> bool:
        if resource is PODNETWORK:
            return name in self.podnetworks or any(pn == name for pn, _ in self.by_attachment.values())
        key = (namespace or "", name)
        if resource is ATTACHMENT:
            return key in self.attachments
        return any(key in options for _, options in self.by_attachment.values())

    def forget(self, resource: Resource, namespace: str | None, name: str) -> None:
        """An attachment was deleted: what it referenced is no longer used by it."""
        if resource is ATTACHMENT:
            self.by_attachment.pop((namespace or "", name), None)


# --- rolling back ------------------------------------------------------------------------------


def rollback(cluster: Cluster, plan: PlanFile) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for record in plan.header.workloads or ():
        try:
            outcomes.append(_restore_workload(cluster, record))
        except ApiError as exc:
            outcomes.append(Outcome(record.ref, False, str(exc)))
    try:
        usage = Usage.read(cluster)
    except (ApiError, ValueError) as exc:
        refs = [o.ref for o in plan.objects]
        return outcomes + [Outcome(r, False, f"kept: cannot tell whether it is used: {exc}") for r in refs]
    for kind in _DELETE_ORDER:
        for planned in [o for o in plan.objects if o.kind == kind]:
            outcomes.append(_remove(cluster, planned, usage))
    return outcomes


def _remove(cluster: Cluster, planned: PlannedRecord, usage: Usage) -> Outcome:
    resource = BY_KIND[planned.kind]
    namespace, name = planned.metadata.namespace, planned.metadata.name
    ref = planned.ref
    try:
        found = cluster.get(resource, namespace, name)
        if found is None:
            usage.forget(resource, namespace, name)
            return Outcome(ref, True, "already gone")
        try:
            live = PartialObjectMetadata.model_validate(found).metadata
        except ValidationError as exc:
            return Outcome(ref, False, f"kept: its metadata cannot be read: {field_errors(exc)}")
        ours = (live.labels or {}).get(MIGRATED_BY_LABEL) == FIELD_MANAGER
        if not (ours and live.annotation(ORIGIN_ANNOTATION) == planned.origin):
            return Outcome(ref, True, "kept: not created by this migration")
        if usage.uses(resource, namespace, name):
            return Outcome(ref, True, "kept: still in use; run --rollback again once nothing uses it")
        cluster.delete(resource, namespace, name, live.uid)
        usage.forget(resource, namespace, name)
        return Outcome(ref, True, "deleted")
    except ApiError as exc:
        return Outcome(ref, False, str(exc))


__all__ = ["Outcome", "PlanFile", "Usage", "load_plan", "nest", "read_plan", "rollback"]
