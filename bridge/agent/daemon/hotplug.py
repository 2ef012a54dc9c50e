"""Hot-plug: networks added to or removed from a running pod (KEP Story #8, Phase IV requirement 24).

A user changes a running pod's `multinetwork.x-k8s.io/networks` (admission checks the
change, `podnetwork.kep.admission.network_change_errors`); the bridge rewrites the NPWG
selection. The agent of the pod's node watches its own pods (field selector
`spec.nodeName`), and for a pod whose networks changed:

1. finds the pod's containers in its cache (`bridge.agent.delegates.cache`: the netns, the
   runtime's CNI_ARGS, every attachment with the configuration it ran with);
2. translates the pod's networks as an ADD does (`planner.Planner.selection`: the KEP networks
   through `bridge.translate`, else the NPWG selection), and for KEP networks waits
   until the bridge's NPWG selection agrees (`settled`: every network Ready);
   the attachment on the pod's CNI_IFNAME (the cluster default network, or the first
   network of the KEP's explicit list) is never removed or replaced;
3. decides, purely (`decide`), which selected networks are not attached yet and which
   attachments are no longer selected. An attachment is the NPWG 4.2.1 tuple
   [container ID, network, CNI_IFNAME]: a kept network keeps its interface, an added
   one gets the name it asks for or the next free `netN`. A changed NAD is not a
   change of the pod's networks: attachments are never re-plugged for it;
4. under the container's lock (the one CNI ADD, DEL and CHECK take), attaches the added
   networks in the pod's existing namespace, then detaches the removed ones, recording
   each attachment before its delegate runs, as an ADD does;
5. writes network-status through the agent's one status writer, and an Event.

A failed attach is rolled back (every delegate ADD of this change is DEL'd) and the
pod stays as it was: same interfaces, same record, same network-status; a Warning
Event says why. A failed detach keeps the attachment in the record, so the pod's
CNI DEL retries it, and says so in an Event. Attaching first means a detach never
happens for a change whose attach failed. A failed change is not retried by itself:
change the annotation again (docs/hotplug.md).

The watch is the only source of changes: `watch_node_pods` (the API, through
`podnetwork.kube.client`) on a node, `demo.hotplug` in the demo. Pods are
handled one at a time, in the order their changes arrived, by one worker task.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from bridge import npwg
from bridge.agent.cni import plan
from bridge.agent.daemon.agent import Agent
from bridge.agent.delegates.cache import Attachment, Record
from bridge.agent.delegates.invoke import CNIError, Command, RuntimeArgs, check_ifname
from bridge.agent.delegates.records import unfinished
from bridge.agent.kube.objects import EventSink
from bridge.agent.node.settings import EVENT_COMPONENT
from bridge.dracontract import podclaims
from podnetwork.ground import constants
from podnetwork.ground.core import Pod, head_of, pod_event
from podnetwork.kube import lite

log = logging.getLogger(__name__)

#: The component hot-plug Events carry.
COMPONENT = EVENT_COMPONENT
#: Event reasons: the change was made / it failed and the pod was left as it was.
REASON_CHANGED = "NetworksChanged"
REASON_FAILED = "NetworksChangeFailed"
#: The pod's networks as users write them; without it, the NPWG selection (as for ADD).
WATCHED_ANNOTATIONS = (constants.NETWORKS_ANNOTATION, npwg.NETWORKS_ANNOTATION)
DOC = "docs/hotplug.md"


# --- the decision (pure) -----------------------------------------------------------------------


class Refused(ValueError):
    """The pod's new selection cannot be applied to its running attachments; the message says why."""


@dataclass(frozen=True)
class Add:
    element: npwg.NetworkSelectionElement
    ifname: str
    podnetwork: str | None = None
    """The PodNetwork it attaches (KEP networks), for node access."""


