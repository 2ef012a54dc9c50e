"""The KEP's explicit list (KEP-3698 "Attaching PodNetwork to a Pod": "only the listed PodNetworks
will be attached"): a pod whose `multinetwork.x-k8s.io/networks` leaves out `default` gets exactly
the listed networks, the first on the runtime's interface in place of the cluster default network;
a pod selecting by the NPWG annotation alone keeps the default network first (NPWG 6.2).

The decision is pure (`plan.placements`); the rest runs an agent over `MemoryObjects` with a
recording executor standing in for the plugins (tests/cni/test_explicit_list.py runs the real ones).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.cni import plan
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from tests.unit.agent.test_networks import ENV, RUNTIME, add, make, nad, pod, podnetwork

KEP = "multinetwork.x-k8s.io/networks"
NPWG = "k8s.v1.cni.cncf.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
KUBENET = {"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge", "capabilities": {"portMappings": True}}


# --- the decision -----------------------------------------------------------------------------


def test_without_the_explicit_list_the_cluster_default_network_comes_first_on_the_runtimes_interface() -> None:
    assert plan.placements("eth0", [None, "data0", None], explicit=False) == [
        (None, "eth0"), (0, "net1"), (1, "data0"), (2, "net2")]


def test_an_explicit_list_puts_its_first_network_on_the_runtimes_interface_and_names_the_rest_as_before() -> None:
    assert plan.placements("eth0", [None, "data0", None], explicit=True) == [(0, "eth0"), (1, "data0"), (2, "net1")]
    assert plan.placements("eth1", [None], explicit=True) == [(0, "eth1")]


def test_the_first_networks_own_interface_name_is_not_applied_the_runtime_names_that_interface() -> None:
    # The runtime reads the pod's IPs from CNI_IFNAME (CRI); the name is free for the others.
    assert plan.placements("eth0", ["blue0", "blue0"], explicit=True) == [(0, "eth0"), (1, "blue0")]


def test_a_later_network_cannot_take_the_runtimes_interface() -> None:
    with pytest.raises(CNIError) as caught:
        plan.placements("eth0", [None, "eth0"], explicit=True)
    assert caught.value.code == ErrorCode.INVALID_CONFIG and "'eth0' is used by two attachments" in caught.value.msg


def test_an_explicit_list_of_nothing_cannot_be_placed() -> None:
    with pytest.raises(ValueError, match="at least one network"):
        plan.placements("eth0", [], explicit=True)


# --- an ADD --------------------------------------------------------------------------------------


async def status(a: Any) -> list[dict[str, Any]]:
    await a.status.idle()  # written after the answer (bridge.agent.pods.publisher)
    return json.loads((await a.objects.get_pod("ns", "p")).metadata.annotations[STATUS])


def kep(*names: str, **extra: Any) -> dict[str, str]:
    return {KEP: json.dumps([{"podNetworkName": n, **extra.get(n, {})} for n in names])}


async def test_a_pod_listing_only_blue_gets_blue_on_eth0_its_result_and_one_default_status_entry(
    tmp_path: Path,
) -> None:
    a, rec = make(tmp_path, [pod(kep("blue")), nad("blue"), podnetwork("blue", "blue")], default=KUBENET)
    result = await add(a)
    assert rec.adds() == [("eth0", "blue")], "no cluster default network"
    assert result is not None and result["ips"] == [{"address": "10.0.1.2/24", "interface": 0}], "blue's result"
    assert [(s["name"], s["interface"], s["default"]) for s in await status(a)] == [("ns/blue", "eth0", True)]
    record = a.cache.load("c1")
    assert record is not None and record.explicit and record.result == result
    assert [(x.name, x.ifname, x.default) for x in record.attachments] == [("ns/blue", "eth0", True)]


async def test_the_rest_of_an_explicit_list_follows_in_order_and_the_runtime_config_reaches_the_first(
    tmp_path: Path,
) -> None:
    a, rec = make(tmp_path, [pod(kep("blue", "red", red={"interfaceName": "red0"})), nad("blue"), nad("red"),
                             podnetwork("blue", "blue"), podnetwork("red", "red")], default=KUBENET)
    await add(a)
    assert rec.adds() == [("eth0", "blue"), ("red0", "red")]
    (_, _, blue_conf), (_, _, red_conf) = [c for c in rec.calls if c[0] == "ADD"]
    # NPWG 7.5 gives the runtime's runtimeConfig to the network holding the pod's interface.
    assert blue_conf["runtimeConfig"] == {"portMappings": RUNTIME["runtimeConfig"]["portMappings"]}
    assert "runtimeConfig" not in red_conf
    assert [(s["name"], s["default"]) for s in await status(a)] == [("ns/blue", True), ("ns/red", False)]

    rec.calls.clear()
    await a.handle({**ENV, "CNI_COMMAND": "DEL"}, b'{"cniVersion": "1.0.0"}')
    assert [(ifname, conf["name"]) for cmd, ifname, conf in rec.calls] == [("red0", "red"), ("eth0", "blue")]
    assert list(a.cache.container_ids()) == []


@pytest.mark.parametrize("annotations", [
    pytest.param(kep("default", "blue"), id="KEP list naming default"),
    pytest.param(kep("blue", "default"), id="KEP list naming default last"),
    pytest.param({NPWG: "blue"}, id="NPWG selection only (6.2)"),
])
async def test_a_pod_whose_networks_include_the_default_or_select_by_npwg_gets_the_default_network_first(
    tmp_path: Path, annotations: dict[str, str]
) -> None:
    a, rec = make(tmp_path, [pod(annotations), nad("blue"), podnetwork("blue", "blue")], default=KUBENET)
    await add(a)
    assert rec.adds() == [("eth0", "kubenet"), ("net1", "blue")]
    assert [(s["name"], s["default"]) for s in await status(a)] == [("kubenet", True), ("ns/blue", False)]
    record = a.cache.load("c1")
    assert record is not None and not record.explicit


async def test_the_kep_list_wins_over_a_hand_written_npwg_selection_and_is_explicit(tmp_path: Path) -> None:
    a, rec = make(tmp_path, [pod({**kep("red"), NPWG: "blue"}), nad("blue"), nad("red"), podnetwork("red", "red")],
                  default=KUBENET)
    await add(a)
    assert rec.adds() == [("eth0", "red")]


async def test_an_empty_kep_list_admission_refuses_gets_the_cluster_default_network(tmp_path: Path) -> None:
    a, rec = make(tmp_path, [pod({KEP: "[]"})], default=KUBENET)
    await add(a)
    assert rec.adds() == [("eth0", "kubenet")]


async def test_an_explicit_list_needs_no_usable_cluster_default_network(tmp_path: Path) -> None:
    # The default network's configuration is broken; a pod that does not list it does not need it.
    a, rec = make(tmp_path, [pod(kep("blue")), nad("blue"), podnetwork("blue", "blue")],
                  default={"cniVersion": "1.0.0", "name": "kubenet", "type": "no-such-plugin"})
    await add(a)
    assert rec.adds() == [("eth0", "blue")]


async def test_the_selection_says_which_podnetwork_each_network_comes_from(tmp_path: Path) -> None:
    a, _ = make(tmp_path, [pod(kep("blue", "red")), nad("blue"), nad("red"), podnetwork("blue", "blue"),
                           podnetwork("red", "red")], default=KUBENET)
    selected = await a.planner.selection(await a.objects.get_pod("ns", "p"))
    assert selected.explicit and [e.ref for e in selected.elements] == ["ns/blue", "ns/red"]
    assert [(s.pod_network, s.index) for s in selected.sources] == [("blue", 0), ("red", 1)]
    (tmp_path / "npwg").mkdir()
    npwg_only, _ = make(tmp_path / "npwg", [pod({NPWG: "blue"}), nad("blue")], default=KUBENET)
    selected = await npwg_only.planner.selection(await npwg_only.objects.get_pod("ns", "p"))
    assert not selected.explicit and selected.sources == []
