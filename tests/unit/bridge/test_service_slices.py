"""The Services planner (`bridge.operator.services.plan`): which Services are served on a PodNetwork,
the EndpointSlices of the network's addresses, and the Warnings on bad input. Pure: no API; the
plans are applied to a dict of slice bodies here as an API server would apply them."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.operator import services
from demo.store import merge_patch
from podnetwork.ground import constants
from podnetwork.ground import service as views

NS = "app"
PROXY = {constants.SERVICE_PROXY_NAME_LABEL: constants.SERVICE_PROXY_NAME}
BLUE = services.Network("blue", nad=("nets", "blue-nad"))


def service(name: str = "db", *, network: str | None = "blue", selector: dict[str, str] | None = None,
            ports: list[dict[str, Any]] | None = None, families: list[str] | None = None,
            type_: str | None = None, labels: dict[str, str] | None = None, headless: bool = False,
            publish: bool | None = None) -> views.Service:
    spec: dict[str, Any] = {"selector": {"app": "db"} if selector is None else selector,
                            "ports": [{"name": "sql", "port": 5432, "targetPort": "sql", "protocol": "TCP"}]
                            if ports is None else ports,
                            "clusterIP": "None" if headless else "10.96.0.10"}
    if families is not None:
        spec["ipFamilies"] = families
    if type_ is not None:
        spec["type"] = type_
    if publish is not None:
        spec["publishNotReadyAddresses"] = publish
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "7",
                            "labels": PROXY if labels is None else labels}
    if network is not None:
        meta["annotations"] = {constants.SERVICE_PODNETWORK_ANNOTATION: network}
    return views.Service.model_validate({"metadata": meta, "spec": spec})


def pod(name: str, ips: Sequence[str] = (), *, network: str = "blue", labels: dict[str, str] | None = None,
        ready: bool = True, deleting: bool = False, ports: Sequence[tuple[str, int]] = (("sql", 5432),),
        node: str = "node-a", status: list[dict[str, Any]] | None = None, declares: Sequence[str] = (),
        phase: str = "Running") -> services.PodRecord:
    annotations = {}
    if ips:
        annotations[constants.POD_IPS_ANNOTATION] = json.dumps(
            [{"ip": ip, "podNetwork": network, "interfaceName": "net1"} for ip in ips])
    if status is not None:
        annotations[constants.NPWG_NETWORK_STATUS_ANNOTATION] = json.dumps(status)
    if declares:
        annotations[constants.NETWORKS_ANNOTATION] = json.dumps([{"podNetworkName": d} for d in declares])
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}",
                            "labels": {"app": "db"} if labels is None else labels, "annotations": annotations}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body = {"metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "c", "ports": [
                {"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports]}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    record = services.pod_record(views.EndpointPod.model_validate(body))
    assert record is not None
    return record


def apply(bodies: dict[str, dict[str, Any]], plan: services.ServicePlan) -> dict[str, dict[str, Any]]:
    """The plan's writes as an API server applies them (merge patch: RFC 7386)."""
    out = {k: json.loads(json.dumps(v)) for k, v in bodies.items()}
    for create in plan.creates:
        name = create.body["metadata"]["name"]
        assert name not in out, f"create of an existing slice {name}"
        out[name] = json.loads(json.dumps(create.body))
    for patch in plan.updates:
        assert patch.name in out, f"update of a missing slice {patch.name}"
        out[patch.name] = merge_patch(out[patch.name], json.loads(json.dumps(patch.body)))
    for delete in plan.deletes:
        del out[delete.name]
    return out


def records(bodies: Mapping[str, dict[str, Any]]) -> dict[str, services.Slice]:
    return {n: services.slice_record(views.EndpointSlice.model_validate(b)) for n, b in bodies.items()}


def run(svc: views.Service, pods: Sequence[services.PodRecord], bodies: dict[str, dict[str, Any]] | None = None,
        network: services.Network | None = BLUE) -> tuple[services.ServicePlan, dict[str, dict[str, Any]]]:
    bodies = bodies or {}
    plan = services.plan(svc, network, pods, records(bodies))
    return plan, apply(bodies, plan)


def reasons(plan: services.ServicePlan) -> list[str]:
    return [w.reason for w in plan.warnings]


# --- the slices ---------------------------------------------------------------------------------

