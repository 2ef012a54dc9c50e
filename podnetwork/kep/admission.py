"""Pod admission: AdmissionReview v1 in, AdmissionReview out (pure), and its HTTP app.

Mutating (KEP "Attaching PodNetwork to a Pod": "When the Networks field is not
specified, Cluster Default PodNetwork will be attached (and set in that
field)"): a new pod that names no network and is not hostNetwork gets the
networks annotation `[{"podNetworkName":"default"}]`, or its namespace's
profile from the namespace annotation `multinetwork.x-k8s.io/default-networks`
(KEP Story #6, Phase IV requirement 23).

Validating: a new pod whose networks break the KEP's static rules ("Static
validations", `podnetwork.kep.validation`) is refused with one StatusCause per
field error, as the API server reports its own validation.

Hot-plug (KEP Story #8, Phase IV requirement 24: "add/remove attachments
to/from running Pods"): an update may add networks to the annotation or remove
them, under the rules of `network_change_errors`: the new list passes the same
static rules; the first entry and the `default` PodNetwork stay as they were
("not applicable for the Primary PodNetwork"); an entry kept across the change
is not edited in place, and the kept entries keep their order; an added entry
does not take the pod's default route, nor an interface name that an entry
removed by the same update still holds. See docs/hotplug.md.

Use permission (KEP Phase II requirement 16, "controlled via RBAC
configuration"): with enforcement on, a new pod may name a PodNetwork (or a
PodNetworkAttachment of one) only when the requesting user or the pod's
ServiceAccount may `use` that PodNetwork (`podnetworks`, resourceName the
network), asked of the API server with a SubjectAccessReview in the pod's
namespace, as PodSecurityPolicy's `use` was; `default` needs no permission.
The decisions here are pure (`use_requests`, `use_refusal`); the app asks the
API through the async callables it is given.

Why FastAPI and not kopf's admission handlers: kopf turns a refusal into one
message and builds the JSONPatch from its own patch object; we want the
review-to-review function below, testable and reusable as is (the demo calls
it directly), with Kubernetes field-error causes in the refusal. The same
FastAPI/uvicorn stack serves the scheduler extender.
"""


import asyncio
import base64
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.fielderrors import FieldError, InvalidObject, forbidden
from podnetwork.kep import admissionreview, networks, validation
from podnetwork.kep.admissionreview import AdmissionRequest, AdmissionReview, UserInfo
from podnetwork.kep.api import DEFAULT_NETWORKS, Network

REVIEW_API_VERSION = admissionreview.API_VERSION
MUTATE_PATH = "/mutate-pods"
VALIDATE_PATH = "/validate-pods"
WEBHOOK_NAME_MUTATE = f"pods.mutate.{constants.GROUP}"
WEBHOOK_NAME_VALIDATE = f"pods.validate.{constants.GROUP}"
CONFIGURATION_NAME = "podnetwork"
#: Namespaces the webhooks never see (the system ones; see `webhook_configurations`).
EXEMPT_NAMESPACES = ("kube-system", "multinetwork-system")
NAMESPACE_ANNOTATION_FIELD = f"metadata.annotations[{constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION}]"


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


def _refusal(uid: str, pod: Mapping[str, Any] | None, errors: Sequence[FieldError], *,
             what: str = "is invalid") -> dict[str, Any]:
    return admissionreview.refused(uid, pod, errors, what=what)


def _declared_text(pod: Mapping[str, Any]) -> str | None:
    return networks.annotations_of(pod).get(constants.NETWORKS_ANNOTATION)


def _annotation_patch(pod: Mapping[str, Any], value: str) -> list[dict[str, Any]]:
    if not (pod.get("metadata") or {}).get("annotations"):
        return [{"op": "add", "path": "/metadata/annotations",
                 "value": {constants.NETWORKS_ANNOTATION: value}}]
    key = constants.NETWORKS_ANNOTATION.replace("~", "~0").replace("/", "~1")
    return [{"op": "add", "path": f"/metadata/annotations/{key}", "value": value}]


def _pod_of(request: AdmissionRequest) -> tuple[dict[str, Any], list[FieldError]]:
    """The pod of a CREATE or UPDATE, and what makes it (or the old pod) not a Pod's shape."""
    pod = request.object or {}
    errors = admissionreview.pod_errors(pod)
    if request.old_object is not None:
        errors += admissionreview.pod_errors(request.old_object, prefix="oldObject.")
    return pod, errors


