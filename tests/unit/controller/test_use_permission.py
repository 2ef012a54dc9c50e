"""The pure decisions of the permission to use a PodNetwork (KEP Phase II requirement 16):
which entries of a pod need `use`, who is asked, the refusal, the reading of userInfo, and
the bounds of the SubjectAccessReview cache (its clock given, so no test waits)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podnetwork.ground import constants
from podnetwork.kep import admission, admissionreview
from podnetwork.kep.controller import UseCache

ANN = constants.NETWORKS_ANNOTATION


def request(nets: list[dict[str, str]] | str | None, *, operation: str = "CREATE",
            user: dict[str, Any] | None = None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "ns"}
    if nets is not None:
        meta["annotations"] = {ANN: nets if isinstance(nets, str) else json.dumps(nets)}
    body: dict[str, Any] = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                            "namespace": "ns", "operation": operation,
                            "object": {"metadata": meta, "spec": spec or {}}}
    if user is not None:
        body["userInfo"] = user
    return body


def typed(body: dict[str, Any]) -> admissionreview.AdmissionRequest:
    return admissionreview.request_of(body)


def test_entries_other_than_default_need_use_and_attachments_are_listed_for_lookup():
    uses = admission.use_requests(typed(request([
        {"podNetworkName": "default"}, {"podNetworkName": "blue", "interfaceName": "net1"},
        {"podNetworkAttachmentName": "fast", "interfaceName": "net2"}])))
    assert uses == [admission.UseRequest(1, "blue"), admission.UseRequest(2, "", "fast")]


@pytest.mark.parametrize("body", [
    request([{"podNetworkName": "blue"}], operation="UPDATE"),  # no old networks: validation refuses it
    request([{"podNetworkName": "blue"}], operation="DELETE"),
    request(None),  # names none: the mutating webhook made it `default` or the namespace's profile
    request("not json"),  # validation refuses it first
    request([{"podNetworkName": "default"}]),
    {**request([{"podNetworkName": "blue"}]), "kind": {"group": "", "version": "v1", "kind": "Service"}},
])
def test_pods_that_need_no_use_permission(body):
    assert admission.use_requests(typed(body)) == []


def test_the_service_account_is_the_user_its_token_authenticates_as():
    pod = admissionreview.read_pod({"spec": {"serviceAccountName": "web-sa"}})
    assert admission.service_account(pod, "team") == admission.Subject(
        "system:serviceaccount:team:web-sa", ("system:serviceaccounts", "system:serviceaccounts:team"))
    unset = admissionreview.read_pod({"spec": {}})
    assert admission.service_account(unset, "team").user == "system:serviceaccount:team:default"


def test_user_info_is_read_and_asked_about_whole():
    req = typed(request([], user={"username": "alice", "uid": "42", "groups": ["devs"],
                                  "extra": {"z": ["1"], "a": ["2", "3"]}}))
    assert req.user_info is not None
    subject = admission.requester(req.user_info)
    assert subject.spec() == {"user": "alice", "groups": ["devs"], "uid": "42",
                              "extra": {"a": ["2", "3"], "z": ["1"]}}
    # Hashable, and the same user with extra in another order is the same cache key.
    other = typed(request([], user={"username": "alice", "uid": "42", "groups": ["devs"],
                                    "extra": {"a": ["2", "3"], "z": ["1"]}}))
    assert other.user_info is not None
    assert hash(admission.requester(other.user_info)) == hash(subject)


def test_user_info_of_the_wrong_type_is_a_bad_review_naming_the_field():
    with pytest.raises(admissionreview.BadReview, match=r"request\.userInfo\.groups: must be a list"):
        typed(request([], user={"username": "alice", "groups": "devs"}))


async def _refusal_message(user: dict[str, Any] | None, nets: list[dict[str, str]]) -> str:
    async def may_use(subject: admission.Subject, network: str, namespace: str) -> bool:
        return False

    async def slow_is_red(namespace: str, name: str) -> str | None:
        return "red"

    body = request(nets, user=user)
    if any("podNetworkAttachmentName" in n for n in nets):
        body["object"]["metadata"]["annotations"]["multinetwork.x-k8s.io/attachment-networks"] = '{"slow":"red"}'
    refusal = await admission.authorize_use(typed(body), may_use, slow_is_red)
    assert refusal is not None
    status = refusal["response"]["status"]
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert refusal["response"]["allowed"] is False and refusal["response"]["uid"] == "u-1"
    message: str = status["message"]
    assert message.endswith('missing permission: verb "use" on resource "podnetworks" in API group '
                            '"multinetwork.x-k8s.io" with resourceName "red" in namespace "ns"; grant it to the '
                            "pod's ServiceAccount or to the user with a Role or ClusterRole and a RoleBinding "
                            '(docs/controller.md "Permission to use a PodNetwork")')
    return message.split(": missing permission")[0]


@pytest.mark.parametrize(("user", "says"), [
    ({"username": "alice"},
     'Pod "web" is forbidden: neither the user "alice" nor the pod\'s ServiceAccount '
     '"system:serviceaccount:ns:default" may use PodNetwork "red"'),
    # A ServiceAccount creating a pod that runs as itself: one subject, said once, plainly.
    ({"username": "system:serviceaccount:ns:default"},
     'Pod "web" is forbidden: "system:serviceaccount:ns:default", the pod\'s ServiceAccount and the user '
     'creating it, may not use PodNetwork "red"'),
    # No user in the request (an in-process caller): only the ServiceAccount was asked.
    (None,
     'Pod "web" is forbidden: the pod\'s ServiceAccount "system:serviceaccount:ns:default" may not use '
     'PodNetwork "red"'),
])
async def test_refusal_says_plainly_who_may_not_use_the_network(user, says):
    assert await _refusal_message(user, [{"podNetworkName": "red"}]) == says
    through = await _refusal_message(user, [{"podNetworkAttachmentName": "slow"}])
    assert through == says + ' (through PodNetworkAttachment "slow")'


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_cache_keeps_an_allowance_60s_and_a_denial_5s():
    clock = Clock()
    cache = UseCache(clock=clock)
    cache.put("yes", True)
    cache.put("no", False)
    clock.now += 4.9
    assert (cache.get("yes"), cache.get("no")) == (True, False)
    clock.now += 0.1
    assert (cache.get("yes"), cache.get("no")) == (True, None)
    clock.now += 55.0
    assert cache.get("yes") is None
    assert len(cache.entries) == 0


def test_cache_holds_at_most_its_size_and_drops_the_least_recently_used():
    cache = UseCache(size=2, clock=Clock())
    cache.put("a", True)
    cache.put("b", True)
    assert cache.get("a") is True  # now "b" is the least recently used
    cache.put("c", False)
    assert list(cache.entries) == ["a", "c"]
    assert cache.get("b") is None
    assert UseCache().size == 4096
