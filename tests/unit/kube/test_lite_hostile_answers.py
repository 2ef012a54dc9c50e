"""`podnetwork.kube.lite` (the CNI agent's API client) against an API server on loopback that
answers what a broken or hostile server, or a proxy in front of one, can send: every such answer
is a `Malformed` error (transient, with the limit it broke), read within bounded memory
(tracemalloc), never an exception of the parser and never a success with a made-up object."""

from __future__ import annotations

import asyncio
import itertools
import json
import tracemalloc
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from podnetwork.kube import credentials, lite
from tests.unit.hostile_api_support import (
    HostileApi,
    chunk,
    chunked_head,
    endless,
    endless_headers,
    listing,
    ok,
    pod,
    query_of,
)

MiB = 1024 * 1024
POD_PATH = lite.object_path("", "v1", "pods", "web", "ns")


def _then(*parts: Iterable[bytes] | bytes) -> Iterator[bytes]:
    return itertools.chain.from_iterable([p] if isinstance(p, bytes) else p for p in parts)


# (what the server sends, words of the error, the most the client may hold meanwhile)
HOSTILE = {
    "endless distinct headers": (lambda: endless_headers(), "a head or chunk line of more than 65536 bytes", 2 * MiB),
    "one endless header line": (lambda: _then(b"HTTP/1.1 200 OK\r\nX-Long: ", endless(b"a")),
                                "a head or chunk line of more than 65536 bytes", 2 * MiB),
    "a 100 kB header line in one piece": (
        lambda: [b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 100_000 + b"\r\nContent-Length: 2\r\n\r\n{}"],
        "a head or chunk line of more than 65536 bytes", 2 * MiB),
    "one hundred and one headers": (
        lambda: [b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101))
                 + b"Content-Length: 2\r\n\r\n{}"], "102 header fields, more than 100", 2 * MiB),
    "1-byte chunks": (lambda: _then(chunked_head(), endless(b"1\r\n \r\n")), "bytes of framing for", 2 * MiB),
    "chunk size zz": (lambda: [chunked_head(), b"zz\r\n{}\r\n0\r\n\r\n"], "not HTTP/1.1: illegal chunk header", 2 * MiB),
    "a negative Content-Length": (lambda: [b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n{}"],
                                  "not HTTP/1.1: bad Content-Length", 2 * MiB),
    "status 2000": (lambda: [b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}"], "not HTTP/1.1: illegal status line",
                    2 * MiB),
    "not HTTP at all": (lambda: [b"SSH-2.0-OpenSSH_9.6\r\n\r\n"], "not HTTP/1.1", 2 * MiB),
    "a Content-Length over 16 MiB": (lambda: _then(b"HTTP/1.1 200 OK\r\nContent-Length: 17000000\r\n\r\n",
                                                   endless(b" ")), "a body of 17000000 bytes, more than 16777216",
                                     2 * MiB),
    "an endless chunked body": (lambda: _then(chunked_head(), endless(chunk(b" " * 65000))),
                                "a body of more than 16777216 bytes", 24 * MiB),
    "JSON nested 200,000 deep": (lambda: [ok(b"[" * 200_000 + b"]" * 200_000)], "the body is not JSON", 8 * MiB),
    "a JSON list, not an object": (lambda: [ok(b"[1, 2, 3]")], "the body is a JSON list, not an object", 2 * MiB),
    "JSON null": (lambda: [ok(b"null")], "the body is JSON null, not an object", 2 * MiB),
    "not JSON": (lambda: [ok(b"<html>proxy error</html>")], "the body is not JSON", 2 * MiB),
}


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_a_hostile_answer_to_a_get_is_malformed_transient_and_read_in_bounded_memory(case: str) -> None:
    sends, words, bound = HOSTILE[case]
    server = HostileApi(lambda line: sends())
    api = lite.LiteApi(credentials.Credentials(server=server.url), timeout=20)
    tracemalloc.start()
    try:
        with pytest.raises(lite.ApiError) as caught:
            await api.get(POD_PATH)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await api.close()
        server.close()
    assert type(caught.value).__name__ == "Malformed", caught.value
    assert caught.value.transient and caught.value.status == 0
    assert str(caught.value).startswith(f"GET {POD_PATH}: the API server's answer is malformed: ")
    assert words in str(caught.value)
    assert len(str(caught.value)) < 400, "the message quotes the answer, not all of it"
    assert peak < bound, f"held {peak / MiB:.1f} MiB"


