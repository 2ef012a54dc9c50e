"""The `default` PodNetwork and the node condition DefaultPodNetworkReady (KEP "Default PodNetwork")."""

from __future__ import annotations

from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.core import Node
from podnetwork.kep import api, conditions, defaultnet, validation

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"


def pn_model(obj: dict[str, Any] | None) -> api.PodNetwork | None:
    return None if obj is None else api.PodNetwork.model_validate(obj)


def node(override: str | None = None, conds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "n1"}
    if override is not None:
        meta["annotations"] = {constants.NODE_DEFAULT_PODNETWORK_ANNOTATION: override}
    return {"kind": "Node", "metadata": meta, "status": {"conditions": conds or [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": T0}]}}


def ready(name: str, *, is_ready: bool = True) -> dict[str, Any]:
    obj = defaultnet.podnetwork()
    obj["metadata"]["name"] = name
    if not is_ready:
        obj["spec"]["enabled"] = False
    obj["status"] = {"conditions": conditions.podnetwork_conditions(api.parse(obj), conditions.NOT_IN_USE, now=T0)}
    return obj


def only(patch: dict[str, Any] | None) -> dict[str, Any]:
    assert patch is not None
    [cond] = patch["status"]["conditions"]
    return cond


def test_default_podnetwork_is_a_valid_podnetwork_named_default():
    obj = defaultnet.podnetwork("example.com/net")
    assert obj["metadata"]["name"] == "default"
    assert obj["spec"]["provider"] == "example.com/net"
    assert validation.validate_podnetwork(obj) == []


def test_node_reports_missing_default_with_the_kep_message():
    cond = only(defaultnet.node_condition_patch(Node.model_validate(node()), None, now=T0))
    assert cond["type"] == "DefaultPodNetworkReady"
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "DefaultPodNetworkNotFound", "default PodNetwork not found in API")


def test_node_reports_ready_default():
    cond = only(defaultnet.node_condition_patch(Node.model_validate(node()), pn_model(ready("default")), now=T0))
    assert (cond["status"], cond["reason"]) == ("True", "DefaultPodNetworkReady")
    assert cond["lastHeartbeatTime"] == cond["lastTransitionTime"] == T0


def test_node_reports_unready_default_with_its_reason():
    cond = only(defaultnet.node_condition_patch(Node.model_validate(node()), pn_model(ready("default", is_ready=False)), now=T0))
    assert cond["status"] == "False"
    assert "AdministrativelyDisabled" in cond["message"]


def test_default_being_deleted_counts_as_missing():
    pn = ready("default")
    pn["metadata"]["deletionTimestamp"] = T0
    assert only(defaultnet.node_condition_patch(Node.model_validate(node()), pn_model(pn), now=T0))["reason"] == "DefaultPodNetworkNotFound"


def test_node_override_names_another_default():
    n = node(override="blue")
    assert defaultnet.node_default_name(Node.model_validate(n)) == "blue"
    cond = only(defaultnet.node_condition_patch(Node.model_validate(n), None, now=T0))
    assert cond["message"] == 'default PodNetwork "blue" (node override) not found in API'
    assert only(defaultnet.node_condition_patch(Node.model_validate(n), pn_model(ready("blue")), now=T0))["status"] == "True"


def test_empty_override_falls_back_to_default():
    assert defaultnet.node_default_name(Node.model_validate(node(override="  "))) == "default"


def test_steady_node_gets_no_patch_and_transition_keeps_its_time():
    first = only(defaultnet.node_condition_patch(Node.model_validate(node()), None, now=T0))
    steady = node(conds=[first])
    assert defaultnet.node_condition_patch(Node.model_validate(steady), None, now=T1) is None
    flipped = only(defaultnet.node_condition_patch(Node.model_validate(steady), pn_model(ready("default")), now=T1))
    assert (flipped["status"], flipped["lastTransitionTime"]) == ("True", T1)
