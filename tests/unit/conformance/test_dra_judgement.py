"""What the DRAPlacement tests read of a DRA driver's ResourceSlices and of a pod's ResourceClaim, and the
wrong answers they name (a device of an older pool generation, of another driver, on another node, for
another PodNetwork, a claim not reserved for the pod); and which tests the flags select."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from conformance.kep import command
from conformance.kep.tests import dra

DRIVER = "dra.multinetwork.x-k8s.io"


def resource_slice(node: str | None, *devices: dict[str, Any], driver: str = DRIVER, generation: int = 1,
                   pool: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "pool": {"name": pool or node or "all", "generation": generation,
                                                       "resourceSliceCount": 1}, "devices": list(devices)}
    if node is not None:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-x"},
            "spec": spec}


def device(name: str, podnetwork: str | None, *, key: str = "podNetwork", shared: bool = True) -> dict[str, Any]:
    attributes = {} if podnetwork is None else {key: {"string": podnetwork}}
    return {"name": name, "attributes": attributes, "allowMultipleAllocations": shared}


SLICES = [resource_slice("a", device("default", "default"), device("blue", "blue")),
          resource_slice("b", device("default", "default"), device("blue", "blue", shared=False),
                         device("red", "red", key=f"{DRIVER}/podNetwork"))]


def test_each_nodes_devices_are_read_with_the_podnetwork_of_their_attribute_bare_or_qualified() -> None:
    found = dra.offered(SLICES, DRIVER, "podNetwork")
    assert {(d.node, d.device, d.podnetwork, d.shareable) for d in found} == {
        ("a", "default", "default", True), ("a", "blue", "blue", True), ("b", "default", "default", True),
        ("b", "blue", "blue", False), ("b", "red", "red", True)}
    assert dra.offering(found, "blue") == {"a", "b"}
    assert dra.offering(found, "red") == {"b"}
    assert dra.offering(found, "green") == set()


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    older = resource_slice("a", device("green", "green"), generation=1)
    newer = resource_slice("a", device("blue", "blue"), generation=2)
    found = dra.offered([older, newer], DRIVER, "podNetwork")
    assert [(d.device, d.podnetwork) for d in found] == [("blue", "blue")]


def test_slices_of_another_driver_or_of_no_single_node_are_not_read() -> None:
    found = dra.offered([resource_slice("a", device("blue", "blue"), driver="gpu.example.com"),
                         resource_slice(None, device("blue", "blue"))], DRIVER, "podNetwork")
    assert found == []


def test_a_device_without_the_attribute_stands_for_no_podnetwork() -> None:
    (found,) = dra.offered([resource_slice("a", device("x", None))], DRIVER, "podNetwork")
    assert found.podnetwork is None
    (found,) = dra.offered([resource_slice("a", device("x", "blue", key="other"))], DRIVER, "podNetwork")
    assert found.podnetwork is None


def test_a_malformed_slice_reads_as_offering_nothing_rather_than_raising() -> None:
    broken = {"spec": {"driver": DRIVER, "nodeName": "a", "pool": "not an object", "devices": "nor a list"}}
    assert dra.offered([broken], DRIVER, "podNetwork") == []


def claim(pool: str = "b", name: str = "red", *, driver: str = DRIVER, reserved: str = "uid-1",
          allocated: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": reserved}]}
    if allocated:
        status["allocation"] = {"devices": {"results": [
            {"request": "network", "driver": driver, "pool": pool, "device": name, "shareID": "s1"}]}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "p-network-x"},
            "status": status}


DEVICES = dra.offered(SLICES, DRIVER, "podNetwork")


def test_a_claim_allocated_the_nodes_device_for_the_podnetwork_and_reserved_for_the_pod_passes() -> None:
    assert dra.allocation_problem(claim(), DRIVER, DEVICES, "red", "b", "uid-1") is None


@pytest.mark.parametrize(("got", "podnetwork", "node", "said"), [
    (None, "red", "b", "the claim does not exist"),
    (claim(allocated=False), "red", "b", "the claim is not allocated"),
    (claim(driver="gpu.example.com"), "red", "b", "of driver gpu.example.com, not dra.multinetwork.x-k8s.io"),
    (claim(pool="c"), "red", "b", "the allocated device c/red is in no ResourceSlice"),
    (claim(pool="a", name="blue"), "red", "b", "stands for PodNetwork blue on node a, not red on b"),
    (claim(), "red", "a", "stands for PodNetwork red on node b, not red on a"),
    (claim(reserved="uid-2"), "red", "b", "not reserved for the pod"),
])
def test_a_wrong_claim_is_named(got: dict[str, Any] | None, podnetwork: str, node: str, said: str) -> None:
    problem = dra.allocation_problem(got, DRIVER, DEVICES, podnetwork, node, "uid-1")
    assert problem is not None and said in problem, problem


def test_a_claim_with_two_results_is_not_the_one_device_asked_for() -> None:
    two = claim()
    results = two["status"]["allocation"]["devices"]["results"]
    results.append(dict(results[0]))
    assert dra.allocation_problem(two, DRIVER, DEVICES, "red", "b", "uid-1") == (
        "the allocation has 2 results, not the one device the claim asks for")


def reported(*, interface: str = "dra0", ips: list[str] | None = None, share: str | None = "s1",
             data: bool = True, device: str = "red") -> dict[str, Any]:
    got = claim()
    entry: dict[str, Any] = {"driver": DRIVER, "pool": "b", "device": device}
    if share is not None:
        entry["shareID"] = share
    if data:
        entry["networkData"] = {"interfaceName": interface, "ips": ["10.1.0.5/24", "fd00::5/64"] if ips is None
                                else ips, "hardwareAddress": "02:00:00:00:00:05"}
    got["status"]["devices"] = [{"driver": "other.example.com", "pool": "b", "device": "red",
                                 "networkData": {"interfaceName": "dra0"}}, entry]
    return got


ADDRESSES = {"10.1.0.5", "fd00::5"}


def test_network_data_naming_the_pods_interface_and_its_addresses_as_cidrs_passes() -> None:
    assert dra.network_data_problem(reported(), DRIVER, "dra0", ADDRESSES) is None


@pytest.mark.parametrize(("got", "said"), [
    (claim(allocated=False), "the claim has no device of dra.multinetwork.x-k8s.io allocated"),
    (claim(driver="gpu.example.com"), "the claim has no device of dra.multinetwork.x-k8s.io allocated"),
    (claim(), "status.devices has no entry for the allocated device b/red (shareID s1)"),
    (reported(device="blue"), "no entry for the allocated device b/red"),
    (reported(share="s2"), "no entry for the allocated device b/red (shareID s1)"),
    (reported(share=None), "no entry for the allocated device b/red (shareID s1)"),
    (reported(data=False), "the entry of b/red has no networkData"),
    (reported(interface="net1"), "networkData.interfaceName is 'net1', not the pod's 'dra0'"),
    (reported(ips=["10.1.0.5/24"]), "are not the pod's addresses on the network"),
    (reported(ips=["10.1.0.5", "fd00::5"]), "each as a CIDR"),
    (reported(ips=["10.1.0.5/24", "fd00::5/64", "10.1.0.9/24"]), "are not the pod's addresses"),
    (reported(ips=["10.1.0.5/24", "nonsense/64"]), "holds what is no CIDR"),
])
def test_wrong_network_data_is_named(got: dict[str, Any], said: str) -> None:
    problem = dra.network_data_problem(got, DRIVER, "dra0", ADDRESSES)
    assert problem is not None and said in problem, problem


def test_the_claim_made_for_a_pods_entry_is_read_from_its_status() -> None:
    pod = {"status": {"resourceClaimStatuses": [{"name": "other", "resourceClaimName": "p-other-1"},
                                                {"name": "network", "resourceClaimName": "p-network-2"}]}}
    assert dra.claim_name(pod, "network") == "p-network-2"
    assert dra.claim_name({"status": {}}, "network") is None
    assert dra.claim_name(None, "network") is None


def test_the_selector_is_cel_naming_the_drivers_attribute_and_the_podnetwork_as_string_literals() -> None:
    assert dra.selector(DRIVER, "podNetwork", "blue.example") == (
        'device.attributes["dra.multinetwork.x-k8s.io"].podNetwork == "blue.example"')


def _chosen(*argv: str) -> set[str]:
    parser = argparse.ArgumentParser()
    command.command.configure(parser)
    _, chosen, _ = command.selection(parser.parse_args(list(argv)))
    return {t.name for t in chosen}


def test_the_feature_runs_only_when_named_and_its_flags_default_to_this_projects_driver() -> None:
    mine = {t.name for t in dra.TESTS}
    placement = {"DRADevicesFollowOffers", "DRAPlacedWhereOffered", "DRAPendingWhereOfferedNowhere"}
    assert mine == placement | {"DRANetworkData"}
    assert not mine & _chosen("--profile", "extended")
    assert _chosen("--features", "DRAPlacement") == placement
    assert _chosen("--features", "DRAPlacement,DRANetworkData") == mine
    parser = argparse.ArgumentParser()
    command.command.configure(parser)
    args = parser.parse_args([])
    assert (args.dra_driver, args.dra_attribute, args.dra_device_class, args.dra_network) == (
        DRIVER, "podNetwork", "", "")
