"""bridge.operator.plans: what the bridge does about a pod, in order, decided purely: the selection
before scheduling (its write, the gate, the Events, the wait), the reverse status after the agent,
and ParamsReady."""

from __future__ import annotations

import json
from typing import Any

from bridge import npwg, translate
from bridge.operator import plans, pods
from bridge.operator.plans import BridgeSettings, PostEvent, Release, Wait, WriteSelection
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from tests.unit.bridge_support import NS, nad, podnetwork

GATE = constants.NPWG_SELECTION_GATE
READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
WORLD = translate.Objects.from_objects([
    {**podnetwork("default", nads=[], provider="example.com/cluster"), "status": READY},
    {**podnetwork("blue"), "status": READY}, nad("blue"),
    podnetwork("red"), nad("red"),  # not Ready yet
    {**podnetwork("other", nads=[], provider="example.com/other"), "status": READY},
])
DEFAULT = {"podNetworkName": "default"}


def pod(nets: list[dict[str, Any]] | None, *, gated: bool = False, **annotations: str) -> Pod:
    ann = dict(annotations)
    if nets is not None:
        ann[constants.NETWORKS_ANNOTATION] = json.dumps(nets)
    spec: dict[str, Any] = {"schedulingGates": [{"name": "other.example/gate"}, {"name": GATE}]} if gated else {}
    return Pod.model_validate({"metadata": {"name": "p", "namespace": NS, "uid": "u", "resourceVersion": "7",
                                            "annotations": ann}, "spec": spec})


def kinds(actions: plans.PodActions) -> list[str]:
    return [type(step).__name__ for step in actions.steps]


def test_a_pod_whose_networks_are_ready_gets_its_selection_and_loses_the_gate_in_one_write_from_its_version():
    actions = plans.selection(pod([DEFAULT, {"podNetworkName": "blue"}], gated=True), WORLD, BridgeSettings())
    (write,) = actions.steps
    assert isinstance(write, WriteSelection) and write.writes_selection and write.removes_gate
    assert write.patch.decided_from == "7" and (write.patch.kind, write.patch.key) == ("Pod", f"{NS}/p")
    assert write.selection == '[{"name":"blue","namespace":"nets"}]'
    assert write.patch.body["spec"] == {"schedulingGates": [{"name": "other.example/gate"}]}
    assert actions.waits is False and actions.translation is not None


def test_a_translation_warning_is_posted_before_the_selection_is_written():
    actions = plans.selection(pod([{"podNetworkName": "default", "interfaceName": "eth9"},
                                   {"podNetworkName": "blue"}]), WORLD, BridgeSettings())
    assert kinds(actions) == ["PostEvent", "WriteSelection"]
    warning = actions.steps[0]
    assert isinstance(warning, PostEvent) and warning.reason == pods.TRANSLATION_WARNING_REASON
    assert "interfaceName 'eth9' is not applied" in warning.message and not warning.while_gated


def test_a_pod_naming_a_network_that_does_not_exist_waits_and_says_why_while_it_is_gated():
    actions = plans.selection(pod([DEFAULT, {"podNetworkName": "blue"}, {"podNetworkName": "gone"}], gated=True),
                              WORLD, BridgeSettings())
    assert kinds(actions) == ["Wait", "PostEvent"]
    wait, gated = actions.steps
    assert isinstance(wait, Wait) and 'PodNetwork gone does not exist' in wait.reason
    assert isinstance(gated, PostEvent) and gated.reason == pods.GATED_REASON and gated.while_gated
    assert gated.message.startswith('podnetwork "gone" not found; the pod stays behind scheduling gate')
    # No translation: no reverse status either.
    assert actions.waits is True and actions.translation is None


def test_a_pod_naming_a_network_not_yet_ready_waits_after_its_translation_s_notices():
    actions = plans.selection(pod([DEFAULT, {"podNetworkName": "red"}], gated=True), WORLD, BridgeSettings())
    assert kinds(actions) == ["Wait", "PostEvent"]
    assert isinstance(actions.steps[0], Wait) and actions.steps[0].reason == "PodNetwork red is not Ready"
    assert actions.waits is True and actions.translation is not None  # the reverse status still follows


def test_a_network_of_another_provider_releases_the_gate_for_good_after_saying_the_pod_waits():
    actions = plans.selection(pod([DEFAULT, {"podNetworkName": "other"}], gated=True), WORLD, BridgeSettings())
    assert kinds(actions) == ["Wait", "Release"]
    release = actions.steps[1]
    assert isinstance(release, Release) and "has provider 'example.com/other'" in release.why
    assert release.patch.body == {"spec": {"schedulingGates": [{"name": "other.example/gate"}]},
                                  "metadata": {"resourceVersion": "7"}}
    assert actions.waits is True


