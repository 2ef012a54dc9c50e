"""Which devices a node offers, and the ResourceSlice writes that publish them (bridge.dra.driver.slices)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from lightkube.models import resource_v1

from bridge.dra.driver import slices
from bridge.dracontract import names

DRIVER = names.DEFAULT_DRIVER
PROVIDER = "multinetwork.x-k8s.io/npwg-bridge"


def podnetwork(name: str, *, ready: bool = True, provider: str | None = PROVIDER, deleting: bool = False,
               reason: str = "ParamsNotReady") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"provider": provider} if provider is not None else {}
    condition = {"type": "Ready", "status": "True" if ready else "False", "reason": "Ready" if ready else reason,
                 "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    return {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": meta, "spec": spec,
            "status": {"conditions": [condition]}}


def node(name: str = "n1", offers: list[str] | None = None) -> dict[str, Any]:
    annotations = {} if offers is None else {"multinetwork.x-k8s.io/podnetworks": json.dumps(offers)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}}


def test_a_node_without_the_annotation_offers_every_ready_podnetwork_sorted() -> None:
    offered, left = slices.offers([podnetwork("red"), podnetwork("blue")], node())
    assert offered == [slices.Offer("blue", "blue", PROVIDER), slices.Offer("red", "red", PROVIDER)]
    assert left == []


def test_a_node_offers_only_what_its_annotation_lists() -> None:
    offered, left = slices.offers([podnetwork("red"), podnetwork("blue")], node(offers=["blue"]))
    assert [o.podnetwork for o in offered] == ["blue"]
    assert [(x.podnetwork, "annotation does not list it" in x.reason) for x in left] == [("red", True)]


def test_an_annotation_that_is_not_a_list_of_names_offers_nothing() -> None:
    broken = node()
    broken["metadata"]["annotations"]["multinetwork.x-k8s.io/podnetworks"] = "{not json"
    offered, _ = slices.offers([podnetwork("blue")], broken)
    assert offered == []


def test_a_podnetwork_that_is_not_ready_or_is_being_deleted_has_no_device_and_says_why() -> None:
    offered, left = slices.offers([podnetwork("off", ready=False, reason="AdministrativelyDisabled"),
                                   podnetwork("gone", deleting=True), podnetwork("ok")], node())
    assert [o.podnetwork for o in offered] == ["ok"]
    why = {x.podnetwork: x.reason for x in left}
    assert "not Ready (AdministrativelyDisabled: m)" in why["off"]
    assert "being deleted" in why["gone"]


def test_no_node_means_no_device() -> None:
    assert slices.offers([podnetwork("blue")], None) == ([], [])


def test_a_name_that_is_no_dns_label_gets_a_digest_device_name_and_keeps_its_name_as_attribute() -> None:
    (offer,), _ = slices.offers([podnetwork("net.example")], node())
    assert offer.device.startswith("pn-") and offer.device != "net.example"
    assert offer.podnetwork == "net.example"
    (spec,) = slices.specs([offer], node="n1", driver=DRIVER).values()
    assert spec["devices"][0]["attributes"][names.ATTRIBUTE_PODNETWORK] == {"string": "net.example"}


def test_a_name_or_provider_longer_than_an_attribute_holds_is_left_out() -> None:
    offered, left = slices.offers([podnetwork("a" * 65), podnetwork("b", provider="p" * 65)], node())
    assert offered == []
    assert all("64 characters" in x.reason for x in left) and len(left) == 2


def test_a_podnetwork_without_provider_has_no_provider_attribute() -> None:
    offered, _ = slices.offers([podnetwork("blue", provider=None)], node())
    (spec,) = slices.specs(offered, node="n1", driver=DRIVER).values()
    assert spec["devices"] == [{"name": "blue", "attributes": {"podNetwork": {"string": "blue"}},
                                "allowMultipleAllocations": True}]


def test_specs_are_one_pool_named_after_the_node_at_most_128_devices_a_slice() -> None:
    offered = [slices.Offer(f"n{i:03}", f"n{i:03}", PROVIDER) for i in range(130)]
    specs = slices.specs(offered, node="n1", driver=DRIVER)
    assert list(specs) == [names.slice_name("n1", DRIVER, 0), names.slice_name("n1", DRIVER, 1)]
    assert [len(s["devices"]) for s in specs.values()] == [128, 2]
    assert all(s["pool"] == {"name": "n1", "resourceSliceCount": 2} and s["nodeName"] == "n1"
               and s["driver"] == DRIVER for s in specs.values())


def test_a_node_that_offers_nothing_has_one_empty_slice() -> None:
    specs = slices.specs([], node="n1", driver=DRIVER)
    assert [s["devices"] for s in specs.values()] == [[]]


def test_a_slice_has_the_shape_of_the_v1_api() -> None:
    offered, _ = slices.offers([podnetwork("blue")], node())
    (write,) = slices.plan({}, slices.specs(offered, node="n1", driver=DRIVER))
    assert write.body is not None
    # lightkube's model of resource.k8s.io/v1, generated from the API's OpenAPI: unknown names fail
    spec = msgspec.convert(write.body["spec"], resource_v1.ResourceSliceSpec, strict=False, from_attributes=False)
    assert spec.devices is not None and spec.devices[0].allowMultipleAllocations is True
    assert msgspec.to_builtins(spec) == write.body["spec"]


def applied(writes: list[slices.Write], observed: dict[str, Any]) -> dict[str, Any]:
    out = dict(observed)
    for w in writes:
        if w.verb == "delete":
            out.pop(w.name)
        else:
            assert w.body is not None
            out[w.name] = w.body
    return out


def test_plan_creates_then_has_nothing_to_do_then_rewrites_all_under_the_next_generation() -> None:
    wanted = slices.specs([slices.Offer("blue", "blue", PROVIDER)], node="n1", driver=DRIVER)
    first = slices.plan({}, wanted)
    assert [(w.verb, w.body and w.body["spec"]["pool"]["generation"]) for w in first] == [("create", 1)]
    now = applied(first, {})
    assert slices.plan(now, wanted) == []
    more = slices.specs([slices.Offer(f"n{i:03}", f"n{i:03}", PROVIDER) for i in range(129)], node="n1",
                        driver=DRIVER)
    second = slices.plan(now, more)
    assert [(w.verb, w.body and w.body["spec"]["pool"]["generation"]) for w in second] == [("update", 2),
                                                                                           ("create", 2)]
    now = applied(second, now)
    third = slices.plan(now, wanted)
    assert [(w.verb, w.body and w.body["spec"]["pool"]["generation"]) for w in third] == [("update", 3),
                                                                                          ("delete", None)]


def test_plan_ignores_what_the_api_server_adds_and_repairs_a_pool_of_mixed_generations() -> None:
    wanted = slices.specs([slices.Offer("blue", "blue", PROVIDER)], node="n1", driver=DRIVER)
    now = applied(slices.plan({}, wanted), {})
    (name,) = now
    served = json.loads(json.dumps(now[name]))
    served["metadata"]["resourceVersion"] = "7"
    served["spec"]["devices"][0]["consumesCounters"] = None  # a default the writer does not set
    assert slices.plan({name: served}, wanted) == []
    stray = json.loads(json.dumps(served))
    stray["spec"]["pool"]["generation"] = 5
    writes = slices.plan({name: served, "other": stray}, wanted)
    assert [(w.verb, w.name) for w in writes] == [("update", name), ("delete", "other")]
    assert writes[0].body is not None and writes[0].body["spec"]["pool"]["generation"] == 6


def test_plan_rewrites_a_served_slice_whose_spec_does_not_read_as_one() -> None:
    wanted = slices.specs([slices.Offer("blue", "blue", PROVIDER)], node="n1", driver=DRIVER)
    now = applied(slices.plan({}, wanted), {})
    (name,) = now
    broken = json.loads(json.dumps(now[name]))
    broken["spec"]["devices"] = "blue"
    writes = slices.plan({name: broken}, wanted)
    assert [(w.verb, w.name) for w in writes] == [("update", name)]
    assert writes[0].body is not None and writes[0].body["spec"]["pool"]["generation"] == 1


def test_plan_rewrites_a_device_whose_attribute_changed() -> None:
    now = applied(slices.plan({}, slices.specs([slices.Offer("blue", "blue", "a")], node="n1", driver=DRIVER)), {})
    writes = slices.plan(now, slices.specs([slices.Offer("blue", "blue", None)], node="n1", driver=DRIVER))
    assert [w.verb for w in writes] == ["update"]
    assert writes[0].body is not None
    assert writes[0].body["spec"]["devices"][0]["attributes"] == {"podNetwork": {"string": "blue"}}


def test_names_of_devices_slices_and_sockets() -> None:
    assert names.device_name("blue") == "blue"
    assert names.device_name("x" * 64).startswith("pn-") and len(names.device_name("x" * 64)) == 19
    assert names.slice_name("n1", DRIVER, 0) == f"n1-{DRIVER}-0"
    # a node's name that is a 62-character label makes a first label `<node>-dra` longer than 63
    assert names.slice_name("a" * 62, DRIVER, 1).startswith("pn-")
    assert names.slice_name("a" * 62, DRIVER, 1).endswith("-1")
    assert names.driver_name_problem("Bad_Name") is not None and names.driver_name_problem(DRIVER) is None
    assert names.socket_problem("/" + "x" * 105, "--f") is not None
    assert names.socket_problem("/" + "x" * 104, "--f") is None
