"""The NPWG bridge's controller duties, driven by the demo store's watch events.

On a cluster the bridge's kopf handlers do three things, each a pure decision of
the `bridge` package written back to the API; this module does the same against
`demo.store.Store`:

1. ParamsReady on PodNetworks and attachments whose provider is the bridge
   (KEP "ParamsReady": the provider writes it, the controller reacts to it);
2. the translation of a pod's spec-style networks into `k8s.v1.cni.cncf.io/networks`
   once everything the pod references is Ready (`bridge.translate`);
3. the reverse status: `k8s.v1.cni.cncf.io/network-status` into
   `multinetwork.x-k8s.io/pod-ips` (KEP "Status").
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from bridge import npwg, translate
from bridge.operator import pods
from bridge.translate import params
from demo import store as store_mod
from demo.store import Event, EventType, Store
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import conditions

log = logging.getLogger(__name__)

PN: tuple[str, str] = (constants.API_VERSION, constants.PODNETWORK_KIND)
PNA: tuple[str, str] = (constants.API_VERSION, constants.ATTACHMENT_KIND)
NAD = (npwg.NAD_API_VERSION, npwg.NAD_KIND)
OPTIONS = (translate.OPTIONS_API_VERSION, translate.OPTIONS_KIND)
POD = ("v1", "Pod")
RETRIES = 5


class Bridge:
    """ParamsReady, translation and reverse status for the objects in the store."""

    def __init__(
        self,
        api: Store,
        *,
        now: Callable[[], str] = conditions.now,
        on_note: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api
        self._now = now
        self._note = on_note or (lambda text: log.info("%s", text))
        self._cancel: list[Callable[[], None]] = []
        self.translations: dict[str, translate.Translation] = {}
        """Pod `ns/name` -> the translation written on it."""
        self.translation_errors: dict[str, str] = {}

    def start(self) -> None:
        for coords in (NAD, OPTIONS, PN, PNA):
            self._cancel.append(self.api.subscribe(self._on_parameters, *coords))
        self._cancel.append(self.api.subscribe(self._on_pod, *POD))

    def stop(self) -> None:
        for cancel in self._cancel:
            cancel()
        self._cancel.clear()

    def _objects(self) -> translate.Objects:
        objs: list[dict[str, Any]] = []
        for coords in (PN, PNA, NAD, OPTIONS):
            objs += self.api.list(*coords)
        return translate.Objects.from_objects(objs)

    # -- 1. ParamsReady ------------------------------------------------------------------

    def _on_parameters(self, event: Event) -> None:
        # Any parameters object, PodNetwork or attachment may change what a bridge object
        # resolves to: re-evaluate them all (the demo has a handful; a cluster indexes them).
        for obj in self.api.list(*PN) + self.api.list(*PNA):
            self._params_ready(obj)
        # Objects turning Ready may unblock translations.
        if event.object.get("kind") in (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND):
            for pod in self.api.list(*POD):
                self._translate(pod)

    def _params_ready(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        coords = PN if obj["kind"] == constants.PODNETWORK_KIND else PNA
        for _ in range(RETRIES):
            current = self.api.find(*coords, meta["name"], meta.get("namespace"))
            if current is None:
                return
            objects = self._objects()
            # The store's admission applied the CRD schemas (the models'): what is in
            # Objects fits; an object missing from it does not, and gets no decision.
            if coords == PN:
                typed_pn = objects.podnetworks.get(meta["name"])
                if typed_pn is None:
                    return
                typed: translate.PodNetwork | translate.PodNetworkAttachment = typed_pn
                want = params.podnetwork_params(typed_pn, objects)
            else:
                pna = objects.attachments.get((meta.get("namespace") or "", meta["name"]))
                if pna is None:
                    return
                typed = pna
                pn = objects.podnetworks.get(pna.spec.pod_network_name)
                want = params.attachment_params(pna, pn, objects)
            if want is None:
                return  # another provider's object, or nothing to resolve: not ours to judge
            new = params.conditions_after(typed, want, now=self._now())
            if new is None:
                return
            try:
                self.api.patch(
                    *coords,
                    meta["name"],
                    conditions.status_patch(typed, new),
                    meta.get("namespace"),
                    subresource="status",
                )
            except store_mod.Conflict:
                continue
            before: dict[str, Any] = next(
                (
                    c
                    for c in (current.get("status") or {}).get("conditions") or []
                    if c.get("type") == constants.ConditionType.PARAMS_READY
                ),
                {},
            )
            if before.get("status") == want.status and before.get("reason") == want.reason:
                return  # only observedGeneration moved: nothing to tell
            where = f"{current['kind']} {store_mod.names([current])[0]}"
            ok = want.status == constants.ConditionStatus.TRUE
            detail = "" if ok else f" ({want.reason}: {want.message})"
            self._note(f"bridge: {where} ParamsReady={want.status}{detail}")
            return

    # -- 2. translation and 3. reverse status ---------------------------------------------

    def _on_pod(self, event: Event) -> None:
        if event.type == EventType.DELETED:
            key = store_mod.names([event.object])[0]
            self.translations.pop(key, None)
            self.translation_errors.pop(key, None)
            return
        self._translate(event.object)
        fresh = self.api.find(*POD, event.object["metadata"]["name"], event.object["metadata"]["namespace"])
        if fresh is not None:
            self._pod_ips(fresh)

    def _translate(self, event_pod: dict[str, Any]) -> None:
        found = self.api.find(*POD, event_pod["metadata"]["name"], event_pod["metadata"]["namespace"])
        pod = None if found is None else _view(found)
        if found is None or pod is None:
            return
        namespace, name = pod.metadata.namespace or "", pod.metadata.name or ""
        key = store_mod.names([found])[0]
        try:
            nets = pods.declared(pod)
        except InvalidObject:
            return  # admission refuses such pods; nothing to translate
        if nets is None:
            return
        objects = self._objects()
        if pods.not_ready(nets, namespace, objects):
            return  # written only once everything the pod references is Ready
        try:
            translation = pods.translation(pod, nets, namespace, objects)
        except translate.TranslationError as exc:
            self.translation_errors[key] = f"{exc.reason}: {exc}"
            return
        self.translations[key] = translation
        decision = pods.selection(pod, translation)
        if decision.patch is not None:
            try:
                self.api.patch(*POD, name, decision.patch, namespace)
            except store_mod.Conflict:
                return  # the pod changed meanwhile; its own event brings us back
            value = decision.patch["metadata"]["annotations"][npwg.NETWORKS_ANNOTATION]
            self._note(f"bridge: pod {key} -> {npwg.NETWORKS_ANNOTATION}: {value}")
        if decision.conflict is not None:
            with contextlib.suppress(store_mod.AlreadyExists):
                self.api.create(pods.event(pod, pods.CONFLICT_REASON, decision.conflict, now=self._now()))
                self._note(f"bridge: event on pod {key}: {decision.conflict}")

    def _pod_ips(self, body: dict[str, Any]) -> None:
        key = store_mod.names([body])[0]
        translation = self.translations.get(key)
        pod = None if translation is None else _view(body)
        if pod is None or translation is None:
            return
        try:
            # Pod IPs per PodNetwork and the attachment data (Req 17), in one write, as the bridge does.
            patch = pods.reverse_status_patch(pod, translation)
        except ValueError as exc:
            log.warning("pod %s: unreadable %s: %s", key, npwg.NETWORK_STATUS_ANNOTATION, exc)
            return
        if patch is not None:
            self.api.patch(*POD, pod.metadata.name or "", patch, pod.metadata.namespace)


def _view(body: dict[str, Any]) -> Pod | None:
    """The pod as the bridge's decisions read it; None (logged) when it does not fit the view.

    The store's admission refuses pods of the wrong shape, so this is for a hand-made store:
    a pod that does not fit holds no network, as in the operator.
    """
    try:
        return Pod.model_validate(body)
    except ValueError as exc:  # pydantic.ValidationError
        log.warning("pod %s ignored: it does not fit the Pod view: %s", store_mod.names([body])[0], exc)
        return None
