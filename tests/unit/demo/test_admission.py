"""Pod admission in the demo store: auto-population and static validation before anything is stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from demo import admission
from demo.store import Invalid, Store
from podnetwork.ground import constants


def pod(name: str = "p", nets: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "demo"}
    if nets is not None:
        meta["annotations"] = {constants.NETWORKS_ANNOTATION: json.dumps(nets)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
    }


@pytest.fixture
def api() -> Store:
    api = Store()
    admission.register(api)
    return api


def networks_of(obj: dict[str, Any]) -> Any:
    text = (obj["metadata"].get("annotations") or {}).get(constants.NETWORKS_ANNOTATION)
    return None if text is None else json.loads(text)


def test_a_pod_without_networks_gets_the_default_podnetwork(api: Store) -> None:
    assert networks_of(api.create(pod())) == [{"podNetworkName": "default"}]


def test_the_namespace_default_list_wins_over_the_cluster_default(api: Store) -> None:
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "demo",
                "annotations": {
                    constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: '[{"podNetworkName": "blue"}]'
                },
            },
        }
    )
    assert networks_of(api.create(pod())) == [{"podNetworkName": "blue"}]


def test_host_network_pods_are_left_without_networks(api: Store) -> None:
    assert networks_of(api.create(pod(hostNetwork=True))) is None


def test_a_statically_invalid_pod_is_refused_with_field_errors_and_not_stored(api: Store) -> None:
    bad = pod(nets=[{"podNetworkName": "blue", "podNetworkAttachmentName": "port"}])
    with pytest.raises(Invalid, match=r"spec\.networks\[0\]: Forbidden"):
        api.create(bad)
    assert api.find("v1", "Pod", "p", "demo") is None


def test_the_first_network_of_an_existing_pod_cannot_change_but_others_can_be_added(api: Store) -> None:
    api.create(pod(nets=[{"podNetworkName": "default"}]))
    with pytest.raises(Invalid, match="the first network of a running pod cannot be removed"):
        api.patch(
            "v1",
            "Pod",
            "p",
            {"metadata": {"annotations": {constants.NETWORKS_ANNOTATION: '[{"podNetworkName": "blue"}]'}}},
            "demo",
        )
    assert networks_of(api.get("v1", "Pod", "p", "demo")) == [{"podNetworkName": "default"}]
    added = '[{"podNetworkName": "default"}, {"podNetworkName": "blue"}]'
    api.patch("v1", "Pod", "p", {"metadata": {"annotations": {constants.NETWORKS_ANNOTATION: added}}}, "demo")
    assert networks_of(api.get("v1", "Pod", "p", "demo")) == [{"podNetworkName": "default"}, {"podNetworkName": "blue"}]
    api.patch("v1", "Pod", "p", {"metadata": {"annotations": {constants.NETWORKS_ANNOTATION: '[{"podNetworkName": "default"}]'}}}, "demo")
    # Other annotations still change freely.
    api.patch("v1", "Pod", "p", {"metadata": {"annotations": {"note": "x"}}}, "demo")
    assert networks_of(api.get("v1", "Pod", "p", "demo")) == [{"podNetworkName": "default"}]


def test_with_the_feature_gate_off_pods_pass_unchanged() -> None:
    api = Store()
    admission.register(api, enabled=False)
    created = api.create(pod(nets=[{"podNetworkName": "a", "podNetworkAttachmentName": "b"}]))
    assert networks_of(created) == [{"podNetworkName": "a", "podNetworkAttachmentName": "b"}]
    assert networks_of(api.create(pod("q"))) is None


def test_json_patch_add_replace_remove_follow_rfc_6902() -> None:
    doc = {"metadata": {"annotations": {"a/b": "1"}}, "list": [1, 2]}
    out = admission.apply_json_patch(
        doc,
        [
            {"op": "add", "path": "/metadata/annotations/x~1y", "value": "2"},
            {"op": "replace", "path": "/metadata/annotations/a~1b", "value": "3"},
            {"op": "add", "path": "/list/-", "value": 3},
            {"op": "remove", "path": "/list/0"},
        ],
    )
    assert out == {"metadata": {"annotations": {"a/b": "3", "x/y": "2"}}, "list": [2, 3]}
    assert doc == {"metadata": {"annotations": {"a/b": "1"}}, "list": [1, 2]}
    with pytest.raises(admission.PatchError):
        admission.apply_json_patch(doc, [{"op": "move", "from": "/a", "path": "/b"}])
    with pytest.raises(admission.PatchError):
        admission.apply_json_patch(doc, [{"op": "replace", "path": "/missing", "value": 1}])
