"""The demo's scheduling: the real extender app over HTTP on loopback, called like kube-scheduler does."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from demo.controlplane import ControlPlane
from demo.scheduling import Extender, Scheduler, unschedulable_message
from demo.store import Store
from podnetwork.ground import constants

PN = (constants.API_VERSION, constants.PODNETWORK_KIND)


def node(name: str, offers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"kubernetes.io/hostname": name}}
    if offers is not None:
        meta["annotations"] = {constants.NODE_PODNETWORKS_ANNOTATION: json.dumps(offers)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def pod(name: str, nets: list[dict[str, Any]], selector: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if selector:
        spec["nodeSelector"] = {"kubernetes.io/hostname": selector}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "demo",
            "annotations": {constants.NETWORKS_ANNOTATION: json.dumps(nets)},
        },
        "spec": spec,
    }


Cluster = tuple[Store, Extender, Scheduler]


@contextlib.asynccontextmanager
async def cluster() -> AsyncIterator[Cluster]:
    """The store, controller, extender and scheduler, started; stopped on exit.

    Tests drive it with `asyncio.run`, so each has its own event loop and closes it.
    """
    api = Store()
    ctl = ControlPlane(api)
    ctl.start()
    api.create(node("n1"))
    api.create(node("n2", ["blue"]))
    extender = Extender(api)
    url = await extender.start()
    scheduler = Scheduler(api, url)
    await scheduler.start()
    try:
        yield api, extender, scheduler
    finally:
        await scheduler.stop()
        await extender.stop()
        ctl.stop()


def with_cluster(body: Callable[[Cluster], Awaitable[None]]) -> Callable[[], None]:
    """A plain test that runs `body` against a started cluster in its own `asyncio.run` loop."""

    def test() -> None:
        async def main() -> None:
            async with cluster() as c:
                await body(c)

        asyncio.run(main())

    test.__name__, test.__doc__ = body.__name__, body.__doc__
    return test


@with_cluster
async def test_the_extender_serves_real_http_on_loopback_and_is_ready(cluster: Cluster) -> None:
    _, extender, _ = cluster
    assert extender.url.startswith("http://127.0.0.1:")
    async with httpx.AsyncClient(base_url=extender.url) as client:
        assert (await client.get("/readyz")).status_code == 200


@with_cluster
async def test_a_pod_on_a_missing_network_stays_pending_with_the_extenders_reason(cluster: Cluster) -> None:
    api, _, scheduler = cluster
    api.create(pod("p", [{"podNetworkName": "red"}]))
    await scheduler.settle()
    got = api.get("v1", "Pod", "p", "demo")
    assert "nodeName" not in got["spec"]
    scheduled = next(c for c in got["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"
    assert scheduled["message"] == '0/2 nodes are available: 2 podnetwork "red" not found.'
    decision = scheduler.decisions[-1]
    assert decision.request == {"Pod": decision.request["Pod"], "NodeNames": ["n1", "n2"]}
    assert set(decision.reply.failed_and_unresolvable_nodes) == {"n1", "n2"}


@with_cluster
async def test_the_pod_is_retried_and_bound_when_its_network_turns_ready(cluster: Cluster) -> None:
    api, _, scheduler = cluster
    api.create(pod("p", [{"podNetworkName": "red"}]))
    await scheduler.settle()
    api.create({"apiVersion": PN[0], "kind": PN[1], "metadata": {"name": "red"}, "spec": {"enabled": True}})
    await scheduler.settle()
    got = api.get("v1", "Pod", "p", "demo")
    # n2 offers only blue; the extender fails it, so the pod lands on n1.
    assert got["spec"]["nodeName"] == "n1"
    assert scheduler.decisions[-1].reply.failed_nodes == {
        "n2": 'podnetwork "red" is not available on this node'
    }


@with_cluster
async def test_node_selector_narrows_the_candidates_before_the_extender(cluster: Cluster) -> None:
    api, _, scheduler = cluster
    api.create({"apiVersion": PN[0], "kind": PN[1], "metadata": {"name": "red"}, "spec": {"enabled": True}})
    api.create(pod("p", [{"podNetworkName": "red"}], selector="n2"))
    await scheduler.settle()
    decision = scheduler.decisions[-1]
    assert decision.candidates == ["n2"]
    assert decision.node is None
    assert (
        decision.message
        == "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 podnetwork \"red\" is not available on this node."
    )


@with_cluster
async def test_pods_spread_over_the_passing_nodes(cluster: Cluster) -> None:
    api, _, scheduler = cluster
    api.create({"apiVersion": PN[0], "kind": PN[1], "metadata": {"name": "blue"}, "spec": {"enabled": True}})
    for name in ("a", "b"):
        api.create(pod(name, [{"podNetworkName": "blue"}]))
        await scheduler.settle()
    nodes = sorted(api.get("v1", "Pod", n, "demo")["spec"]["nodeName"] for n in ("a", "b"))
    assert nodes == ["n1", "n2"]


def test_unschedulable_message_groups_reasons_like_kube_scheduler() -> None:
    text = unschedulable_message(3, 0, {"a": "x", "b": "x", "c": "y"})
    assert text == "0/3 nodes are available: 2 x, 1 y."


def test_the_extender_leaves_the_demos_signal_handlers_alone() -> None:
    """The demo owns SIGINT/SIGTERM; the extender's uvicorn server must not take them while it serves."""
    import signal

    def handlers() -> dict[int, Any]:
        return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    async def serving() -> None:
        before = handlers()  # in the loop: asyncio.run has put its SIGINT handler in place
        extender = Extender(Store())
        url = await extender.start()
        try:
            async with httpx.AsyncClient() as client:
                assert (await client.get(f"{url}/healthz")).status_code == 200
            assert handlers() == before
        finally:
            await extender.stop()
        assert handlers() == before

    asyncio.run(serving())
