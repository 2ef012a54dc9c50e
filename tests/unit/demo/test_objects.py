"""The agent's ObjectSource over the demo store: the same reads and patches the agent makes on a cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bridge.agent.kube import objects as cni_objects
from bridge.agent.kube import watchcache
from bridge.agent.services import state as servicestate
from bridge.agent.services.state import ServiceState
from demo.objects import StoreObjects, follow
from demo.store import Store
from podnetwork.ground import constants


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


class Heard:
    """A `watchcache.Listener` that remembers what it heard."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def listed(self, kind: watchcache.Kind, items: list[dict[str, Any]]) -> None:
        self.calls.append(("listed", kind.name, sorted(o["metadata"]["name"] for o in items)))

    def changed(self, kind: watchcache.Kind, event: str, obj: dict[str, Any]) -> None:
        self.calls.append((event, kind.name, obj["metadata"]["name"]))

    def failed(self, kind: watchcache.Kind, exc: Exception) -> None:
        raise AssertionError(f"the store's feed never fails: {exc}")


def proxied(name: str, proxy: str | None = constants.SERVICE_PROXY_NAME) -> dict[str, Any]:
    labels = {constants.SERVICE_PROXY_NAME_LABEL: proxy} if proxy else {}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "demo",
                                                                "labels": labels}, "spec": {}}


def test_follow_lists_then_tells_each_change_with_the_kind_s_label_selector_as_the_api_server_applies_it() -> None:
    api, _ = make()
    api.create(proxied("ours"))
    api.create(proxied("kube-proxy-s", None))
    heard = Heard()

    async def scenario() -> None:
        stop = follow(api, [watchcache.SERVICE, watchcache.PODNETWORK], heard)
        api.create(proxied("later"))
        api.create(proxied("other", "someone-else"))
        api.patch("v1", "Service", "ours", {"metadata": {"labels": None}}, "demo")  # stops matching
        api.delete("v1", "Service", "later", "demo")
        stop()
        api.create(proxied("after-stop"))

    asyncio.run(scenario())
    assert heard.calls == [
        ("listed", "Service", ["ours"]),
        ("listed", "PodNetwork", ["blue"]),
        ("ADDED", "Service", "later"),
        ("DELETED", "Service", "other"),
        ("DELETED", "Service", "ours"),
        ("DELETED", "Service", "later"),
    ]


def test_follow_feeds_the_agent_s_service_state_which_then_is_ready_and_holds_our_service() -> None:
    api, _ = make()
    state = ServiceState()
    service = proxied("db")
    service["metadata"]["annotations"] = {constants.SERVICE_PODNETWORK_ANNOTATION: "blue"}
    service["spec"] = {"clusterIP": "198.19.0.20", "ports": [{"port": 80, "protocol": "TCP"}]}

    async def scenario() -> None:
        stop = follow(api, servicestate.KINDS, state)
        assert state.ready and not state.services
        api.create(service)
        assert list(state.services) == ["demo/db"]
        stop()

    asyncio.run(scenario())
