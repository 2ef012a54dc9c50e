"""The demo's in-process object store behaves like the Kubernetes API server."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demo.store import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Event,
    EventType,
    Forbidden,
    Invalid,
    NotFound,
    Store,
    merge_patch,
)

PN = ("multinetwork.x-k8s.io/v1alpha1", "PodNetwork")
FIN = "multinetwork.x-k8s.io/in-use"


def podnetwork(name: str = "blue", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": PN[0], "kind": PN[1], "metadata": {"name": name}, "spec": {"enabled": True, **spec}}


def pod(name: str = "a", ns: str = "demo") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


@pytest.fixture
def api() -> Store:
    return Store()


# -- create / get / list / delete ----------------------------------------------------


def test_create_assigns_uid_resource_version_generation_and_creation_timestamp(api: Store) -> None:
    created = api.create(podnetwork())
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0
    assert api.get(*PN, "blue") == created


def test_create_of_an_existing_name_is_already_exists(api: Store) -> None:
    api.create(podnetwork())
    with pytest.raises(
        AlreadyExists, match=re.escape('podnetworks.multinetwork.x-k8s.io "blue" already exists')
    ):
        api.create(podnetwork())


def test_create_with_a_resource_version_is_refused(api: Store) -> None:
    obj = podnetwork()
    obj["metadata"]["resourceVersion"] = "5"
    with pytest.raises(BadRequest):
        api.create(obj)


@pytest.mark.parametrize("metadata", [{"name": 5}, {"name": "blue", "namespace": ["x"]}, "blue"])
def test_a_body_whose_names_are_not_text_is_a_bad_request_that_stores_nothing(api: Store, metadata: Any) -> None:
    obj = podnetwork()
    obj["metadata"] = metadata
    with pytest.raises(BadRequest, match="metadata"):
        api.create(obj)
    assert api.list(*PN) == []


def test_a_merge_patch_removing_an_annotation_with_a_stale_version_is_a_conflict(api: Store) -> None:
    created = api.create({**podnetwork(), "metadata": {"name": "blue", "annotations": {"a": "1"}}})
    api.patch(*PN, "blue", {"metadata": {"labels": {"x": "y"}}})
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"], "annotations": {"a": None}}}
    with pytest.raises(Conflict):
        api.patch(*PN, "blue", stale)
    assert api.get(*PN, "blue")["metadata"]["annotations"] == {"a": "1"}


def test_get_of_a_missing_object_is_not_found_with_the_resource_name(api: Store) -> None:
    with pytest.raises(NotFound, match=re.escape('podnetworks.multinetwork.x-k8s.io "nope" not found')):
        api.get(*PN, "nope")
    assert api.find(*PN, "nope") is None


def test_reads_return_copies_that_do_not_change_the_store(api: Store) -> None:
    api.create(podnetwork())
    got = api.get(*PN, "blue")
    got["spec"]["enabled"] = False
    assert api.get(*PN, "blue")["spec"]["enabled"] is True


def test_unknown_kind_is_not_found(api: Store) -> None:
    with pytest.raises(NotFound, match="no kind"):
        api.create({"apiVersion": "x/v1", "kind": "Thing", "metadata": {"name": "t"}})


def test_scope_is_enforced_for_namespaced_and_cluster_scoped_kinds(api: Store) -> None:
    bad = pod()
    del bad["metadata"]["namespace"]
    with pytest.raises(BadRequest, match="namespaced"):
        api.create(bad)
    scoped = podnetwork()
    scoped["metadata"]["namespace"] = "demo"
    with pytest.raises(BadRequest, match="cluster-scoped"):
        api.create(scoped)


def test_list_filters_by_namespace_and_kind(api: Store) -> None:
    api.create(pod("a", "one"))
    api.create(pod("b", "two"))
    api.create(podnetwork())
    assert [p["metadata"]["name"] for p in api.list("v1", "Pod")] == ["a", "b"]
    assert [p["metadata"]["name"] for p in api.list("v1", "Pod", "two")] == ["b"]
    assert [p["metadata"]["name"] for p in api.list(*PN)] == ["blue"]


def test_delete_without_finalizers_removes_the_object(api: Store) -> None:
    api.create(podnetwork())
    assert api.delete(*PN, "blue") is None
    assert api.find(*PN, "blue") is None
    with pytest.raises(NotFound):
        api.delete(*PN, "blue")


# -- resourceVersion and optimistic concurrency --------------------------------------


def test_every_write_changes_the_resource_version(api: Store) -> None:
    v1 = api.create(podnetwork())["metadata"]["resourceVersion"]
    obj = api.get(*PN, "blue")
    obj["spec"]["provider"] = "p"
    v2 = api.update(obj)["metadata"]["resourceVersion"]
    v3 = api.patch(*PN, "blue", {"metadata": {"labels": {"a": "b"}}})["metadata"]["resourceVersion"]
    assert len({v1, v2, v3}) == 3


def test_update_with_a_stale_resource_version_is_a_conflict(api: Store) -> None:
    api.create(podnetwork())
    first, second = api.get(*PN, "blue"), api.get(*PN, "blue")
    first["spec"]["provider"] = "one"
    api.update(first)
    second["spec"]["provider"] = "two"
    with pytest.raises(Conflict, match="the object has been modified"):
        api.update(second)
    assert api.get(*PN, "blue")["spec"]["provider"] == "one"


def test_patch_with_a_stale_resource_version_precondition_is_a_conflict(api: Store) -> None:
    stale = api.create(podnetwork())["metadata"]["resourceVersion"]
    api.patch(*PN, "blue", {"spec": {"provider": "one"}})
    with pytest.raises(Conflict):
        api.patch(*PN, "blue", {"metadata": {"resourceVersion": stale}, "spec": {"provider": "two"}})


def test_a_write_that_changes_nothing_keeps_the_resource_version_and_sends_no_event(api: Store) -> None:
    created = api.create(podnetwork())
    seen: list[Event] = []
    api.subscribe(seen.append, *PN, replay=False)
    again = api.update(api.get(*PN, "blue"))
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert seen == []


def test_server_owned_metadata_cannot_be_overwritten_by_an_update(api: Store) -> None:
    created = api.create(podnetwork())
    forged = api.get(*PN, "blue")
    forged["metadata"].update(uid="forged", generation=99, creationTimestamp="1970-01-01T00:00:00Z")
    forged["spec"]["provider"] = "p"
    updated = api.update(forged)
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert updated["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    assert updated["metadata"]["generation"] == 2


# -- generation ------------------------------------------------------------------------


def test_generation_increases_on_spec_change_only(api: Store) -> None:
    api.create(podnetwork())
    obj = api.patch(*PN, "blue", {"metadata": {"annotations": {"x": "y"}}})
    assert obj["metadata"]["generation"] == 1
    obj = api.patch(*PN, "blue", {"status": {"conditions": []}}, subresource="status")
    assert obj["metadata"]["generation"] == 1
    obj = api.patch(*PN, "blue", {"spec": {"enabled": False}})
    assert obj["metadata"]["generation"] == 2


# -- status subresource ------------------------------------------------------------------


def test_create_drops_status(api: Store) -> None:
    obj = podnetwork()
    obj["status"] = {"conditions": [{"type": "Ready"}]}
    assert "status" not in api.create(obj)


def test_main_resource_update_and_patch_ignore_status(api: Store) -> None:
    api.create(podnetwork())
    api.patch(
        *PN, "blue", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, subresource="status"
    )
    obj = api.get(*PN, "blue")
    obj["status"] = {"conditions": []}
    obj["spec"]["provider"] = "p"
    api.update(obj)
    api.patch(*PN, "blue", {"status": None})
    got = api.get(*PN, "blue")
    assert got["status"]["conditions"][0]["status"] == "True"
    assert got["spec"]["provider"] == "p"


def test_update_status_changes_only_status(api: Store) -> None:
    api.create(podnetwork())
    obj = api.get(*PN, "blue")
    obj["spec"]["enabled"] = False
    obj["metadata"]["labels"] = {"sneaky": "yes"}
    obj["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
    got = api.update_status(obj)
    assert got["spec"]["enabled"] is True
    assert "labels" not in got["metadata"]
    assert got["status"]["conditions"][0]["status"] == "False"


def test_status_patch_with_stale_version_is_a_conflict(api: Store) -> None:
    stale = api.create(podnetwork())["metadata"]["resourceVersion"]
    api.patch(*PN, "blue", {"spec": {"provider": "x"}})
    with pytest.raises(Conflict):
        api.update_status(
            {**api.get(*PN, "blue"), "metadata": {"name": "blue", "resourceVersion": stale}, "status": {}}
        )


# -- finalizers ------------------------------------------------------------------------


def test_delete_with_finalizers_sets_deletion_timestamp_and_keeps_the_object(api: Store) -> None:
    obj = podnetwork()
    obj["metadata"]["finalizers"] = [FIN]
    api.create(obj)
    marked = api.delete(*PN, "blue")
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    assert api.get(*PN, "blue")["metadata"]["deletionTimestamp"]
    # A second delete changes nothing.
    assert api.delete(*PN, "blue") == api.get(*PN, "blue")


def test_removing_the_last_finalizer_completes_the_delete(api: Store) -> None:
    obj = podnetwork()
    obj["metadata"]["finalizers"] = [FIN, "other/x"]
    api.create(obj)
    api.delete(*PN, "blue")
    api.patch(*PN, "blue", {"metadata": {"finalizers": ["other/x"]}})
    assert api.find(*PN, "blue") is not None
    api.patch(*PN, "blue", {"metadata": {"finalizers": None}})
    assert api.find(*PN, "blue") is None


def test_no_finalizer_can_be_added_while_deleting(api: Store) -> None:
    obj = podnetwork()
    obj["metadata"]["finalizers"] = [FIN]
    api.create(obj)
    api.delete(*PN, "blue")
    with pytest.raises(Forbidden, match="no new finalizers"):
        api.patch(*PN, "blue", {"metadata": {"finalizers": [FIN, "late/one"]}})


def test_deletion_timestamp_cannot_be_cleared_by_an_update(api: Store) -> None:
    obj = podnetwork()
    obj["metadata"]["finalizers"] = [FIN]
    api.create(obj)
    api.delete(*PN, "blue")
    got = api.patch(*PN, "blue", {"metadata": {"deletionTimestamp": None}})
    assert got["metadata"]["deletionTimestamp"]


# -- merge patch -----------------------------------------------------------------------


def test_merge_patch_follows_rfc_7386_examples() -> None:
    # The examples table of RFC 7386 section 3 (a selection).
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": ["b"]}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "c"}, {"a": ["b"]}) == {"a": ["b"]}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch(["a", "b"], ["c", "d"]) == ["c", "d"]
    assert merge_patch({"a": "b"}, ["c"]) == ["c"]
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=2), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=60)
@given(
    target=st.dictionaries(st.text(max_size=2), json_values, max_size=4),
    patch=st.dictionaries(st.text(max_size=2), json_values, max_size=4),
)
def test_merge_patch_is_idempotent_and_does_not_mutate_arguments(target: dict, patch: dict) -> None:
    import copy

    t0, p0 = copy.deepcopy(target), copy.deepcopy(patch)
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once
    assert (target, patch) == (t0, p0)


def test_patch_of_a_non_object_is_a_bad_request(api: Store) -> None:
    api.create(podnetwork())
    with pytest.raises(BadRequest):
        api.patch(*PN, "blue", ["not", "an", "object"])  # type: ignore[arg-type]


# -- admission -------------------------------------------------------------------------


def test_admission_mutates_then_validates_on_create_and_update(api: Store) -> None:
    calls: list[str] = []

    def mutate(op: str, obj: dict, old: dict | None) -> dict:
        calls.append(f"mutate {op}")
        obj["metadata"].setdefault("annotations", {})["seen"] = op
        return obj

    def validate(op: str, obj: dict, old: dict | None) -> None:
        calls.append(f"validate {op} {obj['metadata']['annotations']['seen']}")
        if obj["spec"].get("containers") == []:
            raise Invalid("spec.containers: Required value")

    api.add_admission("v1", "Pod", mutate=mutate, validate=validate)
    created = api.create(pod())
    assert created["metadata"]["annotations"]["seen"] == "CREATE"
    api.patch("v1", "Pod", "a", {"metadata": {"labels": {"x": "y"}}}, "demo")
    bad = pod("b")
    bad["spec"]["containers"] = []
    with pytest.raises(Invalid):
        api.create(bad)
    assert api.find("v1", "Pod", "b", "demo") is None
    assert calls[:4] == ["mutate CREATE", "validate CREATE CREATE", "mutate UPDATE", "validate UPDATE UPDATE"]


def test_status_writes_skip_admission(api: Store) -> None:
    api.create(pod())

    def refuse(op: str, obj: dict, old: dict | None) -> None:
        raise Invalid("no")

    api.add_admission("v1", "Pod", validate=refuse)
    got = api.patch("v1", "Pod", "a", {"status": {"phase": "Running"}}, "demo", subresource="status")
    assert got["status"]["phase"] == "Running"


# -- watches ---------------------------------------------------------------------------


def test_watch_sees_added_modified_deleted_in_order(api: Store) -> None:
    seen: list[tuple[str, str, str]] = []
    api.subscribe(
        lambda e: seen.append(
            (e.type, e.object["metadata"]["name"], e.object["metadata"]["resourceVersion"])
        ),
        *PN,
    )
    obj = podnetwork()
    obj["metadata"]["finalizers"] = [FIN]
    api.create(obj)
    api.delete(*PN, "blue")
    api.patch(*PN, "blue", {"metadata": {"finalizers": None}})
    assert [t for t, _, _ in seen] == [EventType.ADDED, EventType.MODIFIED, EventType.DELETED]
    versions = [int(v) for _, _, v in seen]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_subscribe_replays_existing_objects_as_added(api: Store) -> None:
    api.create(podnetwork("one"))
    api.create(pod())
    seen: list[Event] = []
    api.subscribe(seen.append, *PN)
    assert [(e.type, e.object["metadata"]["name"]) for e in seen] == [(EventType.ADDED, "one")]


def test_a_watcher_that_writes_gets_its_own_event_after_the_current_one(api: Store) -> None:
    order: list[str] = []

    def controller(e: Event) -> None:
        order.append(f"{e.type} gen={e.object['metadata'].get('annotations', {}).get('n', '-')}")
        if e.type == EventType.ADDED:
            api.patch(*PN, e.object["metadata"]["name"], {"metadata": {"annotations": {"n": "1"}}})
            order.append("patched")

    api.subscribe(controller, *PN)
    api.create(podnetwork())
    assert order == ["ADDED gen=-", "patched", "MODIFIED gen=1"]


def test_writes_in_a_batch_deliver_their_events_after_it_as_a_callback_s_writes_do(api: Store) -> None:
    order: list[str] = []
    api.subscribe(lambda e: order.append(f"{e.type} {e.object['metadata']['name']}"), *PN, replay=False)
    with api.batch():
        api.create(podnetwork("one"))
        api.create(podnetwork("two"))
        order.append("end of batch")
        with api.batch():  # nested: still delivered after the outer one
            api.create(podnetwork("three"))
    assert order == ["end of batch", "ADDED one", "ADDED two", "ADDED three"]
    api.create(podnetwork("four"))
    assert order[-1] == "ADDED four"  # after the batch, writes deliver at once again


def test_unsubscribe_stops_events(api: Store) -> None:
    seen: list[Event] = []
    cancel = api.subscribe(seen.append, *PN)
    api.create(podnetwork("one"))
    cancel()
    api.create(podnetwork("two"))
    assert [e.object["metadata"]["name"] for e in seen] == ["one"]


def test_watch_events_are_copies(api: Store) -> None:
    def vandal(e: Event) -> None:
        e.object["spec"]["enabled"] = False

    api.subscribe(vandal, *PN)
    api.create(podnetwork())
    assert api.get(*PN, "blue")["spec"]["enabled"] is True


def test_concurrent_patches_from_threads_lose_no_write(api: Store) -> None:
    api.create(podnetwork())

    def writer(i: int) -> None:
        for j in range(20):
            api.patch(*PN, "blue", {"metadata": {"annotations": {f"t{i}-{j}": "x"}}})

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(api.get(*PN, "blue")["metadata"]["annotations"]) == 80


def test_an_empty_finalizer_list_also_completes_the_delete(api: Store) -> None:
    obj = podnetwork()
    obj["metadata"]["finalizers"] = [FIN]
    api.create(obj)
    api.delete(*PN, "blue")
    seen: list[Event] = []
    api.subscribe(seen.append, *PN, replay=False)
    api.patch(*PN, "blue", {"metadata": {"finalizers": []}})
    assert api.find(*PN, "blue") is None
    assert [e.type for e in seen] == [EventType.DELETED]


def test_an_update_without_resource_version_is_unconditional_for_core_kinds_only(api: Store) -> None:
    api.create(pod())
    api.patch("v1", "Pod", "a", {"metadata": {"labels": {"x": "1"}}}, "demo")
    body = pod()
    body["metadata"]["labels"] = {"x": "2"}
    assert api.update(body)["metadata"]["labels"] == {"x": "2"}
    # Custom resources require it (the API server's custom-resource strategy).
    api.create(podnetwork())
    with pytest.raises(Invalid, match="must be specified for an update"):
        api.update(podnetwork(provider="two"))


def test_resources_lists_the_registered_kinds(api: Store) -> None:
    kinds = {(r.api_version, r.kind) for r in api.resources()}
    assert PN in kinds and ("v1", "Pod") in kinds
    assert ("k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition") in kinds


# -- garbage collection ------------------------------------------------------------------


def owned(name: str, *owners: dict[str, Any], finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "demo", "ownerReferences": [
        {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
         "uid": o["metadata"]["uid"]} for o in owners]}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
            "addressType": "IPv4", "endpoints": []}


def service(name: str = "db") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "demo"},
            "spec": {"selector": {"app": name}}}


def test_the_dependents_of_a_deleted_owner_are_deleted_with_their_events(api: Store) -> None:
    owner = api.create(service())
    api.create(owned("db.ipv4.0", owner))
    api.create(owned("unrelated"))
    seen: list[tuple[str, str]] = []
    api.subscribe(lambda e: seen.append((e.type.value, e.object["metadata"]["name"])),
                  "discovery.k8s.io/v1", "EndpointSlice", replay=False)
    api.delete("v1", "Service", "db", "demo")
    assert api.find("discovery.k8s.io/v1", "EndpointSlice", "db.ipv4.0", "demo") is None
    assert api.find("discovery.k8s.io/v1", "EndpointSlice", "unrelated", "demo") is not None
    assert seen == [("DELETED", "db.ipv4.0")]


def test_a_dependent_with_an_owner_left_stays_and_one_with_a_finalizer_is_marked(api: Store) -> None:
    first, second = api.create(service("a")), api.create(service("b"))
    api.create(owned("both", first, second))
    api.create(owned("held", first, finalizers=[FIN]))
    api.delete("v1", "Service", "a", "demo")
    assert api.find("discovery.k8s.io/v1", "EndpointSlice", "both", "demo") is not None
    held = api.get("discovery.k8s.io/v1", "EndpointSlice", "held", "demo")
    assert held["metadata"]["deletionTimestamp"]
    api.delete("v1", "Service", "b", "demo")
    assert api.find("discovery.k8s.io/v1", "EndpointSlice", "both", "demo") is None


def test_an_owner_held_by_its_finalizer_keeps_its_dependents_until_it_is_gone(api: Store) -> None:
    obj = service()
    obj["metadata"]["finalizers"] = [FIN]
    owner = api.create(obj)
    api.create(owned("db.ipv4.0", owner))
    api.delete("v1", "Service", "db", "demo")
    assert api.find("discovery.k8s.io/v1", "EndpointSlice", "db.ipv4.0", "demo") is not None
    api.patch("v1", "Service", "db", {"metadata": {"finalizers": None}}, "demo")
    assert api.find("discovery.k8s.io/v1", "EndpointSlice", "db.ipv4.0", "demo") is None
