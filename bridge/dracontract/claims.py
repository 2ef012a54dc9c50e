"""The claims the bridge's admission makes from a pod's networks, and the templates they come from (pure).

With `podnetwork bridge --dra-claims DRIVER`, a pod created with `multinetwork.x-k8s.io/networks`
gets one `spec.resourceClaims[]` entry per PodNetwork it names (not `default`), each from the
ResourceClaimTemplate of that PodNetwork in the pod's namespace (`template`), which asks the
driver's DeviceClass for the PodNetwork's device by its `podNetwork` attribute (`names`). The
names are deterministic, so admission (which never calls the API) and the bridge controller
(which makes the templates) agree without talking, and a second pass of the webhook
(reinvocationPolicy IfNeeded) finds the entries it added. Kubernetes spells the limits
(core/v1 `PodResourceClaim.name`: a DNS label; `ResourceClaimTemplate` name: a DNS subdomain).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from bridge.dracontract import names as dra_names
from podnetwork.ground import names

#: Prefix of a template's name and of a pod's claim entry made by the bridge.
TEMPLATE_PREFIX = "podnetwork-"
CLAIM_PREFIX = "pn-"
#: The template's one request: the driver's prepare names it in its log and record.
REQUEST = "net0"
#: Labels on every template the bridge makes: `make uninstall` deletes them by these across namespaces.
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "podnetwork-bridge"
PODNETWORK_ANNOTATION = "bridge.multinetwork.x-k8s.io/podnetwork"
TEMPLATE_API_VERSION = "resource.k8s.io/v1"
TEMPLATE_KIND = "ResourceClaimTemplate"


def _digest(podnetwork: str) -> str:
    return hashlib.sha256(podnetwork.encode()).hexdigest()[:16]


def template_name(podnetwork: str) -> str:
    """`podnetwork-<name>` (a PodNetwork's name is a DNS subdomain, so this is one when it fits in
    253 characters), else `podnetwork-` and 16 hex digits of the name's SHA-256."""
    name = TEMPLATE_PREFIX + podnetwork
    if len(name) <= names.DNS1123_SUBDOMAIN_MAX and names.is_dns1123_subdomain(name):
        return name
    return TEMPLATE_PREFIX + _digest(podnetwork)


def claim_name(podnetwork: str) -> str:
    """The pod's `spec.resourceClaims[].name` for a PodNetwork: `pn-<name>` when that is a DNS label
    (a PodNetwork named with dots or at length is not one), else `pn-` and a digest."""
    name = CLAIM_PREFIX + podnetwork
    if len(name) <= names.DNS1123_LABEL_MAX and names.is_dns1123_label(name):
        return name
    return CLAIM_PREFIX + _digest(podnetwork)


def selector(driver: str, podnetwork: str) -> str:
    """CEL picking the PodNetwork's device among the driver's (a JSON string literal is a CEL one)."""
    attribute = f"device.attributes[{json.dumps(driver)}].{dra_names.ATTRIBUTE_PODNETWORK}"
    return f"{attribute} == {json.dumps(podnetwork)}"


def claim_entry(podnetwork: str) -> dict[str, str]:
    """The pod's `spec.resourceClaims[]` entry for a PodNetwork."""
    return {"name": claim_name(podnetwork), "resourceClaimTemplateName": template_name(podnetwork)}


def template(podnetwork: str, namespace: str, driver: str) -> dict[str, Any]:
    """The ResourceClaimTemplate of a PodNetwork in a namespace: one request for exactly one device
    of the driver's DeviceClass (named after the driver) whose `podNetwork` is the PodNetwork."""
    return {
        "apiVersion": TEMPLATE_API_VERSION,
        "kind": TEMPLATE_KIND,
        "metadata": {"name": template_name(podnetwork), "namespace": namespace,
                     "labels": {MANAGED_BY: MANAGER}, "annotations": {PODNETWORK_ANNOTATION: podnetwork}},
        "spec": {"spec": {"devices": {"requests": [{"name": REQUEST, "exactly": {
            "deviceClassName": driver,
            "selectors": [{"cel": {"expression": selector(driver, podnetwork)}}]}}]}}},
    }


__all__ = ["CLAIM_PREFIX", "MANAGED_BY", "MANAGER", "PODNETWORK_ANNOTATION", "REQUEST",
           "TEMPLATE_API_VERSION", "TEMPLATE_KIND", "TEMPLATE_PREFIX", "claim_entry", "claim_name",
           "selector",
           "template", "template_name"]
