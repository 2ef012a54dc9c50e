"""The harness's Kubernetes API over real HTTP on loopback: what a delegating plugin reads and writes.

GETs of pods and NADs (404 as a Status), the three PATCH types clients use for
network-status, PUT of the whole pod or of `status` with optimistic concurrency
(a stale resourceVersion is a 409 that changes nothing), a patch type it does not
speak refused with 415, and every change of a pod's annotations recorded in order.
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


def test_the_kubeconfig_it_writes_is_read_by_this_projects_credentials(api: KubeApi, tmp_path: Path) -> None:
    path = api.write_kubeconfig(tmp_path / "kubeconfig")
    creds = credentials.resolve(str(path))
    assert (creds.server, creds.namespace) == (api.url, "default")
