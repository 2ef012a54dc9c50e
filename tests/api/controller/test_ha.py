"""High availability (docs/controller.md "High availability"): a replica that kopf
peering keeps paused writes nothing, yet the cache its admission reads still
follows the cluster, over real HTTP against kmock's Kubernetes emulator.

kmock 0.8 cannot list `/api/v1/namespaces`, so the mirror under test follows
nodes with the same filter (the profile annotation); only the plural differs
from what `podnetwork controller --peering` mirrors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import kmock
import kopf
import pytest

from podnetwork.commands import controller as command
from podnetwork.ground import constants
from podnetwork.kep import controller
from podnetwork.kube import client as kube
from tests.api import kube_emulator
from tests.api.controller_support import node, podnetwork
from tests.api.kube_emulator import NODES, PN, Emulator, declare_resources, eventually

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(60)]

PROFILE = {constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: '[{"podNetworkName":"blue"}]'}


def arguments(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.command.configure(parser)
    return parser.parse_args(argv)


def replica(k: Any, registry: kopf.OperatorRegistry, args: argparse.Namespace,
            identity: str | None = None) -> contextlib.AbstractAsyncContextManager[None]:
    """One replica's operator with the command's peering options, logged in to `k`."""
    return kube_emulator.operator(k, registry, exit_timeout=30, identity=identity,
                                  **command.peering_options(args))


async def patch(k: Any, path: str, body: Any) -> None:
    async with k.request("PATCH", path, json=body,
                         headers={"Content-Type": "application/merge-patch+json"}) as resp:
        assert resp.status < 300, await resp.text()


def writes(k: Any) -> list[str]:
    return [f"{r.method.value} {r.url.path}" for r in list(k) if r.method.value in ("PATCH", "POST", "PUT", "DELETE")]


async def test_paused_replica_writes_nothing_while_its_admission_cache_follows_the_cluster(kmock):
    declare_resources(kmock)  # no ClusterKopfPeering resource: mandatory peering keeps kopf paused
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[NODES, None, "n1"] = {**node("n1"), "metadata": {**node("n1")["metadata"], "annotations": PROFILE}}
    kmock.objects[NODES, None, "n2"] = node("n2")
    ctl = controller.Controller(config=controller.ControllerSettings(create_default=False, inuse_message_interval=0.2,
                                                                     namespace_profiles=False),
                                api=kube_emulator.api(kmock))
    registry = kopf.OperatorRegistry()
    controller.register(registry, ctl)
    cache: dict[str, dict[str, Any]] = {}
    command.register_mirror(registry, cache, kube_emulator.api(kmock), resource=kube.Node)

    async with replica(kmock, registry, arguments("--peering", "podnetwork-controller", "--priority", "1")):
        await eventually(lambda: set(cache) == {"n1"})
        await patch(kmock, "/api/v1/nodes/n2", {"metadata": {"annotations": PROFILE}})
        await eventually(lambda: set(cache) == {"n1", "n2"})
        await patch(kmock, "/api/v1/nodes/n1", {"metadata": {"annotations": {
            constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION: None}}})
        await eventually(lambda: set(cache) == {"n2"})
        assert cache["n2"]["metadata"]["annotations"] == PROFILE
        await asyncio.sleep(0.5)  # time in which an active controller writes Ready and node conditions

    # Only the test's own two patches: no status, finalizer or node condition from the paused one.
    assert writes(kmock) == ["PATCH /api/v1/nodes/n2", "PATCH /api/v1/nodes/n1"]
    assert "conditions" not in dict(kmock.objects[PN, None, "blue"]).get("status", {})


async def test_standalone_replica_reconciles_so_the_paused_one_is_paused_by_peering(kmock):
    # The control for the test above: the same objects and handlers without --peering.
    declare_resources(kmock)
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    ctl = controller.Controller(config=controller.ControllerSettings(create_default=False, inuse_message_interval=0.2,
                                                                     namespace_profiles=False),
                                api=kube_emulator.api(kmock))
    registry = kopf.OperatorRegistry()
    controller.register(registry, ctl)
    async with replica(kmock, registry, arguments()):
        await eventually(lambda: has_conditions(kmock, "blue"))


PEERINGS = "kopf.dev/v1/clusterkopfpeerings"
PN_URL = f"/apis/{constants.GROUP}/{constants.VERSION}/{constants.PODNETWORK_PLURAL}"


def declare_peering(k: Any, name: str) -> None:
    """deploy/peering/ on the emulator: the ClusterKopfPeering resource and one object."""
    k.resources[PEERINGS] = kmock.ResourceInfo(kind="ClusterKopfPeering", namespaced=False,
                                               verbs={"list", "watch", "get", "patch"})
    k.objects[PEERINGS, None, name] = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
                                       "metadata": {"name": name, "resourceVersion": "0"}}


@contextlib.asynccontextmanager
async def replica_in_thread(k: Any, ctl: controller.Controller, args: argparse.Namespace,
                            demoted: threading.Event) -> AsyncIterator[None]:
    """A second replica on its own event loop: kopf cancels every task of its loop at exit,
    so two operators sharing one loop would take each other down."""
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stopping: list[asyncio.Event] = []

    async def main() -> None:
        stopping.append(asyncio.Event())
        registry = kopf.OperatorRegistry()
        controller.register(registry, ctl)
        command.register_demotion_guard(registry, kube_emulator.api(k), "replica-in-thread", demoted.set)
        async with replica(k, registry, args, "replica-in-thread"):
            ready.set()
            await stopping[0].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        assert await asyncio.to_thread(ready.wait, 15)
        yield
    finally:
        # Joined without blocking this loop: it serves kmock, and the replica's
        # last keep-alive removal is a request to it.
        loop.call_soon_threadsafe(stopping[0].set)
        await asyncio.to_thread(thread.join, 20)
        assert not thread.is_alive()
        loop.close()


def peers(k: Any) -> dict[str, Any]:
    return dict(dict(k.objects[PEERINGS, None, "podnetwork-controller"]).get("status") or {})


def has_conditions(k: Any, name: str) -> bool:
    return bool(dict(k.objects[PN, None, name]).get("status", {}).get("conditions"))


async def test_lower_priority_replica_waits_then_takes_over_when_the_active_one_stops(kmock):
    declare_resources(kmock)
    declare_peering(kmock, "podnetwork-controller")
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    config = controller.ControllerSettings(create_default=False, inuse_message_interval=0.2,
                                           namespace_profiles=False)
    first = controller.Controller(config=config, api=kube_emulator.api(kmock))
    second = controller.Controller(config=config, api=kube_emulator.api(kmock))
    registry = kopf.OperatorRegistry()
    controller.register(registry, first)
    first_demoted, second_demoted = threading.Event(), threading.Event()
    command.register_demotion_guard(registry, kube_emulator.api(kmock), "first", first_demoted.set)
    older = command.parse_priority("start-time")
    await asyncio.sleep(0.001)
    newer = command.parse_priority("start-time")

    active: Any = replica(kmock, registry, arguments("--peering", "podnetwork-controller",
                                                     "--priority", str(older)), "first")
    await active.__aenter__()
    try:
        await eventually(lambda: has_conditions(kmock, "blue"))
        async with replica_in_thread(kmock, second, arguments("--peering", "podnetwork-controller",
                                                              "--priority", str(newer)), second_demoted):
            await eventually(lambda: sorted(p["priority"] for p in peers(kmock).values()) == [newer, older])
            await asyncio.sleep(1)
            assert first.objects and not second.objects  # the newer replica has not even listed

            # The active replica stops (rollout, drain): kopf drops its keep-alive on the way out.
            await active.__aexit__(None, None, None)
            active = None
            await eventually(lambda: [p["priority"] for p in peers(kmock).values()] == [newer])
            async with kmock.request("POST", PN_URL, json=podnetwork("green")) as resp:
                assert resp.status < 300, await resp.text()
            await eventually(lambda: has_conditions(kmock, "green"))
            assert {ref.name for ref in second.objects} == {"blue", "green"}
        # A newer peer outranks nobody, and taking over is no demotion.
        assert not first_demoted.is_set() and not second_demoted.is_set()
    finally:
        if active is not None:
            await active.__aexit__(None, None, None)


async def test_active_replica_outranked_by_a_reappearing_older_peer_is_told_to_restart(kmock):
    declare_resources(kmock)
    declare_peering(kmock, "podnetwork-controller")
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    config = controller.ControllerSettings(create_default=False, inuse_message_interval=0.2,
                                           namespace_profiles=False)
    registry = kopf.OperatorRegistry()
    controller.register(registry, controller.Controller(config=config, api=kube_emulator.api(kmock)))
    demoted, other_demoted = threading.Event(), threading.Event()
    command.register_demotion_guard(registry, kube_emulator.api(kmock), "active", demoted.set)
    priority = command.parse_priority("start-time")

    async with replica(kmock, registry, arguments("--peering", "podnetwork-controller",
                                                  "--priority", str(priority)), "active"):
        await eventually(lambda: has_conditions(kmock, "blue"))
        assert not demoted.is_set()
        # An older replica (higher priority) whose keep-alive had expired comes back.
        async with replica_in_thread(kmock, controller.Controller(config=config, api=kube_emulator.api(kmock)),
                                     arguments("--peering", "podnetwork-controller",
                                               "--priority", str(priority + 1)), other_demoted):
            await eventually(demoted.is_set)
        assert not other_demoted.is_set()


async def test_an_older_replica_that_arrives_after_a_younger_one_waits_behind_it_and_nobody_restarts(kmock):
    # A fresh install: both replicas start together, and the younger one's first keep-alive may
    # reach the peering object first. Ranked by start time, the older outranked it a moment after
    # it had acted, and the younger exited. Ranked by arrival, the first to write leads.
    declare_resources(kmock)
    declare_peering(kmock, "podnetwork-controller")
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    config = controller.ControllerSettings(create_default=False, inuse_message_interval=0.2,
                                           namespace_profiles=False)
    older_args = arguments("--peering", "podnetwork-controller", "--priority", "start-time")
    await asyncio.sleep(0.001)
    younger_args = arguments("--peering", "podnetwork-controller", "--priority", "start-time")
    assert older_args.priority > younger_args.priority
    younger = controller.Controller(config=config, api=kube_emulator.api(kmock))
    older = controller.Controller(config=config, api=kube_emulator.api(kmock))
    registry = kopf.OperatorRegistry()
    controller.register(registry, younger)
    younger_demoted, older_demoted = threading.Event(), threading.Event()
    command.register_demotion_guard(registry, kube_emulator.api(kmock), "younger", younger_demoted.set)

    async with replica(kmock, registry, younger_args, "younger"):
        await eventually(lambda: has_conditions(kmock, "blue"))
        async with replica_in_thread(kmock, older, older_args, older_demoted):
            await eventually(lambda: set(peers(kmock)) == {"younger", "replica-in-thread"})
            ranks = {name: entry["priority"] for name, entry in peers(kmock).items()}
            assert ranks["replica-in-thread"] < ranks["younger"]
            async with kmock.request("POST", PN_URL, json=podnetwork("green")) as resp:
                assert resp.status < 300, await resp.text()
            await eventually(lambda: has_conditions(kmock, "green"))
            assert not younger_demoted.is_set()
            assert {ref.name for ref in younger.objects} == {"blue", "green"}
            assert not older.objects  # the waiting replica has not even listed
        assert not older_demoted.is_set()


async def test_two_replicas_starting_together_elect_one_that_alone_acts_and_neither_restarts(kmock):
    declare_resources(kmock)
    declare_peering(kmock, "podnetwork-controller")
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    config = controller.ControllerSettings(create_default=False, inuse_message_interval=0.2,
                                           namespace_profiles=False)
    here, there = (controller.Controller(config=config, api=kube_emulator.api(kmock)) for _ in range(2))
    registry = kopf.OperatorRegistry()
    controller.register(registry, here)
    here_demoted, there_demoted = threading.Event(), threading.Event()
    command.register_demotion_guard(registry, kube_emulator.api(kmock), "here", here_demoted.set)
    args = arguments("--peering", "podnetwork-controller", "--priority", "start-time")

    # Entered together: each replica's join races the other's on the same peering object.
    both = contextlib.AsyncExitStack()
    async with both:
        await asyncio.gather(both.enter_async_context(replica(kmock, registry, args, "here")),
                             both.enter_async_context(replica_in_thread(kmock, there, args, there_demoted)))
        await eventually(lambda: set(peers(kmock)) == {"here", "replica-in-thread"})
        ranks = {name: entry["priority"] for name, entry in peers(kmock).items()}
        assert ranks["here"] != ranks["replica-in-thread"]
        leader, waiting = (here, there) if ranks["here"] > ranks["replica-in-thread"] else (there, here)
        await eventually(lambda: has_conditions(kmock, "blue"))
        async with kmock.request("POST", PN_URL, json=podnetwork("green")) as resp:
            assert resp.status < 300, await resp.text()
        await eventually(lambda: has_conditions(kmock, "green"))
        assert {ref.name for ref in leader.objects} == {"blue", "green"}
        assert not waiting.objects
        assert not here_demoted.is_set() and not there_demoted.is_set()
