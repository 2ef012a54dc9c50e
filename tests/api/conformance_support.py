"""A cluster for the KEP-3698 conformance suite: kmock's emulator made close enough to an API server,
this project's components as the commands a cluster runs, and a kube-scheduler stand-in.

What kmock lacks and `ClusterEmulator` adds, each as the API server does it:
- namespaces (kmock 0.8 cannot parse `/api/v1/namespaces`): create, get, list, watch, delete;
- the CRDs' validation for PodNetwork and PodNetworkAttachment: defaulting, the openAPIV3Schema
  and the CEL rules (immutability), from the real files in crds/ (`tests.unit.crd_support`);
- the ValidatingAdmissionPolicy of crds/default-podnetwork-protection.yaml on DELETE, and dry runs
  of DELETE (`?dryRun=All`: admission runs, nothing is removed);
- admission webhooks for pod CREATE, as their configurations deploy them (the objects
  `podnetwork.kep.admission.webhook_configurations` and `bridge.operator.admission.webhook_configuration`
  build, with a URL): the rules, the namespaceSelector, the matchConditions (CEL, with cel-python),
  mutating webhooks in the order of their configurations' names with `reinvocationPolicy: IfNeeded`
  honoured, then validating ones; the AdmissionReview is POSTed over HTTPS, failurePolicy Fail, and a
  JSONPatch answer applied;
- a new pod with scheduling gates gets `PodScheduled=False`, reason `SchedulingGated` (what the API
  server sets, KEP-3521);
- `/version` says it is kmock (kmock's own answer is a canned k3s version);
- `status.conditions` of a strategic merge patch merged by type (kmock replaces the list);
- what the API server fills in on create: uid, creationTimestamp, generation 1 (bumped when a
  custom resource's spec changes), a new pod's `status.phase: Pending`.

`Scheduler` plays kube-scheduler with an extender (`nodeCacheCapable: true`): it narrows the nodes
by the pod's `nodeSelector`, POSTs the
extender v1 body to `/filter` over HTTP, binds a pod to a passing node (`spec.nodeName`) or sets
`PodScheduled=False` and posts a FailedScheduling Event; without an extender it binds every pod.
It polls the API instead of watching (a rejected pod is retried every `retry` seconds, as
kube-scheduler's backoff would). There is no kubelet: no pod ever runs.

`collect_slices` plays the garbage collector for EndpointSlices: one owned by a Service that is
gone is deleted (what removes a deleted Service's slices on a cluster).

`cluster()` starts all of it: `podnetwork controller` (with its webhook), `podnetwork bridge` and
`podnetwork scheduler-extender` as processes against the emulator, each optional, so a test can
leave one out (or put a broken stand-in in its place).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime
import importlib.metadata
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import httpx
import kmock
import yaml

from bridge import npwg
from bridge.operator import admission as bridge_admission
from demo.admission import apply_json_patch
from demo.scheduling import unschedulable_message
from podnetwork.ground import constants
from podnetwork.kep import admission
from podnetwork.kube import client as kube
from tests.api import kube_emulator
from tests.api.controller_support import free_port
from tests.unit import crd_support

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
NAD = f"{npwg.NAD_GROUP}/{npwg.NAD_VERSION}/{npwg.NAD_PLURAL}"
_NAMESPACES = re.compile(r"/api/v1/namespaces(?:/([^/]+))?")
_KEP_PATH = re.compile(rf"/apis/{re.escape(constants.GROUP)}/{constants.VERSION}(?:/namespaces/[^/]+)?/"
                       rf"({constants.PODNETWORK_PLURAL}|{constants.ATTACHMENT_PLURAL})(?:/([^/]+))?(/status)?$")
SERVICES = "v1/services"
SLICES = "discovery.k8s.io/v1/endpointslices"
_POD_CREATE = re.compile(r"/api/v1/namespaces/[^/]+/pods$")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _status_error(status: int, reason: str, message: str) -> aiohttp.web.Response:
    return aiohttp.web.json_response({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": status,
                                      "reason": reason, "message": message, "metadata": {}}, status=status)


class ClusterEmulator(kube_emulator.Emulator):
    """kube_emulator.Emulator plus namespaces, CRD validation, admission and dry-run deletes."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.namespaces: dict[str, dict[str, Any]] = {}
        self._namespace_watchers: list[asyncio.Queue[dict[str, Any]]] = []
        self.configurations: list[dict[str, Any]] = []
        """Mutating- and ValidatingWebhookConfigurations, with URL clientConfigs (`register`)."""
        self.crds = {constants.PODNETWORK_PLURAL: crd_support.crd("podnetworks.yaml"),
                     constants.ATTACHMENT_PLURAL: crd_support.crd("podnetworkattachments.yaml")}
        (self.policy, _) = crd_support.load_yaml_documents(ROOT / "crds" / "default-podnetwork-protection.yaml")
        self.admission_calls = 0
        self.crd_validation = True
        """False: CRDs installed without their schema and CEL rules (a broken installation)."""

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.path == "/version":
            # kmock answers a canned k3s version; a report must not claim a Kubernetes it never ran on.
            return aiohttp.web.json_response({"major": "", "minor": "", "platform": "",
                                              "gitVersion": f"kmock-{importlib.metadata.version('kmock')}"})
        found = _NAMESPACES.fullmatch(raw_request.path)
        if found:
            return await self._namespaces(raw_request, found.group(1))
        return await super().__call__(raw_request)  # type: ignore[no-any-return]

    async def _namespaces(self, raw: aiohttp.web.BaseRequest, name: str | None) -> aiohttp.web.StreamResponse:
        if raw.method == "POST" and name is None:
            body = await raw.json()
            meta = body.setdefault("metadata", {})
            if meta.get("name") in self.namespaces:
                return _status_error(409, "AlreadyExists", f'namespaces "{meta.get("name")}" already exists')
            self._revision += 1
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), resourceVersion=str(self._revision))
            body["status"] = {"phase": "Active"}
            self.namespaces[str(meta["name"])] = body
            self._namespace_event("ADDED", body)
            return aiohttp.web.json_response(body, status=201)
        if raw.method == "GET" and name is None:
            if raw.query.get("watch") in ("true", "1"):
                return await self._watch_namespaces(raw)
            return aiohttp.web.json_response({"apiVersion": "v1", "kind": "NamespaceList",
                                              "metadata": {"resourceVersion": str(self._revision)},
                                              "items": list(self.namespaces.values())})
        if name is not None and name in self.namespaces and raw.method == "GET":
            return aiohttp.web.json_response(self.namespaces[name])
        if name is not None and name in self.namespaces and raw.method == "DELETE":
            gone = self.namespaces.pop(name)
            self._namespace_event("DELETED", gone)
            return aiohttp.web.json_response(gone)
        return _status_error(404, "NotFound", f'namespaces "{name}" not found')

    def _namespace_event(self, kind: str, obj: dict[str, Any]) -> None:
        for queue in self._namespace_watchers:
            queue.put_nowait({"type": kind, "object": obj})

    async def _watch_namespaces(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Namespace events from now on, one JSON object a line, until `timeoutSeconds`."""
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._namespace_watchers.append(queue)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(raw.query.get("timeoutSeconds") or 300)
        try:
            while (left := deadline - loop.time()) > 0:
                try:
                    event = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    break
                await response.write(json.dumps(event).encode() + b"\n")
        finally:
            self._namespace_watchers.remove(queue)
        await response.write_eof()
        return response

    def stored(self, request: Any) -> dict[str, Any] | None:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return json.loads(json.dumps(self.objects[key].raw))  # type: ignore[no-any-return]

    async def _handle(self, request: Any) -> Any:
        path, method = str(request.url.path), request.method.value
        kep = _KEP_PATH.search(path)
        if (kep and method in ("POST", "PATCH") and not kep.group(3) and isinstance(request.data, dict)
                and self.crd_validation):
            self._validate(request, kep.group(1))
        if kep and method == "DELETE":
            answer = self._delete_admission(request, kep.group(1))
            if answer is not None:
                return answer
        if (method == "PATCH" and "strategic-merge-patch" in request.headers.get("Content-Type", "")
                and isinstance(request.data, dict)):
            self._merge_conditions_by_type(request)
        if method == "POST" and isinstance(request.data, dict) and request.resource is not None:
            meta = request.data.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            if kep:
                meta["generation"] = 1
        if method == "POST" and _POD_CREATE.search(path) and isinstance(request.data, dict):
            request.data.setdefault("status", {}).setdefault("phase", "Pending")
            admitted = await self._admit_pod(copy.deepcopy(request.data))
            request.data.clear()
            request.data.update(admitted)
        return await super()._handle(request)

    def _merge_conditions_by_type(self, request: Any) -> None:
        """`status.conditions` of a strategic merge patch merged by `type`, as their patchMergeKey says;
        kmock treats every patch as a merge patch, which replaces the list (and a node its Ready)."""
        sent = (request.data.get("status") or {}).get("conditions")
        old = self.stored(request)
        if not isinstance(sent, list) or old is None:
            return
        kept = [c for c in (old.get("status") or {}).get("conditions") or []
                if c.get("type") not in {s.get("type") for s in sent if isinstance(s, dict)}]
        request.data["status"]["conditions"] = [*kept, *sent]

    def _validate(self, request: Any, plural: str) -> None:
        crd = self.crds[plural]
        old = self.stored(request) if request.method.value == "PATCH" else None
        new = merge_patch(old, request.data) if old is not None else dict(request.data)
        errors = crd_support.schema_errors(crd, new) + crd_support.cel_errors(crd, new, old)
        if errors:
            kind = constants.PODNETWORK_KIND if plural == constants.PODNETWORK_PLURAL else constants.ATTACHMENT_KIND
            raise kmock.KubernetesError(status=422, reason="Invalid",
                                        message=f'{kind} "{new.get("metadata", {}).get("name")}" is invalid: '
                                                + "; ".join(errors))
        if old is None:
            defaulted = crd_support.defaulted(crd, new)
            request.data.clear()
            request.data.update(defaulted)
        elif new.get("spec") != old.get("spec"):
            request.data.setdefault("metadata", {})["generation"] = int(
                (old.get("metadata") or {}).get("generation") or 1) + 1

    def _delete_admission(self, request: Any, plural: str) -> Any:
        old = self.stored(request)
        if old is None:
            return None
        errors = crd_support.vap_errors(self.policy, {
            "operation": "DELETE", "oldObject": old, "object": None,
            "resource": {"group": constants.GROUP, "version": constants.VERSION, "resource": plural}})
        if errors:
            raise kmock.KubernetesError(status=403, reason="Forbidden", message="; ".join(errors))
        if request.params.get("dryRun") == "All":
            return aiohttp.web.json_response(old)
        return None

    def register(self, *configurations: dict[str, Any]) -> None:
        """Admission webhook configurations (as `kubectl apply` would register them)."""
        self.configurations.extend(configurations)

    def _webhooks(self, kind: str, pod: dict[str, Any]) -> list[dict[str, Any]]:
        """The webhooks of `kind` configurations that a pod CREATE reaches, in the API server's order
        (configurations sorted by name)."""
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        labels = {**((self.namespaces.get(namespace) or {}).get("metadata", {}).get("labels") or {}),
                  "kubernetes.io/metadata.name": namespace}
        found = []
        for config in sorted(self.configurations, key=lambda c: c["metadata"]["name"]):
            if config["kind"] != kind:
                continue
            for hook in config["webhooks"]:
                if not any("CREATE" in r["operations"] and "pods" in r["resources"] for r in hook["rules"]):
                    continue
                if not all(_selects(e, labels) for e in hook["namespaceSelector"].get("matchExpressions", [])):
                    continue
                activation = {"request": {"operation": "CREATE"}, "object": pod,
                              "oldObject": None}
                if all(bool(crd_support.cel(c["expression"], activation)) for c in hook.get("matchConditions", [])):
                    found.append(hook)
        return found

    async def _admit_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        async with httpx.AsyncClient(verify=False, timeout=10) as client:  # the webhooks' self-signed certificates
            mutating = self._webhooks("MutatingWebhookConfiguration", pod)
            changed_after: dict[str, bool] = {}
            for hook in mutating:
                before = json.dumps(pod, sort_keys=True)
                pod = await self._review(client, hook["clientConfig"]["url"], pod, mutate=True)
                changed_after = {name: changed or json.dumps(pod, sort_keys=True) != before
                                 for name, changed in changed_after.items()}
                changed_after[hook["name"]] = False
            # reinvocationPolicy IfNeeded: called once more when a later webhook changed the pod.
            for hook in mutating:
                if hook.get("reinvocationPolicy") == "IfNeeded" and changed_after.get(hook["name"]):
                    pod = await self._review(client, hook["clientConfig"]["url"], pod, mutate=True)
            for hook in self._webhooks("ValidatingWebhookConfiguration", pod):
                await self._review(client, hook["clientConfig"]["url"], pod, mutate=False)
        if (pod.get("spec") or {}).get("schedulingGates"):
            pod.setdefault("status", {}).setdefault("conditions", []).append({
                "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates", "lastTransitionTime": _now()})
        return pod

    async def _review(self, client: httpx.AsyncClient, url: str, pod: dict[str, Any], *,
                      mutate: bool) -> dict[str, Any]:
        meta = pod.get("metadata") or {}
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta.get("name"), "namespace": meta.get("namespace"), "operation": "CREATE",
            "userInfo": {"username": "conformance-suite", "groups": ["system:authenticated"]},
            "object": pod, "oldObject": None, "dryRun": False}}
        self.admission_calls += 1
        try:
            answer = (await client.post(url, json=review)).raise_for_status().json()["response"]
        except (httpx.HTTPError, KeyError, ValueError) as exc:  # failurePolicy: Fail
            raise kmock.KubernetesError(status=500, reason="InternalError",
                                        message=f'failed calling webhook "{url}": {exc}') from None
        if not answer.get("allowed"):
            status = answer.get("status") or {}
            raise kmock.KubernetesError(status=int(status.get("code") or 403), reason="Forbidden",
                                        message=f'admission webhook "{url}" denied the request: '
                                                f'{status.get("message", "")}')
        if mutate and answer.get("patchType") == "JSONPatch":
            patched: dict[str, Any] = apply_json_patch(pod, json.loads(base64.b64decode(answer["patch"])))
            return patched
        return pod


def _selects(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    """One matchExpression of a label selector against a namespace's labels."""
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"unknown selector operator {operator!r}")


