"""The world of a policy pass built afresh, as every pass built it before the agent's state kept
it between passes (`PolicyState.world`), and the check that two worlds decide alike.

Used by the state's own tests and the enforcer's (tests/unit/agent): whatever the state keeps
between passes must never make a decision differ from building the world anew.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping

from bridge.agent.policy.state import PolicyState
from bridge.policy import views
from bridge.policy.world import Address, PodInfo, World

IndexOf = dict[tuple[str, Address], tuple[str, ...]]
"""(network, address) -> the keys of the pods holding it there, in the pods' order."""


def afresh(state: PolicyState, local: Mapping[str, PodInfo] | None = None) -> tuple[World, IndexOf]:
    """The world of a pass from what `state` keeps, every pod keyed anew (`local`, this node's pods
    from their records, in place of the watched ones of the same keys, then those not watched);
    and the address index, built from every pod as `World.build` built it."""
    local = local or {}
    networks = state.networks()
    by_nad = state.by_nad(networks)

    def keyed(pod: PodInfo) -> PodInfo:
        if not any(i.network in by_nad for i in pod.interfaces):
            return pod
        return dataclasses.replace(pod, interfaces=views.keyed(pod.interfaces, by_nad))

    pods = [local.get(key) or keyed(pod) for key, pod in state.pods.items()]
    pods.extend(info for key, info in local.items() if key not in state.pods)
    index: dict[tuple[str, Address], list[str]] = {}
    for info in pods:
        for itf in info.interfaces:
            for address in itf.addresses:
                index.setdefault((itf.network, address), []).append(info.key)
    world = World({p.key: p for p in pods}, {n.name: n for n in state.namespaces.values()},
                  {n.key: n for n in networks}, tuple(state.policies.values()))
    return world, {k: tuple(v) for k, v in index.items()}


def assert_same_world(kept: World, fresh: World, index: IndexOf) -> None:
    """`kept` is `fresh`: the same pods in the same order, namespaces, networks and policies, and
    the same pods at every address of every network (`index`: `fresh`'s, from `afresh`)."""
    assert list(kept.pods.items()) == list(fresh.pods.items())
    assert kept.namespaces == fresh.namespaces and kept.networks == fresh.networks
    assert kept.policies == fresh.policies
    assert dict(kept.address_index) == index
    named = [i for world in (kept, fresh) for p in world.pods.values() for i in p.interfaces]
    networks = {n for n, _ in index} | set(fresh.networks) | {i.network for i in named} | {"nowhere"}
    addresses = {a for _, a in index} | {ipaddress.ip_address("10.255.0.1"), ipaddress.ip_address("fd99::1")}
    for network in networks:
        for address in addresses:
            assert kept.pods_at(network, address) == tuple(fresh.pods[k] for k in index.get((network, address), ()))


__all__ = ["IndexOf", "afresh", "assert_same_world"]
