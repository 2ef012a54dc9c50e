"""The CNI agent attaches exactly the networks of a pod's DRA claims, and a pod's networks are released
whichever of CNI DEL and NodeUnprepareResources comes first (issue 36, items 5 and 6).

On the nodes and drivers of tests/real/test_dra_driver.py (its `dra` fixture, reused): node A, the
session's node with the agent (reading A's driver records, `--dra-state-dir`), is made to offer two
bridged PodNetworks, `blue` and `red`, which the pods here ask for through ResourceClaimTemplates
only (the controller's admission adds the `[default]` annotation, which names neither). What is seen
here and nowhere else: the kubelet preparing the claims before it asks containerd for the sandbox,
containerd running the shim, the agent reading the driver's records, the interfaces in the pod, the
driver reporting them on each claim, and the kubelet's own order of teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.dra.driver import classes, wire
from bridge.dra.driver.protos import dra_v1_pb2 as dra_pb
from bridge.dracontract import names
from tests.real.attachments_support import (
    POD_IPS,
    BridgedNetwork,
    agent_records,
    annotation,
    bridged_networks,
    interfaces,
)
from tests.real.cluster_support import Api, eventually, pod_manifest, wait_phase
from tests.real.objects_support import pods
from tests.real.test_dra_driver import DRIVER, OFFERS, RESOURCE, Dra, claims_of, devices
from tests.real.test_dra_driver import dra as dra  # the module-scoped fixture, reused (its own instance here)
from tests.soak.soak import Daemon, kubelet_healthy

pytestmark = pytest.mark.usefixtures("components")


@pytest.fixture
def networks(dra: Dra, api: Api, ns: str) -> Iterator[tuple[BridgedNetwork, BridgedNetwork]]:
    """`blue` and `red`, offered by node A, each with a ResourceClaimTemplate of its name in `ns`."""
    with bridged_networks(api, ns, "blue", "red") as (blue, red):
        api.merge_patch(f"/api/v1/nodes/{dra.a.name}", {"metadata": {"annotations": {
            OFFERS: json.dumps(["default", dra.both, blue.podnetwork, red.podnetwork])}}})
        try:
            eventually(lambda: {blue.podnetwork, red.podnetwork} <= set(devices(api, dra.a.name)),
                       "node A offers blue and red as devices", timeout=60)
            for tag, net in (("blue", blue), ("red", red)):
                api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
                           classes.claim_template(tag, ns, [net.podnetwork], DRIVER).to_dict())
            yield blue, red
        finally:
            api.request("DELETE", pods(ns), params={"gracePeriodSeconds": "0"})
            eventually(lambda: not api.get(pods(ns))["items"], "the pods are gone", timeout=90)
            api.merge_patch(f"/api/v1/nodes/{dra.a.name}", {"metadata": {"annotations": {
                OFFERS: json.dumps(["default", dra.both])}}})


def two_claims(name: str) -> dict[str, Any]:
    return pod_manifest(name, resourceClaims=[{"name": "b", "resourceClaimTemplateName": "blue"},
                                              {"name": "r", "resourceClaimTemplateName": "red"}])


def network_data(api: Api, ns: str) -> dict[str, dict[str, Any]]:
    """The networkData of each claim of `ns`, by the device's PodNetwork (only claims that have it)."""
    out: dict[str, dict[str, Any]] = {}
    for claim in claims_of(api, ns):
        for status in (claim.get("status") or {}).get("devices") or []:
            out[status["device"]] = status["networkData"]
    return out


def running_with_both(dra: Dra, api: Api, ns: str, name: str, blue: BridgedNetwork,
                      red: BridgedNetwork) -> dict[str, Any]:
    """The pod once Running on A with eth0, net1 (blue) and net2 (red), each claim reporting its interface."""
    pod = wait_phase(api, ns, name, timeout=180)
    assert pod["spec"]["nodeName"] == dra.a.name
    seen = interfaces(dra.cluster, ns, name)
    # the default network first, then the claims in spec.resourceClaims order on NPWG's default names
    assert sorted(seen) == ["eth0", "net1", "net2"], seen
    assert {a.split("/")[0] for a in seen["net1"].addresses} <= blue.leases()
    assert {a.split("/")[0] for a in seen["net2"].addresses} <= red.leases()
    pod_ips = eventually(lambda: (got := annotation(api, ns, name, POD_IPS)) and len(got) == 3 and got,
                         "pod-ips name the three networks", timeout=60)
    assert [(e["podNetwork"], e["interfaceName"]) for e in pod_ips] == [
        ("default", "eth0"), (blue.podnetwork, "net1"), (red.podnetwork, "net2")]
    data = eventually(lambda: (got := network_data(api, ns)) and len(got) == 2 and got,
                      "the driver wrote networkData on both claims", timeout=60)
    assert data[blue.podnetwork] == {"interfaceName": "net1", "ips": list(seen["net1"].addresses),
                                     "hardwareAddress": seen["net1"].mac}
    assert data[red.podnetwork] == {"interfaceName": "net2", "ips": list(seen["net2"].addresses),
                                    "hardwareAddress": seen["net2"].mac}
    return pod


def left_behind(dra: Dra, api: Api, ns: str, name: str, netns: Path, nets: tuple[BridgedNetwork, ...]) -> dict[str, Any]:
    return {"records": dra.prepared(dra.a), "claims": [c["metadata"]["name"] for c in claims_of(api, ns)],
            "leases": sorted(set().union(*(n.leases() for n in nets))),
            "veths": [p for n in nets for p in n.ports()],
            "agent": [r["path"] for r in agent_records(dra.a, ns, name)],
            "netns": [str(netns)] if netns.exists() else []}


