"""MultiNetworkPolicy enforced by the agent, with real plugins, real nft and real traffic.

The real agent behind its socket attaches pods whose delegates run inside the netpol harness's
sealed node namespace (tests/cni/agent_node_support.py: no packet can leave, asserted before and
after). The agent's policy state hears the objects as its list + watch would
(`PolicyState.listed` / `changed`); the watches themselves are tests/api/agent/test_policy_watches.py.

One pod story, in order: a policy present before the ADD isolates the pod as soon as ADD answers;
a pod of another node (attached without the agent, known by its Pod object only) joins the allow
set when its object arrives; an update follows and keeps an established allowed connection; a
restarted agent keeps the table, then reconciles a change made while it was down; deleting the
policy removes the table; DEL leaves none.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.kube.watchcache import POD, POLICY
from bridge.agent.netns import nftables
from bridge.agent.policy.apply import Enforcer, Settings
from bridge.agent.policy.state import KINDS, PolicyState
from podnetwork.ground import constants
from tests.cni.agent_node_support import NAD, add, pod_object, sealed_node
from tests.cni.agent_support import World
from tests.cni.netpol_support import TCP80, InNode, Node

pytestmark = pytest.mark.cni


@pytest.fixture
def node(cni_host: list[Path]) -> Iterator[Node]:
    with sealed_node(cni_host) as made:
        yield made


def policy(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
            "metadata": {"namespace": "x", "name": "clients-only",
                         "annotations": {constants.POLICY_FOR_NAD_ANNOTATION: NAD}},
            "spec": {"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Ingress"], **spec}}


FROM_CLIENTS = policy({"ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]})
FROM_CLIENTS_AND_Y = policy({"ingress": [{"from": [
    {"podSelector": {"matchLabels": {"role": "client"}}}, {"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]})
DENY_ALL = policy({})


def listed_state(world: World, node: Node, policies: list[dict[str, Any]]) -> PolicyState:
    """A state as the watches leave it after their lists: the namespaces, the NAD, the pods the
    API has (with the network-status the agent wrote), `policies`."""
    state = PolicyState(node="this")
    objects = {
        "Namespace": [{"kind": "Namespace", "metadata": {"name": n, "labels": {"ns": n}}} for n in ("x", "y")],
        "NetworkAttachmentDefinition": [{"kind": "NetworkAttachmentDefinition",
                                         "metadata": {"namespace": "default", "name": "pnnp-net1"}}],
        "Pod": [world.objects.get(*key) for key in world.objects._store if key[0] == "Pod"],
        constants.POLICY_KIND: policies,
    }
    for kind in KINDS:
        state.listed(kind, objects.get(kind.name, []))
    return state


async def start_agent(world: World, node: Node, state: PolicyState) -> Enforcer:
    enforcer = Enforcer(state, Settings(quiet=0.02, max_delay=0.1, retry_first=0.1, retry_max=1.0))
    await world.start_agent(executor=InNode(node), enforcer=enforcer, default_network=node.plugin_config("eth0"))
    return enforcer


def reaches(node: Node, source: str, destination: str) -> bool:
    matrix = node.probe([TCP80], sources=[source], destinations=[destination])
    return matrix.connected[(source, destination, TCP80)]


async def eventually(node: Node, source: str, destination: str, expected: bool, what: str) -> None:
    for _ in range(40):
        if await asyncio.to_thread(reaches, node, source, destination) == expected:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{source} -> {destination}: still {'not ' if expected else ''}connected: {what}")


async def test_the_agent_isolates_at_add_follows_changes_survives_a_restart_and_leaves_no_table(
    cni_host: list[Path], node: Node
) -> None:
    world = World(cni_host)
    try:
        world.nad("pnnp-net1", node.plugin_config("net1"))
        state = listed_state(world, node, [FROM_CLIENTS])
        await start_agent(world, node, state)
        await add(world, node, "y", "b", {"pod": "b"})
        a_netns = await add(world, node, "x", "a", {"pod": "a"})
        # (a) In place when the ADD answered: the very first probe is refused, no waiting.
        assert await nftables.exists(a_netns)
        assert not reaches(node, "y/b", "x/a"), "the policy present before the ADD did not isolate x/a"
        assert reaches(node, "x/a", "y/b"), "egress is not isolated"

        # (c) A client pod of another node: allowed once its Pod object (with its address) arrives.
        remote = node.attach("x", "c")
        assert not reaches(node, "x/c", "x/a")
        remote_object = pod_object("x", "c", {"role": "client"}, node="elsewhere")
        remote_object["metadata"]["annotations"][constants.NPWG_NETWORK_STATUS_ANNOTATION] = json.dumps(
            [{"name": NAD, "interface": "net1", "ips": [remote.addresses["net1"]]}])
        state.changed(POD, "ADDED", remote_object)
        await eventually(node, "x/c", "x/a", True, "a new peer pod's address joins the allow set")

        # (b, f) The policy changes: y is allowed too, and an allowed connection open across the
        # update keeps working.
        with node.connection("x/c", "x/a") as echo:
            assert echo()
            state.changed(POLICY, "MODIFIED", FROM_CLIENTS_AND_Y)
            await eventually(node, "y/b", "x/a", True, "the updated policy allows namespace y")
            assert echo(), "the established connection was dropped by the update"

        # (d) The agent restarts: the table stays while it is down, and a change made meanwhile
        # (every client denied) is reconciled when it starts again.
        await world.stop_agent()
        assert await nftables.exists(a_netns) and reaches(node, "y/b", "x/a")
        state = listed_state(world, node, [DENY_ALL])
        state.changed(POD, "ADDED", remote_object)
        await start_agent(world, node, state)
        await eventually(node, "y/b", "x/a", False, "the restarted agent reconciles the table")
        assert not reaches(node, "x/c", "x/a")

        # (b) The last policy goes: so does the table.
        state.changed(POLICY, "DELETED", DENY_ALL)
        await eventually(node, "y/b", "x/a", True, "no policy any more")
        assert not await nftables.exists(a_netns)

        # (e) DEL leaves no table (the namespace stays: the test made it).
        state.changed(POLICY, "ADDED", DENY_ALL)
        await eventually(node, "y/b", "x/a", False, "isolated again")
        answer = await world.cni("DEL", "c-x-a", a_netns, "a", namespace="x")
        assert answer.returncode == 0, answer.stdout
        assert not await nftables.exists(a_netns)
    finally:
        await world.cleanup()


async def test_an_add_whose_delegate_fails_leaves_no_table_though_it_was_written_beside_the_delegates(
    cni_host: list[Path], node: Node
) -> None:
    """The table is written while the delegates run (bridge.agent.policy.apply): when one fails, the
    rollback waits for that write and removes the table, and the ADD reports the delegate's failure."""
    world = World(cni_host)
    try:
        world.nad("pnnp-net1", node.plugin_config("net1"))
        world.nad("broken", {"cniVersion": "1.0.0", "name": "broken", "plugins": [{"type": "no-such-plugin"}]})
        state = listed_state(world, node, [FROM_CLIENTS])
        await start_agent(world, node, state)
        pod = pod_object("x", "a", {"pod": "a"})
        pod["metadata"]["annotations"][constants.NPWG_NETWORKS_ANNOTATION] = json.dumps([
            {"name": "broken", "namespace": "default", "interface": "net2"},  # fails first: before nft is done
            {"name": "pnnp-net1", "namespace": "default", "interface": "net1"}])
        world.objects.put(pod)
        netns = node.new_pod_netns("x", "a")
        answer = await world.cni("ADD", "c-x-a", netns, "a", namespace="x")
        assert answer.returncode != 0 and "no-such-plugin" in answer.stdout, answer.stdout
        assert not await nftables.exists(netns), "the table written beside the failed ADD stayed"
    finally:
        await world.cleanup()
