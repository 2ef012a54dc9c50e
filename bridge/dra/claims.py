"""One workload's claims: each attachment of its pods (an entry of the KEP networks annotation,
through the bridge's translation) as a pod claim on a ResourceClaimTemplate, and the workload
rewritten to name them. Pure.

The translation (`bridge.translate.translate`) resolves PodNetworkAttachments and
NetworkSelectionOptions as it does for the CNI agent. Attachments with the same shape
(same PodNetwork, same parameters) in one namespace share one template, named by a hash
of its spec.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge import npwg, translate
from bridge.dra import objects as dra
from bridge.dra.devices import Classes, Network, network
from bridge.dra.objects import CNI_DRIVER, PODNETWORK_ANNOTATION
from bridge.dra.parameters import cni_parameters, dranet_parameters, template_spec
from bridge.dra.reasons import Cannot, Reason
from podnetwork.ground import constants
from podnetwork.ground import names as kube_names
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.ground.workloads import Workload, WorkloadKind
from podnetwork.kep import networks, validation
from podnetwork.kep.api import Network as KepNetwork

#: Pod annotations that describe the KEP attachment and mean nothing after the export.
_KEP_POD_ANNOTATIONS = (
    constants.NETWORKS_ANNOTATION,
    constants.POD_IPS_ANNOTATION,
    constants.REQUEUED_AT_ANNOTATION,
    npwg.NETWORK_STATUS_ANNOTATION,
)
#: Server-set metadata that a manifest to re-create the object must not carry.
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")

_DNS_LABEL_MAX = 63
_NAME_MAX = 253
_HASH_LEN = 10


@dataclass(frozen=True)
class Claim:
    """One attachment of one workload, as a pod claim on a template."""

    pod_claim: str
    """`spec.resourceClaims[].name` in the pod."""
    template: str
    pod_network: str
    interface: str | None
    index: int
    """The entry's position in the pod's networks list."""


@dataclass
class Mapped:
    """A workload's claims, the templates they name, notes, and the translation they came from."""

    claims: list[Claim]
    templates: list[dra.ResourceClaimTemplate]
    notes: list[str]
    translation: translate.Translation


# --- Names -------------------------------------------------------------------------------------


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LEN]


def _label_from(name: str) -> str:
    """A DNS label made from a DNS subdomain (a PodNetwork name): dots become dashes."""
    label = name.replace(".", "-")[:_DNS_LABEL_MAX].strip("-")
    return label


def pod_claim_name(pod_network: str, index: int, taken: set[str]) -> str:
    """The pod's claim name for an attachment: the PodNetwork's name as a DNS label,
    else `network-<index>` (a name cut short, or one the pod already uses)."""
    label = _label_from(pod_network)
    if label and label not in taken and kube_names.is_dns1123_label(label):
        return label
    candidate = f"network-{index}"
    k = index
    while candidate in taken:
        k += 1000
        candidate = f"network-{k}"
    return candidate


def template_name(pod_network: str, spec: Mapping[str, Any]) -> str:
    """`<podnetwork>-<10 hex of the template spec>`: one name per shape, stable across runs."""
    base = pod_network[: _NAME_MAX - _HASH_LEN - 1].rstrip("-.")
    return f"{base}-{_digest(spec)}"


def _free_interface(nets: Sequence[KepNetwork], k: int) -> str:
    """`net<k>` as NPWG implementations name unnamed attachments, skipping names the pod uses."""
    used = {n.interface_name for n in nets if n.interface_name}
    n = k
    while f"net{n}" in used:
        n += 1
    return f"net{n}"


# --- The mapping -------------------------------------------------------------------------------


def _default_notes(nets: Sequence[KepNetwork]) -> list[str]:
    notes: list[str] = []
    listed = False
    for i, net in enumerate(nets):
        if net.pod_network_name == constants.DEFAULT_PODNETWORK:
            listed = True
            if net.interface_name or net.is_default_gw4 or net.is_default_gw6:
                notes.append(
                    f"spec.networks[{i}]: interfaceName/isDefaultGW4/isDefaultGW6 of the default PodNetwork "
                    "are not carried: the cluster's CNI plugin attaches and names the pod's network"
                )
    if not listed:
        notes.append("the pod does not list the default PodNetwork, but it keeps the cluster's network: "
                     "DRA claims add interfaces beside it")
    return notes


def _translation(wl: Workload, objs: translate.Objects) -> tuple[list[KepNetwork], translate.Translation]:
    """The workload's networks, checked as the KEP checks them, and translated. Raises `Cannot`."""
    if wl.template.spec is None:
        raise Cannot(Reason.INVALID_OBJECT, "the pod spec is not an object")
    try:
        nets = networks.parse(wl.annotations[constants.NETWORKS_ANNOTATION])
    except InvalidObject as exc:
        raise Cannot(Reason.INVALID_NETWORKS, "; ".join(str(e) for e in exc.errors)) from None
    errors = validation.validate_networks(nets, host_network=wl.host_network)
    if errors:
        raise Cannot(Reason.INVALID_NETWORKS, "; ".join(str(e) for e in errors))
    try:
        return nets, translate.translate(nets, wl.namespace, objs)
    except translate.TranslationError as exc:
        raise Cannot(str(exc.reason), str(exc)) from None