@dataclass(frozen=True)
class Change:
    """What to do to one container: attach `add` (in order), then detach `remove`."""

    add: tuple[Add, ...] = ()
    remove: tuple[Attachment, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.add or self.remove)

    def describe(self) -> str:
        parts = [f"attach {a.element.ref} as {a.ifname}" for a in self.add]
        parts += [f"detach {r.name} ({r.ifname})" for r in self.remove]
        return "; ".join(parts) or "nothing to do"


def keep_primary(record: Record, wanted: Sequence[npwg.NetworkSelectionElement], *,
                 explicit: bool) -> None:
    """Raises `Refused` when `wanted` would remove or replace the attachment on the pod's runtime
    interface (KEP Story #8; see `decide`)."""
    primary = next((a for a in record.attachments if a.default), None)
    if explicit and not record.explicit:
        raise Refused(
            "the pod's networks no longer list the default PodNetwork, but the cluster default network "
            f"holds the pod's {record.ifname} and cannot be removed from a running pod; keep "
            f"{{\"podNetworkName\": \"default\"}} in its networks ({DOC})"
        )
    if record.explicit and not explicit:
        raise Refused(
            "the cluster default network cannot be added to a running pod that was started without it "
            f"(its networks list is explicit); remove the default PodNetwork from its networks ({DOC})"
        )
    if explicit:
        holder = primary.name if primary is not None else "its first network"
        if not wanted or wanted[0].ref != holder:
            first = wanted[0].ref if wanted else "nothing"
            raise Refused(
                f"{holder} holds the pod's {record.ifname} (the first of its networks) and cannot be removed "
                f"or replaced on a running pod (KEP Story #8), but its networks now start with {first}; keep "
                f"it as the first entry ({DOC})"
            )


def decide(record: Record, wanted: Sequence[npwg.NetworkSelectionElement], *,
           explicit: bool = False) -> Change:
    """The attachments to add and remove so that `record` carries the selection `wanted`.

    `wanted` is the pod's selected networks as an ADD would attach them, `explicit` whether
    they are all the pod gets (`selection.Selected`: its KEP networks leave out `default`,
    and `wanted[0]` is on the runtime's interface). The attachment on the runtime's
    interface (the cluster default network, or the first network of an explicit list) is
    never touched. Each other attachment of the record is matched with at most one
    element: one naming its interface, or else one of the same network that names none
    (duplicates, NPWG 4.2, match in order). Unmatched elements are added; unmatched
    attachments removed.

    Raises `Refused` when the change would touch the attachment on the runtime's interface
    (KEP Story #8: hot-plug is "not applicable for the Primary PodNetwork"): the first
    network of an explicit list removed or replaced, the cluster default network removed
    (the list became explicit) or added (it stopped being); or when an added element
    cannot be attached to a running pod: it asks for the default route (4.1.2.1.9:
    moving a running pod's default route would cut its connections), or for an interface
    name already in the pod.
    """
    keep_primary(record, wanted, explicit=explicit)
    offset = 1 if explicit else 0  # the first element of an explicit list is the primary's
    wanted = wanted[offset:]
    current = [a for a in record.attachments if not a.default]
    matched: dict[int, Attachment] = {}
    free = list(current)
    for named in (True, False):
        for i, element in enumerate(wanted):
            if i in matched or (element.interface is not None) != named:
                continue
            fits = [a for a in free if a.name == element.ref]
            found = next((a for a in fits if not named or a.ifname == element.interface), None)
            if found is not None:
                matched[i] = found
                free.remove(found)
    added = [(i + offset, e) for i, e in enumerate(wanted) if i not in matched]
    taken = {record.ifname, *(a.ifname for a in record.attachments)}
    for i, element in added:
        if element.default_route is not None:
            raise Refused(
                f"selection element {i} ({element.ref}) asks for the pod's default route, which a network "
                f"added to a running pod cannot take; remove default-route (isDefaultGW4/6) from it ({DOC})"
            )
        if element.interface is None:
            continue
        try:
            check_ifname(element.interface)
        except CNIError as exc:
            raise Refused(f"selection element {i} ({element.ref}): {exc}") from None
        if element.interface in taken:
            holder = next((a.name for a in record.attachments if a.ifname == element.interface), "the pod")
            raise Refused(
                f"selection element {i} ({element.ref}) asks for interface {element.interface!r}, which "
                f"{holder} already uses in the pod (NPWG 4.1.2.1.5); pick another name, or remove that "
                f"network in one change and add this one in the next ({DOC})"
            )
        taken.add(element.interface)
    adds: list[Add] = []
    counter = 0
    for _, element in added:
        ifname = element.interface
        if ifname is None:
            counter += 1
            while f"{plan.GENERATED_PREFIX}{counter}" in taken:
                counter += 1
            ifname = f"{plan.GENERATED_PREFIX}{counter}"
            taken.add(ifname)
        adds.append(Add(element, ifname))
    return Change(tuple(adds), tuple(free))