def declare_resources(k: kmock.KubernetesEmulator) -> None:
    """The KEP kinds, pods, nodes (creatable here: the test adds them), events and NADs."""
    kube_emulator.declare_resources(k)
    verbs = set(kube_emulator.ALL_VERBS)
    k.resources[kube_emulator.NODES] = kmock.ResourceInfo(kind="Node", namespaced=False, subresources={"status"},
                                                          verbs=verbs)
    k.resources[kube_emulator.EVENTS] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs=verbs)
    k.resources[NAD] = kmock.ResourceInfo(kind=npwg.NAD_KIND, namespaced=True, verbs=verbs)
    k.resources[SERVICES] = kmock.ResourceInfo(kind="Service", namespaced=True, verbs=verbs)
    k.resources[SLICES] = kmock.ResourceInfo(kind="EndpointSlice", namespaced=True, verbs=verbs)


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name}}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
             "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}}


# --- kube-scheduler --------------------------------------------------------------------------------


@dataclass
class Scheduler:
    """kube-scheduler's part: bind pods, asking the extender's /filter first when there is one."""

    api: kube.AsyncApi
    extender_url: str | None
    name: str = "default-scheduler"
    """The pods it binds: those whose spec.schedulerName is this (the API server's default)."""
    poll: float = 0.2
    retry: float = 1.0
    _tried: dict[str, tuple[str, float]] = field(default_factory=dict)
    """pod -> (resourceVersion, when) of its last rejected attempt."""
    _said: dict[str, str] = field(default_factory=dict)
    """pod -> the last FailedScheduling message posted."""

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            while True:
                try:
                    await self.once(http)
                except kube.NotFound:
                    pass  # a pod deleted while it was being scheduled
                except kube.ApiError as exc:
                    log.warning("scheduler stand-in: %s", exc)
                except httpx.HTTPError as exc:
                    # As kube-scheduler: an extender call that fails (here, a kept-alive connection
                    # the extender closed as it was reused) fails this attempt; the pod is tried again.
                    log.warning("scheduler stand-in: POST %s/filter: %s: %s", self.extender_url,
                                type(exc).__name__, exc)
                await asyncio.sleep(self.poll)

    async def once(self, http: httpx.AsyncClient) -> None:
        pods = (await self.api.list(kube.Pod)).items
        nodes = (await self.api.list(kube.Node)).items
        loop = asyncio.get_running_loop()
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if spec.get("nodeName") or meta.get("deletionTimestamp") or spec.get("schedulingGates"):
                continue
            if (spec.get("schedulerName") or "default-scheduler") != self.name:
                continue
            key = f"{meta['namespace']}/{meta['name']}"
            last = self._tried.get(key)
            if last and last[0] == meta.get("resourceVersion") and loop.time() - last[1] < self.retry:
                continue
            await self.schedule(http, pod, nodes)

    async def schedule(self, http: httpx.AsyncClient, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
        meta = pod["metadata"]
        name, ns = meta["name"], meta["namespace"]
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        # kube-scheduler's own filter first (nodeSelector), then the extender's.
        candidates = [n["metadata"]["name"] for n in nodes
                      if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())]
        passed, failed, error = list(candidates), {}, ""
        if self.extender_url and candidates:
            reply = (await http.post(f"{self.extender_url}/filter",
                                     json={"Pod": pod, "Nodes": None, "NodeNames": candidates})).json()
            passed = list(reply.get("NodeNames") or [])
            failed = {**(reply.get("FailedNodes") or {}), **(reply.get("FailedAndUnresolvableNodes") or {})}
            error = str(reply.get("Error") or "")
        if passed and not error:
            self._tried.pop(f"{ns}/{name}", None)
            await self.api.patch(kube.Pod, name, {"spec": {"nodeName": sorted(passed)[0]}}, namespace=ns)
            await self._condition(name, ns, {"type": "PodScheduled", "status": "True"})
            return
        message = (f"extender error: {error}" if error
                   else unschedulable_message(len(nodes), len(nodes) - len(candidates), failed))
        self._tried[f"{ns}/{name}"] = (str(meta.get("resourceVersion")), asyncio.get_running_loop().time())
        await self._condition(name, ns, {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                         "message": message})
        if self._said.get(f"{ns}/{name}") != message:
            self._said[f"{ns}/{name}"] = message
            await self.api.create(kube.Event, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{name}.{uuid.uuid4().hex[:12]}", "namespace": ns},
                "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": name, "namespace": ns,
                                   "uid": meta.get("uid")},
                "reason": "FailedScheduling", "message": message, "type": "Warning",
                "source": {"component": "default-scheduler"}, "firstTimestamp": _now(), "lastTimestamp": _now(),
                "count": 1})

    async def _condition(self, name: str, ns: str, cond: dict[str, Any]) -> None:
        cond = {**cond, "lastTransitionTime": _now()}
        current = await self.api.get(kube.Pod, name, ns)
        others = [c for c in (current.get("status") or {}).get("conditions") or [] if c.get("type") != cond["type"]]
        await self.api.patch(kube.Pod, name, {"status": {"conditions": [*others, cond]}}, namespace=ns, status=True)


