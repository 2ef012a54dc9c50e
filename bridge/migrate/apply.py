"""`podnetwork migrate` against a live cluster: read, plan, apply, roll back.

The I/O edge of the migration; every decision is `bridge.migrate`'s.

How changes are written, for a real API server:

- PodNetworks, NetworkSelectionOptions and PodNetworkAttachments (in that
  order, so nothing ever points at an object that does not exist yet) by
  server-side apply: `PATCH` with `application/apply-patch+yaml`,
  `fieldManager=podnetwork-migrate`, `force=false`, so a field another manager
  owns with a different value is a conflict reported to the user, not
  overwritten.
- Workloads last, by one JSON merge patch each (`fieldManager=podnetwork-migrate`)
  that sets `multinetwork.x-k8s.io/networks` and removes the NPWG annotation in
  one write (one rollout for a Deployment). Server-side apply cannot do this:
  it only removes fields its own manager owns, and the NPWG annotation belongs
  to whoever created the workload. The patch carries the `resourceVersion` read
  during planning, so a workload changed meanwhile is a 409 Conflict and left
  alone; running the command again plans it afresh.
- Nothing of a workload is written when any object it needs failed.

Rollback reads a plan file: it restores each workload's NPWG annotation if the
workload still carries exactly what the migration wrote, then deletes the
objects the plan created (attachments, options, networks) that still carry the
migration's label and origin and that no Pod, workload or attachment uses.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from bridge import migrate, npwg
from bridge.migrate import offline as migrate_offline
from podnetwork.cli import manifests, outputs
from podnetwork.ground import constants
from podnetwork.kep import networks as kep_networks
from podnetwork.kube import client as kube
from podnetwork.kube import credentials

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2

#: The kinds the migration reads and writes, as `podnetwork.kube` resources.
Resource = kube.Resource
WORKLOAD_RESOURCES: dict[str, Resource] = {
    "Pod": kube.Pod,
    "Deployment": kube.Deployment,
    "StatefulSet": kube.StatefulSet,
    "DaemonSet": kube.DaemonSet,
    "ReplicaSet": kube.ReplicaSet,
    "Job": kube.Job,
    "CronJob": kube.CronJob,
}
NAD = kube.NetworkAttachmentDefinition
PODNETWORK = kube.PodNetwork
ATTACHMENT = kube.PodNetworkAttachment
OPTIONS = kube.NetworkSelectionOptions
BY_KIND: dict[str, Resource] = {
    **WORKLOAD_RESOURCES,
    npwg.NAD_KIND: NAD,
    constants.PODNETWORK_KIND: PODNETWORK,
    constants.ATTACHMENT_KIND: ATTACHMENT,
    migrate.OPTIONS_KIND: OPTIONS,
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
                              patch_type="apply", field_manager=migrate.FIELD_MANAGER)

    def merge_patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> Any:
        return self.api.patch(resource, name, dict(patch), namespace=namespace, patch_type="merge",
                              field_manager=migrate.FIELD_MANAGER)

    def delete(self, resource: Resource, namespace: str | None, name: str, uid: str | None) -> None:
        try:
            self.api.delete(resource, name, namespace, uid=uid)
        except kube.NotFound:
            return


# --- reading -----------------------------------------------------------------------------------


def _list_or_empty(cluster: Cluster, resource: Resource, namespace: str | None) -> list[dict[str, Any]]:
    try:
        return cluster.list(resource, namespace)
    except ApiError as exc:
        if exc.status == 404:  # the CRD is not installed: there are none
            return []
        raise


def read_inventory(cluster: Cluster, namespaces: list[str] | None) -> migrate.Inventory:
    """Workloads and parameters in `namespaces` (None: all), every PodNetwork, and the
    NADs other namespaces' selections name."""
    inventory = migrate.Inventory()
    scopes: list[str | None] = list(namespaces) if namespaces else [None]
    for scope in scopes:
        for resource in WORKLOAD_RESOURCES.values():
            for obj in cluster.list(resource, scope):
                inventory.add(obj)
        for resource in (NAD, ATTACHMENT, OPTIONS):
            for obj in _list_or_empty(cluster, resource, scope):
                inventory.add(obj)
    for obj in _list_or_empty(cluster, PODNETWORK, None):
        inventory.add(obj)
    # A selection may name a NAD of a namespace outside the scope (NPWG 4.1.2.1.2).
    for wanted in sorted(_selected_nads(inventory) - set(inventory.nads)):
        found = cluster.get(NAD, *wanted)
        if found is not None:
            inventory.add(found)
    return inventory