def networks_of(pod: Pod) -> tuple[str | None, ...]:
    """What hot-plug watches on a pod: its networks annotations (KEP and NPWG)."""
    return tuple(pod.metadata.annotation(key) for key in WATCHED_ANNOTATIONS)


def check_selection(pod: Pod) -> None:
    """Raises `Refused` when a pod selecting by the NPWG annotation alone has one that cannot be
    read: an ADD ignores it (NPWG 4.1.2.1: "invalid and ignored"), but for a running pod that
    would read as "no secondary network" and detach them all."""
    text = pod.metadata.annotation(npwg.NETWORKS_ANNOTATION)
    if pod.metadata.annotation(constants.NETWORKS_ANNOTATION) is not None or not text:
        return
    try:
        npwg.parse_selection(text, pod.metadata.namespace or "default")
    except npwg.InvalidSelection as exc:
        raise Refused(f"{npwg.NETWORKS_ANNOTATION} is invalid: {exc}; fix it ({DOC})") from None


def settled(pod: Pod, wanted: Sequence[npwg.NetworkSelectionElement]) -> bool:
    """Whether the agent may bring the pod to `wanted`, its networks as an ADD reads them.

    For a pod with KEP networks, only once the bridge's NPWG selection agrees with
    their translation: the bridge writes it once every network is Ready (a network
    disabled or without parameters is never attached to a running pod), and the
    selection changing is the pod event that brings the agent back. A pod selecting
    by the NPWG annotation alone has nothing to wait for.
    """
    if pod.metadata.annotation(constants.NETWORKS_ANNOTATION) is None:
        return True
    text = pod.metadata.annotation(npwg.NETWORKS_ANNOTATION)
    if not text:
        return not wanted
    try:
        return npwg.parse_selection(text, pod.metadata.namespace or "default") == list(wanted)
    except npwg.InvalidSelection:
        return False


def belongs_to(record: Record, pod: Pod) -> bool:
    """The record is one of this pod's containers: same namespace and name, and the same
    UID when the record has one (the runtime's K8S_POD_UID, else the pod's read at ADD), so a
    re-created pod of the same name is not taken for the old one."""
    meta = pod.metadata
    if (record.pod_namespace, record.pod_name) != (meta.namespace or "default", meta.name or ""):
        return False
    uid = record.pod_uid or next((v for k, v in record.cni_args if k == "K8S_POD_UID"), "")
    return not uid or not meta.uid or uid == meta.uid


def event(pod: Pod, reason: str, message: str, *, type_: str, now: str, node: str) -> dict[str, Any]:
    """A core/v1 Event about the pod, from the node's agent (one per change: `now` is in its name)."""
    meta = pod.metadata
    key = hashlib.sha256(f"{meta.uid}/{reason}/{message}/{now}".encode()).hexdigest()[:16]
    return pod_event(pod, reason, message, key=key, type_=type_, now=now, component=COMPONENT, node=node)


# --- the edge ---------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Outcome:
    """What one pod's change did, for logs, Events and tests."""

    container_id: str
    change: Change = field(default_factory=Change)
    error: str | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)
    """(reason, message, type) of the Events to post about it."""


