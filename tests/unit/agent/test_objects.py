"""Where the agent reads its objects: the in-memory source, and the Kubernetes API, whose
failures other than 404 are CNI errors that say what failed.

A throttled (429) or failing (5xx) API server, a refused connection and a request
that times out are transient: CNI well-known error 11, "try again later", with the
object and the API's answer named. 404 stays `objects.NotFound`. The API server here
is a real HTTP server on loopback that answers the agent's client as scripted.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from bridge.agent.daemon import agent
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube import objects
from tests.unit.hostile_api_support import HostileApi, ok
from tests.unit.ports_support import free_port


class Scripted(BaseHTTPRequestHandler):
    """Answers every request with the server's `status` (and waits `delay` seconds first)."""

    server: ScriptedServer

    def _answer(self) -> None:
        time.sleep(self.server.delay)
        status = self.server.status
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                           "message": self.server.message or f"scripted answer {status}"}).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (timeout test)

    do_GET = do_PATCH = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True
    status = 200
    delay = 0.0
    message = ""


@pytest.fixture()
def api() -> Iterator[ScriptedServer]:
    server = ScriptedServer(("127.0.0.1", 0), Scripted)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def kubeconfig(tmp_path: Path, url: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }))
    return str(path)


async def _source(tmp_path: Path, url: str, **kwargs: float) -> objects.KubernetesObjects:
    return await asyncio.to_thread(objects.KubernetesObjects, kubeconfig(tmp_path, url), **kwargs)


@pytest.mark.parametrize("status", [429, 500, 503, 504])
async def test_a_throttled_or_failing_api_server_is_try_again_later_naming_the_object(
    tmp_path: Path, api: ScriptedServer, status: int
) -> None:
    api.status = status
    source = await _source(tmp_path, f"http://127.0.0.1:{api.server_address[1]}")
    try:
        with pytest.raises(CNIError) as caught:
            await source.get_nad("ns", "blue")
        assert caught.value.code == ErrorCode.TRY_AGAIN_LATER == 11
        assert "NetworkAttachmentDefinition ns/blue" in str(caught.value)
        assert str(status) in str(caught.value)
        with pytest.raises(CNIError) as caught:
            await source.patch_pod_annotations("ns", "web", {"a": "b"})
        assert caught.value.code == 11 and "Pod ns/web" in str(caught.value)
    finally:
        await source.close()


async def test_404_is_still_not_found(tmp_path: Path, api: ScriptedServer) -> None:
    api.status = 404
    source = await _source(tmp_path, f"http://127.0.0.1:{api.server_address[1]}")
    try:
        with pytest.raises(objects.NotFound):
            await source.get_podnetwork("default")
    finally:
        await source.close()


