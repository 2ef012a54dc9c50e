"""The CNI agent's view of the cluster (`bridge.agent.kube.objects.ObjectSource`) over the demo's store,
and its list + watch of the kinds its Services' ClusterIPs follow (`follow`).

On a cluster the agent reads pods, NADs and PodNetworks with GETs and patches
pod annotations; here the same calls go to the in-process store, so the agent
code that runs in the demo is the code that runs on a node.

On a cluster the agent's reconcilers list and watch their kinds over HTTP
(`bridge.agent.kube.watchcache.follow`) into their state, a `watchcache.Listener`. `follow` here
gives the same listener the same calls from the store: the listing, then each event, with the
kind's label selector applied as the API server applies it (an object that stops matching is
DELETED for the watcher).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bridge import npwg, translate
from bridge.agent.kube import objects as cni_objects
from bridge.agent.kube import watchcache
from demo import store as store_mod
from podnetwork.ground import constants
from podnetwork.ground.core import Pod, head_of

_COORDINATES: dict[str, str] = {
    cni_objects.POD: "v1",
    constants.NAD_KIND: f"{constants.NAD_GROUP}/{constants.NAD_VERSION}",
    constants.PODNETWORK_KIND: f"{constants.GROUP}/{constants.VERSION}",
    constants.ATTACHMENT_KIND: f"{constants.GROUP}/{constants.VERSION}",
    constants.OPTIONS_KIND: f"{constants.OPTIONS_GROUP}/{constants.OPTIONS_VERSION}",
}


class StoreObjects:
    """`ObjectSource` backed by `demo.store.Store`."""

    def __init__(self, api: store_mod.Store) -> None:
        self._api = api
        self.patches: list[tuple[str, str, dict[str, str | None]]] = []
        """Every annotation patch the agent made, in order (the demo prints them)."""

    def _get(self, kind: str, namespace: str | None, name: str) -> Any:
        try:
            obj = self._api.get(_COORDINATES[kind], kind, name, namespace)
        except store_mod.NotFound:
            raise cni_objects.NotFound(kind, namespace, name) from None
        return cni_objects.read_object(kind, namespace, name, obj)

    async def get_pod(self, namespace: str, name: str) -> Pod:
        pod: Pod = self._get(cni_objects.POD, namespace, name)
        return pod

    async def get_nad(self, namespace: str, name: str) -> npwg.NetworkAttachmentDefinition:
        nad: npwg.NetworkAttachmentDefinition = self._get(constants.NAD_KIND, namespace, name)
        return nad

    async def get_podnetwork(self, name: str) -> translate.PodNetwork:
        pn: translate.PodNetwork = self._get(constants.PODNETWORK_KIND, None, name)
        return pn

    async def get_attachment(self, namespace: str, name: str) -> translate.PodNetworkAttachment:
        pna: translate.PodNetworkAttachment = self._get(constants.ATTACHMENT_KIND, namespace, name)
        return pna

    async def get_selection_options(self, namespace: str, name: str) -> translate.NetworkSelectionOptions:
        opts: translate.NetworkSelectionOptions = self._get(constants.OPTIONS_KIND, namespace, name)
        return opts

    async def get_service(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return dict(self._api.get("v1", cni_objects.SERVICE, name, namespace))
        except store_mod.NotFound:  # also when the demo's store knows no Services at all
            raise cni_objects.NotFound(cni_objects.SERVICE, namespace, name) from None

    async def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        # The demo runs no DRA driver: it records no claim, so no pod of it has one to look up.
        raise cni_objects.NotFound(cni_objects.RESOURCE_CLAIM, namespace, name)

    async def list_endpoint_slices(self, namespace: str, service: str) -> list[dict[str, Any]]:
        try:
            slices = self._api.list(f"{constants.ENDPOINTSLICE_GROUP}/{constants.ENDPOINTSLICE_VERSION}",
                                    cni_objects.ENDPOINT_SLICE, namespace)
        except store_mod.NotFound:  # the kind is not registered in the demo's store
            return []
        return [dict(s) for s in slices
                if _labels(s).get(constants.SERVICE_NAME_LABEL) == service]

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, uid: str | None = None
    ) -> None:
        try:
            if uid:
                # The API server refuses a patch whose metadata.uid is not the pod's (the one meant
                # was deleted and another created under its name); the store would ignore it.
                current = self._api.get("v1", cni_objects.POD, name, namespace)["metadata"].get("uid")
                if current and current != uid:
                    raise cni_objects.Replaced(cni_objects.POD, namespace, name, f"UID {current}, not {uid}")
            self._api.patch(
                "v1", cni_objects.POD, name, {"metadata": {"annotations": dict(annotations)}}, namespace
            )
        except store_mod.NotFound:
            raise cni_objects.NotFound(cni_objects.POD, namespace, name) from None
        self.patches.append((namespace, name, dict(annotations)))


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """The labels of a stored object (none when it has none, or they are not strings)."""
    head = head_of(obj)
    return dict(head.metadata.labels or {}) if head is not None else {}


def _selected(selector: str, obj: Mapping[str, Any]) -> bool:
    """Whether `obj` matches an equality label selector (`k=v,k2=v2`, what `watchcache.Kind` carries)."""
    labels = _labels(obj)
    for term in filter(None, selector.split(",")):
        name, _, value = term.partition("=")
        if labels.get(name) != value:
            return False
    return True


def follow(api: store_mod.Store, kinds: Iterable[watchcache.Kind],
           listener: watchcache.Listener) -> Callable[[], None]:
    """List each of `kinds` cluster-wide into `listener`, then tell it every change, as
    `watchcache.follow` does over HTTP; returns what stops it.

    The store calls back on the writer's thread: on the event loop's (the demo's writes), the
    listener hears at once; from another thread the call is handed to the loop, which owns the
    listener (it pokes the agent's reconciler there)."""
    loop = asyncio.get_running_loop()
    owner = threading.get_ident()
    cancels: list[Callable[[], None]] = []
    for kind in kinds:
        api_version = f"{kind.group}/{kind.version}" if kind.group else kind.version

        def on_event(event: store_mod.Event, kind: watchcache.Kind = kind) -> None:
            kept = event.type != store_mod.EventType.DELETED and _selected(kind.selector, event.object)
            change = (kind, event.type.value if kept else "DELETED", event.object)
            if threading.get_ident() == owner:
                listener.changed(*change)
            else:
                loop.call_soon_threadsafe(listener.changed, *change)

        listener.listed(kind, [o for o in api.list(api_version, kind.name) if _selected(kind.selector, o)])
        cancels.append(api.subscribe(on_event, api_version, kind.name, replay=False))

    def cancel() -> None:
        for stop in cancels:
            stop()

    return cancel
