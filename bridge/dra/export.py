"""PodNetworks and the workloads that use them, rendered as DRA objects. Pure.

The mapping (docs/dra.md has it side by side, with the sources):

- a PodNetwork -> a DeviceClass of the same name (both cluster-scoped DNS subdomains):
  `spec.selectors` pick the driver's devices that are on this network. For DRANET
  (driver `dra.net`) that is the host interface the PodNetwork's NAD names: a
  `host-device` NAD's `device`/`hwaddr`/`pciBusID`, an `ipvlan` NAD's `master`,
  matched against DRANET's device attributes `dra.net/ifName`, `mac`, `pciAddress`.
  For the CNI DRA driver every network is "a device of that driver";
- one attachment (an entry of the pod's networks, through the bridge's translation
  `bridge.translate.translate`, so PodNetworkAttachments and NetworkSelectionOptions
  resolve as they do for the CNI agent) -> a ResourceClaimTemplate with one request
  `nic` of `exactly` one device of the PodNetwork's class, and the driver's opaque
  parameters for that request: the interface name and every per-network and
  per-pod parameter the driver can take. Attachments with the same shape (same
  PodNetwork, same parameters) in one namespace share one template;
- the pod (or the pod template of a Deployment, StatefulSet, DaemonSet, ReplicaSet,
  Job, CronJob) -> `spec.resourceClaims[]` naming those templates, and without
  the KEP annotation, so the KEP layer and a DRA driver do not both attach it;
- a Pod's `k8s.v1.cni.cncf.io/network-status` -> KEP-4817 `networkData` per claim:
  what the driver would write in the ResourceClaim's `status.devices[]`.

The cluster default network (`default` PodNetwork) is not exported: DRA network
drivers add interfaces beside the pod's network, which the cluster's CNI plugin
still attaches (KEP "Default PodNetwork").

What a driver cannot express is a `Finding` (`podnetwork.ground.findings`) with a reason;
a workload is exported whole or not at all, as `podnetwork migrate` migrates
(docs/migration.md).

The modules: `devices` (a NAD's devices and parameters per driver, the DeviceClass),
`parameters` (per-pod keys as the driver's opaque parameters, the template spec),
`claims` (one workload's claims and templates, the workload rewritten), `networkdata`
(network-status as networkData); this one reads the inventory and puts them together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge import translate
from bridge.dra import objects as dra
from bridge.dra.claims import Claim, map_workload, pod_claim_name, rewrite, template_name
from bridge.dra.devices import Classes, class_network, device_class
from bridge.dra.networkdata import (
    NETWORK_DATA_API_VERSION,
    NETWORK_DATA_KIND,
    NetworkDataEntry,
    network_data,
    network_data_document,
)
from bridge.dra.objects import CNI_DRIVER, DRANET_DRIVER, DRIVERS, PODNETWORK_ANNOTATION, REQUEST_NAME
from bridge.dra.reasons import Cannot, Reason
from podnetwork.ground import constants, findings, workloads
from podnetwork.ground.findings import Finding, ObjectRef
from podnetwork.ground.workloads import InvalidWorkload, Workload


@dataclass(frozen=True)
class Settings:
    driver: str = DRANET_DRIVER
    default_namespace: str = "default"


@dataclass
class ExportedWorkload:
    ref: ObjectRef
    source: str
    obj: dict[str, Any]
    """The workload as it should be applied: claims added, KEP annotations removed."""
    claims: list[Claim]


@dataclass
class Export:
    device_classes: list[dra.DeviceClass] = field(default_factory=list)
    templates: list[dra.ResourceClaimTemplate] = field(default_factory=list)
    workloads: list[ExportedWorkload] = field(default_factory=list)
    network_data: list[NetworkDataEntry] = field(default_factory=list)
    unexpressible: list[Finding] = field(default_factory=list)
    """PodNetworks and workloads the driver's objects cannot express, each with its `Reason`."""
    notes: list[Finding] = field(default_factory=list)
    """What an exported workload loses or gains that does not stop its export."""
    skipped: list[Finding] = field(default_factory=list)

    def documents(self) -> list[dict[str, Any]]:
        """What to apply, in order: classes, templates (namespaced), then the workloads."""
        return (
            [c.to_dict() for c in self.device_classes]
            + [t.to_dict() for t in self.templates]
            + [w.obj for w in self.workloads]
        )


@dataclass
class Inventory:
    """The objects an export reads: the KEP and NPWG objects, and the workloads.

    The edge of the export: workloads are read into the shared view
    (`podnetwork.ground.workloads`); the other objects go to the translation, which reads them.
    """

    objects: list[Mapping[str, Any]] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    invalid: list[InvalidWorkload] = field(default_factory=list)
    """Objects of a workload kind that do not fit the workload view."""

    def add(self, obj: Mapping[str, Any], *, default_namespace: str = "default", source: str = "") -> None:
        try:
            wl = workloads.read(obj, default_namespace=default_namespace, source=source)
        except InvalidWorkload as exc:
            self.invalid.append(exc)
            return
        if wl is not None:
            self.workloads.append(wl)
        else:
            self.objects.append(obj)