def test_a_served_service_gets_a_slice_of_the_network_addresses_in_the_api_s_shape() -> None:
    plan, bodies = run(service(), [pod("db-0", ["10.9.0.5"], node="node-b"), pod("db-1", ["10.9.0.6"], ready=False)])
    assert plan.warnings == () and plan.endpoints == 2
    assert bodies == {"db.ipv4.0": {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "db.ipv4.0", "namespace": NS, "labels": {
            **PROXY, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.multinetwork.x-k8s.io",
            "kubernetes.io/service-name": "db", "multinetwork.x-k8s.io/podnetwork": "blue"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "db", "uid": "uid-db",
                                 "controller": True, "blockOwnerDeletion": True}]},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.9.0.5"], "conditions": {"ready": True, "serving": True, "terminating": False},
             "targetRef": {"kind": "Pod", "namespace": NS, "name": "db-0", "uid": "uid-db-0"}, "nodeName": "node-b"},
            {"addresses": ["10.9.0.6"], "conditions": {"ready": False, "serving": False, "terminating": False},
             "targetRef": {"kind": "Pod", "namespace": NS, "name": "db-1", "uid": "uid-db-1"},
             "nodeName": "node-a"}],
        "ports": [{"name": "sql", "port": 5432, "protocol": "TCP"}]}}


def test_a_terminating_pod_is_serving_while_ready_but_never_ready_as_the_endpointslice_controller_sets_it() -> None:
    _, bodies = run(service(), [pod("a", ["10.9.0.5"], deleting=True), pod("b", ["10.9.0.6"], deleting=True,
                                                                          ready=False)])
    conds = {e["targetRef"]["name"]: e["conditions"] for e in bodies["db.ipv4.0"]["endpoints"]}
    assert conds == {"a": {"ready": False, "serving": True, "terminating": True},
                     "b": {"ready": False, "serving": False, "terminating": True}}
    _, published = run(service(publish=True), [pod("a", ["10.9.0.5"], deleting=True, ready=False)])
    assert published["db.ipv4.0"]["endpoints"][0]["conditions"] == {"ready": True, "serving": False,
                                                                     "terminating": True}


def test_an_ended_pod_is_no_endpoint() -> None:
    assert services.pod_record(views.EndpointPod.model_validate({"status": {"phase": "Succeeded"}})) is None


def test_each_family_gets_its_own_slices_with_the_pods_address_of_that_family() -> None:
    pods = [pod("a", ["10.9.0.5", "fd00::5"]), pod("b", ["fd00::6"])]
    plan, bodies = run(service(families=["IPv4", "IPv6"]), pods)
    assert {n: (b["addressType"], [e["addresses"] for e in b["endpoints"]]) for n, b in bodies.items()} == {
        "db.ipv4.0": ("IPv4", [["10.9.0.5"]]), "db.ipv6.0": ("IPv6", [["fd00::5"], ["fd00::6"]])}
    assert plan.warnings == ()


def test_more_than_a_hundred_endpoints_fill_slices_of_at_most_a_hundred() -> None:
    pods = [pod(f"p{i:03}", [f"10.9.{i // 200}.{i % 200 + 1}"]) for i in range(250)]
    _, bodies = run(service(), pods)
    assert sorted((n, len(b["endpoints"])) for n, b in bodies.items()) == [
        ("db.ipv4.0", 100), ("db.ipv4.1", 100), ("db.ipv4.2", 50)]


def test_named_target_ports_resolve_per_pod_and_pods_of_different_numbers_get_different_slices() -> None:
    pods = [pod("a", ["10.9.0.5"], ports=[("sql", 5432)]), pod("b", ["10.9.0.6"], ports=[("sql", 6432)])]
    _, bodies = run(service(), pods)
    by_port = {b["ports"][0]["port"]: [e["targetRef"]["name"] for e in b["endpoints"]] for b in bodies.values()}
    assert by_port == {5432: ["a"], 6432: ["b"]}


def test_a_pod_that_names_one_target_port_but_not_another_is_served_on_the_one_it_names() -> None:
    svc = service(ports=[{"name": "sql", "port": 5432, "targetPort": "sql"},
                         {"name": "admin", "port": 9000, "targetPort": "admin"}])
    pods = [pod("a", ["10.9.0.5"], ports=[("sql", 5432), ("admin", 9001)]), pod("b", ["10.9.0.6"])]
    plan, bodies = run(svc, pods)
    assert plan.warnings == ()
    assert sorted((tuple(p["name"] for p in b["ports"]), tuple(e["targetRef"]["name"] for e in b["endpoints"]))
                  for b in bodies.values()) == [(("sql",), ("b",)), (("sql", "admin"), ("a",))]


