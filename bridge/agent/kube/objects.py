"""The agent's access to the cluster: a small async protocol, and two implementations.

The agent reads a few objects by name and patches pod annotations; nothing else.
The getters return typed values, read where the objects enter the agent
(`read_object`): the pod as `podnetwork.ground.core.Pod`, a NAD as
`npwg.NetworkAttachmentDefinition`, the KEP objects and the options through
`bridge.translate` (the agent's only way to the KEP layer). An object that does
not fit fails the call with a `CNIError` naming the fields (INVALID_CONFIG).

- `ObjectSource`: the protocol. The local demo implements it over its own store.
- `MemoryObjects`: a dict-backed implementation with the API server's merge-patch
  semantics for annotations (tests, and `podnetwork cni-agent --objects FILE`).
- `KubernetesObjects`: the real API through `podnetwork.kube.lite` (a small asyncio
  client, credentials as every command finds them). Reads are single
  GETs by name: the agent runs on every node, and a node's agent only ever asks
  about the pods the runtime hands it.
"""

from __future__ import annotations

import copy
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from bridge import npwg, translate
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.dracontract import podclaims
from podnetwork.ground import constants
from podnetwork.ground.core import Pod

#: The kinds the agent reads, by the names on the wire (podnetwork.ground.constants).
POD = "Pod"
SERVICE, ENDPOINT_SLICE = "Service", "EndpointSlice"
RESOURCE_CLAIM = "ResourceClaim"
_NAMESPACED = {POD, constants.NAD_KIND, constants.ATTACHMENT_KIND, constants.OPTIONS_KIND, SERVICE,
               ENDPOINT_SLICE, RESOURCE_CLAIM}
#: Where each of them is served: (group, version, plural).
_RESOURCES = {
    POD: ("", "v1", "pods"),
    constants.NAD_KIND: (constants.NAD_GROUP, constants.NAD_VERSION, constants.NAD_PLURAL),
    constants.PODNETWORK_KIND: (constants.GROUP, constants.VERSION, constants.PODNETWORK_PLURAL),
    constants.ATTACHMENT_KIND: (constants.GROUP, constants.VERSION, constants.ATTACHMENT_PLURAL),
    constants.OPTIONS_KIND: (constants.OPTIONS_GROUP, constants.OPTIONS_VERSION, constants.OPTIONS_PLURAL),
}


class NotFound(LookupError):
    """The object does not exist (HTTP 404)."""

    def __init__(self, kind: str, namespace: str | None, name: str) -> None:
        where = f"{namespace}/{name}" if namespace else name
        super().__init__(f"{kind} {where} not found")
        self.kind, self.namespace, self.name = kind, namespace, name


class Replaced(NotFound):
    """The object of that name is another one now (its UID differs from the one asked about):
    the object meant is gone, and was re-created under the same name."""

    def __init__(self, kind: str, namespace: str | None, name: str, detail: str) -> None:
        super().__init__(kind, namespace, name)
        where = f"{namespace}/{name}" if namespace else name
        self.args = (f"{kind} {where} is another one now ({detail})",)


def uid_mismatch(status: int, message: str) -> bool:
    """Whether an API answer to a patch carrying `metadata.uid` says the UID is not the object's.

    A merge patch's `metadata.uid` makes the API server compare it with the stored object's:
    different, the patch is refused. kube-apiserver validates the patched object as an
    update, where the UID is immutable: 422 Invalid, "metadata.uid: Invalid value: ...: field is
    immutable" (the same check controllers rely on for ownerReference patches); a UID given as
    a storage precondition (an update, a delete) gives 409 Conflict, "Precondition failed: UID in
    precondition: X, UID in object meta: Y". Either means the same here."""
    if status == 422:
        return "metadata.uid" in message
    if status == 409:
        return "UID in precondition" in message
    return False


_VIEWS: dict[str, type[BaseModel]] = {
    POD: podclaims.Pod,  # with its ResourceClaims (`bridge.agent.cni.claims`)
    constants.NAD_KIND: npwg.NetworkAttachmentDefinition,
    constants.PODNETWORK_KIND: translate.PodNetwork,
    constants.ATTACHMENT_KIND: translate.PodNetworkAttachment,
    constants.OPTIONS_KIND: translate.NetworkSelectionOptions,
}


