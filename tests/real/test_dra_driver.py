"""`podnetwork dra-driver` on the kit's kubelets: kube-scheduler's own DRA allocator places pods by
their PodNetworks, and the kubelet prepares and unprepares their claims through our plugin.

Two nodes, each with its driver as a user runs it outside a pod: A (the session's node) offers
`both`, B (a node of this module's own) offers `both` and `bonly`; `nowhere` is offered by no
node. What is seen here and nowhere else: the kubelet's plugin watcher registering the driver
(GetInfo, then its NotifyRegistrationStatus), the API server keeping `allowMultipleAllocations`
(gate DRAConsumableCapacity), the scheduler's allocator reading the slices, the kubelet calling
NodePrepareResources before the containers start and NodeUnprepareResources after the pod is
gone, and the kubelet deleting a stopped driver's slices.

The drivers run as deploy/dra-driver/ runs them in a cluster: with a token of the ServiceAccount
of deploy/dra-driver/rbac.yaml, bound by its ClusterRole (applied here as written), not as
cluster-admin, so a request the ClusterRole does not allow fails these tests.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.dra.driver import classes
from bridge.dracontract import names
from tests.real.attachments_support import bridged_networks, interfaces
from tests.real.cluster_support import (
    PODNETWORK,
    REPO,
    Api,
    Cluster,
    Node,
    Process,
    eventually,
    pod_manifest,
    wait_phase,
)
from tests.real.objects_support import PODNETWORKS, Made, condition, events_of, pods, unique
from tests.soak.soak import Daemon, kubelet_healthy

pytestmark = pytest.mark.usefixtures("components")

DRIVER = names.DEFAULT_DRIVER
RESOURCE = "/apis/resource.k8s.io/v1"
OFFERS = "multinetwork.x-k8s.io/podnetworks"
DEPLOYED = REPO / "deploy" / "dra-driver"
NAMESPACE = "multinetwork-system"
ACCOUNT = "multinetwork-dra-driver"


@dataclass
class Dra:
    """The module's two nodes with their drivers, and its three PodNetworks."""

    cluster: Cluster
    a: Node
    b: Node
    drivers: dict[str, Process]
    kubeconfigs: dict[str, Path]
    both: str
    bonly: str
    nowhere: str
    kubelet_log_from: dict[str, int] = field(default_factory=dict)
    """Where each node's kubelet log stood when this module's drivers started (node A's kubelet, shared
    by the modules reusing this fixture, logged the earlier drivers' runs before)."""

    def state_dir(self, node: Node) -> Path:
        return node.dir / "kubelet" / "root" / "plugins" / DRIVER

    def prepared(self, node: Node) -> list[str]:
        folder = self.state_dir(node)
        return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def slices_of(api: Api, node: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(
        f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node},spec.driver={DRIVER}")["items"]
    return items


def devices(api: Api, node: str) -> dict[str, dict[str, Any]]:
    """The devices of the node's pool in its newest generation, by the PodNetwork each stands for."""
    found = slices_of(api, node)
    newest = max((s["spec"]["pool"]["generation"] for s in found), default=0)
    return {d["attributes"]["podNetwork"]["string"]: d for s in found if s["spec"]["pool"]["generation"] == newest
            for d in s["spec"].get("devices") or []}


def driver_argv(node: Node, kubeconfig: Path) -> list[str]:
    return ["dra-driver", "--node-name", node.name, "--kubelet-plugins-dir", str(node.dir / "kubelet" / "root" /
            "plugins"), "--kubeconfig", str(kubeconfig)]


@contextlib.contextmanager
def service_account(cluster: Cluster, api: Api) -> Iterator[None]:
    """deploy/dra-driver/rbac.yaml applied as written; removed afterwards with the pods of
    `bound_kubeconfig` (and the namespace when it was made here)."""
    made_namespace = api.find(f"/api/v1/namespaces/{NAMESPACE}") is None
    try:
        if made_namespace:
            cluster.kubectl("apply", "-k", str(REPO / "deploy" / "namespace"))
        cluster.kubectl("apply", "-f", str(DEPLOYED / "rbac.yaml"))
        yield
    finally:
        api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods",
                    params={"labelSelector": f"app.kubernetes.io/name={ACCOUNT}", "gracePeriodSeconds": "0"})
        eventually(lambda: not api.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector="
                                       f"app.kubernetes.io%2Fname%3D{ACCOUNT}")["items"],
                   "the pods the driver's tokens were bound to are gone", timeout=90)
        cluster.kubectl("delete", "-f", str(DEPLOYED / "rbac.yaml"), "--ignore-not-found", check=False)
        for path in cluster.root.glob("dra-driver-*.kubeconfig"):
            path.unlink()
        if made_namespace:
            cluster.kubectl("delete", "-k", str(REPO / "deploy" / "namespace"), "--ignore-not-found", check=False)
            eventually(lambda: api.find(f"/api/v1/namespaces/{NAMESPACE}") is None, f"namespace {NAMESPACE} is gone",
                       timeout=90)


