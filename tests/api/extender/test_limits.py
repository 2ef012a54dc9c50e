"""The extender's limits, over real HTTP: what it refuses, how, and the memory it keeps.

Items of the hardening issue: a lone surrogate in a pod's annotation gave HTTP 500
(the reply could not be encoded); node offers were memoized by their full text, so
distinct 256 KiB node annotations held gigabytes. The body limit is checked on the
wire: a lying Content-Length, a chunked body that never ends.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import kmock
import pytest

from scheduler_plugin import app as app_mod
from scheduler_plugin.settings import Settings
from tests.api.extender_support import (
    NODE_NETWORKS,
    by_names,
    by_nodes,
    declare_extender_resources,
    extender_process,
    node,
    pod,
    podnetwork,
    rss_bytes,
    served,
    world,
)

PN = "multinetwork.x-k8s.io/v1alpha1/podnetworks"
MiB = 1024 * 1024
RFC1123 = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
           "and must start and end with an alphanumeric character")
LIST_EXAMPLE = 'a JSON list of PodNetwork names such as ["dataplane"]'


@pytest.fixture(scope="module")
def extender_url() -> Iterator[str]:
    with served(app_mod.create_app(world(), Settings())) as url:
        yield url


def filter_over_http(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST /filter with surrogates written as \\udXXX escapes, as JSON allows; the reply must be UTF-8 JSON."""
    response = httpx.post(f"{url}/filter", content=json.dumps(body, ensure_ascii=True), timeout=60)
    assert response.status_code == 200, response.text[:500]
    reply: dict[str, Any] = json.loads(response.content.decode("utf-8"))
    assert reply["Error"] == ""
    return reply


def reasons(reply: dict[str, Any]) -> set[str]:
    return {*reply["FailedNodes"].values(), *reply["FailedAndUnresolvableNodes"].values()}


def both_shapes(networks: Any, node_offers: Any = None) -> list[dict[str, Any]]:
    """The same pod sent with NodeNames (the cache's node-a) and with Nodes (a node carrying `node_offers`)."""
    the_pod = pod(networks if isinstance(networks, str) else json.dumps(networks, ensure_ascii=True))
    return [by_names(the_pod, ["node-a"]), by_nodes(the_pod, [node("node-a", node_offers)])]


async def test_distinct_large_pod_fields_do_not_pile_up_in_memory(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    # The decision remembers its verdict on a pod's networks per snapshot, keyed by the
    # fields it reads: the namespace and spec.os were kept whatever their size.
    declare_extender_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")

    def body(request: int) -> bytes:
        the_pod = pod([{"podNetworkName": "blue"}])
        padding = f"{request}-" + "x" * (12 * MiB)
        if request % 2:
            the_pod["metadata"]["namespace"] = padding
        else:
            the_pod["spec"]["os"] = {"name": "linux", "padding": padding}
        return json.dumps(by_names(the_pod, ["node-a"])).encode()

    async with extender_process(kmock, tmp_path) as (proc, client):
        assert (await client.post("/filter", content=body(0))).status_code == 200
        before, _ = rss_bytes(proc.pid)
        for request in range(1, 21):
            response = await client.post("/filter", content=body(request))
            assert response.status_code == 200, response.text[:500]
            assert response.json()["FailedNodes"] == {"node-a": "node is not yet known to the podnetwork scheduler extender"}
        after, peak = rss_bytes(proc.pid)
    print(f"RSS before {before / MiB:.0f} MiB, after {after / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB")
    assert after - before < 128 * MiB
    assert peak - before < 256 * MiB


# --- lone surrogates -------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("networks", "expected"),
    [
        ([{"podNetworkName": "\ud800"}],
         f'spec.networks[0].podNetworkName: Invalid value: "\\ud800": {RFC1123}'),
        ([{"podNetworkAttachmentName": "fast-\udfff"}],
         f'spec.networks[0].podNetworkAttachmentName: Invalid value: "fast-\\udfff": {RFC1123}'),
        ([{"podNetworkName": "blue", "\udbff": 1}],
         'spec.networks[0].\\udbff: Unsupported value: "\\udbff": unknown field; known fields are '
         "interfaceName, isDefaultGW4, isDefaultGW6, podNetworkAttachmentName, podNetworkName"),
    ],
)
def test_a_lone_surrogate_in_the_pods_networks_is_reported_not_a_500(
    extender_url: str, networks: list[dict[str, Any]], expected: str
) -> None:
    # The annotation's own JSON carries the \\ud800 escape; decoded, it names no character,
    # and the message that quotes it must still go out as UTF-8 (shown as the escape).
    for body in both_shapes(networks):
        reply = filter_over_http(extender_url, body)
        assert reply["FailedAndUnresolvableNodes"] == {"node-a": expected}


