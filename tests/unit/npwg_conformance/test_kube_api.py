"""The harness's Kubernetes API over real HTTP on loopback: what a delegating plugin reads and writes.

GETs of pods and NADs (404 as a Status), the three PATCH types clients use for
network-status, PUT of the whole pod or of `status` with optimistic concurrency
(a stale resourceVersion is a 409 that changes nothing), in JSON or in Kubernetes'
protobuf as Multus's client-go sends it (an unreadable one a 400), a patch type it
does not speak refused with 415, and every change of a pod's annotations recorded in order.
The kubeconfig it writes is read by this project's own client.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.npwg.kubeapi import KubeApi
from podnetwork.kube import credentials

POD = "/api/v1/namespaces/ns/pods/web"
STATUS = "k8s.v1.cni.cncf.io/network-status"


@pytest.fixture
def api() -> Iterator[KubeApi]:
    with KubeApi() as server:
        server.put({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "annotations": {"a": "1"}}})
        server.put({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                    "metadata": {"name": "blue", "namespace": "ns", "uid": "u2"}, "spec": {"config": "{}"}})
        yield server


def call(api: KubeApi, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(api.url + path, data=data, method=method, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_gets_pods_and_nads_and_answers_404_with_a_status(api: KubeApi) -> None:
    assert call(api, "GET", POD)[1]["metadata"]["annotations"] == {"a": "1"}
    code, nad = call(api, "GET", "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/blue")
    assert (code, nad["spec"]) == (200, {"config": "{}"})
    code, status = call(api, "GET", "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/red")
    assert (code, status["kind"], status["reason"]) == (404, "Status", "NotFound")
    assert call(api, "GET", "/apis/multinetwork.x-k8s.io/v1alpha1/podnetworks/default")[0] == 404


@pytest.mark.parametrize("content_type", ["application/merge-patch+json", "application/strategic-merge-patch+json"])
def test_a_merge_patch_adds_the_status_and_keeps_other_annotations(api: KubeApi, content_type: str) -> None:
    code, pod = call(api, "PATCH", POD, {"metadata": {"annotations": {STATUS: "[]"}}}, content_type)
    assert code == 200 and pod["metadata"]["annotations"] == {"a": "1", STATUS: "[]"}
    [write] = api.writes("ns", "web")
    assert (write.method, write.content_type, write.annotations[STATUS]) == ("PATCH", content_type, "[]")


def test_a_json_patch_on_the_status_subresource_is_applied(api: KubeApi) -> None:
    ops = [{"op": "add", "path": f"/metadata/annotations/{STATUS.replace('/', '~1')}", "value": "[{}]"}]
    code, pod = call(api, "PATCH", POD + "/status", ops, "application/json-patch+json")
    assert code == 200 and pod["metadata"]["annotations"][STATUS] == "[{}]"
    assert api.writes("ns", "web")[0].path == POD + "/status"


def test_a_put_with_a_stale_resource_version_is_a_conflict_that_changes_nothing(api: KubeApi) -> None:
    pod = api.pod("ns", "web")
    fresh = json.loads(json.dumps(pod))
    fresh["metadata"]["annotations"][STATUS] = "[]"
    code, updated = call(api, "PUT", POD + "/status", fresh)
    assert code == 200 and updated["metadata"]["annotations"][STATUS] == "[]"
    pod["metadata"]["annotations"][STATUS] = "stale"
    code, status = call(api, "PUT", POD + "/status", pod)
    assert (code, status["reason"]) == (409, "Conflict")
    assert api.pod("ns", "web")["metadata"]["annotations"][STATUS] == "[]"
    assert [w.method for w in api.writes("ns", "web")] == ["PUT"]


def test_an_unknown_patch_type_and_non_string_annotations_are_refused(api: KubeApi) -> None:
    assert call(api, "PATCH", POD, {"metadata": {}}, "application/apply-patch+yaml")[0] == 415
    code, status = call(api, "PATCH", POD, {"metadata": {"annotations": {STATUS: [1]}}}, "application/merge-patch+json")
    assert (code, status["reason"]) == (422, "Invalid")
    assert api.writes("ns", "web") == []


def test_a_put_with_non_string_annotations_is_refused_and_changes_nothing(api: KubeApi) -> None:
    pod = api.pod("ns", "web")
    pod["metadata"]["annotations"] = {STATUS: 1}
    code, status = call(api, "PUT", POD, pod)
    assert (code, status["reason"]) == (422, "Invalid") and "metadata.annotations" in status["message"]
    assert api.pod("ns", "web")["metadata"]["annotations"] == {"a": "1"}
    assert api.writes("ns", "web") == []


def test_the_kubeconfig_it_writes_is_read_by_this_projects_credentials(api: KubeApi, tmp_path: Path) -> None:
    path = api.write_kubeconfig(tmp_path / "kubeconfig")
    creds = credentials.resolve(str(path))
    assert (creds.server, creds.namespace) == (api.url, "default")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def protobuf_pod(resource_version: str, annotations: dict[str, str]) -> bytes:
    """A Pod as client-go encodes it with ContentType application/vnd.kubernetes.protobuf (Kubernetes
    API concepts, "Protobuf encoding"; ObjectMeta's field numbers from apimachinery's generated.proto)."""
    meta = _field(1, "web") + _field(3, "ns") + _field(5, "u1") + _field(6, resource_version)
    meta += _varint(7 << 3) + _varint(3)  # generation, a varint the reader skips
    for key, value in annotations.items():
        meta += _field(12, _field(1, key) + _field(2, value))
    pod = _field(1, meta) + _field(2, b"") + _field(3, b"")
    unknown = _field(1, _field(1, "v1") + _field(2, "Pod")) + _field(2, pod)
    return b"k8s\x00" + unknown


def put_raw(api: KubeApi, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(api.url + POD + "/status", data=body, method="PUT",
                                     headers={"Content-Type": "application/vnd.kubernetes.protobuf",
                                              "Accept": "application/vnd.kubernetes.protobuf,application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.headers["Content-Type"] == "application/json"
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_protobuf_put_of_the_pod_as_multus_sends_it_writes_the_annotations(api: KubeApi) -> None:
    version = api.pod("ns", "web")["metadata"]["resourceVersion"]
    code, pod = put_raw(api, protobuf_pod(version, {"a": "1", STATUS: '[{"name": "x"}]'}))
    assert code == 200, pod
    assert pod["metadata"]["annotations"] == {"a": "1", STATUS: '[{"name": "x"}]'}
    [write] = api.writes("ns", "web")
    assert (write.method, write.content_type) == ("PUT", "application/vnd.kubernetes.protobuf")
    code, status = put_raw(api, protobuf_pod(version, {STATUS: "stale"}))
    assert (code, status["reason"]) == (409, "Conflict")


@pytest.mark.parametrize("body", [b"{}", b"k8s\x00\x12\x05ab", b"k8s\x00\x12\x03\x0a\x01\xff", b"k8s\x00\x0f"],
                         ids=["no-envelope", "truncated", "garbled-metadata", "bad-wire-type"])
def test_a_protobuf_body_it_cannot_read_is_a_400_that_changes_nothing(api: KubeApi, body: bytes) -> None:
    code, status = put_raw(api, body)
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"].startswith("protobuf body: ")
    assert api.writes("ns", "web") == []
