"""`podnetwork bridge --enforce-use-permission`: a hand-written NPWG selection naming the
NetworkAttachmentDefinition of a bridge PodNetwork needs `use` of that PodNetwork, over HTTP.

The bridge's webhook app (httpx against the ASGI app) reads the bridge controller's memory
(real kopf on kmock's emulator) and asks SubjectAccessReviews through the bridge's own API
client; kmock answers them as RBAC would over each test's grants (as the controller's tests
do: tests/api/controller/test_use_permission.py), and records every review.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import kmock as kmock_lib
import pytest

from bridge.operator import admission, admissionapp
from bridge.operator import command as bridge_command
from podnetwork import cli
from podnetwork.ground import constants
from podnetwork.kep.admissionreads import UseCache, UseReviews
from tests.api import bridge_api_support as bs
from tests.api.bridge.test_command_webhook import MWC, PODNETWORK, free_port
from tests.api.controller.test_use_permission import SAR_PATH, authorizer, reviews
from tests.api.kube_emulator import write_kubeconfig
from tests.api.metrics_support import scrape, value
from tests.unit.crd_support import cel

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

NPWG = constants.NPWG_NETWORKS_ANNOTATION
KEP = constants.NETWORKS_ANNOTATION
ALICE = {"username": "alice", "uid": "u-alice", "groups": ["devs", "system:authenticated"]}
BRIDGE_SA = {"username": "system:serviceaccount:multinetwork-system:podnetwork-bridge",
             "groups": ["system:serviceaccounts", "system:serviceaccounts:multinetwork-system"]}
POD_SA = f"system:serviceaccount:{bs.NS}:default"


def new_pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": bs.NS, "annotations": dict(annotations)},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}


def review(obj: dict[str, Any], *, user: dict[str, Any] = ALICE, old: dict[str, Any] | None = None,
           subresource: str = "") -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": bs.NS,
        "operation": "CREATE" if old is None else "UPDATE", "object": obj, "userInfo": user}
    if old is not None:
        request["oldObject"] = old
    if subresource:
        request["subResource"] = subresource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def sent_by_the_api_server(body: dict[str, Any], *, enforce: bool = True) -> bool:
    """Whether the API server calls the bridge's validating webhook for this review: a configuration
    registered, its rules, then its matchConditions (CEL, with cel-python)."""
    configurations = admission.webhook_configurations({"url": "https://x"}, enforce_use=enforce)
    hooks = [h for c in configurations if c["kind"] == "ValidatingWebhookConfiguration" for h in c["webhooks"]]
    request = body["request"]
    resource = "/".join(filter(None, ("pods", request.get("subResource"))))
    for hook in hooks:
        if any(request["operation"] in r["operations"] and resource in r["resources"] for r in hook["rules"]):
            activation = {"request": {"operation": request["operation"],
                                      "subResource": request.get("subResource", "")},
                          "object": request["object"], "oldObject": request.get("oldObject")}
            return all(bool(cel(c["expression"], activation)) for c in hook["matchConditions"])
    return False


async def validate(bridge: Any, body: dict[str, Any], *, enforce: bool = True) -> httpx.Response:
    reviews_ = UseReviews(bridge.api, UseCache(), who="the bridge")
    app = admissionapp.app(bridge.objects, may_use=reviews_.may_use if enforce else None,
                           podnetworks=admissionapp.PodNetworkListing(bridge.api).podnetworks)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://webhook") as client:
        return await client.post(admission.VALIDATE_PATH, json=body)


async def mutate(bridge: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as the bridge's mutating webhook leaves it (the selection, when its networks are Ready)."""
    app = admissionapp.app(bridge.objects)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://webhook") as client:
        response = (await client.post(admission.MUTATE_PATH, json=review(obj))).json()["response"]
    assert response["allowed"], response
    import jsonpatch

    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return dict(jsonpatch.apply_patch(obj, ops))


