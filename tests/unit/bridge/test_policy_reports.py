"""What the bridge says about MultiNetworkPolicies (bridge.operator.policies): the notes of a policy
against the networks that exist, and the Events planned only when they change."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.operator import policies
from bridge.operator.policies import NORMAL, WARNING, Note
from bridge.policy import NetworkInfo
from podnetwork.ground import constants

NOW = "2026-01-01T00:00:00Z"
BLUE = NetworkInfo(podnetwork="blue", nad="nets/blue")
RED = NetworkInfo(podnetwork="red")


def body(annotations: dict[str, str] | None = None, spec: Any = None, uid: str = "uid-1") -> dict[str, Any]:
    return {"apiVersion": constants.POLICY_API_VERSION, "kind": constants.POLICY_KIND,
            "metadata": {"name": "isolate", "namespace": "app", "uid": uid, "resourceVersion": "7",
                         "annotations": annotations or {}},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]} if spec is None else spec}


def nets(*found: NetworkInfo) -> dict[str, NetworkInfo]:
    return {n.key: n for n in found}


FOR_BLUE = {constants.POLICY_FOR_PODNETWORK_ANNOTATION: "blue"}


def test_a_policy_on_an_existing_network_is_said_to_apply_on_it_by_both_its_names() -> None:
    said = policies.notes(policies.read(body(FOR_BLUE)), nets(BLUE, RED))
    assert said == {Note(NORMAL, "PolicyApplies",
                         "the policy applies on PodNetwork blue (NetworkAttachmentDefinition nets/blue)")}


def test_an_invalid_policy_gets_one_warning_naming_every_bad_field_and_applies_to_nothing() -> None:
    spec = {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}]}],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}
    (note,) = policies.notes(policies.read(body(FOR_BLUE, spec)), nets(BLUE))
    assert (note.type, note.reason) == (WARNING, "InvalidPolicy")
    assert note.message.startswith("the policy is invalid and applies to nothing: ")
    assert "spec.ingress[0].from[0].ipBlock.except[0]" in note.message
    assert "spec.egress[0].to[0].ipBlock.cidr" in note.message


def test_a_policy_naming_a_missing_network_warns_and_applies_on_the_ones_that_exist() -> None:
    seen = policies.read(body({constants.POLICY_FOR_PODNETWORK_ANNOTATION: "blue,purple"}))
    said = policies.notes(seen, nets(BLUE))
    assert {(n.type, n.reason) for n in said} == {(WARNING, "NetworkNotFound"), (NORMAL, "PolicyApplies")}
    alone = policies.notes(policies.read(body({constants.POLICY_FOR_PODNETWORK_ANNOTATION: "purple"})), nets(BLUE))
    (note,) = alone
    assert note.reason == "NetworkNotFound" and "purple" in note.message
    assert note.message.endswith("the policy applies to no network")


def test_a_policy_naming_no_network_warns_no_network_selected() -> None:
    (note,) = policies.notes(policies.read(body()), nets(BLUE))
    assert (note.type, note.reason) == (WARNING, "NoNetworkSelected")


def test_the_first_sight_of_a_policy_posts_every_note_warnings_first_without_renewing() -> None:
    seen = policies.read(body({constants.POLICY_FOR_PODNETWORK_ANNOTATION: "blue,purple"}))
    posts, said = policies.plan(seen, policies.notes(seen, nets(BLUE)), None, now=NOW)
    assert [p.note.reason for p in posts] == ["NetworkNotFound", "PolicyApplies"]
    assert not any(p.renew for p in posts)
    assert said == policies.Said("uid-1", frozenset(p.note for p in posts))


def test_the_same_notes_again_post_nothing() -> None:
    seen = policies.read(body(FOR_BLUE))
    first, said = policies.plan(seen, policies.notes(seen, nets(BLUE)), None, now=NOW)
    again, said_again = policies.plan(seen, policies.notes(seen, nets(BLUE, RED)), said, now=NOW)
    assert len(first) == 1 and again == () and said_again == said


def test_a_network_that_goes_and_comes_back_posts_the_warning_then_renews_the_applies_event() -> None:
    seen = policies.read(body(FOR_BLUE))
    applies, said = policies.plan(seen, policies.notes(seen, nets(BLUE)), None, now=NOW)
    gone, said = policies.plan(seen, policies.notes(seen, nets(RED)), said, now=NOW)
    back, said = policies.plan(seen, policies.notes(seen, nets(BLUE)), said, now=NOW)
    assert [p.note.reason for p in gone] == ["NetworkNotFound"] and gone[0].renew
    assert [p.note for p in back] == [applies[0].note] and back[0].renew
    assert back[0].body["metadata"]["name"] == applies[0].body["metadata"]["name"]


def test_a_policy_created_again_under_a_new_uid_is_seen_for_the_first_time() -> None:
    old = policies.read(body(FOR_BLUE))
    _, said = policies.plan(old, policies.notes(old, nets(BLUE)), None, now=NOW)
    new = policies.read(body(FOR_BLUE, uid="uid-2"))
    posts, _ = policies.plan(new, policies.notes(new, nets(BLUE)), said, now=NOW)
    assert len(posts) == 1 and not posts[0].renew
    assert posts[0].body["involvedObject"]["uid"] == "uid-2"


def test_the_event_is_about_the_policy_and_named_from_its_uid_reason_and_message() -> None:
    seen = policies.read(body(FOR_BLUE))
    (note,) = policies.notes(seen, nets(BLUE))
    event = policies.event(seen, note, now=NOW)
    assert event["involvedObject"] == {"apiVersion": constants.POLICY_API_VERSION, "kind": constants.POLICY_KIND,
                                       "name": "isolate", "namespace": "app", "uid": "uid-1", "resourceVersion": "7"}
    assert (event["type"], event["reason"], event["message"]) == (NORMAL, note.reason, note.message)
    assert event["metadata"]["namespace"] == "app" and event["metadata"]["name"].startswith("isolate.")
    other = policies.event(seen, Note(WARNING, "NetworkNotFound", "x"), now=NOW)
    assert other["metadata"]["name"] != event["metadata"]["name"]
    assert policies.event(seen, note, now="later")["metadata"]["name"] == event["metadata"]["name"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(metadata=json_values, spec=json_values)
def test_any_object_is_read_and_judged_without_raising(metadata: Any, spec: Any) -> None:
    seen = policies.read({"metadata": metadata, "spec": spec})
    said = policies.notes(seen, nets(BLUE))
    assert said and all(n.type in (NORMAL, WARNING) for n in said)
