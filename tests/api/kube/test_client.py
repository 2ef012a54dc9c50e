"""podnetwork.kube's clients over real HTTP: the operators' retries and write outcomes, a token
file read again after a 401, errors without a body, and list+watch re-listing after 410 Gone.

kmock's emulator (kube_emulator.Emulator: resourceVersion, 409 on stale patches, injected 503s)
serves the write tests; a scripted server on loopback serves what kmock cannot say.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from podnetwork.ground import constants
from podnetwork.ground.actions import Patch
from podnetwork.kube import client as kube
from podnetwork.kube import credentials, writes
from tests.api.kube_emulator import PN, Emulator, declare_resources, eventually, requests_to

BLUE = {"apiVersion": constants.API_VERSION, "kind": constants.PODNETWORK_KIND,
        "metadata": {"name": "blue", "resourceVersion": "1"}, "spec": {"enabled": True}}


def api_for(k: Any, backoffs: list[float]) -> kube.AsyncApi:
    return kube.AsyncApi(credentials.Credentials(server=str(k.url).rstrip("/")), backoffs=backoffs)


@pytest.mark.kmock(cls=Emulator)
async def test_a_write_that_fails_for_now_is_retried_with_the_backoffs(kmock: Emulator) -> None:
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = BLUE
    kmock.failures["/podnetworks/blue"] = 2  # two 503s, then the API server recovers
    api = api_for(kmock, [0, 0, 0])
    try:
        written = await writes.apply(api, Patch("PodNetwork", "blue", None, {"spec": {"x": 1}}))
    finally:
        await api.close()
    assert written.failure is None and written.body is not None and written.body["spec"]["x"] == 1
    assert len(requests_to(kmock, "PATCH", "/podnetworks/blue")) == 3


@pytest.mark.kmock(cls=Emulator)
async def test_a_write_that_keeps_failing_is_a_failure_to_retry_later(kmock: Emulator) -> None:
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = BLUE
    kmock.failures["/podnetworks/blue"] = 10
    api = api_for(kmock, [0, 0])
    try:
        written = await writes.apply(api, Patch("PodNetwork", "blue", None, {"spec": {"x": 1}}))
    finally:
        await api.close()
    assert written.body is None and written.retry and not written.gone
    assert isinstance(written.failure, kube.ApiError) and written.failure.status == 503
    assert len(requests_to(kmock, "PATCH", "/podnetworks/blue")) == 3  # the first try and two retries


@pytest.mark.kmock(cls=Emulator)
async def test_a_conflict_and_a_missing_object_are_answers_not_retried(kmock: Emulator) -> None:
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = {**BLUE, "metadata": {"name": "blue", "resourceVersion": "7"}}
    api = api_for(kmock, [0, 0])
    try:
        stale = {"metadata": {"resourceVersion": "6"}, "spec": {"x": 1}}
        conflict = await writes.apply(api, Patch("PodNetwork", "blue", None, stale))
        gone = await writes.apply(api, Patch("PodNetwork", "red", None, {"spec": {"x": 1}}))
    finally:
        await api.close()
    assert conflict.conflict and conflict.retry and conflict.body is None
    assert gone.gone and not gone.retry
    assert len(requests_to(kmock, "PATCH", "/podnetworks/blue")) == 1
    assert len(requests_to(kmock, "PATCH", "/podnetworks/red")) == 1


class Scripted(ThreadingHTTPServer):
    """A loopback server whose `answer(method, path, query, headers)` gives (status, headers, body)."""

    daemon_threads = True

    def __init__(self, answer: Callable[[str, str, dict[str, list[str]], Any], tuple[int, dict[str, str], bytes]]
                 ) -> None:
        self.answer = answer
        self.seen: list[tuple[str, str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                server.seen.append((self.command, self.path, self.headers.get("Authorization") or ""))
                status, headers, body = server.answer(self.command, url.path, parse_qs(url.query), self.headers)
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up on a quiet watch

            do_GET = do_PATCH = do_POST = _any

            def log_message(self, *_: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture()
def scripted() -> Iterator[Callable[..., Scripted]]:
    servers: list[Scripted] = []

    def start(answer: Any) -> Scripted:
        server = Scripted(answer)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


JSON = {"Content-Type": "application/json"}


def pod(name: str, version: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": version}}


async def test_an_error_without_a_body_is_an_api_error_naming_the_status(scripted: Any) -> None:
    server = scripted(lambda *_: (503, {}, b""))
    api = kube.AsyncApi(credentials.Credentials(server=server.url), backoffs=[])
    try:
        with pytest.raises(kube.ApiError) as caught:
            await api.get(kube.Node, "n1")
    finally:
        await api.close()
    assert caught.value.status == 503 and caught.value.transient
    assert "get Node n1: HTTP 503" in str(caught.value)


async def test_a_token_file_is_read_again_when_the_server_says_401(scripted: Any, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    accepted = ["Bearer one"]

    def answer(method: str, path: str, query: Any, headers: Any) -> tuple[int, dict[str, str], bytes]:
        if headers.get("Authorization") != accepted[0]:
            return 401, JSON, json.dumps({"kind": "Status", "code": 401, "message": "Unauthorized"}).encode()
        return 200, JSON, json.dumps(pod("n1", "1")).encode()

    server = scripted(answer)
    api = kube.AsyncApi(credentials.Credentials(server=server.url, token_file=str(token)), backoffs=[])
    try:
        await api.get(kube.Node, "n1")
        token.write_text("two")  # the kubelet rotated it, and the old one is no longer accepted
        accepted[0] = "Bearer two"
        got = await api.get(kube.Node, "n1")
    finally:
        await api.close()
    assert got["metadata"]["name"] == "n1"
    # The cached token until the 401, then the file once more.
    assert [auth for _, _, auth in server.seen] == ["Bearer one", "Bearer one", "Bearer two"]


async def test_list_and_watch_lists_again_after_410_gone(scripted: Any) -> None:
    state = {"lists": 0}

    def answer(method: str, path: str, query: dict[str, list[str]], headers: Any
               ) -> tuple[int, dict[str, str], bytes]:
        if "watch" not in query:
            state["lists"] += 1
            items = [pod("n1", "5")] if state["lists"] == 1 else [pod("n2", "9")]
            version = "5" if state["lists"] == 1 else "9"
            return 200, JSON, json.dumps({"kind": "NodeList", "metadata": {"resourceVersion": version},
                                          "items": items}).encode()
        if query.get("resourceVersion") == ["5"]:  # expired: the watch says 410 in its stream
            event = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                 "message": "too old resource version"}}
            return 200, JSON, (json.dumps(event) + "\n").encode()
        if query.get("resourceVersion") == ["9"]:
            event = {"type": "ADDED", "object": pod("n3", "10")}
            return 200, JSON, (json.dumps(event) + "\n").encode()
        threading.Event().wait(0.2)  # later watches stay quiet
        return 200, JSON, b""

    server = scripted(answer)
    api = kube.AsyncApi(credentials.Credentials(server=server.url), backoffs=[])
    listings: list[list[str]] = []
    events: list[tuple[str, str]] = []
    task = asyncio.create_task(kube.list_and_watch(
        api, kube.Node, on_list=lambda items: listings.append([i["metadata"]["name"] for i in items]),
        on_event=lambda kind, obj: events.append((kind, obj["metadata"]["name"])), retry_delay=0.05))
    try:
        await eventually(lambda: events == [("ADDED", "n3")])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
    assert listings == [["n1"], ["n2"]]  # the second listing replaced the first after the 410
    watches = [path for method, path, _ in server.seen if "watch=" in path]
    assert any("resourceVersion=5" in w for w in watches) and any("resourceVersion=9" in w for w in watches)


async def test_list_and_watch_sends_its_field_selector_on_the_listing_and_the_watch(scripted: Any) -> None:
    def answer(method: str, path: str, query: dict[str, list[str]], headers: Any
               ) -> tuple[int, dict[str, str], bytes]:
        if "watch" not in query:
            return 200, JSON, json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "5"},
                                          "items": [pod("p1", "5")]}).encode()
        threading.Event().wait(0.2)
        return 200, JSON, b""

    server = scripted(answer)
    api = kube.AsyncApi(credentials.Credentials(server=server.url), backoffs=[])
    listed: list[str] = []
    task = asyncio.create_task(kube.list_and_watch(
        api, kube.Pod, on_list=lambda items: listed.extend(i["metadata"]["name"] for i in items),
        on_event=lambda kind, obj: None, fields={"spec.nodeName": "node-a"}, retry_delay=0.05))
    try:
        await eventually(lambda: any("watch=" in p for _, p, _ in server.seen))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
    assert listed == ["p1"]
    paths = [path for _, path, _ in server.seen]
    assert paths and all("fieldSelector=spec.nodeName%3Dnode-a" in p for p in paths), paths
