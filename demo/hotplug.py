"""Hot-plug in the demo (KEP Story #8, Req 24): a network added to and removed from a running pod.

On a cluster each node's agent watches the pods bound to its node
(`bridge.agent.daemon.hotplug.watch_node_pods`) and posts Events. Here each agent's
`bridge.agent.daemon.hotplug.HotPlug` is fed by the store's pod watch, filtered to its
node the way the field selector filters on a cluster, and posts its Events to the
store. The rest is the real code: admission checks the change, the bridge rewrites
the NPWG selection, the agent attaches or detaches with the real plugins in the
pod's existing namespace, the controller moves InUse.

`run(demo)` is the demo's stage; `Followers` the per-node wiring.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from bridge import npwg
from bridge.agent.daemon import hotplug
from bridge.agent.daemon.running import Running
from demo import host as host_mod
from demo import store as store_mod
from demo.report import Report
from demo.stages import EventView
from demo.store import Event, EventType, Store
from demo.world import PN, POD, conditions_of
from podnetwork.ground import constants
from podnetwork.ground.constants import ConditionType
from podnetwork.ground.core import Pod
from podnetwork.kep import networks

#: Seconds the demo waits for an agent to apply a change (the plugins run in milliseconds).
SETTLE_SECONDS = 30.0


class StoreEvents:
    """`hotplug.EventSink` over the demo's store."""

    def __init__(self, api: Store, on_note: Callable[[str], None]) -> None:
        self._api = api
        self._note = on_note

    async def post_event(self, body: Mapping[str, Any]) -> None:
        with contextlib.suppress(store_mod.AlreadyExists):
            self._api.create(dict(body))
        event = EventView.model_validate(body)
        about = event.involved_object
        self._note(f"agent: event on pod {about.namespace}/{about.name}: "
                   f"{body.get('type')} {event.reason}: {event.message}")


class Followers:
    """One `HotPlug` per node's agent, fed with the store's pods of that node."""

    def __init__(self, api: Store, agents: Mapping[str, Running], on_note: Callable[[str], None]) -> None:
        self.api = api
        events = StoreEvents(api, on_note)
        self.hot = {node: hotplug.HotPlug(r.agent, events, node) for node, r in agents.items()}
        self._cancel: Callable[[], None] | None = None

    def start(self) -> None:
        for hot in self.hot.values():
            hot.start()
        self._cancel = self.api.subscribe(self._on_pod, *POD)

    def _on_pod(self, event: Event) -> None:
        try:
            node = Pod.model_validate(event.object).spec.node_name
        except ValueError:  # pydantic's ValidationError: no agent's watch would take it either
            return
        hot = self.hot.get(node) if node is not None else None
        if hot is None:
            return  # not bound yet, or bound to no demo node: no agent's field selector matches
        if event.type == EventType.DELETED:
            hot.pod_deleted(event.object)
        else:
            hot.pod_changed(event.object)

    async def settle(self) -> None:
        """Wait until every agent has applied what it was given."""
        async with asyncio.timeout(SETTLE_SECONDS):
            for hot in self.hot.values():
                await hot.idle.wait()

    async def stop(self) -> None:
        if self._cancel is not None:
            self._cancel()
            self._cancel = None
        for hot in self.hot.values():
            await hot.stop()


class Demo(Protocol):
    """What the stage uses of `demo.demo.Demo` (which imports this module, not the reverse)."""

    report: Report
    api: Store
    agents: list[Running]

    def _note(self, text: str) -> None: ...

    def _flush_notes(self) -> None: ...

    def _sandbox(self, pod: str) -> Any: ...

    def _show_pod_networks(self, pod: str) -> None: ...

    async def _ping(self, src: str, dst: str, network: str) -> None: ...

    def _leases(self, net: Any) -> list[str]: ...

    def _ip_on(self, pod: str, network: str) -> str | None: ...


def _agents_by_node(demo: Demo) -> dict[str, Running]:
    # Each node's agent listens on <run dir>/<node>.sock (Demo._start_agents).
    return {running.agent.config.socket_path.stem: running for running in demo.agents}


def _status(demo: Demo, pod: str, ns: str) -> list[dict[str, Any]]:
    obj = demo.api.get(*POD, pod, ns)
    parsed: list[dict[str, Any]] = json.loads(
        networks.annotations_of(obj).get(npwg.NETWORK_STATUS_ANNOTATION) or "[]")
    return parsed


def _in_use(demo: Demo, name: str) -> str:
    conditions = conditions_of(demo.api.get(*PN, name))
    return next((c.message for c in conditions if c.type == ConditionType.IN_USE), "")