def read_object(kind: str, namespace: str | None, name: str, obj: Mapping[str, Any]) -> Any:
    """An object as the API serves it, read into its model or view (see the module docstring)."""
    try:
        return _VIEWS[kind].model_validate(obj)
    except ValidationError as exc:
        where = f"{namespace}/{name}" if namespace else name
        raise CNIError(
            ErrorCode.INVALID_CONFIG,
            f"{kind} {where} does not fit its schema",
            f"{translate.field_errors(exc)}; fix the object (its CRD may be older than this agent)",
        ) from None


class ObjectSource(Protocol):
    """What the agent needs from the cluster. Every getter raises `NotFound` when absent;
    other failures are `CNIError`s (11, "try again later", for transient ones)."""

    async def get_pod(self, namespace: str, name: str) -> Pod: ...

    async def get_nad(self, namespace: str, name: str) -> npwg.NetworkAttachmentDefinition: ...

    async def get_podnetwork(self, name: str) -> translate.PodNetwork: ...

    async def get_attachment(self, namespace: str, name: str) -> translate.PodNetworkAttachment: ...

    async def get_selection_options(self, namespace: str, name: str) -> translate.NetworkSelectionOptions: ...

    async def get_service(self, namespace: str, name: str) -> dict[str, Any]:
        """A core/v1 Service as the API serves it (node access reads `default/kubernetes`)."""
        ...

    async def list_endpoint_slices(self, namespace: str, service: str) -> list[dict[str, Any]]:
        """The EndpointSlices (discovery.k8s.io/v1) labelled as the Service's; [] when none."""
        ...

    async def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """A resource.k8s.io/v1 ResourceClaim as the API serves it: only for a pod's claim the DRA
        driver did not record, to tell whose it is (`bridge.agent.cni.claims`)."""
        ...

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, uid: str | None = None
    ) -> None:
        """Merge-patches `metadata.annotations`: a None value removes that key. With `uid`, only
        the pod of that UID: another pod of the same name raises `Replaced`."""
        ...


class EventSink(Protocol):
    """Where the agent's Events about pods go: the API (`hotplug.KubernetesEvents`), the demo's
    store, a list in tests."""

    async def post_event(self, body: Mapping[str, Any]) -> None: ...


