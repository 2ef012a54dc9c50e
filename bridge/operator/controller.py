"""The bridge controller: its memory, and the applier of its plans (`bridge.operator.plans`).

- ParamsReady (`plans.params_action`) on PodNetworks whose provider is the bridge's and
  on their attachments; NetworkAttachmentDefinition and NetworkSelectionOptions
  events re-evaluate exactly the objects that name them (an in-memory index of
  references), so ParamsReady follows NAD changes and deletions.
- Before a pod is scheduled (`plans.selection`): its NPWG selection
  `k8s.v1.cni.cncf.io/networks` once every object it names is Ready, and the removal of
  the scheduling gate `multinetwork.x-k8s.io/npwg-selection` (added at pod creation by
  the bridge's webhook, `bridge.operator.admission`) in the same write, or alone when
  the bridge will write none; the Events that say why a gated pod waits, what NPWG
  cannot express, and a hand-written selection that disagrees (once each). Pods waiting
  for their networks are kept in memory and planned again when a PodNetwork,
  attachment, NAD or options object changes.
- After the agent attached it (`plans.reverse_status`): `multinetwork.x-k8s.io/pod-ips`
  and `multinetwork.x-k8s.io/attachments` from `k8s.v1.cni.cncf.io/network-status`, in one write.
- MultiNetworkPolicies (`policies`): Events on a policy that does not parse or names networks
  that do not exist, and `PolicyApplies` naming the networks it applies on; said again only
  when it changes, also when a PodNetwork or NAD it names appears or goes. Watched with
  `kopf.on.event` only (no index), so the bridge runs as before where the CRD is not
  installed, which it says once at start.

`Bridge.watches` lists its entry points; `register` wires them to kopf's handlers and the
demo calls them from its store's watches: one orchestration for both. Pods are watched
with `kopf.on.event` only, filtered on the KEP annotation: kopf's change-detecting
handlers (on.create/on.update) would store their state in an annotation of every pod.
The other kinds are remembered by `kopf.index` handlers only, which kopf runs for every
object before any event handler, and the first pod decision waits until every index
has its initial listing: it already sees every NAD.

With `--dra-claims` (`BridgeSettings.dra_driver`), a pod that admission gave DRA claims
(`pods.claims`) gets the ResourceClaimTemplates they name made in its namespace
(`pods.templates_wanted`, once per template: ResourceClaimTemplates are watched, event
handler only, so one deleted is made again at the next pod that names it), and a network
added to such a pod after creation gets an Event saying it has no claim (`pods.unclaimed`).

`register(registry, bridge)` adds the handlers to any kopf registry, so the
bridge runs alone (`podnetwork bridge`) or beside the PodNetwork controller in
one operator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from lightkube.generic_resource import create_namespaced_resource

from bridge import npwg, translate
from bridge.dracontract import claims as dra_claims
from bridge.operator import plans, pods, policies
from bridge.operator.memory import Key, Memory, key_of, read
from bridge.operator.plans import BridgeSettings, Ref
from bridge.policy import views as policy_views
from bridge.policy.world import NetworkInfo
from podnetwork.cli import handlers
from podnetwork.cli.handlers import Watch
from podnetwork.ground import constants
from podnetwork.ground import core as kube_core
from podnetwork.ground.actions import Patch
from podnetwork.kep import conditions
from podnetwork.kube import client as kube
from podnetwork.kube import writes

logger = logging.getLogger(__name__)

#: What the bridge reports when it applied an action (`Bridge.report`), with the object's `ns/name`.
Applied = (plans.Release | plans.WriteSelection | plans.PostEvent | plans.ReverseStatus | plans.WriteParams
           | policies.PostPolicyEvent)

#: The templates of the claims admission makes (`--dra-claims`), resource.k8s.io/v1.
RESOURCE_CLAIM_TEMPLATE = create_namespaced_resource("resource.k8s.io", "v1", dra_claims.TEMPLATE_KIND,
                                                     "resourceclaimtemplates")
TEMPLATES_PLURAL = "resourceclaimtemplates"

#: Where MultiNetworkPolicy would be served, were its CRD installed (API discovery).
POLICY_DISCOVERY = f"/apis/{constants.POLICY_GROUP}/{constants.POLICY_VERSION}"


@dataclass
class Bridge(Memory):
    """The bridge's memory (`Memory`: the objects translations read; the pods waiting) and its applier."""

    config: BridgeSettings = field(default_factory=BridgeSettings)
    waiting: dict[Key, kube_core.Pod] = field(default_factory=dict)
    """Pods whose selection waits for objects to exist or turn Ready, by (namespace, name)."""
    posted: dict[Key, set[str]] = field(default_factory=dict)
    """Per pod, the names of the Events already posted (each cause is reported once); forgotten
    with the pod."""
    reverse_written: dict[Key, plans.Digests] = field(default_factory=dict)
    """Per pod, digests of the network-status the bridge last wrote the reverse status from and
    of what it wrote: a copy of the pod older than that write (a watch replaying kopf's listing, a
    reconnect) then writes nothing again. The next change of the status decides anew."""
    locks: dict[Any, asyncio.Lock] = field(default_factory=dict)
    api: writes.Api | None = None
    """The bridge's own API client (`podnetwork.kube`), from the credentials kopf logs in with;
    in the demo, its store (`demo.storeapi`)."""
    background: set[asyncio.Task[None]] = field(default_factory=set)
    """Tasks started by the startup handler (kept referenced until the operator stops)."""
    known_policies: dict[Key, policies.Seen] = field(default_factory=dict)
    """MultiNetworkPolicies by (namespace, name), as last seen (parsed, or why not)."""
    said: dict[Key, policies.Said] = field(default_factory=dict)
    """Per policy, what the bridge last said about it (its Events are posted only on change)."""
    policy_networks: frozenset[NetworkInfo] | None = None
    """The networks the policies were last judged against: a PodNetwork or NAD event that changes
    none of them judges nothing again."""
    templates: set[Key] = field(default_factory=set)
    """ResourceClaimTemplates known to exist (made by the bridge, or seen by its watch), with
    `--dra-claims`: each is made once, not at every pod."""
    report: Callable[[str, Applied], None] | None = None
    """Told of every action once it was applied, with the `ns/name` it was applied to (the demo
    narrates them); the log says them anyway."""

    # --- entry points: what kopf's handlers and the demo's store feed call ---------------------

    def watches(self) -> list[Watch]:
        """The kinds the bridge watches and its entry points for each (`register` wires them)."""
        return [
            Watch(constants.PODNETWORK_PLURAL, constants.API_VERSION, constants.PODNETWORK_KIND,
                  self.index_podnetwork, "bridge_podnetworks",
                  self.podnetwork_event, "bridge_podnetwork_event"),
            Watch(constants.ATTACHMENT_PLURAL, constants.API_VERSION, constants.ATTACHMENT_KIND,
                  self.index_attachment, "bridge_attachments",
                  self.attachment_event, "bridge_attachment_event"),
            Watch(npwg.NAD_PLURAL, npwg.NAD_API_VERSION, npwg.NAD_KIND,
                  self.index_nad, "bridge_nads", self.nad_event, "bridge_nad_event"),
            Watch(translate.OPTIONS_PLURAL, translate.OPTIONS_API_VERSION, translate.OPTIONS_KIND,
                  self.index_options, "bridge_options", self.options_event, "bridge_options_event"),
            Watch("pods", "v1", "Pod", event=self.pod_event, event_handler="bridge_pod_event",
                  annotation=constants.NETWORKS_ANNOTATION),
            Watch(constants.POLICY_PLURAL, constants.POLICY_API_VERSION, constants.POLICY_KIND,
                  event=self.policy_event, event_handler="bridge_policy_event"),
            *([Watch(TEMPLATES_PLURAL, dra_claims.TEMPLATE_API_VERSION, dra_claims.TEMPLATE_KIND,
                     event=self.template_event, event_handler="bridge_template_event")]
              if self.config.dra_driver else []),
        ]

    def index_podnetwork(self, body: Mapping[str, Any]) -> None:
        self.remember_podnetwork(body)

    def index_attachment(self, body: Mapping[str, Any]) -> None:
        self.remember_attachment(body)

    def index_nad(self, body: Mapping[str, Any]) -> None:
        self.remember_nad(body)

    def index_options(self, body: Mapping[str, Any]) -> None:
        self.remember_options(body)

    async def podnetwork_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        ref: Ref = (constants.PODNETWORK_KIND, "", key_of(body)[1])
        if type == "DELETED":
            self.forget(ref)
        elif not self.holds(constants.PODNETWORK_KIND, body):
            return
        await self.reconcile_params(ref)
        await self.reconcile_users(self.attachments_of(ref[2]))
        await self.retry_waiting()
        await self.reconcile_policies()

    async def attachment_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        ref: Ref = (constants.ATTACHMENT_KIND, *key_of(body))
        if type == "DELETED":
            self.forget(ref)
        elif not self.holds(constants.ATTACHMENT_KIND, body):
            return
        await self.reconcile_params(ref)
        await self.retry_waiting()

    async def nad_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        if type == "DELETED":
            self.nads.pop(key, None)
        elif not self.holds(constants.NAD_KIND, body):
            return
        await self.reconcile_users(set(self.nad_users.get(key, ())))
        await self.retry_waiting()
        await self.reconcile_policies()

    async def options_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        if type == "DELETED":
            self.options.pop(key, None)
        elif not self.holds(constants.OPTIONS_KIND, body):
            return
        await self.reconcile_users(set(self.options_users.get(key, ())))
        await self.retry_waiting()

    async def pod_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        if type == "DELETED":
            self.waiting.pop(key, None)
            self.locks.pop(("Pod", *key), None)
            self.reverse_written.pop(key, None)
            self.posted.pop(key, None)
            return
        await self.reconcile_pod(body)
        if self.config.dra_driver:
            await self.reconcile_claims(body, self.config.dra_driver)

    async def template_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        if type == "DELETED":
            self.templates.discard(key_of(body))
        else:
            self.templates.add(key_of(body))

    async def policy_event(self, type: str | None, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        if type == "DELETED":
            self.known_policies.pop(key, None)
            self.said.pop(key, None)
            self.locks.pop(("MultiNetworkPolicy", *key), None)
            return
        seen = policies.read(body)
        self.known_policies[key] = seen
        await self.report_policy(key, self._networks())

    # --- the applier: the Kubernetes API through podnetwork.kube.writes ------------------------

    def lock(self, key: Any) -> asyncio.Lock:
        lock = self.locks.get(key)
        if lock is None:
            lock = self.locks[key] = asyncio.Lock()
        return lock

    def _api(self) -> writes.Api:
        assert self.api is not None, "Bridge.api is not set: give it a podnetwork.kube.writes.Api"
        return self.api

    async def apply(self, patch: Patch) -> dict[str, Any] | None:
        """A planned patch (the operators' shared write policy); None when it did not apply (the
        next event retries)."""
        return (await writes.apply(self._api(), patch, then="the next event retries")).body

    def _report(self, key: Key | str, action: Applied) -> None:
        if self.report is not None:
            self.report(key if isinstance(key, str) else "/".join(key), action)

    async def post_event(self, pod: kube_core.Pod, reason: str, message: str) -> None:
        body = pods.event(pod, reason, message, now=conditions.now())
        name = body["metadata"]["name"]
        namespace = body["metadata"]["namespace"]
        posted = self.posted.setdefault((namespace, pod.metadata.name or ""), set())
        if name in posted:
            return
        posted.add(name)
        try:
            await self._api().create(kube.Event, body)
            self._report(f"{namespace}/{pod.metadata.name}", plans.PostEvent(reason, message))
        except kube.Conflict:
            logger.debug("event %s was posted before this process started", name)
        except kube.ApiError as exc:
            logger.warning("event %s not posted: %s", name, exc)
        logger.warning("pod %s/%s: %s", namespace, pod.metadata.name, message)

    # --- ParamsReady -----------------------------------------------------------------------

    async def reconcile_params(self, ref: Ref) -> None:
        if not self.config.params_ready:
            return
        async with self.lock(ref):
            action = plans.params_action(ref, self.objects(), now=conditions.now())
            if action is None:
                return
            fresh = await self.apply(action.patch)
            if fresh:
                if ref[0] == constants.PODNETWORK_KIND:
                    self.remember_podnetwork(fresh)
                else:
                    self.remember_attachment(fresh)
                logger.info("%s %s: ParamsReady=%s (%s)", ref[0], action.patch.key, action.desired.status,
                            action.desired.reason)
                self._report(action.patch.key, action)

    async def reconcile_users(self, refs: set[Ref]) -> None:
        for ref in sorted(refs):
            await self.reconcile_params(ref)

    # --- pods ------------------------------------------------------------------------------

    async def reconcile_pod(self, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        async with self.lock(("Pod", *key)):
            pod = read(kube_core.Pod, body)
            if pod is None:  # the pod holds no network, as one whose annotation cannot be parsed
                self.waiting.pop(key, None)
                return
            await self._reconcile_pod(key, pod)

    async def _reconcile_pod(self, key: Key, pod: kube_core.Pod) -> None:
        """Apply the pod's plans: the selection before scheduling, then the reverse status."""
        actions = plans.selection(pod, self.objects(), self.config)
        if actions.ignored is not None:
            logger.debug("pod %s/%s: networks annotation is invalid (admission reports it): %s",
                         *key, actions.ignored)
        if actions.waits is not None:
            self.waiting.pop(key, None)
        for step in actions.steps:
            pod = await self._step(key, pod, step)
        if actions.waits:
            self.waiting[key] = pod
        if actions.translation is not None:
            await self._reverse_status(key, pod, actions.translation)

    async def _step(self, key: Key, pod: kube_core.Pod, step: plans.PodStep) -> kube_core.Pod:
        """One step of a pod's plan; returns the pod as it is now (the API's answer to a write)."""
        if isinstance(step, plans.Wait):
            logger.info("pod %s/%s waits: %s", *key, step.reason)
            return pod
        if isinstance(step, plans.PostEvent):
            if not step.while_gated or pods.gated(pod):
                await self.post_event(pod, step.reason, step.message)
            return pod
        fresh = await self.apply(step.patch)
        if not fresh:
            return pod
        if isinstance(step, plans.Release):
            logger.warning("pod %s/%s: removed scheduling gate %s without a selection: %s",
                           *key, pods.SCHEDULING_GATE, step.why)
        else:
            logger.info("pod %s/%s: %s%s", *key,
                        f"wrote {npwg.NETWORKS_ANNOTATION}" if step.writes_selection else "nothing to write",
                        f", removed scheduling gate {pods.SCHEDULING_GATE}" if step.removes_gate else "")
        self._report(key, step)
        return read(kube_core.Pod, fresh) or pod

    async def _reverse_status(self, key: Key, pod: kube_core.Pod, translation: translate.Translation) -> None:
        action = plans.reverse_status(pod, translation, self.config, self.reverse_written.get(key))
        if action.problem is not None:
            logger.warning("pod %s/%s: %s", *key, action.problem)
            return
        if action.patch is None or action.written is None:
            return
        if await self.apply(action.patch):
            self.reverse_written[key] = action.written
            logger.info("pod %s/%s: wrote %s", *key, ", ".join(action.keys))
            self._report(key, action)

    async def reconcile_claims(self, body: Mapping[str, Any], driver: str) -> None:
        """The templates of the pod's bridge-made claims, made where missing; an Event for networks
        a hot-plug added that have no claim (`pods.unclaimed`)."""
        pod = read(pods.ClaimedPod, body)
        if pod is None:
            return
        objects = self.objects()
        for template in pods.templates_wanted(pod, objects, driver):
            key = (template["metadata"]["namespace"], template["metadata"]["name"])
            if key in self.templates:
                continue
            try:
                await self._api().create(RESOURCE_CLAIM_TEMPLATE, template)
                logger.info("ResourceClaimTemplate %s/%s made for pod %s", *key, pod.metadata.name)
            except kube.Conflict:
                logger.debug("ResourceClaimTemplate %s/%s exists", *key)
            except kube.ApiError as exc:
                logger.warning("ResourceClaimTemplate %s/%s not made (the pod's next event retries): %s",
                               *key, exc)
                continue
            self.templates.add(key)
        missing = pods.unclaimed(pod, objects)
        if missing:
            await self.post_event(pod, pods.NETWORK_WITHOUT_CLAIM_REASON, pods.unclaimed_message(missing))

    async def retry_waiting(self) -> None:
        """Re-plan the pods waiting for objects; called when one of those objects changes."""
        for key in sorted(self.waiting):
            pod = self.waiting.get(key)
            if pod is not None:
                async with self.lock(("Pod", *key)):
                    await self._reconcile_pod(key, pod)

    # --- MultiNetworkPolicies: Events on the policy -----------------------------------------

    def _networks(self) -> dict[str, NetworkInfo]:
        found = policy_views.networks_of(self.podnetworks.values(), self.nads.values())
        return {n.key: n for n in found}

    async def reconcile_policies(self) -> None:
        """Judge every policy again when the networks they may name changed."""
        networks = self._networks()
        now = frozenset(networks.values())
        if now == self.policy_networks:
            return
        self.policy_networks = now
        for key in sorted(self.known_policies):
            await self.report_policy(key, networks)

    async def report_policy(self, key: Key, networks: Mapping[str, NetworkInfo]) -> None:
        async with self.lock(("MultiNetworkPolicy", *key)):
            seen = self.known_policies.get(key)
            if seen is None:
                return
            self.policy_networks = frozenset(networks.values())
            posts, said = policies.plan(seen, policies.notes(seen, networks), self.said.get(key),
                                        now=conditions.now())
            self.said[key] = said
            for post in posts:
                await self._post_policy_event(post)

    async def _post_policy_event(self, post: policies.PostPolicyEvent) -> None:
        note, where = post.note, "/".join(post.key)
        level = logging.WARNING if note.type == policies.WARNING else logging.INFO
        logger.log(level, "%s %s: %s: %s", constants.POLICY_KIND, where, note.reason, note.message)
        name, namespace = post.body["metadata"]["name"], post.body["metadata"]["namespace"]
        try:
            await self._api().create(kube.Event, post.body)
        except kube.Conflict:
            if not post.renew:
                logger.debug("event %s was posted before this process started", name)
                return
            await self._renew_event(name, namespace)
        except kube.ApiError as exc:
            logger.warning("event %s not posted: %s", name, exc)
            return
        self._report(where, post)

    async def _renew_event(self, name: str, namespace: str) -> None:
        """Say an Event again: its count and lastTimestamp bumped, guarded by its resourceVersion."""
        try:
            current = await self._api().get(kube.Event, name, namespace)
            count = current.get("count")
            patch = {"metadata": {"resourceVersion": current.get("metadata", {}).get("resourceVersion")},
                     "count": (count if isinstance(count, int) else 1) + 1,
                     "lastTimestamp": conditions.now()}
            await self._api().patch(kube.Event, name, patch, namespace=namespace)
        except kube.ApiError as exc:
            logger.warning("event %s not renewed: %s", name, exc)

    async def say_if_policies_unserved(self) -> bool:
        """Whether MultiNetworkPolicy is served (API discovery); when not, says so once, in the log.
        kopf starts watching it if its CRD is installed later."""
        get_path = getattr(self.api, "get_path", None)
        if get_path is None:  # the demo's store serves every kind
            return True
        try:
            found = await get_path(POLICY_DISCOVERY)
        except kube.NotFound:
            found = {}
        except kube.ApiError as exc:
            logger.warning("cannot tell whether %s is served (%s): policies are reported if it is",
                           constants.POLICY_KIND, exc)
            return True
        served = any(r.get("name") == constants.POLICY_PLURAL for r in (found or {}).get("resources") or ()
                     if isinstance(r, Mapping))
        if not served:
            logger.warning("%s is not served (no %s.%s CRD): the bridge reports on no policy; apply "
                           "crds/multi-networkpolicy.yaml to enable it (picked up without a restart)",
                           constants.POLICY_KIND, constants.POLICY_PLURAL, constants.POLICY_GROUP)
        return served

    # --- kopf's stop --------------------------------------------------------------------------

    async def stop_tasks(self) -> None:
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        self.background.clear()
        if self.api is not None:
            await self.api.close()


def register(registry: kopf.OperatorRegistry, bridge: Bridge, meter: handlers.Meter | None = None) -> None:
    """Wire the bridge's entry points (`Bridge.watches`) to kopf's handlers in `registry`. Handler
    ids start with `bridge_`; `meter` counts the watching handlers' runs and failures
    (`podnetwork bridge --metrics-port`)."""
    on = handlers.Handlers(meter)
    nad = (npwg.NAD_GROUP, npwg.NAD_VERSION, npwg.NAD_PLURAL)
    opts = (translate.OPTIONS_GROUP, translate.OPTIONS_VERSION, translate.OPTIONS_PLURAL)
    pn = (constants.GROUP, constants.VERSION, constants.PODNETWORK_PLURAL)
    pna = (constants.GROUP, constants.VERSION, constants.ATTACHMENT_PLURAL)
    mnp = (constants.POLICY_GROUP, constants.POLICY_VERSION, constants.POLICY_PLURAL)

    @kopf.on.startup(registry=registry, id="bridge_startup")
    async def bridge_startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        # kopf would post an Event for every warning logged about a handled pod.
        settings.posting.enabled = False
        # Only index and event handlers: kopf's per-event diff is never read (handlers.NoEssence).
        settings.persistence.diffbase_storage = handlers.NoEssence()
        await bridge.say_if_policies_unserved()

    @kopf.on.cleanup(registry=registry, id="bridge_cleanup")
    async def bridge_cleanup(**_: Any) -> None:
        await bridge.stop_tasks()

    # Indexes first: kopf runs no event handler before every index has its initial listing.
    @on.index(*pn, registry=registry, id="bridge_podnetworks")
    def bridge_podnetworks(body: kopf.Body, **_: Any) -> None:
        bridge.index_podnetwork(body)

    @on.index(*pna, registry=registry, id="bridge_attachments")
    def bridge_attachments(body: kopf.Body, **_: Any) -> None:
        bridge.index_attachment(body)

    @on.index(*nad, registry=registry, id="bridge_nads")
    def bridge_nads(body: kopf.Body, **_: Any) -> None:
        bridge.index_nad(body)

    @on.index(*opts, registry=registry, id="bridge_options")
    def bridge_options(body: kopf.Body, **_: Any) -> None:
        bridge.index_options(body)

    @on.event(*pn, registry=registry, id="bridge_podnetwork_event")
    async def bridge_podnetwork_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await bridge.podnetwork_event(type, body)

    @on.event(*pna, registry=registry, id="bridge_attachment_event")
    async def bridge_attachment_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await bridge.attachment_event(type, body)

    @on.event(*nad, registry=registry, id="bridge_nad_event")
    async def bridge_nad_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await bridge.nad_event(type, body)

    @on.event(*opts, registry=registry, id="bridge_options_event")
    async def bridge_options_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await bridge.options_event(type, body)

    @on.event("pods", registry=registry, id="bridge_pod_event",
              annotations={constants.NETWORKS_ANNOTATION: kopf.PRESENT})
    async def bridge_pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await bridge.pod_event(type, body)

    # An event handler only: an index on a kind whose CRD is not installed must not hold the others.
    @on.event(*mnp, registry=registry, id="bridge_policy_event")
    async def bridge_policy_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await bridge.policy_event(type, body)

    if bridge.config.dra_driver:
        # An event handler only, as for policies: the templates never hold the pods' decisions.
        @on.event("resource.k8s.io", "v1", TEMPLATES_PLURAL, registry=registry, id="bridge_template_event")
        async def bridge_template_event(type: str | None, body: kopf.Body, **_: Any) -> None:
            await bridge.template_event(type, body)


__all__ = ["Applied", "Bridge", "BridgeSettings", "register"]
