"""Pod admission: AdmissionReview v1 in, AdmissionReview out (pure decisions).

Mutating (KEP "Attaching PodNetwork to a Pod": "When the Networks field is not
specified, Cluster Default PodNetwork will be attached (and set in that
field)"): a new pod that names no network and is not hostNetwork gets the
networks annotation `[{"podNetworkName":"default"}]`, or its namespace's
profile from the namespace annotation `multinetwork.x-k8s.io/default-networks`
(KEP Story #6, Phase IV requirement 23). With `--enforce-use-permission` it also
records the PodNetwork of each attachment the pod names (`mutate`).

Validating: a new pod whose networks break the KEP's static rules ("Static
validations", `podnetwork.kep.validation`) is refused with one StatusCause per
field error, as the API server reports its own validation. An update is held to
the hot-plug rules and the admission record's (`podnetwork.kep.podchange`).

The request is parsed at the edge (`podnetwork.kep.admissionreview`): the
decisions take the typed `AdmissionRequest` and read the pod it carries as a
typed `Pod`, never the raw JSON. This module is the admission its callers see:
it re-exports the parts it is made of, the hot-plug rules (`podchange`), the
permission to use a PodNetwork (`usepermission`) and the webhook configurations
(`admissionconfig`). The HTTP app serving it is the controller command's
(`podnetwork.commands.admissionapp`).

Why FastAPI and not kopf's admission handlers: kopf turns a refusal into one
message and builds the JSONPatch from its own patch object; we want the
review-to-review function below, testable and reusable as is (the demo calls
it directly), with Kubernetes field-error causes in the refusal. The same
FastAPI/uvicorn stack serves the scheduler extender.
"""


import base64
import json
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.core import head_of
from podnetwork.ground.fielderrors import FieldError, InvalidObject
from podnetwork.kep import admissionreview, networks, validation
from podnetwork.kep.admissionconfig import (
    CONFIGURATION_NAME,
    EXEMPT_NAMESPACES,
    MUTATE_MATCH_CONDITIONS,
    MUTATE_PATH,
    VALIDATE_MATCH_CONDITIONS,
    VALIDATE_PATH,
    WEBHOOK_NAME_MUTATE,
    WEBHOOK_NAME_VALIDATE,
    annotation_changed,
    webhook_configurations,
)
from podnetwork.kep.admissionreview import AdmissionRequest, InvalidPod, Pod
from podnetwork.kep.api import DEFAULT_NETWORKS, Network
from podnetwork.kep.podchange import (
    HOTPLUG_DOC,
    PROTECTED_ANNOTATIONS,
    attachment_names,
    binding_errors,
    change_errors,
    declared_text,
    network_change_errors,
    record_change_errors,
    record_of,
    static_errors,
    status_change_errors,
)
from podnetwork.kep.usepermission import (
    USE_CHECK_SECONDS,
    USE_RESOURCE,
    USE_VERB,
    AttachmentNetwork,
    MayUse,
    Subject,
    UseRequest,
    UseUnavailable,
    attachment_missing,
    authorize_use,
    record_mismatch,
    requester,
    service_account,
    use_refusal,
    use_requests,
)

REVIEW_API_VERSION = admissionreview.API_VERSION
NAMESPACE_ANNOTATION_FIELD = f"metadata.annotations[{constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION}]"
#: A pod with no fields: what an UPDATE without its old object is compared with.
_NO_POD = Pod()


class Webhook(StrEnum):
    MUTATING = "mutating"
    VALIDATING = "validating"


def namespace_default(namespace: Mapping[str, Any] | None) -> list[Network] | None:
    """The networks profile a namespace sets for its pods, or None when it sets none.

    Raises `InvalidObject` (paths under the namespace annotation) when the
    profile cannot be used: an empty list, bad JSON, or entries that break the
    static rules.
    """
    if not namespace:
        return None
    text = networks.annotations_of(namespace).get(constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION)
    if text is None:
        return None
    try:
        nets = networks.parse(text)
    except InvalidObject as exc:
        raise InvalidObject([_rebase(e) for e in exc.errors]) from None
    errors = validation.validate_networks(nets)
    if errors:
        raise InvalidObject([_rebase(e) for e in errors])
    return nets