class MemoryObjects:
    """An in-memory ObjectSource. `put`/`delete` stand in for kubectl."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        self._store: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.patches: list[tuple[str, str, dict[str, str | None]]] = []
        """Every annotation patch applied, in order (for tests and the demo's log)."""
        for obj in objects:
            self.put(obj)

    @staticmethod
    def _key(kind: str, namespace: str | None, name: str) -> tuple[str, str | None, str]:
        return (kind, namespace if kind in _NAMESPACED else None, name)

    def put(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}  # why: an in-memory store of any kind's JSON, as the API keeps it
        kind = obj.get("kind")
        if not isinstance(kind, str) or not meta.get("name"):
            raise ValueError("an object needs a kind and metadata.name")
        namespace = meta.get("namespace") or ("default" if kind in _NAMESPACED else None)
        stored = copy.deepcopy(dict(obj))
        if kind in _NAMESPACED:
            stored["metadata"] = {**meta, "namespace": namespace}
        self._store[self._key(kind, namespace, meta["name"])] = stored

    def delete(self, kind: str, namespace: str | None, name: str) -> None:
        self._store.pop(self._key(kind, namespace, name), None)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        try:
            return copy.deepcopy(self._store[self._key(kind, namespace, name)])
        except KeyError:
            raise NotFound(kind, namespace if kind in _NAMESPACED else None, name) from None

    def _read(self, kind: str, namespace: str | None, name: str) -> Any:
        return read_object(kind, namespace, name, self.get(kind, namespace, name))

    async def get_pod(self, namespace: str, name: str) -> Pod:
        pod: Pod = self._read(POD, namespace, name)
        return pod

    async def get_nad(self, namespace: str, name: str) -> npwg.NetworkAttachmentDefinition:
        nad: npwg.NetworkAttachmentDefinition = self._read(constants.NAD_KIND, namespace, name)
        return nad

    async def get_podnetwork(self, name: str) -> translate.PodNetwork:
        pn: translate.PodNetwork = self._read(constants.PODNETWORK_KIND, None, name)
        return pn

    async def get_attachment(self, namespace: str, name: str) -> translate.PodNetworkAttachment:
        pna: translate.PodNetworkAttachment = self._read(constants.ATTACHMENT_KIND, namespace, name)
        return pna

    async def get_selection_options(self, namespace: str, name: str) -> translate.NetworkSelectionOptions:
        opts: translate.NetworkSelectionOptions = self._read(constants.OPTIONS_KIND, namespace, name)
        return opts

    async def get_service(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get(SERVICE, namespace, name)

    async def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get(RESOURCE_CLAIM, namespace, name)

    async def list_endpoint_slices(self, namespace: str, service: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(obj) for (kind, ns, _), obj in sorted(self._store.items())
                if kind == ENDPOINT_SLICE and ns == namespace
                # why: the store's JSON, as `put` keeps it
                and (obj["metadata"].get("labels") or {}).get(constants.SERVICE_NAME_LABEL) == service]

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, uid: str | None = None
    ) -> None:
        key = self._key(POD, namespace, name)
        if key not in self._store:
            raise NotFound(POD, namespace, name)
        meta = self._store[key].setdefault("metadata", {})
        if uid and meta.get("uid") and meta["uid"] != uid:
            raise Replaced(POD, namespace, name, f"UID {meta['uid']}, not {uid}")
        current = dict(meta.get("annotations") or {})  # why: patches the store's JSON in place
        for k, v in annotations.items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v
        meta["annotations"] = current
        self.patches.append((namespace, name, dict(annotations)))


class _OtherUid(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class KubernetesObjects:
    """ObjectSource over the Kubernetes API: `podnetwork.kube.lite` (a small asyncio client, the
    agent's RSS; credentials as every command finds them, a kubeconfig or the in-cluster account).

    No retries here: a failure is a CNI error at once, and error 11 ("try again
    later") tells the runtime to call again.
    """

    def __init__(
        self, kubeconfig: str | None = None, context: str | None = None, *, request_timeout: float = 10.0
    ) -> None:
        # Imported here: only the real agent needs a client (the demo and tests use MemoryObjects).
        from podnetwork.kube import credentials, lite

        self._lite = lite
        self._credentials_error = credentials.CredentialsError
        # Without a timeout a call to an unresponsive API server would wait forever.
        self.request_timeout = request_timeout
        self._api = lite.LiteApi(credentials.resolve(kubeconfig, context), timeout=request_timeout)

    @property
    def api(self) -> Any:
        """The `podnetwork.kube.lite.LiteApi` underneath (the watch cache lists and watches with it)."""
        return self._api

    async def _call(self, kind: str, namespace: str | None, name: str, request: Any) -> Any:
        where = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
        try:
            return await request
        except self._lite.NotFound:
            raise NotFound(kind, namespace, name) from None
        except self._lite.Malformed as exc:
            # A broken server or proxy: CNI well-known error 11 ("Try again later", the spec's
            # "Well-known Error Codes"), as for a server that did not answer.
            raise CNIError(
                ErrorCode.TRY_AGAIN_LATER,
                f"cannot read {where} now: the API server's answer is malformed",
                exc.message[:500],
            ) from None
        except self._lite.Unreachable as exc:
            raise CNIError(
                ErrorCode.TRY_AGAIN_LATER,
                f"cannot reach {where} now: the API server did not answer (connection failed or timed out)",
                exc.message[:500],
            ) from None
        except self._lite.ApiError as exc:
            answer = f"the API server answered {exc.status} {exc.reason}".rstrip()
            if exc.transient:
                # Throttled or failing for now: CNI well-known error 11 tells the runtime to retry.
                raise CNIError(
                    ErrorCode.TRY_AGAIN_LATER, f"cannot reach {where} now: {answer}", exc.message[:500]
                ) from None
            raise CNIError(
                ErrorCode.IO_FAILURE, f"cannot access {where}: {answer}", exc.message[:500]
            ) from None
        except self._credentials_error as exc:
            raise CNIError(ErrorCode.IO_FAILURE, f"cannot access {where}: {exc}") from None

    async def _read(self, kind: str, namespace: str | None, name: str) -> Any:
        path = self._lite.object_path(*_RESOURCES[kind], name, namespace)
        obj = await self._call(kind, namespace, name, self._api.get(path))
        meta = obj.get("metadata")
        got = (meta.get("namespace"), meta.get("name")) if isinstance(meta, dict) else (None, None)
        if got != (namespace if kind in _NAMESPACED else got[0], name):
            where = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
            raise CNIError(
                ErrorCode.TRY_AGAIN_LATER,
                f"cannot read {where} now: the API server's answer is malformed",
                f"it is not that object (its metadata names {got[0]!r}/{got[1]!r})"[:500],
            )
        return read_object(kind, namespace, name, obj)

    async def get_pod(self, namespace: str, name: str) -> Pod:
        pod: Pod = await self._read(POD, namespace, name)
        return pod

    async def get_nad(self, namespace: str, name: str) -> npwg.NetworkAttachmentDefinition:
        nad: npwg.NetworkAttachmentDefinition = await self._read(constants.NAD_KIND, namespace, name)
        return nad

    async def get_podnetwork(self, name: str) -> translate.PodNetwork:
        pn: translate.PodNetwork = await self._read(constants.PODNETWORK_KIND, None, name)
        return pn

    async def get_attachment(self, namespace: str, name: str) -> translate.PodNetworkAttachment:
        pna: translate.PodNetworkAttachment = await self._read(constants.ATTACHMENT_KIND, namespace, name)
        return pna

    async def get_selection_options(self, namespace: str, name: str) -> translate.NetworkSelectionOptions:
        opts: translate.NetworkSelectionOptions = await self._read(constants.OPTIONS_KIND, namespace, name)
        return opts

    async def get_service(self, namespace: str, name: str) -> dict[str, Any]:
        path = self._lite.object_path("", "v1", "services", name, namespace)
        obj: dict[str, Any] = await self._call(SERVICE, namespace, name, self._api.get(path))
        return obj

    async def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        path = self._lite.object_path("resource.k8s.io", "v1", "resourceclaims", name, namespace)
        obj: dict[str, Any] = await self._call(RESOURCE_CLAIM, namespace, name, self._api.get(path))
        return obj

    async def list_endpoint_slices(self, namespace: str, service: str) -> list[dict[str, Any]]:
        selector = urllib.parse.quote(f"{constants.SERVICE_NAME_LABEL}={service}", safe="")
        collection = self._lite.object_path(constants.ENDPOINTSLICE_GROUP, constants.ENDPOINTSLICE_VERSION,
                                            constants.ENDPOINTSLICE_PLURAL, "", namespace).rstrip("/")
        path = f"{collection}?labelSelector={selector}"
        listed = await self._call(ENDPOINT_SLICE, namespace, service, self._api.get(path))
        items = listed.get("items") if isinstance(listed, dict) else None
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, uid: str | None = None
    ) -> None:
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if uid:
            metadata["uid"] = uid  # the API server refuses the patch for another pod of this name
        request = self._api.merge_patch(
            self._lite.object_path(*_RESOURCES[POD], name, namespace), {"metadata": metadata})
        try:
            await self._call(POD, namespace, name, self._refusing_other_uid(request, uid))
        except _OtherUid as other:
            raise Replaced(POD, namespace, name, f"the API server refused the write for UID {uid}: "
                                                 f"{other.message[:300]}") from None

    async def _refusing_other_uid(self, request: Any, uid: str | None) -> Any:
        try:
            return await request
        except self._lite.ApiError as exc:
            if uid and uid_mismatch(exc.status, exc.message):
                raise _OtherUid(exc.message) from None
            raise

    async def close(self) -> None:
        await self._api.close()
