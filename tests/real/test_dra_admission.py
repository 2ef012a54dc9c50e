"""`podnetwork bridge --dra-claims`: a pod that names its networks only in its annotation gets DRA claims
at admission, and kube-scheduler, with no extender configured, places it by them (issue 36, items 3, 4).

On the nodes and drivers of tests/real/test_dra_driver.py (its `dra` fixture: node A offers `both`, node B
`both` and `bonly`, no node `nowhere`; their PodNetworks are of another provider than the bridge's, so the
bridge writes no NPWG selection and holds no pod behind its gate). For this module only, kube-scheduler
runs without the scheduler extender (the session's runs with it, as deploy/scheduler/ registers it), and
the bridge runs with `--dra-claims`; both are put back afterwards, also on failure. What is seen here and
nowhere else: the API server taking the webhook's `spec.resourceClaims`, kube-controller-manager's
resourceclaim controller making the claims from the templates the bridge made (and waiting for a
template that does not exist yet), and kube-scheduler's own messages.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bridge.dracontract import claims as dra_claims
from tests.real.attachments_support import bridged_networks
from tests.real.cluster_support import Api, Cluster, eventually, pod_manifest, wait_phase
from tests.real.objects_support import Made, condition, events_of, pods
from tests.real.test_dra_driver import DRIVER, RESOURCE, Dra, claims_of, devices
from tests.real.test_dra_driver import dra as dra  # the module-scoped fixture, reused (its own instance here)
from tests.soak.soak import Daemon

pytestmark = pytest.mark.usefixtures("components")


def scheduler_healthy(cluster: Cluster) -> bool:
    try:
        return httpx.get(f"https://127.0.0.1:{cluster.ports['scheduler']}/healthz", verify=False,
                         timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def scheduler_without_extender(cluster: Cluster) -> Iterator[Path]:
    """kube-scheduler restarted with the session's configuration minus `extenders`; the session's
    put back afterwards. Yields the configuration it runs with."""
    run = cluster.root / "run"
    daemon = Daemon("kube-scheduler", run / "kube-scheduler.pid", run / "kube-scheduler.log")
    daemon.remember()
    session_argv = list(daemon.argv)
    shipped = Path(session_argv[session_argv.index("--config") + 1])
    config = yaml.safe_load(shipped.read_text())
    config.pop("extenders", None)
    bare = cluster.root / "scheduler-no-extender.yaml"
    bare.write_text(yaml.safe_dump(config))
    try:
        daemon.argv = [str(bare) if arg == str(shipped) else arg for arg in session_argv]
        daemon.kill()
        daemon.start()
        eventually(lambda: scheduler_healthy(cluster), "kube-scheduler without the extender is healthy", timeout=60)
        yield bare
    finally:
        daemon.kill()
        daemon.argv = session_argv
        daemon.start()
        eventually(lambda: scheduler_healthy(cluster), "the session's kube-scheduler is healthy again", timeout=60)
        bare.unlink(missing_ok=True)


def webhook_ready(port: str) -> bool:
    try:
        return httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def bridge_with_claims(cluster: Cluster) -> Iterator[None]:
    """The session's bridge restarted with `--dra-claims DRIVER`; restarted as it was afterwards."""
    session_argv = cluster.components["bridge"].argv[1:]
    port = session_argv[session_argv.index("--webhook-port") + 1]

    def restart(argv: list[str]) -> None:
        cluster.components["bridge"].stop()
        cluster.start_component("bridge", argv, lambda: webhook_ready(port), timeout=90)

    try:
        restart([*session_argv, "--dra-claims", DRIVER])
        yield
    finally:
        restart(session_argv)


@pytest.fixture(scope="module")
def placed_by_dra(dra: Dra) -> Iterator[Dra]:
    with scheduler_without_extender(dra.cluster) as config:
        assert "extenders" not in yaml.safe_load(config.read_text())
        with bridge_with_claims(dra.cluster):
            yield dra


def entry(podnetwork: str) -> dict[str, str]:
    return {"name": dra_claims.claim_name(podnetwork), "resourceClaimTemplateName": dra_claims.template_name(podnetwork)}


