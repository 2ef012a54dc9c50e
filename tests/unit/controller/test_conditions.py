"""KEP-3698 condition tables and lifecycle phases of PodNetwork and PodNetworkAttachment."""

from __future__ import annotations

from typing import Any

import pytest

from podnetwork.ground import constants
from podnetwork.kep import api, conditions
from podnetwork.kep.conditions import Phase, Usage

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"
T2 = "2026-01-01T00:10:00Z"


def typed(obj: dict[str, Any] | None) -> Any:
    """The object as the controller reads it from the API: in its model."""
    return None if obj is None else api.parse(obj)


def pn(name: str = "blue", *, enabled: bool = True, refs: bool = False, params: str | None = None,
       generation: int = 1, conds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"enabled": enabled}
    if refs:
        spec["parametersRefs"] = [{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition",
                                   "name": "nad", "namespace": "default"}]
    status_conds = list(conds or [])
    if params is not None:
        status_conds.append({"type": "ParamsReady", "status": params, "reason": "Checked",
                             "message": "nad ok" if params == "True" else "nad missing",
                             "lastTransitionTime": T0})
    obj: dict[str, Any] = {"apiVersion": constants.API_VERSION, "kind": "PodNetwork",
                           "metadata": {"name": name, "generation": generation}, "spec": spec}
    if status_conds:
        obj["status"] = {"conditions": status_conds}
    return obj


def pna(pn_name: str = "blue", *, refs: bool = False, params: str | None = None) -> dict[str, Any]:
    obj = pn("fast", refs=refs, params=params)
    obj["kind"] = "PodNetworkAttachment"
    obj["metadata"]["namespace"] = "ns"
    obj["spec"] = {"podNetworkName": pn_name, **({"parametersRefs": obj["spec"]["parametersRefs"]} if refs else {})}
    return obj


def with_conditions(obj: dict[str, Any], conds: list[dict[str, Any]] | None) -> dict[str, Any]:
    assert conds is not None
    return {**obj, "status": {"conditions": conds}}


def ready_of(conds: list[dict[str, Any]] | None) -> dict[str, Any]:
    assert conds is not None
    return next(c for c in conds if c["type"] == "Ready")


# --- PodNetwork Ready: every row of the KEP table ---------------------------------------------

@pytest.mark.parametrize(
    ("obj", "status", "reason"),
    [
        (pn(enabled=False), "False", "AdministrativelyDisabled"),
        (pn(enabled=False, refs=True, params="True"), "False", "AdministrativelyDisabled"),
        (pn(refs=True), "False", "ParamsNotReady"),
        (pn(refs=True, params="False"), "False", "ParamsNotReady"),
        (pn(refs=True, params="Unknown"), "False", "ParamsNotReady"),
        (pn(refs=True, params="True"), "True", "Ready"),
        (pn(), "True", "Ready"),
        (pn(params="False"), "True", "Ready"),  # ParamsReady only matters when parametersRefs is set
    ],
    ids=["disabled", "disabled-wins-over-params", "params-absent", "params-false", "params-unknown",
         "params-true", "no-refs", "no-refs-ignores-params"],
)
def test_podnetwork_ready_follows_the_kep_table(obj, status, reason):
    cond = ready_of(conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T0))
    assert (cond["status"], cond["reason"]) == (status, reason)
    assert cond["observedGeneration"] == 1
    assert cond["lastTransitionTime"] == T0


def test_params_not_ready_message_carries_the_providers_reason():
    desired = conditions.podnetwork_ready(typed(pn(refs=True, params="False")))
    assert desired.message == "ParamsReady is False (Checked: nad missing)"


def test_params_not_ready_message_says_when_provider_has_not_reported():
    assert "has not reported ParamsReady" in conditions.podnetwork_ready(typed(pn(refs=True))).message


# --- PodNetworkAttachment Ready ---------------------------------------------------------------

