"""The extender's pure parts: the filter decision, the cache's snapshots, the wire models, the gates."""

from __future__ import annotations

import json
import threading
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podnetwork.ground.core import Pod
from scheduler_plugin import cache as cache_mod
from scheduler_plugin import decision, wire
from scheduler_plugin.settings import parse_feature_gates

NETWORKS = "multinetwork.x-k8s.io/networks"
T0 = "2026-01-01T00:00:00Z"
NODE_NETWORKS = "multinetwork.x-k8s.io/podnetworks"


def ready(name: str, ok: bool = True, reason: str = "Ready", message: str = "") -> dict[str, Any]:
    return {
        "kind": "PodNetwork", "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ok else "False",
                                   "reason": reason, "message": message, "lastTransitionTime": T0}]},
    }


def a_pod(nets: list[dict[str, Any]] | None, **spec: Any) -> dict[str, Any]:
    annotations = {} if nets is None else {NETWORKS: json.dumps(nets)}
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations}, "spec": spec}


def a_node(name: str, offers: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    annotations = {} if offers is None else {NODE_NETWORKS: json.dumps(offers)}
    return {"kind": "Node", "metadata": {"name": name, "annotations": annotations, **extra}}


def synced(*objs: dict[str, Any]) -> cache_mod.Snapshot:
    c = cache_mod.Cache()
    for obj in objs:
        c.upsert(obj)
    c.mark_synced()
    return c.snapshot()


# --- decision ---------------------------------------------------------------------------------

def test_host_network_pod_without_annotation_passes_everywhere() -> None:
    result = decision.filter_nodes(Pod.model_validate(a_pod(None, hostNetwork=True)), ["n1"], cache_mod.Snapshot())
    assert result.passed == ["n1"]


def test_host_network_pod_with_networks_is_unresolvable_with_the_static_error() -> None:
    pod = a_pod([{"podNetworkName": "blue"}], hostNetwork=True)
    result = decision.filter_nodes(Pod.model_validate(pod), ["n1", "n2"], synced(ready("blue")))
    assert result.unresolvable == dict.fromkeys(
        ["n1", "n2"], "spec.networks: Forbidden: may not be set when `spec.hostNetwork` is true"
    )
    assert result.passed == [] and result.failed == {}


def test_attachment_whose_podnetwork_is_gone_names_both() -> None:
    snap = synced({"kind": "PodNetworkAttachment", "metadata": {"name": "a", "namespace": "ns"},
                   "spec": {"podNetworkName": "gone"},
                   "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": T0}]}})
    result = decision.filter_nodes(Pod.model_validate(a_pod([{"podNetworkAttachmentName": "a"}])), ["n1"], snap)
    assert result.unresolvable == {"n1": 'podnetwork "gone" not found (referenced by podnetworkattachment "a")'}


def test_terminating_podnetwork_is_not_ready() -> None:
    pn = ready("blue")
    pn["metadata"]["deletionTimestamp"] = "2026-11-21T10:00:00Z"
    result = decision.filter_nodes(Pod.model_validate(a_pod([{"podNetworkName": "blue"}])), ["n1"], synced(pn))
    assert result.unresolvable == {"n1": 'podnetwork "blue" is not Ready: Terminating: the object is being deleted'}


def test_a_ready_condition_without_message_is_copied_without_a_dangling_colon() -> None:
    snap = synced(ready("blue", False, "AdministrativelyDisabled"))
    result = decision.filter_nodes(Pod.model_validate(a_pod([{"podNetworkName": "blue"}])), ["n1"], snap)
    assert result.unresolvable == {"n1": 'podnetwork "blue" is not Ready: AdministrativelyDisabled'}


def test_podnetwork_without_a_ready_condition_is_not_ready() -> None:
    result = decision.filter_nodes(Pod.model_validate(a_pod([{"podNetworkName": "blue"}])), ["n1"],
                                   synced({"kind": "PodNetwork", "metadata": {"name": "blue"}}))
    assert result.unresolvable == {
        "n1": 'podnetwork "blue" is not Ready: ConditionMissing: the controller has not set the Ready condition yet'
    }


