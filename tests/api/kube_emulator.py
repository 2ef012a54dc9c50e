"""kmock's Kubernetes emulator made closer to a real API server, and a kopf operator to run against it.

kmock stores objects as given: no resourceVersion, no conflicts, lists replaced on
merge. `Emulator` adds what the operators rely on, as a real API server does it:
every create or patch bumps `metadata.resourceVersion` (a counter, as etcd's
revision is), a patch carrying a stale `resourceVersion` gets 409 Conflict, a patch
carrying another object's `metadata.uid` (the object was deleted and re-created under
its name) gets 422 Invalid, the create of an object that exists gets 409 AlreadyExists
(the reasons and messages of kube-apiserver), a test can make writes to a path answer
503, and it can hold writes to a path until several are waiting (`hold`), so that
racing writers really race, and Namespaces are served at `/api/v1/namespaces` (kmock reads that
path as a namespace's prefix). `operator` runs a kopf registry in a
task of the test's loop, logged in to the emulator over real HTTP (`credentials` and
`api` give the handlers' own client the same server).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import kmock
import kopf
import yaml
from kmock._internal import parsing as kmock_parsing

import bridge
import podnetwork
from podnetwork.ground import constants
from podnetwork.kube import client as kube
from podnetwork.kube import credentials as kube_credentials

PN = f"{constants.GROUP}/{constants.VERSION}/{constants.PODNETWORK_PLURAL}"
PNA = f"{constants.GROUP}/{constants.VERSION}/{constants.ATTACHMENT_PLURAL}"
PODS = "v1/pods"
NODES = "v1/nodes"
EVENTS = "v1/events"
#: Paths of the review kinds (SubjectAccessReview...) that are answered, never stored.
REVIEWS = ("/subjectaccessreviews", "/selfsubjectaccessreviews", "/tokenreviews")
ALL_VERBS = frozenset({"list", "watch", "get", "create", "patch", "delete"})


_kmock_parse_path = kmock_parsing.parse_path


def _parse_path(path: str) -> kmock_parsing.ParsedPath:
    """kmock's path parser, except that `/api/v1/namespaces[/NAME]` is the Namespace collection (or
    one Namespace), as kube-apiserver serves it: kmock reads it as "in the namespace <missing>"
    and answers every list and watch of Namespaces with a 500."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
        return kmock_parsing.ParsedPath("", "v1", "namespaces", None, parts[3] if len(parts) == 4 else None)
    return _kmock_parse_path(path)


kmock_parsing.parse_path = _parse_path


