"""Stages 1 to 3 of `podnetwork demo`: networks and their conditions, pods through admission and the
scheduler extender, and their translation to NPWG: the control plane's part of the story.

`ControlStory` is a base of `demo.demo.Demo`, which holds what the stages use (declared here).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from bridge import npwg
from bridge.operator import pods
from bridge.translate.params import ParamsReason
from demo import store as store_mod
from demo.controlplane import ControlPlane
from demo.host import Footprint, Host
from demo.report import Report
from demo.scheduling import Scheduler
from demo.stages import events_about
from demo.store import Store
from demo.world import (
    BLUE,
    GREEN,
    NODE,
    NODE_A,
    NODE_B,
    NS,
    PN,
    PNA,
    POD,
    RED,
    Net,
    condition,
    condition_summary,
    pod_manifest,
    podnetwork_manifest,
)
from podnetwork.ground import constants
from podnetwork.ground.constants import ConditionType, ReadyReason
from podnetwork.kep import networks


class ControlStory:
    """Sections 1, 2 and 3 of the demo."""

    report: Report
    api: Store
    notes: list[str]
    control: ControlPlane
    scheduler: Scheduler | None
    host: Host
    footprint: Footprint
    data_plane: bool
    ipam_dirs: dict[str, Path]

    def _flush_notes(self) -> None:
        """Say the notes gathered since the last flush (the bridge's and the scheduler's), in order."""
        for text in self.notes:
            self.report.say(text)
        self.notes.clear()

    def _nad(self, net: Net) -> dict[str, Any]:
        ipam_dir = self.ipam_dirs.setdefault(net.name, self.host.tempdir(f"ipam-{net.name}"))
        link = self.footprint.link(net.link)
        config = net.config(link, ipam_dir)
        return {
            "apiVersion": npwg.NAD_API_VERSION,
            "kind": npwg.NAD_KIND,
            "metadata": {"name": net.name, "namespace": NS},
            "spec": {"config": json.dumps(config)},
        }

    def _networks(self) -> None:
        r, api = self.report, self.api
        r.section("1. Networks: PodNetworks, NetworkAttachmentDefinitions, conditions")
        self._flush_notes()
        default = api.get(*PN, constants.DEFAULT_PODNETWORK)
        r.check(
            condition(default, ConditionType.READY).get("status") == "True",
            'the controller created the "default" PodNetwork and it is Ready',
            condition_summary(default),
        )
        if self.data_plane:
            link, kind = self.host.parent_link(GREEN.link)
            r.say(
                f"created {kind} link {link} as the macvlan parent of 'green'"
                + (" (this kernel has no dummy driver)" if kind != "dummy" else "")
            )
        self._create_networks()
        self._flush_notes()
        self._steady_state()

    def _create_networks(self) -> None:
        r, api = self.report, self.api
        for net in (BLUE, GREEN):
            api.create(self._nad(net))
            api.create(podnetwork_manifest(net))
            r.say(
                f"created NetworkAttachmentDefinition {NS}/{net.name} ({net.plugin}, {net.subnet}) "
                f"and PodNetwork {net.name} (provider {constants.BRIDGE_PROVIDER})"
            )
        api.create(
            {
                "apiVersion": constants.API_VERSION,
                "kind": constants.ATTACHMENT_KIND,
                "metadata": {"name": "green-port", "namespace": NS},
                "spec": {"podNetworkName": GREEN.name},
            }
        )
        r.say(f"created PodNetworkAttachment {NS}/green-port -> PodNetwork green")
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE_A, "labels": {"kubernetes.io/hostname": NODE_A}},
            }
        )
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": NODE_B,
                    "labels": {"kubernetes.io/hostname": NODE_B},
                    "annotations": {constants.NODE_PODNETWORKS_ANNOTATION: '["blue","green"]'},
                },
            }
        )
        r.say(
            f"created nodes {NODE_A} (offers every network) and {NODE_B} "
            f'({constants.NODE_PODNETWORKS_ANNOTATION}: ["blue","green"])'
        )

    def _steady_state(self) -> None:
        r, api = self.report, self.api
        r.say("steady state:")
        for name in (constants.DEFAULT_PODNETWORK, BLUE.name, GREEN.name):
            obj = api.get(*PN, name)
            r.say(f"  PodNetwork {name}: {condition_summary(obj)}")
            r.check(
                condition(obj, ConditionType.READY).get("status") == "True",
                f"PodNetwork {name} is Ready",
                condition_summary(obj),
            )
        for name in (BLUE.name, GREEN.name):
            obj = api.get(*PN, name)
            r.check(
                condition(obj, ConditionType.PARAMS_READY).get("status") == "True",
                f"the bridge set ParamsReady=True on PodNetwork {name}",
                condition_summary(obj),
            )
        pna = api.get(*PNA, "green-port", NS)
        r.say(f"  PodNetworkAttachment {NS}/green-port: {condition_summary(pna)}")
        r.check(
            condition(pna, ConditionType.READY).get("status") == "True",
            "PodNetworkAttachment green-port is Ready",
            condition_summary(pna),
        )
        green = api.get(*PN, GREEN.name)
        r.check(
            constants.IN_USE_FINALIZER in (green["metadata"].get("finalizers") or []),
            "PodNetwork green carries the in-use finalizer (the attachment references it)",
            green["metadata"].get("finalizers"),
        )
        for node in (NODE_A, NODE_B):
            obj = api.get(*NODE, node)
            cond = condition(obj, "DefaultPodNetworkReady")
            r.say(f"  Node {node}: DefaultPodNetworkReady={cond.get('status')} ({cond.get('message')})")
            r.check(cond.get("status") == "True", f"node {node} reports DefaultPodNetworkReady=True", cond)
        writes = self.control.controller_writes
        api.patch(*NODE, NODE_A, {"metadata": {"labels": {"demo/touched": "yes"}}})
        api.patch(*PN, BLUE.name, {"metadata": {"labels": {"demo/touched": "yes"}}})
        r.check(
            self.control.controller_writes == writes,
            "a steady cluster makes no controller writes (unrelated changes cause none)",
            self.control.controller_writes - writes,
        )
        self.notes.clear()

    # -- 2 ------------------------------------------------------------------------------

    async def _create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        nets = networks.annotations_of(manifest).get(
            constants.NETWORKS_ANNOTATION, "(no networks annotation)"
        )
        where = manifest["spec"].get("nodeSelector")
        self.report.say(
            f"create pod {NS}/{manifest['metadata']['name']}: {nets}"
            + (f", nodeSelector {json.dumps(where)}" if where else "")
        )
        created = self.api.create(manifest)
        assert self.scheduler is not None
        await self.scheduler.settle()
        self._flush_notes()
        return created

    async def _pods(self) -> None:
        r, api = self.report, self.api
        assert self.scheduler is not None
        r.section("2. Pods: admission, static validation, scheduling through the extender")
        await self._admission()
        web: list[dict[str, Any]] = [
            {"podNetworkName": "default"},
            {"podNetworkName": "blue", "interfaceName": "blue0", "isDefaultGW4": True},
            {"podNetworkAttachmentName": "green-port"},
        ]
        await self._create_pod(pod_manifest("web-a", web, NODE_A))
        await self._create_pod(pod_manifest("web-b", web, NODE_B))
        for pod, node in (("web-a", NODE_A), ("web-b", NODE_B)):
            got_node = api.get(*POD, pod, NS)["spec"].get("nodeName")
            r.check(got_node == node, f"pod {pod} was scheduled on {node}", got_node)
        await self._waiting_for_red()
        await self._disable_and_enable()

    async def _admission(self) -> None:
        """Auto-population, and a statically invalid pod refused (KEP "Auto-population",
        "Static validations")."""
        r, api = self.report, self.api
        plain = await self._create_pod(pod_manifest("plain", None, NODE_B))
        got = networks.annotations_of(plain).get(constants.NETWORKS_ANNOTATION)
        r.say(f"  admission auto-populated {constants.NETWORKS_ANNOTATION}: {got}")
        r.check(
            got is not None and json.loads(got) == [{"podNetworkName": "default"}],
            'admission auto-populated [{"podNetworkName": "default"}]',
            got,
        )

        bad = pod_manifest(
            "bad",
            [
                {"podNetworkName": "blue", "interfaceName": "net1"},
                {"podNetworkAttachmentName": "green-port", "interfaceName": "net1"},
            ],
        )
        try:
            api.create(bad)
        except store_mod.Invalid as exc:
            r.say("pod demo/bad (two networks on interface net1) was rejected:")
            for line in str(exc).splitlines():
                r.say(f"  {line}")
            r.check(
                "interfaceName" in str(exc) and "Duplicate" in str(exc),
                "static validation rejected the duplicate interfaceName with a field error",
                str(exc),
            )
        else:
            r.check(False, "static validation rejected pod demo/bad", "it was admitted")
        r.check(api.find(*POD, "bad", NS) is None, "the rejected pod was not stored")

    async def _waiting_for_red(self) -> None:
        """Pods waiting for a network that does not exist, then is not Ready, then is: the
        extender's reasons, `podnetwork explain`, the requeue nudge."""
        r, api = self.report, self.api
        assert self.scheduler is not None
        r.say("")
        r.say("pods db-1 and db-2 want PodNetwork red, which does not exist yet:")
        db = [{"podNetworkName": "default"}, {"podNetworkName": "red", "interfaceName": "red0"}]
        await self._create_pod(pod_manifest("db-1", db))
        await self._create_pod(pod_manifest("db-2", db))
        self._check_pending("db-1", 'podnetwork "red" not found', unresolvable=True)

        r.say("")
        r.say("create PodNetwork red, but not yet its NetworkAttachmentDefinition:")
        api.create(podnetwork_manifest(RED))
        self._flush_notes()
        red = api.get(*PN, RED.name)
        r.say(f"  PodNetwork red: {condition_summary(red)}")
        r.check(
            condition(red, ConditionType.PARAMS_READY).get("reason") == ParamsReason.NOT_FOUND
            and condition(red, ConditionType.READY).get("reason") == ReadyReason.PARAMS_NOT_READY,
            "red is not Ready: ParamsReady=False (ParametersNotFound) -> Ready=False (ParamsNotReady)",
            condition_summary(red),
        )
        # The pods wait; a pod update (here a label) makes the scheduler retry, and the
        # extender now gives the new reason.
        r.say("label pod db-1 (any pod update makes kube-scheduler retry it):")
        api.patch(*POD, "db-1", {"metadata": {"labels": {"tier": "db"}}}, NS)
        await self.scheduler.settle()
        self._flush_notes()
        self._check_pending("db-1", 'podnetwork "red" is not Ready: ParamsNotReady', unresolvable=True)
        self._explain("pod", f"{NS}/db-1", expect="PodNetwork red", root=f"{NS}/red")

        r.say("")
        r.say(f"create NetworkAttachmentDefinition {NS}/red:")
        api.create(self._nad(RED))
        await self.scheduler.settle()
        self._flush_notes()
        red = api.get(*PN, RED.name)
        r.say(f"  PodNetwork red: {condition_summary(red)}")
        r.check(condition(red, ConditionType.READY).get("status") == "True", "red turned Ready",
                condition_summary(red))
        for pod in ("db-1", "db-2"):
            obj = api.get(*POD, pod, NS)
            r.check(
                obj["spec"].get("nodeName") == NODE_A,
                f"{pod} was retried after the controller's requeue nudge and scheduled on {NODE_A} "
                f"({NODE_B} does not offer red)",
                obj["spec"].get("nodeName"),
            )
        last = next(d for d in reversed(self.scheduler.decisions) if d.pod == f"{NS}/db-2")
        r.check(
            last.reply.failed_nodes.get(NODE_B) == 'podnetwork "red" is not available on this node',
            f'the extender answered FailedNodes[{NODE_B}] = podnetwork "red" is not available on this node',
            last.reply.to_json().decode(),
        )

    async def _disable_and_enable(self) -> None:
        """KEP "Enabled": a disabled PodNetwork takes no new pods; the pods it has keep running."""
        r, api = self.report, self.api
        assert self.scheduler is not None
        r.say("")
        r.say("disable PodNetwork blue (spec.enabled: false):")
        api.patch(*PN, BLUE.name, {"spec": {"enabled": False}})
        self._flush_notes()
        blue = api.get(*PN, BLUE.name)
        r.say(f"  PodNetwork blue: {condition_summary(blue)}")
        r.check(
            condition(blue, ConditionType.READY).get("reason") == ReadyReason.ADMINISTRATIVELY_DISABLED,
            "blue is not Ready: AdministrativelyDisabled",
            condition_summary(blue),
        )
        r.check(
            api.get(*POD, "web-a", NS)["spec"].get("nodeName") == NODE_A,
            "pods already on blue keep their place (disabling stops new attachments only)",
        )
        await self._create_pod(
            pod_manifest("late", [{"podNetworkName": "default"}, {"podNetworkName": "blue"}], NODE_B)
        )
        self._check_pending(
            "late",
            'podnetwork "blue" is not Ready: AdministrativelyDisabled',
            unresolvable=True,
            nodes={NODE_B},
        )
        r.say("enable it again:")
        api.patch(*PN, BLUE.name, {"spec": {"enabled": True}})
        await self.scheduler.settle()
        self._flush_notes()
        late = api.get(*POD, "late", NS)["spec"].get("nodeName")
        r.check(late == NODE_B, f"late was nudged, retried and scheduled on {NODE_B}", late)

    def _explain(self, kind: str, name: str, *, expect: str, root: str) -> None:
        """`podnetwork explain`, over the store's objects: the chain and its first broken link."""
        from podnetwork.kep import explain, graph

        objects = [obj for res in self.api.resources() for obj in self.api.list(res.api_version, res.kind)]
        result = explain.explain(graph.build(objects), explain.subject_key(kind, name))
        self.report.say(f"podnetwork explain {kind} {name}:")
        for line in result.render().strip().splitlines():
            self.report.say(f"  | {line}")
        broken, cause = result.first_broken, result.root_cause
        self.report.check(
            broken is not None and expect in str(broken) and root in str(cause),
            f"explain finds the first broken link of {name} at {expect}, and the root cause at {root}",
            {"first broken": str(broken), "root cause": str(cause)},
        )

    def _check_pending(
        self, pod: str, reason: str, *, unresolvable: bool,
        nodes: Collection[str] = frozenset({NODE_A, NODE_B}),
    ) -> None:
        assert self.scheduler is not None
        obj = self.api.get(*POD, pod, NS)
        last = next(d for d in reversed(self.scheduler.decisions) if d.pod == f"{NS}/{pod}")
        field_name = "FailedAndUnresolvableNodes" if unresolvable else "FailedNodes"
        answers = last.reply.failed_and_unresolvable_nodes if unresolvable else last.reply.failed_nodes
        self.report.check(
            not obj["spec"].get("nodeName")
            and set(answers) == set(nodes)
            and all(reason in msg for msg in answers.values()),
            f"{pod} stays Pending; the extender put every candidate node in {field_name}: {reason}",
            last.reply.to_json().decode(),
        )
        cond = condition(obj, "PodScheduled")
        self.report.say(
            f"  pod {pod}: PodScheduled={cond.get('status')} {cond.get('reason')}: {cond.get('message')}"
        )

    # -- 3 ------------------------------------------------------------------------------

    def _translation(self) -> None:
        r, api = self.report, self.api
        r.section(f"3. Translation to NPWG: {npwg.NETWORKS_ANNOTATION}")
        expected = {
            "web-a": [
                {"name": "blue", "namespace": NS, "interface": "blue0", "default-route": [BLUE.gateway]},
                {"name": "green", "namespace": NS},
            ],
            "web-b": [
                {"name": "blue", "namespace": NS, "interface": "blue0", "default-route": [BLUE.gateway]},
                {"name": "green", "namespace": NS},
            ],
            "late": [{"name": "blue", "namespace": NS}],
            "db-1": [{"name": "red", "namespace": NS, "interface": "red0"}],
            "db-2": [{"name": "red", "namespace": NS, "interface": "red0"}],
            "plain": None,
        }
        for pod, want in expected.items():
            obj = api.get(*POD, pod, NS)
            text = networks.annotations_of(obj).get(npwg.NETWORKS_ANNOTATION)
            kep = networks.annotations_of(obj).get(constants.NETWORKS_ANNOTATION)
            r.say(f"{pod}: {kep}")
            r.say(f"  -> {npwg.NETWORKS_ANNOTATION}: {text if text is not None else '(none)'}")
            got = json.loads(text) if text else None
            what = (
                f"{pod}'s selection names the NADs of its PodNetworks"
                if want
                else f"{pod} gets no selection: the default network is never selected (NPWG 4, 6)"
            )
            r.check(got == want, what, got)
            for warning in self._events(pod, pods.TRANSLATION_WARNING_REASON):
                r.say(f"  warning: {warning}")
        self.notes.clear()

    def _events(self, pod: str, reason: str) -> list[str]:
        """The messages of the Events of `reason` about a pod of the demo (the bridge posts them)."""
        return [event.message or "" for event in events_about(self.api, NS, None, pod)
                if event.reason == reason]