def test_a_headless_service_s_slices_list_the_network_s_addresses_and_say_it_is_headless() -> None:
    plan, bodies = run(service(headless=True), [pod("a", ["10.9.0.5", "fd00::5"])])
    assert {b["addressType"] for b in bodies.values()} == {"IPv4", "IPv6"}
    assert all(b["metadata"]["labels"][constants.SERVICE_HEADLESS_LABEL] == "" for b in bodies.values())
    assert plan.warnings == ()


def test_addresses_come_from_network_status_of_the_network_s_nad_for_a_pod_without_pod_ips() -> None:
    status = [{"name": "nets/blue-nad", "interface": "net1", "ips": ["10.9.0.7/24"]},
              {"name": "nets/red-nad", "interface": "net2", "ips": ["10.8.0.7"]}]
    _, bodies = run(service(), [pod("a", status=status)])
    assert [e["addresses"] for e in bodies["db.ipv4.0"]["endpoints"]] == [["10.9.0.7"]]


def test_a_hostname_is_published_for_a_pod_whose_subdomain_is_the_service() -> None:
    record = pod("a", ["10.9.0.5"])
    named = dataclasses.replace(record, hostname="a", subdomain="db")
    _, bodies = run(service(headless=True, families=["IPv4"]), [named])
    assert bodies["db.ipv4.0"]["endpoints"][0]["hostname"] == "a"


# --- minimal writes -----------------------------------------------------------------------------

def test_a_second_plan_writes_nothing_and_one_pod_change_writes_its_slice_only() -> None:
    pods = [pod(f"p{i:03}", [f"10.9.0.{i + 1}"]) for i in range(230)]
    _, bodies = run(service(), pods)
    again, _ = run(service(), pods, bodies)
    assert again.writes == 0
    pods[150] = pod("p150", ["10.9.0.151"], ready=False)
    changed, after = run(service(), pods, bodies)
    assert (len(changed.creates), [p.name for p in changed.updates], len(changed.deletes)) == (0, ["db.ipv4.1"], 0)
    # A new pod goes where there is room; existing endpoints stay where they are.
    more, after2 = run(service(), [*pods, pod("a-new", ["10.9.1.1"])], after)
    assert [p.name for p in more.updates] == ["db.ipv4.2"] and not more.creates
    for name in ("db.ipv4.0", "db.ipv4.1"):
        assert after2[name]["endpoints"] == after[name]["endpoints"]


def test_an_update_names_the_resource_version_it_was_decided_from_and_drops_labels_no_longer_wanted() -> None:
    _, bodies = run(service(), [pod("a", ["10.9.0.5"])])
    bodies["db.ipv4.0"]["metadata"]["resourceVersion"] = "41"
    bodies["db.ipv4.0"]["metadata"]["labels"]["stale"] = "x"
    plan, after = run(service(), [pod("a", ["10.9.0.5"], ready=False)], bodies)
    (update,) = plan.updates
    assert update.decided_from == "41" and update.body["metadata"]["labels"]["stale"] is None
    assert "stale" not in after["db.ipv4.0"]["metadata"]["labels"]


def test_a_slice_edited_by_hand_is_written_back_and_an_endpoint_listed_twice_is_kept_once() -> None:
    _, bodies = run(service(), [pod("a", ["10.9.0.5"])])
    copy = json.loads(json.dumps(bodies["db.ipv4.0"]))
    copy["metadata"]["name"] = "db.ipv4.1"
    bodies["db.ipv4.1"] = copy
    bodies["db.ipv4.0"]["endpoints"][0]["conditions"]["ready"] = False
    plan, after = run(service(), [pod("a", ["10.9.0.5"])], bodies)
    assert ([p.name for p in plan.updates], [d.name for d in plan.deletes]) == (["db.ipv4.0"], ["db.ipv4.1"])
    assert after["db.ipv4.0"]["endpoints"][0]["conditions"]["ready"] is True


