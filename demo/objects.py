"""The CNI agent's view of the cluster (`bridge.agent.objects.ObjectSource`) over the demo's store.

On a cluster the agent reads pods, NADs and PodNetworks with GETs and patches
pod annotations; here the same calls go to the in-process store, so the agent
code that runs in the demo is the code that runs on a node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge import npwg, translate
from bridge.agent import objects as cni_objects
from demo import store as store_mod
from podnetwork.ground import constants
from podnetwork.ground.core import Pod

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

    async def list_endpoint_slices(self, namespace: str, service: str) -> list[dict[str, Any]]:
        try:
            slices = self._api.list(f"{constants.ENDPOINTSLICE_GROUP}/{constants.ENDPOINTSLICE_VERSION}",
                                    cni_objects.ENDPOINT_SLICE, namespace)
        except store_mod.NotFound:  # the kind is not registered in the demo's store
            return []
        return [dict(s) for s in slices
                if (s.get("metadata", {}).get("labels") or {}).get(constants.SERVICE_NAME_LABEL) == service]

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