def unschedulable(api: Api, ns: str, name: str) -> dict[str, Any] | None:
    found = condition(api.get(f"{pods(ns)}/{name}"), "PodScheduled")
    return found if found and found["status"] == "False" else None


def test_a_pod_naming_its_network_only_in_its_annotation_runs_on_the_node_that_offers_it(
        placed_by_dra: Dra, api: Api, made: Made, ns: str) -> None:
    dra = placed_by_dra
    eventually(lambda: dra.bonly in devices(api, dra.b.name), "node B offers bonly", timeout=60)
    networks = [{"podNetworkName": "default"}, {"podNetworkName": dra.bonly, "interfaceName": "bonly0"}]
    created = made.pod(ns, pod_manifest("placed", networks=networks))
    # the webhook's claims, the annotation kept (it carries interface names and order), no gate
    assert created["spec"]["resourceClaims"] == [entry(dra.bonly)]
    assert json.loads(created["metadata"]["annotations"]["multinetwork.x-k8s.io/networks"]) == networks
    assert not created["spec"].get("schedulingGates")
    pod = wait_phase(api, ns, "placed", timeout=180)
    assert pod["spec"]["nodeName"] == dra.b.name
    # the bridge made the template, kube-controller-manager the claim from it, kube-scheduler allocated it
    template = api.get(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates/{dra_claims.template_name(dra.bonly)}")
    assert template["metadata"]["labels"] == {dra_claims.MANAGED_BY: dra_claims.MANAGER}
    (asked,) = template["spec"]["spec"]["devices"]["requests"]  # as made, with the API server's defaults
    assert (asked["name"], asked["exactly"]["deviceClassName"], asked["exactly"]["selectors"]) == (
        dra_claims.REQUEST, DRIVER, [{"cel": {"expression": dra_claims.selector(DRIVER, dra.bonly)}}])
    (claim,) = claims_of(api, ns)
    assert [(o["kind"], o["name"]) for o in claim["metadata"]["ownerReferences"]] == [("Pod", "placed")]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER, dra.b.name, dra.bonly)
    assert pod["status"]["resourceClaimStatuses"] == [
        {"name": entry(dra.bonly)["name"], "resourceClaimName": claim["metadata"]["name"]}]
    assert dra.prepared(dra.b) == [claim["metadata"]["uid"]]
    # a second pod of the namespace shares the template (the bridge made it once) and the device
    made.pod(ns, pod_manifest("second", networks=networks))
    assert wait_phase(api, ns, "second", timeout=180)["spec"]["nodeName"] == dra.b.name
    assert len(api.get(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates")["items"]) == 1
    # hot-plug: a network added to the annotation of the running pod has no claim, and the bridge says so
    api.merge_patch(f"{pods(ns)}/placed", {"metadata": {"annotations": {"multinetwork.x-k8s.io/networks": json.dumps(
        [*networks, {"podNetworkName": dra.both}])}}})
    (said, *_) = eventually(lambda: events_of(api, ns, "placed", "NetworkWithoutClaim"),
                            "the bridge says the hot-plugged network has no claim", timeout=60)
    assert said["message"].startswith(f"PodNetwork(s) {dra.both} were added") and said["type"] == "Warning"
    assert api.get(f"{pods(ns)}/placed")["spec"]["resourceClaims"] == [entry(dra.bonly)]
    api.request("DELETE", pods(ns), params={"gracePeriodSeconds": "0"})
    eventually(lambda: not api.get(pods(ns))["items"], "the pods are gone", timeout=90)
    eventually(lambda: not claims_of(api, ns), "their claims are deleted with them", timeout=60)
    eventually(lambda: dra.prepared(dra.b) == [], "the kubelet unprepared the claims", timeout=60)


def test_a_pod_whose_network_no_node_offers_stays_pending_with_kube_schedulers_own_reason(
        placed_by_dra: Dra, api: Api, made: Made, ns: str) -> None:
    dra = placed_by_dra
    created = made.pod(ns, pod_manifest("stuck", networks=[{"podNetworkName": dra.nowhere}]))
    assert created["spec"]["resourceClaims"] == [entry(dra.nowhere)]
    assert not created["spec"].get("schedulingGates")  # Ready, of another provider: nothing holds it

    scheduled = eventually(lambda: unschedulable(api, ns, "stuck"), "kube-scheduler says why the pod stays Pending",
                           timeout=120)
    nodes = len(api.get("/api/v1/nodes")["items"])
    assert scheduled["reason"] == "Unschedulable"
    # kube-scheduler v1.36's words (its DynamicResources plugin and the preemption that follows), naming
    # no network: the claims are all it knows
    assert scheduled["message"] == (
        f"0/{nodes} nodes are available: {nodes} cannot allocate all claims. still not schedulable, preemption: "
        f"0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."), scheduled
    pod = api.get(f"{pods(ns)}/stuck")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    events = eventually(lambda: events_of(api, ns, "stuck", "FailedScheduling"), "a FailedScheduling Event", timeout=60)
    assert events[-1]["reportingComponent"] == "default-scheduler" and events[-1]["type"] == "Warning"
    assert events[-1]["message"] == scheduled["message"]
    (claim,) = claims_of(api, ns)  # made from the bridge's template, never allocated nor prepared
    assert not (claim.get("status") or {}).get("allocation")
    assert claim["metadata"]["uid"] not in dra.prepared(dra.a) + dra.prepared(dra.b)

    # a Ready network of the bridge offered nowhere: admission writes its NPWG selection at once, so no
    # gate holds the pod, and kube-scheduler says the same
    with bridged_networks(api, ns, "lone") as (lone,):
        try:
            created = made.pod(ns, pod_manifest("bridged", networks=[{"podNetworkName": lone.podnetwork}]))
            assert created["spec"]["resourceClaims"] == [entry(lone.podnetwork)]
            assert "k8s.v1.cni.cncf.io/networks" in created["metadata"]["annotations"]
            assert not created["spec"].get("schedulingGates")
            again = eventually(lambda: unschedulable(api, ns, "bridged"), "kube-scheduler holds the bridged pod",
                               timeout=120)
            assert again["message"] == scheduled["message"]
        finally:
            api.delete(f"{pods(ns)}/bridged")
            eventually(lambda: api.find(f"{pods(ns)}/bridged") is None, "the bridged pod is gone", timeout=90)


def test_a_claim_whose_template_is_missing_waits_for_it(
        placed_by_dra: Dra, api: Api, made: Made, ns: str) -> None:
    """What kube-controller-manager and kube-scheduler do while a pod's template does not exist
    (a pod created before the bridge made it): the pod waits, and runs once it exists."""
    dra = placed_by_dra
    eventually(lambda: dra.bonly in devices(api, dra.b.name), "node B offers bonly", timeout=60)
    name = "late-template"
    made.pod(ns, pod_manifest("early", resourceClaims=[{"name": "net", "resourceClaimTemplateName": name}]))

    # kube-controller-manager's resourceclaim controller says so on the pod, and retries
    (event, *_) = eventually(lambda: events_of(api, ns, "early", "FailedResourceClaimCreation"),
                             "kube-controller-manager reports the missing template", timeout=60)
    assert event["message"] == (f'PodResourceClaim net: resource claim template "{name}": '
                                f'resourceclaimtemplate.resource.k8s.io "{name}" not found'), event
    pod = api.get(f"{pods(ns)}/early")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName") and not claims_of(api, ns)
    # kube-scheduler holds the pod before scheduling while its claim does not exist: no condition, no Event of its own
    assert condition(pod, "PodScheduled") is None
    assert [e["reason"] for e in events_of(api, ns, "early")] == ["FailedResourceClaimCreation"]
    body = dra_claims.template(dra.bonly, ns, DRIVER)
    body["metadata"]["name"] = name
    api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", body)
    assert wait_phase(api, ns, "early", timeout=180)["spec"]["nodeName"] == dra.b.name