def bound_kubeconfig(cluster: Cluster, api: Api, node: Node) -> Path:
    """A kubeconfig with a token of the driver's ServiceAccount as the DaemonSet's pod on `node` gets
    one: bound to a pod of that account on that node (TokenRequest, `kubectl create token
    --bound-object-kind Pod`), so the token carries the node's name, which the API server's check of
    status.devices writes (verb associated-node:patch) compares with the claim's node."""
    pod = f"{ACCOUNT}-{node.name}"
    body = pod_manifest(pod, node=node.name, labels={"app.kubernetes.io/name": ACCOUNT},
                        serviceAccountName=ACCOUNT, automountServiceAccountToken=False)
    made = api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", body)
    token = cluster.kubectl("-n", NAMESPACE, "create", "token", ACCOUNT, "--duration=2h", "--bound-object-kind=Pod",
                            f"--bound-object-name={pod}", f"--bound-object-uid={made['metadata']['uid']}"
                            ).stdout.strip()
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": ACCOUNT, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = ACCOUNT
    path = cluster.root / f"dra-driver-{node.name}.kubeconfig"
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config))
    return path


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def registered(process: Process) -> bool:
    return "the kubelet registered DRA driver" in process.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def dra(components: Cluster, api: Api, node: Node) -> Iterator[Dra]:
    cluster = components
    index = 2
    while any(n.name.endswith(f"-n{index}") for n in cluster.nodes.values()):
        index += 1
    made = Made(api)
    suffix = secrets.token_hex(3)
    b: Node | None = None
    drivers: dict[str, Process] = {}
    account = contextlib.ExitStack()
    try:
        account.enter_context(service_account(cluster, api))
        b = cluster.add_node(index)
        kubeconfigs = {each.name: bound_kubeconfig(cluster, api, each) for each in (node, b)}
        both, bonly, nowhere = unique("dra-both"), unique("dra-bonly"), unique("dra-nowhere")
        for name in (both, bonly, nowhere):
            made.podnetwork(name)
        made.annotate_node(node.name, OFFERS, json.dumps(["default", both]))
        made.annotate_node(b.name, OFFERS, json.dumps(["default", both, bonly]))
        printed = subprocess.run([str(PODNETWORK), "dra-driver", "--print-device-class"], capture_output=True,
                                 text=True, timeout=60, check=True).stdout
        made.create(f"{RESOURCE}/deviceclasses", yaml.safe_load(printed))
        log_from = {each.name: _size(each.dir / "log" / "kubelet.log") for each in (node, b)}
        for each in (node, b):
            # A name (so a log) of this module's own: the modules reusing this fixture start a driver on
            # the same node, and a log appended to would hold an earlier run's "registered".
            process_name = f"dra-driver-{each.name}-{suffix}"
            process = cluster.start_component(process_name, driver_argv(each, kubeconfigs[each.name]),
                                              lambda process_name=process_name:
                                              registered(cluster.components[process_name]), timeout=90)
            drivers[each.name] = process
        # pods of the default network only pass the extender on a node whose default network is Ready
        eventually(lambda: (c := condition(api.get(f"/api/v1/nodes/{b.name}"), "DefaultPodNetworkReady"))
                   and c["status"] == "True", "the second node has DefaultPodNetworkReady True", timeout=60)
        yield Dra(cluster, node, b, drivers, kubeconfigs, both, bonly, nowhere, log_from)
    finally:
        problems: list[str] = []
        for name, process in drivers.items():
            process.stop()
            cluster.components.pop(f"dra-driver-{name}-{suffix}", None)
        for name in drivers:
            try:  # the kubelet deletes the slices of a driver whose plugin went away (30 s later)
                eventually(lambda name=name: not slices_of(api, name), f"node {name}'s slices of {DRIVER} are gone "
                           "after its driver stopped", timeout=120)
            except AssertionError as error:
                problems.append(str(error))
                for s in slices_of(api, name):
                    api.delete(f"{RESOURCE}/resourceslices/{s['metadata']['name']}")
        try:
            made.close()
        finally:
            try:
                account.close()  # its pods first, while their nodes are there to stop them
            finally:
                if b is not None:
                    cluster.remove_node(b)
                    eventually(lambda: api.find(f"/api/v1/nodes/{b.name}") is None, f"node {b.name} is gone",
                               timeout=60)
        assert not problems, problems


