"""`podnetwork.kube.lite`, the CNI agent's small client, against a loopback HTTP server: the
credentials' token rules, the API's errors, kept-alive connections the server closes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from podnetwork.kube import credentials, lite
from tests.api.kube.test_client import JSON, Scripted, scripted
from tests.unit.ports_support import free_port

__all__ = ["scripted"]  # the fixture, shared with the lightkube client's tests

POD_PATH = lite.object_path("", "v1", "pods", "web", "ns")


def pod() -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "ns"}}).encode()


def test_object_paths_are_the_apis_and_quote_what_they_carry() -> None:
    assert POD_PATH == "/api/v1/namespaces/ns/pods/web"
    assert lite.object_path("k8s.cni.cncf.io", "v1", "network-attachment-definitions", "a/b", "ns") == (
        "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/a%2Fb")
    assert lite.object_path("multinetwork.x-k8s.io", "v1alpha1", "podnetworks", "blue") == (
        "/apis/multinetwork.x-k8s.io/v1alpha1/podnetworks/blue")


async def test_a_token_file_is_read_again_when_the_server_says_401(scripted: Any, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    accepted = ["Bearer one"]

    def answer(method: str, path: str, query: Any, headers: Any) -> tuple[int, dict[str, str], bytes]:
        if headers.get("Authorization") != accepted[0]:
            return 401, JSON, json.dumps({"kind": "Status", "code": 401, "message": "Unauthorized"}).encode()
        return 200, JSON, pod()

    server: Scripted = scripted(answer)
    api = lite.LiteApi(credentials.Credentials(server=server.url, token_file=str(token)))
    try:
        await api.get(POD_PATH)
        token.write_text("two")  # rotated by the kubelet; the old one is refused from now on
        accepted[0] = "Bearer two"
        got = await api.get(POD_PATH)
    finally:
        await api.close()
    assert got["metadata"]["name"] == "web"
    assert [auth for _, _, auth in server.seen] == ["Bearer one", "Bearer one", "Bearer two"]


async def test_the_apis_refusals_are_errors_naming_status_reason_and_message(scripted: Any) -> None:
    answers = {
        "/api/v1/namespaces/ns/pods/gone": (404, {"kind": "Status", "reason": "NotFound", "message": "pods gone"}),
        "/api/v1/namespaces/ns/pods/busy": (503, {"kind": "Status", "reason": "ServiceUnavailable",
                                                  "message": "try again"}),
        "/api/v1/namespaces/ns/pods/no": (403, {"kind": "Status", "reason": "Forbidden", "message": "not you"}),
    }
    server: Scripted = scripted(lambda method, path, *_: (answers[path][0], JSON, json.dumps(answers[path][1]).encode()))
    api = lite.LiteApi(credentials.Credentials(server=server.url))
    try:
        with pytest.raises(lite.NotFound, match="pods gone"):
            await api.get("/api/v1/namespaces/ns/pods/gone")
        with pytest.raises(lite.ApiError) as busy:
            await api.get("/api/v1/namespaces/ns/pods/busy")
        with pytest.raises(lite.ApiError) as forbidden:
            await api.get("/api/v1/namespaces/ns/pods/no")
    finally:
        await api.close()
    assert busy.value.transient and busy.value.reason == "ServiceUnavailable"
    assert not forbidden.value.transient and str(forbidden.value) == "GET /api/v1/namespaces/ns/pods/no: HTTP 403: not you"


async def test_a_connection_the_server_closes_is_not_used_again_and_a_patch_is_a_merge_patch(scripted: Any) -> None:
    def answer(method: str, path: str, query: Any, headers: Any) -> tuple[int, dict[str, str], bytes]:
        return 200, {**JSON, "Connection": "close"}, pod()

    server: Scripted = scripted(answer)
    api = lite.LiteApi(credentials.Credentials(server=server.url))
    try:
        for _ in range(3):
            await api.get(POD_PATH)
        await api.merge_patch(POD_PATH, {"metadata": {"annotations": {"a": None}}})
    finally:
        await api.close()
    assert [method for method, _, _ in server.seen] == ["GET", "GET", "GET", "PATCH"]


async def test_a_server_that_does_not_answer_is_unreachable() -> None:
    port = free_port()  # a port nobody listens on
    api = lite.LiteApi(credentials.Credentials(server=f"http://127.0.0.1:{port}"), timeout=5)
    try:
        with pytest.raises(lite.Unreachable) as caught:
            await api.get(POD_PATH)
    finally:
        await api.close()
    assert caught.value.transient and caught.value.status == 0


def test_a_server_that_is_not_an_http_url_or_a_proxy_is_refused_with_the_reason() -> None:
    with pytest.raises(credentials.CredentialsError, match="is not an http"):
        lite.LiteApi(credentials.Credentials(server="ftp://x"))
    with pytest.raises(credentials.CredentialsError, match="proxy-url is not supported"):
        lite.LiteApi(credentials.Credentials(server="https://x", proxy_url="http://proxy:3128"))