# --- the garbage collector ------------------------------------------------------------------------


async def collect_slices(api: kube.AsyncApi, poll: float = 0.2) -> None:
    """kube-controller-manager's garbage collector, for EndpointSlices only: one whose
    ownerReferences name a Service that is gone (or another of that name, a new uid) is deleted.
    Runs until cancelled."""
    while True:
        try:
            for piece in (await api.list(kube.EndpointSlice)).items:
                meta = piece["metadata"]
                owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Service"]
                for owner in owners:
                    try:
                        alive = (await api.get(kube.Service, owner["name"], meta["namespace"]))["metadata"]["uid"]
                    except kube.NotFound:
                        alive = None
                    if alive != owner.get("uid"):
                        with contextlib.suppress(kube.NotFound):
                            await api.delete(kube.EndpointSlice, meta["name"], meta["namespace"])
                        break
        except kube.ApiError as exc:
            log.warning("garbage collector stand-in: %s", exc)
        await asyncio.sleep(poll)


# --- the components, as processes -----------------------------------------------------------------


@dataclass
class Cluster:
    emulator: ClusterEmulator
    kubeconfig: Path
    logs: Path
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)

    def log_of(self, component: str) -> str:
        path = self.logs / f"{component}.log"
        return path.read_text() if path.exists() else ""