def test_the_kubelet_registers_the_driver_and_each_node_publishes_its_networks(dra: Dra, api: Api) -> None:
    for node in (dra.a, dra.b):
        assert registered(dra.drivers[node.name])  # the kubelet's NotifyRegistrationStatus(registered)
        socket = names.registration_socket(str(node.dir / "kubelet" / "root" / "plugins_registry"), DRIVER)
        kubelet_log = node.dir / "log" / "kubelet.log"
        assert Path(socket).is_socket(), (
            f"{socket} is gone; in its folder: {sorted(p.name for p in Path(socket).parent.iterdir())}\n"
            f"--- the driver's log:\n{dra.drivers[node.name].tail(20)}\n--- the kubelet's lines on it:\n"
            + "\n".join([line for line in kubelet_log.read_text(errors="replace").splitlines()
                          if DRIVER in line][-15:]))
        start = dra.kubelet_log_from.get(node.name, 0)
        said = eventually(lambda kubelet_log=kubelet_log, start=start:
                          (text := kubelet_log.read_bytes()[start:].decode(errors="replace"))
                          and "Successfully started WatchResources health stream" in text and text,
                          f"{node.name}'s kubelet opened the driver's health stream", timeout=60)
        assert f'"Adding socket path or updating timestamp to desired state cache" path="{socket}"' in said
        assert f'"Connection changed" logger="DRA registration handler" driverName="{DRIVER}"' in said
        # the kubelet v1.36 opens the health stream on every plugin: the driver serves it (and says nothing)
        assert not [line for line in said.splitlines()
                    if "Error receiving from WatchResources stream" in line and DRIVER in line]
    offered_a = eventually(lambda: (d := devices(api, dra.a.name)) and dra.both in d and d,
                           "node A publishes its PodNetworks", timeout=60)
    offered_b = eventually(lambda: (d := devices(api, dra.b.name)) and dra.bonly in d and d,
                           "node B publishes its PodNetworks", timeout=60)
    assert sorted(offered_a) == sorted(["default", dra.both])
    assert sorted(offered_b) == sorted(["default", dra.both, dra.bonly])
    device = offered_b[dra.bonly]
    # the API server kept the field (DRAConsumableCapacity is on): one device serves many pods
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"]["provider"] == {"string": "example.com/elsewhere"}
    (one,) = slices_of(api, dra.b.name)
    assert one["spec"]["pool"]["name"] == dra.b.name and one["spec"]["pool"]["resourceSliceCount"] == 1
    assert [o["kind"] for o in one["metadata"]["ownerReferences"]] == ["Node"]


def test_slices_follow_a_podnetwork_turning_not_ready_and_the_nodes_annotation(dra: Dra, api: Api) -> None:
    eventually(lambda: dra.both in devices(api, dra.b.name), "node B offers both", timeout=60)
    api.merge_patch(f"{PODNETWORKS}/{dra.both}", {"spec": {"enabled": False}})
    try:
        for node in (dra.a, dra.b):
            eventually(lambda node=node: dra.both not in devices(api, node.name),
                       f"the disabled PodNetwork has no device on {node.name}", timeout=60)
        assert dra.bonly in devices(api, dra.b.name)
    finally:
        api.merge_patch(f"{PODNETWORKS}/{dra.both}", {"spec": {"enabled": True}})
    for node in (dra.a, dra.b):
        eventually(lambda node=node: dra.both in devices(api, node.name),
                   f"the re-enabled PodNetwork has its device again on {node.name}", timeout=60)

    api.merge_patch(f"/api/v1/nodes/{dra.a.name}", {"metadata": {"annotations": {
        OFFERS: json.dumps(["default", dra.both, dra.nowhere])}}})
    try:
        eventually(lambda: dra.nowhere in devices(api, dra.a.name), "node A offers what its annotation adds", timeout=60)
    finally:
        api.merge_patch(f"/api/v1/nodes/{dra.a.name}", {"metadata": {"annotations": {
            OFFERS: json.dumps(["default", dra.both])}}})
    eventually(lambda: dra.nowhere not in devices(api, dra.a.name), "and stops offering what it removes", timeout=60)