def _auto_populates(request: AdmissionRequest) -> bool:
    """A new pod that names no network and is not hostNetwork (read once its shape is known)."""
    pod = request.object or {}
    return (request.is_pod and request.operation == "CREATE" and not admissionreview.pod_errors(pod)
            and _declared_text(pod) is None and not (pod.get("spec") or {}).get("hostNetwork"))


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _record_patch(pod: Mapping[str, Any], annotations_added: bool,
                  record: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSON Patch operations that make the pod's admission record `record` (removed when empty)."""
    current = networks.annotations_of(pod).get(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    path = f"/metadata/annotations/{_pointer(constants.ATTACHMENT_NETWORKS_ANNOTATION)}"
    if not record:
        return [] if current is None or annotations_added else [{"op": "remove", "path": path}]
    value = networks.format_attachment_networks(record)
    if value == current:
        return []
    if not annotations_added and not (pod.get("metadata") or {}).get("annotations"):
        return [{"op": "add", "path": "/metadata/annotations",
                 "value": {constants.ATTACHMENT_NETWORKS_ANNOTATION: value}}]
    return [{"op": "add", "path": path, "value": value}]


def attachments_to_record(request: AdmissionRequest | Mapping[str, Any],
                          namespace: Mapping[str, Any] | None = None) -> list[str]:
    """The attachments whose PodNetwork the mutating webhook records for this request (pure):
    on CREATE every attachment the pod will name (its own list, or its namespace's profile),
    on an UPDATE of the networks the ones the update adds and the record lacks."""
    request = admissionreview.request_of(request)
    if not request.is_pod or request.sub_resource or request.operation not in ("CREATE", "UPDATE"):
        return []
    pod, errors = _pod_of(request)
    if errors:
        return []
    if request.operation == "CREATE":
        text = _declared_text(pod)
        if text is None and _auto_populates(request):
            try:
                profile = namespace_default(namespace)
            except InvalidObject:
                return []
            text = networks.format(profile) if profile else None
        return sorted(_attachment_names(text))
    old_pod = request.old_object or {}
    before, after = _declared_text(old_pod), _declared_text(pod)
    if before == after:
        return []
    kept = _record_of(old_pod) or {}
    return sorted(_attachment_names(after) - _attachment_names(before) - set(kept))


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
    if not request.is_pod or request.sub_resource or request.operation not in ("CREATE", "UPDATE"):
        return admissionreview.allowed(uid)
    pod, errors = _pod_of(request)
    if errors:
        return _refusal(uid, pod, errors) if request.operation == "CREATE" else admissionreview.allowed(uid)
    patch: list[dict[str, Any]] = []
    text = _declared_text(pod)
    if request.operation == "CREATE" and _auto_populates(request):
        try:
            profile = namespace_default(namespace)
        except InvalidObject as exc:
            what = f'cannot get networks from namespace "{request.namespace}" (fix its annotation)'
            return _refusal(uid, pod, exc.errors, what=what)
        text = networks.format(profile or list(DEFAULT_NETWORKS))
        patch = _annotation_patch(pod, text)
    if attachments is not None:
        names = _attachment_names(text)
        kept: Mapping[str, str] = {}
        if request.operation == "UPDATE":
            if _declared_text(request.old_object or {}) == text:
                names = set()  # the networks did not change: nothing to record
            else:
                kept = _record_of(request.old_object or {}) or {}
        if names or request.operation == "CREATE" or kept:
            record = {name: kept[name] if name in kept else attachments.get(name) for name in names}
            patch += _record_patch(pod, bool(patch), {k: v for k, v in record.items() if v is not None})
    if not patch:
        return admissionreview.allowed(uid)
    encoded = base64.b64encode(json.dumps(patch).encode()).decode()
    return admissionreview.allowed(uid, patchType="JSONPatch", patch=encoded)


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
    pod, errors = _pod_of(request)
    if errors:
        return _refusal(uid, pod, errors)
    if request.operation == "CREATE":
        if request.sub_resource:
            return admissionreview.allowed(uid)
        errors = validation.validate_pod(pod)
        return _refusal(uid, pod, errors) if errors else admissionreview.allowed(uid)
    if request.sub_resource not in ("", "status"):
        # The API server keeps a pod's metadata as it was on the other subresources' updates
        # (ephemeralcontainers, resize): they cannot change an annotation.
        return admissionreview.allowed(uid)
    old_pod = request.old_object or {}
    before, after = _declared_text(old_pod), _declared_text(pod)
    if before != after:
        if request.sub_resource == "status":
            return _refusal(uid, pod, [forbidden(
                networks.ANNOTATION_FIELD,
                "the networks of a pod cannot be changed through its status (pods/status): only an "
                "update of the pod itself is checked as hot-plug and for the permission to use its "
                f"networks; change them on the pod (kubectl annotate or patch without --subresource), "
                f"see {HOTPLUG_DOC}")], what="is forbidden")
        errors = _change_errors(before, after, pod)
        if errors:
            return _refusal(uid, pod, errors)
    errors = record_change_errors(old_pod, pod)
    return _refusal(uid, pod, errors, what="is forbidden") if errors else admissionreview.allowed(uid)


#: Pod annotations only admission may set or change (through the pod, never its subresources).
PROTECTED_ANNOTATIONS = (constants.NETWORKS_ANNOTATION, constants.ATTACHMENT_NETWORKS_ANNOTATION)


def _is_binding(request: AdmissionRequest) -> bool:
    return (request.sub_resource == "binding" and request.kind.kind == "Binding" and not request.kind.group
            and request.operation == "CREATE")


def _binding_answer(request: AdmissionRequest) -> dict[str, Any]:
    """A Binding (`pods/binding`, what kube-scheduler creates) carrying the networks or the record
    among its annotations is refused: the API server copies a Binding's annotations onto the pod
    it binds, and no webhook sees that pod change."""
    binding = request.object or {}
    annotations = networks.annotations_of(binding)
    found = [key for key in PROTECTED_ANNOTATIONS if key in annotations]
    if not found:
        return admissionreview.allowed(request.uid)
    name = str((binding.get("metadata") or {}).get("name") or request.name or "")
    errors = [forbidden(f"metadata.annotations[{key}]",
                        "a Binding's annotations are copied onto the pod it binds; the pod's networks and "
                        "admission record can be set only when the pod is created or updated "
                        '(docs/controller.md "Permission to use a PodNetwork")') for key in found]
    return _refusal(request.uid, {"metadata": {"name": name}}, errors, what="cannot be bound this way")


def _record_of(pod: Mapping[str, Any]) -> dict[str, str] | None:
    """The pod's admission record, or None when it has none or cannot be read."""
    try:
        return networks.attachment_networks(pod)
    except InvalidObject:
        return None


def _attachment_names(text: str | None) -> set[str]:
    """The attachments a networks annotation names (none when it cannot be read)."""
    if text is None:
        return set()
    try:
        return {name for net in networks.parse(text) if (name := net.pod_network_attachment_name)}
    except InvalidObject:
        return set()


def record_change_errors(old_pod: Mapping[str, Any], pod: Mapping[str, Any]) -> list[FieldError]:
    """Why an update may not change the pod's admission record (`multinetwork.x-k8s.io/attachment-networks`).

    The record says which PodNetwork each attachment named when admission checked the
    pod; the agent and the bridge refuse an attachment that names another one since.
    So, whoever sends the update (the pod's owner, or anyone allowed `pods/status`):
    - an entry stays as it was while the pod names its attachment: it is neither
      changed nor removed;
    - an entry is added only for an attachment the same update adds to the networks
      (the controller's mutating webhook writes it; with `--enforce-use-permission`,
      `authorize_use` checks it against the attachment as it is now);
    - the record is readable JSON whenever it changes.
    Entries of attachments the pod no longer names may go.
    """
    field = networks.RECORD_FIELD
    old_text = networks.annotations_of(old_pod).get(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    new_text = networks.annotations_of(pod).get(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    if old_text == new_text:
        return []
    why = ("it records the PodNetwork each PodNetworkAttachment named when the pod was admitted, "
           'so only admission writes it (docs/controller.md "Permission to use a PodNetwork")')
    try:
        new = networks.parse_attachment_networks(new_text) if new_text is not None else {}
    except InvalidObject as exc:
        return exc.errors
    old = _record_of(old_pod) or {}
    names_now = _attachment_names(_declared_text(pod))
    names_before = _attachment_names(_declared_text(old_pod))
    errors: list[FieldError] = []
    for name, network in sorted(old.items()):
        if name in names_now and new.get(name) != network:
            errors.append(forbidden(f"{field}[{name}]",
                                    f'the entry of PodNetworkAttachment "{name}" ({network!r}) cannot be '
                                    f"changed or removed while the pod names the attachment: {why}"))
    for name in sorted(set(new) - set(old)):
        if name not in names_now or name in names_before:
            errors.append(forbidden(f"{field}[{name}]",
                                    f'an entry for PodNetworkAttachment "{name}" can be added only by the '
                                    f"update that adds the attachment to the pod's networks: {why}"))
    return errors


HOTPLUG_DOC = "docs/hotplug.md"


def _change_errors(before: str | None, after: str | None, pod: Mapping[str, Any]) -> list[FieldError]:
    """Why an update may not change the networks annotation from `before` to `after`."""
    if after is None:
        return [forbidden(networks.ANNOTATION_FIELD,
                          "the networks annotation of an existing pod cannot be removed; to detach "
                          "networks, list the ones to keep (at least the first)")]
    if before is None:
        return [forbidden(networks.ANNOTATION_FIELD,
                          "this pod was created without a networks annotation, so it has no networks "
                          "to change (KEP Story #8 hot-plug starts from the networks the pod was "
                          "admitted with); delete and re-create the pod with the annotation")]
    errors = validation.validate_pod(pod)
    if errors:
        return errors
    try:
        old = networks.parse(before)
    except InvalidObject:
        return [forbidden(networks.ANNOTATION_FIELD,
                          "the pod's current networks annotation cannot be parsed, so no change of it "
                          "can be checked; delete and re-create the pod")]
    return network_change_errors(old, networks.parse(after))


def network_change_errors(old: Sequence[Network], new: Sequence[Network]) -> list[FieldError]:
    """Why a running pod's networks may not change from `old` to `new` (hot-plug, KEP Req 24).

    Both lists are statically valid. An entry is known by what it references (a
    PodNetwork or a PodNetworkAttachment, each at most once in a valid list).

    - The first entry stays exactly as it is, and so does the `default` PodNetwork
      (KEP Story #8: hot-plug is "not applicable for the Primary PodNetwork");
      `default` cannot be added either: the cluster default network is attached
      when the pod starts, or never.
    - A kept entry keeps its interface name and default-gateway flags: the agent
      would have to detach and attach it again, which is a removal and an
      addition, two updates the user makes on purpose.
    - Kept entries keep their relative order: the order is the interface order
      (NPWG 4.2.1's generated names) the pod was attached with.
    - An added entry does not take the pod's default route (isDefaultGW4/6):
      moving a running pod's default route would cut its existing connections.
    - An added entry does not ask for the interface name of an entry the same
      update removes: the agent attaches before it detaches, so that a failed
      attach leaves the pod as it was.
    """
    errors: list[FieldError] = []
    field = networks.FIELD
    how = f"see {HOTPLUG_DOC}"
    old_at = {net.reference: i for i, net in enumerate(old)}
    new_at = {net.reference: i for i, net in enumerate(new)}
    if not new or not old or new[0] != old[0]:
        first = networks.format(old[:1])
        errors.append(forbidden(f"{field}[0]",
                                f"the first network of a running pod cannot be removed, replaced or edited "
                                f"(KEP Story #8: not applicable to the primary PodNetwork); keep {first} "
                                f"as the first entry; {how}"))
    default = (constants.PODNETWORK_KIND, constants.DEFAULT_PODNETWORK)
    if default in old_at and default not in new_at:
        errors.append(forbidden(field,
                                f'the "{constants.DEFAULT_PODNETWORK}" PodNetwork cannot be removed from a '
                                f"running pod (it is the cluster default network); keep its entry; {how}"))
    if default in new_at and default not in old_at:
        errors.append(forbidden(f"{field}[{new_at[default]}]",
                                f'the "{constants.DEFAULT_PODNETWORK}" PodNetwork cannot be added to a '
                                f"running pod: the cluster default network is attached when the pod starts; "
                                f"{how}"))
    kept = [ref for ref in old_at if ref in new_at]
    for ref in kept:
        i, j = old_at[ref], new_at[ref]
        if j == 0 or old[i] == new[j]:
            continue
        errors.append(forbidden(f"{field}[{j}]",
                                f"{ref[0]} {ref[1]!r} is attached; its interfaceName and isDefaultGW4/6 "
                                f"cannot change in place (was {networks.format([old[i]])}); remove it in one "
                                f"update and add it back in another; {how}"))
    order = [new_at[ref] for ref in kept]
    if order != sorted(order):
        errors.append(forbidden(field,
                                "the networks the pod keeps must stay in their order (it is the order of "
                                "their interfaces); add and remove entries without moving the others; "
                                f"{how}"))
    removed_ifnames = {old[old_at[ref]].interface_name for ref in old_at if ref not in new_at} - {None}
    for ref, j in new_at.items():
        if ref in old_at:
            continue
        net = new[j]
        for flag, on in (("isDefaultGW4", net.is_default_gw4), ("isDefaultGW6", net.is_default_gw6)):
            if on:
                errors.append(forbidden(f"{field}[{j}].{flag}",
                                        "a network added to a running pod cannot take its default route "
                                        f"(its existing connections would break); leave {flag} unset; {how}"))
        if net.interface_name in removed_ifnames:
            errors.append(forbidden(f"{field}[{j}].interfaceName",
                                    f"interface {net.interface_name!r} still belongs to a network this "
                                    "update removes (the agent attaches before it detaches); remove that "
                                    f"network in one update and add this one in the next; {how}"))
    return errors


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


# --- use permission (KEP Phase II requirement 16) -------------------------------------------------

USE_VERB = constants.USE_VERB
USE_RESOURCE = constants.PODNETWORK_PLURAL
SERVICE_ACCOUNT_GROUP = "system:serviceaccounts"
#: Seconds one pod's use checks (SubjectAccessReviews, attachment reads, their retries) may
#: take before the request fails with 503: within the webhook's timeoutSeconds (5).
USE_CHECK_SECONDS = 3.0


@dataclass(frozen=True)
class Subject:
    """Who a SubjectAccessReview asks about: a user with its groups, uid and extra (hashable)."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def spec(self) -> dict[str, Any]:
        """The subject fields of a SubjectAccessReview spec."""
        spec: dict[str, Any] = {"user": self.user, "groups": list(self.groups)}
        if self.uid:
            spec["uid"] = self.uid
        if self.extra:
            spec["extra"] = {key: list(values) for key, values in self.extra}
        return spec


def requester(user_info: UserInfo) -> Subject:
    """The user who sent the request, as the API server authenticated it."""
    extra = tuple(sorted((k, tuple(v or ())) for k, v in (user_info.extra or {}).items()))
    return Subject(user_info.username, tuple(user_info.groups or ()), user_info.uid, extra)


def service_account(pod: Mapping[str, Any], namespace: str) -> Subject:
    """The pod's ServiceAccount as the user its token authenticates as (`default` when unset)."""
    name = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    return Subject(f"system:serviceaccount:{namespace}:{name}",
                   (SERVICE_ACCOUNT_GROUP, f"{SERVICE_ACCOUNT_GROUP}:{namespace}"))


@dataclass(frozen=True)
class UseRequest:
    """One network entry of a pod that needs `use` permission: on `podnetwork`, reached
    directly or through the PodNetworkAttachment `attachment` (then `podnetwork` is "" until
    the attachment is looked up)."""

    index: int
    podnetwork: str
    attachment: str = ""


def use_requests(request: AdmissionRequest) -> list[UseRequest]:
    """The entries of a new pod whose PodNetwork needs `use` (pure).

    On CREATE every entry; on UPDATE (hot-plug, KEP Req 24) the entries the update
    adds, so a network reaches a running pod under the same rule as a new one.
    Entries naming `default` need none (KEP "Cluster Default PodNetwork": every
    pod may attach to it). A pod of the wrong shape or with unparseable networks
    has none: validation refuses it first. Attachments are listed for the caller
    to resolve to their PodNetwork.
    """
    pod = request.object or {}
    if (not request.is_pod or request.operation not in ("CREATE", "UPDATE") or admissionreview.pod_errors(pod)
            or _declared_text(pod) is None):
        return []
    try:
        nets = networks.parse(_declared_text(pod) or "")
    except InvalidObject:
        return []
    had: set[tuple[str, str]] = set()
    if request.operation == "UPDATE":
        before = _declared_text(request.old_object or {})
        if before is None:
            return []  # validation refuses a pod gaining networks it was not created with
        try:
            had = {net.reference for net in networks.parse(before)}
        except InvalidObject:
            return []  # and a change from networks it cannot read
    found: list[UseRequest] = []
    for i, net in enumerate(nets):
        if net.reference in had:
            continue
        if net.pod_network_attachment_name:
            found.append(UseRequest(i, "", net.pod_network_attachment_name))
        elif net.pod_network_name and net.pod_network_name != constants.DEFAULT_PODNETWORK:
            found.append(UseRequest(i, net.pod_network_name))
    return found


def _pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "")


def _who_may_not(requester: Subject | None, account: Subject) -> str:
    """Who lacks the permission, said plainly for each case."""
    if requester is None or not requester.user:
        return f'the pod\'s ServiceAccount "{account.user}" may not'
    if requester.user == account.user:
        return f'"{account.user}", the pod\'s ServiceAccount and the user creating it, may not'
    return f'neither the user "{requester.user}" nor the pod\'s ServiceAccount "{account.user}" may'


def use_refusal(uid: str, pod: Mapping[str, Any], namespace: str, use: UseRequest,
                requester: Subject | None, account: Subject) -> dict[str, Any]:
    """The answer refusing a pod whose requester and ServiceAccount may not use `use.podnetwork`:
    403 Forbidden, naming the network, the verb, the resource and who lacks it, and how to
    grant it. `requester` is None when the request names no user (the demo's)."""
    name = _pod_name(pod)
    via = (f' (through PodNetworkAttachment "{use.attachment}")' if use.attachment else "")
    message = (f'Pod "{name}" is forbidden: {_who_may_not(requester, account)} use PodNetwork '
               f'"{use.podnetwork}"{via}: '
               f'missing permission: verb "{USE_VERB}" on resource "{USE_RESOURCE}" in API group '
               f'"{constants.GROUP}" with resourceName "{use.podnetwork}" in namespace "{namespace}"; '
               "grant it to the pod's ServiceAccount or to the user with a Role or ClusterRole and a "
               "RoleBinding (docs/controller.md \"Permission to use a PodNetwork\")")
    field = f"{networks.ANNOTATION_FIELD}[{use.index}]"
    return {"apiVersion": REVIEW_API_VERSION, "kind": admissionreview.KIND, "response": {
        "uid": uid, "allowed": False, "status": {
            "status": "Failure", "code": 403, "reason": "Forbidden", "message": message,
            "details": {"name": name, "kind": "Pod", "causes": [
                {"type": "FieldValueForbidden", "field": field, "message": message}]}}}}


class UseUnavailable(Exception):
    """Whether a subject may use a PodNetwork could not be found out; the message says why."""


#: `may_use(subject, podnetwork, namespace)`: the API server's answer to a SubjectAccessReview
#: for verb `use` on `podnetworks`. Raises `UseUnavailable` when it cannot ask.
MayUse = Callable[[Subject, str, str], Awaitable[bool]]
#: `attachment_network(namespace, name)`: the PodNetwork of a PodNetworkAttachment, or None
#: when it does not exist. Raises `UseUnavailable` when it cannot tell.
AttachmentNetwork = Callable[[str, str], Awaitable["str | None"]]


def attachment_missing(uid: str, pod: Mapping[str, Any], namespace: str, use: UseRequest) -> dict[str, Any]:
    """The answer refusing a pod whose PodNetworkAttachment does not exist (its PodNetwork,
    and so the permission it needs, is unknown)."""
    field = f"{networks.ANNOTATION_FIELD}[{use.index}].podNetworkAttachmentName"
    return _refusal(uid, pod, [forbidden(
        field,
        f'PodNetworkAttachment "{use.attachment}" does not exist in namespace "{namespace}", so the '
        "permission to use its PodNetwork cannot be checked; create the attachment first")],
        what="is forbidden")


def record_mismatch(uid: str, pod: Mapping[str, Any], namespace: str, use: UseRequest,
                    recorded: str | None) -> dict[str, Any]:
    """The answer refusing a pod whose admission record does not say what its attachment names now."""
    field = f"{networks.RECORD_FIELD}[{use.attachment}]"
    if recorded is None:
        detail = (f'has no entry for PodNetworkAttachment "{use.attachment}" '
                  f'(PodNetwork "{use.podnetwork}"): '
                  "the controller's mutating webhook writes it; check that it is registered for pod CREATE "
                  "and UPDATE (deploy/controller/webhooks.yaml) and retry")
    else:
        detail = (f'says PodNetworkAttachment "{use.attachment}" names PodNetwork "{recorded}", but in '
                  f'namespace "{namespace}" it names "{use.podnetwork}" now (it was replaced during '
                  "admission, or the entry was not written by admission); retry the request")
    return _refusal(uid, pod, [forbidden(field, f"the admission record {detail}")], what="is forbidden")


async def authorize_use(request: AdmissionRequest, may_use: MayUse,
                        attachment_network: AttachmentNetwork) -> dict[str, Any] | None:
    """The refusal of a new pod that names a PodNetwork neither its requester nor its
    ServiceAccount may use, or None when every network is allowed. Raises `UseUnavailable`.

    Either subject suffices, as with PodSecurityPolicy: pods made by controllers
    (a ReplicaSet's) are created by the controller's account, which rarely holds
    `use` itself, while the pod's ServiceAccount does. An attachment is checked
    against the PodNetwork it names now, which must be the one the mutating webhook
    recorded in `multinetwork.x-k8s.io/attachment-networks` (`mutate`): the agent and
    the bridge hold the attachment to that record afterwards.
    """
    uses = use_requests(request)
    if not uses:
        return None
    pod = request.object or {}
    namespace = request.namespace or str((pod.get("metadata") or {}).get("namespace") or "")
    account = service_account(pod, namespace)
    asker = requester(request.user_info) if request.user_info is not None else None
    subjects = [account] if asker is None or not asker.user or asker.user == account.user else [
        asker, account]
    record = _record_of(pod) or {}
    for use in uses:
        if use.attachment:
            target = await attachment_network(namespace, use.attachment)
            if target is None:
                return attachment_missing(request.uid, pod, namespace, use)
            use = UseRequest(use.index, target, use.attachment)
            if record.get(use.attachment) != target:
                return record_mismatch(request.uid, pod, namespace, use, record.get(use.attachment))
            if target == constants.DEFAULT_PODNETWORK:
                continue
        allowed = False
        for subject in subjects:
            if await may_use(subject, use.podnetwork, namespace):
                allowed = True
                break
        if not allowed:
            return use_refusal(request.uid, pod, namespace, use, asker, account)
    return None


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
#: while it is down.
VALIDATE_MATCH_CONDITIONS = [{
    "name": "create-or-networks-change",
    "expression": (
        "request.subResource == 'binding' ? has(object.metadata.annotations) && ("
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

    def hook(name: str, path: str, operations: list[str], resources: list[str],
             conditions: list[dict[str, str]]) -> dict[str, Any]:
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

    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": CONFIGURATION_NAME},
         "webhooks": [{**hook(WEBHOOK_NAME_MUTATE, MUTATE_PATH, ["CREATE", "UPDATE"], ["pods"],
                              MUTATE_MATCH_CONDITIONS), "reinvocationPolicy": "Never"}]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": CONFIGURATION_NAME},
         "webhooks": [hook(WEBHOOK_NAME_VALIDATE, VALIDATE_PATH, ["CREATE", "UPDATE"],
                           ["pods", "pods/status", "pods/binding"], VALIDATE_MATCH_CONDITIONS)]},
    ]


class Unseen(StrEnum):
    """What a namespace lookup answers for a namespace its cache has never seen."""

    UNSEEN = "unseen"


UNSEEN = Unseen.UNSEEN


class NamespaceUnavailable(Exception):
    """The pod's namespace could not be read; the message says why (shown to the user)."""


NamespaceLookup = Callable[[str], "Mapping[str, Any] | Unseen | None"]
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
    return _auto_populates(request)


def app(namespace_of: NamespaceLookup, *, enabled: bool = True,
        fetch_namespace: NamespaceFetch | None = None, may_use: MayUse | None = None,
        attachment_network: AttachmentNetwork | None = None) -> Any:
    """The FastAPI application serving both webhooks (and `/healthz`).

    `namespace_of(name)` answers from the caller's watch-fed cache: the
    Namespace object, or None when it sets no profile, or `UNSEEN` when the
    cache has never seen that namespace. A namespace created by the same
    `kubectl apply` as its pods can reach admission before its watch event, so
    an unseen namespace is read once with `fetch_namespace(name)` (which caches
    it; it raises `NamespaceUnavailable` when it cannot). When that read fails,
    the request fails with 503 and the reason, and the webhook's failurePolicy
    decides: defaulting to `default` instead would pin the pods to the wrong
    networks for good (their networks annotation is immutable).

    With `may_use` (`--enforce-use-permission`), the mutating webhook records the
    PodNetwork of each attachment the pod names (`mutate`, resolved with
    `attachment_network`), and the validating webhook refuses a
    new pod that names a PodNetwork neither its requester nor its ServiceAccount may
    use (`authorize_use`; attachments are resolved with `attachment_network`). It
    runs after every mutating webhook, so networks from a namespace profile are
    checked too. When the API cannot answer, the request fails with 503, as above.

    A body that is not an AdmissionReview gets 400 naming what is wrong; a pod of
    the wrong shape is refused in the answer (`podnetwork.kep.admissionreview`).
    """
    from fastapi import FastAPI, Request, Response

    api = FastAPI(title="podnetwork admission", docs_url=None, redoc_url=None, openapi_url=None)

    async def namespace(name: str) -> Mapping[str, Any] | None:
        found = namespace_of(name)
        if found is not UNSEEN:
            return found
        if fetch_namespace is None:
            return None
        try:
            return await fetch_namespace(name)
        except NamespaceUnavailable as exc:
            raise admissionreview.Unavailable(
                f'cannot read namespace "{name}" to apply its networks profile '
                f"({constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION}): {exc}; retry the request") from None

    def decider(webhook: Webhook) -> Callable[[AdmissionReview], Awaitable[dict[str, Any]]]:
        async def decide(body: AdmissionReview) -> dict[str, Any]:
            ns = body.request.namespace
            found = await namespace(ns) if ns and enabled and needs_namespace(body, webhook) else None
            recorded = None
            if webhook is Webhook.MUTATING and enabled and may_use is not None:
                recorded = await record(body.request, found)
            answer = review(body, webhook, enabled=enabled, namespace=found, attachments=recorded)
            if (webhook is Webhook.VALIDATING and enabled and may_use is not None
                    and answer["response"]["allowed"]):
                refusal = await authorize(body.request, may_use)
                if refusal is not None:
                    return refusal
            return answer
        return decide

    async def no_attachments(namespace: str, name: str) -> str | None:
        return None

    async def record(request: AdmissionRequest, found: Mapping[str, Any] | None) -> dict[str, str | None]:
        names = attachments_to_record(request, found)
        lookup = attachment_network or no_attachments
        try:
            async with asyncio.timeout(USE_CHECK_SECONDS):
                return {name: await lookup(request.namespace, name) for name in names}
        except TimeoutError:
            raise admissionreview.Unavailable(
                "cannot read the pod's PodNetworkAttachments to record their PodNetworks: the API server "
                f"did not answer within {USE_CHECK_SECONDS:g}s; retry the request") from None
        except UseUnavailable as exc:
            raise admissionreview.Unavailable(
                f"cannot read the pod's PodNetworkAttachments to record their PodNetworks: {exc}; "
                "retry the request") from None

    async def authorize(request: AdmissionRequest, check: MayUse) -> dict[str, Any] | None:
        try:
            async with asyncio.timeout(USE_CHECK_SECONDS):
                return await authorize_use(request, check, attachment_network or no_attachments)
        except TimeoutError:
            raise admissionreview.Unavailable(
                "cannot check the permission to use the pod's PodNetworks: the API server did not "
                f"answer within {USE_CHECK_SECONDS:g}s; retry the request") from None
        except UseUnavailable as exc:
            raise admissionreview.Unavailable(
                f"cannot check the permission to use the pod's PodNetworks: {exc}; "
                "retry the request") from None

    mutating_decision, validating_decision = decider(Webhook.MUTATING), decider(Webhook.VALIDATING)

    @api.post(MUTATE_PATH)
    async def mutating(request: Request) -> Response:
        return await admissionreview.answer(request, mutating_decision)

    @api.post(VALIDATE_PATH)
    async def validating(request: Request) -> Response:
        return await admissionreview.answer(request, validating_decision)

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return api


__all__ = [
    "MUTATE_PATH",
    "UNSEEN",
    "USE_RESOURCE",
    "USE_VERB",
    "VALIDATE_PATH",
    "AttachmentNetwork",
    "MayUse",
    "NamespaceUnavailable",
    "Subject",
    "UseRequest",
    "UseUnavailable",
    "Webhook",
    "annotation_changed",
    "app",
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