def test_scaling_down_empties_and_deletes_a_slice() -> None:
    pods = [pod(f"p{i:03}", [f"10.9.0.{i + 1}"]) for i in range(150)]
    _, bodies = run(service(), pods)
    plan, after = run(service(), pods[:80], bodies)
    assert [d.name for d in plan.deletes] == ["db.ipv4.1"] and list(after) == ["db.ipv4.0"]


def test_a_service_that_stops_naming_the_network_loses_our_slices_and_gets_no_warning() -> None:
    _, bodies = run(service(), [pod("a", ["10.9.0.5"])])
    plan, after = run(service(network=None), [pod("a", ["10.9.0.5"])], bodies)
    assert after == {} and plan.warnings == () and not plan.served


def test_a_service_naming_another_network_gets_that_network_s_addresses_in_the_same_slices() -> None:
    pods = [pod("a", ["10.9.0.5"]), pod("b", ["10.7.0.5"], network="red")]
    _, bodies = run(service(selector={}), pods)
    assert bodies == {}
    _, bodies = run(service(), pods)
    _, after = run(service(network="red"), pods, bodies, network=services.Network("red"))
    assert [e["targetRef"]["name"] for e in after["db.ipv4.0"]["endpoints"]] == ["b"]
    assert after["db.ipv4.0"]["metadata"]["labels"][constants.ENDPOINTSLICE_PODNETWORK_LABEL] == "red"


# --- which Services, and bad input ------------------------------------------------------------

def test_other_service_types_are_refused_with_a_warning_that_says_why_and_get_no_slice() -> None:
    for type_ in ("NodePort", "LoadBalancer", "ExternalName"):
        plan, bodies = run(service(type_=type_), [pod("a", ["10.9.0.5"])])
        assert bodies == {} and reasons(plan) == [services.UNSUPPORTED_TYPE]
        assert type_ in plan.warnings[0].message and "ClusterIP" in plan.warnings[0].message


def test_a_service_without_our_proxy_name_label_is_refused_so_kube_proxy_never_programs_it_with_our_slices() -> None:
    for labels in ({}, {constants.SERVICE_PROXY_NAME_LABEL: "other-proxy"}):
        plan, bodies = run(service(labels=labels), [pod("a", ["10.9.0.5"])])
        assert bodies == {} and reasons(plan) == [services.PROXY_NAME_MISSING]
        assert f"{constants.SERVICE_PROXY_NAME_LABEL}={constants.SERVICE_PROXY_NAME}" in plan.warnings[0].message


def test_bad_input_gets_a_clear_warning_and_no_slice() -> None:
    cases = [
        (service(selector={}), BLUE, [pod("a", ["10.9.0.5"])], services.SELECTOR_MISSING, "no selector"),
        (service(network="nope"), None, [pod("a", ["10.9.0.5"])], services.PODNETWORK_NOT_FOUND,
         "PodNetwork 'nope' (annotation multinetwork.x-k8s.io/podnetwork) does not exist"),
        (service(ports=[{"name": "web", "port": 80, "targetPort": "http"}]), BLUE, [pod("a", ["10.9.0.5"])],
         services.TARGET_PORT_NOT_FOUND, "container port named 'http'"),
        (service(families=["IPv6"]), BLUE, [pod("a", ["10.9.0.5"])], services.NO_ADDRESS_OF_FAMILY,
         "has an IPv6 address there (they have IPv4)"),
    ]
    for svc, network, pods, reason, text in cases:
        _, existing = run(service(), [pod("a", ["10.9.0.5"])])
        plan, bodies = run(svc, pods, existing, network=network)
        assert bodies == {}, reason
        assert reasons(plan) == [reason] and text in plan.warnings[0].message, plan.warnings


def test_a_dual_stack_service_on_a_v4_only_network_gets_its_v4_slices_and_a_warning_for_v6() -> None:
    plan, bodies = run(service(families=["IPv4", "IPv6"]), [pod("a", ["10.9.0.5"])])
    assert list(bodies) == ["db.ipv4.0"] and reasons(plan) == [services.NO_ADDRESS_OF_FAMILY]