async def run(demo: Demo, *, ns: str, red: Any) -> None:
    """Stage 4c: add PodNetwork `red` (the demo's `Net`) to the running pod web-a in `ns`, ping
    db-1 over it, remove it again; and a change that would remove the default network, refused
    with nothing changed."""
    NS, RED = ns, red
    r, api = demo.report, demo.api
    r.section("4c. Hot-plug: a network added to and removed from a running pod (KEP Story #8, Req 24)")
    followers = Followers(api, _agents_by_node(demo), demo._note)
    followers.start()
    try:
        await followers.settle()
        pod = api.get(*POD, "web-a", NS)
        before = json.loads(networks.annotations_of(pod)[constants.NETWORKS_ANNOTATION])
        netns = demo._sandbox("web-a").netns
        links_before = _links(netns)
        r.say(f"web-a runs on {pod['spec']['nodeName']} with {json.dumps(before)}")

        removed_default = [n for n in before if n.get("podNetworkName") != "default"]
        r.say("try to remove the default network from the running pod:")
        try:
            _set_networks(api, NS, removed_default)
        except store_mod.Invalid as exc:
            for line in str(exc).splitlines():
                r.say(f"  {line}")
            r.check("cannot be removed from a running pod" in str(exc),
                    "admission refused removing the default network from a running pod, saying why", str(exc))
        else:
            r.check(False, "admission refused removing the default network", "it was admitted")
        r.check(json.loads(networks.annotations_of(api.get(*POD, "web-a", NS))[constants.NETWORKS_ANNOTATION])
                == before, "the refused change left web-a's networks as they were")

        added = [*before, {"podNetworkName": RED.name, "interfaceName": "red0"}]
        r.say("")
        r.say(f"add PodNetwork red: {constants.NETWORKS_ANNOTATION} = {json.dumps(added)}")
        _set_networks(api, NS, added)
        await followers.settle()
        demo._flush_notes()
        selection = networks.annotations_of(api.get(*POD, "web-a", NS)).get(npwg.NETWORKS_ANNOTATION) or ""
        r.check('"name":"red"' in selection and '"interface":"red0"' in selection,
                "the bridge added red to web-a's NPWG selection", selection)
        links = _links(netns)
        r.say(f"  interfaces in web-a's namespace: {links_before} -> {links}")
        r.check("red0" in links and set(links_before) <= set(links),
                "the agent attached red0 in web-a's existing namespace and left the others alone", links)
        status = _status(demo, "web-a", NS)
        r.check(any(e.get("interface") == "red0" and e.get("name") == f"{NS}/{RED.name}" for e in status),
                "web-a's network-status lists red on red0", status)
        demo._show_pod_networks("web-a")
        await demo._ping("web-a", "db-1", RED.name)
        in_use = _in_use(demo, RED.name)
        r.say(f"  PodNetwork red InUse: {in_use}")
        r.check("3 pods" in in_use, "red's InUse now counts web-a too (3 pods)", in_use)

        r.say("")
        r.say(f"remove it again: {constants.NETWORKS_ANNOTATION} = {json.dumps(before)}")
        _set_networks(api, NS, before)
        await followers.settle()
        demo._flush_notes()
        links = _links(netns)
        r.say(f"  interfaces in web-a's namespace: {links}")
        r.check(sorted(links) == sorted(links_before),
                "the agent detached red0; web-a's other interfaces stayed", links)
        status = _status(demo, "web-a", NS)
        r.check(not any(e.get("interface") == "red0" for e in status),
                "web-a's network-status no longer lists red", status)
        selection = networks.annotations_of(api.get(*POD, "web-a", NS)).get(npwg.NETWORKS_ANNOTATION) or ""
        r.check('"name":"red"' not in selection, "the bridge removed red from web-a's NPWG selection",
                selection)
        held = demo._leases(RED)
        red_ips = sorted(filter(None, (demo._ip_on(p, RED.name) for p in ("db-1", "db-2"))))
        r.check(held == red_ips, "host-local released web-a's red address (only db-1's and db-2's remain)",
                {"leases": held, "db": red_ips})
        in_use = _in_use(demo, RED.name)
        r.say(f"  PodNetwork red InUse: {in_use}")
        r.check("2 pods" in in_use, "red's InUse is back to db-1 and db-2", in_use)
    finally:
        await followers.stop()


def _links(netns: str) -> list[str]:
    """The interfaces in a pod's namespace, lo aside."""
    out = host_mod.run(["ip", "-n", netns, "-j", "link", "show"], check=False).stdout
    return sorted(link["ifname"] for link in json.loads(out or "[]") if link.get("ifname") != "lo")


def _set_networks(api: Store, ns: str, nets: list[dict[str, Any]]) -> None:
    patch = {"metadata": {"annotations": {constants.NETWORKS_ANNOTATION: json.dumps(nets)}}}
    api.patch(*POD, "web-a", patch, ns)


__all__ = ["Demo", "Followers", "StoreEvents", "run"]
