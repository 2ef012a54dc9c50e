"""`podnetwork bridge --dra-claims`: the DRA claims admission adds to a new pod from its networks
(`bridge.operator.pods.claims`), the templates they come from (`bridge.dracontract.claims`), and
the bridge controller making those templates (`Bridge.reconcile_claims`). Decided purely."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import celpy
import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import translate
from bridge.dra.driver import classes
from bridge.dracontract import claims as dra_claims
from bridge.dracontract import names as dra_names
from bridge.operator import admission, controller, pods
from bridge.operator import command as bridge_command
from podnetwork.ground import constants, names
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import networks as kep_networks
from podnetwork.kube import client as kube
from tests.unit import webhook_deploy_support as support
from tests.unit.bridge_support import NS, attachment, nad, podnetwork

DRIVER = dra_names.DEFAULT_DRIVER
READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
ELSEWHERE = "example.com/elsewhere"
WORLD = translate.Objects.from_objects([
    {**podnetwork("dataplane"), "status": READY}, nad("dataplane"), podnetwork("storage"), nad("storage"),
    {**podnetwork("fabric", nads=[], provider=ELSEWHERE), "status": READY},
    {**podnetwork("default", nads=[], provider="example.com/cluster"), "status": READY},
    attachment("data-a", "dataplane"),
])


def request(nets: list[dict[str, Any]] | None, **spec: Any) -> dict[str, Any]:
    annotations = {} if nets is None else {constants.NETWORKS_ANNOTATION: json.dumps(nets)}
    return {
        "uid": "u-9", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": NS, "operation": "CREATE",
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "annotations": annotations},
                   "spec": {"containers": [{"name": "c", "image": "x"}], **spec}},
    }


def answer(req: dict[str, Any], driver: str | None = DRIVER) -> dict[str, Any]:
    response: dict[str, Any] = admission.mutate(req, WORLD, dra_driver=driver)["response"]
    return response


def patched(response: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    if "patch" not in response:
        return obj
    result: dict[str, Any] = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    return result


def entry(pn: str) -> dict[str, str]:
    return {"name": f"pn-{pn}", "resourceClaimTemplateName": f"podnetwork-{pn}"}


def test_each_network_but_default_becomes_a_claim_from_its_podnetworks_template_in_order() -> None:
    req = request([{"podNetworkName": "default"}, {"podNetworkName": "fabric", "interfaceName": "fab0"},
                   {"podNetworkName": "storage"}])
    pod = patched(answer(req), req["object"])
    assert pod["spec"]["resourceClaims"] == [entry("fabric"), entry("storage")]
    req = request([{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}])
    with_claims, without = answer(req), answer(req, driver=None)
    pod = patched(with_claims, req["object"])
    assert pod["spec"]["resourceClaims"] == [entry("dataplane")]
    # the annotation stays (it carries the interface names and order), the selection is written as before
    assert pod["metadata"]["annotations"] == patched(without, req["object"])["metadata"]["annotations"]
    assert "k8s.v1.cni.cncf.io/networks" in pod["metadata"]["annotations"]


def test_an_attachment_is_claimed_as_its_podnetwork_and_a_podnetwork_reached_twice_once() -> None:
    req = request([{"podNetworkAttachmentName": "data-a"}, {"podNetworkName": "dataplane"}])
    pod = patched(answer(req), req["object"])
    assert pod["spec"]["resourceClaims"] == [entry("dataplane")]


def test_an_unknown_attachment_means_no_claims_and_a_warning_the_annotation_path_holds() -> None:
    req = request([{"podNetworkName": "dataplane"}, {"podNetworkAttachmentName": "later"}])
    response = answer(req)
    pod = patched(response, req["object"])
    assert "resourceClaims" not in pod["spec"]
    assert any("not known yet" in w and "annotation only" in w for w in response["warnings"])
    # and the gate, as without --dra-claims: the attachment may be a bridge network
    assert pod["spec"]["schedulingGates"] == [{"name": pods.SCHEDULING_GATE}]


def test_a_missing_or_not_ready_podnetwork_is_claimed_all_the_same_and_the_gate_logic_is_unchanged() -> None:
    req = request([{"podNetworkName": "storage"}, {"podNetworkName": "nobody-made-me"}])
    with_claims, without = answer(req), answer(req, driver=None)
    pod, plain = patched(with_claims, req["object"]), patched(without, req["object"])
    assert pod["spec"]["resourceClaims"] == [entry("storage"), entry("nobody-made-me")]
    assert pod["spec"]["schedulingGates"] == plain["spec"]["schedulingGates"] == [{"name": pods.SCHEDULING_GATE}]
    assert with_claims["warnings"] == without["warnings"]


def test_the_pods_own_claims_stay_and_ours_are_appended() -> None:
    own = {"name": "gpu", "resourceClaimName": "my-gpu"}
    req = request([{"podNetworkName": "fabric"}], resourceClaims=[own])
    pod = patched(answer(req), req["object"])
    assert pod["spec"]["resourceClaims"] == [own, entry("fabric")]


def test_an_entry_of_the_pods_under_our_name_is_left_and_said() -> None:
    theirs = {"name": "pn-fabric", "resourceClaimTemplateName": "handmade"}
    req = request([{"podNetworkName": "fabric"}, {"podNetworkName": "dataplane"}], resourceClaims=[theirs])
    response = answer(req)
    pod = patched(response, req["object"])
    assert pod["spec"]["resourceClaims"] == [theirs, entry("dataplane")]
    assert any("'pn-fabric'" in w and "fabric gets no claim" in w for w in response["warnings"])


def test_reinvocation_adds_nothing_more() -> None:
    """reinvocationPolicy IfNeeded: a second pass over the patched pod is a no-op, claims included."""
    for nets in ([{"podNetworkName": "fabric"}], [{"podNetworkName": "storage"}, {"podNetworkName": "dataplane"}]):
        req = request(nets)
        req["object"] = patched(answer(req), req["object"])
        assert answer(req) == {"uid": "u-9", "allowed": True}


@pytest.mark.parametrize("nets", [None, [{"podNetworkName": "default"}]])
def test_a_pod_without_networks_gets_the_same_answer_as_without_the_flag(nets: list[dict[str, Any]] | None) -> None:
    req = request(nets)
    assert answer(req) == answer(req, driver=None) == {"uid": "u-9", "allowed": True}


@pytest.mark.parametrize("spec", [{"nodeName": "n1"}, {"hostNetwork": True}])
def test_a_bound_or_host_network_pod_gets_no_claims(spec: dict[str, Any]) -> None:
    req = request([{"podNetworkName": "fabric"}], **spec)
    assert "resourceClaims" not in patched(answer(req), req["object"])["spec"]


def test_without_the_flag_the_answer_is_the_annotation_paths() -> None:
    req = request([{"podNetworkName": "dataplane"}])
    assert "resourceClaims" not in patched(answer(req, driver=None), req["object"])["spec"]
    assert answer(req, driver=None) == admission.mutate(req, WORLD)["response"]


_CEL = celpy.Environment()


def _selects(expression: str, device: dict[str, Any]) -> bool:
    program = _CEL.program(_CEL.compile(expression))
    return bool(program.evaluate({"device": celpy.json_to_cel(device)}))


def test_the_template_asks_the_drivers_class_for_the_podnetworks_device_as_the_drivers_own_builder_does() -> None:
    made = dra_claims.template("blue", NS, DRIVER)
    expected = classes.claim_template("podnetwork-blue", NS, ["blue"], DRIVER).to_dict()
    assert made["spec"] == expected["spec"]
    assert made["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "podnetwork-bridge"}
    assert made["metadata"]["annotations"] == {dra_claims.PODNETWORK_ANNOTATION: "blue"}
    (request_,) = made["spec"]["spec"]["devices"]["requests"]
    expression = request_["exactly"]["selectors"][0]["cel"]["expression"]
    device = {"driver": DRIVER, "attributes": {DRIVER: {dra_names.ATTRIBUTE_PODNETWORK: "blue"}}}
    assert _selects(expression, device)
    assert not _selects(expression, {**device, "attributes": {DRIVER: {dra_names.ATTRIBUTE_PODNETWORK: "red"}}})


subdomains = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,60}[a-z0-9])?){0,4}",
                           fullmatch=True).filter(lambda n: len(n) <= names.DNS1123_SUBDOMAIN_MAX)


@given(subdomains, subdomains)
@settings(max_examples=200, deadline=None)
def test_names_are_valid_and_tell_podnetworks_apart(one: str, other: str) -> None:
    for pn in (one, other):
        template, claim = dra_claims.template_name(pn), dra_claims.claim_name(pn)
        assert names.is_dns1123_subdomain(template) and len(template) <= names.DNS1123_SUBDOMAIN_MAX
        assert names.is_dns1123_label(claim) and len(claim) <= names.DNS1123_LABEL_MAX
        expression = dra_claims.selector(DRIVER, pn)
        assert _selects(expression, {"attributes": {DRIVER: {dra_names.ATTRIBUTE_PODNETWORK: pn}}})
    if one != other:
        assert dra_claims.template_name(one) != dra_claims.template_name(other)
        assert dra_claims.claim_name(one) != dra_claims.claim_name(other)


network = st.one_of(
    st.sampled_from(["default", "fabric", "dataplane", "storage", "new.one", "x" * 70]).map(
        lambda n: {"podNetworkName": n}),
    st.just({"podNetworkAttachmentName": "data-a"}))


@given(st.lists(network, max_size=6), st.booleans())
@settings(max_examples=150, deadline=None)
def test_any_annotation_gets_one_claim_per_podnetwork_it_reaches_and_a_second_pass_adds_none(
        nets: list[dict[str, Any]], own_claim: bool) -> None:
    """Through the annotation's parser: whatever the networks (valid for the KEP or not), the claims
    are exactly its distinct PodNetworks but default, in order, or none when it does not parse."""
    own = [{"name": "own", "resourceClaimName": "own"}] if own_claim else []
    req = request(nets, **({"resourceClaims": own} if own else {}))
    pod = patched(answer(req), req["object"])
    reached = []
    for net in nets:
        pn = "dataplane" if "podNetworkAttachmentName" in net else net["podNetworkName"]
        if pn != "default" and pn not in reached:
            reached.append(pn)
    try:
        kep_networks.parse(json.dumps(nets))
        parses = True
    except InvalidObject:
        parses = False
    wanted = [dra_claims.claim_entry(pn) for pn in reached] if parses else []
    assert (pod["spec"].get("resourceClaims") or []) == own + wanted
    req["object"] = pod
    assert "patch" not in answer(req) or "resourceClaims" not in base64.b64decode(answer(req)["patch"]).decode()


def claimed_pod(nets: list[dict[str, Any]], entries: list[dict[str, str]]) -> pods.ClaimedPod:
    return pods.ClaimedPod.model_validate({"metadata": {"name": "web", "namespace": NS, "annotations": {
        constants.NETWORKS_ANNOTATION: json.dumps(nets)}}, "spec": {"resourceClaims": entries}})


def test_templates_wanted_are_those_of_the_claims_admission_made() -> None:
    pod = claimed_pod([{"podNetworkName": "fabric"}, {"podNetworkName": "dataplane"}],
                      [entry("fabric"), {"name": "own", "resourceClaimTemplateName": "own"}])
    assert pods.templates_wanted(pod, WORLD, DRIVER) == [dra_claims.template("fabric", NS, DRIVER)]
    # a network added later (hot-plug) has no claim: said, never claimed
    assert pods.unclaimed(pod, WORLD) == ["dataplane"]
    assert pods.unclaimed(claimed_pod([{"podNetworkName": "fabric"}], []), WORLD) == []


class RecordingApi:
    on_write = None

    def __init__(self, exists: bool = False) -> None:
        self.created: list[dict[str, Any]] = []
        self.exists = exists

    async def create(self, resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(body)
        if self.exists:
            raise kube.Conflict("create", 409, "AlreadyExists", reason="AlreadyExists")
        return body


def pod_body(nets: list[dict[str, Any]], entries: list[dict[str, str]]) -> dict[str, Any]:
    return claimed_pod(nets, entries).model_dump(by_alias=True, exclude_none=True)


@pytest.mark.parametrize("exists", [False, True])
def test_the_controller_makes_each_template_once(exists: bool) -> None:
    api = RecordingApi(exists)
    bridge = controller.Bridge(config=controller.BridgeSettings(dra_driver=DRIVER), api=api)  # type: ignore[arg-type]
    for kind in ("podnetworks", "attachments"):
        getattr(bridge, kind).update(getattr(WORLD, kind))
    body = pod_body([{"podNetworkName": "fabric"}], [entry("fabric")])
    for _ in range(3):
        asyncio.run(bridge.pod_event(None, body))
    assert api.created == [dra_claims.template("fabric", NS, DRIVER)]
    # one deleted (its watch says so) is made again at the next pod that names it
    asyncio.run(bridge.template_event("DELETED", dra_claims.template("fabric", NS, DRIVER)))
    asyncio.run(bridge.pod_event(None, body))
    assert len(api.created) == 2


def test_without_the_flag_the_controller_makes_no_template_and_watches_none() -> None:
    api = RecordingApi()
    bridge = controller.Bridge(api=api)  # type: ignore[arg-type]
    asyncio.run(bridge.pod_event(None, pod_body([{"podNetworkName": "fabric"}], [entry("fabric")])))
    assert api.created == []
    assert "resourceclaimtemplates" not in {w.plural for w in bridge.watches()}
    dra = controller.Bridge(config=controller.BridgeSettings(dra_driver=DRIVER))
    assert "resourceclaimtemplates" in {w.plural for w in dra.watches()}


@pytest.mark.parametrize(("argv", "problem"), [
    (["--dra-claims", DRIVER], "add --webhook"),
    (["--webhook", "--dra-claims", "Not_A_Name"], "--dra-claims 'Not_A_Name' is not a DNS subdomain"),
    (["--webhook", "--dra-claims", DRIVER], None),
])
def test_the_flag_needs_the_webhook_and_a_driver_name(argv: list[str], problem: str | None) -> None:
    args = support.parsed(argv, bridge_command.command.configure)
    said = bridge_command._problem(args)
    assert (said is None) if problem is None else (said is not None and problem in said), said
    if problem is None:
        assert args.dra_claims == DRIVER and bridge_command.features(args)["dra-claims"] == DRIVER


def test_uninstall_deletes_the_templates_by_the_label_the_bridge_puts_on_them() -> None:
    script = (Path(__file__).resolve().parents[3] / "deploy" / "uninstall.sh").read_text()
    labels = dra_claims.template("blue", NS, DRIVER)["metadata"]["labels"]
    assert labels == {dra_claims.MANAGED_BY: dra_claims.MANAGER}
    assert (f"k delete resourceclaimtemplates.resource.k8s.io -A -l {dra_claims.MANAGED_BY}={dra_claims.MANAGER}"
            in script)