def delete_and_expect_nothing(dra: Dra, api: Api, ns: str, name: str, nets: tuple[BridgedNetwork, ...]) -> None:
    (record,) = [r for r in agent_records(dra.a, ns, name) if r["complete"]]
    netns = Path(record["netns"])
    api.request("DELETE", f"{pods(ns)}/{name}", params={"gracePeriodSeconds": "0"})

    def nothing_left() -> bool:
        left = left_behind(dra, api, ns, name, netns, nets)
        assert not any(left.values()), left
        return True

    eventually(nothing_left, "no record, claim, lease, veth, agent record or netns is left", timeout=120)


def test_a_pod_claiming_two_podnetworks_runs_with_both_and_deleting_it_leaves_nothing(
        dra: Dra, api: Api, ns: str, networks: tuple[BridgedNetwork, BridgedNetwork]) -> None:
    blue, red = networks
    api.create(pods(ns), two_claims("both"))
    pod = running_with_both(dra, api, ns, "both", blue, red)
    # no network in the annotation: the controller's admission wrote only the default network
    assert json.loads(pod["metadata"]["annotations"]["multinetwork.x-k8s.io/networks"]) == [
        {"podNetworkName": "default"}]
    uids = sorted(c["metadata"]["uid"] for c in claims_of(api, ns))
    assert dra.prepared(dra.a) == uids
    (record,) = [r for r in agent_records(dra.a, ns, "both") if r["complete"]]
    assert record["claimed"] is True  # attached by the claims, not by the annotation
    assert [(a["ifname"], a["podnetwork"]) for a in record["attachments"]] == [
        ("eth0", None), ("net1", blue.podnetwork), ("net2", red.podnetwork)]

    # the kubelet's own order: the sandbox is stopped (CNI DEL), then the claims unprepared
    delete_and_expect_nothing(dra, api, ns, "both", networks)
    log = dra.drivers[dra.a.name].log.read_text(errors="replace")
    assert all(f"(uid {uid}): released" in log for uid in uids)


def unprepare(dra: Dra, claims: list[dict[str, Any]]) -> dra_pb.NodeUnprepareResourcesResponse:
    """NodeUnprepareResources on A's driver, as the kubelet calls it."""
    socket = names.plugin_socket(str(dra.a.dir / "kubelet" / "root" / "plugins"), DRIVER)
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        call = channel.unary_unary(f"/{wire.DRA_SERVICE}/NodeUnprepareResources",
                                   request_serializer=dra_pb.NodeUnprepareResourcesRequest.SerializeToString,
                                   response_deserializer=dra_pb.NodeUnprepareResourcesResponse.FromString)
        answer: dra_pb.NodeUnprepareResourcesResponse = call(dra_pb.NodeUnprepareResourcesRequest(claims=[
            dra_pb.Claim(namespace=c["metadata"]["namespace"], name=c["metadata"]["name"], uid=c["metadata"]["uid"])
            for c in claims]), timeout=60)
    return answer


def test_unprepare_before_del_leaves_nothing_either(
        dra: Dra, api: Api, ns: str, networks: tuple[BridgedNetwork, BridgedNetwork]) -> None:
    """The driver's records go first (NodeUnprepareResources called while the pod runs): the agent's
    DEL needs only its own record, and the kubelet's unprepare after it finds nothing to release."""
    blue, red = networks
    api.create(pods(ns), two_claims("early"))
    running_with_both(dra, api, ns, "early", blue, red)
    claims = claims_of(api, ns)
    answer = unprepare(dra, claims)
    assert {uid: a.error for uid, a in answer.claims.items()} == {c["metadata"]["uid"]: "" for c in claims}
    assert dra.prepared(dra.a) == []
    assert sorted(interfaces(dra.cluster, ns, "early")) == ["eth0", "net1", "net2"]  # the pod keeps them until DEL

    delete_and_expect_nothing(dra, api, ns, "early", networks)


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The process stopped (SIGSTOP) until the block ends, and continued even on failure."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_kubelet_restarting_while_it_prepares_the_claims_still_gets_the_pod_running(
        dra: Dra, api: Api, ns: str, networks: tuple[BridgedNetwork, BridgedNetwork]) -> None:
    """A's driver is stopped, so the kubelet's NodePrepareResources waits; the kubelet is killed and
    started again meanwhile; once the driver goes on, the pod ends Running with both networks."""
    blue, red = networks
    driver = dra.drivers[dra.a.name]
    assert driver.popen is not None
    kubelet = Daemon(f"kubelet-{dra.a.name}", dra.cluster.root / "run" / f"kubelet-{dra.a.name}.pid",
                     dra.a.dir / "log" / "kubelet.log")
    kubelet.remember()
    with stopped(driver.popen.pid):
        api.create(pods(ns), two_claims("restart"))

        def creating() -> bool:
            got = api.get(f"{pods(ns)}/restart")
            waiting = [(s.get("state") or {}).get("waiting", {}).get("reason")
                       for s in (got.get("status") or {}).get("containerStatuses") or []]
            return got["spec"].get("nodeName") == dra.a.name and waiting == ["ContainerCreating"]

        eventually(creating, "the kubelet took the pod and waits on its claims", timeout=120)
        assert dra.prepared(dra.a) == []  # the driver answered nothing yet
        kubelet.kill()
        kubelet.start()
        eventually(lambda: kubelet_healthy(dra.a), "node A's kubelet is healthy again", timeout=90)
    running_with_both(dra, api, ns, "restart", blue, red)
    assert len(dra.prepared(dra.a)) == 2

    delete_and_expect_nothing(dra, api, ns, "restart", networks)