def seed(k: bs.Emulator, *objs: dict[str, Any]) -> None:
    bs.declare_resources(k)
    kinds = {"PodNetwork": bs.PN, "PodNetworkAttachment": bs.PNA, "NetworkAttachmentDefinition": bs.NAD}
    for obj in objs:
        meta = obj["metadata"]
        k.objects[kinds[obj["kind"]], meta.get("namespace"), meta["name"]] = obj


def world(k: bs.Emulator) -> None:
    seed(k, bs.podnetwork("default", nad=None, provider="example.com/cluster"),
         bs.podnetwork("dataplane"), bs.nad("dataplane"), bs.nad("plain"))


async def test_a_hand_written_selection_of_a_backed_nad_is_refused_without_use_and_allowed_with_it(
        kmock: bs.Emulator) -> None:
    world(kmock)
    grants: set[tuple[str, str]] = set()
    authorizer(kmock, grants)
    hand_written = review(new_pod({NPWG: "nets/dataplane@net1"}))
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "default", "dataplane", nads=("dataplane", "plain"))
        refused = await validate(bridge, hand_written)
        grants.add((POD_SA, "dataplane"))
        allowed = await validate(bridge, hand_written)
    assert refused.status_code == 200
    response = refused.json()["response"]
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    message = status["message"]
    assert message == (
        'Pod "web" is forbidden: neither the user "alice" nor the pod\'s ServiceAccount '
        f'"{POD_SA}" may use PodNetwork "dataplane" (named through NetworkAttachmentDefinition '
        f'"nets/dataplane" in {NPWG}): missing permission: verb "use" on resource "podnetworks" in API group '
        f'"{constants.GROUP}" with resourceName "dataplane" in namespace "{bs.NS}"; grant it to the pod\'s '
        'ServiceAccount or to the user with a Role or ClusterRole and a RoleBinding (docs/controller.md '
        '"Permission to use a PodNetwork")')
    assert status["details"]["causes"] == [{"reason": "FieldValueForbidden",
                                            "field": f"metadata.annotations[{NPWG}][0]", "message": message}]
    assert allowed.json()["response"] == {"uid": "u-1", "allowed": True}
    # The user first, then the pod's ServiceAccount; the ServiceAccount's "yes" is asked anew (a denial
    # is cached only briefly, but this is another cache: each review built its own).
    assert reviews(kmock) == [("alice", "dataplane"), (POD_SA, "dataplane"),
                              ("alice", "dataplane"), (POD_SA, "dataplane")]
    sent = bs.requests_to(kmock, "POST", SAR_PATH)[0]
    assert sent["spec"]["resourceAttributes"] == {"group": constants.GROUP, "resource": "podnetworks",
                                                  "verb": "use", "name": "dataplane", "namespace": bs.NS}
    assert sent_by_the_api_server(hand_written)
    assert not sent_by_the_api_server(hand_written, enforce=False)  # off by default: not even registered


async def test_both_forms_and_other_namespaces_are_read_and_a_nad_no_podnetwork_backs_asks_nothing(
        kmock: bs.Emulator) -> None:
    world(kmock)
    authorizer(kmock, set())
    as_json = review(new_pod({NPWG: json.dumps([{"name": "plain", "namespace": "nets"},
                                                 {"name": "dataplane", "namespace": "nets", "interface": "x1"}])}))
    unbacked = review(new_pod({NPWG: "nets/plain, nets/missing"}))
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "default", "dataplane", nads=("dataplane", "plain"))
        json_refused = (await validate(bridge, as_json)).json()["response"]
        asks_before = len(reviews(kmock))
        plain = (await validate(bridge, unbacked)).json()["response"]
    assert json_refused["allowed"] is False
    assert json_refused["status"]["details"]["causes"][0]["field"] == f"metadata.annotations[{NPWG}][1]"
    assert plain == {"uid": "u-1", "allowed": True}
    assert len(reviews(kmock)) == asks_before  # an NPWG-only network is no PodNetwork's: nothing to ask