def _element_network(
    element: npwg.NetworkSelectionElement, source: translate.Source, label: str, objs: translate.Objects,
    classes: Classes, driver: str,
) -> Network:
    """What the element's NAD gives its claim, on the devices of its PodNetwork's class. Raises `Cannot`."""
    if source.pod_network in classes.problems:
        why = classes.problems[source.pod_network]
        raise Cannot(why.reason, f"{label}: PodNetwork {source.pod_network} has no DeviceClass "
                     f"({why.reason}, on its own line)")
    if source.pod_network not in classes.networks:
        raise Cannot(str(translate.Reason.PODNETWORK_NOT_FOUND),
                     f"{label}: PodNetwork {source.pod_network} does not exist")
    class_net, class_key = classes.networks[source.pod_network]
    nad_key = (element.namespace, element.name)
    if nad_key == class_key:
        return class_net
    # A PodNetworkAttachment naming its own NAD: the class still picks the devices.
    what = f"{label}: NetworkAttachmentDefinition {element.ref}"
    net = network(objs.nads[nad_key], what, driver)
    if net.selectors != class_net.selectors:
        raise Cannot(
            Reason.ATTACHMENT_CHANGES_DEVICE,
            f"{what} selects other devices than PodNetwork {source.pod_network}'s DeviceClass "
            f"({' && '.join(net.selectors)} instead of {' && '.join(class_net.selectors)})",
        )
    return net


def _template(
    namespace: str, pod_network: str, parameters: dict[str, Any], what: str, driver: str
) -> dra.ResourceClaimTemplate:
    size = len(json.dumps(parameters, separators=(",", ":")).encode())
    if size > dra.MAX_PARAMETERS_BYTES:
        raise Cannot(Reason.PARAMETERS_TOO_LARGE, f"{what}: the driver parameters are {size} bytes; "
                     f"DRA allows {dra.MAX_PARAMETERS_BYTES}")
    tspec = template_spec(driver, pod_network, parameters)
    return dra.ResourceClaimTemplate(
        metadata=dra.Meta(name=template_name(pod_network, tspec.to_dict()), namespace=namespace,
                          annotations={PODNETWORK_ANNOTATION: pod_network}),
        spec=tspec,
    )


def map_workload(wl: Workload, objs: translate.Objects, classes: Classes, driver: str) -> Mapped:
    """The claims and templates of one workload. Raises `Cannot` naming the first problem."""
    nets, tr = _translation(wl, objs)
    taken = {c.name for c in wl.spec.resource_claims or ()}
    claims: list[Claim] = []
    templates: list[dra.ResourceClaimTemplate] = []
    notes = _default_notes(nets)
    auto_names = 0
    for element, source in zip(tr.elements, tr.sources, strict=True):
        named = (f"PodNetworkAttachment {source.attachment}" if source.attachment
                 else f"PodNetwork {source.pod_network}")
        label = f"spec.networks[{source.index}] ({named})"
        net = _element_network(element, source, label, objs, classes, driver)
        what = f"{label}: NetworkAttachmentDefinition {element.ref}"
        interface = source.interface
        if driver == CNI_DRIVER:
            if not interface:
                auto_names += 1
                interface = _free_interface(nets, auto_names)
                notes.append(f"{label}: no interfaceName; the CNI DRA driver needs one: {interface}")
            parameters = cni_parameters(element, net, interface, what)
        else:
            parameters = dranet_parameters(element, net, interface, what)
        template = _template(wl.namespace, source.pod_network, parameters, what, driver)
        templates.append(template)
        claim = pod_claim_name(source.pod_network, source.index, taken)
        taken.add(claim)
        claims.append(Claim(claim, template.metadata.name, source.pod_network, interface, source.index))
    return Mapped(claims, templates, notes, tr)


# --- The workload rewritten --------------------------------------------------------------------


def _annotations(wl: Workload) -> dict[str, str]:
    """The template's annotations without the KEP's (and the bridge's selection, if the bridge wrote it)."""
    drop = set(_KEP_POD_ANNOTATIONS)
    if translate.written_by_bridge(wl.annotations):
        drop |= {npwg.NETWORKS_ANNOTATION, translate.WRITTEN_ANNOTATION}
    return {k: v for k, v in wl.annotations.items() if k not in drop}


def rewrite(wl: Workload, claims: Sequence[Claim]) -> dict[str, Any]:
    """The workload with the claims in its pod template and the KEP's pod annotations removed,
    ready to apply: no status, no server-set metadata, and for a Pod no `nodeName` (a pod
    bound to a node skips the scheduler, which allocates its claims).

    The object is the one read, changed where the view says: it keeps every field the view
    does not know. Only a workload with a pod spec (`map_workload`) is rewritten."""
    out = copy.deepcopy(dict(wl.obj))
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in _SERVER_METADATA:
            meta.pop(key, None)
    node: dict[str, Any] = out
    for key in wl.template_path:
        node = node[key]
    tmeta = node.setdefault("metadata", {})
    annotations = _annotations(wl)
    if annotations:
        tmeta["annotations"] = annotations
    else:
        tmeta.pop("annotations", None)
    if not tmeta:
        node.pop("metadata", None)
    spec = node["spec"]
    view = wl.spec
    claims_list = list(spec["resourceClaims"]) if view.resource_claims else []
    claims_list += [
        dra.PodResourceClaim(name=c.pod_claim, resource_claim_template_name=c.template).to_dict()
        for c in claims
    ]
    if claims_list:
        spec["resourceClaims"] = claims_list
    gates = [raw for raw, gate in zip(spec["schedulingGates"], view.scheduling_gates, strict=True)
             if gate.name != constants.NPWG_SELECTION_GATE] if view.scheduling_gates else []
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    if wl.kind == WorkloadKind.POD:
        spec.pop("nodeName", None)
    return out


__all__ = ["Claim", "Mapped", "map_workload", "pod_claim_name", "rewrite", "template_name"]