class HotPlug:
    """Follows the networks of the pods of one node's agent.

    Feed it pods (`pod_changed`, from a watch callback: it only queues) and run it
    (`start`/`stop`); `handle` does one pod now (tests, the demo).
    """

    def __init__(self, agent: Agent, events: EventSink, node: str, *, now: Callable[[], str] = _now) -> None:
        self.agent = agent
        self.events = events
        self.node = node
        self._now = now
        self._seen: dict[tuple[str, str], tuple[str | None, ...]] = {}
        """Per pod, the networks annotations its containers were last brought to: an event
        that changes neither (the pod's status, our own network-status) costs nothing."""
        self._pending: dict[tuple[str, str], Mapping[str, Any] | Pod] = {}
        """Pods to handle, as given: a listing's objects are read into a `Pod` view one at a time
        by the worker, so that a node's listing is not held twice (its objects and their views,
        each view larger than its object) until the last is handled."""
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self.idle = asyncio.Event()
        """Set while nothing is queued or running (the demo and tests wait on it)."""
        self.idle.set()

    # --- feeding ---

    def pod_changed(self, body: Mapping[str, Any] | Pod) -> None:
        """A pod of this node as a watch saw it (added or modified); queued, never blocks. The
        object is queued as given (a watch's, never changed after): not changed afterwards."""
        try:
            pod = body if isinstance(body, Pod) else podclaims.Pod.model_validate(body)
        except ValueError as exc:  # pydantic's ValidationError
            log.warning("hot-plug: ignoring a pod that does not fit the Pod view: %s", exc)
            return
        meta = pod.metadata
        key = (meta.namespace or "default", meta.name or "")
        if pod.spec.node_name not in (None, self.node):
            return  # a field selector the server ignored
        if meta.deletion_timestamp or pod.status.phase in ("Succeeded", "Failed") or pod.spec.host_network:
            self._seen.pop(key, None)
            return
        if self._seen.get(key) == networks_of(pod):
            return
        self._pending[key] = body
        self.idle.clear()
        self._wake.set()

    def pod_deleted(self, body: Mapping[str, Any]) -> None:
        head = head_of(body)
        if head is None:
            return  # pod_changed ignored it too: nothing was seen of it
        self._seen.pop((head.metadata.namespace or "default", head.metadata.name or ""), None)

    # --- running ---

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.create_task(self._work(), name=f"hotplug-{self.node}")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                key = next(iter(self._pending))
                body = self._pending.pop(key)
                try:
                    # pod_changed read it into a view before: it fits
                    await self.handle(body if isinstance(body, Pod) else podclaims.Pod.model_validate(body))
                except Exception:  # one pod's trouble must not stop the others'
                    log.exception("hot-plug of pod %s/%s failed", *key)
            if not self._pending:
                self.idle.set()

    # --- one pod ---

    def _records(self, pod: Pod) -> list[Record]:
        return [record for record in self.agent.records.readable() if belongs_to(record, pod)]

    async def handle(self, pod: Pod) -> list[Outcome]:
        """Bring each of the pod's attached containers to its current networks."""
        meta = pod.metadata
        key = (meta.namespace or "default", meta.name or "")
        records = self._records(pod)
        if not records:
            # Not attached yet (or not by this agent): the ADD reads the networks itself. Not
            # marked seen, so the agent's own network-status write after the ADD brings the
            # pod back, and a change made while the ADD ran is not missed.
            return []
        outcomes: list[Outcome] = []
        done = True
        for record in records:
            outcome = await self._handle_container(pod, record.container_id)
            if outcome is None:
                done = False
                continue
            outcomes.append(outcome)
        if done:
            self._seen[key] = networks_of(pod)
        return outcomes

    async def _handle_container(self, pod: Pod, container_id: str) -> Outcome | None:
        """One container brought to the pod's networks; None when it cannot be now (retried on
        the pod's next event). Events are posted after the container's lock is released."""
        async with self.agent.records.lock(container_id):
            outcome = await self._change_container(pod, container_id)
        for reason, message, type_ in outcome.events if outcome is not None else ():
            await self._event(pod, reason, message, type_)
        return outcome

    async def _change_container(self, pod: Pod, container_id: str) -> Outcome | None:
        agent = self.agent
        try:
            record = agent.records.load(container_id)
        except CNIError:
            return None  # its DEL deals with an unreadable record
        if record is None or not record.complete or unfinished(record):
            # An ADD or DEL is under way or failed, or a hot-plug was cut short and its roll-back
            # failed: that settles the container first.
            return None
        if not os.path.exists(record.netns):
            log.info("hot-plug: container %s: its netns %s is gone; its DEL will come", container_id,
                     record.netns)
            return Outcome(container_id)
        outcome = Outcome(container_id)
        try:
            check_selection(pod)
            wanted = await agent.planner.selection(pod)
            if not settled(pod, wanted.elements):
                log.info("hot-plug: pod %s/%s: waiting for the bridge's %s to agree with its networks "
                         "(every network Ready)", pod.metadata.namespace, pod.metadata.name,
                         npwg.NETWORKS_ANNOTATION)
                return None
            change = decide(record, wanted.elements, explicit=wanted.explicit)
            podnetworks = {id(e): s.pod_network
                           for e, s in zip(wanted.elements, wanted.sources, strict=False)}
            adds = tuple(replace(a, podnetwork=podnetworks.get(id(a.element))) for a in change.add)
            outcome.change = Change(adds, change.remove)
        except (Refused, CNIError) as exc:
            outcome.error = f"the pod's networks cannot be changed: {exc}"
            outcome.events.append((REASON_FAILED, f"{outcome.error}; the pod keeps its networks", "Warning"))
            return outcome
        if not outcome.change:
            return outcome
        log.info("hot-plug: pod %s/%s container %s: %s", pod.metadata.namespace, pod.metadata.name,
                 container_id, outcome.change.describe())
        try:
            async with agent.records.add_slot():  # GC forwarding must not free what this reserves
                await self._attach(record, outcome.change.add)
        except CNIError as exc:
            # str(exc) was fixed when it was raised; msg and details now carry the stage.
            outcome.error = f"{exc.msg}: {exc.details}" if exc.details else exc.msg
            outcome.events.append((
                REASON_FAILED,
                f"{outcome.error}; rolled back: the pod keeps its networks as they were (change the "
                "networks annotation again to retry)", "Warning"))
            return outcome
        problems = await agent.attachments.detach(record, outcome.change.remove, rollback=False)
        agent.records.save(record)
        if agent.enforcer is not None:
            # The table follows the interfaces now (a failure is retried by the enforcer's loop).
            await agent.enforcer.added(record, pod, fail_closed=False)
        if any(a.podnetwork for a in outcome.change.add) or any(r.podnetwork for r in outcome.change.remove):
            # A network added may want a node path, one removed may have been its last pod's.
            await agent.node_access.settle(f"hot-plug of container {container_id}")
        if agent.services is not None:
            await agent.services.added(record)  # the ClusterIPs of its networks now
        if agent.config.patch_status:
            agent.reports.republish(record)
        # The address watch follows the interfaces the record now has (Req 25 over Req 24).
        agent.reports.watch(record)
        if problems:
            outcome.error = "; ".join(problems)
            outcome.events.append((
                REASON_FAILED,
                f"{outcome.change.describe()}: detaching failed: {outcome.error}; still recorded, so the "
                "pod's CNI DEL retries it", "Warning"))
        else:
            outcome.events.append((
                REASON_CHANGED, f"{outcome.change.describe()} (container {container_id[:12]})", "Normal"))
        return outcome

    async def _attach(self, record: Record, adds: Sequence[Add]) -> None:
        """Attach every added network, or none: on a failure, DEL what this change attached."""
        agent = self.agent
        planned = []
        for add in adds:
            p = await agent.planner.selected(add.element, add.ifname, podnetwork=add.podnetwork)
            agent.planner.check(p)
            planned.append(p)
        cni_args = tuple((str(k), str(v)) for k, v in record.cni_args)
        args = RuntimeArgs(Command.ADD, record.container_id, record.netns, "", cni_args)
        before = len(record.attachments)
        try:
            await agent.attachments.attach(record, planned, args)
        except CNIError as exc:
            done = record.attachments[before:]
            problems = await agent.attachments.detach(record, list(reversed(done)), rollback=True)
            if problems:
                exc.details = f"{exc.details}; rollback also failed: {'; '.join(problems)}".lstrip("; ")
            agent.records.save(record)
            raise
        agent.records.save(record)

    async def _event(self, pod: Pod, reason: str, message: str, type_: str) -> None:
        log.log(logging.WARNING if type_ == "Warning" else logging.INFO, "pod %s/%s: %s: %s",
                pod.metadata.namespace, pod.metadata.name, reason, message)
        body = event(pod, reason, message, type_=type_, now=self._now(), node=self.node)
        try:
            await self.events.post_event(body)
        except Exception as exc:  # an Event is a report; the change itself is done or undone
            log.warning("pod %s/%s: event not posted: %s", pod.metadata.namespace, pod.metadata.name, exc)