def test_a_deleted_slice_is_published_again(dra: Dra, api: Api) -> None:
    (before,) = eventually(lambda: slices_of(api, dra.b.name), "node B has its slice", timeout=60)
    api.delete(f"{RESOURCE}/resourceslices/{before['metadata']['name']}")
    again = eventually(lambda: [s for s in slices_of(api, dra.b.name)
                                if s["metadata"]["uid"] != before["metadata"]["uid"]], "the driver made it again", timeout=60)
    assert sorted(d["name"] for d in again[0]["spec"]["devices"]) == sorted(
        d["name"] for d in before["spec"]["devices"])


def claimed_pod(name: str, template: str) -> dict[str, Any]:
    return pod_manifest(name, resourceClaims=[{"name": "net", "resourceClaimTemplateName": template}])


def claims_of(api: Api, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims")["items"]
    return items


def test_pods_claiming_a_network_of_node_b_only_run_there_and_leave_nothing_when_deleted(
        dra: Dra, api: Api, made: Made, ns: str) -> None:
    eventually(lambda: dra.bonly in devices(api, dra.b.name), "node B offers bonly", timeout=60)
    template = classes.claim_template("bonly", ns, [dra.bonly], DRIVER).to_dict()
    api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", template)
    for name in ("first", "second"):  # one shareable device serves both
        made.pod(ns, claimed_pod(name, "bonly"))
    for name in ("first", "second"):
        pod = wait_phase(api, ns, name, timeout=120)
        assert pod["spec"]["nodeName"] == dra.b.name
    claims = claims_of(api, ns)
    assert len(claims) == 2
    shares = {c["status"]["allocation"]["devices"]["results"][0].get("shareID") for c in claims}
    assert len(shares) == 2, shares
    for claim in claims:
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (DRIVER, dra.b.name, dra.bonly)
    uids = sorted(c["metadata"]["uid"] for c in claims)
    # the kubelet called NodePrepareResources on B's driver before the containers started
    assert dra.prepared(dra.b) == uids
    for claim in claims:  # each allocation of the shared device, with its shareID, as recorded
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        record = json.loads((dra.state_dir(dra.b) / f"{claim['metadata']['uid']}.json").read_text())
        # kube-scheduler gives every allocation of a device that allows many a shareID of its own
        assert result.get("shareID") and [d.get("share_id") for d in record["devices"]] == [result["shareID"]]
    assert dra.prepared(dra.a) == []
    log = dra.drivers[dra.b.name].log.read_text(errors="replace")
    for claim in claims:
        assert f"prepare ResourceClaim {ns}/{claim['metadata']['name']} (uid {claim['metadata']['uid']}): " \
               f"prepared {dra.bonly} (PodNetwork {dra.bonly}, request net0)" in log

    api.request("DELETE", pods(ns), params={"gracePeriodSeconds": "0"})
    eventually(lambda: not api.get(pods(ns))["items"], "the pods are gone", timeout=90)
    eventually(lambda: dra.prepared(dra.b) == [], "the kubelet unprepared both claims", timeout=60)
    eventually(lambda: not claims_of(api, ns), "the claims made from the template are deleted", timeout=60)
    log = dra.drivers[dra.b.name].log.read_text(errors="replace")
    assert all(f"(uid {uid}): released" in log for uid in uids)


def test_a_pod_claiming_a_network_offered_nowhere_stays_pending_with_the_schedulers_reason(
        dra: Dra, api: Api, made: Made, ns: str) -> None:
    template = classes.claim_template("nowhere", ns, [dra.nowhere], DRIVER).to_dict()
    api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", template)
    made.pod(ns, claimed_pod("stuck", "nowhere"))

    def unschedulable() -> dict[str, Any] | None:
        found = condition(api.get(f"{pods(ns)}/stuck"), "PodScheduled")
        return found if found and found["status"] == "False" else None

    scheduled = eventually(unschedulable, "kube-scheduler says why the pod stays Pending", timeout=60)
    assert scheduled["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in scheduled["message"], scheduled
    pod = api.get(f"{pods(ns)}/stuck")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    events = eventually(lambda: events_of(api, ns, "stuck", "FailedScheduling"), "a FailedScheduling Event", timeout=60)
    assert "cannot allocate all claims" in events[-1]["message"]
    assert dra.prepared(dra.a) == dra.prepared(dra.b) == []


def test_a_claimed_network_that_the_agent_attached_gets_its_network_data_on_the_claim(
        dra: Dra, api: Api, made: Made, ns: str) -> None:
    """The pod names the claimed network in its annotation too, with an interface name: the agent
    attaches the claim's network under that name, and the driver reports it on the claim (KEP-4817).
    tests/real/test_dra_attach.py has pods that name their networks in claims only."""
    with bridged_networks(api, ns, "blue") as (blue,):
        api.merge_patch(f"/api/v1/nodes/{dra.a.name}", {"metadata": {"annotations": {
            OFFERS: json.dumps(["default", dra.both, blue.podnetwork])}}})
        try:
            eventually(lambda: blue.podnetwork in devices(api, dra.a.name), "node A offers blue", timeout=60)
            api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
                       classes.claim_template("blue", ns, [blue.podnetwork], DRIVER).to_dict())
            body = claimed_pod("reported", "blue")
            body["metadata"]["annotations"]["multinetwork.x-k8s.io/networks"] = json.dumps(
                [{"podNetworkName": "default"}, {"podNetworkName": blue.podnetwork, "interfaceName": "blue0"}])
            made.pod(ns, body)
            pod = wait_phase(api, ns, "reported", timeout=120)
            assert pod["spec"]["nodeName"] == dra.a.name
            seen = interfaces(dra.cluster, ns, "reported")["blue0"]

            def reported() -> list[dict[str, Any]]:
                (claim,) = claims_of(api, ns)
                return list((claim.get("status") or {}).get("devices") or [])

            (status,) = eventually(reported, "the driver wrote the claim's status.devices", timeout=60)
            (claim,) = claims_of(api, ns)
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert (status["driver"], status["pool"], status["device"]) == (DRIVER, dra.a.name, blue.podnetwork)
            assert status.get("shareID") == result.get("shareID")
            assert status["networkData"] == {"interfaceName": "blue0", "ips": list(seen.addresses),
                                             "hardwareAddress": seen.mac}
            assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
                ("Ready", "True", "InterfaceAttached")]
            # status.devices is the driver's alone (server-side apply, as field manager the driver's name)
            managers = {m["manager"] for m in claim["metadata"]["managedFields"]
                        if "f:devices" in m.get("fieldsV1", {}).get("f:status", {})}
            assert managers == {DRIVER}
        finally:
            api.request("DELETE", pods(ns), params={"gracePeriodSeconds": "0"})
            eventually(lambda: not api.get(pods(ns))["items"], "the pod is gone", timeout=90)
            api.merge_patch(f"/api/v1/nodes/{dra.a.name}", {"metadata": {"annotations": {
                OFFERS: json.dumps(["default", dra.both])}}})
    eventually(lambda: dra.prepared(dra.a) == [], "the kubelet unprepared the claim", timeout=60)


