"""Pod admission in the demo store: the controller's webhooks, called as the API server calls them.

On a cluster the API server sends an AdmissionReview (admission.k8s.io/v1) to
the controller's mutating webhook, applies the JSONPatch it answers with, then
sends the result to the validating webhook and refuses the write when it is
not allowed. Here the store does exactly that, in process, with
`podnetwork.kep.admission.review` (KEP "Auto-population", "Static validations"):
a pod that names no network gets its namespace's list or
`[{"podNetworkName": "default"}]`; a statically invalid pod, or a change of an
existing pod's networks, is refused with Kubernetes-style field errors and
nothing is stored.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from demo.store import Invalid, Store
from podnetwork.ground.core import ObjectMeta, head_of
from podnetwork.kep import admission

POD = ("v1", "Pod")


class PatchError(ValueError):
    pass


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_json_patch(doc: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902 `add`, `replace` and `remove` (what admission webhooks answer); returns a new document."""
    doc = copy.deepcopy(doc)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind not in ("add", "replace", "remove") or not isinstance(path, str) or not path.startswith("/"):
            raise PatchError(f"unsupported JSON patch operation {op!r}")
        *parents, last = [_unescape(t) for t in path[1:].split("/")]
        target = doc
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if kind == "add":
                target.insert(index, copy.deepcopy(op["value"]))
            elif kind == "replace":
                target[index] = copy.deepcopy(op["value"])
            else:
                del target[index]
        elif kind == "remove":
            del target[last]
        else:
            if kind == "replace" and last not in target:
                raise PatchError(f"replace of a missing member {path!r}")
            target[last] = copy.deepcopy(op["value"])
    return doc


def _meta(pod: dict[str, Any]) -> ObjectMeta:
    """The pod's metadata, empty when it does not fit (admission then says what is wrong)."""
    head = head_of(pod)
    return ObjectMeta() if head is None else head.metadata


def _review(operation: str, pod: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    meta = _meta(pod)
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta.name,
            "namespace": meta.namespace,
            "operation": operation,
            "object": pod,
            "oldObject": old,
        },
    }


class _Status(BaseModel):
    """The `metav1.Status` of a refusal: its message is what the API server reports."""

    model_config = ConfigDict(extra="ignore")

    message: str = ""


class _Answer(BaseModel):
    """A webhook's `response` (admission.k8s.io/v1 AdmissionResponse): what the API server reads
    of it. Read once, from the review the webhook answered."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    allowed: bool = False
    patch_type: str | None = Field(None, alias="patchType")
    patch: str | None = None
    status: _Status | None = None


def _answer(review: dict[str, Any]) -> _Answer:
    return _Answer.model_validate(review["response"])


def _refused(answer: _Answer) -> Invalid:
    said = answer.status.message if answer.status is not None else ""
    return Invalid(said or "refused by the podnetwork admission webhook")


def register(api: Store, *, enabled: bool = True) -> None:
    """Install the webhooks as the store's admission hooks for pods (`enabled`: the feature gate)."""

    def mutate(operation: str, pod: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        namespace = api.find("v1", "Namespace", _meta(pod).namespace or "")
        answer = _answer(admission.review(
            _review(operation, pod, old), admission.Webhook.MUTATING, enabled=enabled, namespace=namespace
        ))
        if not answer.allowed:
            raise _refused(answer)
        if answer.patch_type == "JSONPatch" and answer.patch is not None:
            patched: dict[str, Any] = apply_json_patch(pod, json.loads(base64.b64decode(answer.patch)))
            return patched
        return pod

    def validate(operation: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        answer = _answer(admission.review(
            _review(operation, pod, old), admission.Webhook.VALIDATING, enabled=enabled
        ))
        if not answer.allowed:
            raise _refused(answer)

    api.add_admission(*POD, mutate=mutate, validate=validate)


__all__ = ["PatchError", "apply_json_patch", "register"]
