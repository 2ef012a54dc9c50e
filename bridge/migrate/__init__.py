"""`podnetwork migrate`: from NPWG annotations to PodNetwork objects.

- `inventory`: the objects read (workloads through the shared view of
  `podnetwork.ground.workloads`, NADs, what exists);
- `planning`: the pure plan: an inventory in, PodNetworks, PodNetworkAttachments,
  NetworkSelectionOptions and rewritten workloads out, with what cannot be migrated
  as `podnetwork.ground.findings.Finding`s;
- `objects`: the objects a plan creates; `names`: how they are named;
- `output`: the plan file, the diff, the problems, the rewritten workloads;
- `offline`: the plan from manifest files; `apply`: the plan applied to a cluster,
  and rolled back; `command`: the subcommand.

The pure names are re-exported here (`migrate.plan(inventory)`).
"""

from __future__ import annotations

from bridge.migrate.inventory import Inventory, is_nad
from bridge.migrate.names import attachment_name, network_name
from bridge.migrate.objects import (
    FIELD_MANAGER,
    MIGRATED_BY_LABEL,
    MULTUS_DEFAULT_NETWORK_ANNOTATION,
    NAD_GROUP,
    NAD_KIND,
    NAD_PLURAL,
    NPWG_NETWORKS_ANNOTATION,
    OPTIONS_API_VERSION,
    OPTIONS_GROUP,
    OPTIONS_KIND,
    OPTIONS_PLURAL,
    OPTIONS_VERSION,
    ORIGIN_ANNOTATION,
    Action,
    PlannedObject,
    attachment_object,
    nad_ref,
    options_object,
    per_pod_keys,
    podnetwork_object,
)
from bridge.migrate.output import (
    PLAN_API_VERSION,
    PLAN_KIND,
    diff,
    dump_yaml,
    plan_header,
    problems,
    rewrite,
    to_yaml,
)
from bridge.migrate.planning import Plan, Reason, WorkloadChange, plan, written_by_bridge

__all__ = [
    "FIELD_MANAGER",
    "MIGRATED_BY_LABEL",
    "MULTUS_DEFAULT_NETWORK_ANNOTATION",
    "NAD_GROUP",
    "NAD_KIND",
    "NAD_PLURAL",
    "NPWG_NETWORKS_ANNOTATION",
    "OPTIONS_API_VERSION",
    "OPTIONS_GROUP",
    "OPTIONS_KIND",
    "OPTIONS_PLURAL",
    "OPTIONS_VERSION",
    "ORIGIN_ANNOTATION",
    "PLAN_API_VERSION",
    "PLAN_KIND",
    "Action",
    "Inventory",
    "Plan",
    "PlannedObject",
    "Reason",
    "WorkloadChange",
    "attachment_name",
    "attachment_object",
    "diff",
    "dump_yaml",
    "is_nad",
    "nad_ref",
    "network_name",
    "options_object",
    "per_pod_keys",
    "plan",
    "plan_header",
    "podnetwork_object",
    "problems",
    "rewrite",
    "to_yaml",
    "written_by_bridge",
]
