"""The InUse reverse index and the in-use finalizer decisions (KEP "InUse state")."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from podnetwork.kep import api, inuse
from podnetwork.kep.inuse import attachment_ref, podnetwork_ref

FIN = constants.IN_USE_FINALIZER


def pod(name: str, nets: list[dict[str, str]] | None, *, ns: str = "ns", phase: str = "Running",
        node: str | None = "n1", host_network: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if nets is not None:
        meta["annotations"] = {constants.NETWORKS_ANNOTATION: json.dumps(nets)}
    spec: dict[str, Any] = {}
    if node:
        spec["nodeName"] = node
    if host_network:
        spec["hostNetwork"] = True
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def pna(name: str, network: str, ns: str = "ns") -> dict[str, Any]:
    return {"kind": "PodNetworkAttachment", "metadata": {"name": name, "namespace": ns},
            "spec": {"podNetworkName": network}}


def net_obj(name: str, finalizers: list[str] | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "7"}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "PodNetwork", "metadata": meta}


BLUE = podnetwork_ref("blue")
DEFAULT = podnetwork_ref("default")


def test_pod_without_annotation_uses_the_default_podnetwork():
    assert inuse.pod_references(Pod.model_validate(pod("a", None))) == {DEFAULT}


def test_host_network_pod_references_nothing():
    assert inuse.pod_references(Pod.model_validate(pod("a", None, host_network=True))) == frozenset()


def test_pod_references_attachments_in_its_namespace():
    refs = inuse.pod_references(Pod.model_validate(pod("a", [{"podNetworkAttachmentName": "fast"}, {"podNetworkName": "blue"}])))
    assert refs == {attachment_ref("ns", "fast"), BLUE}


def test_namespace_default_applies_to_pods_without_annotation():
    from podnetwork.kep.api import Network
    refs = inuse.pod_references(Pod.model_validate(pod("a", None)), [Network(podNetworkName="blue")])
    assert refs == {BLUE}


def test_unparseable_annotation_references_nothing():
    p = pod("a", None)
    p["metadata"]["annotations"] = {constants.NETWORKS_ANNOTATION: "{not json"}
    assert inuse.pod_references(Pod.model_validate(p)) == frozenset()


def test_pod_event_marks_network_in_use_and_reports_the_change():
    index = inuse.Index()
    assert index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "blue"}]))) == {BLUE}
    assert index.in_use(BLUE)
    assert index.usage(BLUE).pods == 1
    # the same state again changes nothing
    assert index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "blue"}]))) == set()


def test_terminal_pods_drop_out():
    index = inuse.Index()
    index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "blue"}])))
    for phase in ("Succeeded", "Failed"):
        index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "blue"}])))
        assert index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "blue"}], phase=phase))) == {BLUE}
        assert not index.in_use(BLUE)


def test_deleted_pods_drop_out():
    index = inuse.Index()
    index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "blue"}])))
    index.set_pod(Pod.model_validate(pod("b", [{"podNetworkName": "blue"}])))
    assert index.remove_pod("ns/a") == {BLUE}
    assert index.usage(BLUE).sample == ("ns/b",)
    index.remove_pod("ns/b")
    assert not index.in_use(BLUE)
    assert index.remove_pod("ns/never-seen") == set()
    assert len(index) == 0


def test_changing_networks_moves_the_pod_between_networks():
    index = inuse.Index()
    index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "blue"}])))
    changed = index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "red"}])))
    assert changed == {BLUE, podnetwork_ref("red")}
    assert not index.in_use(BLUE)
    assert index.in_use(podnetwork_ref("red"))


def test_attachments_are_consumers_of_their_podnetwork():
    index = inuse.Index()
    assert index.set_attachment(api.parse(pna("fast", "blue"))) == {BLUE}
    assert index.usage(BLUE).attachments == 1
    assert index.usage(BLUE).sample == ("pna ns/fast",)
    assert index.remove_attachment("ns/fast") == {BLUE}
    assert not index.in_use(BLUE)


def test_usage_sample_is_sorted_and_capped():
    index = inuse.Index()
    for name in "gfedcba":
        index.set_pod(Pod.model_validate(pod(name, [{"podNetworkName": "blue"}])))
    usage = index.usage(BLUE)
    assert (usage.pods, usage.sample) == (7, ("ns/a", "ns/b", "ns/c", "ns/d", "ns/e"))


def test_unscheduled_pods_are_tracked_until_they_get_a_node():
    index = inuse.Index()
    index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "blue"}], node=None, phase="Pending")))
    assert index.unscheduled_pods(BLUE) == {"ns/a"}
    index.set_pod(Pod.model_validate(pod("a", [{"podNetworkName": "blue"}], node="n1")))
    assert index.unscheduled_pods(BLUE) == frozenset()
    assert index.in_use(BLUE)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sets(st.sampled_from("abcd")), st.booleans()), max_size=40))
def test_index_always_matches_a_recount_from_scratch(events):
    index = inuse.Index()
    live: dict[str, set[str]] = {}
    for pod_no, nets, deleted in events:
        name = f"p{pod_no}"
        if deleted or not nets:
            index.remove_pod(f"ns/{name}")
            live.pop(name, None)
        else:
            index.set_pod(Pod.model_validate(pod(name, [{"podNetworkName": n} for n in sorted(nets)])))
            live[name] = nets
    for net in "abcd":
        expected = {f"ns/{p}" for p, nets in live.items() if net in nets}
        assert index.pods_of(podnetwork_ref(net)) == expected


# --- finalizer decisions ---------------------------------------------------------------------

def test_finalizer_arrives_with_the_first_consumer():
    patch = inuse.finalizer_patch(api.parse(net_obj("blue", ["other"])), in_use=True)
    assert patch == {"metadata": {"finalizers": ["other", FIN], "resourceVersion": "7"}}


def test_finalizer_stays_while_in_use():
    assert inuse.finalizer_patch(api.parse(net_obj("blue", [FIN])), in_use=True) is None


def test_finalizer_goes_with_the_last_consumer_so_a_pending_delete_completes():
    patch = inuse.finalizer_patch(api.parse(net_obj("blue", ["other", FIN], deleting=True)), in_use=False)
    assert patch == {"metadata": {"finalizers": ["other"], "resourceVersion": "7"}}


def test_no_finalizer_is_added_to_an_object_being_deleted():
    assert inuse.finalizer_patch(api.parse(net_obj("blue", [], deleting=True)), in_use=True) is None


def test_unused_object_without_finalizer_needs_nothing():
    assert inuse.finalizer_patch(api.parse(net_obj("blue")), in_use=False) is None


def test_deleted_default_podnetwork_is_released_even_in_use():
    patch = inuse.finalizer_patch(api.parse(net_obj("default", [FIN], deleting=True)), in_use=True)
    assert patch == {"metadata": {"finalizers": [], "resourceVersion": "7"}}


def test_attachment_named_default_is_protected_like_any_other():
    obj = pna("default", "blue")
    obj["metadata"].update(finalizers=[FIN], deletionTimestamp="2026-01-01T00:00:00Z")
    assert inuse.finalizer_patch(api.parse(obj), in_use=True) is None