async def test_a_refused_connection_is_try_again_later(tmp_path: Path) -> None:
    port = free_port()  # a loopback port nothing listens on
    source = await _source(tmp_path, f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(CNIError) as caught:
            await source.get_pod("ns", "web")
        assert caught.value.code == 11
        assert "Pod ns/web" in str(caught.value)
    finally:
        await source.close()


async def test_an_api_server_that_does_not_answer_in_time_is_try_again_later(tmp_path: Path, api: ScriptedServer) -> None:
    api.delay = 2.0
    source = await _source(tmp_path, f"http://127.0.0.1:{api.server_address[1]}", request_timeout=0.3)
    try:
        # The server answers the pod after its delay: only the agent's own timeout makes this an error.
        with pytest.raises(CNIError) as caught:
            await source.get_pod("ns", "web")
        assert caught.value.code == 11
        assert "Pod ns/web" in str(caught.value) and "time" in str(caught.value).lower()
    finally:
        await source.close()


async def test_a_forbidden_read_is_a_clear_error_naming_the_object_not_an_internal_one(tmp_path: Path, api: ScriptedServer) -> None:
    api.status = 403
    source = await _source(tmp_path, f"http://127.0.0.1:{api.server_address[1]}")
    try:
        with pytest.raises(CNIError) as caught:
            await source.get_attachment("ns", "a1")
        assert caught.value.code == ErrorCode.IO_FAILURE
        assert "PodNetworkAttachment ns/a1" in str(caught.value) and "403" in str(caught.value)
    finally:
        await source.close()


@pytest.mark.parametrize(("status", "message"), [
    # kube-apiserver's answer to a merge patch whose metadata.uid is not the pod's (an update
    # where the UID is immutable), and its precondition wording (updates and deletes).
    (422, 'Pod "web" is invalid: metadata.uid: Invalid value: "uid-1": field is immutable'),
    (409, "Operation cannot be fulfilled on pods \"web\": Precondition failed: UID in precondition: uid-1, "
          "UID in object meta: uid-2"),
])
async def test_a_patch_refused_for_another_uid_means_the_pod_was_replaced(
    tmp_path: Path, api: ScriptedServer, status: int, message: str
) -> None:
    api.status, api.message = status, message
    source = await _source(tmp_path, f"http://127.0.0.1:{api.server_address[1]}")
    try:
        with pytest.raises(objects.Replaced, match="Pod ns/web is another one now") as caught:
            await source.patch_pod_annotations("ns", "web", {"a": "b"}, uid="uid-1")
        assert isinstance(caught.value, objects.NotFound), "callers that drop a write for a gone pod drop it"
        # Without a UID in the patch, the same answers are what they say: errors.
        with pytest.raises(CNIError):
            await source.patch_pod_annotations("ns", "web", {"a": "b"})
    finally:
        await source.close()


async def test_a_conflict_that_is_not_about_the_uid_stays_an_error(tmp_path: Path, api: ScriptedServer) -> None:
    api.status, api.message = 409, "the object has been modified; please apply your changes to the latest version"
    source = await _source(tmp_path, f"http://127.0.0.1:{api.server_address[1]}")
    try:
        with pytest.raises(CNIError) as caught:
            await source.patch_pod_annotations("ns", "web", {"a": "b"}, uid="uid-1")
        assert not isinstance(caught.value, objects.NotFound)
    finally:
        await source.close()


async def test_memory_objects_patch_only_the_pod_of_the_given_uid() -> None:
    objs = objects.MemoryObjects([{"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "uid-2"}}])
    with pytest.raises(objects.Replaced, match=r"Pod ns/p is another one now \(UID uid-2, not uid-1\)"):
        await objs.patch_pod_annotations("ns", "p", {"a": "1"}, uid="uid-1")
    await objs.patch_pod_annotations("ns", "p", {"a": "1"}, uid="uid-2")
    assert (await objs.get_pod("ns", "p")).metadata.annotations == {"a": "1"}


async def test_memory_objects_merge_patch_annotations_and_report_missing_objects() -> None:
    objs = objects.MemoryObjects([{"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "annotations": {"a": "1", "b": "2"}}}])
    await objs.patch_pod_annotations("ns", "p", {"a": None, "c": "3"})
    assert (await objs.get_pod("ns", "p")).metadata.annotations == {"b": "2", "c": "3"}
    with pytest.raises(objects.NotFound, match="Pod ns/q not found"):
        await objs.patch_pod_annotations("ns", "q", {"a": "1"})
    with pytest.raises(objects.NotFound):
        await objs.get_podnetwork("default")


async def test_the_object_source_returns_typed_objects_and_refuses_what_does_not_fit() -> None:
    objs = objects.MemoryObjects([
        {"kind": "NetworkAttachmentDefinition", "metadata": {"name": "blue", "namespace": "ns"},
         "spec": {"config": '{"type": "bridge"}'}},
        {"kind": "NetworkAttachmentDefinition", "metadata": {"name": "odd", "namespace": "ns"},
         "spec": {"config": {"type": "bridge"}}},
        {"kind": "PodNetworkAttachment", "metadata": {"name": "a1", "namespace": "ns"},
         "spec": {"podNetworkName": "blue", "colour": "red"}},
    ])
    assert (await objs.get_nad("ns", "blue")).spec.config == '{"type": "bridge"}'
    with pytest.raises(CNIError) as caught:
        await objs.get_nad("ns", "odd")
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert caught.value.msg == "NetworkAttachmentDefinition ns/odd does not fit its schema"
    assert "spec.config: Input should be a valid string" in caught.value.details
    with pytest.raises(CNIError, match=r"PodNetworkAttachment ns/a1 does not fit its schema: spec\.colour"):
        await objs.get_attachment("ns", "a1")


# --- an API server that answers what no API server sends -------------------------------------

MALFORMED = {
    "an oversized header line": [b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 100_000 + b"\r\n\r\n{}"],
    "chunk size zz": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"],
    "a negative Content-Length": [b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n{}"],
    "JSON nested 200,000 deep": [ok(b"[" * 200_000 + b"]" * 200_000)],
    "a body that is not an object": [ok(b"[1,2,3]")],
    "an object that is not the pod": [ok(b"{}")],
}


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_malformed_answer_is_try_again_later_naming_the_object(tmp_path: Path, case: str) -> None:
    server = HostileApi(lambda line: MALFORMED[case])
    source = await _source(tmp_path, server.url)
    try:
        with pytest.raises(CNIError) as caught:
            await source.get_pod("ns", "web")
    finally:
        await source.close()
        server.close()
    assert caught.value.code == ErrorCode.TRY_AGAIN_LATER == 11
    assert caught.value.msg == "cannot read Pod ns/web now: the API server's answer is malformed"
    assert caught.value.details and len(caught.value.details) <= 500


async def test_an_add_whose_pod_is_answered_as_a_list_fails_with_11_and_attaches_nothing(tmp_path: Path) -> None:
    server = HostileApi(lambda line: [ok(b"[1,2,3]")])
    source = await _source(tmp_path, server.url)
    ran: list[str] = []

    class Recording:
        """Answers as the bridge plugin would: an ADD that reached it would succeed."""

        async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float
                      ) -> tuple[int, bytes, bytes]:
            ran.append(plugin.name)
            result = {"cniVersion": "1.0.0", "interfaces": [{"name": env["CNI_IFNAME"], "sandbox": env["CNI_NETNS"]}],
                      "ips": [{"address": "10.9.0.2/24", "interface": 0}]}
            return 0, json.dumps(result).encode(), b""

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bridge").write_text("#!/bin/sh\nexit 1\n")  # found by the plan; run by `Recording` only
    (bin_dir / "bridge").chmod(0o755)
    config = agent.AgentConfig(socket_path=tmp_path / "agent.sock", cache_dir=tmp_path / "cache", bin_dirs=(bin_dir,),
                               conf_dir=tmp_path / "net.d", patch_status=False, watch_addresses=False,
                               default_network={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"})
    the_agent = agent.Agent(source, config, executor=Recording())
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
           "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web"}
    try:
        with pytest.raises(CNIError) as caught:
            await the_agent.handle(env, b'{"cniVersion": "1.0.0", "name": "multinetwork", "type": "multinetwork"}')
    finally:
        await source.close()
        server.close()
    assert caught.value.code == 11 and "the API server's answer is malformed" in caught.value.msg
    assert "not an object" in caught.value.details
    assert ran == [], "no plugin ran"