def _selected_nads(inventory: migrate.Inventory) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for wl in inventory.workloads:
        text = wl.annotations.get(migrate.NPWG_NETWORKS_ANNOTATION)
        if text is None or wl.owner is not None:
            continue
        try:
            out.update((e.namespace, e.name) for e in npwg.parse_selection(text, wl.namespace))
        except ValueError:
            continue  # reported by the planner
    return out


# --- applying ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What happened to one object."""

    ref: str
    ok: bool
    message: str

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'FAILED'} {self.ref}: {self.message}"


def _nest(path: Iterable[str], leaf: dict[str, Any]) -> dict[str, Any]:
    out = leaf
    for key in reversed(tuple(path)):
        out = {key: out}
    return out


def workload_patch(change: migrate.WorkloadChange) -> dict[str, Any]:
    """The merge patch of one workload: new annotation set, NPWG annotation removed."""
    wl = change.workload
    annotations: dict[str, Any] = {
        migrate.NPWG_NETWORKS_ANNOTATION: None,
        constants.NETWORKS_ANNOTATION: change.after,
    }
    patch = _nest(wl.template_path, {"annotations": annotations})
    if wl.resource_version:
        patch.setdefault("metadata", {})["resourceVersion"] = wl.resource_version
    return patch


def apply_plan(cluster: Cluster, p: migrate.Plan) -> list[Outcome]:
    """Apply `p`: objects in order, then workloads; stops before workloads on any failure."""
    outcomes: list[Outcome] = []
    failed = False
    for planned in p.objects():
        try:
            cluster.apply(planned.obj)
            outcomes.append(Outcome(str(planned.ref), True, "applied"))
        except ApiError as exc:
            failed = True
            hint = ""
            if exc.status == 404:
                hint = f"; is the {planned.obj['kind']} CRD installed? (kubectl apply -f crds/)"
            outcomes.append(Outcome(str(planned.ref), False, f"{exc}{hint}"))
    for change in p.workloads:
        wl = change.workload
        if failed:
            outcomes.append(Outcome(str(wl.ref), False, "not changed: an object it needs failed above"))
            continue
        try:
            resource = WORKLOAD_RESOURCES[str(wl.kind)]
            cluster.merge_patch(resource, wl.namespace, wl.name, workload_patch(change))
            outcomes.append(Outcome(str(wl.ref), True, f"{wl.annotations_path} migrated"))
        except ApiError as exc:
            hint = "; it changed since it was read, run the command again" if exc.status == 409 else ""
            outcomes.append(Outcome(str(wl.ref), False, f"{exc}{hint}"))
    return outcomes


# --- rolling back ------------------------------------------------------------------------------


@dataclass
class PlanFile:
    header: dict[str, Any]
    objects: list[dict[str, Any]]


def read_plan(text: str, label: str, limits: manifests.Limits = manifests.DEFAULT_LIMITS) -> PlanFile:
    loaded = manifests.load_text(text, label, limits=limits)
    if loaded.errors:
        raise loaded.errors[0]
    docs = [d.obj for d in loaded.documents]
    if not docs or docs[0].get("kind") != migrate.PLAN_KIND:
        raise manifests.ManifestError(
            label, f"not a plan file: the first document must be a {migrate.PLAN_KIND} (written by -o)"
        )
    return PlanFile(docs[0], docs[1:])


def _annotations_at(obj: Mapping[str, Any], path: str) -> dict[str, str]:
    cur: Any = obj
    for key in path.split(".")[:-1]:
        cur = (cur or {}).get(key) if isinstance(cur, Mapping) else None
    found = (cur or {}).get("annotations") if isinstance(cur, Mapping) else None
    return dict(found or {})