def test_after_a_kubelet_restart_the_driver_is_registered_again_republishes_and_prepares(
        dra: Dra, api: Api, made: Made, ns: str) -> None:
    """The kubelet deletes every slice of its node when it starts and finds the driver again by its
    socket; a pod prepared before keeps its claim, a pod after is prepared by the same driver."""
    (before,) = eventually(lambda: [s for s in slices_of(api, dra.b.name)
                                    if dra.bonly in json.dumps(s["spec"]["devices"])], "node B offers bonly", timeout=60)
    api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
               classes.claim_template("bonly", ns, [dra.bonly], DRIVER).to_dict())
    made.pod(ns, claimed_pod("before", "bonly"))
    wait_phase(api, ns, "before", timeout=120)
    (first_claim,) = claims_of(api, ns)
    driver_log = dra.drivers[dra.b.name].log
    registrations = driver_log.read_text(errors="replace").count("the kubelet registered DRA driver")

    kubelet = Daemon(f"kubelet-{dra.b.name}", dra.cluster.root / "run" / f"kubelet-{dra.b.name}.pid",
                     dra.b.dir / "log" / "kubelet.log")
    kubelet.remember()
    kubelet.kill()
    kubelet.start()
    eventually(lambda: kubelet_healthy(dra.b), "node B's kubelet is healthy again", timeout=60)
    eventually(lambda: driver_log.read_text(errors="replace").count("the kubelet registered DRA driver")
               > registrations, "the restarted kubelet registered the driver again", timeout=60)
    eventually(lambda: [s for s in slices_of(api, dra.b.name) if s["metadata"]["uid"] != before["metadata"]["uid"]
                        and dra.bonly in json.dumps(s["spec"]["devices"])],
               "the slice the kubelet deleted at its start is published again", timeout=60)

    made.pod(ns, claimed_pod("after", "bonly"))
    assert wait_phase(api, ns, "after", timeout=120)["spec"]["nodeName"] == dra.b.name
    assert api.get(f"{pods(ns)}/before")["status"]["phase"] == "Running"
    assert first_claim["metadata"]["uid"] in dra.prepared(dra.b)
    assert len(dra.prepared(dra.b)) == 2
    api.request("DELETE", pods(ns), params={"gracePeriodSeconds": "0"})
    eventually(lambda: not api.get(pods(ns))["items"], "the pods are gone", timeout=90)
    eventually(lambda: dra.prepared(dra.b) == [], "the kubelet unprepared both claims", timeout=60)