def ready_pn(**kw: Any) -> dict[str, Any]:
    obj = pn(**kw)
    return with_conditions(obj, conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T0))


@pytest.mark.parametrize(
    ("attachment", "network", "status", "reason"),
    [
        (pna(), None, "False", "PodNetworkNotReady"),
        (pna(), pn(), "False", "PodNetworkNotReady"),  # PodNetwork without conditions yet
        (pna(), ready_pn(enabled=False), "False", "PodNetworkNotReady"),
        (pna(), ready_pn(refs=True, params="False"), "False", "PodNetworkNotReady"),
        (pna(refs=True), ready_pn(), "False", "ParamsNotReady"),
        (pna(refs=True, params="False"), ready_pn(), "False", "ParamsNotReady"),
        (pna(refs=True, params="False"), None, "False", "PodNetworkNotReady"),
        (pna(refs=True, params="True"), ready_pn(), "True", "Ready"),
        (pna(), ready_pn(), "True", "Ready"),
    ],
    ids=["pn-missing", "pn-created", "pn-disabled", "pn-params", "params-absent", "params-false",
         "pn-missing-wins", "params-true", "no-refs"],
)
def test_attachment_ready_follows_the_kep_table(attachment, network, status, reason):
    cond = ready_of(conditions.attachment_conditions(typed(attachment), typed(network), conditions.NOT_IN_USE, now=T0))
    assert (cond["status"], cond["reason"]) == (status, reason)


def test_attachment_message_names_the_missing_podnetwork():
    assert conditions.attachment_ready(typed(pna("purple")), None).message == 'PodNetwork "purple" not found'


def test_attachment_message_names_the_unready_podnetwork_and_its_reason():
    msg = conditions.attachment_ready(typed(pna("blue")), typed(ready_pn(enabled=False))).message
    assert msg == 'PodNetwork "blue" is not Ready: its Ready condition is False (AdministrativelyDisabled)'


# --- lastTransitionTime, observedGeneration, no hot loop -------------------------------------

def test_unchanged_object_produces_no_write():
    first = ready_pn()
    assert conditions.podnetwork_conditions(typed(first), conditions.NOT_IN_USE, now=T1) is None


def test_provider_condition_is_kept_untouched():
    obj = pn(refs=True, params="True")
    conds = conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T1)
    assert conds is not None
    params = next(c for c in conds if c["type"] == "ParamsReady")
    assert params == obj["status"]["conditions"][0]


def test_transition_time_moves_only_when_status_changes():
    obj = pn(refs=True, params="False")
    obj = with_conditions(obj, conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T0))
    # the provider's message changes: Ready's message changes, its status does not
    obj["status"]["conditions"][0]["message"] = "nad still missing"
    conds = conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T1)
    assert ready_of(conds)["lastTransitionTime"] == T0
    assert "nad still missing" in ready_of(conds)["message"]
    # the provider turns ParamsReady True: Ready flips and its time moves
    obj = with_conditions(obj, conds)
    obj["status"]["conditions"][0].update(status="True", message="nad ok")
    conds = conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T2)
    assert (ready_of(conds)["status"], ready_of(conds)["lastTransitionTime"]) == ("True", T2)


def test_new_generation_is_observed_without_moving_transition_time():
    obj = ready_pn()
    obj["metadata"]["generation"] = 2
    conds = conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T1)
    assert ready_of(conds)["observedGeneration"] == 2
    assert ready_of(conds)["lastTransitionTime"] == T0


def test_ready_goes_false_and_back_to_true_with_new_transition_times():
    obj = ready_pn()
    obj["spec"]["enabled"] = False
    obj = with_conditions(obj, conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T1))
    assert (ready_of(obj["status"]["conditions"])["status"], ready_of(obj["status"]["conditions"])["lastTransitionTime"]) == ("False", T1)
    obj["spec"]["enabled"] = True
    conds = conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T2)
    assert (ready_of(conds)["status"], ready_of(conds)["lastTransitionTime"]) == ("True", T2)