def test_node_offers_given_by_the_request_replace_the_cache() -> None:
    snap = synced(ready("blue"), a_node("n1", []))
    pod = a_pod([{"podNetworkName": "blue"}])
    assert decision.filter_nodes(Pod.model_validate(pod), ["n1"], snap).failed == {"n1": 'podnetwork "blue" is not available on this node'}
    assert decision.filter_nodes(Pod.model_validate(pod), ["n1"], snap, node_annotations={"n1": json.dumps(["blue"])}).passed == ["n1"]


def test_no_candidates_gives_an_empty_answer() -> None:
    result = decision.filter_nodes(Pod.model_validate(a_pod([{"podNetworkName": "ghost"}])), [], synced())
    assert result == decision.FilterResult()


def test_first_missing_network_in_the_pods_order_is_the_reason() -> None:
    snap = synced(ready("x"), ready("y"), a_node("n1", []), a_node("n2", ["x"]))
    pod = a_pod([{"podNetworkName": "x"}, {"podNetworkName": "y", "interfaceName": "net2"}])
    result = decision.filter_nodes(Pod.model_validate(pod), ["n1", "n2"], snap)
    assert result.failed == {"n1": 'podnetwork "x" is not available on this node',
                             "n2": 'podnetwork "y" is not available on this node'}


def test_a_node_that_starts_offering_a_network_passes_on_the_next_call() -> None:
    c = cache_mod.Cache()
    c.upsert(ready("blue"))
    c.upsert(a_node("n1", []))
    c.mark_synced()
    pod = a_pod([{"podNetworkName": "blue"}])
    first = decision.filter_nodes(Pod.model_validate(pod), ["n1"], c.snapshot())
    again = decision.filter_nodes(Pod.model_validate(pod), ["n1"], c.snapshot())  # answered from the snapshot's memo
    c.upsert(a_node("n1", ["blue"]))
    after = decision.filter_nodes(Pod.model_validate(pod), ["n1"], c.snapshot())
    assert first == again == decision.FilterResult(failed={"n1": 'podnetwork "blue" is not available on this node'})
    assert after == decision.FilterResult(passed=["n1"])


def test_the_memo_of_a_snapshot_stays_bounded() -> None:
    c = cache_mod.Cache()
    names = [f"net{i}" for i in range(decision._MEMO_LIMIT + 5)]
    for name in names:
        c.upsert(ready(name))
    c.upsert(a_node("n1", names[:3]))
    c.mark_synced()
    snap = c.snapshot()
    for name in names:
        the_pod = Pod.model_validate(a_pod([{"podNetworkName": name}]))
        result = decision.filter_nodes(the_pod, ["n1"], snap)
        assert (result.passed == ["n1"]) == (name in names[:3])
        encoded = decision.filter_encoded(wire.PodFields.of(the_pod), [b"n1"], snap)  # the short way's tables
        assert encoded is not None and (encoded.passed == 1) == (name in names[:3])
    assert {"node-verdicts", "encoded-verdicts", "pod-verdicts"} <= set(snap.memo)
    assert all(0 < len(family) <= decision._MEMO_LIMIT for family in snap.memo.values())


NAMES = st.sampled_from(["a", "b", "c", "d", "default"])


