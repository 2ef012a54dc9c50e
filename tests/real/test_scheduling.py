"""Scheduling on a real cluster: kube-scheduler v1.36 (the cluster's default scheduler) with our
extender registered in it, our controller's requeue nudge and the bridge's scheduling gate.

What kube-scheduler makes of the extender's answers (the PodScheduled condition, the
FailedScheduling Event, retrying when the network turns Ready) and what a gated pod shows
instead are only seen here: the extender tier (tests/api/extender/) proves the answers.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.real.cluster_support import PODNETWORK, Api, Cluster, Node, eventually, pod_manifest
from tests.real.objects_support import (
    FINALIZER,
    HOLD,
    PODNETWORKS,
    Made,
    condition,
    events_of,
    pods,
    unique,
)

OFFERS = "multinetwork.x-k8s.io/podnetworks"
GATE = "multinetwork.x-k8s.io/npwg-selection"


def _pod(api: Api, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = api.get(f"{pods(ns)}/{name}")
    return found


def _unschedulable(api: Api, ns: str, name: str, words: str) -> dict[str, Any]:
    """The pod's PodScheduled=False condition once kube-scheduler has said `words` in it."""
    def said() -> dict[str, Any] | None:
        found = condition(_pod(api, ns, name), "PodScheduled")
        return found if found and found["status"] == "False" and words in found.get("message", "") else None

    result: dict[str, Any] = eventually(said, f"pod {name} is unschedulable saying {words!r}", timeout=60)
    return result


def _bound(api: Api, ns: str, name: str) -> str:
    result: str = eventually(lambda: _pod(api, ns, name)["spec"].get("nodeName"), f"pod {name} is bound",
                             timeout=60)
    return result


def _ready(api: Api, network: str, status: str) -> None:
    eventually(lambda: (c := condition(api.find(f"{PODNETWORKS}/{network}"), "Ready")) and c["status"] == status,
               f"PodNetwork {network} has Ready {status}")


def test_a_pod_naming_a_podnetwork_that_is_not_ready_is_pending_with_the_extenders_reason_until_it_turns_ready(
        api: Api, made: Made, ns: str, node: Node, control_plane: Cluster) -> None:
    network = unique("later")
    made.podnetwork(network, enabled=False)
    _ready(api, network, "False")
    made.pod(ns, pod_manifest("waiting", networks=[{"podNetworkName": network}]))

    scheduled = _unschedulable(api, ns, "waiting", f'podnetwork "{network}" is not Ready: AdministrativelyDisabled')
    assert scheduled["reason"] == "Unschedulable"
    assert not _pod(api, ns, "waiting")["spec"].get("nodeName")
    event = eventually(lambda: events_of(api, ns, "waiting", "FailedScheduling"), "a FailedScheduling Event")
    assert f'podnetwork "{network}" is not Ready' in event[-1]["message"]
    # what a user asks next: the chain from the pod to its network, broken at the network
    explained = subprocess.run([str(PODNETWORK), "explain", "pod", f"{ns}/waiting"], env=control_plane.env(),
                               capture_output=True, text=True, timeout=60)
    assert explained.returncode == 1, explained.stdout + explained.stderr
    assert network in explained.stdout and "AdministrativelyDisabled" in explained.stdout

    api.merge_patch(f"{PODNETWORKS}/{network}", {"spec": {"enabled": True}})
    assert _bound(api, ns, "waiting") == node.name
    # kube-scheduler watches no PodNetworks: the controller's touch is what sent the pod back to it
    assert "multinetwork.x-k8s.io/requeued-at" in _pod(api, ns, "waiting")["metadata"]["annotations"]


def test_a_pod_of_an_admission_exempt_namespace_naming_a_missing_podnetwork_is_pending_until_it_exists(
        api: Api, made: Made, ns: str, node: Node) -> None:
    # no webhook sees this namespace's pods, so no gate holds the pod: kube-scheduler and the extender decide
    api.merge_patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {"multinetwork.x-k8s.io/admission":
                                                                         "disabled"}}})
    network = unique("missing")
    made.pod(ns, pod_manifest("early", networks=[{"podNetworkName": network}]))
    scheduled = _unschedulable(api, ns, "early", f'podnetwork "{network}" not found')
    assert scheduled["reason"] == "Unschedulable"
    assert not _pod(api, ns, "early")["spec"].get("schedulingGates")
    events = eventually(lambda: events_of(api, ns, "early", "FailedScheduling"), "a FailedScheduling Event")
    assert f'podnetwork "{network}" not found' in events[-1]["message"]

    made.podnetwork(network)
    assert _bound(api, ns, "early") == node.name


