"""The agent's ObjectSource over the demo store: the same reads and patches the agent makes on a cluster."""

from __future__ import annotations

import asyncio

import pytest

from bridge.agent import objects as cni_objects
from demo.objects import StoreObjects
from demo.store import Store


def make() -> tuple[Store, StoreObjects]:
    api = Store()
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "demo", "annotations": {"keep": "me", "drop": "me"}},
            "spec": {},
        }
    )
    api.create(
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "blue", "namespace": "demo"},
            "spec": {"config": "{}"},
        }
    )
    api.create(
        {
            "apiVersion": "multinetwork.x-k8s.io/v1alpha1",
            "kind": "PodNetwork",
            "metadata": {"name": "blue"},
            "spec": {"enabled": True},
        }
    )
    return api, StoreObjects(api)


def test_reads_return_the_stored_objects() -> None:
    _, objs = make()
    assert asyncio.run(objs.get_pod("demo", "p")).metadata.name == "p"
    assert asyncio.run(objs.get_nad("demo", "blue")).spec.config == "{}"
    assert asyncio.run(objs.get_podnetwork("blue")).kind == "PodNetwork"


@pytest.mark.parametrize(
    "call",
    [
        lambda o: o.get_pod("demo", "nope"),
        lambda o: o.get_nad("other", "blue"),
        lambda o: o.get_podnetwork("nope"),
        lambda o: o.get_attachment("demo", "nope"),
        lambda o: o.get_selection_options("demo", "nope"),
        lambda o: o.patch_pod_annotations("demo", "nope", {"a": "b"}),
    ],
)
def test_missing_objects_raise_the_agents_not_found(call) -> None:  # type: ignore[no-untyped-def]
    _, objs = make()
    with pytest.raises(cni_objects.NotFound):
        asyncio.run(call(objs))


def test_annotation_patches_merge_and_none_removes_a_key() -> None:
    api, objs = make()
    before = api.get("v1", "Pod", "p", "demo")["metadata"]["resourceVersion"]
    asyncio.run(objs.patch_pod_annotations("demo", "p", {"new": "v", "drop": None}))
    pod = api.get("v1", "Pod", "p", "demo")
    assert pod["metadata"]["annotations"] == {"keep": "me", "new": "v"}
    assert pod["metadata"]["resourceVersion"] != before
    assert objs.patches == [("demo", "p", {"new": "v", "drop": None})]


def test_an_annotation_patch_for_another_uid_is_refused_as_a_replaced_pod() -> None:
    api, objs = make()
    uid = api.get("v1", "Pod", "p", "demo")["metadata"]["uid"]
    with pytest.raises(cni_objects.Replaced):
        asyncio.run(objs.patch_pod_annotations("demo", "p", {"new": "v"}, uid="an-earlier-pod"))
    assert "new" not in api.get("v1", "Pod", "p", "demo")["metadata"]["annotations"]
    asyncio.run(objs.patch_pod_annotations("demo", "p", {"new": "v"}, uid=uid))
    assert api.get("v1", "Pod", "p", "demo")["metadata"]["annotations"]["new"] == "v"
