"""What the bridge writes on a pod, decided from the pod and its translation. Pure.

- The selection: `k8s.v1.cni.cncf.io/networks` from the pod's KEP networks, once
  every PodNetwork and attachment it names is Ready, so that any NPWG
  implementation (Multus, or this project's agent) executes it. The bridge marks
  what it wrote with `bridge.multinetwork.x-k8s.io/networks-written` (a digest of
  the value), so it can tell its own annotation from a hand-written one: a
  hand-written selection that disagrees is never overwritten, it is reported in
  an Event. A pod whose translation is only the default network gets no
  annotation (NPWG 4: the annotation selects secondary networks). A pod already
  attached (it has `network-status`) is not changed: the selection is read once,
  at sandbox creation, and rewriting it afterwards would misreport.
- The reverse status: `multinetwork.x-k8s.io/pod-ips` from `network-status`
  (see `bridge.podips`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge import npwg, podips, translate
from bridge.translate import Translation
from podnetwork import conditions, constants
from podnetwork import networks as kep_networks
from podnetwork.api import Network
from podnetwork.fielderrors import InvalidObject

#: Pod annotation: digest of the selection value the bridge wrote.
WRITTEN_ANNOTATION = f"{translate.OPTIONS_GROUP}/networks-written"
#: Event reason when a hand-written NPWG selection disagrees with the KEP networks.
CONFLICT_REASON = "SelectionDisagrees"
#: The component name events carry.
COMPONENT = "podnetwork-bridge"


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def annotations_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def attached(pod: Mapping[str, Any]) -> bool:
    """The NPWG implementation has reported the pod's attachments (NPWG 5)."""
    return npwg.NETWORK_STATUS_ANNOTATION in annotations_of(pod)


def not_ready(
    networks: Sequence[Network], pod_namespace: str, objects: translate.Objects
) -> list[str]:
    """Why the pod's selection cannot be written yet: one line per object not Ready."""
    problems: list[str] = []
    for net in networks:
        if net.pod_network_attachment_name:
            key = (pod_namespace, net.pod_network_attachment_name)
            pna = objects.attachments.get(key)
            if not conditions.is_ready(pna):
                what = translate.describe(constants.ATTACHMENT_KIND, key[1], key[0])
                problems.append(f"{what} is {'missing' if pna is None else 'not Ready'}")
                continue
            pn_name = (pna or {}).get("spec", {}).get("podNetworkName") or ""
        else:
            pn_name = net.pod_network_name or ""
        pn = objects.podnetworks.get(pn_name)
        if not conditions.is_ready(pn):
            what = translate.describe(constants.PODNETWORK_KIND, pn_name)
            problems.append(f"{what} is {'missing' if pn is None else 'not Ready'}")
    return problems


@dataclass(frozen=True)
class SelectionDecision:
    """What to do about a pod's NPWG selection."""

    patch: dict[str, Any] | None = None
    """Merge patch for the pod (carries resourceVersion), or None."""
    conflict: str | None = None
    """Event message when a hand-written selection disagrees, or None."""


def _same(text: str, translation: Translation, pod_namespace: str) -> bool:
    try:
        return npwg.parse_selection(text, pod_namespace) == translation.elements
    except npwg.InvalidSelection:
        return False


