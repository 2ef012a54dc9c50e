"""`podnetwork migrate` against a live cluster: read, plan, apply (and `--rollback`).

The I/O edge of the migration; every decision is `bridge.migrate`'s. The API calls
are `bridge.migrate.cluster`'s, the rollback `bridge.migrate.rollback`'s.

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
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from bridge import migrate, npwg
from bridge.migrate import offline as migrate_offline
from bridge.migrate.cluster import (
    ATTACHMENT,
    NAD,
    OPTIONS,
    PODNETWORK,
    WORKLOAD_RESOURCES,
    ApiError,
    Cluster,
    list_or_empty,
)
from bridge.migrate.rollback import Outcome, PlanFile, load_plan, nest, rollback
from podnetwork.cli import manifests, outputs
from podnetwork.ground import constants
from podnetwork.kube import client as kube
from podnetwork.kube import credentials

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2


# --- reading -----------------------------------------------------------------------------------


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
            for obj in list_or_empty(cluster, resource, scope):
                inventory.add(obj)
    for obj in list_or_empty(cluster, PODNETWORK, None):
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


def workload_patch(change: migrate.WorkloadChange) -> dict[str, Any]:
    """The merge patch of one workload: new annotation set, NPWG annotation removed."""
    wl = change.workload
    annotations: dict[str, Any] = {
        migrate.NPWG_NETWORKS_ANNOTATION: None,
        constants.NETWORKS_ANNOTATION: change.after,
    }
    patch = nest((*wl.template_path, "metadata"), {"annotations": annotations})
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
            cluster.merge_patch(WORKLOAD_RESOURCES[wl.kind], wl.namespace, wl.name, workload_patch(change))
            outcomes.append(Outcome(str(wl.ref), True, f"{wl.annotations_path} migrated"))
        except ApiError as exc:
            hint = "; it changed since it was read, run the command again" if exc.status == 409 else ""
            outcomes.append(Outcome(str(wl.ref), False, f"{exc}{hint}"))
    return outcomes


# --- the command -------------------------------------------------------------------------------


def _report(outcomes: list[Outcome], err: TextIO) -> bool:
    for outcome in outcomes:
        print(f"  {outcome}", file=err)
    return all(o.ok for o in outcomes)


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
    "read_inventory",
    "run",
    "workload_patch",
]