def _podnetwork(name: str) -> ObjectRef:
    return ObjectRef(constants.PODNETWORK_KIND, "", name)


def _classes(objs: translate.Objects, settings: Settings, out: Export) -> Classes:
    """Each PodNetwork's DeviceClass, or why it has none (both also written to `out`)."""
    result = Classes()
    for (kind, _ns, name), unfit in sorted(objs.invalid.items()):
        if kind == constants.PODNETWORK_KIND:
            result.problems[name] = Cannot(Reason.INVALID_OBJECT, f"does not fit its schema: {unfit}")
    for name, pn in sorted(objs.podnetworks.items()):
        if name == constants.DEFAULT_PODNETWORK:
            out.skipped.append(Finding(
                _podnetwork(name),
                "the cluster default network stays with the cluster's CNI plugin; "
                "DRA network drivers add interfaces beside it",
            ))
            continue
        try:
            result.networks[name] = class_network(pn, objs, settings.driver)
        except Cannot as exc:
            result.problems[name] = exc
    for name, why in sorted(result.problems.items()):
        out.unexpressible.append(Finding(_podnetwork(name), str(why), why.reason))
    for name, (net, _key) in sorted(result.networks.items()):
        out.device_classes.append(device_class(name, net, settings.driver))
    return result


def _export_workload(
    wl: Workload, objs: translate.Objects, classes: Classes, settings: Settings, out: Export,
    templates: dict[tuple[str, str], dra.ResourceClaimTemplate],
) -> None:
    try:
        mapped = map_workload(wl, objs, classes, settings.driver)
    except Cannot as exc:
        if wl.owner is None:
            out.unexpressible.append(Finding(wl.ref, str(exc), exc.reason, wl.source))
        return
    out.network_data += network_data(wl, mapped, objs, settings.driver, out.notes)
    if wl.owner is not None:
        message = f"managed by {wl.owner.whole}: export the owner"
        out.skipped.append(Finding(wl.ref, message, source=wl.source))
        return
    for t in mapped.templates:
        templates.setdefault((t.metadata.namespace or "", t.metadata.name), t)
    out.notes += [Finding(wl.ref, n, source=wl.source) for n in mapped.notes]
    out.workloads.append(ExportedWorkload(wl.ref, wl.source, rewrite(wl, mapped.claims), mapped.claims))


def export(inventory: Inventory, settings: Settings = Settings()) -> Export:
    """Everything DRA needs for the inventory's PodNetworks and workloads, or why not."""
    out = Export()
    objs = translate.Objects.from_objects(inventory.objects)
    classes = _classes(objs, settings, out)
    templates: dict[tuple[str, str], dra.ResourceClaimTemplate] = {}
    # In a stable order whatever order the inputs came in (files, or one list per kind);
    # unreadable workloads among the others.
    items: list[Workload | InvalidWorkload] = [*inventory.workloads, *inventory.invalid]
    for wl in sorted(items, key=lambda w: (w.ref.namespace, w.ref.kind, w.ref.name)):
        if isinstance(wl, InvalidWorkload):
            out.unexpressible.append(Finding(wl.ref, wl.message, Reason.INVALID_OBJECT, wl.source))
        elif constants.NETWORKS_ANNOTATION in wl.annotations:
            _export_workload(wl, objs, classes, settings, out, templates)
    out.templates = [templates[k] for k in sorted(templates)]
    return out


def problems(e: Export) -> str:
    """`!` per PodNetwork or workload that cannot be expressed, `i` per note, `~` per skipped one
    (the marks of `podnetwork migrate`). Names and messages are printed whole."""
    return findings.report(e.unexpressible, e.notes, e.skipped, bounded=False)


def summary(e: Export) -> str:
    line = (f"export: {len(e.device_classes)} DeviceClass, {len(e.templates)} ResourceClaimTemplate, "
            f"{len(e.workloads)} workload(s), {len(e.network_data)} networkData")
    if e.unexpressible:
        line += f"; {len(e.unexpressible)} cannot be expressed"
    if e.skipped:
        line += f"; {len(e.skipped)} skipped"
    return line


__all__ = [
    "CNI_DRIVER",
    "DRANET_DRIVER",
    "DRIVERS",
    "NETWORK_DATA_API_VERSION",
    "NETWORK_DATA_KIND",
    "PODNETWORK_ANNOTATION",
    "REQUEST_NAME",
    "Claim",
    "Export",
    "ExportedWorkload",
    "Inventory",
    "NetworkDataEntry",
    "Reason",
    "Settings",
    "export",
    "network_data_document",
    "pod_claim_name",
    "problems",
    "summary",
    "template_name",
]
