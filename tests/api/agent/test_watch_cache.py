"""The agent's watch cache (`bridge.agent.kube.watchcache`) against kmock's Kubernetes emulator over real
HTTP: what it answers from its list and watch, what it still reads from the API, and when."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kmock
import pytest

from bridge.agent.daemon import command
from bridge.agent.kube import objects, watchcache
from tests.api.kube_emulator import Emulator, write_kubeconfig

NADS = "k8s.cni.cncf.io/v1/network-attachment-definitions"
PODS = "v1/pods"
RESOURCES = {
    PODS: ("Pod", True),
    NADS: ("NetworkAttachmentDefinition", True),
    "multinetwork.x-k8s.io/v1alpha1/podnetworks": ("PodNetwork", False),
    "multinetwork.x-k8s.io/v1alpha1/podnetworkattachments": ("PodNetworkAttachment", True),
    "bridge.multinetwork.x-k8s.io/v1alpha1/networkselectionoptions": ("NetworkSelectionOptions", True),
}


def nad(name: str, namespace: str, config: str) -> dict[str, Any]:
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"}, "spec": {"config": config}}


@pytest.fixture
async def cluster() -> AsyncIterator[Emulator]:
    async with Emulator() as k, kmock.Server(k):
        for resource, (kind, namespaced) in RESOURCES.items():
            k.resources[resource] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, verbs={"get", "list", "watch", "patch", "create", "delete"})
        k.objects[PODS, "ns", "web"] = {"apiVersion": "v1", "kind": "Pod",
                                        "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "1"}}
        k.objects[NADS, "ns", "blue"] = nad("blue", "ns", '{"v": 1}')
        k.objects[NADS, "other", "red"] = nad("red", "other", '{"v": 1}')
        yield k


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within 10 s: {what}")


async def cached(cluster: Emulator, tmp_path: Path, max_objects: int = 10) -> watchcache.CachedObjects:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(cluster.url))
    source = await asyncio.to_thread(objects.KubernetesObjects, str(kubeconfig))
    cache = watchcache.CachedObjects(source, max_objects=max_objects)
    cache.start()
    await until(lambda: all(m.synced for m in cache.mirrors.values()), "every kind listed and watched")
    return cache


def gets(cluster: Emulator, suffix: str) -> int:
    return sum(1 for r in list(cluster)
               if r.method == kmock.method.GET and str(r.url.path).endswith(suffix) and "watch" not in r.url.query)


async def test_nads_come_from_the_watch_and_the_pod_is_read_fresh_every_time(
    cluster: Emulator, tmp_path: Path
) -> None:
    cache = await cached(cluster, tmp_path)
    try:
        for _ in range(3):
            assert (await cache.get_nad("ns", "blue")).spec.config == '{"v": 1}'
            assert (await cache.get_nad("other", "red")).spec.config == '{"v": 1}'
            await cache.get_pod("ns", "web")
        assert gets(cluster, "/network-attachment-definitions/blue") == 0
        assert gets(cluster, "/network-attachment-definitions/red") == 0
        assert gets(cluster, "/pods/web") == 3
        assert cache.hits == 6
    finally:
        await cache.close()


async def test_a_changed_nad_is_served_as_changed_and_a_deleted_one_is_read_from_the_api(
    cluster: Emulator, tmp_path: Path
) -> None:
    cache = await cached(cluster, tmp_path)
    try:
        async with cluster.clients[0].patch(
            "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/blue",
            json={"spec": {"config": '{"v": 2}'}}, headers={"Content-Type": "application/merge-patch+json"},
        ) as resp:
            assert resp.status == 200, await resp.text()

        async def config() -> str:
            return (await cache.get_nad("ns", "blue")).spec.config

        for _ in range(100):
            if await config() == '{"v": 2}':
                break
            await asyncio.sleep(0.05)
        assert await config() == '{"v": 2}'
        async with cluster.clients[0].delete(
            "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/blue") as resp:
            assert resp.status == 200, await resp.text()
        await until(lambda: ("ns", "blue") not in cache.mirrors["NetworkAttachmentDefinition"].objects,
                    "the DELETED event")
        with pytest.raises(objects.NotFound):
            await cache.get_nad("ns", "blue")
        assert gets(cluster, "/network-attachment-definitions/blue") == 1, "the miss went to the API"
    finally:
        await cache.close()


async def test_past_its_bound_the_cache_keeps_what_fits_and_the_rest_is_read_from_the_api(
    cluster: Emulator, tmp_path: Path
) -> None:
    cache = await cached(cluster, tmp_path, max_objects=1)
    try:
        mirror = cache.mirrors["NetworkAttachmentDefinition"]
        assert len(mirror.objects) == 1 and len(mirror.left_out) == 1
        for namespace, name in (("ns", "blue"), ("other", "red")):
            assert json.loads((await cache.get_nad(namespace, name)).spec.config) == {"v": 1}
        assert gets(cluster, "/network-attachment-definitions/blue") + gets(
            cluster, "/network-attachment-definitions/red") == 1
    finally:
        await cache.close()


async def test_while_a_watch_is_down_every_read_goes_to_the_api(cluster: Emulator, tmp_path: Path) -> None:
    cache = await cached(cluster, tmp_path)
    try:
        mirror = cache.mirrors["NetworkAttachmentDefinition"]
        mirror.synced = False  # as after a broken watch, until the next list
        await cache.get_nad("ns", "blue")
        assert gets(cluster, "/network-attachment-definitions/blue") == 1
    finally:
        await cache.close()


MiB = 1024 * 1024
NAD_URL = "/apis/k8s.cni.cncf.io/v1/namespaces/{namespace}/network-attachment-definitions"


async def create_nad(cluster: Emulator, name: str, namespace: str, config: str) -> None:
    body = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"config": config}}
    async with cluster.clients[0].post(NAD_URL.format(namespace=namespace), data=io.BytesIO(json.dumps(body).encode()),
                                       headers={"Content-Type": "application/json"}) as resp:
        assert resp.status in (200, 201), await resp.text()


def kept_json_bytes(cache: watchcache.CachedObjects) -> int:
    return sum(len(json.dumps(obj)) for mirror in cache.mirrors.values() for obj in mirror.objects.values())


async def test_nads_of_900_kb_are_never_kept_and_each_is_read_from_the_api_when_named(
    cluster: Emulator, tmp_path: Path
) -> None:
    big = json.dumps({"cniVersion": "1.0.0", "type": "bridge", "pad": "x" * 900_000})
    cluster.objects[NADS, "ns", "listed"] = nad("listed", "ns", big)  # there at the first list
    cache = await cached(cluster, tmp_path, max_objects=1000)
    try:
        mirror = cache.mirrors["NetworkAttachmentDefinition"]
        for i in range(10):  # made while the watch runs, as a tenant would
            await create_nad(cluster, f"big{i}", "ns", big)
        await create_nad(cluster, "small", "ns", '{"v": 3}')
        await until(lambda: ("ns", "small") in mirror.objects, "the events up to the small NAD")
        assert ("ns", "listed") not in mirror.objects
        assert not any(name.startswith("big") for _, name in mirror.objects)
        assert kept_json_bytes(cache) < 64 * 1024, "only the small NADs are kept"
        assert (await cache.get_nad("ns", "big3")).spec.config == big
        assert (await cache.get_nad("ns", "listed")).spec.config == big
        assert gets(cluster, "/network-attachment-definitions/big3") == 1
        assert gets(cluster, "/network-attachment-definitions/listed") == 1
        assert (await cache.get_nad("ns", "small")).spec.config == '{"v": 3}'
        assert gets(cluster, "/network-attachment-definitions/small") == 0
    finally:
        await cache.close()


async def test_a_kept_nad_that_grows_past_the_bound_is_dropped_not_served_as_it_was(
    cluster: Emulator, tmp_path: Path
) -> None:
    cache = await cached(cluster, tmp_path)
    try:
        mirror = cache.mirrors["NetworkAttachmentDefinition"]
        assert ("ns", "blue") in mirror.objects
        grown = json.dumps({"v": 2, "pad": "x" * 900_000})
        async with cluster.clients[0].patch(
            "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/blue",
            data=io.BytesIO(json.dumps({"spec": {"config": grown}}).encode()),
            headers={"Content-Type": "application/merge-patch+json"},
        ) as resp:
            assert resp.status == 200, await resp.text()
        await until(lambda: ("ns", "blue") not in mirror.objects, "the MODIFIED event")
        assert (await cache.get_nad("ns", "blue")).spec.config == grown
    finally:
        await cache.close()


async def test_past_the_kinds_bound_in_bytes_the_cache_keeps_what_fits_and_the_rest_is_read_from_the_api(
    cluster: Emulator, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(cluster.url))
    source = await asyncio.to_thread(objects.KubernetesObjects, str(kubeconfig))
    one = watchcache.held_bytes(await source.api.get(
        "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/blue"), 10 * MiB)
    cache = watchcache.CachedObjects(source, max_bytes=one + one // 2)  # room for one of the two NADs
    cache.start()
    try:
        await until(lambda: all(m.synced for m in cache.mirrors.values()), "every kind listed and watched")
        mirror = cache.mirrors["NetworkAttachmentDefinition"]
        assert len(mirror.objects) == 1 and len(mirror.left_out) == 1 and mirror.bytes <= one + one // 2
        for namespace, name in (("ns", "blue"), ("other", "red")):
            assert json.loads((await cache.get_nad(namespace, name)).spec.config) == {"v": 1}
        await create_nad(cluster, "green", "ns", '{"v": 1}')
        await until(lambda: ("ns", "green") in mirror.left_out, "the ADDED event, not kept")
        assert len(mirror.objects) == 1
    finally:
        await cache.close()


async def test_the_byte_flags_bound_the_cache_the_command_builds(cluster: Emulator, tmp_path: Path) -> None:
    """`--watch-cache-object-bytes` reaches the cache: a NAD over it is read from the API."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(cluster.url))
    cluster.objects[NADS, "ns", "big"] = nad("big", "ns", json.dumps({"pad": "x" * 4000}))
    parser = argparse.ArgumentParser()
    command.configure(parser)
    args = parser.parse_args(["--kubeconfig", str(kubeconfig), "--watch-cache-object-bytes", "2000",
                              "--watch-cache-kind-bytes", "100000"])
    cache = await asyncio.to_thread(command.object_source, args)
    assert isinstance(cache, watchcache.CachedObjects)
    mirror = cache.mirrors["NetworkAttachmentDefinition"]
    assert (mirror.max_object_bytes, mirror.max_bytes) == (2000, 100000)
    cache.start()
    try:
        await until(lambda: all(m.synced for m in cache.mirrors.values()), "every kind listed and watched")
        assert ("ns", "blue") in mirror.objects and ("ns", "big") not in mirror.objects
        assert "x" * 4000 in (await cache.get_nad("ns", "big")).spec.config
        assert gets(cluster, "/network-attachment-definitions/big") == 1, "read from the API"
    finally:
        await cache.close()