def test_a_lone_surrogate_in_a_nodes_offer_is_a_name_like_any_other(extender_url: str) -> None:
    reply = filter_over_http(extender_url, both_shapes([{"podNetworkName": "blue"}], ["\ud800", "blue"])[1])
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["node-a"]
    reply = filter_over_http(extender_url, both_shapes([{"podNetworkName": "blue"}], ["\ud800"])[1])
    assert reply["FailedNodes"] == {"node-a": 'podnetwork "blue" is not available on this node'}


def test_a_lone_surrogate_escape_in_the_body_itself_is_a_clear_400(extender_url: str) -> None:
    body = b'{"Pod": {"metadata": {"name": "\\ud800"}}, "NodeNames": ["node-a"]}'
    response = httpx.post(f"{extender_url}/filter", content=body)
    assert response.status_code == 400
    assert response.json()["message"] == (
        "not an extender v1 ExtenderArgs body: Invalid JSON: unexpected end of hex escape at line 1 column 38"
        " (\\uD800-\\uDFFF escapes are halves of UTF-16 surrogate pairs: a high one, \\uD800-\\uDBFF,"
        " must be followed by a low one, \\uDC00-\\uDFFF)"
    )


# --- messages: clear, and never a long value echoed ------------------------------------------

@pytest.mark.parametrize(
    ("offers", "expected"),
    [
        ("blue,green", "is not valid JSON (Expecting value at line 1 column 1); expected " + LIST_EXAMPLE),
        ('["blue" "green"]', "is not valid JSON (Expecting ',' delimiter at line 1 column 9); expected " + LIST_EXAMPLE),
        ("[" * 100_000, "is not valid JSON (nested too deeply); expected " + LIST_EXAMPLE),
        ('{"blue": true}', f"must be {LIST_EXAMPLE}, not an object"),
        ('"blue"', f"must be {LIST_EXAMPLE}, not a string"),
        ('["blue", 7]', f"must be {LIST_EXAMPLE}; item 1 is a number"),
        ('["blue", ["green"]]', f"must be {LIST_EXAMPLE}; item 1 is a list"),
        ("x" * 256 * 1024, "is not valid JSON (Expecting value at line 1 column 1); expected " + LIST_EXAMPLE),
    ],
)
def test_a_malformed_node_annotation_says_what_is_wrong_without_quoting_it(offers: str, expected: str) -> None:
    message = f"node annotation {NODE_NETWORKS} {expected}"
    c = world()
    c.upsert({**node("node-a", offers), "kind": "Node"})  # the watch delivered it
    with served(app_mod.create_app(c, Settings())) as url:
        for body in both_shapes([{"podNetworkName": "blue"}], offers):
            assert filter_over_http(url, body)["FailedNodes"] == {"node-a": message}


def test_long_values_in_the_pods_networks_are_cut_short(extender_url: str) -> None:
    long_name = "A" * 200_000
    for body in both_shapes([{"podNetworkName": long_name}], ["blue"]):
        assert reasons(filter_over_http(extender_url, body)) == {
            "spec.networks[0].podNetworkName: Too long: may not be more than 253 characters; "
            f'spec.networks[0].podNetworkName: Invalid value: "{"A" * 60}...": {RFC1123}'
        }
    for body in both_shapes([[7] * 50_000], ["blue"]):
        assert reasons(filter_over_http(extender_url, body)) == {
            f'spec.networks[0]: Invalid value: "{json.dumps([7] * 50_000)[:60]}...": '
            'must be an object such as {"podNetworkName": "default"}'
        }
    # An unknown key is both the end of the path (cut at 120 characters) and the value.
    for body in both_shapes([{"podNetworkName": "blue", "x" * 100_000: 1}], ["blue"]):
        assert reasons(filter_over_http(extender_url, body)) == {
            f'spec.networks[0].{"x" * 103}...: Unsupported value: "{"x" * 60}...": unknown field; known fields '
            "are interfaceName, isDefaultGW4, isDefaultGW6, podNetworkAttachmentName, podNetworkName"
        }


def test_many_problems_are_counted_not_all_listed(extender_url: str) -> None:
    one = 'Invalid value: 1: must be an object such as {"podNetworkName": "default"}'
    for body in both_shapes([1] * 40_000, ["blue"]):
        reply = filter_over_http(extender_url, body)
        assert reasons(reply) == {"; ".join(f"spec.networks[{i}]: {one}" for i in range(5)) + "; and 39995 more"}

# --- memory ----------------------------------------------------------------------------------

NODES_PER_REQUEST = 50
ANNOTATION_CHARS = 256 * 1024  # the API server's limit for all of a node's annotations together


def offers_text(request: int, index: int) -> str:
    """A node's podnetworks annotation of about 256 KiB, unlike any other node's; even nodes offer blue."""
    names = ["blue"] if index % 2 == 0 else []
    size = 2
    while size < ANNOTATION_CHARS - 64:
        names.append(f"r{request}-n{index}-net{len(names)}")
        size += len(names[-1]) + 3
    return json.dumps(names, separators=(",", ":"))