async def _start(cluster: Cluster, component: str, *argv: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with (cluster.logs / f"{component}.log").open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podnetwork", *argv, "--kubeconfig", str(cluster.kubeconfig),
            stdout=out, stderr=asyncio.subprocess.STDOUT, env=env, cwd=str(ROOT))
    cluster.processes[component] = proc
    return proc


async def _until(what: str, check: Callable[[], Any], proc: asyncio.subprocess.Process, cluster: Cluster,
                 component: str, timeout: float = 60) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if proc.returncode is not None:
            raise AssertionError(f"{component} exited ({proc.returncode}) before {what}:\n{cluster.log_of(component)}")
        with contextlib.suppress(httpx.HTTPError, OSError, kube.ApiError):
            if await check():
                return
        if loop.time() > deadline:
            raise AssertionError(f"{component}: {what} did not happen in {timeout}s:\n{cluster.log_of(component)}")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def cluster(workdir: Path, *, controller: bool = True, extender: bool = True, bridge: bool = True,
                  scheduler: bool = True, scheduler_name: str = "default-scheduler", crd_validation: bool = True,
                  nodes: tuple[str, ...] = ("node-a", "node-b")) -> AsyncIterator[Cluster]:
    """The emulator on loopback with our components started against it; everything stopped on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    emulator = ClusterEmulator()
    emulator.crd_validation = crd_validation
    declare_resources(emulator)
    async with emulator, kmock.Server(emulator):
        server = str(emulator.url).rstrip("/")
        the = Cluster(emulator, kube_emulator.write_kubeconfig(workdir / "kubeconfig", server), workdir)
        api = kube_emulator.api(emulator)
        tasks: list[asyncio.Task[None]] = []
        try:
            for name in nodes:
                await api.create(kube.Node, node(name))
            extender_url = None
            if extender:
                port = free_port()
                proc = await _start(the, "extender", "scheduler-extender", "--host", "127.0.0.1", "--port", str(port),
                                    "--watch-timeout", "5")
                extender_url = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(timeout=5) as http:
                    async def ready() -> bool:
                        return (await http.get(f"{extender_url}/readyz")).status_code == 200
                    await _until("/readyz answered 200", ready, proc, the, "extender")
            if controller:
                port = free_port()
                proc = await _start(the, "controller", "controller", "--webhook-host", "127.0.0.1",
                                    "--webhook-port", str(port), "--resync-interval", "30")
                emulator.register(*admission.webhook_configurations({"url": f"https://127.0.0.1:{port}"}))

                async def default_exists() -> bool:
                    return bool(await api.get(kube.PodNetwork, constants.DEFAULT_PODNETWORK))

                await _until("the default PodNetwork was created", default_exists, proc, the, "controller")
                async with httpx.AsyncClient(verify=False, timeout=5) as http:
                    async def serving() -> bool:
                        await http.get(f"https://127.0.0.1:{port}/healthz")
                        return True
                    await _until("its webhook listened", serving, proc, the, "controller")
            if bridge:
                # With its webhook, as deploy/bridge runs it: pods naming a network that is not Ready
                # (or does not exist) are held behind its scheduling gate.
                port = free_port()
                proc = await _start(the, "bridge", "bridge", "--webhook", "--webhook-host", "127.0.0.1",
                                    "--webhook-port", str(port))
                emulator.register(bridge_admission.webhook_configuration({"url": f"https://127.0.0.1:{port}"}))
                async with httpx.AsyncClient(verify=False, timeout=5) as http:
                    async def bridge_serving() -> bool:
                        await http.get(f"https://127.0.0.1:{port}/healthz")
                        return True
                    await _until("its webhook listened", bridge_serving, proc, the, "bridge")
            if scheduler:
                tasks.append(asyncio.create_task(Scheduler(api, extender_url, scheduler_name).run()))
            tasks.append(asyncio.create_task(collect_slices(api)))
            yield the
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for proc in the.processes.values():
                if proc.returncode is None:
                    proc.terminate()
            for proc in the.processes.values():
                try:
                    await asyncio.wait_for(proc.wait(), 20)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            await api.close()


async def conformance(the: Cluster, *argv: str, timeout: float = 600) -> tuple[int, str]:
    """`podnetwork conformance ARGV` against the cluster, as a process: (exit status, its output)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podnetwork", "conformance", "--kubeconfig", str(the.kubeconfig), *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, cwd=str(ROOT))
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def load_report(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def outcomes(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """test name -> (outcome, message or reason)."""
    found: dict[str, tuple[str, str]] = {}
    for profile in report["profiles"]:
        tests = profile["tests"]
        found.update({name: ("passed", "") for name in tests["passed"]})
        found.update({t["name"]: ("failed", t["message"]) for t in tests["failed"]})
        found.update({t["name"]: ("skipped", t["reason"]) for t in tests["skipped"]})
    return found


async def ready_without_finalizers(api: kube.AsyncApi, poll: float = 0.2) -> None:
    """A broken PodNetwork controller: every PodNetwork is made Ready (enabled or not) and no
    finalizer is ever set. Runs until cancelled; closes `api` then."""
    try:
        while True:
            for pn in (await api.list(kube.PodNetwork)).items:
                conditions = (pn.get("status") or {}).get("conditions") or []
                if not any(c.get("type") == constants.ConditionType.READY for c in conditions):
                    await api.patch(kube.PodNetwork, pn["metadata"]["name"], {"status": {"conditions": [
                        *conditions, {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                                      "lastTransitionTime": _now()}]}}, status=True)
            await asyncio.sleep(poll)
    finally:
        await api.close()


#: The report `make conformance-report` writes (docs/conformance.md).
def report_path(version: str) -> Path:
    return ROOT / "docs" / "conformance" / f"podnetwork-{version}-report.yaml"


async def _publish(path: Path, version: str, workdir: Path) -> int:
    async with cluster(workdir) as the:
        code, out = await conformance(
            the, "--profile", "extended", "--report", str(path), "--mode", "kmock-emulator",
            "--implementation-name", "podnetwork", "--implementation-version", version,
            "--implementation-url", "unpublished prototype (this repository)",
            "--implementation-contact", "podnetwork maintainers")
    sys.stdout.write(out)
    return code


if __name__ == "__main__":
    # `make conformance-report`: the suite against our components on the emulator, report in docs/.
    import tempfile

    release = importlib.metadata.version("podnetwork")
    with tempfile.TemporaryDirectory(prefix="kep-conformance-") as tmp:
        sys.exit(asyncio.run(_publish(report_path(release), release, Path(tmp))))
