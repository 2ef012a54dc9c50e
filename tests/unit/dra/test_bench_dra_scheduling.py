"""The DRA scheduling benchmark's own parts (benchmarks/bench_dra_scheduling.py, docs/benchmarks.md):
the cluster it writes (each network on half the nodes, the slices the driver's code builds for each
node), the pods of each arm, the check that a placed pod's node offers its networks, and its
reading of kube-scheduler's metrics. The benchmark itself never runs in the suite (it needs a kit
cluster for minutes and asserts no timing); these are the parts whose mistakes would print wrong
figures without anyone noticing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_dra_scheduling.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_dra_scheduling", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_dra_scheduling", module)  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _ready_podnetwork(name: str) -> dict[str, Any]:
    return {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": name},
            "spec": {"provider": "example.com/bench", "enabled": True},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


def test_each_network_is_offered_by_half_of_1000_nodes(bench: ModuleType) -> None:
    counts = {n: sum(n in bench.offered(i) for i in range(1000)) for n in bench.NETWORKS}
    assert counts["blue"] == counts["green"] == counts["red"] == 500
    assert 490 <= counts["yellow"] <= 510  # bit 3 of 0..999: 1,000 is no multiple of 16


def test_a_nodes_slices_are_the_drivers_with_one_shareable_device_per_offered_network(bench: ModuleType) -> None:
    podnetworks = [_ready_podnetwork(n) for n in ["default", *bench.NETWORKS]]
    for i in (0, 5, 15):
        node = bench.node_body(i)
        (body,) = bench.slice_bodies(podnetworks, node)
        spec = body["spec"]
        assert spec["nodeName"] == spec["pool"]["name"] == bench.node_name(i)
        assert spec["driver"] == bench.DRIVER and spec["pool"]["generation"] == 1
        devices = {d["attributes"]["podNetwork"]["string"]: d for d in spec["devices"]}
        assert sorted(devices) == sorted(bench.offered(i))
        assert all(d["allowMultipleAllocations"] for d in devices.values())


def test_dra_pods_carry_the_admissions_claims_and_the_others_none(bench: ModuleType) -> None:
    plain, templated, claimed = (bench.pod_body("p", 1, arm) for arm in ("none", "dra", "dra-claims"))
    assert "resourceClaims" not in plain["spec"] and "resourceClaims" not in bench.pod_body("p", 1, "extender")["spec"]
    # pod 1 names green and red: one claim each, from each PodNetwork's template, as the bridge's admission adds
    assert templated["spec"]["resourceClaims"] == [
        {"name": "pn-green", "resourceClaimTemplateName": "podnetwork-green"},
        {"name": "pn-red", "resourceClaimTemplateName": "podnetwork-red"}]
    assert claimed["spec"]["resourceClaims"] == [{"name": "pn-green", "resourceClaimName": "p-pn-green"},
                                                 {"name": "pn-red", "resourceClaimName": "p-pn-red"}]
    # the claims made beforehand ask what the templates' claims ask
    made = bench.claim_bodies("p", 1)
    assert [c["metadata"]["name"] for c in made] == ["p-pn-green", "p-pn-red"]
    (request,) = made[1]["spec"]["devices"]["requests"]
    assert request["exactly"]["selectors"][0]["cel"]["expression"].endswith('podNetwork == "red"')


def test_the_one_cel_claims_name_the_selector_less_class_and_check_the_driver_in_their_one_selector(
        bench: ModuleType) -> None:
    (claim,) = bench.claim_bodies("p", 0, one_cel=True)
    assert bench.pod_body("p", 0, "dra-one-cel")["spec"]["resourceClaims"] == [
        {"name": "pn-blue", "resourceClaimName": "p-pn-blue"}]
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == bench.ONE_CEL_CLASS != bench.DRIVER
    (selector,) = request["exactly"]["selectors"]
    assert selector["cel"]["expression"] == (
        f'device.driver == "{bench.DRIVER}" && device.attributes["{bench.DRIVER}"].podNetwork == "blue"')


def test_a_pod_on_a_node_without_its_network_is_caught(bench: ModuleType) -> None:
    check = bench.Bench.check
    # pod 1 needs green and red (bits 1 and 2): node 6 offers both, node 2 only green
    check(None, "dra", ["a", "b"], [(0.0, bench.node_name(1)), (0.0, bench.node_name(6))])
    with pytest.raises(AssertionError, match="1 pods on nodes without their networks"):
        check(None, "extender", ["a", "b"], [(0.0, bench.node_name(1)), (0.0, bench.node_name(2))])
    check(None, "none", ["a", "b"], [(0.0, bench.node_name(0)), (0.0, bench.node_name(0))])


def test_the_metrics_read_as_milliseconds_per_pod(bench: ModuleType) -> None:
    text = "\n".join([
        '# TYPE scheduler_framework_extension_point_duration_seconds histogram',
        'scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",profile="p",'
        'status="Success"} 0.5',
        'scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",profile="p",'
        'status="Success"} 100',
        'scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",profile="p",'
        'status="Unschedulable"} 9',
        'scheduler_scheduling_attempt_duration_seconds_sum{profile="p",result="scheduled"} 2',
        'scheduler_scheduling_attempt_duration_seconds_count{profile="p",result="scheduled"} 1000',
        'rest_client_rate_limiter_duration_seconds_sum{host="h",verb="POST"} 1.5',
        'rest_client_rate_limiter_duration_seconds_count{host="h",verb="POST"} 3',
        'scheduler_framework_extension_point_duration_seconds_bucket{extension_point="Filter",le="0.1"} 7'])
    assert bench.breakdown(text) == pytest.approx({"Filter": 5.0, "attempt": 2.0, "rate limiter POST": 500.0})


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def test_a_cpu_profile_reads_as_each_functions_flat_and_cumulative_share(bench: ModuleType) -> None:
    """A profile as Go's runtime/pprof writes it (profile.proto: packed location ids and values, the
    string table, functions, locations with lines): `alloc` called by `filter` called by `main`."""
    import gzip

    strings = [b"", b"main", b"filter", b"alloc"]
    message = b"".join(_field(6, s) for s in strings) + _field(9, 1_700_000_000) + _field(10, 3_000_000_000)
    for ident in (1, 2, 3):  # function i is named strings[i], at location i
        message += _field(5, _field(1, ident) + _field(2, ident))
        message += _field(4, _field(1, ident) + _field(4, _field(1, ident)))

    def sample(stack: list[int], nanoseconds: int) -> bytes:
        ids = b"".join(_varint(i) for i in stack)
        values = _varint(1) + _varint(nanoseconds)
        return _field(2, _field(1, ids) + _field(2, values))

    message += sample([3, 2, 1], 600) + sample([2, 1], 300) + sample([1], 100)
    top = bench.pprof_top(gzip.compress(message))
    assert top == [("main", pytest.approx(0.1), pytest.approx(1.0)), ("filter", pytest.approx(0.3), pytest.approx(0.9)),
                   ("alloc", pytest.approx(0.6), pytest.approx(0.6))]


def test_the_exclusive_shape_drops_only_allow_multiple_allocations_and_the_shared_one_restores_it(
        bench: ModuleType) -> None:
    podnetworks = [_ready_podnetwork(n) for n in ["default", *bench.NETWORKS]]
    (body,) = bench.slice_bodies(podnetworks, bench.node_body(5))
    driver_devices = body["spec"]["devices"]
    exclusive = bench.shaped(driver_devices, shared=False)
    assert [d["name"] for d in exclusive] == [d["name"] for d in driver_devices]
    assert all("allowMultipleAllocations" not in d for d in exclusive)
    assert [d["attributes"] for d in exclusive] == [d["attributes"] for d in driver_devices]
    assert bench.shaped(exclusive, shared=True) == driver_devices
    assert set(bench.EXCLUSIVE) <= set(bench.MADE_CLAIMS)


def test_the_per_class_claims_name_their_networks_class_and_select_nothing_themselves(bench: ModuleType) -> None:
    green, red = bench.claim_bodies("p", 1, per_class=True)
    assert [c["metadata"]["name"] for c in (green, red)] == ["p-pn-green", "p-pn-red"]
    (request,) = red["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": bench.network_class("red")}
    assert bench.network_class("red") != bench.network_class("green") != bench.DRIVER


def test_only_the_stable_arms_scheduler_turns_the_beta_dra_gates_off(bench: ModuleType, tmp_path: Path) -> None:
    class FakeCluster:
        root = tmp_path
        bins = {"kube-scheduler": tmp_path / "kube-scheduler"}
        ports: dict[str, int] = {}

    (tmp_path / "run").mkdir()
    made = bench.schedulers(FakeCluster())
    assert made["dra-stable"].gates == bench.STABLE_GATES and "DRAConsumableCapacity=false" in bench.STABLE_GATES
    assert all(s.gates == "" for arm, s in made.items() if arm != "dra-stable")