def test_deploy_dra_driver_is_accepted_by_the_api_server(dra: Dra) -> None:
    """The DaemonSet, the DeviceClass and the RBAC of deploy/dra-driver/, as `kubectl apply -k` sends them,
    through the API server's validation and admission (server-side dry run: nothing is written)."""
    done = dra.cluster.kubectl("apply", "-k", str(DEPLOYED), "--dry-run=server")
    said = done.stdout
    for what in ("serviceaccount/multinetwork-dra-driver", "clusterrole.rbac.authorization.k8s.io/multinetwork-dra-driver",
                 "clusterrolebinding.rbac.authorization.k8s.io/multinetwork-dra-driver",
                 f"deviceclass.resource.k8s.io/{DRIVER}", "daemonset.apps/multinetwork-dra-driver created"):
        assert what in said, said
    assert "(server dry run)" in said, said
    assert dra.cluster.kubectl("-n", NAMESPACE, "get", "daemonset", "multinetwork-dra-driver",
                               "--ignore-not-found", "-o", "name").stdout.strip() == ""


def test_the_drivers_ran_as_their_service_account_and_no_request_was_refused(dra: Dra) -> None:
    """Last in the module: by now the drivers made every kind of request the tests above need."""
    for name, kubeconfig in dra.kubeconfigs.items():
        who = json.loads(dra.cluster.kubectl("--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json").stdout)
        info = who["status"]["userInfo"]
        assert info["username"] == f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
        assert info["extra"]["authentication.kubernetes.io/node-name"] == [name]
        log = dra.drivers[name].log.read_text(errors="replace")
        refused = [line for line in log.splitlines() if "forbidden" in line.lower() or " 403" in line]
        assert not refused, f"{name}'s driver: {refused}"
    # and no more than it needs: the DeviceClass is the administrator's, slices are patched, not updated,
    # and the status of claims allocated on other nodes is not its to write
    kubeconfig = str(dra.kubeconfigs[dra.a.name])
    for verb, resource, *more in (("create", "deviceclasses.resource.k8s.io"),
                                  ("update", "resourceslices.resource.k8s.io"),
                                  ("list", "resourceclaims.resource.k8s.io"), ("create", "events"),
                                  ("arbitrary-node:patch", f"resourceclaims.resource.k8s.io/{DRIVER}",
                                   "--subresource=driver")):
        can = dra.cluster.kubectl("--kubeconfig", kubeconfig, "auth", "can-i", verb, resource, *more, check=False)
        assert can.stdout.strip() == "no", (verb, resource, can.stdout, can.stderr)
    can = dra.cluster.kubectl("--kubeconfig", kubeconfig, "auth", "can-i", "associated-node:patch",
                              f"resourceclaims.resource.k8s.io/{DRIVER}", "--subresource=driver", check=False)
    assert can.stdout.strip() == "yes", (can.stdout, can.stderr)