def selection(pod: Mapping[str, Any], translation: Translation) -> SelectionDecision:
    """Write, keep, or report the pod's `k8s.v1.cni.cncf.io/networks` (module docstring)."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    annotations = annotations_of(pod)
    have = annotations.get(npwg.NETWORKS_ANNOTATION)
    wanted = translation.annotation
    if have is None and not translation.elements:
        return SelectionDecision()
    if have is not None and _same(have, translation, namespace):
        return SelectionDecision()
    if have is not None and annotations.get(WRITTEN_ANNOTATION) != digest(have):
        return SelectionDecision(
            conflict=(
                f"{npwg.NETWORKS_ANNOTATION} was not written by the bridge and disagrees with "
                f"{constants.NETWORKS_ANNOTATION}: the pod has {have}, its PodNetworks translate to "
                f"{wanted}; the bridge leaves it as it is (remove it to let the bridge write it)"
            )
        )
    if attached(pod):
        return SelectionDecision()
    patch: dict[str, Any] = {
        "metadata": {"annotations": {npwg.NETWORKS_ANNOTATION: wanted, WRITTEN_ANNOTATION: digest(wanted)}}
    }
    if meta.get("resourceVersion"):
        patch["metadata"]["resourceVersion"] = meta["resourceVersion"]
    return SelectionDecision(patch=patch)


def pod_ips_patch(pod: Mapping[str, Any], translation: Translation) -> dict[str, Any] | None:
    """Merge patch setting `multinetwork.x-k8s.io/pod-ips` from `network-status`, or None.

    Raises `ValueError` when the status annotation is malformed.
    """
    annotations = annotations_of(pod)
    text = annotations.get(npwg.NETWORK_STATUS_ANNOTATION)
    if text is None:
        return None
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    ips = podips.pod_ips(npwg.parse_status(text), translation, namespace)
    value = podips.format_pod_ips(ips)
    current = annotations.get(constants.POD_IPS_ANNOTATION)
    if current == value or (current is None and not ips):
        return None
    return {"metadata": {"annotations": {constants.POD_IPS_ANNOTATION: value}}}


def event(
    pod: Mapping[str, Any], reason: str, message: str, *, now: str, type_: str = "Warning"
) -> dict[str, Any]:
    """A core/v1 Event about the pod, named from the pod and the message so it is posted once."""
    meta = pod.get("metadata") or {}
    name = meta.get("name") or ""
    suffix = digest(f"{meta.get('uid')}/{reason}/{message}")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name[: 253 - len(suffix) - 1]}.{suffix}", "namespace": meta.get("namespace")},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def _pointer(key: str) -> str:
    """A JSON Pointer token (RFC 6901) for an annotation key."""
    return key.replace("~", "~0").replace("/", "~1")


def admission_patch(
    pod: Mapping[str, Any], objects: translate.Objects, namespace: str | None = None
) -> list[dict[str, Any]]:
    """JSON Patch operations (RFC 6902) a mutating admission webhook can return for a new pod.

    Writing the selection at admission closes the window a controller leaves between
    pod creation and the annotation (an NPWG implementation reads it at sandbox
    creation). The same rules as `selection` apply; nothing is added unless every
    object the pod names is Ready and the translation succeeds. Never raises for
    bad input: a pod whose networks cannot be read or translated gets no patch
    (validation is admission's other half). `namespace` is the admission request's,
    for pods whose metadata does not carry one yet.
    """
    try:
        nets = kep_networks.declared(pod)
    except InvalidObject:
        return []
    namespace = (pod.get("metadata") or {}).get("namespace") or namespace or ""
    if nets is None or (pod.get("spec") or {}).get("hostNetwork") or not namespace:
        return []
    try:
        translation = translate.translate(nets, namespace, objects)
    except (translate.TranslationError, ValueError):
        return []
    if not_ready(nets, namespace, objects):
        return []
    with_namespace = {**pod, "metadata": {**(pod.get("metadata") or {}), "namespace": namespace}}
    decision = selection(with_namespace, translation)
    if decision.patch is None:
        return []
    # The pod has annotations (it carries the KEP one), so adding keys under them is valid.
    return [
        {"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value}
        for key, value in decision.patch["metadata"]["annotations"].items()
    ]


def referenced(networks: Sequence[Network], pod_namespace: str) -> tuple[set[str], set[tuple[str, str]]]:
    """(PodNetwork names, attachment keys) the pod names directly."""
    pns = {n.pod_network_name for n in networks if n.pod_network_name}
    pnas = {(pod_namespace, n.pod_network_attachment_name) for n in networks if n.pod_network_attachment_name}
    return pns, pnas


__all__ = [
    "CONFLICT_REASON",
    "WRITTEN_ANNOTATION",
    "SelectionDecision",
    "admission_patch",
    "attached",
    "digest",
    "event",
    "not_ready",
    "pod_ips_patch",
    "referenced",
    "selection",
]