def test_a_pod_naming_a_missing_podnetwork_is_held_by_the_bridges_gate_with_its_reason_until_it_exists(
        api: Api, made: Made, ns: str, node: Node) -> None:
    network = unique("gated")
    made.pod(ns, pod_manifest("gated", networks=[{"podNetworkName": network}]))
    pod = _pod(api, ns, "gated")
    # the bridge cannot tell yet whether the network will be one of its own, so it holds the pod
    assert {"name": GATE} in pod["spec"]["schedulingGates"]
    scheduled = eventually(lambda: condition(_pod(api, ns, "gated"), "PodScheduled"), "PodScheduled is written")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "SchedulingGated")
    said = eventually(lambda: events_of(api, ns, "gated", "SchedulingGated"), "the bridge's SchedulingGated Event")
    assert f'podnetwork "{network}" not found; the pod stays behind scheduling gate {GATE}' in said[0]["message"]
    # kube-scheduler never saw it
    assert not events_of(api, ns, "gated", "FailedScheduling")

    made.podnetwork(network)
    assert _bound(api, ns, "gated") == node.name
    assert not _pod(api, ns, "gated")["spec"].get("schedulingGates")


def test_a_pod_naming_a_podnetwork_being_deleted_is_pending_as_terminating(
        api: Api, made: Made, ns: str, node: Node) -> None:
    network = unique("leaving")
    made.podnetwork(network)
    _ready(api, network, "True")
    made.pod(ns, pod_manifest("holder", networks=[{"podNetworkName": network}], schedulingGates=[HOLD]))
    eventually(lambda: FINALIZER in api.get(f"{PODNETWORKS}/{network}")["metadata"].get("finalizers", []),
               "the holder keeps the network")
    api.delete(f"{PODNETWORKS}/{network}")
    made.pod(ns, pod_manifest("late", networks=[{"podNetworkName": network}]))
    scheduled = _unschedulable(api, ns, "late", f'podnetwork "{network}" is not Ready: Terminating')
    assert scheduled["reason"] == "Unschedulable"


@pytest.fixture
def second_node(control_plane: Cluster, node: Node) -> Iterator[Node]:
    """A node without our agent: these tests only need kube-scheduler to bind pods to it."""
    index = 2  # a node index no other test of the session holds now
    while any(n.name.endswith(f"-n{index}") for n in control_plane.nodes.values()):
        index += 1
    added = control_plane.add_node(index)
    try:
        yield added
    finally:
        control_plane.remove_node(added)
        eventually(lambda: control_plane.api and control_plane.api.find(f"/api/v1/nodes/{added.name}") is None,
                   f"node {added.name} is gone", timeout=60)


def test_a_pod_is_bound_only_to_a_node_that_offers_its_podnetwork(
        api: Api, node: Node, second_node: Node, made: Made, ns: str) -> None:
    network = unique("avail")
    made.podnetwork(network)
    _ready(api, network, "True")
    made.annotate_node(node.name, OFFERS, json.dumps([network]))
    made.annotate_node(second_node.name, OFFERS, json.dumps([]))
    # the controller took the new node up as well
    eventually(lambda: (c := condition(api.get(f"/api/v1/nodes/{second_node.name}"), "DefaultPodNetworkReady"))
               and c["status"] == "True", "the second node has DefaultPodNetworkReady True")

    def pinned(name: str, to: Node) -> dict[str, Any]:
        return pod_manifest(name, networks=[{"podNetworkName": network}],
                            nodeSelector={"kubernetes.io/hostname": to.name})

    made.pod(ns, pinned("offered", node))
    made.pod(ns, pinned("refused", second_node))
    assert _bound(api, ns, "offered") == node.name
    scheduled = _unschedulable(api, ns, "refused", f'podnetwork "{network}" is not available on this node')
    assert scheduled["reason"] == "Unschedulable"
    events = eventually(lambda: events_of(api, ns, "refused", "FailedScheduling"), "a FailedScheduling Event")
    assert f"0/{len(api.get('/api/v1/nodes')['items'])} nodes are available" in events[-1]["message"]
    assert f'1 podnetwork "{network}" is not available on this node' in events[-1]["message"]

    made.annotate_node(second_node.name, OFFERS, json.dumps([network]))
    assert _bound(api, ns, "refused") == second_node.name
    # kube-scheduler alone would not have retried it (NodeAffinity, not the extender, is its rejector):
    # the controller's touch, for the node's new offer, did
    assert "multinetwork.x-k8s.io/requeued-at" in _pod(api, ns, "refused")["metadata"]["annotations"]