async def test_a_pod_naming_the_podnetwork_with_the_bridges_own_selection_is_allowed_without_asking(
        kmock: bs.Emulator) -> None:
    world(kmock)
    authorizer(kmock, set())  # not even the ServiceAccount: the controller's webhook checked the KEP networks
    declared = new_pod({KEP: json.dumps([{"podNetworkName": "default"},
                                         {"podNetworkName": "dataplane", "interfaceName": "net1"}])})
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "default", "dataplane", nads=("dataplane", "plain"))
        created = await mutate(bridge, declared)
        assert NPWG in created["metadata"]["annotations"]  # the bridge's webhook wrote it
        at_creation = await validate(bridge, review(created))
        # The bridge controller's PATCH of a gated pod: an UPDATE adding the selection, sent by the bridge.
        patched = await validate(bridge, review(created, user=BRIDGE_SA, old=declared))
    assert at_creation.json()["response"] == {"uid": "u-1", "allowed": True}
    assert patched.json()["response"] == {"uid": "u-1", "allowed": True}
    assert reviews(kmock) == []


async def test_a_status_update_adding_a_backed_nad_is_refused_and_one_keeping_it_is_allowed(
        kmock: bs.Emulator) -> None:
    world(kmock)
    authorizer(kmock, set())
    old = new_pod({NPWG: "nets/plain"})
    hijack = copy.deepcopy(old)
    hijack["metadata"]["annotations"][NPWG] = "nets/plain,nets/dataplane"
    kubelet = copy.deepcopy(old)
    kubelet["status"] = {"phase": "Running"}
    adding = review(hijack, old=old, subresource="status")
    keeping = review(hijack, old=hijack, subresource="status")
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "default", "dataplane", nads=("dataplane", "plain"))
        refused = (await validate(bridge, adding)).json()["response"]
        kept = (await validate(bridge, keeping)).json()["response"]
    assert refused["allowed"] is False
    assert refused["status"]["details"]["causes"][0]["field"] == f"metadata.annotations[{NPWG}][1]"
    assert 'may use PodNetwork "dataplane"' in refused["status"]["message"]
    assert kept == {"uid": "u-1", "allowed": True}
    # As registered: the status update changing the selection reaches the webhook; the kubelet's does not.
    assert sent_by_the_api_server(adding)
    assert not sent_by_the_api_server(review(kubelet, old=old, subresource="status"))
    assert not sent_by_the_api_server(keeping)


async def test_a_failing_subject_access_review_answers_503_with_the_reason(kmock: bs.Emulator) -> None:
    world(kmock)
    kmock[f"post {SAR_PATH}"] << 403
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "default", "dataplane", nads=("dataplane", "plain"))
        resp = await validate(bridge, review(new_pod({NPWG: "nets/dataplane"})))
    assert resp.status_code == 503
    detail = resp.json()["detail"]
    assert detail.startswith("cannot check the permission to use the PodNetworks of the pod's NPWG selection "
                             f"({NPWG}): POST {SAR_PATH} failed: ")
    assert "HTTP 403" in detail and detail.endswith("retry the request")


PEERINGS = "kopf.dev/v1/clusterkopfpeerings"


def paused_by_a_peer(k: bs.Emulator, name: str = "podnetwork-bridge") -> dict[str, Any]:
    """A rollout's new replica: deploy/peering/'s ClusterKopfPeering holds a live peer of a higher
    priority (the old replica), so kopf keeps this one paused, its watches closed, while its
    webhook serves. The `bs.running` options that start it so."""
    k.resources[PEERINGS] = kmock_lib.ResourceInfo(kind="ClusterKopfPeering", namespaced=False,
                                                   verbs={"list", "watch", "get", "patch"})
    now = datetime.datetime.now(datetime.UTC).isoformat()
    k.objects[PEERINGS, None, name] = {
        "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
        "metadata": {"name": name, "resourceVersion": "1"},
        "status": {"the-old-replica": {"priority": 100, "lifetime": 600, "lastseen": now}}}
    return {"standalone": False, "peering_name": name, "priority": 0, "identity": "the-new-replica"}


def listings(k: bs.Emulator) -> list[Any]:
    """The LISTs of PodNetworks sent (not kopf's watches)."""
    return [r for r in list(k) if r.method.value == "GET" and str(r.url.path) == bs.PN_URL
            and r.params.get("watch") not in ("true", "1")]


