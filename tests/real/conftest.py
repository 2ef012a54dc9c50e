"""Fixtures of the real tier: one real Kubernetes per session, shared; a namespace per test.

- `control_plane`: etcd, kube-apiserver, kube-controller-manager and kube-scheduler (with our
  extender registered, as deploy/scheduler/ registers it), and this project's CRDs and
  admission policies applied from `crds/`.
- `components`: on that, our operators from the checkout as a user runs them outside a pod:
  the controller (`--manage-webhooks --enforce-use-permission`), the bridge (`--webhook
  --manage-webhooks --enforce-use-permission`) and the scheduler extender.
- `node`: a kubelet with containerd, with our CNI agent installed as a user installs it.
- `ns`: a namespace of the test's own, deleted (and waited for) afterwards.

Without binaries the tier is skipped with one line that says how to get them; in CI (`CI`
set) that, or a node's missing prerequisite, is a failure, never a skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from tests.real.cluster_support import (
    Api,
    Cluster,
    KitMissing,
    Node,
    binaries,
    eventually,
    new_root,
    node_prerequisites,
    start_control_plane,
    start_operators,
)
from tests.real.objects_support import Made


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the real-cluster tier cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/real/" in item.nodeid:
            item.add_marker(pytest.mark.real)


#: The namespaces the tests deleted (`ns`), which must all be gone before the cluster stops.
_DELETED_NAMESPACES: list[str] = []


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Cluster]:
    try:
        kit, bins = binaries()
    except KitMissing as missing:
        _unavailable(str(missing))
    cluster = Cluster(kit=kit, bins=bins, root=new_root())
    try:
        start_control_plane(cluster)
        yield cluster
        if _DELETED_NAMESPACES and cluster.api is not None:
            # every test namespace gone, its pods deleted through the kubelet (CNI DEL through our
            # agent), before the cluster stops
            api = cluster.api
            eventually(lambda: all(api.find(f"/api/v1/namespaces/{n}") is None for n in _DELETED_NAMESPACES),
                       f"the tests' namespaces are gone: {', '.join(_DELETED_NAMESPACES)}", timeout=180)
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def api(control_plane: Cluster) -> Api:
    assert control_plane.api is not None
    return control_plane.api


@pytest.fixture(scope="session")
def components(control_plane: Cluster, api: Api) -> Cluster:
    """The controller, the bridge and the extender, each with its webhooks registered at loopback."""
    cluster = control_plane
    if "controller" not in cluster.components:
        start_operators(cluster)
    return cluster


@pytest.fixture(scope="session")
def node(components: Cluster) -> Node:
    """A kubelet node with containerd, our agent installed on it (shim and conflist)."""
    missing = node_prerequisites()
    if missing:
        _unavailable(missing)
    existing = [n for n in components.nodes.values() if n.agent is not None]
    if existing:
        return existing[0]
    created = components.add_node(1)
    components.install_agent(created)
    return created


@pytest.fixture
def ns(control_plane: Cluster, api: Api) -> Iterator[str]:
    name = f"t-{secrets.token_hex(3)}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    eventually(lambda: api.find(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
               f"namespace {name} has its default ServiceAccount", timeout=30)
    try:
        yield name
    finally:
        # Deleting a namespace takes the namespace controller ~5 s even when it is empty: the next
        # test need not wait for it; the session does, once, for all of them (`control_plane`).
        api.delete(f"/api/v1/namespaces/{name}")
        _DELETED_NAMESPACES.append(name)


@pytest.fixture
def made(api: Api) -> Iterator[Made]:
    """What a test makes through `Made` (tests/real/objects_support.py), removed afterwards, pods first."""
    made = Made(api)
    try:
        yield made
    finally:
        made.close()
