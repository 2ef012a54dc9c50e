"""A pod's networks from its ResourceClaims of the DRA driver (bridge.agent.cni.claims, docs/dra.md).

The pure parts first (the pod's claim names, the PodNetworks its recorded claims hold, the networks
translated from them with or without the annotation, the driver's records read without pydantic),
then ADDs of an agent over `MemoryObjects` with the driver's records written by the driver's own
`state.Store` and a recording executor standing in for the plugins.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.cni import claims
from bridge.agent.daemon import agent, hotplug
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube import objects
from bridge.dracontract import podclaims, prepared, state
from bridge.translate import Network
from podnetwork.ground import core
from tests.unit.agent.test_networks import ENV, RUNTIME, Recorder, nad, podnetwork

KEP = "multinetwork.x-k8s.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
POD_IPS = "multinetwork.x-k8s.io/pod-ips"
KUBENET = {"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"}


def claimed_pod(entries: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None,
                annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations or {}},
            "spec": {"resourceClaims": entries}, "status": {"resourceClaimStatuses": statuses or []}}


def record(uid: str, name: str, *podnetworks: str | None, namespace: str = "ns") -> state.PreparedClaim:
    return state.PreparedClaim(uid=uid, namespace=namespace, name=name, prepared_at="2026-01-01T00:00:00Z",
                               devices=[state.PreparedDevice(request_names=["net0"], pool="n1", device=pn or "gone",
                                                             podnetwork=pn) for pn in podnetworks])


# --- the pod's claims ---------------------------------------------------------------------------


def test_claim_names_follow_spec_order_and_resolve_templates_through_the_status() -> None:
    pod = podclaims.Pod.model_validate(claimed_pod(
        [{"name": "a", "resourceClaimTemplateName": "t"}, {"name": "b", "resourceClaimName": "own"},
         {"name": "c", "resourceClaimTemplateName": "t"}, {"name": "d", "resourceClaimTemplateName": "t"}],
        [{"name": "d", "resourceClaimName": None}, {"name": "a", "resourceClaimName": "p-a-x1"}]))
    assert podclaims.claim_names(pod) == [podclaims.ClaimName("a", "p-a-x1"), podclaims.ClaimName("b", "own"),
                                          podclaims.ClaimName("c", None)]  # d: no claim was needed


def test_a_pod_read_through_the_plain_view_or_without_claims_has_none() -> None:
    body = claimed_pod([{"name": "b", "resourceClaimName": "own"}])
    assert podclaims.claim_names(core.Pod.model_validate(body)) == []
    assert podclaims.claim_names(podclaims.Pod.model_validate({"spec": {"resourceClaims": None}})) == []


def _lookup(*found: prepared.Prepared) -> Any:
    return lambda ns, name: next((p for p in found if (p.namespace, p.name) == (ns, name)), None)


def test_the_recorded_claims_give_their_podnetworks_in_order_each_once_and_others_are_left_out() -> None:
    names = [podclaims.ClaimName("x", "gpu"), podclaims.ClaimName("a", "ca"), podclaims.ClaimName("b", "cb")]
    got = claims.claimed_podnetworks("ns", names, _lookup(prepared.Prepared("1", "ns", "ca", ("red", "blue")),
                                                           prepared.Prepared("2", "ns", "cb", ("blue",))))
    assert got == (["red", "blue"], ["gpu"])
    assert claims.claimed_podnetworks("ns", names, _lookup()) == (None, ["gpu", "ca", "cb"])  # none recorded


def test_the_drivers_of_a_served_claim_are_read_from_its_allocation_and_nothing_else() -> None:
    claim = {"status": {"allocation": {"devices": {"results": [
        {"driver": "gpu.example.com", "pool": "n1", "device": "g0"}, {"driver": "dra.multinetwork.x-k8s.io"},
        {"driver": 7}, "junk"]}}}}
    assert claims.allocated_drivers(claim) == {"gpu.example.com", "dra.multinetwork.x-k8s.io"}
    for unallocated in ({}, {"status": None}, {"status": {"allocation": {"devices": {"results": None}}}}):
        assert claims.allocated_drivers(unallocated) == set()


@pytest.mark.parametrize(("names", "found", "says"), [
    ([podclaims.ClaimName("a", None)], (), "names no ResourceClaim yet"),
    ([podclaims.ClaimName("a", "ca")], (prepared.Prepared("1", "ns", "ca", (None,)),), "stood for no PodNetwork"),
])
def test_a_claim_not_generated_or_a_device_of_no_podnetwork_is_error_11(
        names: list[podclaims.ClaimName], found: tuple[prepared.Prepared, ...], says: str) -> None:
    with pytest.raises(CNIError) as caught:
        claims.claimed_podnetworks("ns", names, _lookup(*found))  # before any API read
    assert caught.value.code == ErrorCode.TRY_AGAIN_LATER and says in caught.value.msg


# --- the networks to translate -------------------------------------------------------------------


def net(name: str, **more: Any) -> Network:
    return Network.model_validate({"podNetworkName": name, **more})


def test_without_the_annotation_the_default_network_comes_first_then_the_claims_in_order() -> None:
    assert claims.networks(["red", "blue"], None, []) == [net("default"), net("red"), net("blue")]


def test_the_annotation_gives_order_and_names_and_claimed_networks_it_leaves_out_come_after() -> None:
    annotated = [net("default"), net("blue", interfaceName="blue0"), net("red")]
    got = claims.networks(["red", "green", "blue"], annotated, ["default", "blue", "red"])
    assert got == [net("default"), net("blue", interfaceName="blue0"), net("red"), net("green")]
    # an explicit list (no default) stays explicit: the claims add no default network
    assert claims.networks(["blue"], [net("blue")], ["blue"]) == [net("blue")]


def test_an_annotated_network_no_claim_holds_is_refused() -> None:
    with pytest.raises(claims.Unclaimed, match="names green, which none of its ResourceClaims holds"):
        claims.networks(["blue"], [net("default"), net("green"), net("blue")], ["default", "green", "blue"])


# --- the driver's records, read without pydantic ----------------------------------------------------


def test_records_written_by_the_drivers_store_are_read_and_followed(tmp_path: Path) -> None:
    store = state.Store(tmp_path / "dra")
    records = prepared.Records(tmp_path / "dra")
    assert records.by_name("ns", "ca") is None  # no folder yet
    store.put(record("u-1", "ca", "red", None))
    assert records.by_name("ns", "ca") == prepared.Prepared("u-1", "ns", "ca", ("red", None))
    store.put(record("u-2", "cb", "blue"))
    (tmp_path / "dra" / "u-3.json").write_text("{not json")
    assert records.by_name("ns", "cb") == prepared.Prepared("u-2", "ns", "cb", ("blue",))
    store.remove("u-1")
    assert records.by_name("ns", "ca") is None


def test_the_folder_is_listed_again_only_when_its_mtime_changed(tmp_path: Path) -> None:
    store = state.Store(tmp_path / "dra")
    store.put(record("u-1", "ca", "red"))
    settled = time.time_ns() - 5_000_000_000  # last changed 5 s ago: a listing now is trusted
    os.utime(tmp_path / "dra", ns=(settled, settled))
    records = prepared.Records(tmp_path / "dra")
    assert records.by_name("ns", "ca") is not None
    store.put(record("u-2", "cb", "blue"))  # renamed into place: the folder's mtime moves
    assert records.by_name("ns", "cb") == prepared.Prepared("u-2", "ns", "cb", ("blue",))
    os.utime(tmp_path / "dra", ns=(settled, settled))
    assert records.by_name("ns", "cb") is not None  # listed again: the mtime moved (back)
    os.utime(tmp_path / "dra", ns=(settled, settled))
    (tmp_path / "dra" / "u-2.json").unlink()
    os.utime(tmp_path / "dra", ns=(settled, settled))  # a change that left the mtime as listed
    assert records.by_name("ns", "cb") is not None, "not listed again: the mtime did not change"


# --- ADDs ---------------------------------------------------------------------------------------


def make(tmp_path: Path, objs: list[dict[str, Any]], *recorded: state.PreparedClaim) -> tuple[agent.Agent, Recorder]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "bridge").write_text("#!/bin/sh\n")
    (bin_dir / "bridge").chmod(0o755)
    store = state.Store(tmp_path / "dra")
    for each in recorded:
        store.put(each)
    config = agent.AgentConfig(socket_path=tmp_path / "s", cache_dir=tmp_path / "cache", bin_dirs=(bin_dir,),
                               conf_dir=tmp_path / "net.d", default_network=KUBENET, dra_state_dir=tmp_path / "dra")
    rec = Recorder()
    return agent.Agent(objects.MemoryObjects(objs), config, executor=rec), rec


NETWORKS = [nad("blue"), nad("red"), nad("green"), podnetwork("blue", "blue"), podnetwork("red", "red"),
            podnetwork("green", "green")]
TWO = [{"name": "b", "resourceClaimTemplateName": "blue"}, {"name": "r", "resourceClaimTemplateName": "red"}]
GENERATED = [{"name": "b", "resourceClaimName": "p-b-1"}, {"name": "r", "resourceClaimName": "p-r-1"}]


async def test_a_pod_with_claims_only_gets_the_default_network_then_its_claims_networks_and_its_pod_ips(
        tmp_path: Path) -> None:
    a, rec = make(tmp_path, [claimed_pod(TWO, GENERATED), *NETWORKS],
                  record("u-b", "p-b-1", "blue"), record("u-r", "p-r-1", "red"))
    await a.handle(ENV, json.dumps(RUNTIME).encode())
    assert rec.adds() == [("eth0", "kubenet"), ("net1", "blue"), ("net2", "red")]
    cached = a.cache.load("c1")
    assert cached is not None and cached.claimed and not cached.explicit
    assert [(x.ifname, x.podnetwork) for x in cached.attachments] == [("eth0", None), ("net1", "blue"),
                                                                       ("net2", "red")]
    await a.status.idle()
    annotations = (await a.objects.get_pod("ns", "p")).metadata.annotations or {}
    assert [s["interface"] for s in json.loads(annotations[STATUS])] == ["eth0", "net1", "net2"]
    # the bridge writes pod-ips only for pods whose annotation it translates: the agent writes it here
    assert json.loads(annotations[POD_IPS]) == [
        {"ip": "10.0.1.2", "podNetwork": "default", "interfaceName": "eth0"},
        {"ip": "10.0.2.2", "podNetwork": "blue", "interfaceName": "net1"},
        {"ip": "10.0.3.2", "podNetwork": "red", "interfaceName": "net2"}]


async def test_the_annotation_orders_and_names_the_claimed_networks(tmp_path: Path) -> None:
    kep = json.dumps([{"podNetworkName": "default"}, {"podNetworkName": "red", "interfaceName": "red0"},
                      {"podNetworkName": "blue"}])
    a, rec = make(tmp_path, [claimed_pod(TWO, GENERATED, {KEP: kep}), *NETWORKS],
                  record("u-b", "p-b-1", "blue"), record("u-r", "p-r-1", "red"))
    await a.handle(ENV, json.dumps(RUNTIME).encode())
    assert rec.adds() == [("eth0", "kubenet"), ("red0", "red"), ("net1", "blue")]


async def test_an_annotated_network_without_a_claim_fails_the_add_and_attaches_nothing(tmp_path: Path) -> None:
    kep = json.dumps([{"podNetworkName": "default"}, {"podNetworkName": "green"}, {"podNetworkName": "blue"}])
    a, rec = make(tmp_path, [claimed_pod(TWO[:1], GENERATED[:1], {KEP: kep}), *NETWORKS],
                  record("u-b", "p-b-1", "blue"))
    with pytest.raises(CNIError) as caught:
        await a.handle(ENV, json.dumps(RUNTIME).encode())
    assert caught.value.code == ErrorCode.DELEGATION_FAILED and "green" in caught.value.details
    assert rec.adds() == []


def served_claim(name: str, driver: str) -> dict[str, Any]:
    return {"kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ns"},
            "status": {"allocation": {"devices": {"results": [{"driver": driver, "pool": "n1", "device": "d"}]}}}}


async def test_a_claim_of_the_driver_that_it_did_not_record_is_error_11_naming_it(tmp_path: Path) -> None:
    a, rec = make(tmp_path, [claimed_pod(TWO, GENERATED), *NETWORKS, served_claim("p-r-1", "dra.multinetwork.x-k8s.io")],
                  record("u-b", "p-b-1", "blue"))
    with pytest.raises(CNIError) as caught:
        await a.handle(ENV, json.dumps(RUNTIME).encode())
    assert caught.value.code == ErrorCode.TRY_AGAIN_LATER
    assert caught.value.msg == "ResourceClaim ns/p-r-1 is allocated to dra.multinetwork.x-k8s.io but not prepared on this node"
    assert str(tmp_path / "dra") in caught.value.details
    assert rec.adds() == []


async def test_a_pod_whose_claims_are_another_drivers_keeps_the_annotation_path(tmp_path: Path) -> None:
    kep = json.dumps([{"podNetworkName": "default"}, {"podNetworkName": "green"}])
    a, rec = make(tmp_path, [claimed_pod(TWO, GENERATED, {KEP: kep}), *NETWORKS,
                             served_claim("p-b-1", "gpu.example.com"), served_claim("p-r-1", "gpu.example.com")])
    await a.handle(ENV, json.dumps(RUNTIME).encode())
    assert rec.adds() == [("eth0", "kubenet"), ("net1", "green")]
    cached = a.cache.load("c1")
    assert cached is not None and not cached.claimed


async def test_hot_plug_sees_a_claimed_pod_as_attached_and_an_unclaimed_network_cannot_be_added(tmp_path: Path) -> None:
    """Hot-plug reads a running pod's networks as an ADD does (`Planner.selection`, the pod read
    through the claims' view as its watch reads it): no change for a pod attached by claims, and
    an annotation naming a network no claim holds is refused (its claims cannot change)."""
    a, _ = make(tmp_path, [claimed_pod(TWO, GENERATED), *NETWORKS],
                record("u-b", "p-b-1", "blue"), record("u-r", "p-r-1", "red"))
    await a.handle(ENV, json.dumps(RUNTIME).encode())
    attached = a.cache.load("c1")
    assert attached is not None
    wanted = await a.planner.selection(podclaims.Pod.model_validate(claimed_pod(TWO, GENERATED)))
    assert not hotplug.decide(attached, wanted.elements, explicit=wanted.explicit)
    more = json.dumps([{"podNetworkName": n} for n in ("default", "blue", "red", "green")])
    with pytest.raises(CNIError, match="disagree"):
        await a.planner.selection(podclaims.Pod.model_validate(claimed_pod(TWO, GENERATED, {KEP: more})))