class Emulator(kmock.KubernetesEmulator):
    """kmock's emulator with resourceVersion counting, 409 on stale patches and injected 503s."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._revision = 0
        self.failures: dict[str, int] = {}
        """Path suffix -> how many more writes there answer 503 without storing anything."""
        self.holds: dict[str, Hold] = {}
        """Path suffix -> the writes there wait until this many are waiting (`hold`)."""

    def hold(self, suffix: str, writers: int = 2, timeout: float = 20.0) -> Hold:
        """Make the next `writers` writes (POST, PATCH) to a path ending in `suffix` wait until all
        of them arrived, then go on in the order they came: each writer has read before any
        write was stored. After `timeout` seconds the waiting ones go on anyway."""
        held = Hold(writers, timeout)
        self.holds[suffix] = held
        return held

    async def _handle(self, request: Any) -> Any:
        if request.method.value in ("POST", "PATCH", "PUT"):
            for suffix, held in list(self.holds.items()):
                if str(request.url.path).endswith(suffix) and held.left > 0:
                    await held.wait()
        if request.method.value == "POST" and isinstance(request.data, dict) and request.resource is not None:
            meta = request.data.get("metadata") or {}
            key = (request.resource, request.namespace or meta.get("namespace"), meta.get("name"))
            if meta.get("name") and key in self.objects and not self.objects[key].deleted:
                # kube-apiserver's answer (StatusReasonAlreadyExists), where kmock's reason differs.
                raise kmock.KubernetesError(status=409, reason="AlreadyExists",
                                            message=f'{request.resource.plural} "{meta["name"]}" already exists')
        for suffix, left in self.failures.items():
            if left and request.method.value != "GET" and str(request.url.path).endswith(suffix):
                self.failures[suffix] = left - 1
                raise kmock.KubernetesError(status=503, reason="ServiceUnavailable", message="try again")
        if request.method.value == "POST" and str(request.url.path).endswith(REVIEWS):
            # An API server answers reviews and stores none: skip kmock's object store, which
            # would keep the first (nameless) one and answer 409 to the next.
            return await super(kmock.KubernetesEmulator, self)._handle(request)
        if request.resource is None or not isinstance(request.data, dict) or request.method.value not in (
                "POST", "PATCH"):
            return await super()._handle(request)
        sent = copy.deepcopy(request.data)
        meta = request.data.setdefault("metadata", {})
        if request.method.value == "PATCH" and (meta.get("resourceVersion") or meta.get("uid")):
            key = (request.resource, request.namespace, request.name)
            stored = self.objects[key] if key in self.objects else None  # noqa: SIM401 (no .get)
            stored_meta = (stored or {}).get("metadata", {})
            current = stored_meta.get("resourceVersion")
            if meta.get("resourceVersion") and current and current != meta["resourceVersion"]:
                request.data.clear()
                request.data.update(sent)
                raise kmock.KubernetesError(status=409, reason="Conflict", message="the object has been modified")
            if meta.get("uid") and stored_meta.get("uid") and stored_meta["uid"] != meta["uid"]:
                # kube-apiserver validates the patched object as an update, where metadata.uid is
                # immutable (apimachinery ValidateObjectMetaUpdate): a patch naming another UID is
                # refused, which is how a client makes a patch land on one incarnation only.
                request.data.clear()
                request.data.update(sent)
                kind = (stored or {}).get("kind", "Object")
                raise kmock.KubernetesError(
                    status=422, reason="Invalid",
                    message=f'{kind} "{request.name}" is invalid: metadata.uid: Invalid value: '
                            f'"{meta["uid"]}": field is immutable')
        self._revision += 1
        meta["resourceVersion"] = str(self._revision)
        try:
            return await super()._handle(request)
        finally:
            # kmock records the request as sent, and the tests assert on that.
            request.data.clear()
            request.data.update(sent)


class Hold:
    """Writes waiting for each other (`Emulator.hold`)."""

    def __init__(self, writers: int, timeout: float) -> None:
        self.left = writers
        self.arrived = 0
        self.timeout = timeout
        self._all = asyncio.Event()

    async def wait(self) -> None:
        self.left -= 1
        self.arrived += 1
        if self.left == 0:
            self._all.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all.wait(), self.timeout)


def declare_resources(k: kmock.KubernetesEmulator) -> None:
    """The KEP resources, pods and nodes, and the (empty) ones kopf's observers watch."""
    k.resources[PN] = kmock.ResourceInfo(
        kind=constants.PODNETWORK_KIND, namespaced=False, shortnames={"pn"}, subresources={"status"},
        verbs=set(ALL_VERBS))
    k.resources[PNA] = kmock.ResourceInfo(
        kind=constants.ATTACHMENT_KIND, namespaced=True, shortnames={"pna"}, subresources={"status"},
        verbs=set(ALL_VERBS))
    k.resources[PODS] = kmock.ResourceInfo(kind="Pod", namespaced=True, subresources={"status"}, verbs=set(ALL_VERBS))
    k.resources[NODES] = kmock.ResourceInfo(
        kind="Node", namespaced=False, subresources={"status"}, verbs={"list", "watch", "get", "patch"})
    k.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs={"list", "watch"})
    k.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"list", "watch", "get"})


def write_kubeconfig(path: Path, server: str, *, token: str | None = None, name: str = "kmock") -> Path:
    """A kubeconfig at `path` whose current context `name` reaches `server` (plain HTTP needs
    no CA), as a user with this bearer `token`, or with no credentials at all."""
    user: dict[str, str] = {} if token is None else {"token": token}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }))
    return path


def credentials(k: kmock.KubernetesEmulator) -> kube_credentials.Credentials:
    """The emulator as a server of `podnetwork.kube` (plain HTTP, no user)."""
    return kube_credentials.Credentials(server=str(k.url).rstrip("/"), source="kmock")