def test_pods_not_on_the_network_are_left_out_and_counted_in_one_warning() -> None:
    pods = [pod("a", ["10.9.0.5"]), *[pod(f"x{i}", ["10.7.0.5"], network="red") for i in range(7)],
            pod("joining", declares=["blue"])]
    plan, bodies = run(service(), pods)
    assert [e["targetRef"]["name"] for e in bodies["db.ipv4.0"]["endpoints"]] == ["a"]
    (warning,) = plan.warnings
    assert warning.reason == services.PODS_NOT_ON_PODNETWORK
    assert warning.message == ("7 of 9 pods the selector picks are not on PodNetwork blue and are left out of its "
                               "endpoints: x0, x1, x2, x3, x4 and 2 more")


def test_a_pod_attached_through_an_attachment_of_the_network_is_not_counted_as_off_it() -> None:
    record = pod("a")
    attached = dataclasses.replace(record, attachments=("blue-attach",))
    plan = services.plan(service(), BLUE, [attached], {}, {"blue-attach": "blue"})
    assert plan.warnings == ()


def test_unreadable_annotations_leave_the_pod_without_addresses_and_the_service_unharmed() -> None:
    body = {"metadata": {"name": "a", "labels": {"app": "db"}, "annotations": {
        constants.POD_IPS_ANNOTATION: "{not json", constants.NPWG_NETWORK_STATUS_ANNOTATION: '[{"name": 3}]',
        constants.NETWORKS_ANNOTATION: '"x"'}}}
    record = services.pod_record(views.EndpointPod.model_validate(body))
    assert record is not None and record.addresses == () and record.statuses == () and record.declares == ()
    _, bodies = run(service(), [record, pod("b", ["10.9.0.6"])])
    assert [e["targetRef"]["name"] for e in bodies["db.ipv4.0"]["endpoints"]] == ["b"]


# --- any pods, any Service ---------------------------------------------------------------------

pods_strategy = st.lists(
    st.tuples(st.sampled_from(["db", "web"]), st.sampled_from(["blue", "red"]),
              st.sampled_from(["v4", "v6", "both", "none"]), st.booleans(), st.booleans(),
              st.sampled_from([5432, 6432, None])),
    max_size=260)


def _pods(spec: list[tuple[str, str, str, bool, bool, int | None]]) -> list[services.PodRecord]:
    out = []
    for i, (app, network, fam, ready, deleting, port) in enumerate(spec):
        ips = {"v4": [f"10.{i // 250}.{i % 250}.1"], "v6": [f"fd00::{i + 1:x}"], "none": [],
               "both": [f"10.{i // 250}.{i % 250}.1", f"fd00::{i + 1:x}"]}[fam]
        out.append(pod(f"p{i}", ips, network=network, labels={"app": app}, ready=ready, deleting=deleting,
                       ports=[("sql", port)] if port else []))
    return out


@settings(max_examples=60, deadline=None)
@given(before=pods_strategy, after=pods_strategy,
       families=st.sampled_from([["IPv4"], ["IPv6"], ["IPv4", "IPv6"], ["IPv6", "IPv4"]]),
       numbered=st.booleans())
def test_any_pods_give_slices_of_at_most_a_hundred_endpoints_one_family_each_no_duplicates_and_a_stable_plan(
        before: list[Any], after: list[Any], families: list[str], numbered: bool) -> None:
    ports = [{"name": "sql", "port": 5432, "targetPort": 5432 if numbered else "sql"}]
    svc = service(families=families, ports=ports)
    bodies: dict[str, dict[str, Any]] = {}
    for spec in (before, after):
        pods = _pods(spec)
        plan, bodies = run(svc, pods, bodies)
        seen: set[tuple[str, str]] = set()
        for body in bodies.values():
            assert len(body["endpoints"]) <= constants.MAX_ENDPOINTS_PER_SLICE
            assert body["addressType"] in families
            for endpoint in body["endpoints"]:
                (address,) = endpoint["addresses"]
                assert services.FAMILIES[body["addressType"]] == ipaddress.ip_address(address).version
                key = (body["addressType"], endpoint["targetRef"]["name"])
                assert key not in seen
                seen.add(key)
            assert body["endpoints"], "no empty slice is kept"
        refused = {services.TARGET_PORT_NOT_FOUND} & set(reasons(plan))
        expected = set() if refused else {
            (family, p.name) for p in pods if p.labels["app"] == "db"
            for net, ip in p.addresses if net == "blue"
            for family in families if services.FAMILIES[family] == ipaddress.ip_address(ip).version}
        assert seen == expected
        again, _ = run(svc, pods, bodies)
        assert again.writes == 0 and again.warnings == plan.warnings
