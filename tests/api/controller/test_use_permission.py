"""Permission to use a PodNetwork (KEP Phase II requirement 16) at the validating webhook, over HTTP.

The admission app (httpx against the ASGI app) asks the running controller
(real kopf, logged in to kmock over HTTP), which sends SubjectAccessReviews to
the API through its own client. kmock answers them with a reaction that plays
the API server's RBAC authorizer over the grants each test sets, and records
every review, so the tests assert what was asked as well as what was decided.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.admission import apply_json_patch
from podnetwork import cli
from podnetwork.commands import admissionapp
from podnetwork.commands import controller as command
from podnetwork.ground import constants
from podnetwork.kep import admission, controller
from tests.api.controller_support import ask_the_command, attachment, running
from tests.api.kube_emulator import PNA, Emulator, declare_resources, requests_to

# Emulator: it answers reviews without storing them, as an API server does.
pytestmark = pytest.mark.kmock(cls=Emulator)

ANN = constants.NETWORKS_ANNOTATION
SETTINGS = controller.ControllerSettings(create_default=False, inuse_message_interval=0.2)
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ALICE = {"username": "alice", "uid": "u-alice", "groups": ["devs", "system:authenticated"],
         "extra": {"scopes": ["a", "b"]}}
RS_CONTROLLER = {"username": "system:serviceaccount:kube-system:replicaset-controller",
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"]}


def review(nets: list[dict[str, str]], *, user: dict[str, Any] | None = None, sa: str | None = None,
           ns: str = "ns", operation: str = "CREATE") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if sa is not None:
        spec["serviceAccountName"] = sa
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
           "metadata": {"name": "web", "namespace": ns, "annotations": {ANN: json.dumps(nets)}}}
    request: dict[str, Any] = {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": ns,
        "operation": operation, "object": pod, "userInfo": user if user is not None else ALICE}
    if operation == "UPDATE":
        request["oldObject"] = pod
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def authorizer(kmock: Any, grants: set[tuple[str, str]]) -> None:
    """Answer SubjectAccessReviews as RBAC would with `grants`: (user, PodNetwork) pairs that
    may `use`, in any namespace."""
    def answer(request: Any) -> dict[str, Any]:
        spec = request.data["spec"]
        attrs = spec["resourceAttributes"]
        allowed = (attrs.get("verb") == "use" and attrs.get("resource") == "podnetworks"
                   and attrs.get("group") == constants.GROUP
                   and (spec["user"], attrs.get("name")) in grants)
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec,
                "status": {"allowed": allowed}}
    kmock[f"post {SAR_PATH}"] << answer


def reviews(kmock: Any) -> list[tuple[str, str]]:
    """(user, PodNetwork) of every SubjectAccessReview the controller sent, in order."""
    return [(body["spec"]["user"], body["spec"]["resourceAttributes"]["name"])
            for body in requests_to(kmock, "POST", SAR_PATH)]


async def admit(ctl: controller.Controller, body: dict[str, Any], *,
                enforce: bool = True) -> tuple[httpx.Response, dict[str, Any]]:
    """The review through both webhooks, as the API server sends it: the mutating one first, its
    JSON Patch applied, then the validating one. Its answer, and the pod as it would be stored."""
    app = admissionapp.app(ctl.namespace, may_use=ctl.may_use if enforce else None,
                        attachment_network=ctl.attachment_network)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        mutated = (await client.post(admission.MUTATE_PATH, json=body)).json()["response"]
        assert mutated["allowed"], mutated
        if "patch" in mutated:
            request = body["request"]
            ops = json.loads(base64.b64decode(mutated["patch"]))
            body = {**body, "request": {**request, "object": apply_json_patch(request["object"], ops)}}
        return await client.post(admission.VALIDATE_PATH, json=body), body["request"]["object"]


async def post(ctl: controller.Controller, body: dict[str, Any], *, enforce: bool = True) -> httpx.Response:
    return (await admit(ctl, body, enforce=enforce))[0]


def update(old: dict[str, Any], new_annotations: dict[str, str], *, subresource: str = "") -> dict[str, Any]:
    """An UPDATE review of the pod `old` (as admission stored it) to these annotations."""
    pod = json.loads(json.dumps(old))
    pod["metadata"]["annotations"] = new_annotations
    body = review([], operation="UPDATE")
    body["request"].update(object=pod, oldObject=old)
    if subresource:
        body["request"]["subResource"] = subresource
    return body


async def test_a_user_who_may_use_the_podnetwork_creates_the_pod(kmock):
    declare_resources(kmock)
    authorizer(kmock, {("alice", "blue")})
    async with running(kmock, SETTINGS) as ctl:
        resp = await post(ctl, review([{"podNetworkName": "blue"}]))
    assert resp.status_code == 200
    assert resp.json()["response"] == {"uid": "u-1", "allowed": True}
    (sent,) = requests_to(kmock, "POST", SAR_PATH)
    # The whole user as the API server authenticated it, in the pod's namespace (as PSP's `use`).
    assert sent["spec"] == {
        "user": "alice", "uid": "u-alice", "groups": ["devs", "system:authenticated"],
        "extra": {"scopes": ["a", "b"]},
        "resourceAttributes": {"group": constants.GROUP, "resource": "podnetworks", "verb": "use",
                               "name": "blue", "namespace": "ns"}}


async def test_a_pod_made_by_a_controller_is_allowed_by_its_service_account(kmock):
    declare_resources(kmock)
    authorizer(kmock, {("system:serviceaccount:ns:web-sa", "blue")})
    async with running(kmock, SETTINGS) as ctl:
        resp = await post(ctl, review([{"podNetworkName": "blue"}], user=RS_CONTROLLER, sa="web-sa"))
    assert resp.json()["response"]["allowed"] is True
    assert reviews(kmock) == [(RS_CONTROLLER["username"], "blue"), ("system:serviceaccount:ns:web-sa", "blue")]
    sa_review = requests_to(kmock, "POST", SAR_PATH)[1]["spec"]
    assert sa_review["groups"] == ["system:serviceaccounts", "system:serviceaccounts:ns"]


async def test_neither_user_nor_service_account_may_use_it_refuses_naming_network_verb_and_resource(kmock):
    declare_resources(kmock)
    authorizer(kmock, {("alice", "blue")})
    async with running(kmock, SETTINGS) as ctl:
        resp = await post(ctl, review([{"podNetworkName": "blue"}, {"podNetworkName": "red"}]))
    assert resp.status_code == 200
    response = resp.json()["response"]
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    message = status["message"]
    assert message.startswith('Pod "web" is forbidden: neither the user "alice" nor the pod\'s ServiceAccount '
                              '"system:serviceaccount:ns:default" may use PodNetwork "red": missing permission: verb "use" on resource '
                              f'"podnetworks" in API group "{constants.GROUP}" with resourceName "red" '
                              'in namespace "ns"')
    assert status["details"]["causes"] == [{"reason": "FieldValueForbidden",
                                            "field": f"metadata.annotations[{ANN}][1]", "message": message}]
    assert reviews(kmock) == [("alice", "blue"), ("alice", "red"), ("system:serviceaccount:ns:default", "red")]


async def test_default_is_always_allowed_and_asks_nothing(kmock):
    declare_resources(kmock)
    authorizer(kmock, set())
    kmock.objects[PNA, "ns", "to-default"] = attachment("to-default", "default")
    async with running(kmock, SETTINGS) as ctl:
        resp = await post(ctl, review([{"podNetworkName": "default"}]))
        via_attachment = await post(ctl, review([{"podNetworkAttachmentName": "to-default"}]))
    assert resp.json()["response"]["allowed"] is True
    assert via_attachment.json()["response"]["allowed"] is True
    assert reviews(kmock) == []


async def test_an_attachment_is_checked_against_its_podnetwork(kmock):
    declare_resources(kmock)
    authorizer(kmock, {("system:serviceaccount:ns:default", "blue")})
    kmock.objects[PNA, "ns", "fast"] = (
        attachment("fast", "blue"))
    kmock.objects[PNA, "ns", "slow"] = (
        attachment("slow", "red"))
    async with running(kmock, SETTINGS) as ctl:
        allowed = await post(ctl, review([{"podNetworkAttachmentName": "fast"}]))
        denied = await post(ctl, review([{"podNetworkAttachmentName": "slow"}]))
        missing = await post(ctl, review([{"podNetworkAttachmentName": "nowhere"}]))
    assert allowed.json()["response"]["allowed"] is True
    status = denied.json()["response"]["status"]
    assert status["code"] == 403
    assert 'may use PodNetwork "red" (through PodNetworkAttachment "slow")' in status["message"]
    assert reviews(kmock) == [("alice", "blue"), ("system:serviceaccount:ns:default", "blue"),
                              ("alice", "red"), ("system:serviceaccount:ns:default", "red")]
    # An attachment that does not exist names no PodNetwork: refused, saying so.
    refusal = missing.json()["response"]
    assert refusal["allowed"] is False
    assert ('PodNetworkAttachment "nowhere" does not exist in namespace "ns", so the permission to use its '
            'PodNetwork cannot be checked; create the attachment first') in refusal["status"]["message"]


async def test_enforcement_off_asks_nothing_and_allows(kmock):
    declare_resources(kmock)
    authorizer(kmock, set())
    async with running(kmock, SETTINGS) as ctl:
        resp = await post(ctl, review([{"podNetworkName": "blue"}]), enforce=False)
    assert resp.json()["response"] == {"uid": "u-1", "allowed": True}
    assert reviews(kmock) == []


async def test_updates_and_invalid_pods_ask_nothing(kmock):
    declare_resources(kmock)
    authorizer(kmock, set())
    async with running(kmock, SETTINGS) as ctl:
        updated = await post(ctl, review([{"podNetworkName": "blue"}], operation="UPDATE"))
        invalid = await post(ctl, review([{"podNetworkName": "blue"}, {"podNetworkName": "blue"}]))
    assert updated.json()["response"]["allowed"] is True
    assert invalid.json()["response"]["status"]["code"] == 422  # static validation speaks first
    assert reviews(kmock) == []


async def test_a_failing_subject_access_review_answers_503_and_is_not_cached(kmock):
    declare_resources(kmock)
    kmock[f"post {SAR_PATH}"] << 403
    async with running(kmock, SETTINGS) as ctl:
        resp = await post(ctl, review([{"podNetworkName": "blue"}]))
        assert ctl.use_cache.entries == {}
    assert resp.status_code == 503
    detail = resp.json()["detail"]
    assert detail.startswith("cannot check the permission to use the pod's PodNetworks: "
                             f"POST {SAR_PATH} failed: ")
    assert "HTTP 403" in detail and detail.endswith("retry the request")


async def test_answers_are_cached_up_to_the_size_bound(kmock):
    declare_resources(kmock)
    authorizer(kmock, {("alice", "blue"), ("alice", "green")})
    async with running(kmock, SETTINGS) as ctl:
        ctl.use_cache = controller.UseCache(size=1)
        for _ in range(2):
            assert (await post(ctl, review([{"podNetworkName": "blue"}]))).json()["response"]["allowed"]
        # A second network evicts the first (size 1): blue is asked again.
        assert (await post(ctl, review([{"podNetworkName": "green"}]))).json()["response"]["allowed"]
        assert (await post(ctl, review([{"podNetworkName": "blue"}]))).json()["response"]["allowed"]
    assert reviews(kmock) == [("alice", "blue"), ("alice", "green"), ("alice", "blue")]


@pytest.mark.timeout(60)
async def test_the_command_flag_turns_enforcement_on_over_https_with_the_controllers_credentials(
        kmock, tmp_path: Path):
    declare_resources(kmock)
    authorizer(kmock, set())
    parser = cli.build_parser({"controller": command.command})
    assert parser.parse_args(["controller"]).enforce_use_permission is False  # off unless asked
    resp = await ask_the_command(kmock, tmp_path, admission.VALIDATE_PATH, review([{"podNetworkName": "blue"}]),
                                 "--disable-default-podnetwork-creation", "--enforce-use-permission")
    status = resp.json()["response"]["status"]
    assert status["code"] == 403 and 'may use PodNetwork "blue"' in status["message"]
    sent = [r for r in list(kmock) if r.method.value == "POST" and str(r.url.path) == SAR_PATH]
    assert [r.data["spec"]["user"] for r in sent] == ["alice", "system:serviceaccount:ns:default"]
    assert all(r.headers.get("Authorization") == "Bearer secret-token" for r in sent)


RECORD = "multinetwork.x-k8s.io/attachment-networks"  # the wire name, as users and agents read it


async def test_admission_records_the_podnetwork_each_attachment_names_and_overwrites_a_forged_record(kmock):
    declare_resources(kmock)
    authorizer(kmock, {("alice", "blue")})
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "blue")
    kmock.objects[PNA, "ns", "home"] = attachment("home", "default")
    async with running(kmock, SETTINGS) as ctl:
        nets = [{"podNetworkAttachmentName": "home"}, {"podNetworkAttachmentName": "fast", "interfaceName": "net1"}]
        body = review(nets)
        body["request"]["object"]["metadata"]["annotations"][RECORD] = '{"fast":"red"}'  # the user's own
        resp, stored = await admit(ctl, body)
        _, unenforced = await admit(ctl, review(nets), enforce=False)
    assert resp.json()["response"]["allowed"] is True
    # The record every agent and the bridge hold the attachments to (default included).
    assert stored["metadata"]["annotations"][RECORD] == '{"fast":"blue","home":"default"}'
    assert RECORD not in unenforced["metadata"]["annotations"], "without enforcement nothing is recorded"


async def test_an_update_of_the_pod_or_its_status_cannot_change_or_drop_the_record(kmock):
    declare_resources(kmock)
    authorizer(kmock, {("alice", "blue")})
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "blue")
    async with running(kmock, SETTINGS) as ctl:
        _, stored = await admit(ctl, review([{"podNetworkName": "default"}, {"podNetworkAttachmentName": "fast"}]))
        kept = dict(stored["metadata"]["annotations"])
        answers = {}
        for subresource in ("", "status"):
            for what, annotations in (("changed", {**kept, RECORD: '{"fast":"red"}'}),
                                      ("dropped", {k: v for k, v in kept.items() if k != RECORD}),
                                      ("unreadable", {**kept, RECORD: "fast=red"})):
                resp, _ = await admit(ctl, update(stored, annotations, subresource=subresource))
                answers[subresource, what] = resp.json()["response"]
        # The kubelet's and the agent's own writes pass: they leave the record as it is.
        status_write, _ = await admit(ctl, update(stored, {**kept, "k8s.v1.cni.cncf.io/network-status": "[]"},
                                                  subresource="status"))
    for (subresource, what), answer in answers.items():
        assert answer["allowed"] is False, (subresource, what)
    message = answers["status", "changed"]["status"]["message"]
    assert message.startswith(f'Pod "web" is forbidden: metadata.annotations[{RECORD}][fast]: Forbidden: the entry '
                              "of PodNetworkAttachment \"fast\" ('blue') cannot be changed or removed while the pod "
                              "names the attachment")
    assert "Invalid value: \"fast=red\": not valid JSON" in answers["", "unreadable"]["status"]["message"]
    assert status_write.json()["response"]["allowed"] is True


async def test_hot_plug_of_an_attachment_records_it_and_checks_use_on_its_podnetwork(kmock):
    declare_resources(kmock)
    authorizer(kmock, {("alice", "blue")})
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "blue")
    kmock.objects[PNA, "ns", "slow"] = attachment("slow", "red")
    async with running(kmock, SETTINGS) as ctl:
        _, stored = await admit(ctl, review([{"podNetworkName": "default"}]))
        first = stored["metadata"]["annotations"][ANN]

        def adding(name: str) -> dict[str, str]:
            nets = [*json.loads(first), {"podNetworkAttachmentName": name}]
            return {**stored["metadata"]["annotations"], ANN: json.dumps(nets)}

        added, with_fast = await admit(ctl, update(stored, adding("fast")))
        refused, _ = await admit(ctl, update(stored, adding("slow")))
        # An entry written by hand, for an attachment the update does not add, is refused.
        forged = update(stored, {**stored["metadata"]["annotations"], RECORD: '{"slow":"blue"}'})
        forged_answer, _ = await admit(ctl, forged)
    assert added.json()["response"]["allowed"] is True
    assert with_fast["metadata"]["annotations"][RECORD] == '{"fast":"blue"}'
    assert 'may use PodNetwork "red" (through PodNetworkAttachment "slow")' in (
        refused.json()["response"]["status"]["message"])
    assert forged_answer.json()["response"]["allowed"] is False
    assert ('an entry for PodNetworkAttachment "slow" can be added only by the update that adds the attachment'
            in forged_answer.json()["response"]["status"]["message"])