def _rebase(error: FieldError) -> FieldError:
    path = error.path
    for prefix in (networks.FIELD, networks.ANNOTATION_FIELD):
        if path.startswith(prefix):
            path = NAMESPACE_ANNOTATION_FIELD + path[len(prefix):]
            break
    return FieldError(path, error.type, error.value, error.detail)


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _annotation_patch(pod: Pod, value: str) -> list[dict[str, Any]]:
    if not pod.annotations:
        return [{"op": "add", "path": "/metadata/annotations",
                 "value": {constants.NETWORKS_ANNOTATION: value}}]
    return [{"op": "add", "path": f"/metadata/annotations/{_pointer(constants.NETWORKS_ANNOTATION)}",
             "value": value}]


def _populates(pod: Pod) -> bool:
    """A new pod gets networks when it names none and is not hostNetwork."""
    return declared_text(pod) is None and not pod.host_network


def _record_patch(pod: Pod, annotations_added: bool, record: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSON Patch operations that make the pod's admission record `record` (removed when empty)."""
    current = pod.annotation(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    path = f"/metadata/annotations/{_pointer(constants.ATTACHMENT_NETWORKS_ANNOTATION)}"
    if not record:
        return [] if current is None or annotations_added else [{"op": "remove", "path": path}]
    value = networks.format_attachment_networks(record)
    if value == current:
        return []
    if not annotations_added and not pod.annotations:
        return [{"op": "add", "path": "/metadata/annotations",
                 "value": {constants.ATTACHMENT_NETWORKS_ANNOTATION: value}}]
    return [{"op": "add", "path": path, "value": value}]


def _mutates(request: AdmissionRequest) -> bool:
    return request.is_pod and not request.sub_resource and request.operation in ("CREATE", "UPDATE")


def attachments_to_record(request: AdmissionRequest | Mapping[str, Any],
                          namespace: Mapping[str, Any] | None = None) -> list[str]:
    """The attachments whose PodNetwork the mutating webhook records for this request (pure):
    on CREATE every attachment the pod will name (its own list, or its namespace's profile),
    on an UPDATE of the networks the ones the update adds and the record lacks."""
    request = admissionreview.request_of(request)
    if not _mutates(request):
        return []
    try:
        pod, old_pod = request.pods()
    except InvalidPod:
        return []
    if request.operation == "CREATE":
        text = declared_text(pod)
        if text is None and _populates(pod):
            try:
                profile = namespace_default(namespace)
            except InvalidObject:
                return []
            text = networks.format(profile) if profile else None
        return sorted(attachment_names(text))
    old = old_pod or _NO_POD
    before, after = declared_text(old), declared_text(pod)
    if before == after:
        return []
    kept = record_of(old) or {}
    return sorted(attachment_names(after) - attachment_names(before) - set(kept))


def mutate(request: AdmissionRequest | Mapping[str, Any],
           namespace: Mapping[str, Any] | None,
           attachments: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The mutating webhook's decision for one AdmissionRequest: auto-population, and the
    admission record when `attachments` is given.

    `attachments` (with `--enforce-use-permission`) maps each name of
    `attachments_to_record` to the PodNetwork that attachment names now (None when it
    does not exist): the pod gets `multinetwork.x-k8s.io/attachment-networks`, the
    PodNetwork of every attachment it names, which the agent and the bridge hold the
    attachments to. An update that changes the networks keeps the entries of the
    attachments it keeps, adds the new ones, and drops the others.

    Raises `admissionreview.BadReview` when `request` is not an AdmissionRequest.
    """
    request = admissionreview.request_of(request)
    uid = request.uid
    if not _mutates(request):
        return admissionreview.allowed(uid)
    try:
        pod, old_pod = request.pods()
    except InvalidPod as exc:
        if request.operation == "CREATE":
            return admissionreview.refused(uid, exc.name, exc.errors)
        return admissionreview.allowed(uid)
    patch: list[dict[str, Any]] = []
    text = declared_text(pod)
    if request.operation == "CREATE" and _populates(pod):
        try:
            profile = namespace_default(namespace)
        except InvalidObject as exc:
            what = f'cannot get networks from namespace "{request.namespace}" (fix its annotation)'
            return admissionreview.refused(uid, pod.name, exc.errors, what=what)
        text = networks.format(profile or list(DEFAULT_NETWORKS))
        patch = _annotation_patch(pod, text)
    if attachments is not None:
        patch += _record(request.operation, pod, old_pod or _NO_POD, text, attachments, bool(patch))
    if not patch:
        return admissionreview.allowed(uid)
    encoded = base64.b64encode(json.dumps(patch).encode()).decode()
    return admissionreview.allowed(uid, patchType="JSONPatch", patch=encoded)


def _record(operation: str, pod: Pod, old_pod: Pod, text: str | None,
            attachments: Mapping[str, str | None], annotations_added: bool) -> list[dict[str, Any]]:
    """The patch of the admission record: the attachments the pod names now (`text`), each with
    the PodNetwork it was recorded with before the update, or else the one it names now."""
    names = attachment_names(text)
    kept: Mapping[str, str] = {}
    if operation == "UPDATE":
        if declared_text(old_pod) == text:
            names = set()  # the networks did not change: nothing to record
        else:
            kept = record_of(old_pod) or {}
    if not (names or operation == "CREATE" or kept):
        return []
    record = {name: kept[name] if name in kept else attachments.get(name) for name in names}
    return _record_patch(pod, annotations_added, {k: v for k, v in record.items() if v is not None})


def validate(request: AdmissionRequest | Mapping[str, Any]) -> dict[str, Any]:
    """The validating webhook's decision for one AdmissionRequest.

    Raises `admissionreview.BadReview` when `request` is not an AdmissionRequest.
    """
    request = admissionreview.request_of(request)
    uid = request.uid
    if _is_binding(request):
        return _binding_answer(request)
    if not request.is_pod or request.operation not in ("CREATE", "UPDATE"):
        return admissionreview.allowed(uid)
    try:
        pod, old_pod = request.pods()
    except InvalidPod as exc:
        return admissionreview.refused(uid, exc.name, exc.errors)
    if request.operation == "CREATE":
        if request.sub_resource:
            return admissionreview.allowed(uid)
        errors = static_errors(pod)
        return admissionreview.refused(uid, pod.name, errors) if errors else admissionreview.allowed(uid)
    if request.sub_resource not in ("", "status"):
        # The API server keeps a pod's metadata as it was on the other subresources' updates
        # (ephemeralcontainers, resize): they cannot change an annotation.
        return admissionreview.allowed(uid)
    old = old_pod or _NO_POD
    before, after = declared_text(old), declared_text(pod)
    if before != after:
        if request.sub_resource == "status":
            return admissionreview.refused(uid, pod.name, status_change_errors(), what="is forbidden")
        errors = change_errors(before, after, pod)
        if errors:
            return admissionreview.refused(uid, pod.name, errors)
    errors = record_change_errors(old, pod)
    return admissionreview.refused(uid, pod.name, errors, what="is forbidden") if errors else (
        admissionreview.allowed(uid))


def _is_binding(request: AdmissionRequest) -> bool:
    return (request.sub_resource == "binding" and request.kind.kind == "Binding" and not request.kind.group
            and request.operation == "CREATE")


def _binding_answer(request: AdmissionRequest) -> dict[str, Any]:
    """A Binding carrying the networks or the record among its annotations is refused
    (`podchange.binding_errors`)."""
    binding = request.object or {}
    errors = binding_errors(binding)
    if not errors:
        return admissionreview.allowed(request.uid)
    head = head_of(binding)
    name = (head.metadata.name if head is not None else None) or request.name or ""
    return admissionreview.refused(request.uid, name, errors, what="cannot be bound this way")


def review(
    body: Any,
    webhook: Webhook,
    *,
    enabled: bool = True,
    namespace: Mapping[str, Any] | None = None,
    attachments: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """AdmissionReview v1 in (decoded JSON, or the typed model), AdmissionReview v1 out.

    `namespace` is the pod's Namespace object (for its profile annotation);
    `attachments` is what `mutate` records (with `--enforce-use-permission`);
    `enabled` is the MultiNetwork feature gate: when off, everything is
    allowed unchanged (KEP Phase I requirement 1). A body that is not an
    AdmissionReview raises `admissionreview.BadReview`, a ValueError naming the
    field (the server answers 400); a pod of the wrong shape is refused in the
    answer (module docstring of `podnetwork.kep.admissionreview`).
    """
    request = admissionreview.review_of(body).request
    if not enabled:
        return admissionreview.allowed(request.uid)
    if webhook is Webhook.MUTATING:
        return mutate(request, namespace, attachments)
    return validate(request)


class Unseen(StrEnum):
    """What a namespace lookup answers for a namespace its cache has never seen."""

    UNSEEN = "unseen"


UNSEEN = Unseen.UNSEEN


class NamespaceUnavailable(Exception):
    """The pod's namespace could not be read; the message says why (shown to the user)."""


#: `namespace_of(name)`: the caller's watch-fed cache: the Namespace object, None when it sets
#: no profile, or `UNSEEN` when the cache has never seen that namespace.
NamespaceLookup = Callable[[str], "Mapping[str, Any] | Unseen | None"]
#: `fetch_namespace(name)`: the namespace read once from the API (and cached); raises
#: `NamespaceUnavailable` when it cannot be read.
NamespaceFetch = Callable[[str], Awaitable[Mapping[str, Any]]]


def needs_namespace(body: Any, webhook: Webhook) -> bool:
    """Whether deciding this review reads the pod's namespace: only auto-population does.

    `body` is decoded JSON or the typed review; one that is not an AdmissionReview needs none.
    """
    if webhook is not Webhook.MUTATING:
        return False
    try:
        request = admissionreview.review_of(body).request
    except admissionreview.BadReview:
        return False
    if not request.is_pod or request.operation != "CREATE":
        return False
    try:
        return _populates(request.pod())
    except InvalidPod:
        return False


__all__ = [
    "CONFIGURATION_NAME",
    "EXEMPT_NAMESPACES",
    "HOTPLUG_DOC",
    "MUTATE_MATCH_CONDITIONS",
    "MUTATE_PATH",
    "PROTECTED_ANNOTATIONS",
    "UNSEEN",
    "USE_CHECK_SECONDS",
    "USE_RESOURCE",
    "USE_VERB",
    "VALIDATE_MATCH_CONDITIONS",
    "VALIDATE_PATH",
    "WEBHOOK_NAME_MUTATE",
    "WEBHOOK_NAME_VALIDATE",
    "AttachmentNetwork",
    "MayUse",
    "NamespaceFetch",
    "NamespaceLookup",
    "NamespaceUnavailable",
    "Subject",
    "Unseen",
    "UseRequest",
    "UseUnavailable",
    "Webhook",
    "annotation_changed",
    "attachment_missing",
    "attachments_to_record",
    "authorize_use",
    "mutate",
    "namespace_default",
    "needs_namespace",
    "network_change_errors",
    "record_change_errors",
    "record_mismatch",
    "requester",
    "review",
    "service_account",
    "use_refusal",
    "use_requests",
    "validate",
    "webhook_configurations",
]
