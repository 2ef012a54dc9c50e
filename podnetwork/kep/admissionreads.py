"""What the controller's admission webhooks read: its namespace cache, attachments, and `use` answers.

Admission decides in `podnetwork.kep.admission`; these are the lookups it is given,
answered from the controller's watch-fed memory and, for what that memory has not
seen, from the API: a namespace applied together with its pods, an attachment
created just before them, and the SubjectAccessReviews of `--enforce-use-permission`
(cached in `UseCache`). `podnetwork.kep.controller.Controller` has them.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic

from podnetwork.ground import constants, core
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import admission, inuse
from podnetwork.kep import api as models
from podnetwork.kep.api import KepObject, Network
from podnetwork.kep.inuse import Ref
from podnetwork.kube import client as kube
from podnetwork.kube import writes

#: Seconds admission waits for its GET of an unseen namespace (the webhook times out at 5).
NAMESPACE_GET_TIMEOUT = 3.0
#: SubjectAccessReview answers kept for `--enforce-use-permission` (docs/controller.md
#: "Permission to use a PodNetwork"): at most this many, an allowance for 60 s, a denial for
#: 5 s (a permission just granted works within seconds; one revoked, within a minute).
USE_CACHE_SIZE = 4096
USE_CACHE_ALLOWED_SECONDS = 60.0
USE_CACHE_DENIED_SECONDS = 5.0


@dataclass
class UseCache:
    """Answers of SubjectAccessReviews, bounded in size (least recently used out first) and in age."""

    size: int = USE_CACHE_SIZE
    allowed_seconds: float = USE_CACHE_ALLOWED_SECONDS
    denied_seconds: float = USE_CACHE_DENIED_SECONDS
    clock: Callable[[], float] = time.monotonic
    entries: OrderedDict[Hashable, tuple[bool, float]] = field(default_factory=OrderedDict)
    """Key -> (allowed, expiry on `clock`)."""

    def get(self, key: Hashable) -> bool | None:
        """The answer cached for `key`, or None when there is none that is fresh."""
        found = self.entries.get(key)
        if found is None:
            return None
        allowed, expiry = found
        if self.clock() >= expiry:
            del self.entries[key]
            return None
        self.entries.move_to_end(key)
        return allowed

    def put(self, key: Hashable, allowed: bool) -> None:
        ttl = self.allowed_seconds if allowed else self.denied_seconds
        self.entries[key] = (allowed, self.clock() + ttl)
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)


@dataclass
class UseReviews:
    """Asks the API server whether a subject may `use` a PodNetwork (SubjectAccessReviews),
    remembering the answers in `cache`: the controller's webhook asks through it, and so does
    the bridge's (`bridge.operator.selectionuse`), each with its own API client and cache."""

    api: writes.Api | None
    cache: UseCache = field(default_factory=UseCache)
    who: str = "the controller"
    """Who asks, for the reason given when it cannot (e.g. "the bridge")."""

    async def may_use(self, subject: admission.Subject, podnetwork: str, namespace: str) -> bool:
        """Whether `subject` may `use` the PodNetwork `podnetwork` for a pod in `namespace`, as
        the API server's authorizers answer a SubjectAccessReview (cached).

        The namespace is the pod's, as PodSecurityPolicy's `use` check did: a RoleBinding
        there to a ClusterRole granting `use` suffices, though PodNetworks are
        cluster-scoped. Raises `admission.UseUnavailable` when the API does not answer.
        """
        key = (subject, podnetwork, namespace)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        if self.api is None:
            raise admission.UseUnavailable(f"{self.who} has not connected to the API yet")
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            **subject.spec(),
            "resourceAttributes": {"group": constants.GROUP, "resource": admission.USE_RESOURCE,
                                   "verb": admission.USE_VERB, "name": podnetwork, "namespace": namespace}}}
        try:
            answer = await self.api.create(kube.SubjectAccessReview, review)
        except kube.ApiError as exc:
            raise admission.UseUnavailable(f"POST /apis/authorization.k8s.io/v1/subjectaccessreviews "
                                           f"failed: {exc}") from None
        status = answer.get("status")
        if not isinstance(status, Mapping):
            raise admission.UseUnavailable("the SubjectAccessReview came back without a status")
        allowed = status.get("allowed") is True and status.get("denied") is not True
        self.cache.put(key, allowed)
        return allowed


