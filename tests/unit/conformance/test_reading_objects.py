"""How the suite reads the objects it gets back (conformance/kep/views.py): what an implementation
wrote wrong in one field never hides what it wrote right in another, and a missing object reads as
an empty one, so that each test can say what it missed."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from conformance.kep import client as kc
from conformance.kep import views
from conformance.kep.tests import common, extended


def test_a_field_that_does_not_fit_reads_as_absent_and_the_others_are_still_read() -> None:
    view = views.read({"metadata": {"labels": {"a": 1}, "annotations": {"k": "v"}},
                       "spec": {"nodeName": ["n1"], "provider": "example.com/p", "enabled": "true"},
                       "status": {"phase": 3, "podIPs": [{"ip": "10.0.0.5"}]}})
    assert view.metadata.labels is None
    assert view.metadata.annotation("k") == "v"
    assert view.spec.node_name is None
    assert view.spec.provider == "example.com/p"
    # KEP fields keep the value as sent: the string "true" is not `enabled: true`.
    assert view.spec.enabled == "true"
    assert view.status.phase is None
    assert view.status.pod_ips == [{"ip": "10.0.0.5"}]


def test_a_condition_is_found_among_entries_that_are_not_conditions() -> None:
    obj = {"status": {"conditions": ["junk", None, {"type": "Ready", "status": "True", "reason": "Ok"}]}}
    assert kc.condition(obj, "Ready") == {"type": "Ready", "status": "True", "reason": "Ok"}
    assert kc.condition(obj, "InUse") is None
    assert kc.condition(None, "Ready") is None


def test_finalizers_and_deletion_of_an_absent_object_are_none() -> None:
    assert common.finalizers(None) == []
    assert common.deleting(None) is False
    assert common.finalizers({"metadata": {"finalizers": ["a/b"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}) \
        == ["a/b"]
    assert common.deleting({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}) is True


def test_an_event_names_its_object_in_core_and_in_events_k8s_io_form() -> None:
    core = views.read_as({"involvedObject": {"name": "p1"}, "message": "no network blue"}, views.Event)
    assert (core.about, core.text) == ("p1", "no network blue")
    new = views.read_as({"regarding": {"name": "p2"}, "note": "gate held for blue"}, views.Event)
    assert (new.about, new.text) == ("p2", "gate held for blue")
    assert (views.read_as(None, views.Event).about, views.read_as(None, views.Event).text) == (None, "")


def test_a_node_is_schedulable_when_ready_untainted_labelled_and_not_cordoned() -> None:
    node: dict[str, Any] = {"metadata": {"name": "n1", "labels": {extended.HOSTNAME: "n1"}},
                            "spec": {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]},
                            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert extended._schedulable(node)
    assert not extended._schedulable({**node, "spec": {"unschedulable": True}})
    assert not extended._schedulable({**node, "spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}})
    assert not extended._schedulable({**node, "metadata": {"name": "n1"}})
    assert not extended._schedulable({**node, "status": {"conditions": [{"type": "Ready", "status": "False"}]}})


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=3), max_leaves=12)


@given(st.dictionaries(st.sampled_from(["metadata", "spec", "status", "involvedObject", "regarding",
                                        "message", "note"]), json_values, max_size=5))
def test_reading_any_json_never_fails(obj: dict[str, Any]) -> None:
    view = views.read(obj)
    kc.condition(obj, "Ready")
    view.metadata.annotation("k")
    assert isinstance(views.read_as(obj, views.Event).text, str)