async def test_a_replica_paused_by_peering_confirms_with_the_api_which_podnetworks_back_a_nad(
        kmock: bs.Emulator) -> None:
    world(kmock)
    grants: set[tuple[str, str]] = set()
    authorizer(kmock, grants)
    hand_written = review(new_pod({NPWG: "nets/dataplane@net1"}))
    async with bs.running(kmock, **paused_by_a_peer(kmock)) as bridge:
        refused = (await validate(bridge, hand_written)).json()["response"]
        grants.add((POD_SA, "dataplane"))
        allowed = (await validate(bridge, hand_written)).json()["response"]
        plain = (await validate(bridge, review(new_pod({NPWG: "nets/plain"})))).json()["response"]
        memory = bridge.objects()
    # The premise: its watches closed, the paused replica's memory has seen no PodNetwork.
    assert not memory.podnetworks
    assert refused["allowed"] is False
    assert refused["status"]["code"] == 403
    assert refused["status"]["details"]["causes"][0]["field"] == f"metadata.annotations[{NPWG}][0]"
    assert 'may use PodNetwork "dataplane" (named through NetworkAttachmentDefinition "nets/dataplane"' in \
        refused["status"]["message"]
    assert allowed == {"uid": "u-1", "allowed": True}
    assert plain == {"uid": "u-1", "allowed": True}  # a NAD no PodNetwork backs, confirmed: nothing to ask
    assert reviews(kmock) == [("alice", "dataplane"), (POD_SA, "dataplane"), ("alice", "dataplane"),
                              (POD_SA, "dataplane")]
    # One LIST per request its memory could not vouch for, a consistent read (no resourceVersion).
    sent = listings(kmock)
    assert len(sent) == 3
    assert all("resourceVersion" not in r.params for r in sent)


async def test_a_failing_listing_of_podnetworks_answers_503_saying_which_podnetworks_back_the_nad_is_unknown(
        kmock: bs.Emulator) -> None:
    world(kmock)
    authorizer(kmock, {(POD_SA, "dataplane")})
    kmock[f"get {bs.PN_URL}"] << 403
    async with bs.running(kmock, **paused_by_a_peer(kmock)) as bridge:
        resp = await validate(bridge, review(new_pod({NPWG: "nets/dataplane"})))
    assert resp.status_code == 503
    detail = resp.json()["detail"]
    assert detail.startswith("cannot check the permission to use the PodNetworks of the pod's NPWG selection "
                             f"({NPWG}): the bridge could not confirm which PodNetworks back the "
                             "NetworkAttachmentDefinitions the selection names: ")
    assert "HTTP 403" in detail and detail.endswith("retry the request")
    assert reviews(kmock) == []