def test_merge_keeps_unknown_condition_positions():
    existing = [{"type": "Other", "status": "True", "reason": "X", "message": "", "lastTransitionTime": T0}]
    merged = conditions.merge(existing, [conditions.in_use(conditions.NOT_IN_USE)], now=T1, generation=None)
    assert merged is not None
    assert [c["type"] for c in merged] == ["Other", "InUse"]
    assert "observedGeneration" not in merged[1]


def test_status_patch_carries_resource_version_for_optimistic_concurrency():
    obj = pn()
    obj["metadata"]["resourceVersion"] = "42"
    patch = conditions.status_patch(typed(obj), [])
    assert patch == {"status": {"conditions": []}, "metadata": {"resourceVersion": "42"}}


# --- InUse condition -------------------------------------------------------------------------

def test_in_use_message_names_pods_and_counts():
    usage = Usage(pods=3, sample=("ns/a", "ns/b", "ns/c"))
    assert conditions.in_use(usage).message == "in use by 3 pods: ns/a, ns/b, ns/c"
    assert conditions.in_use(usage).status == "True"


def test_in_use_message_names_at_most_five_and_says_how_many_more():
    usage = Usage(pods=7, attachments=1, sample=("pna ns/x", "ns/a", "ns/b", "ns/c", "ns/d"))
    assert conditions.in_use(usage).message == (
        "in use by 1 attachment and 7 pods: pna ns/x, ns/a, ns/b, ns/c, ns/d and 3 more"
    )


def test_not_in_use_is_false():
    desired = conditions.in_use(conditions.NOT_IN_USE)
    assert (desired.status, desired.reason) == ("False", "NotInUse")


def test_in_use_count_change_rewrites_message_but_keeps_transition_time():
    obj = with_conditions(pn(), conditions.podnetwork_conditions(typed(pn()), Usage(pods=1, sample=("ns/a",)), now=T0))
    conds = conditions.podnetwork_conditions(typed(obj), Usage(pods=2, sample=("ns/a", "ns/b")), now=T1)
    cond = next(c for c in conds if c["type"] == "InUse")
    assert (cond["message"], cond["lastTransitionTime"]) == ("in use by 2 pods: ns/a, ns/b", T0)


# --- lifecycle phases (KEP "Lifecycle") ------------------------------------------------------

def test_lifecycle_walks_created_ready_inuse_ready_disabled_notready():
    obj = pn(refs=True)
    assert conditions.phase(typed(obj)) == Phase.CREATED
    obj = with_conditions(obj, conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T0))
    assert conditions.phase(typed(obj)) == Phase.NOT_READY
    obj["status"]["conditions"].append({"type": "ParamsReady", "status": "True", "reason": "Ok",
                                        "message": "", "lastTransitionTime": T0})
    obj = with_conditions(obj, conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T1))
    assert conditions.phase(typed(obj)) == Phase.READY
    obj = with_conditions(obj, conditions.podnetwork_conditions(typed(obj), Usage(pods=1, sample=("ns/a",)), now=T1))
    assert conditions.phase(typed(obj)) == Phase.IN_USE
    obj = with_conditions(obj, conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T2))
    assert conditions.phase(typed(obj)) == Phase.READY
    obj["spec"]["enabled"] = False
    obj = with_conditions(obj, conditions.podnetwork_conditions(typed(obj), conditions.NOT_IN_USE, now=T2))
    assert conditions.phase(typed(obj)) == Phase.DISABLED
    assert ready_of(obj["status"]["conditions"])["reason"] == "AdministrativelyDisabled"


def test_finalizer_alone_means_in_use():
    obj = ready_pn()
    obj["metadata"]["finalizers"] = [constants.IN_USE_FINALIZER]
    assert conditions.phase(typed(obj)) == Phase.IN_USE
