"""The permission to use a PodNetwork, at admission (pure decisions).

KEP Phase II requirement 16 ("controlled via RBAC configuration"): with
enforcement on, a new pod may name a PodNetwork (or a PodNetworkAttachment of
one) only when the requesting user or the pod's ServiceAccount may `use` that
PodNetwork (`podnetworks`, resourceName the network), asked of the API server
with a SubjectAccessReview in the pod's namespace, as PodSecurityPolicy's `use`
was; `default` needs no permission. The decisions here are pure (`use_requests`,
`use_refusal`); `authorize_use` asks the API through the async callables it is
given, and the controller's webhooks (`podnetwork.commands.admissionapp`) give it
the controller's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.fielderrors import InvalidObject, forbidden
from podnetwork.kep import admissionreview, networks, podchange
from podnetwork.kep.admissionreview import AdmissionRequest, InvalidPod, Pod, UserInfo

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


def service_account(pod: Pod, namespace: str) -> Subject:
    """The pod's ServiceAccount as the user its token authenticates as (`default` when unset)."""
    name = pod.service_account_name or "default"
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
    pod may attach to it). A pod of the wrong shape (on UPDATE, either object) or with
    unparseable networks has none: validation refuses it first. Attachments are listed
    for the caller to resolve to their PodNetwork.
    """
    if not request.is_pod or request.operation not in ("CREATE", "UPDATE"):
        return []
    try:
        pod, old_pod = request.pods() if request.operation == "UPDATE" else (request.pod(), None)
    except InvalidPod:
        return []
    text = podchange.declared_text(pod)
    if text is None:
        return []
    try:
        nets = networks.parse(text)
    except InvalidObject:
        return []
    had: set[tuple[str, str]] = set()
    if request.operation == "UPDATE":
        before = podchange.declared_text(old_pod) if old_pod is not None else None
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


def _who_may_not(requester: Subject | None, account: Subject) -> str:
    """Who lacks the permission, said plainly for each case."""
    if requester is None or not requester.user:
        return f'the pod\'s ServiceAccount "{account.user}" may not'
    if requester.user == account.user:
        return f'"{account.user}", the pod\'s ServiceAccount and the user creating it, may not'
    return f'neither the user "{requester.user}" nor the pod\'s ServiceAccount "{account.user}" may'


def use_refusal(uid: str, pod: Pod, namespace: str, use: UseRequest,
                requester: Subject | None, account: Subject, *,
                field: str | None = None, via: str | None = None) -> dict[str, Any]:
    """The answer refusing a pod whose requester and ServiceAccount may not use `use.podnetwork`:
    403 Forbidden, naming the network, the verb, the resource and who lacks it, and how to
    grant it. `requester` is None when the request names no user (the demo's).

    `field` is the cause's field (default: entry `use.index` of the networks annotation) and
    `via` says how the pod named the network (default: through `use.attachment`, if any),
    for callers that found the network elsewhere (the bridge, in the NPWG selection)."""
    name = pod.name
    if via is None:
        via = f"through PodNetworkAttachment \"{use.attachment}\"" if use.attachment else ""
    via = f" ({via})" if via else ""
    message = (f'Pod "{name}" is forbidden: {_who_may_not(requester, account)} use PodNetwork '
               f'"{use.podnetwork}"{via}: '
               f'missing permission: verb "{USE_VERB}" on resource "{USE_RESOURCE}" in API group '
               f'"{constants.GROUP}" with resourceName "{use.podnetwork}" in namespace "{namespace}"; '
               "grant it to the pod's ServiceAccount or to the user with a Role or ClusterRole and a "
               "RoleBinding (docs/controller.md \"Permission to use a PodNetwork\")")
    if field is None:
        field = f"{networks.ANNOTATION_FIELD}[{use.index}]"
    return {"apiVersion": admissionreview.API_VERSION, "kind": admissionreview.KIND, "response": {
        "uid": uid, "allowed": False, "status": {
            "status": "Failure", "code": 403, "reason": "Forbidden", "message": message,
            "details": {"name": name, "kind": "Pod", "causes": [
                {"reason": "FieldValueForbidden", "field": field, "message": message}]}}}}


class UseUnavailable(Exception):
    """Whether a subject may use a PodNetwork could not be found out; the message says why."""


#: `may_use(subject, podnetwork, namespace)`: the API server's answer to a SubjectAccessReview
#: for verb `use` on `podnetworks`. Raises `UseUnavailable` when it cannot ask.
MayUse = Callable[[Subject, str, str], Awaitable[bool]]
#: `attachment_network(namespace, name)`: the PodNetwork of a PodNetworkAttachment, or None
#: when it does not exist. Raises `UseUnavailable` when it cannot tell.
AttachmentNetwork = Callable[[str, str], Awaitable["str | None"]]


def attachment_missing(uid: str, pod: Pod, namespace: str, use: UseRequest) -> dict[str, Any]:
    """The answer refusing a pod whose PodNetworkAttachment does not exist (its PodNetwork,
    and so the permission it needs, is unknown)."""
    field = f"{networks.ANNOTATION_FIELD}[{use.index}].podNetworkAttachmentName"
    return admissionreview.refused(uid, pod.name, [forbidden(
        field,
        f'PodNetworkAttachment "{use.attachment}" does not exist in namespace "{namespace}", so the '
        "permission to use its PodNetwork cannot be checked; create the attachment first")],
        what="is forbidden")


def record_mismatch(uid: str, pod: Pod, namespace: str, use: UseRequest,
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
    return admissionreview.refused(uid, pod.name, [forbidden(field, f"the admission record {detail}")],
                                   what="is forbidden")


async def authorize_use(request: AdmissionRequest, may_use: MayUse,
                        attachment_network: AttachmentNetwork) -> dict[str, Any] | None:
    """The refusal of a new pod that names a PodNetwork neither its requester nor its
    ServiceAccount may use, or None when every network is allowed. Raises `UseUnavailable`.

    Either subject suffices, as with PodSecurityPolicy: pods made by controllers
    (a ReplicaSet's) are created by the controller's account, which rarely holds
    `use` itself, while the pod's ServiceAccount does. An attachment is checked
    against the PodNetwork it names now, which must be the one the mutating webhook
    recorded in `multinetwork.x-k8s.io/attachment-networks` (`admission.mutate`): the
    agent and the bridge hold the attachment to that record afterwards.
    """
    uses = use_requests(request)
    if not uses:
        return None
    pod = request.pod()  # read: `use_requests` found entries in it
    namespace = request.namespace or pod.namespace
    asker, account, subjects = subjects_of(request, pod, namespace)
    record = podchange.record_of(pod) or {}
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
        if not await anyone_may_use(subjects, use.podnetwork, namespace, may_use):
            return use_refusal(request.uid, pod, namespace, use, asker, account)
    return None


def subjects_of(request: AdmissionRequest, pod: Pod,
                namespace: str) -> tuple[Subject | None, Subject, list[Subject]]:
    """(the requester or None, the pod's ServiceAccount, whom to ask in order): the requester
    first, then the ServiceAccount; once when they are one; the ServiceAccount alone when the
    request names no user (in-process callers)."""
    account = service_account(pod, namespace)
    asker = requester(request.user_info) if request.user_info is not None else None
    subjects = [account] if asker is None or not asker.user or asker.user == account.user else [
        asker, account]
    return asker, account, subjects


async def anyone_may_use(subjects: list[Subject], podnetwork: str, namespace: str, may_use: MayUse) -> bool:
    """Whether one of `subjects` (asked in order, stopping at the first yes) may use `podnetwork`."""
    for subject in subjects:
        if await may_use(subject, podnetwork, namespace):
            return True
    return False


__all__ = [
    "SERVICE_ACCOUNT_GROUP",
    "USE_CHECK_SECONDS",
    "USE_RESOURCE",
    "USE_VERB",
    "AttachmentNetwork",
    "MayUse",
    "Subject",
    "UseRequest",
    "UseUnavailable",
    "anyone_may_use",
    "attachment_missing",
    "authorize_use",
    "record_mismatch",
    "requester",
    "service_account",
    "subjects_of",
    "use_refusal",
    "use_requests",
]