async def test_a_watch_line_without_a_line_end_is_malformed_past_4_mib_in_bounded_memory() -> None:
    def sends(line: str) -> Iterable[bytes]:
        if "watch=true" in line:
            return _then(chunked_head(), b"%x\r\n%s\r\n" % (17, b'{"type": "ADDED",'), endless(chunk(b"a" * 65000)))
        return [ok(listing([]))]

    server = HostileApi(sends)
    api = lite.LiteApi(credentials.Credentials(server=server.url), timeout=20)
    tracemalloc.start()
    try:
        with pytest.raises(lite.ApiError) as caught:
            async with asyncio.timeout(60):
                async for _ in api.watch("/api/v1/pods", "1"):
                    pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await api.close()
        server.close()
    assert "a watch event of more than 4194304 bytes without a line end" in str(caught.value)
    assert caught.value.transient
    assert peak < 16 * MiB, f"held {peak / MiB:.1f} MiB"


async def test_watch_events_split_across_chunks_are_read_whole_and_a_non_object_event_is_malformed() -> None:
    first = json.dumps({"type": "ADDED", "object": pod("a")}).encode() + b"\n"
    second = json.dumps({"type": "DELETED", "object": pod("b")}).encode() + b"\n"

    def sends(line: str) -> Iterable[bytes]:
        whole = first + second + b"[1]\n"
        return [chunked_head(), chunk(whole[:10]), chunk(whole[10:len(first) + 5]), chunk(whole[len(first) + 5:]),
                b"0\r\n\r\n"]

    server = HostileApi(sends)
    api = lite.LiteApi(credentials.Credentials(server=server.url))
    seen: list[Any] = []
    try:
        with pytest.raises(lite.Malformed, match="a watch event is a JSON list, not an object"):
            async for event in api.watch("/api/v1/pods", "1"):
                seen.append((event["type"], event["object"]["metadata"]["name"]))
    finally:
        await api.close()
        server.close()
    assert seen == [("ADDED", "a"), ("DELETED", "b")]


async def test_an_answer_that_is_not_an_object_is_refused_on_a_kept_alive_connection_too() -> None:
    answers = iter([ok(json.dumps(pod()).encode(), close=False), ok(b"[1,2,3]", close=False),
                    ok(json.dumps(pod()).encode(), close=False)])
    server = HostileApi(lambda line: [next(answers)])
    api = lite.LiteApi(credentials.Credentials(server=server.url))
    try:
        assert (await api.get(POD_PATH))["metadata"]["name"] == "web"
        with pytest.raises(lite.Malformed):
            await api.get(POD_PATH)
        assert (await api.get(POD_PATH))["metadata"]["name"] == "web"
    finally:
        await api.close()
        server.close()
    assert len(server.requests) == 3


async def test_a_list_page_too_large_is_asked_again_in_smaller_pages_and_every_page_is_read() -> None:
    pods = [pod(f"p{i}") for i in range(40)]

    def sends(line: str) -> Iterable[bytes]:
        query = query_of(line)
        if "watch" in query:
            return [ok(b"")]
        limit = int(query["limit"][0])
        if limit > 40:  # as a page of large objects would be: refused from its Content-Length
            return [b"HTTP/1.1 200 OK\r\nContent-Length: 17000000\r\nConnection: close\r\n\r\n"]
        start = int(query.get("continue", ["0"])[0])
        page = pods[start:start + limit]
        token = str(start + limit) if start + limit < len(pods) else ""
        return [ok(listing(page, version="7", token=token))]

    server = HostileApi(sends)
    api = lite.LiteApi(credentials.Credentials(server=server.url))
    listed: list[list[dict[str, Any]]] = []
    task = asyncio.create_task(lite.list_and_watch(api, "/api/v1/pods", on_list=listed.append,
                                                   on_event=lambda kind, obj: None))
    try:
        for _ in range(200):
            if listed:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
        server.close()
    assert [obj["metadata"]["name"] for obj in listed[0]] == [f"p{i}" for i in range(40)]
    lists = [query_of(line) for line in server.requests if "watch=true" not in line]
    assert [(q["limit"][0], q.get("continue", [""])[0]) for q in lists[:4]] == [
        ("500", ""), ("125", ""), ("31", ""), ("31", "31")]