def test_a_pod_the_bridge_writes_nothing_for_loses_the_gate_and_waits_for_nothing():
    assert kinds(plans.selection(pod(None, gated=True), WORLD, BridgeSettings())) == ["Release"]
    invalid = plans.selection(pod([{"podNetworkName": 7}], gated=True), WORLD, BridgeSettings())  # type: ignore[dict-item]
    assert kinds(invalid) == ["Release"] and invalid.ignored
    assert isinstance(invalid.steps[0], Release) and invalid.steps[0].why == "its networks annotation is invalid"
    assert invalid.waits is False and invalid.translation is None
    assert plans.selection(pod(None), WORLD, BridgeSettings()) == plans.PodActions()


def test_an_ended_pod_holds_nothing():
    ended = pod([DEFAULT, {"podNetworkName": "blue"}], gated=True).model_copy(
        update={"status": Pod.model_validate({"status": {"phase": "Succeeded"}}).status})
    assert plans.selection(ended, WORLD, BridgeSettings()) == plans.PodActions()


def test_without_selection_writing_the_gate_goes_and_the_pod_s_waiting_is_left_as_it_was():
    actions = plans.selection(pod([DEFAULT, {"podNetworkName": "blue"}], gated=True), WORLD,
                              BridgeSettings(write_selection=False))
    assert kinds(actions) == ["Release"] and actions.waits is None and actions.translation is not None


def test_a_hand_written_selection_that_disagrees_is_reported_after_the_gate_goes():
    actions = plans.selection(pod([DEFAULT, {"podNetworkName": "blue"}], gated=True,
                                  **{npwg.NETWORKS_ANNOTATION: "nets/red"}), WORLD, BridgeSettings())
    assert kinds(actions) == ["WriteSelection", "PostEvent"]
    write, report = actions.steps
    assert isinstance(write, WriteSelection) and not write.writes_selection and write.removes_gate
    assert isinstance(report, PostEvent) and report.reason == pods.CONFLICT_REASON


def test_a_missing_gateway_is_posted_and_the_pod_waits_for_its_nad_without_a_selection():
    actions = plans.selection(pod([DEFAULT, {"podNetworkName": "blue", "isDefaultGW4": True}], gated=True),
                              WORLD, BridgeSettings())
    assert kinds(actions) == ["PostEvent"]
    assert isinstance(actions.steps[0], PostEvent) and actions.steps[0].reason == pods.GATEWAY_MISSING_REASON
    assert actions.waits is True


STATUS = json.dumps([{"name": "cluster", "interface": "eth0", "ips": ["10.0.0.5/24"], "default": True},
                     {"name": "nets/blue", "interface": "net1", "ips": ["10.1.0.7/24"]}])


def test_the_reverse_status_is_written_once_per_network_status_and_not_again_from_an_older_copy():
    attached = pod([DEFAULT, {"podNetworkName": "blue"}], **{npwg.NETWORK_STATUS_ANNOTATION: STATUS})
    translation = plans.selection(attached, WORLD, BridgeSettings()).translation
    assert translation is not None
    first = plans.reverse_status(attached, translation, BridgeSettings(), None)
    assert first.patch is not None and first.keys == [constants.POD_IPS_ANNOTATION, constants.ATTACHMENTS_ANNOTATION]
    assert first.patch.decided_from is None  # it writes only what network-status says
    # The same copy of the pod again (a replayed watch event): written already.
    assert plans.reverse_status(attached, translation, BridgeSettings(), first.written) == plans.ReverseStatus()
    only_ips = plans.reverse_status(attached, translation, BridgeSettings(write_attachments=False), None)
    assert only_ips.keys == [constants.POD_IPS_ANNOTATION]
    off = BridgeSettings(write_pod_ips=False, write_attachments=False)
    assert plans.reverse_status(attached, translation, off, None) == plans.ReverseStatus()
    broken = pod([DEFAULT, {"podNetworkName": "blue"}], **{npwg.NETWORK_STATUS_ANNOTATION: "{not json"})
    assert plans.reverse_status(broken, translation, BridgeSettings(), None).problem


def test_params_ready_is_planned_for_the_bridge_s_objects_only_and_only_when_it_changes():
    action = plans.params_action((constants.PODNETWORK_KIND, "", "red"), WORLD, now="2026-01-01T00:00:00Z")
    assert action is not None and action.before is None
    assert (action.desired.status, action.desired.reason) == ("True", "ParametersReady")
    assert action.patch.status and action.patch.key == "red"
    assert plans.params_action((constants.PODNETWORK_KIND, "", "other"), WORLD, now="x") is None
    assert plans.params_action((constants.PODNETWORK_KIND, "", "gone"), WORLD, now="x") is None
    conditions = action.patch.body["status"]["conditions"]
    settled = translate.Objects.from_objects([{**podnetwork("red"), "status": {"conditions": conditions}},
                                              nad("red")])
    assert plans.params_action((constants.PODNETWORK_KIND, "", "red"), settled, now="y") is None