@pytest.mark.timeout(90)
async def test_the_command_paused_by_peering_lists_the_podnetworks_its_memory_lacks_and_counts_the_lists(
        kmock: bs.Emulator, tmp_path: Path) -> None:
    world(kmock)
    authorizer(kmock, set())
    paused_by_a_peer(kmock)
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    port, metrics_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "bridge", "--kubeconfig", str(config), "--webhook", "--enforce-use-permission",
        "--webhook-host", "127.0.0.1", "--webhook-port", str(port), "--metrics-port", str(metrics_port),
        "--peering", "podnetwork-bridge", "--no-services",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "KUBECONFIG": ""})
    try:
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=False) as client:
            for _ in range(300):
                try:
                    sent = await client.post(admission.VALIDATE_PATH, json=review(new_pod({NPWG: "nets/dataplane"})))
                    break
                except httpx.TransportError:  # not serving yet
                    await asyncio.sleep(0.1)
        samples = await scrape(f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()
    # The premise: paused from the start, it never watched PodNetworks, so its memory holds none.
    assert not [r for r in list(kmock) if str(r.url.path) == bs.PN_URL and r.params.get("watch") in ("true", "1")]
    answer = sent.json()["response"]
    assert answer["allowed"] is False
    assert 'may use PodNetwork "dataplane"' in answer["status"]["message"]
    assert value(samples, "podnetwork_bridge_podnetwork_listings_total", outcome="listed") == 1
    assert value(samples, "podnetwork_bridge_podnetwork_listings_total", outcome="failed") == 0


async def test_without_the_flag_the_validating_path_allows_everything_and_asks_nothing(kmock: bs.Emulator) -> None:
    # A configuration left registered after the flag was turned off must not refuse pods.
    world(kmock)
    authorizer(kmock, set())
    async with bs.running(kmock) as bridge:
        await bs.seen(bridge, "default", "dataplane", nads=("dataplane", "plain"))
        resp = await validate(bridge, review(new_pod({NPWG: "nets/dataplane"})), enforce=False)
    assert resp.json()["response"] == {"uid": "u-1", "allowed": True}
    assert reviews(kmock) == []


VWC = "admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


@pytest.mark.timeout(150)
async def test_the_command_flag_serves_and_registers_the_validating_webhook_asking_with_the_bridges_credentials_and_withdraws_it_once_off(
        kmock: bs.Emulator, tmp_path: Path) -> None:
    world(kmock)
    authorizer(kmock, set())
    for resource, kind in ((MWC, "MutatingWebhookConfiguration"), (VWC, "ValidatingWebhookConfiguration")):
        kmock.resources[resource] = kmock_lib.ResourceInfo(kind=kind, namespaced=False,
                                                           verbs={"create", "get", "list", "patch", "delete"})
    parser = cli.build_parser({"bridge": bridge_command.command})
    assert parser.parse_args(["bridge"]).enforce_use_permission is False  # off unless asked
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"), token="secret-token")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "bridge", "--kubeconfig", str(config), "--webhook", "--enforce-use-permission",
        "--webhook-host", "127.0.0.1", "--webhook-port", str(port), "--manage-webhooks",
        "--webhook-url", f"https://localhost:{port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "KUBECONFIG": ""})
    try:
        registered = await bs.eventually(lambda: kmock.objects[VWC, None, admission.CONFIGURATION_NAME].raw,
                                         timeout=30)
        (hook,) = registered["webhooks"]
        assert hook["clientConfig"]["url"] == f"https://localhost:{port}{admission.VALIDATE_PATH}"
        assert hook["failurePolicy"] == "Fail"
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=False) as client:
            # Whether or not its watches delivered the PodNetwork yet: what memory lacks is listed.
            answer = (await client.post(admission.VALIDATE_PATH,
                                        json=review(new_pod({NPWG: "nets/dataplane"})))).json()["response"]
        assert 'may use PodNetwork "dataplane"' in answer["status"]["message"]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()
    sent = [r for r in list(kmock) if r.method.value == "POST" and str(r.url.path) == SAR_PATH]
    assert sent and {r.data["spec"]["user"] for r in sent} == {"alice", POD_SA}
    assert all(r.headers.get("Authorization") == "Bearer secret-token" for r in sent)

    # Restarted without the flag, the bridge withdraws the validating webhook it had registered
    # (a configuration left behind would send every matching pod to a bridge that no longer checks).
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "bridge", "--kubeconfig", str(config), "--webhook",
        "--webhook-host", "127.0.0.1", "--webhook-port", str(port), "--manage-webhooks",
        "--webhook-url", f"https://localhost:{port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "KUBECONFIG": ""})
    try:
        await bs.eventually(lambda: kmock.objects[VWC, None, admission.CONFIGURATION_NAME].deleted, timeout=30)
        assert kmock.objects[MWC, None, admission.CONFIGURATION_NAME].raw["webhooks"]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()
    assert "withdrew ValidatingWebhookConfiguration podnetwork-bridge" in out.decode()


async def test_enforce_use_permission_without_the_webhook_is_refused_before_touching_the_cluster() -> None:
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "bridge", "--enforce-use-permission",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "--enforce-use-permission is enforced by the bridge's validating webhook, which --webhook serves: " \
           "add --webhook" in err.decode()