@settings(max_examples=60, deadline=None)
@given(
    needed=st.lists(NAMES, min_size=1, max_size=4, unique=True),
    offers=st.dictionaries(
        st.from_regex(r"node-[0-9]{1,3}", fullmatch=True),
        st.none() | st.frozensets(NAMES, max_size=5),
        max_size=20,
    ),
)
def test_a_node_passes_exactly_when_it_offers_every_needed_network_but_default(
    needed: list[str], offers: dict[str, frozenset[str] | None]
) -> None:
    c = cache_mod.Cache()
    for name in ["a", "b", "c", "d", "default"]:
        c.upsert(ready(name))
    for node, offer in offers.items():
        c.upsert(a_node(node, None if offer is None else sorted(offer)))
    c.mark_synced()
    names = list(offers)
    pod = a_pod([{"podNetworkName": n, "interfaceName": f"net{i}"} for i, n in enumerate(needed)])
    result = decision.filter_nodes(Pod.model_validate(pod), names, c.snapshot())
    assert result.unresolvable == {}
    assert set(result.passed).isdisjoint(result.failed)
    assert set(result.passed) | set(result.failed) == set(names)
    required = set(needed) - {"default"}
    for node, offer in offers.items():
        assert (node in result.passed) == (offer is None or required <= offer)



