"""The bridge's mutating admission webhook for pods: AdmissionReview v1 in and out (pure).

On pod CREATE the decision is `bridge.operator.pods.admission_patch`: a pod naming a
network the bridge provides gets its NPWG selection (`k8s.v1.cni.cncf.io/networks`)
at once when every object it names is Ready, and otherwise the scheduling gate
`multinetwork.x-k8s.io/npwg-selection`, which the bridge controller removes in
the write that adds the selection. Either way kube-scheduler cannot bind the pod,
so kubelet cannot run CNI ADD, before the selection is there: with Multus as the
NPWG implementation a pod created before its networks were Ready would otherwise
be attached to the default network only (docs/bridge.md "The scheduling gate").

The webhook never refuses a pod for its networks (validation is the PodNetwork
controller's webhook) and never calls the API: it reads the bridge controller's
watch-fed memory. A pod object whose fields have the wrong JSON types (which the
API server never sends) is refused naming the field, and a body that is not an
AdmissionReview gets 400 (`podnetwork.kep.admissionreview`). Its answer is
idempotent (a pod that already has the selection or the gate gets nothing
more), so the configuration uses reinvocationPolicy IfNeeded
and still sees the networks the PodNetwork controller's webhook auto-populates,
whichever runs first.

A separate module from `podnetwork.kep.admission` because the KEP layer must not
import the bridge (.importlinter). The HTTP app serving it is the bridge command's
(`bridge.operator.admissionapp`), on the same FastAPI/uvicorn stack.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import Any

import pydantic

from bridge import translate
from bridge.operator import pods, selectionuse
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.kep import admissionreview
from podnetwork.kep.admissionconfig import annotation_changed
from podnetwork.kep.admissionreview import AdmissionRequest, InvalidPod

REVIEW_API_VERSION = admissionreview.API_VERSION
MUTATE_PATH = "/mutate-pods"
WEBHOOK_NAME = f"pods.npwg.{constants.GROUP}"
#: The validating webhook of `--enforce-use-permission` (`bridge.operator.selectionuse`).
VALIDATE_PATH = "/validate-pods"
VALIDATE_WEBHOOK_NAME = f"pods.validate.npwg.{constants.GROUP}"
#: Sorts after the PodNetwork controller's `podnetwork`, so on a first pass the API server
#: usually calls the bridge after auto-population; IfNeeded covers the other order.
CONFIGURATION_NAME = "podnetwork-bridge"
#: Namespaces the webhook never sees: the system ones, where the bridge itself runs.
EXEMPT_NAMESPACES = ("kube-system", "multinetwork-system")
logger = logging.getLogger(__name__)
#: The API server may truncate an admission warning longer than this (Kubernetes docs,
#: "Response" of dynamic admission control); cut here, so the cut is ours and says where
#: the rest is: the bridge posts the full text as an Event on the pod.
WARNING_MAX_CHARS = 256
MORE = " [...] (full text: the pod's Events)"
GATE_WARNING = (
    f"scheduling gate {pods.SCHEDULING_GATE} added: the pod is scheduled once the NPWG bridge "
    "has written its k8s.v1.cni.cncf.io/networks (its PodNetworks must be Ready)"
)


def mutate(request: AdmissionRequest | Mapping[str, Any], objects: translate.Objects, *,
           dra_driver: str | None = None) -> dict[str, Any]:
    """The webhook's answer to one AdmissionRequest: allowed, with a JSON Patch or none; refused
    only for a pod object of the wrong shape. With `dra_driver` (`--dra-claims`), the pod's DRA
    claims too (`pods.claims`).

    Raises `admissionreview.BadReview` when `request` is not an AdmissionRequest.
    """
    request = admissionreview.request_of(request)
    uid = request.uid
    if not request.is_pod or request.sub_resource or request.operation != "CREATE" or request.object is None:
        return admissionreview.allowed(uid)
    try:
        shape = request.pod()  # the old object does not matter: a CREATE has none
    except InvalidPod as exc:
        return admissionreview.refused(uid, exc.name, exc.errors)
    try:
        view = (pods.ClaimedPod if dra_driver else Pod).model_validate(request.object)
    except pydantic.ValidationError:
        # Fits the webhook's shape but not the view (a label that is not text...): the API
        # server decodes a pod into its type before admission, so it never sends one. As
        # for a pod whose networks cannot be read, no patch: validation is the other webhook's.
        return admissionreview.allowed(uid)
    decision = pods.admission(view, objects, namespace=request.namespace or None, dra_driver=dra_driver)
    ops = decision.ops
    warnings = list(decision.warnings)
    if warnings:
        who = f"{request.namespace or shape.namespace}/{shape.name}"
        for warning in warnings:
            logger.warning("admission of pod %s: %s", who, warning)
    if any(op["path"].startswith("/spec/schedulingGates") for op in ops):
        warnings.append(GATE_WARNING)
    extra: dict[str, Any] = {}
    if ops:
        extra["patchType"] = "JSONPatch"
        extra["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    if warnings:
        extra["warnings"] = [_short(w) for w in warnings]
    return admissionreview.allowed(uid, **extra)


def _short(warning: str) -> str:
    if len(warning) <= WARNING_MAX_CHARS:
        return warning
    return warning[: WARNING_MAX_CHARS - len(MORE)] + MORE


def review(body: Any, objects: translate.Objects, *, dra_driver: str | None = None) -> dict[str, Any]:
    """AdmissionReview v1 in (decoded JSON, or the typed model), AdmissionReview v1 out.

    Raises `admissionreview.BadReview`, a ValueError naming the field, for a body
    that is not an AdmissionReview v1 request (the server answers 400).
    """
    return mutate(admissionreview.review_of(body).request, objects, dra_driver=dra_driver)


def _client_config(client_config: Mapping[str, Any], path: str) -> dict[str, Any]:
    cfg = dict(client_config)
    if "url" in cfg:
        cfg["url"] = str(cfg["url"]).rstrip("/") + path
    else:
        cfg["service"] = {**cfg["service"], "path": path}
    return cfg


def _namespace_selector() -> dict[str, Any]:
    return {"matchExpressions": [
        {"key": f"{constants.GROUP}/admission", "operator": "NotIn", "values": ["disabled"]},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(EXEMPT_NAMESPACES)}]}


def webhook_configuration(client_config: Mapping[str, Any]) -> dict[str, Any]:
    """The MutatingWebhookConfiguration for a clientConfig without the path.

    `client_config` is `{"url": ..., "caBundle": ...}` or `{"service": {...}}`.
    failurePolicy Fail: while the bridge cannot answer, pods in the namespaces
    it covers are refused at creation rather than admitted without gate or
    selection, which with Multus would attach them to the default network only,
    silently (docs/bridge.md discusses Ignore). Namespaces labelled
    `multinetwork.x-k8s.io/admission: disabled` and `EXEMPT_NAMESPACES` are left
    out, so the bridge's own pods never wait for the bridge.
    """
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "clientConfig": _client_config(client_config, MUTATE_PATH),
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": _namespace_selector(),
        }],
    }


def _present(obj: str, key: str) -> str:
    return f"(has({obj}.metadata.annotations) && '{key}' in {obj}.metadata.annotations)"


#: matchConditions of the validating webhook: only requests whose object carries an NPWG
#: selection, and on UPDATE only when it changed; a Binding (a CREATE of pods/binding) only
#: when its annotations carry one (the API server copies them onto the pod). Every other pod
#: write, the kubelet's status updates and kube-scheduler's Bindings among them, never waits
#: for the bridge, even while it is down.
VALIDATE_MATCH_CONDITIONS = [{
    "name": "npwg-selection-set-or-changed",
    "expression": " || ".join(
        f"({_present('object', key)} && (request.operation != 'UPDATE' || {annotation_changed(key)}))"
        for key in selectionuse.CHECKED),
}]


def validating_configuration(client_config: Mapping[str, Any]) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration of `--enforce-use-permission` (`bridge.operator.selectionuse`).

    CREATE and UPDATE of `pods` and `pods/status` (a status update can change annotations
    on a real API server) and CREATE of `pods/binding`, narrowed by `VALIDATE_MATCH_CONDITIONS`;
    failurePolicy Fail (while the bridge cannot answer, a pod could otherwise name any
    network's NAD unchecked); the namespaces of the mutating webhook.
    """
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [{
            "name": VALIDATE_WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "clientConfig": _client_config(client_config, VALIDATE_PATH),
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": ["pods", "pods/status", "pods/binding"], "scope": "Namespaced"}],
            "namespaceSelector": _namespace_selector(),
            "matchConditions": [dict(c) for c in VALIDATE_MATCH_CONDITIONS],
        }],
    }


def webhook_configurations(client_config: Mapping[str, Any], *,
                           enforce_use: bool = False) -> list[dict[str, Any]]:
    """What `podnetwork.kube.registration.Keeper` registers: the mutating configuration and, with
    `enforce_use` (`--enforce-use-permission`), the validating one."""
    found = [webhook_configuration(client_config)]
    if enforce_use:
        found.append(validating_configuration(client_config))
    return found


def retired_configurations(*, enforce_use: bool = False) -> list[tuple[str, str]]:
    """What `podnetwork.kube.registration.Keeper` deletes when it is ours: without `enforce_use`,
    the validating configuration (a bridge restarted without `--enforce-use-permission` withdraws
    the webhook it registered with it)."""
    return [] if enforce_use else [("ValidatingWebhookConfiguration", CONFIGURATION_NAME)]


__all__ = [
    "CONFIGURATION_NAME",
    "MUTATE_PATH",
    "VALIDATE_MATCH_CONDITIONS",
    "VALIDATE_PATH",
    "VALIDATE_WEBHOOK_NAME",
    "WEBHOOK_NAME",
    "mutate",
    "retired_configurations",
    "review",
    "validating_configuration",
    "webhook_configuration",
    "webhook_configurations",
]