def nodelist_body(request: int) -> bytes:
    nodes = [
        {"metadata": {"name": f"node-{request}-{index}", "annotations": {NODE_NETWORKS: offers_text(request, index)}}}
        for index in range(NODES_PER_REQUEST)
    ]
    return json.dumps(by_nodes(pod([{"podNetworkName": "blue"}]), nodes)).encode()


async def test_distinct_large_node_annotations_do_not_pile_up_in_memory(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    declare_extender_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    async with extender_process(kmock, tmp_path) as (proc, client):
        first = await client.post("/filter", content=nodelist_body(0))  # imports and first-use allocations
        assert first.status_code == 200
        before, _ = rss_bytes(proc.pid)
        for request in range(1, 21):
            body = nodelist_body(request)
            assert len(body) < 16 * MiB
            response = await client.post("/filter", content=body)
            assert response.status_code == 200, response.text[:500]
            reply = response.json()
            assert reply["Error"] == ""
            passed = [n["metadata"]["name"] for n in reply["Nodes"]["items"]]
            assert passed == [f"node-{request}-{i}" for i in range(0, NODES_PER_REQUEST, 2)]
            assert set(reply["FailedNodes"].values()) == {'podnetwork "blue" is not available on this node'}
        after, peak = rss_bytes(proc.pid)
    print(f"RSS before {before / MiB:.0f} MiB, after {after / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB")
    assert after - before < 128 * MiB
    assert peak - before < 256 * MiB


# --- the body limit, on the wire -------------------------------------------------------------

SMALL_LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def small_limit_port() -> Iterator[int]:
    with served(app_mod.create_app(world(), Settings(max_body_bytes=SMALL_LIMIT))) as url:
        port = urlsplit(url).port
        assert port is not None
        yield port


def first_response(port: int, *parts: bytes) -> tuple[int, dict[str, Any]]:
    """Send `parts` as they are on a new connection, then read one response: status and JSON body.

    The connection stays open while reading: a server that waited for the rest of the
    body before answering would never answer (the socket's timeout then fails the test).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        for part in parts:
            conn.sendall(part)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = conn.recv(65536)
            assert chunk, f"connection closed without a response: {received!r}"
            received += chunk
        head, _, content = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        while len(content) < length:
            chunk = conn.recv(65536)
            assert chunk, "connection closed in the middle of the response"
            content += chunk
    return int(lines[0].split()[1]), json.loads(content[:length])


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_sent(small_limit_port: int) -> None:
    head = f"POST /filter HTTP/1.1\r\nHost: extender\r\nContent-Length: {16 * MiB}\r\n\r\n".encode()
    status, reply = first_response(small_limit_port, head, b'{"Pod": {')  # and nothing more
    assert status == 413
    assert reply == {"message": f"request body of {16 * MiB} bytes exceeds the limit of {SMALL_LIMIT} bytes "
                                "(--max-body-bytes)"}


def test_a_chunked_body_is_refused_once_it_passes_the_limit_not_at_its_end(small_limit_port: int) -> None:
    head = b"POST /filter HTTP/1.1\r\nHost: extender\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"2000\r\n" + b" " * 0x2000 + b"\r\n"
    chunks = [chunk] * (SMALL_LIMIT // 0x2000 + 1)  # one past the limit, and no last chunk
    status, reply = first_response(small_limit_port, head, *chunks)
    assert status == 413
    assert reply == {"message": f"request body exceeds the limit of {SMALL_LIMIT} bytes (--max-body-bytes)"}


def test_a_chunked_body_that_also_declares_a_small_length_is_still_counted(small_limit_port: int) -> None:
    head = b"POST /filter HTTP/1.1\r\nHost: extender\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"2000\r\n" + b" " * 0x2000 + b"\r\n"
    status, _ = first_response(small_limit_port, head, *[chunk] * (SMALL_LIMIT // 0x2000 + 1))
    assert status == 413


def test_a_content_length_shorter_than_the_body_ends_the_body_there(small_limit_port: int) -> None:
    body = json.dumps(by_names(pod(None), ["node-a"])).encode()
    head = f"POST /filter HTTP/1.1\r\nHost: extender\r\nContent-Length: {len(body) // 2}\r\n\r\n".encode()
    # The second half is not this request's body: it is never read as part of it. (Only a
    # little is sent past the length: the server answers the rest as a bad request and
    # closes, and a close with bytes unread would reset the connection before we read.)
    status, reply = first_response(small_limit_port, head + body)
    assert status == 400
    assert reply["message"].startswith("not an extender v1 ExtenderArgs body: Invalid JSON: EOF while parsing")
    status, reply = first_response(small_limit_port, head.replace(b"%d" % (len(body) // 2), b"%d" % len(body)) + body)
    assert status == 200 and reply["NodeNames"] == ["node-a"]
