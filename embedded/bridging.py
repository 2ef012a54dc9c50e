"""The NPWG bridge's controller duties, driven by the demo store's watch events.

On a cluster the bridge's kopf handlers do three things, each a pure decision of
the `bridge` package written back to the API; this module does the same against
`embedded.store.Store`:

1. ParamsReady on PodNetworks and attachments whose provider is the bridge
   (KEP "ParamsReady": the provider writes it, the controller reacts to it);
2. the translation of a pod's spec-style networks into `k8s.v1.cni.cncf.io/networks`
   once everything the pod references is Ready (`bridge.translate`);
3. the reverse status: `k8s.v1.cni.cncf.io/network-status` into
   `multinetwork.x-k8s.io/pod-ips` (KEP "Status").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from bridge import npwg, translate
from embedded import store as store_mod
from embedded.store import Event, EventType, Store
from podnetwork import conditions, constants, networks
from podnetwork.fielderrors import InvalidObject

log = logging.getLogger(__name__)

PN = (constants.API_VERSION, constants.PODNETWORK_KIND)
PNA = (constants.API_VERSION, constants.ATTACHMENT_KIND)
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

    def params_problem(self, obj: dict[str, Any], objects: translate.Objects) -> tuple[str, str] | None:
        """(reason, message) when the bridge object's parameters are not usable, else None."""
        try:
            if obj["kind"] == constants.PODNETWORK_KIND:
                translate.podnetwork_nad(obj, objects)
            else:
                translate.attachment_params(obj, objects)
        except translate.TranslationError as exc:
            return str(exc.reason), str(exc)
        return None

    def _is_ours(self, obj: dict[str, Any], objects: translate.Objects) -> bool:
        if obj["kind"] == constants.PODNETWORK_KIND:
            return translate.is_bridge(obj)
        pn = objects.podnetworks.get((obj.get("spec") or {}).get("podNetworkName", ""))
        return (
            bool((obj.get("spec") or {}).get("parametersRefs")) and pn is not None and translate.is_bridge(pn)
        )

    def _params_ready(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        coords = PN if obj["kind"] == constants.PODNETWORK_KIND else PNA
        for _ in range(RETRIES):
            current = self.api.find(*coords, meta["name"], meta.get("namespace"))
            if current is None:
                return
            objects = self._objects()
            if not self._is_ours(current, objects) or not (current.get("spec") or {}).get("parametersRefs"):
                return
            problem = self.params_problem(current, objects)
            status = constants.ConditionStatus
            if problem is None:
                want = conditions.Desired(
                    constants.ConditionType.PARAMS_READY,
                    status.TRUE,
                    "ParamsReady",
                    "every parametersRef resolves to a valid object",
                )
            else:
                want = conditions.Desired(constants.ConditionType.PARAMS_READY, status.FALSE, *problem)
            existing = (current.get("status") or {}).get("conditions") or []
            gen = current["metadata"].get("generation")
            new = conditions.merge(existing, [want], now=self._now(), generation=gen)
            if new is None:
                return
            try:
                self.api.patch(
                    *coords,
                    meta["name"],
                    conditions.status_patch(current, new),
                    meta.get("namespace"),
                    subresource="status",
                )
            except store_mod.Conflict:
                continue
            where = f"{current['kind']} {store_mod.names([current])[0]}"
            self._note(
                f"bridge: {where} ParamsReady={want.status}"
                + (f" ({want.reason}: {want.message})" if problem else "")
            )
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
        pod = self.api.find(*POD, event_pod["metadata"]["name"], event_pod["metadata"]["namespace"])
        if pod is None:
            return
        meta = pod["metadata"]
        key = store_mod.names([pod])[0]
        annotations = meta.get("annotations") or {}
        if constants.NETWORKS_ANNOTATION not in annotations or npwg.NETWORKS_ANNOTATION in annotations:
            return
        try:
            nets = networks.parse(annotations[constants.NETWORKS_ANNOTATION])
        except InvalidObject:
            return  # admission refuses such pods; nothing to translate
        objects = self._objects()
        for net in nets:  # write only once everything the pod references is Ready
            kind, name = net.reference
            target = (
                objects.podnetworks.get(name)
                if kind == constants.PODNETWORK_KIND
                else objects.attachments.get((meta["namespace"], name))
            )
            if not conditions.is_ready(target):
                return
        try:
            result = translate.translate(nets, meta["namespace"], objects)
        except translate.TranslationError as exc:
            self.translation_errors[key] = f"{exc.reason}: {exc}"
            return
        self.translations[key] = result
        self.api.patch(
            *POD,
            meta["name"],
            {"metadata": {"annotations": {npwg.NETWORKS_ANNOTATION: result.annotation}}},
            meta["namespace"],
        )
        self._note(f"bridge: pod {key} -> {npwg.NETWORKS_ANNOTATION}: {result.annotation}")

    def _pod_ips(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        status_text = annotations.get(npwg.NETWORK_STATUS_ANNOTATION)
        key = store_mod.names([pod])[0]
        if not status_text or key not in self.translations:
            return
        ips = pod_ips(status_text, self.translations[key])
        text = json.dumps(ips, separators=(",", ":"))
        if annotations.get(constants.POD_IPS_ANNOTATION) == text:
            return
        self.api.patch(
            *POD,
            meta["name"],
            {"metadata": {"annotations": {constants.POD_IPS_ANNOTATION: text}}},
            meta["namespace"],
        )


def pod_ips(status_text: str, translation: translate.Translation) -> list[dict[str, Any]]:
    """KEP pod IPs from network-status (until `bridge.podips` lands)."""
    import ipaddress

    entries = npwg.parse_status(status_text)
    by_ref = {
        f"{e.namespace}/{e.name}": (s.pod_network, s.interface)
        for e, s in zip(translation.elements, translation.sources, strict=True)
    }
    out: list[dict[str, Any]] = []
    for entry in entries:
        if entry.get("default"):
            pn, _ = constants.DEFAULT_PODNETWORK, None
        elif entry.get("name") in by_ref:
            pn, _ = by_ref[entry["name"]]
        else:
            continue
        seen: set[int] = set()
        for address in entry.get("ips") or []:
            ip = str(address).split("/")[0]  # the spec's examples show both forms (NPWG 5.3.3)
            version = ipaddress.ip_address(ip).version
            if version in seen:
                continue
            seen.add(version)
            item = {"ip": ip, "podNetwork": pn}
            if entry.get("interface"):
                item["interfaceName"] = entry["interface"]
            out.append(item)
    return out
