"""The kopf handlers read bodies into the models and views; a body that does not fit is handled.

A PodNetwork the API server would refuse (its schema is the model's) is ignored with a
warning, and the controller goes on with the others; a pod that does not fit the Pod view
holds no network, as a pod whose networks annotation cannot be parsed. The extender's
/filter reads the pod into the same view and answers 400 naming the field.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from podnetwork.ground import constants
from podnetwork.kep import controller
from scheduler_plugin import app as app_mod
from scheduler_plugin.settings import Settings
from tests.api.controller_support import pod, podnetwork, running
from tests.api.extender_support import by_names, world
from tests.api.kube_emulator import PN, PODS, Emulator, condition, declare_resources, eventually

FAST = controller.ControllerSettings(inuse_message_interval=0.2)
FIN = constants.IN_USE_FINALIZER


def stored(kmock: Any, resource: str, ns: str | None, name: str) -> dict[str, Any]:
    obj = kmock.objects[resource, ns, name]
    if obj.deleted:
        raise KeyError(name)
    return dict(obj)


@pytest.mark.kmock(cls=Emulator)
@pytest.mark.timeout(60)
async def test_a_podnetwork_that_does_not_fit_is_ignored_and_the_others_are_reconciled(kmock, caplog):
    declare_resources(kmock)
    kmock.objects[PN, None, "odd"] = podnetwork("odd", colour="red")  # no such field in the CRD
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"},
                                               {"podNetworkName": "odd", "interfaceName": "net1"}])
    with caplog.at_level(logging.WARNING, logger="podnetwork.kep.controller"):
        async with running(kmock, FAST) as ctl:
            await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse")["status"] == "True")
            await asyncio.sleep(0.5)  # a flush or two: nothing is written to `odd`
            odd = stored(kmock, PN, None, "odd")
            assert "status" not in odd and FIN not in (odd["metadata"].get("finalizers") or [])
            assert FIN in stored(kmock, PN, None, "blue")["metadata"]["finalizers"]
            assert "odd" not in {ref.name for ref in ctl.objects}
    assert "ignored PodNetwork /odd: it does not fit its model" in caplog.text
    assert "spec.colour" in caplog.text


@pytest.mark.kmock(cls=Emulator)
@pytest.mark.timeout(60)
async def test_a_pod_that_does_not_fit_the_pod_view_holds_no_network(kmock, caplog):
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkName": "blue"}])
    odd = pod("b", [{"podNetworkName": "blue"}])
    odd["spec"]["hostNetwork"] = "yes"  # the API server stores booleans only
    kmock.objects[PODS, "ns", "b"] = odd
    with caplog.at_level(logging.WARNING, logger="podnetwork.kep.controller"):
        async with running(kmock, FAST) as ctl:
            await eventually(lambda: condition(stored(kmock, PN, None, "blue"), "InUse")["message"]
                             == "in use by 1 pod: ns/a")
            assert ctl.index.references_of_pod("ns/b") == frozenset()
    assert "ignored pod ns/b: it does not fit its model" in caplog.text


@pytest.mark.parametrize(("pod_fields", "fragment"), [
    ({"spec": {"hostNetwork": "yes"}}, "Pod.spec.hostNetwork: Input should be a valid boolean"),
    ({"metadata": {"name": "p", "labels": {"app": 1}}}, "Pod.metadata.labels.app: Input should be a valid string"),
])
async def test_the_extender_answers_400_naming_the_pod_field_that_does_not_fit(pod_fields, fragment):
    application = app_mod.create_app(world(), Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://x") as client:
        response = await client.post("/filter", json=by_names(pod_fields, ["node-a"]))
    assert response.status_code == 400
    assert response.json()["message"] == f"not an extender v1 ExtenderArgs body: {fragment}"


async def test_the_extender_reads_null_pod_parts_as_absent():
    # Go's encoder writes a nil struct pointer as null.
    application = app_mod.create_app(world(), Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://x") as client:
        response = await client.post("/filter", json=by_names(
            {"metadata": None, "spec": None, "status": None}, ["node-a"]))
    assert response.status_code == 200
    assert response.json()["NodeNames"] == ["node-a"]
