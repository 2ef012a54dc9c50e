"""Pod admission in the demo store: the controller's webhooks, called in process.

On a cluster the API server sends an AdmissionReview to the controller's
mutating and validating webhooks; here the store calls the same decisions as
admission hooks before it stores a pod (KEP "Auto-population", "Static
validations"): a pod that names no network gets its namespace's default list or
`[{"podNetworkName": "default"}]`; a statically invalid pod is refused with
Kubernetes-style field errors, and nothing is stored.
"""

from __future__ import annotations

from typing import Any

from embedded.store import CREATE, Invalid, Store
from podnetwork import constants, networks, validation
from podnetwork.fielderrors import InvalidObject, forbidden

POD = ("v1", "Pod")


def _namespace_default(api: Store, namespace: str) -> list[Any] | None:
    ns = api.find("v1", "Namespace", namespace)
    text = networks.annotations_of(ns or {}).get(constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION)
    if not text:
        return None
    try:
        return networks.parse(text)
    except InvalidObject:
        return None


def register(api: Store) -> None:
    """Install the mutating and validating hooks for pods."""

    def mutate(operation: str, pod: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        if operation != CREATE or networks.declared(pod) is not None:
            return pod
        if (pod.get("spec") or {}).get("hostNetwork") is True:
            return pod
        nets = networks.effective(pod, _namespace_default(api, pod["metadata"].get("namespace", "")))
        pod["metadata"].setdefault("annotations", {})[constants.NETWORKS_ANNOTATION] = networks.format(nets)
        return pod

    def validate(operation: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        errors = validation.validate_pod(pod)
        if old is not None:
            before = networks.annotations_of(old).get(constants.NETWORKS_ANNOTATION)
            after = networks.annotations_of(pod).get(constants.NETWORKS_ANNOTATION)
            if before != after:
                errors = [
                    *errors,
                    forbidden(networks.ANNOTATION_FIELD, "the networks of an existing pod cannot change"),
                ]
        if errors:
            name = pod["metadata"].get("name")
            raise Invalid(f'Pod "{name}" is invalid: ' + "\n".join(str(e) for e in errors))

    api.add_admission(*POD, mutate=mutate, validate=validate)


__all__ = ["register"]