# --- a node's pods, from the API ------------------------------------------------------------------


class KubernetesEvents:
    """`EventSink` over the API (core/v1 Events, created in the pod's namespace)."""

    def __init__(self, api: lite.LiteApi) -> None:
        self._api = api

    async def post_event(self, body: Mapping[str, Any]) -> None:
        # `body` is ours (`pod_event`): its metadata and namespace are always there.
        namespace = urllib.parse.quote(str(body["metadata"]["namespace"] or ""), safe="")
        await self._api.request("POST", f"/api/v1/namespaces/{namespace}/events", body)


async def watch_node_pods(api: lite.LiteApi, node: str, hotplug: HotPlug) -> None:
    """Feed `hotplug` the pods bound to `node` (a list+watch with field selector
    spec.nodeName=`node`), until cancelled."""

    def on_list(items: list[dict[str, Any]]) -> None:
        for item in items:
            hotplug.pod_changed(item)

    def on_event(kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            hotplug.pod_deleted(obj)
        else:
            hotplug.pod_changed(obj)

    def on_error(exc: Exception) -> None:
        log.info("hot-plug: the watch of node %s's pods ended (%s); listing them again", node, exc)

    await lite.list_and_watch(api, "/api/v1/pods", on_list=on_list, on_event=on_event, on_error=on_error,
                              params={"fieldSelector": f"spec.nodeName={node}"})


def node_api(kubeconfig: str | None, context: str | None) -> lite.LiteApi:
    """The API client hot-plug watches and posts Events with: the agent's small client
    (`podnetwork.kube.lite`), with credentials as every command finds them."""
    from podnetwork.kube import credentials

    return lite.LiteApi(credentials.resolve(kubeconfig, context), timeout=30.0)


async def follow_node(agent: Agent, api: lite.LiteApi, node: str) -> None:
    """Hot-plug for `agent` on `node` until cancelled: the pod watch feeds a `HotPlug`."""
    hot = HotPlug(agent, KubernetesEvents(api), node)
    hot.start()
    log.info("hot-plug: watching the pods of node %s", node)
    try:
        await watch_node_pods(api, node, hot)
    finally:
        await hot.stop()
        await api.close()


__all__ = [
    "Add",
    "Change",
    "EventSink",
    "HotPlug",
    "KubernetesEvents",
    "Outcome",
    "Refused",
    "belongs_to",
    "check_selection",
    "decide",
    "event",
    "follow_node",
    "keep_primary",
    "networks_of",
    "node_api",
    "settled",
    "watch_node_pods",
]
