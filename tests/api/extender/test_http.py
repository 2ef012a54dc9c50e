"""The extender over HTTP: kube-scheduler's extender v1 bodies in, the Go field names out.

Requests go through httpx against the ASGI app (the full FastAPI stack, no
mocking), and one test serves the app with uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import given, settings
from hypothesis import strategies as st

from podnetwork.ground import constants
from scheduler_plugin import app as app_mod
from scheduler_plugin import cache as cache_mod
from scheduler_plugin.settings import Settings
from tests.api.extender_support import (
    FILTER_BY_NAMES,
    RED_MESSAGE,
    by_names,
    by_nodes,
    node,
    pod,
    podnetwork,
    world,
)

NETWORKS_KEY = "multinetwork.x-k8s.io/networks"
NODE_NETWORKS_KEY = "multinetwork.x-k8s.io/podnetworks"
REPLY_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
NAMES = ["node-a", "node-b", "node-c"]


def client_for(c: cache_mod.Cache, settings: Settings | None = None) -> httpx.AsyncClient:
    application = app_mod.create_app(c, settings or Settings())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://extender")


@pytest.fixture()
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(world()) as c:
        yield c


async def filter_(client: httpx.AsyncClient, body: dict[str, Any] | str) -> dict[str, Any]:
    """The reply to `body`; a dict is sent twice, spaced (read the long way) and in Go's compact
    layout (written from the body's bytes when kube-scheduler's), and both replies must agree."""
    contents = [body] if isinstance(body, str) else [json.dumps(body), json.dumps(body, separators=(",", ":"))]
    replies = []
    for content in contents:
        response = await client.post("/filter", content=content, headers={"Content-Type": "application/json"})
        assert response.status_code == 200, response.text
        replies.append(response.json())
        assert set(replies[-1]) == REPLY_KEYS
    assert all(reply == replies[0] for reply in replies), "the short and the long way disagree"
    return replies[0]


# --- pods that the KEP leaves alone -------------------------------------------------------------

async def test_captured_request_is_answered_with_the_go_field_names(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, FILTER_BY_NAMES)
    assert reply == {
        "Nodes": None,
        "NodeNames": ["node-a", "node-c"],
        "FailedNodes": {"node-b": 'podnetwork "blue" is not available on this node'},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


async def test_pod_without_the_annotation_passes_on_every_node(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod(None), NAMES))
    assert reply["NodeNames"] == NAMES
    assert reply["FailedNodes"] == {} and reply["FailedAndUnresolvableNodes"] == {}


async def test_feature_gate_off_passes_every_pod_on_every_node() -> None:
    async with client_for(world(), Settings(multi_network=False)) as client:
        reply = await filter_(client, by_names(pod([{"podNetworkName": "ghost"}]), NAMES))
    assert reply["NodeNames"] == NAMES
    assert reply["FailedNodes"] == {} and reply["FailedAndUnresolvableNodes"] == {}


async def test_default_network_is_available_even_on_nodes_that_list_none(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod([{"podNetworkName": "default"}]), NAMES))
    assert reply["NodeNames"] == NAMES


# --- active validations: unresolvable on every node ------------------------------------------

async def test_missing_podnetwork_makes_every_node_unresolvable(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod([{"podNetworkName": "ghost"}]), NAMES))
    assert reply["NodeNames"] == []
    assert reply["FailedNodes"] == {}
    assert reply["FailedAndUnresolvableNodes"] == dict.fromkeys(NAMES, 'podnetwork "ghost" not found')


async def test_podnetwork_that_is_not_ready_copies_its_condition(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod([{"podNetworkName": "red"}]), NAMES))
    expected = f'podnetwork "red" is not Ready: ParamsNotReady: {RED_MESSAGE}'
    assert reply["FailedAndUnresolvableNodes"] == dict.fromkeys(NAMES, expected)
    assert reply["NodeNames"] == []


async def test_missing_attachment_makes_every_node_unresolvable(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod([{"podNetworkAttachmentName": "nope"}]), NAMES))
    assert reply["FailedAndUnresolvableNodes"] == dict.fromkeys(NAMES, 'podnetworkattachment "nope" not found')


async def test_attachments_are_looked_up_in_the_pods_namespace(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod([{"podNetworkAttachmentName": "blue-fast"}], namespace="other"), NAMES))
    assert reply["FailedAndUnresolvableNodes"] == dict.fromkeys(NAMES, 'podnetworkattachment "blue-fast" not found')


async def test_attachment_that_is_not_ready_copies_its_condition(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod([{"podNetworkAttachmentName": "red-fast"}]), NAMES))
    expected = 'podnetworkattachment "red-fast" is not Ready: PodNetworkNotReady: podnetwork "red" is not Ready'
    assert reply["FailedAndUnresolvableNodes"] == dict.fromkeys(NAMES, expected)


async def test_same_podnetwork_twice_through_two_attachments_is_unresolvable(client: httpx.AsyncClient) -> None:
    nets = [{"podNetworkAttachmentName": "blue-fast"}, {"podNetworkAttachmentName": "blue-slow", "interfaceName": "net2"}]
    reply = await filter_(client, by_names(pod(nets), NAMES))
    expected = ('podnetwork "blue" is referenced more than once: by podnetworkattachment "blue-fast" '
                'and by podnetworkattachment "blue-slow"')
    assert reply["FailedAndUnresolvableNodes"] == dict.fromkeys(NAMES, expected)
    assert reply["NodeNames"] == []


async def test_same_podnetwork_directly_and_through_an_attachment_is_unresolvable(client: httpx.AsyncClient) -> None:
    nets = [{"podNetworkName": "blue"}, {"podNetworkAttachmentName": "blue-fast", "interfaceName": "net2"}]
    reply = await filter_(client, by_names(pod(nets), NAMES))
    expected = ('podnetwork "blue" is referenced more than once: by podNetworkName "blue" '
                'and by podnetworkattachment "blue-fast"')
    assert reply["FailedAndUnresolvableNodes"] == dict.fromkeys(NAMES, expected)


async def test_every_problem_of_a_pod_is_named_in_one_message(client: httpx.AsyncClient) -> None:
    nets = [{"podNetworkName": "ghost"}, {"podNetworkName": "red", "interfaceName": "net2"}]
    reply = await filter_(client, by_names(pod(nets), ["node-c"]))
    assert reply["FailedAndUnresolvableNodes"] == {
        "node-c": f'podnetwork "ghost" not found; podnetwork "red" is not Ready: ParamsNotReady: {RED_MESSAGE}'
    }


async def test_annotation_that_is_not_json_is_unresolvable_with_the_field_error(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod("[{oops"), NAMES))
    messages = set(reply["FailedAndUnresolvableNodes"].values())
    assert len(messages) == 1 and set(reply["FailedAndUnresolvableNodes"]) == set(NAMES)
    (message,) = messages
    assert message.startswith("metadata.annotations[multinetwork.x-k8s.io/networks]: Invalid value: ")
    assert "not valid JSON" in message


async def test_statically_invalid_networks_are_unresolvable_with_the_field_error(client: httpx.AsyncClient) -> None:
    nets = [{"podNetworkName": "blue", "interfaceName": "net1"}, {"podNetworkName": "green", "interfaceName": "net1"}]
    reply = await filter_(client, by_names(pod(nets), NAMES))
    assert reply["FailedAndUnresolvableNodes"] == dict.fromkeys(
        NAMES, 'spec.networks[1].interfaceName: Duplicate value: "net1"'
    )


# --- per-node availability: failed, not unresolvable ------------------------------------------

async def test_node_that_does_not_list_a_network_fails_with_the_same_text_everywhere(client: httpx.AsyncClient) -> None:
    nets = [{"podNetworkName": "blue"}, {"podNetworkAttachmentName": "green-fast", "interfaceName": "net2"}]
    reply = await filter_(client, by_names(pod(nets), NAMES))
    assert reply["NodeNames"] == ["node-a", "node-c"]
    assert reply["FailedNodes"] == {"node-b": 'podnetwork "blue" is not available on this node'}
    assert reply["FailedAndUnresolvableNodes"] == {}


async def test_reply_names_only_nodes_of_the_request(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod([{"podNetworkName": "blue"}]), ["node-b"]))
    assert reply["NodeNames"] == []
    assert reply["FailedNodes"] == {"node-b": 'podnetwork "blue" is not available on this node'}


async def test_node_unknown_to_the_cache_fails_until_the_watch_delivers_it(client: httpx.AsyncClient) -> None:
    reply = await filter_(client, by_names(pod([{"podNetworkName": "blue"}]), ["node-new"]))
    assert reply["FailedNodes"] == {"node-new": "node is not yet known to the podnetwork scheduler extender"}


async def test_node_with_an_unreadable_annotation_offers_only_default() -> None:
    c = world()
    c.upsert({**node("node-d", "blue,green"), "kind": "Node"})
    async with client_for(c) as client:
        reply = await filter_(client, by_names(pod([{"podNetworkName": "blue"}]), ["node-d"]))
        assert reply["FailedNodes"]["node-d"].startswith(
            "node annotation multinetwork.x-k8s.io/podnetworks is not valid JSON"
        )
        reply = await filter_(client, by_names(pod([{"podNetworkName": "default"}]), ["node-d"]))
        assert reply["NodeNames"] == ["node-d"]


async def test_full_nodelist_is_answered_with_the_passing_nodes_as_sent(client: httpx.AsyncClient) -> None:
    # With nodeCacheCapable: false the request's nodes are kube-scheduler's own copies:
    # their annotations decide, even where the cache says otherwise (node-b offers blue here).
    nodes = [node("node-a", ["green"]), node("node-b", ["blue"]), node("node-c"), node("node-z")]
    reply = await filter_(client, by_nodes(pod([{"podNetworkName": "blue"}]), nodes))
    assert reply["NodeNames"] is None
    assert reply["Nodes"]["items"] == [nodes[1], nodes[2], nodes[3]]
    assert reply["FailedNodes"] == {"node-a": 'podnetwork "blue" is not available on this node'}


async def test_full_nodelist_with_an_unresolvable_pod_returns_an_empty_list(client: httpx.AsyncClient) -> None:
    nodes = [node("node-a"), node("node-b")]
    reply = await filter_(client, by_nodes(pod([{"podNetworkName": "ghost"}]), nodes))
    assert reply["Nodes"] == {"metadata": {}, "items": []}
    assert reply["FailedAndUnresolvableNodes"] == dict.fromkeys(["node-a", "node-b"], 'podnetwork "ghost" not found')


async def test_lower_case_keys_are_accepted(client: httpx.AsyncClient) -> None:
    body = {"pod": pod([{"podNetworkName": "blue"}]), "nodeNames": NAMES}
    reply = await filter_(client, body)
    assert reply["NodeNames"] == ["node-a", "node-c"]
    body = {"pod": pod(None), "nodes": {"items": [node("node-a")]}}
    reply = await filter_(client, body)
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["node-a"]


# --- the cache changes while the pod waits ----------------------------------------------------

async def test_pod_passes_once_its_podnetwork_turns_ready() -> None:
    c = world()
    async with client_for(c) as client:
        body = by_names(pod([{"podNetworkName": "red"}]), NAMES)
        first = await filter_(client, body)
        assert set(first["FailedAndUnresolvableNodes"]) == set(NAMES)
        c.upsert(podnetwork("red"))  # the controller set Ready=True; the watch delivered it
        second = await filter_(client, body)
    # Now it is only a matter of where red is offered: node-c offers every network.
    assert second["NodeNames"] == ["node-c"]
    assert second["FailedAndUnresolvableNodes"] == {}
    assert second["FailedNodes"] == dict.fromkeys(["node-a", "node-b"], 'podnetwork "red" is not available on this node')


async def test_pod_waits_while_the_cache_is_not_synced_but_others_pass() -> None:
    async with client_for(world(synced=False)) as client:
        waiting = await filter_(client, by_names(pod([{"podNetworkName": "blue"}]), NAMES))
        plain = await filter_(client, by_names(pod(None), NAMES))
    assert waiting["FailedNodes"] == dict.fromkeys(
        NAMES, "the podnetwork scheduler extender is starting: its cache is not synced yet"
    )
    assert waiting["FailedAndUnresolvableNodes"] == {}
    assert plain["NodeNames"] == NAMES


T0 = "2026-01-01T00:00:00Z"


def ready_cache() -> cache_mod.Cache:
    cache = cache_mod.Cache()
    for name in ("default", "blue"):
        cache.upsert({"kind": "PodNetwork", "metadata": {"name": name},
                      "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": T0}]}})
    cache.mark_synced()
    return cache


POD = {"metadata": {"name": "p", "namespace": "ns", "annotations": {
    constants.NETWORKS_ANNOTATION: json.dumps([{"podNetworkName": "blue"}])}}, "spec": {}}


async def test_a_pod_is_held_when_its_attachment_is_still_ready_but_its_podnetwork_no_longer_is():
    # Between a PodNetwork turning not Ready (e.g. enabled: false) and the controller
    # rewriting its attachments' Ready, the cache holds a Ready attachment over a network
    # that takes no new pods (KEP "Enabled"); the pod must not be placed in that window.
    cache = ready_cache()
    cache.upsert({"kind": "PodNetwork", "metadata": {"name": "blue"}, "status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "AdministrativelyDisabled",
         "message": "spec.enabled is false", "lastTransitionTime": T0}]}})
    cache.upsert({"kind": "PodNetworkAttachment", "metadata": {"name": "a", "namespace": "ns"},
                  "spec": {"podNetworkName": "blue"},
                  "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": T0}]}})
    pod = {"metadata": {"name": "p", "namespace": "ns", "annotations": {
        constants.NETWORKS_ANNOTATION: json.dumps([{"podNetworkAttachmentName": "a"}])}}, "spec": {}}
    app = app_mod.create_app(cache, Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
        resp = await client.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["n1", "n2"]})
    reply = resp.json()
    assert reply["NodeNames"] == []
    assert set(reply["FailedAndUnresolvableNodes"]) == {"n1", "n2"}
    assert reply["FailedAndUnresolvableNodes"]["n1"] == (
        'podnetwork "blue" is not Ready: AdministrativelyDisabled: spec.enabled is false')


# --- bad bodies -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{", "Invalid JSON"),
        (b"\xff\xfe", "Invalid JSON"),
        (b"[]", "Input should be an object"),
        (b'{"NodeNames": ["a"]}', "Pod: Field required"),
        (b'{"Pod": [], "NodeNames": ["a"]}', "Pod: Input should be an object"),
        (b'{"Pod": {}, "NodeNames": "a"}', "NodeNames: Input should be a valid array"),
        (b'{"Pod": {}}', "exactly one of Nodes (nodeCacheCapable: false) or NodeNames"),
        (b'{"Pod": {}, "NodeNames": ["a"], "Nodes": {"items": []}}', "exactly one of Nodes"),
        (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "Nodes.items[0].metadata.name: Required value"),
        (b'{"Pod": {}, "Nodes": {"items": [7]}}', "Nodes.items[0]: Input should be an object"),
        (b'{"Pod": {"metadata": []}, "NodeNames": []}', "Pod: Value error, metadata must be an object"),
        (b'{"Pod": {"metadata": {"annotations": {"a": 1}}}, "NodeNames": []}', "metadata.annotations must be a map of strings"),
        (b'{"Pod": {"spec": 1}, "NodeNames": []}', "Pod: Value error, spec must be an object"),
        (b'{"Pod": {"spec": {"os": "linux"}}, "NodeNames": []}', "spec.os must be an object"),
    ],
)
@pytest.mark.parametrize("verb", ["/filter", "/prioritize"])
async def test_malformed_body_gets_400_with_a_message(
    client: httpx.AsyncClient, verb: str, body: bytes, fragment: str
) -> None:
    response = await client.post(verb, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    message = response.json()["message"]
    assert message.startswith("not an extender v1 ExtenderArgs body: ")
    assert fragment in message


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["Pod", "pod", "Nodes", "nodes", "NodeNames", "nodeNames", "items", "metadata",
                         "name", "annotations", NETWORKS_KEY, NODE_NETWORKS_KEY]),
        inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=80, deadline=None)
@given(body=JSON_VALUES | st.binary(max_size=64).map(lambda b: b.decode("latin-1")))
def test_no_body_makes_the_extender_answer_500(body: Any) -> None:
    content = body if isinstance(body, str) else json.dumps(body)
    application = app_mod.create_app(world(), Settings())

    async def call() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://x") as c:
            return [await c.post(verb, content=content) for verb in ("/filter", "/prioritize")]

    filtered, prioritized = asyncio.run(call())
    assert filtered.status_code in (200, 400) and prioritized.status_code == filtered.status_code
    if filtered.status_code == 200:
        assert filtered.json()["Error"] == ""  # a readable body never fails the decision


async def test_body_over_16_mib_is_refused_with_413_before_parsing(client: httpx.AsyncClient) -> None:
    # Valid JSON, so only the size can be the reason.
    filler = "x" * (16 * 1024 * 1024)
    body = json.dumps({"Pod": {"metadata": {"name": filler}}, "NodeNames": ["node-a"]}).encode()
    response = await client.post("/filter", content=body)
    assert response.status_code == 413
    assert "exceeds the limit of 16777216 bytes" in response.json()["message"]


async def test_chunked_body_over_the_limit_is_refused_with_413() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"Pod": {}, "NodeNames": ['
        for _ in range(100):
            yield b'"node-aaaaaaaaaaaaaaaaaaaaaa",'
        yield b'"last"]}'

    async with client_for(world(), Settings(max_body_bytes=1024)) as client:
        response = await client.post("/filter", content=chunks())
    assert response.status_code == 413


async def test_body_at_the_limit_is_accepted() -> None:
    body = json.dumps(by_names(pod(None), ["node-a"])).encode()
    async with client_for(world(), Settings(max_body_bytes=len(body))) as client:
        response = await client.post("/filter", content=body)
    assert response.status_code == 200


@pytest.mark.parametrize("metadata", [
    pytest.param({"name": "n1", "annotations": "x"}, id="annotations a string"),
    pytest.param({"name": "n1", "annotations": ["x"]}, id="annotations a list"),
])
async def test_a_node_list_with_a_node_of_the_wrong_shape_is_a_400(metadata):
    app = app_mod.create_app(ready_cache(), Settings())
    body = {"Pod": POD, "Nodes": {"items": [{"metadata": metadata}]}, "NodeNames": None}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
        resp = await client.post("/filter", json=body)
    assert resp.status_code == 400, resp.text
    assert "Nodes.items[0].metadata.annotations" in resp.json()["message"]


async def test_a_node_list_whose_nodes_have_no_annotations_still_passes():
    app = app_mod.create_app(ready_cache(), Settings())
    body = {"Pod": POD, "Nodes": {"items": [{"metadata": {"name": "n1", "annotations": None}},
                                            {"metadata": {"name": "n2"}}]}, "NodeNames": None}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
        resp = await client.post("/filter", json=body)
    assert resp.status_code == 200
    reply = resp.json()
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n1", "n2"]
    assert reply["Error"] == ""


# --- prioritize, health, readiness, metrics ---------------------------------------------------

async def test_prioritize_gives_every_candidate_a_neutral_score(client: httpx.AsyncClient) -> None:
    response = await client.post("/prioritize", json=by_names(pod([{"podNetworkName": "blue"}]), NAMES))
    assert response.json() == [{"Host": n, "Score": 0} for n in NAMES]
    response = await client.post("/prioritize", json=by_nodes(pod(None), [node("node-q")]))
    assert response.json() == [{"Host": "node-q", "Score": 0}]


async def test_readyz_turns_ready_once_the_cache_is_synced() -> None:
    c = world(synced=False)
    async with client_for(c) as client:
        assert (await client.get("/healthz")).status_code == 200
        before = await client.get("/readyz")
        c.mark_synced()
        after = await client.get("/readyz")
    assert before.status_code == 503 and "not synced" in before.text
    assert after.status_code == 200


async def test_metrics_count_requests_per_verb_and_report_cache_sizes(client: httpx.AsyncClient) -> None:
    # Sent twice by `filter_`: read the long way, then the short way; both count alike.
    await filter_(client, by_names(pod([{"podNetworkName": "blue"}]), NAMES))
    await client.post("/prioritize", json=by_names(pod(None), NAMES))
    await client.post("/filter", content=b"{")
    response = await client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'podnetwork_extender_requests_total{code="200",verb="filter"} 2.0' in text
    assert 'podnetwork_extender_requests_total{code="400",verb="filter"} 1.0' in text
    assert 'podnetwork_extender_requests_total{code="200",verb="prioritize"} 1.0' in text
    assert 'podnetwork_extender_request_duration_seconds_count{verb="filter"} 2.0' in text
    assert 'podnetwork_extender_request_duration_seconds_bucket{le="5.0",verb="filter"} 2.0' in text
    assert 'podnetwork_extender_filtered_nodes_total{outcome="passed"} 4.0' in text
    assert 'podnetwork_extender_filtered_nodes_total{outcome="failed"} 2.0' in text
    assert 'podnetwork_extender_cache_objects{kind="PodNetwork"} 4.0' in text
    assert 'podnetwork_extender_cache_objects{kind="PodNetworkAttachment"} 4.0' in text
    assert 'podnetwork_extender_cache_objects{kind="Node"} 3.0' in text
    assert "podnetwork_extender_cache_synced 1.0" in text


async def test_baseline_endpoint_exists_only_when_asked_for(client: httpx.AsyncClient) -> None:
    body = by_names(pod([{"podNetworkName": "ghost"}]), NAMES)
    assert (await client.post("/baseline/filter", json=body)).status_code == 404
    async with client_for(world(), Settings(baseline_endpoint=True)) as with_baseline:
        reply = (await with_baseline.post("/baseline/filter", json=body)).json()
    assert reply["NodeNames"] == NAMES and set(reply) == REPLY_KEYS


# --- a real server on loopback ----------------------------------------------------------------

async def test_uvicorn_on_loopback_serves_the_same_answers() -> None:
    config = uvicorn.Config(app_mod.create_app(world(), Settings()), host="127.0.0.1", port=0,
                            log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn stopped before it started"
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/readyz")).status_code == 200
            response = await client.post("/filter", content=FILTER_BY_NAMES,
                                         headers={"Content-Type": "application/json"})
            assert response.status_code == 200
            assert response.json()["NodeNames"] == ["node-a", "node-c"]
            assert response.json()["FailedNodes"] == {"node-b": 'podnetwork "blue" is not available on this node'}
            too_big = await client.post("/filter", content=b" " * (16 * 1024 * 1024 + 1))
            assert too_big.status_code == 413
    finally:
        server.should_exit = True
        await task