def namespace_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the namespace cache keeps of a Namespace: its name and its networks profile."""
    head = core.head_of(body)  # None only for metadata the API server would refuse: no profile then
    meta = head.metadata if head is not None else core.ObjectMeta()
    entry: dict[str, Any] = {"metadata": {"name": meta.name}}
    profile = meta.annotation(constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION)
    if profile is not None:
        entry["metadata"]["annotations"] = {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: profile}
    return entry


class AdmissionReads:
    """The controller's answers to admission's lookups (a base of `Controller`, which holds the
    memory they read: `namespaces`, `objects`, `use_cache`, and its `api`)."""

    api: writes.Api | None
    objects: dict[Ref, KepObject]
    namespaces: dict[str, dict[str, Any]]
    use_cache: UseCache

    def namespace(self, name: str) -> dict[str, Any] | admission.Unseen | None:
        """Admission's lookup: the namespace as cached, or `admission.UNSEEN` when never seen.

        Without `namespace_profiles` (no watch) a namespace is read once, when first
        needed, and its later changes are not seen.
        """
        return self.namespaces.get(name, admission.UNSEEN)

    async def fetch_namespace(self, name: str) -> dict[str, Any]:
        """Read a namespace admission has not seen yet, once, and cache it.

        A namespace and its pods applied together can reach admission before the
        namespace's watch event. Raises `admission.NamespaceUnavailable` with the reason.
        """
        if self.api is None:
            raise admission.NamespaceUnavailable("the controller has not connected to the API yet")
        try:
            body = await asyncio.wait_for(self.api.get(kube.Namespace, name), NAMESPACE_GET_TIMEOUT)
        except kube.NotFound:
            raise admission.NamespaceUnavailable("it does not exist") from None
        except (TimeoutError, kube.ApiError) as exc:
            raise admission.NamespaceUnavailable(
                f"GET /api/v1/namespaces/{name} failed: {exc or type(exc).__name__}") from None
        slim = namespace_entry(body)
        # A watch event that arrived meanwhile is at least as new: keep it.
        return self.namespaces.setdefault(name, slim)

    async def may_use(self, subject: admission.Subject, podnetwork: str, namespace: str) -> bool:
        """Whether `subject` may `use` the PodNetwork `podnetwork` for a pod in `namespace`
        (`UseReviews.may_use`, with the controller's API and `use_cache`)."""
        return await UseReviews(self.api, self.use_cache).may_use(subject, podnetwork, namespace)

    async def attachment_network(self, namespace: str, name: str) -> str | None:
        """The PodNetwork of a PodNetworkAttachment, or None when it does not exist.

        From the watch-fed cache; an attachment the cache has not seen (created just
        before its pods, or this replica is paused by peering and watches nothing) is
        read from the API. Raises `admission.UseUnavailable` when that read fails.
        """
        cached = self.objects.get(inuse.attachment_ref(namespace, name))
        if isinstance(cached, models.PodNetworkAttachment):
            return cached.spec.pod_network_name
        if self.api is None:
            raise admission.UseUnavailable("the controller has not connected to the API yet")
        try:
            body = await self.api.get(kube.PodNetworkAttachment, name, namespace)
        except kube.NotFound:
            return None
        except kube.ApiError as exc:
            raise admission.UseUnavailable(str(exc)) from None
        try:
            return models.PodNetworkAttachment.model_validate(body).spec.pod_network_name
        except pydantic.ValidationError:
            return None  # not an attachment the CRD's schema lets through: it names no network

    def namespace_profile(self, name: str) -> list[Network] | None:
        try:
            return admission.namespace_default(self.namespaces.get(name))
        except InvalidObject:
            return None  # admission refuses new pods there; existing ones used `default`


__all__ = ["NAMESPACE_GET_TIMEOUT", "AdmissionReads", "UseCache", "UseReviews", "namespace_entry"]
