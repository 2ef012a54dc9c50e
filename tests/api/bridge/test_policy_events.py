"""The bridge reports on MultiNetworkPolicies: Events on the policy (the CRD has no status) and a
log line, when a policy is invalid or names a network that does not exist, and when it applies;
only when that changes. The bridge under kopf against kmock's emulator, changes over HTTP."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kmock
import pytest

from bridge.operator import controller
from podnetwork.ground import constants
from tests.api import bridge_api_support as bs

pytestmark = pytest.mark.kmock(cls=bs.Emulator)

MNP = f"{constants.POLICY_GROUP}/{constants.POLICY_VERSION}/{constants.POLICY_PLURAL}"
MNP_URL = f"/apis/{constants.POLICY_API_VERSION}/namespaces/{bs.NS}/{constants.POLICY_PLURAL}"
EVENTS_URL = f"/api/v1/namespaces/{bs.NS}/events"


def declare(k: kmock.KubernetesEmulator, *, policies: bool = True) -> None:
    bs.declare_resources(k)
    # Renewing an Event reads and patches it.
    k.resources[bs.EVENTS] = kmock.ResourceInfo(kind="Event", namespaced=True,
                                                verbs={"create", "list", "get", "patch"})
    if policies:
        k.resources[MNP] = kmock.ResourceInfo(kind=constants.POLICY_KIND, namespaced=True,
                                              verbs=set(bs.kube_emulator.ALL_VERBS))


def policy(name: str, networks: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": constants.POLICY_API_VERSION, "kind": constants.POLICY_KIND,
            "metadata": {"name": name, "namespace": bs.NS, "uid": f"uid-mnp-{name}",
                         "annotations": {constants.POLICY_FOR_PODNETWORK_ANNOTATION: networks}},
            "spec": spec or {"podSelector": {}, "policyTypes": ["Ingress"]}}


def holds(ok: bool) -> bool:
    """For `bs.eventually`, which retries an assertion."""
    assert ok
    return True


def renewals(k: kmock.KubernetesEmulator) -> list[Any]:
    return [r.data for r in list(k) if r.method.value == "PATCH" and f"{EVENTS_URL}/" in str(r.url.path)]


def posted(k: kmock.KubernetesEmulator) -> list[tuple[str, str, str]]:
    return [(e["involvedObject"]["name"], e["type"], e["reason"]) for e in bs.requests_to(k, "POST", EVENTS_URL)]


async def test_a_policy_naming_a_missing_podnetwork_warns_then_says_it_applies_once_the_network_exists(
    kmock: bs.Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    declare(kmock)
    async with bs.running(kmock):
        await bs.call(kmock, "POST", MNP_URL, policy("isolate", "blue"))
        await bs.eventually(lambda: holds(posted(kmock) == [("isolate", "Warning", "NetworkNotFound")]))
        await bs.call(kmock, "POST", bs.PN_URL, bs.podnetwork("blue", nad=None))
        await bs.eventually(lambda: holds(len(posted(kmock)) == 2))
        # The policy touched, another PodNetwork: nothing new to say.
        await bs.call(kmock, "PATCH", f"{MNP_URL}/isolate", {"metadata": {"labels": {"touched": "yes"}}})
        await bs.call(kmock, "POST", bs.PN_URL, bs.podnetwork("other", nad=None))
        await asyncio.sleep(0.5)
    assert posted(kmock) == [("isolate", "Warning", "NetworkNotFound"), ("isolate", "Normal", "PolicyApplies")]
    warning, applies = bs.requests_to(kmock, "POST", EVENTS_URL)
    assert warning["involvedObject"]["kind"] == constants.POLICY_KIND
    assert warning["involvedObject"]["uid"] == "uid-mnp-isolate"
    assert "multinetwork.x-k8s.io/policy-for: \"blue\": no PodNetwork of that name" in warning["message"]
    assert applies["message"] == "the policy applies on PodNetwork blue"
    logged = [r.getMessage() for r in caplog.records if r.name == controller.__name__]
    assert [m for m in logged if m.startswith("MultiNetworkPolicy app/isolate: NetworkNotFound: ")]
    assert [m for m in logged if m == "MultiNetworkPolicy app/isolate: PolicyApplies: "
            "the policy applies on PodNetwork blue"]


async def test_an_invalid_policy_gets_a_warning_naming_the_field(kmock: bs.Emulator) -> None:
    declare(kmock)
    kmock.objects[bs.PN, None, "blue"] = bs.podnetwork("blue", nad=None)
    bad = {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "198.18.0.0/33"}}]}]}
    async with bs.running(kmock):
        await bs.call(kmock, "POST", MNP_URL, policy("broken", "blue", bad))
        await bs.eventually(lambda: holds(posted(kmock)))
        await asyncio.sleep(0.3)
    (event,) = bs.requests_to(kmock, "POST", EVENTS_URL)
    assert (event["type"], event["reason"]) == ("Warning", "InvalidPolicy")
    assert "spec.ingress[0].from[0].ipBlock.cidr" in event["message"]


async def test_a_nad_that_goes_and_comes_back_warns_then_renews_the_applies_event(kmock: bs.Emulator) -> None:
    declare(kmock)
    kmock.objects[bs.NAD, "nets", "dataplane"] = bs.nad("dataplane")
    body = policy("by-nad", "")
    body["metadata"]["annotations"] = {constants.POLICY_FOR_NAD_ANNOTATION: "nets/dataplane"}
    kmock.objects[MNP, bs.NS, "by-nad"] = body
    async with bs.running(kmock):
        await bs.eventually(lambda: holds(posted(kmock) == [("by-nad", "Normal", "PolicyApplies")]))
        await bs.call(kmock, "DELETE", bs.NAD_URL.format(ns="nets") + "/dataplane")
        await bs.eventually(lambda: holds(len(posted(kmock)) == 2))
        await bs.call(kmock, "POST", bs.NAD_URL.format(ns="nets"), bs.nad("dataplane"))
        # Said again: the existing PolicyApplies Event is renewed, not posted anew.
        await bs.eventually(lambda: holds(len(posted(kmock)) == 3))
        await bs.eventually(lambda: holds(bool(renewals(kmock))))
    assert [reason for _, _, reason in posted(kmock)] == ["PolicyApplies", "NetworkNotFound", "PolicyApplies"]
    first, _, again = bs.requests_to(kmock, "POST", EVENTS_URL)
    assert first["metadata"]["name"] == again["metadata"]["name"]
    (renewal,) = renewals(kmock)
    assert renewal["count"] == 2 and renewal["lastTimestamp"]


async def test_without_the_policy_crd_the_bridge_says_so_once_and_does_the_rest(
    kmock: bs.Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    declare(kmock, policies=False)
    kmock.objects[bs.PN, None, "blue"] = bs.podnetwork("blue", ready=False)
    kmock.objects[bs.NAD, "nets", "dataplane"] = bs.nad("dataplane")
    async with bs.running(kmock):
        await bs.eventually(lambda: holds(bs.requests_to(kmock, "PATCH", f"{bs.PN_URL}/blue/status")))
        await asyncio.sleep(0.3)
    unserved = [r for r in caplog.records if r.name == controller.__name__ and "is not served" in r.getMessage()]
    assert len(unserved) == 1
    assert "apply crds/multi-networkpolicy.yaml" in unserved[0].getMessage()