def reference_filter(needed: list[str], offers: dict[str, Any], candidates: list[str]) -> decision.FilterResult:
    """The rules applied one node at a time, as the docstring of `decision` states them."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    if set(needed) <= {"default"}:  # available on every node, known or not
        return decision.FilterResult(passed=list(candidates))
    for name in candidates:
        if name not in offers:
            failed[name] = decision.UNKNOWN_NODE
            continue
        offer = cache_mod.parse_node_offer(offers[name])
        if isinstance(offer, cache_mod.InvalidOffer):
            failed[name] = offer.message
            continue
        missing = [n for n in needed if n != "default" and offer is not None and n not in offer]
        if missing:
            failed[name] = decision.not_available(missing[0])
        else:
            passed.append(name)
    return decision.FilterResult(passed=passed, failed=failed)


NODE_NAMES = st.from_regex(r"node-[0-9]{1,2}", fullmatch=True)
OFFER_TEXTS = st.none() | st.sampled_from(["a,b", '{"a": 1}', "[1]"]) | st.lists(NAMES, max_size=5).map(json.dumps)


@settings(max_examples=80, deadline=None)
@given(
    needed=st.lists(NAMES, min_size=1, max_size=4, unique=True),
    offers=st.dictionaries(NODE_NAMES, OFFER_TEXTS, max_size=15),
    extra=st.lists(NODE_NAMES, max_size=6),
    data=st.data(),
)
def test_every_candidate_gets_the_verdict_of_the_rules_applied_node_by_node(
    needed: list[str], offers: dict[str, str | None], extra: list[str], data: st.DataObject
) -> None:
    c = cache_mod.Cache()
    for name in ["a", "b", "c", "d", "default"]:
        c.upsert(ready(name))
    for node, text in offers.items():
        annotations = {} if text is None else {NODE_NETWORKS: text}
        c.upsert({"kind": "Node", "metadata": {"name": node, "annotations": annotations}})
    c.mark_synced()
    # Candidates in any order, some unknown to the cache, some named twice.
    candidates = data.draw(st.permutations(list(offers) + extra))
    pod = a_pod([{"podNetworkName": n, "interfaceName": f"net{i}"} for i, n in enumerate(needed)])
    snap = c.snapshot()
    first = decision.filter_nodes(Pod.model_validate(pod), candidates, snap)
    again = decision.filter_nodes(Pod.model_validate(pod), candidates, snap)  # from the snapshot's memo
    expected = reference_filter(needed, offers, candidates)
    assert first == again == expected
    assert set(first.passed) | set(first.failed) <= set(candidates)


def fresh(name: str) -> str:
    """An equal str that is a different object (as from another parse)."""
    return "".join(list(name))


def test_tables_keyed_by_one_request_s_objects_judge_any_other_request_alike() -> None:
    offers: dict[str, str | None] = {f"node-{i}": json.dumps(["a"] if i % 3 else ["a", "b"]) for i in range(40)}
    offers["node-plain"] = None
    snap = synced(ready("a"), ready("b"),
                  *({"kind": "Node", "metadata": {"name": n, "annotations": {} if t is None else {NODE_NETWORKS: t}}}
                    for n, t in offers.items()))
    pod = a_pod([{"podNetworkName": "a"}, {"podNetworkName": "b", "interfaceName": "net2"}])
    small = ["node-0", "node-1"]
    large = [fresh(n) for n in reversed(list(offers))] + ["node-new"]
    for candidates in (small, large, [fresh(n) for n in large], small, ["node-3", "node-6"]):
        result = decision.filter_nodes(Pod.model_validate(pod), candidates, snap)
        assert result == reference_filter(["a", "b"], offers, candidates)
    # The large request was adopted: its own objects now key the table.
    codes = decision._cluster_verdicts(snap, ("a", "b")).codes
    assert any(key is large[0] for key in codes) and len(codes) == len(offers)


def test_more_distinct_reasons_than_a_byte_holds_still_name_each_node_s_own() -> None:
    nets = [f"net{i}" for i in range(300)]
    c = cache_mod.Cache()
    for name in nets:
        c.upsert(ready(name))
    # node-i lacks only net-i, so every node fails for a reason of its own.
    for i in range(300):
        c.upsert(a_node(f"node-{i}", nets[:i] + nets[i + 1:]))
    c.upsert(a_node("node-all", nets))
    c.mark_synced()
    pod = a_pod([{"podNetworkName": n} for n in nets])
    candidates = ["node-all", *(f"node-{i}" for i in range(300))]
    result = decision.filter_nodes(Pod.model_validate(pod), candidates, c.snapshot())
    assert result.passed == ["node-all"]
    assert result.failed == {f"node-{i}": decision.not_available(f"net{i}") for i in range(300)}


def test_pods_that_differ_in_name_only_share_one_pod_verdict() -> None:
    snap = synced(ready("blue"), a_node("n1", ["blue"]), a_node("n2", []))
    for i in range(5):
        pod = a_pod([{"podNetworkName": "blue"}])
        pod["metadata"]["name"] = f"replica-{i}"
        assert decision.filter_nodes(Pod.model_validate(pod), ["n1", "n2"], snap).passed == ["n1"]
    assert len(snap.memo["pod-verdicts"]) == 1


def test_the_pod_verdict_depends_on_host_network_os_and_namespace() -> None:
    attachment = {"kind": "PodNetworkAttachment", "metadata": {"name": "fast", "namespace": "ns"},
                  "spec": {"podNetworkName": "blue"},
                  "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": T0}]}}
    snap = synced(ready("blue"), attachment, a_node("n1"))
    nets = [{"podNetworkAttachmentName": "fast", "interfaceName": "eth1"}]
    assert decision.filter_nodes(Pod.model_validate(a_pod(nets)), ["n1"], snap).passed == ["n1"]
    host = decision.filter_nodes(Pod.model_validate(a_pod(nets, hostNetwork=True)), ["n1"], snap)
    assert host.unresolvable == {"n1": "spec.networks: Forbidden: may not be set when `spec.hostNetwork` is true"}
    other_ns = a_pod(nets)
    other_ns["metadata"]["namespace"] = "elsewhere"
    assert decision.filter_nodes(Pod.model_validate(other_ns), ["n1"], snap).unresolvable == {
        "n1": 'podnetworkattachment "fast" not found'
    }
    windows = decision.filter_nodes(Pod.model_validate(a_pod(nets, os={"name": "windows"})), ["n1"], snap)
    assert windows.passed == ["n1"]  # eth1 is a valid name on both; the verdict was judged afresh
    assert len(snap.memo["pod-verdicts"]) == 4


def test_a_huge_networks_annotation_is_judged_but_not_remembered() -> None:
    snap = synced(ready("blue"), a_node("n1", ["blue"]))
    padding = " " * (decision._MEMO_TEXT_LIMIT + 1)
    pod = a_pod(None)
    pod["metadata"]["annotations"][NETWORKS] = json.dumps([{"podNetworkName": "blue"}]) + padding
    assert decision.filter_nodes(Pod.model_validate(pod), ["n1"], snap).passed == ["n1"]
    assert "pod-verdicts" not in snap.memo


# --- cache ------------------------------------------------------------------------------------

def test_a_snapshot_never_changes_after_it_was_taken() -> None:
    c = cache_mod.Cache()
    c.upsert(ready("blue"))
    before = c.snapshot()
    c.upsert(ready("blue", False, "AdministrativelyDisabled", "spec.enabled is false"))
    c.upsert(a_node("n1", ["blue"]))
    c.delete(ready("blue"))
    assert before.podnetworks["blue"].ready and "n1" not in before.nodes
    assert "blue" not in c.snapshot().podnetworks and c.snapshot().nodes["n1"] == frozenset({"blue"})
    with pytest.raises(TypeError):
        before.podnetworks["x"] = before.podnetworks["blue"]  # type: ignore[index]


def test_an_update_the_decision_cannot_see_publishes_nothing() -> None:
    c = cache_mod.Cache()
    c.upsert(a_node("n1", ["blue"], resourceVersion="1"))
    before = c.snapshot()
    heartbeat = a_node("n1", ["blue"], resourceVersion="2")
    heartbeat["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    c.upsert(heartbeat)
    assert c.snapshot() is before


def test_replace_forgets_objects_missing_from_a_relist() -> None:
    c = cache_mod.Cache()
    c.upsert(a_node("old"))
    c.replace("Node", [a_node("new", ["x"])])
    assert dict(c.snapshot().nodes) == {"new": frozenset({"x"})}
    assert c.sizes() == {"PodNetwork": 0, "PodNetworkAttachment": 0, "Node": 1}


def test_unknown_kinds_and_nameless_objects_are_refused() -> None:
    c = cache_mod.Cache()
    with pytest.raises(ValueError, match="cannot cache kind 'Pod'; known kinds: PodNetwork, PodNetworkAttachment, Node"):
        c.upsert({"kind": "Pod", "metadata": {"name": "p"}})
    with pytest.raises(ValueError, match=r"without metadata\.name"):
        c.upsert({"kind": "PodNetwork", "metadata": {}})
    c.delete(ready("never-seen"))  # forgetting an unknown object is fine
    assert c.sizes()["PodNetwork"] == 0


def test_attachments_are_keyed_by_namespace_and_name() -> None:
    c = cache_mod.Cache()
    for ns in ("a", "b"):
        c.upsert({"kind": "PodNetworkAttachment", "metadata": {"name": "x", "namespace": ns},
                  "spec": {"podNetworkName": f"net-{ns}"}})
    assert c.snapshot().attachments[("b", "x")].pod_network_name == "net-b"
    assert len(c.snapshot().attachments) == 2


def test_concurrent_writers_lose_no_update() -> None:
    c = cache_mod.Cache()

    def write(prefix: str) -> None:
        for i in range(200):
            c.upsert(a_node(f"{prefix}-{i}"))

    threads = [threading.Thread(target=write, args=(f"t{t}",)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(c.snapshot().nodes) == 800


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("[]", frozenset()),
        ('["a", "b"]', frozenset({"a", "b"})),
        ("a,b", "is not valid JSON"),
        ('{"a": 1}', "must be a JSON list of PodNetwork names"),
        ('["a", 1]', "must be a JSON list of PodNetwork names"),
    ],
)
def test_node_annotation_is_read_as_a_list_of_names(text: str | None, expected: Any) -> None:
    offer = cache_mod.parse_node_offer(text)
    if isinstance(expected, str):
        assert isinstance(offer, cache_mod.InvalidOffer) and expected in offer.message
    else:
        assert offer == expected


def test_parsed_node_offers_are_remembered_within_a_budget_of_text() -> None:
    memo = cache_mod.OFFER_MEMO
    limit = cache_mod.OFFER_MEMO_TEXT_LIMIT
    short = json.dumps(["blue", "green"])
    assert cache_mod.parse_node_offer(short) is cache_mod.parse_node_offer(short)  # one parse, kept
    long = json.dumps([f"net-{i}" for i in range(limit)])  # longer than the limit: parsed, never kept
    kept = memo.chars
    assert cache_mod.parse_node_offer(long) == frozenset(json.loads(long))
    assert memo.chars == kept
    # Distinct texts just under the limit, four times the budget: the oldest go first.
    count = 4 * cache_mod.OFFER_MEMO_BUDGET // limit
    for i in range(count):
        text = json.dumps([f"{i}-" + "x" * (limit - 16)])
        assert len(text) <= limit
        assert cache_mod.parse_node_offer(text) == frozenset(json.loads(text))
        assert memo.chars <= cache_mod.OFFER_MEMO_BUDGET
    assert len(memo) < count // 3


# --- wire and settings ------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["Pod", "pod", "Nodes", "NodeNames", "items", "metadata", "name", "x"]), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(body=JSON)
def test_any_json_body_parses_or_fails_with_a_validation_error(body: Any) -> None:
    try:
        args = wire.ExtenderArgs.model_validate_json(json.dumps(body))
        names = args.candidate_names()
    except pydantic.ValidationError as exc:
        assert wire.describe(exc)
    except ValueError as exc:
        assert "metadata.name: Required value" in str(exc)
    else:
        assert all(isinstance(n, str) for n in names)


def test_reply_uses_the_go_field_names() -> None:
    reply = wire.ExtenderFilterResult(node_names=["a"], failed_nodes={"b": "why"})
    assert json.loads(reply.to_json()) == {
        "Nodes": None, "NodeNames": ["a"], "FailedNodes": {"b": "why"},
        "FailedAndUnresolvableNodes": {}, "Error": "",
    }


def test_a_reply_reads_back_as_written_and_go_nil_maps_read_as_empty() -> None:
    reply = wire.ExtenderFilterResult(node_names=["a"], failed_nodes={"b": "why"},
                                      failed_and_unresolvable_nodes={"c": "gone"})
    again = wire.ExtenderFilterResult.model_validate_json(reply.to_json())
    assert again == reply
    assert again.failures == {"b": "why", "c": "gone"}
    # What Go's encoder writes for an ExtenderFilterResult whose maps were never made.
    go = wire.ExtenderFilterResult.model_validate_json(
        b'{"Nodes":null,"NodeNames":["a"],"FailedNodes":null,"FailedAndUnresolvableNodes":null,"Error":""}')
    assert go.node_names == ["a"] and go.failures == {}



def test_the_fast_reply_writes_the_bytes_pydantic_would() -> None:
    replies = [
        wire.ExtenderFilterResult(node_names=["a", "é"], failed_nodes={"b": 'podnetwork "x" is not available'}),
        wire.ExtenderFilterResult(nodes={"metadata": {}, "items": [{"metadata": {"name": "a"}, "n": 1.5}]},
                                  failed_and_unresolvable_nodes={"c": "why"}),
        # orjson refuses integers over 64 bits; an echoed node may carry one.
        wire.ExtenderFilterResult(nodes={"metadata": {}, "items": [{"metadata": {"name": "a"}, "n": 2**70}]}),
        wire.ExtenderFilterResult(error="podnetwork extender failed: boom"),
    ]
    for reply in replies:
        assert reply.to_json() == reply.model_dump_json(by_alias=True).encode()


def test_feature_gates_parse_like_kubernetes_components() -> None:
    assert parse_feature_gates("") == {"MultiNetwork": True}
    assert parse_feature_gates("MultiNetwork=false") == {"MultiNetwork": False}
    assert parse_feature_gates(" MultiNetwork=True ,") == {"MultiNetwork": True}
    with pytest.raises(ValueError, match="unknown feature gate 'Other'; known gates: MultiNetwork"):
        parse_feature_gates("Other=true")
    with pytest.raises(ValueError, match="must look like Name=true or Name=false"):
        parse_feature_gates("MultiNetwork")
