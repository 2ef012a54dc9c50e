"""The networkData the driver writes on a prepared claim once the pod's network is attached
(bridge.dra.driver.netstatus), and the claims a pod uses (bridge.dra.driver.reporter.claim_names)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from lightkube.models import resource_v1

from bridge.dra.driver import claims, netstatus, reporter
from bridge.dracontract import state

DRIVER = "dra.multinetwork.x-k8s.io"


def prepared(*devices: tuple[str, str | None, str | None]) -> state.PreparedClaim:
    return state.PreparedClaim(uid="u1", namespace="ns", name="c", prepared_at="t", devices=[
        state.PreparedDevice(request_names=["net0"], pool="n1", device=d, podnetwork=pn, share_id=share)
        for d, pn, share in devices])


def pod(pod_ips: Any, status: Any) -> dict[str, Any]:
    return {"metadata": {"annotations": {
        "multinetwork.x-k8s.io/pod-ips": pod_ips if isinstance(pod_ips, str) else json.dumps(pod_ips),
        "k8s.v1.cni.cncf.io/network-status": status if isinstance(status, str) else json.dumps(status)}}}


ATTACHED = pod([{"ip": "10.252.7.5", "podNetwork": "default", "interfaceName": "eth0"},
                {"ip": "10.252.9.4", "podNetwork": "blue", "interfaceName": "blue0"},
                {"ip": "fd00::4", "podNetwork": "blue", "interfaceName": "blue0"}],
               [{"name": "k", "interface": "eth0", "ips": ["10.252.7.5/24"], "mac": "aa:00:00:00:00:01"},
                {"name": "ns/blue", "interface": "blue0", "ips": ["10.252.9.4/24", "fd00:0::4/64", "bogus"],
                 "mac": "aa:00:00:00:00:02"}])


def test_an_attached_device_reports_its_interface_cidrs_and_mac_with_a_ready_condition() -> None:
    (status,) = netstatus.device_statuses(prepared(("blue", "blue", "s-1")), ATTACHED, driver=DRIVER, now="T")
    assert status == {
        "driver": DRIVER, "pool": "n1", "device": "blue", "shareID": "s-1",
        "networkData": {"interfaceName": "blue0", "ips": ["10.252.9.4/24", "fd00::4/64"],
                        "hardwareAddress": "aa:00:00:00:00:02"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "InterfaceAttached",
                        "message": "PodNetwork blue is attached as blue0", "lastTransitionTime": "T"}]}
    # the shape of the v1 API's AllocatedDeviceStatus (lightkube's model, from the OpenAPI)
    model = msgspec.convert({**status, "conditions": [{**status["conditions"][0], "lastTransitionTime":
                                                          "2026-01-01T00:00:00Z"}]},
                            resource_v1.AllocatedDeviceStatus, strict=False)
    assert model.networkData is not None and model.networkData.interfaceName == "blue0"


def test_a_device_not_attached_yet_or_of_an_unknown_podnetwork_has_no_entry() -> None:
    assert netstatus.device_statuses(prepared(("red", "red", None), ("x", None, None)), ATTACHED, driver=DRIVER,
                                     now="T") == []
    assert netstatus.device_statuses(prepared(("blue", "blue", None)), {"metadata": {}}, driver=DRIVER,
                                     now="T") == []


def test_unreadable_annotations_are_left_out_never_a_failure() -> None:
    assert netstatus.device_statuses(prepared(("blue", "blue", None)), pod("{", "["), driver=DRIVER, now="T") == []
    broken_status = pod([{"podNetwork": "blue", "interfaceName": "blue0"}], "[1]")
    (status,) = netstatus.device_statuses(prepared(("blue", "blue", None)), broken_status, driver=DRIVER, now="T")
    assert status["networkData"] == {"interfaceName": "blue0"} and "shareID" not in status
    not_strings = {"metadata": {"annotations": {"multinetwork.x-k8s.io/pod-ips": [1]}}}
    assert netstatus.device_statuses(prepared(("blue", "blue", None)), not_strings, driver=DRIVER, now="T") == []


def test_the_comparison_key_ignores_only_the_conditions_times() -> None:
    one = netstatus.device_statuses(prepared(("blue", "blue", None)), ATTACHED, driver=DRIVER, now="T1")
    two = netstatus.device_statuses(prepared(("blue", "blue", None)), ATTACHED, driver=DRIVER, now="T2")
    assert netstatus.unchanged_key(one) == netstatus.unchanged_key(two)
    other = json.loads(json.dumps(two))
    other[0]["networkData"]["ips"] = []
    assert netstatus.unchanged_key(one) != netstatus.unchanged_key(other)


def test_a_shared_devices_allocations_keep_their_share_ids() -> None:
    claim = {"metadata": {"namespace": "ns", "name": "c", "uid": "u"}, "status": {"allocation": {"devices": {
        "results": [{"request": "net0", "driver": DRIVER, "pool": "n1", "device": "blue", "shareID": "a"},
                    {"request": "net1", "driver": DRIVER, "pool": "n1", "device": "blue", "shareID": "b"}]}}}}
    assert claims.allocated(claim, uid="u", driver=DRIVER, node="n1") == [
        claims.Allocated(("net0",), "n1", "blue", "a"), claims.Allocated(("net1",), "n1", "blue", "b")]


def test_the_claims_of_a_pod_from_its_status_and_its_spec() -> None:
    assert reporter.claim_names({
        "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "shared"},
                                    {"name": "b", "resourceClaimTemplateName": "t"}]},
        "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x1"}]}}) == ["p-b-x1", "shared"]
    assert reporter.claim_names({"metadata": {}}) == []
    assert reporter.claim_names({"spec": {"resourceClaims": None}, "status": {"resourceClaimStatuses": None}}) == []
    assert reporter.claim_names({"spec": {"resourceClaims": "shared"}}) == []  # not a v1 Pod: nothing to report
