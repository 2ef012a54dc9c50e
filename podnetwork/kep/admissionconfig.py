"""The controller's pod webhooks as the API server is told of them (pure).

Their paths and names, and the Mutating- and ValidatingWebhookConfiguration
that `podnetwork.kube.registration` registers (with `--manage-webhooks`) and
deploy/controller/webhooks.yaml ships: which requests reach each webhook, and
why (`webhook_configurations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podnetwork.ground import constants
from podnetwork.kep.podchange import PROTECTED_ANNOTATIONS

MUTATE_PATH = "/mutate-pods"
VALIDATE_PATH = "/validate-pods"
WEBHOOK_NAME_MUTATE = f"pods.mutate.{constants.GROUP}"
WEBHOOK_NAME_VALIDATE = f"pods.validate.{constants.GROUP}"
CONFIGURATION_NAME = "podnetwork"
#: Namespaces the webhooks never see (the system ones; see `webhook_configurations`).
EXEMPT_NAMESPACES = ("kube-system", "multinetwork-system")


def annotation_changed(key: str) -> str:
    """A CEL expression (admission matchConditions) true when an UPDATE adds, removes or
    changes the annotation `key`. `has()` guards each read: CEL's `||` and `&&` absorb
    the error of a side whose other side decides."""
    def present(obj: str) -> str:
        return f"(has({obj}.metadata.annotations) && '{key}' in {obj}.metadata.annotations)"
    return (f"{present('object')} != {present('oldObject')} || ({present('object')} && "
            f"object.metadata.annotations['{key}'] != oldObject.metadata.annotations['{key}'])")


#: matchConditions of the validating webhook: every pod CREATE, the updates (of the pod or of
#: its status) that touch its networks or its admission record, and the Bindings that carry
#: either among their annotations (the API server copies them onto the pod). The kubelet's
#: status updates, kube-scheduler's Bindings and the agent's and the bridge's annotations
#: (network-status, pod-ips) never reach the webhook, so they are never held up by it, even
#: while it is down. The API server leaves `request.subResource` out of a request on the pod
#: itself, and reading an absent field is an error (under failurePolicy Fail, a refusal of every
#: pod), so `has()` guards it.
VALIDATE_MATCH_CONDITIONS = [{
    "name": "create-or-networks-change",
    "expression": (
        "has(request.subResource) && request.subResource == 'binding' ? has(object.metadata.annotations) && ("
        + " || ".join(f"'{key}' in object.metadata.annotations" for key in PROTECTED_ANNOTATIONS)
        + f") : request.operation != 'UPDATE' || {annotation_changed(constants.NETWORKS_ANNOTATION)} || "
        f"{annotation_changed(constants.ATTACHMENT_NETWORKS_ANNOTATION)}"),
}]
#: matchConditions of the mutating webhook: every CREATE, and the updates that change the
#: networks (hot-plug), for which it records the attachments they add.
MUTATE_MATCH_CONDITIONS = [{
    "name": "create-or-networks-change",
    "expression": f"request.operation != 'UPDATE' || {annotation_changed(constants.NETWORKS_ANNOTATION)}",
}]


def _hook(client_config: Mapping[str, Any], name: str, path: str, operations: list[str],
          resources: list[str], conditions: list[dict[str, str]]) -> dict[str, Any]:
    cfg = dict(client_config)
    if "url" in cfg:
        cfg["url"] = cfg["url"].rstrip("/") + path
    else:
        cfg["service"] = {**cfg["service"], "path": path}
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 5,
        "clientConfig": cfg,
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
                   "resources": resources, "scope": "Namespaced"}],
        "namespaceSelector": {"matchExpressions": [
            {"key": constants.ADMISSION_LABEL, "operator": "NotIn", "values": ["disabled"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": list(EXEMPT_NAMESPACES)}]},
        "matchConditions": [dict(c) for c in conditions],
    }


def webhook_configurations(client_config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Mutating- and ValidatingWebhookConfiguration for pods, for a given clientConfig.

    `client_config` is `{"url": ..., "caBundle": ...}` or `{"service": {...},
    "caBundle": ...}` without the path; failurePolicy is Fail (a pod admitted
    without auto-population would silently land on the wrong network) and
    namespaces labelled `multinetwork.x-k8s.io/admission: disabled` are left out,
    and so are `EXEMPT_NAMESPACES`: the controller must be able to start without
    its own webhook, and kube-system pods stay on `default` either way
    (docs/controller.md "What admission does not see").

    The mutating webhook sees pod CREATE and the UPDATEs that change the networks
    (it records the attachments' PodNetworks); the validating one sees CREATE and
    the UPDATEs of `pods` and of `pods/status` that change the networks or that
    record, and the `pods/binding` CREATEs that carry either (`matchConditions`):
    through those subresources, whoever may write them (kubelets, controllers,
    schedulers) could otherwise change a pod's networks unchecked.
    """
    mutating = _hook(client_config, WEBHOOK_NAME_MUTATE, MUTATE_PATH, ["CREATE", "UPDATE"], ["pods"],
                     MUTATE_MATCH_CONDITIONS)
    validating = _hook(client_config, WEBHOOK_NAME_VALIDATE, VALIDATE_PATH, ["CREATE", "UPDATE"],
                       ["pods", "pods/status", "pods/binding"], VALIDATE_MATCH_CONDITIONS)
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": CONFIGURATION_NAME},
         "webhooks": [{**mutating, "reinvocationPolicy": "Never"}]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": CONFIGURATION_NAME},
         "webhooks": [validating]},
    ]


__all__ = [
    "CONFIGURATION_NAME",
    "EXEMPT_NAMESPACES",
    "MUTATE_MATCH_CONDITIONS",
    "MUTATE_PATH",
    "VALIDATE_MATCH_CONDITIONS",
    "VALIDATE_PATH",
    "WEBHOOK_NAME_MUTATE",
    "WEBHOOK_NAME_VALIDATE",
    "annotation_changed",
    "webhook_configurations",
]