def _restore_workload(cluster: Cluster, record: Mapping[str, Any]) -> Outcome:
    ref = f"{record['kind']} {record['namespace']}/{record['name']}"
    resource = WORKLOAD_RESOURCES.get(str(record["kind"]))
    if resource is None:
        return Outcome(ref, False, "unknown workload kind in the plan")
    obj = cluster.get(resource, record["namespace"], record["name"])
    if obj is None:
        return Outcome(ref, True, "gone; nothing to restore")
    path = str(record["annotationsPath"])
    now = _annotations_at(obj, path)
    before = dict(record["before"])
    after = dict(record["after"])
    npwg_key, kep_key = migrate.NPWG_NETWORKS_ANNOTATION, constants.NETWORKS_ANNOTATION
    if now.get(kep_key) is None and now.get(npwg_key) == before.get(npwg_key):
        return Outcome(ref, True, "already restored")
    if now.get(kep_key) != after.get(kep_key) or npwg_key in now:
        return Outcome(
            ref,
            False,
            f"left as is: its {kep_key} annotation changed since the migration; restore it by hand",
        )
    patch = _nest(path.split(".")[:-1], {"annotations": {npwg_key: before[npwg_key], kep_key: None}})
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    if rv:
        patch.setdefault("metadata", {})["resourceVersion"] = rv
    cluster.merge_patch(resource, record["namespace"], record["name"], patch)
    return Outcome(ref, True, f"{npwg_key} restored")


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
        usage = cls(set(), set(), {})
        for resource in WORKLOAD_RESOURCES.values():
            for obj in cluster.list(resource):
                phase = (obj.get("status") or {}).get("phase")
                if resource is kube.Pod and phase in ("Succeeded", "Failed"):
                    continue  # KEP "InUse indicator": finished pods do not count
                wl = migrate.workload_of(obj)
                if wl is None or (wl.owner is not None and resource is not kube.Pod):
                    continue  # an owned template is its owner's business, its pods count
                text = wl.annotations.get(constants.NETWORKS_ANNOTATION)
                try:
                    nets = kep_networks.parse(text) if text is not None else []
                except ValueError:
                    continue
                for net in nets:
                    if net.pod_network_name:
                        usage.podnetworks.add(net.pod_network_name)
                    if net.pod_network_attachment_name:
                        usage.attachments.add((wl.namespace, net.pod_network_attachment_name))
        for pna in _list_or_empty(cluster, ATTACHMENT, None):
            meta = pna.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue
            spec = pna.get("spec") or {}
            namespace = str(meta.get("namespace") or "")
            options = {
                (str(ref.get("namespace") or namespace), str(ref.get("name")))
                for ref in spec.get("parametersRefs") or []
                if ref.get("kind") in (migrate.OPTIONS_KIND, migrate.OPTIONS_PLURAL)
            }
            key = (namespace, str(meta.get("name")))
            usage.by_attachment[key] = (str(spec.get("podNetworkName")), options)
        return usage

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


def rollback(cluster: Cluster, plan: PlanFile) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for record in plan.header.get("workloads") or []:
        try:
            outcomes.append(_restore_workload(cluster, record))
        except ApiError as exc:
            ref = f"{record.get('kind')} {record.get('namespace')}/{record.get('name')}"
            outcomes.append(Outcome(ref, False, str(exc)))
    try:
        usage = Usage.read(cluster)
    except ApiError as exc:
        refs = [_ref_of(o) for o in plan.objects]
        return outcomes + [Outcome(r, False, f"kept: cannot tell whether it is used: {exc}") for r in refs]
    order = [constants.ATTACHMENT_KIND, migrate.OPTIONS_KIND, constants.PODNETWORK_KIND]
    for kind in order:
        for planned in [o for o in plan.objects if o.get("kind") == kind]:
            outcomes.append(_remove(cluster, planned, usage))
    return outcomes


def _ref_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{obj.get('kind')} {namespace + '/' if namespace else ''}{meta.get('name')}"