def api(k: kmock.KubernetesEmulator) -> kube.AsyncApi:
    """The operators' API client for the emulator, retrying as fast as kopf does here (0.1 s)."""
    return kube.AsyncApi(credentials(k), backoffs=[0.1])


def _package_dirs(*modules: Any) -> tuple[str, ...]:
    """Each module's directory with a trailing separator, as written and resolved."""
    dirs: set[str] = set()
    for module in modules:
        directory = Path(module.__file__).parent
        dirs.update(f"{d}{os.sep}" for d in (directory, directory.resolve()))
    return tuple(sorted(dirs))


#: The code whose tasks are the operator's: kopf's and the handlers' packages. By directory, not
#: by a name anywhere in the path: tests/api/bridge/ is no part of the bridge (matching "/bridge/"
#: made kopf wait 5 s at every exit for the test's own task as a hung one, then cancel it).
_OPERATOR_CODE = _package_dirs(kopf, podnetwork, bridge)


class _ForeignTasks(Collection[asyncio.Task[Any]]):
    """Tasks that kopf must not wait for at exit: kmock's server and the test's own.

    kopf treats every task created after its start as its own and waits for them
    at exit; kmock's connection handlers are among them.
    """

    def __contains__(self, task: object) -> bool:
        coro = task.get_coro() if isinstance(task, asyncio.Task) else None
        filename = getattr(getattr(coro, "cr_code", None), "co_filename", "")
        return not filename.startswith(_OPERATOR_CODE)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(())

    def __len__(self) -> int:
        return 0


@contextlib.asynccontextmanager
async def operator(k: kmock.KubernetesEmulator, registry: kopf.OperatorRegistry, *,
                   exit_timeout: float = 10, **spawn_options: Any) -> AsyncIterator[None]:
    """The handlers of `registry` in an operator task of this loop; stopped (and awaited) on exit.

    `spawn_options` go to `kopf.spawn_tasks` (default: standalone, no peering), e.g. the
    controller command's `peering_options(args)` and an `identity`.
    """

    kopf.on.login(registry=registry)(kube_credentials.kopf_login(credentials(k)))

    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0.1
    settings.networking.error_backoffs = [0.1]
    # Per-object workers linger `idle_timeout` s; at exit they get `exit_timeout` s.
    settings.batching.idle_timeout = 0.5
    settings.batching.exit_timeout = 0.5
    stop = asyncio.Event()
    ready = asyncio.Event()

    async def run() -> None:
        # What `kopf.operator` does, minus waiting at exit for kmock's own connection tasks.
        options = {"standalone": True, **spawn_options}
        tasks = await kopf.spawn_tasks(registry=registry, settings=settings, clusterwide=True,
                                       stop_flag=stop, ready_flag=ready, **options)
        await kopf.run_tasks(tasks, ignored=_ForeignTasks())

    task = asyncio.create_task(run())
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, exit_timeout)


async def eventually(check: Callable[[], Any], timeout: float = 8.0) -> Any:
    """Poll `check` until it returns a truthy value or None; at the deadline re-raise its last error."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            result = check()
            if result or result is None:
                return result
        except (AssertionError, KeyError, IndexError, TypeError):
            if loop.time() > deadline:
                raise
        if loop.time() > deadline:
            raise AssertionError(f"condition not met in {timeout}s")
        await asyncio.sleep(0.05)


def requests_to(k: kmock.KubernetesEmulator, method: str, path_suffix: str) -> list[Any]:
    """Bodies of the requests sent with `method` to a path ending in `path_suffix` (or equal to it)."""
    return [req.data for req in list(k)
            if req.method.value == method and str(req.url.path).endswith(path_suffix)]


def content_types(k: kmock.KubernetesEmulator, method: str, path_suffix: str) -> list[str]:
    return [req.headers.get("Content-Type", "") for req in list(k)
            if req.method.value == method and str(req.url.path).endswith(path_suffix)]


def condition(obj: Any, type_: str) -> dict[str, Any]:
    """The condition `type_` of a stored object; KeyError (retried by `eventually`) while absent."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    raise KeyError(type_)