def _remove(cluster: Cluster, planned: Mapping[str, Any], usage: Usage) -> Outcome:
    resource = BY_KIND[str(planned["kind"])]
    meta = planned.get("metadata") or {}
    namespace, name = meta.get("namespace"), str(meta.get("name"))
    ref = _ref_of(planned)
    try:
        live = cluster.get(resource, namespace, name)
        if live is None:
            usage.forget(resource, namespace, name)
            return Outcome(ref, True, "already gone")
        live_meta = live.get("metadata") or {}
        ours = (live_meta.get("labels") or {}).get(migrate.MIGRATED_BY_LABEL) == migrate.FIELD_MANAGER
        same_origin = (live_meta.get("annotations") or {}).get(migrate.ORIGIN_ANNOTATION) == (
            meta.get("annotations") or {}
        ).get(migrate.ORIGIN_ANNOTATION)
        if not (ours and same_origin):
            return Outcome(ref, True, "kept: not created by this migration")
        if usage.uses(resource, namespace, name):
            return Outcome(ref, True, "kept: still in use; run --rollback again once nothing uses it")
        cluster.delete(resource, namespace, name, live_meta.get("uid"))
        usage.forget(resource, namespace, name)
        return Outcome(ref, True, "deleted")
    except ApiError as exc:
        return Outcome(ref, False, str(exc))


# --- the command -------------------------------------------------------------------------------


def _report(outcomes: list[Outcome], err: TextIO) -> bool:
    for outcome in outcomes:
        print(f"  {outcome}", file=err)
    return all(o.ok for o in outcomes)


def load_plan(path: str, limits: manifests.Limits = manifests.DEFAULT_LIMITS) -> PlanFile:
    """The plan file of `--rollback`, read by the manifest reader with its guards
    (regular file, size, aliases, depth). Raises `manifests.ManifestError`."""
    return read_plan(manifests.read_file(path, limits=limits, stdin_hint=False), path, limits)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    plan_file = None
    if args.rollback:
        # Before connecting: a plan that cannot be used needs no cluster to say so.
        try:
            plan_file = load_plan(args.rollback, manifests.limits_from(args))
        except manifests.ManifestError as exc:
            print(f"podnetwork migrate: {exc}", file=err)
            print("podnetwork migrate: nothing rolled back; fix the plan file above", file=err)
            return EXIT_USAGE
    try:
        creds = credentials.resolve(args.kubeconfig, args.context)
        credentials.check(creds)  # a failing exec plugin or unusable certificate: say so before reading
    except credentials.CredentialsError as exc:
        print(f"podnetwork migrate: {exc}", file=err)
        return EXIT_USAGE
    api = kube.Api(creds)
    try:
        return _run(Cluster(api), args, out, err, plan_file)
    except kube.Unreachable as exc:
        print(f"podnetwork migrate: cannot reach the API server {creds.describe}: {exc}", file=err)
        return EXIT_USAGE
    except (ApiError, credentials.CredentialsError) as exc:
        print(f"podnetwork migrate: {exc}", file=err)
        return EXIT_USAGE
    finally:
        api.close()


def _run(
    cluster: Cluster, args: argparse.Namespace, out: TextIO, err: TextIO, plan_file: PlanFile | None
) -> int:
    if plan_file is not None:
        print(f"rollback of {args.rollback}:", file=err)
        return EXIT_OK if _report(rollback(cluster, plan_file), err) else EXIT_INCOMPLETE

    namespaces = None if args.all_namespaces else [args.namespace]
    inventory = read_inventory(cluster, namespaces)
    p = migrate.plan(inventory)
    # The plan file is written before applying, so a half-applied plan can still be rolled back;
    # one that cannot be written stops here, before anything is applied.
    try:
        migrate_offline.report(p, args, out, err)
    except outputs.OutputError as exc:
        print(f"podnetwork migrate: {exc}", file=err)
        print(f"podnetwork migrate: {'nothing applied' if args.apply else 'no plan file written'}", file=err)
        return EXIT_USAGE
    print(migrate_offline.summary(p), file=err)
    ok = True
    if args.apply:
        if not args.output and not p.empty:
            print("note: no plan file (-o PLAN) is kept, so --rollback will not be possible", file=err)
        if p.empty:
            print("nothing to apply", file=err)
        else:
            print("applying:", file=err)
            ok = _report(apply_plan(cluster, p), err)
    return EXIT_OK if ok and not p.unmigratable else EXIT_INCOMPLETE


__all__ = [
    "Cluster",
    "Outcome",
    "apply_plan",
    "load_plan",
    "read_inventory",
    "read_plan",
    "rollback",
    "run",
    "workload_patch",
]
