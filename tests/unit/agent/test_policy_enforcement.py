"""MultiNetworkPolicy on the node, without a kernel: what the agent keeps of the cluster
(`policystate`), the pure decision of which local tables change (`enforcement`), and the
enforcer's loop with appliers that record (`enforcer`: debounce, retries, fail closed, DEL).
The real nft in real namespaces with real traffic: tests/cni/test_policy_enforcement.py."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.agent.delegates.cache import Attachment, Record, State
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube import watchcache
from bridge.agent.netns import nftables
from bridge.agent.netns.local import local_of, planned_local
from bridge.agent.policy import decide as enforcement
from bridge.agent.policy.apply import Enforcer, Settings
from bridge.agent.policy.state import KINDS, PolicyState
from bridge.policy import rules, scope, views
from bridge.policy.world import World
from podnetwork.ground import constants
from podnetwork.ground.core import Pod
from tests.unit.policy_world_support import afresh, assert_same_world

NET = "blue"  # a PodNetwork of the bridge, backed by NAD default/blue-nad


def pod(namespace: str, name: str, labels: Mapping[str, str], *, ip: str | None = None, ifname: str | None = "net1",
        node: str = "other", phase: str = "Running") -> dict[str, Any]:
    annotations = {}
    if ip is not None:
        entry: dict[str, Any] = {"name": "default/blue-nad", "ips": [ip]}
        if ifname is not None:
            entry["interface"] = ifname
        annotations[constants.NPWG_NETWORK_STATUS_ANNOTATION] = json.dumps([entry])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "labels": dict(labels), "annotations": annotations},
            "spec": {"nodeName": node, "containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]},
            "status": {"phase": phase}}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def nad(namespace_: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"namespace": namespace_, "name": name}, "spec": {"config": "{}"}}


def podnetwork(name: str, nad_name: str) -> dict[str, Any]:
    return {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": name},
            "spec": {"enabled": True, "provider": "multinetwork.x-k8s.io/npwg-bridge", "parametersRefs": [
                {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": nad_name,
                 "namespace": "default"}]}}


def policy(namespace_: str, name: str, spec: Mapping[str, Any], network: str = NET) -> dict[str, Any]:
    return {"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
            "metadata": {"namespace": namespace_, "name": name,
                         "annotations": {constants.POLICY_FOR_PODNETWORK_ANNOTATION: network}},
            "spec": dict(spec)}


DENY_INGRESS = {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]}
FROM_WEB = {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]}


def record(container: str, namespace_: str, name: str, ip: str = "10.1.0.5", ifname: str = "net1",
           netns: str = "/var/run/netns/x") -> Record:
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "br"}, {"name": ifname, "sandbox": netns}],
              "ips": [{"address": f"{ip}/24", "interface": 1}, {"address": "10.9.9.9/24", "interface": 0}]}
    return Record(container, netns, "eth0", pod_namespace=namespace_, pod_name=name, complete=True, attachments=[
        Attachment("kubenet", "eth0", {}, default=True, state=State.ATTACHED,
                   result={"ips": [{"address": "10.0.0.5/24"}]}),
        Attachment("default/blue-nad", ifname, {}, state=State.ATTACHED, result=result),
        Attachment("default/red-nad", "net2", {}, state=State.INTENT),
    ])


def state_with(*objects: dict[str, Any], node: str | None = "here") -> PolicyState:
    state = PolicyState(node=node)
    by_kind = {k.name: k for k in KINDS}
    for kind in KINDS:
        state.listed(kind, [o for o in objects if o["kind"] == kind.name])
    assert set(by_kind) == state.synced
    return state


BASE = (namespace("db"), namespace("web", team="web"), nad("default", "blue-nad"), podnetwork(NET, "blue-nad"))


# --- the record's view of a local pod ----------------------------------------------------------


def test_a_local_pod_is_its_records_attached_secondary_interfaces_with_their_own_addresses() -> None:
    local = local_of(record("c1", "db", "db-0"))
    assert local.pod == "db/db-0" and local.netns == "/var/run/netns/x"
    # Not the default network's, not an attachment still an intent; only the IPs on net1 itself.
    assert [(i.network, i.interface, [str(a) for a in i.addresses]) for i in local.interfaces] == [
        ("default/blue-nad", "net1", ["10.1.0.5"])]


def test_the_compiler_gets_the_interface_name_from_the_record_when_the_status_names_none() -> None:
    # The status (as an older writer left it) names no interface: from it alone, the isolated
    # network could not be enforced and the pod would be open.
    objects = (*BASE, pod("db", "db-0", {"app": "db"}, ip="10.1.0.5", ifname=None, node="here"),
               policy("db", "deny", DENY_INGRESS))
    state = state_with(*objects)
    from_status = rules.compile_pod(state.world(), "db/db-0")
    assert from_status.document is None and from_status.unenforced
    local = local_of(record("c1", "db", "db-0"))
    info = enforcement.pod_info_of(local, state.pods["db/db-0"], state.by_nad())
    world = state.world({"db/db-0": info})
    steps = enforcement.decide(world, scope.scopes(world), [local], {})
    assert len(steps) == 1 and steps[0].document is not None and steps[0].unenforced == ()
    assert '"net1"' in json.dumps(steps[0].document)


def test_a_local_pod_keeps_its_watched_labels_and_ports_and_the_addresses_its_status_adds() -> None:
    state = state_with(*BASE, pod("db", "db-0", {"app": "db"}, ip="10.1.0.77", node="here"))
    local = local_of(record("c1", "db", "db-0", ip="10.1.0.5"))
    info = enforcement.pod_info_of(local, state.pods["db/db-0"], state.by_nad())
    assert dict(info.labels) == {"app": "db"} and info.named_port("http", info.ports[0].protocol) == 8080
    # Keyed by the PodNetwork the NAD backs; the record's address first, then the status's.
    assert [(i.network, i.interface, [str(a) for a in i.addresses]) for i in info.interfaces] == [
        (NET, "net1", ["10.1.0.5", "10.1.0.77"])]
    unseen = enforcement.pod_info_of(local, None, state.by_nad())
    assert dict(unseen.labels) == {} and unseen.key == "db/db-0"


# --- the decision --------------------------------------------------------------------------------


def decide(state: PolicyState, applied: Mapping[str, Any], *records: Record) -> list[enforcement.Step]:
    locals_ = [local_of(r) for r in records]
    infos = {lo.pod: enforcement.pod_info_of(lo, state.pods.get(lo.pod), state.by_nad()) for lo in locals_}
    world = state.world(infos)
    return enforcement.decide(world, scope.scopes(world), locals_, applied)


def test_a_table_is_written_when_it_changes_only_and_removed_when_no_policy_applies() -> None:
    state = state_with(*BASE, pod("db", "db-0", {"app": "db"}, node="here"), policy("db", "deny", DENY_INGRESS))
    first = decide(state, {}, record("c1", "db", "db-0"))
    assert [(s.container_id, s.document is not None) for s in first] == [("c1", True)]
    assert decide(state, {"c1": first[0].document}, record("c1", "db", "db-0")) == []
    state.changed(watchcache.POLICY, "DELETED", policy("db", "deny", DENY_INGRESS))
    gone = decide(state, {"c1": first[0].document}, record("c1", "db", "db-0"))
    assert [(s.container_id, s.document) for s in gone] == [("c1", None)]
    assert decide(state, {"c1": None}, record("c1", "db", "db-0")) == []


def test_after_a_restart_every_table_is_unknown_so_each_pod_gets_its_table_written_or_removed() -> None:
    state = state_with(*BASE, pod("db", "db-0", {"app": "db"}, node="here"), pod("db", "other", {"app": "x"}, node="here"),
                       policy("db", "deny", DENY_INGRESS))
    steps = decide(state, {"c1": enforcement.UNKNOWN, "c2": enforcement.UNKNOWN},
                   record("c1", "db", "db-0"), record("c2", "db", "other"))
    assert {s.container_id: s.document is not None for s in steps} == {"c1": True, "c2": False}


def test_a_new_peer_pods_address_joins_the_allow_set_and_its_labels_leaving_take_it_out() -> None:
    state = state_with(*BASE, pod("db", "db-0", {"app": "db"}, node="here"), policy("db", "from-web", FROM_WEB))
    before = decide(state, {}, record("c1", "db", "db-0"))[0].document
    assert "10.1.0.42" not in json.dumps(before)
    state.changed(watchcache.POD, "ADDED", pod("db", "web-1", {"app": "web"}, ip="10.1.0.42"))
    after = decide(state, {"c1": before}, record("c1", "db", "db-0"))
    assert len(after) == 1 and "10.1.0.42" in json.dumps(after[0].document)
    state.changed(watchcache.POD, "MODIFIED", pod("db", "web-1", {"app": "other"}, ip="10.1.0.42"))
    again = decide(state, {"c1": after[0].document}, record("c1", "db", "db-0"))
    assert len(again) == 1 and "10.1.0.42" not in json.dumps(again[0].document)


def test_the_containers_of_one_pod_share_one_compiled_table() -> None:
    state = state_with(*BASE, pod("db", "db-0", {"app": "db"}, node="here"), policy("db", "deny", DENY_INGRESS))
    steps = decide(state, {}, record("c1", "db", "db-0"), record("c2", "db", "db-0", netns="/var/run/netns/y"))
    assert [s.container_id for s in steps] == ["c1", "c2"] and steps[0].document is steps[1].document


# --- what the agent keeps --------------------------------------------------------------------------


def test_only_what_policies_read_is_kept_and_changes_that_touch_nothing_change_nothing() -> None:
    state = state_with(*BASE)
    version = state.version
    state.changed(watchcache.POD, "ADDED", pod("web", "no-address", {"app": "web"}))  # no secondary address
    state.changed(watchcache.POD, "ADDED", pod("web", "ended", {"app": "web"}, ip="10.1.0.9", phase="Succeeded"))
    assert state.pods == {} and state.version == version
    state.changed(watchcache.POD, "ADDED", pod("web", "on-this-node", {"app": "web"}, node="here"))
    state.changed(watchcache.POD, "ADDED", pod("web", "peer", {"app": "web"}, ip="10.1.0.9"))
    assert sorted(state.pods) == ["web/on-this-node", "web/peer"]
    version = state.version
    changed_status_only = pod("web", "peer", {"app": "web"}, ip="10.1.0.9")
    changed_status_only["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    state.changed(watchcache.POD, "MODIFIED", changed_status_only)
    assert state.version == version  # nothing a policy reads changed: no pass
    state.changed(watchcache.POD, "MODIFIED", pod("web", "peer", {"app": "web", "v": "2"}, ip="10.1.0.9"))
    assert state.version == version + 1


def test_a_podnetwork_made_after_its_pods_still_finds_their_addresses() -> None:
    state = state_with(namespace("db"), nad("default", "blue-nad"), pod("db", "peer", {"app": "web"}, ip="10.1.0.9"))
    assert state.world().pods["db/peer"].interfaces[0].network == "default/blue-nad"
    state.changed(watchcache.PODNETWORK, "ADDED", podnetwork(NET, "blue-nad"))
    assert state.world().pods["db/peer"].interfaces[0].network == NET


def test_an_invalid_policy_is_said_once_per_change_and_a_valid_one_that_turns_invalid_stays_in_force(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "bridge.agent.policy.state")
    state = state_with(*BASE)
    bad = policy("db", "bad", {"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]})
    for _ in range(3):
        state.changed(watchcache.POLICY, "MODIFIED", bad)
    said = [r.message for r in caplog.records if "db/bad" in r.message]
    assert len(said) == 1 and "it applies to nothing" in said[0] and "ICMP" in said[0]
    assert "db/bad" not in state.policies
    state.changed(watchcache.POLICY, "ADDED", policy("db", "typo", DENY_INGRESS))
    typo = policy("db", "typo", {**DENY_INGRESS, "policyTypes": ["Ingres"]})
    state.changed(watchcache.POLICY, "MODIFIED", typo)
    assert "db/typo" in state.policies  # the last valid version isolates as before
    assert any("stays in force" in r.message for r in caplog.records)
    state.changed(watchcache.POLICY, "MODIFIED", policy("db", "typo", FROM_WEB))
    assert state.policies["db/typo"].spec.ingress


def test_findings_of_a_policys_scope_are_logged_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "bridge.agent.policy.state")
    state = state_with(*BASE, policy("db", "nowhere", DENY_INGRESS, network="no-such-net"))
    for _ in range(3):
        state.note(scope.scopes(state.world()))
    said = [r.message for r in caplog.records if "db/nowhere" in r.message]
    assert len(said) == 1 and "NetworkNotFound" in said[0]
    state.changed(watchcache.PODNETWORK, "ADDED", podnetwork("no-such-net", "blue-nad"))
    state.note(scope.scopes(state.world()))
    assert state.findings["db/nowhere"] == ()


class NotInstalled(Exception):
    status = 404


def test_a_missing_policy_crd_is_said_once_and_counts_as_no_policies(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "bridge.agent.policy.state")
    state = PolicyState()
    for kind in KINDS:
        if kind is not watchcache.POLICY:
            state.listed(kind, [])
    assert not state.ready
    for _ in range(5):  # the watch's retries
        state.failed(watchcache.POLICY, NotInstalled("404"))
    assert state.ready and state.policies == {}
    said = [r.message for r in caplog.records if "CRD is not installed" in r.message]
    assert len(said) == 1
    state.listed(watchcache.POLICY, [policy("db", "deny", DENY_INGRESS)])
    assert "db/deny" in state.policies and any("served now" in r.message for r in caplog.records)


# --- the enforcer, with appliers that record ------------------------------------------------------


class Kernel:
    """Stands for nft: what each namespace holds, and failures on demand."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.failing: dict[str, Exception] = {}

    async def apply(self, netns: str, document: Mapping[str, Any], *, timeout: float) -> None:
        self.calls.append(("apply", netns))
        nftables.document(document)  # refuses what the real applier refuses
        if netns in self.failing:
            raise self.failing[netns]
        self.tables[netns] = dict(document)

    async def remove(self, netns: str, *, timeout: float) -> None:
        self.calls.append(("remove", netns))
        if netns in self.failing:
            raise self.failing[netns]
        self.tables.pop(netns, None)


FAST = Settings(quiet=0.01, max_delay=0.05, retry_first=0.02, retry_max=0.1, ready_timeout=0.2)


def pod_view(namespace_: str, name: str, labels: Mapping[str, str]) -> Pod:
    return Pod.model_validate({"metadata": {"namespace": namespace_, "name": name, "labels": dict(labels)}})


async def test_add_writes_the_table_before_it_answers_and_an_nft_failure_fails_it_closed() -> None:
    kernel = Kernel()
    enforcer = Enforcer(state_with(*BASE, policy("db", "deny", DENY_INGRESS)), FAST,
                        apply=kernel.apply, remove=kernel.remove)
    await enforcer.added(record("c1", "db", "db-0", netns="/n/1"), pod_view("db", "db-0", {"app": "db"}))
    assert "/n/1" in kernel.tables  # written by the time the ADD's hook returns
    await enforcer.added(record("c2", "db", "web-0", netns="/n/2"), pod_view("db", "web-0", {"app": "web"}))
    assert "/n/2" not in kernel.tables and ("apply", "/n/2") not in kernel.calls  # no policy: no nft at all
    kernel.failing["/n/3"] = nftables.NftablesError("/n/3", "apply our nftables table", "nft said: Error: boom")
    with pytest.raises(CNIError) as failed:
        await enforcer.added(record("c3", "db", "db-1", netns="/n/3"), pod_view("db", "db-1", {"app": "db"}))
    assert failed.value.code == ErrorCode.POLICY_NOT_ENFORCED and "boom" in failed.value.details
    assert "c3" not in enforcer.locals


async def test_add_writes_the_table_from_the_plan_and_the_pass_after_the_delegates_keeps_it() -> None:
    """The ADD writes the table beside the delegates, from the planned interfaces (no address yet):
    the passes after it, with the address, compile the same table (a pod's own addresses are in
    no set of its own), and the other local pods its policies name get its address."""
    kernel = Kernel()
    own_app = {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "db"}}}]}]}
    enforcer = Enforcer(state_with(*BASE, policy("db", "own-app", own_app)), FAST,
                        apply=kernel.apply, remove=kernel.remove)
    try:
        first = record("c1", "db", "db-0", ip="10.1.0.5", netns="/n/1")
        await enforcer.added(first, pod_view("db", "db-0", {"app": "db"}))
        await enforcer.reconcile()
        second = record("c2", "db", "db-1", ip="10.1.0.6", netns="/n/2")
        planned = planned_local(second, [("default/blue-nad", "net1")])
        assert planned.interfaces and not planned.interfaces[0].addresses
        await enforcer.added(second, pod_view("db", "db-1", {"app": "db"}), local=planned)
        written = kernel.tables["/n/2"]
        await enforcer.attached(second)
        calls = len(kernel.calls)
        await enforcer.reconcile()
        assert kernel.tables["/n/2"] == written  # not written again: the same table
        assert kernel.calls[calls:] == [("apply", "/n/1")]  # db-0 now allows from db-1's address
        assert "10.1.0.6" in json.dumps(kernel.tables["/n/1"]) and "10.1.0.6" not in json.dumps(written)
        assert "10.1.0.5" in json.dumps(written)
    finally:
        await enforcer.stop()


async def test_add_before_the_policies_are_read_is_try_again_later() -> None:
    enforcer = Enforcer(PolicyState(), FAST, apply=Kernel().apply, remove=Kernel().remove)
    with pytest.raises(CNIError) as failed:
        await enforcer.added(record("c1", "db", "db-0"), pod_view("db", "db-0", {"app": "db"}))
    assert failed.value.code == ErrorCode.TRY_AGAIN_LATER and "MultiNetworkPolicy" in failed.value.details


async def test_a_burst_of_changes_is_one_write_per_pod_and_rules_follow_a_policy_and_its_removal() -> None:
    kernel = Kernel()
    state = state_with(*BASE, pod("db", "db-0", {"app": "db"}, node="here"))
    enforcer = Enforcer(state, FAST, apply=kernel.apply, remove=kernel.remove)
    enforcer.start([record("c1", "db", "db-0", netns="/n/1")])
    try:
        await asyncio.wait_for(enforcer.idle(), 5)
        assert kernel.calls == [("remove", "/n/1")]  # after a start, a table may be there: removed once
        for i in range(50):
            state.changed(watchcache.POD, "MODIFIED", pod("db", f"web-{i}", {"app": "web"}, ip=f"10.1.{i}.7"))
        state.changed(watchcache.POLICY, "ADDED", policy("db", "from-web", FROM_WEB))
        await asyncio.sleep(0)
        await asyncio.wait_for(enforcer.idle(), 5)
        assert kernel.calls[1:] == [("apply", "/n/1")]
        assert all(f"10.1.{i}.7" in json.dumps(kernel.tables["/n/1"]) for i in range(50))
        state.changed(watchcache.POLICY, "DELETED", policy("db", "from-web", FROM_WEB))
        await asyncio.sleep(0)
        await asyncio.wait_for(enforcer.idle(), 5)
        assert kernel.calls[2:] == [("remove", "/n/1")] and "/n/1" not in kernel.tables
    finally:
        await enforcer.stop()


async def test_a_failed_write_is_logged_and_retried_with_backoff_and_a_gone_namespace_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kernel = Kernel()
    state = state_with(*BASE, pod("db", "db-0", {"app": "db"}, node="here"), pod("db", "db-1", {"app": "db"}, node="here"),
                       policy("db", "deny", DENY_INGRESS))
    kernel.failing["/n/1"] = nftables.NftablesError("/n/1", "apply our nftables table", "nft said: Error: no memory")
    kernel.failing["/n/2"] = nftables.NetnsGone("/n/2", "apply our nftables table", "gone")
    enforcer = Enforcer(state, FAST, apply=kernel.apply, remove=kernel.remove)
    enforcer.start([record("c1", "db", "db-0", netns="/n/1"), record("c2", "db", "db-1", netns="/n/2")])
    try:
        for _ in range(100):
            if enforcer.retries.get("c1", (0, 0.0))[0] >= 3:
                break
            await asyncio.sleep(0.02)
        assert enforcer.retries["c1"][0] >= 3 and kernel.calls.count(("apply", "/n/2")) == 1
        logged = [r.message for r in caplog.records if "/n/1" in r.message]
        assert logged and "db/db-0" in logged[0] and "no memory" in logged[0]
        del kernel.failing["/n/1"]
        await asyncio.wait_for(enforcer.idle(), 5)
        assert "/n/1" in kernel.tables and "c1" not in enforcer.retries
    finally:
        await enforcer.stop()


async def test_del_removes_a_table_only_where_one_may_be() -> None:
    kernel = Kernel()
    enforcer = Enforcer(state_with(*BASE, policy("db", "deny", DENY_INGRESS)), FAST,
                        apply=kernel.apply, remove=kernel.remove)
    await enforcer.added(record("c1", "db", "db-0", netns="/n/1"), pod_view("db", "db-0", {"app": "db"}))
    await enforcer.added(record("c2", "db", "web", netns="/n/2"), pod_view("db", "web", {"app": "web"}))
    await enforcer.deleted("c1", "/n/1")
    await enforcer.deleted("c2", "/n/2")
    assert kernel.calls == [("apply", "/n/1"), ("remove", "/n/1")] and kernel.tables == {}
    assert enforcer.locals == {} and "db/db-0" not in enforcer.state.local


def test_the_world_the_enforcer_builds_is_a_world() -> None:
    assert isinstance(state_with(*BASE).world(), World)
    assert views.reported_interfaces(Pod.model_validate(pod("a", "b", {}, ip="10.0.0.1")).metadata)


_EVENTS = st.sampled_from([
    (watchcache.POD, "MODIFIED", pod("db", "web-0", {"app": "web"}, ip="10.1.1.7")),
    (watchcache.POD, "MODIFIED", pod("db", "web-0", {"app": "other"}, ip="10.1.1.7")),
    (watchcache.POD, "MODIFIED", pod("db", "web-0", {"app": "web"}, ip="10.1.1.8")),
    (watchcache.POD, "DELETED", pod("db", "web-0", {"app": "web"})),
    (watchcache.POD, "ADDED", pod("web", "w-1", {"app": "web"}, ip="10.1.2.9")),
    (watchcache.POD, "MODIFIED", pod("db", "db-0", {"app": "db"}, ip="10.1.0.5", node="here")),
    (watchcache.POD, "MODIFIED", pod("db", "db-0", {"app": "web"}, ip="10.1.0.5", node="here")),
    (watchcache.POLICY, "ADDED", policy("db", "from-web", FROM_WEB)),
    (watchcache.POLICY, "DELETED", policy("db", "from-web", FROM_WEB)),
    (watchcache.POLICY, "ADDED", policy("db", "from-team", {
        "podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "web"}}}]}]})),
    (watchcache.POLICY, "ADDED", policy("db", "deny", DENY_INGRESS)),
    (watchcache.NAMESPACE, "MODIFIED", namespace("web", team="none")),
    (watchcache.NAMESPACE, "MODIFIED", namespace("web", team="web")),
    # The networks: pods' NAD named by its PodNetwork, by itself, or by no network at all.
    (watchcache.PODNETWORK, "DELETED", podnetwork(NET, "blue-nad")),
    (watchcache.PODNETWORK, "ADDED", podnetwork(NET, "blue-nad")),
    (watchcache.NAD, "DELETED", nad("default", "blue-nad")),
    (watchcache.NAD, "ADDED", nad("default", "blue-nad")),
    # This node's containers, as their records have them (no Pod object for db-2).
    (None, "record", {"container": "c3", "pod": "db-2", "ip": "10.1.0.9"}),
    (None, "record", {"container": "c2", "pod": "db-1", "ip": "10.1.0.16"}),
])


@settings(max_examples=40, deadline=None)
@given(st.lists(_EVENTS, min_size=1, max_size=12))
async def test_the_enforcer_s_incremental_passes_decide_what_deciding_every_pod_afresh_does(
        events: list[tuple[watchcache.Kind | None, str, dict[str, Any]]]) -> None:
    state = state_with(*BASE, pod("db", "db-0", {"app": "db"}, node="here"), pod("db", "db-1", {"app": "web"}, node="here"),
                       pod("db", "web-0", {"app": "web"}, ip="10.1.1.7"))
    enforcer = Enforcer(state, FAST, apply=Kernel().apply, remove=Kernel().remove)
    enforcer.track(record("c1", "db", "db-0", ip="10.1.0.5"))
    enforcer.track(record("c2", "db", "db-1", ip="10.1.0.6"))
    await enforcer.reconcile()
    for kind, event, obj in events:
        if kind is None:
            enforcer.locals[obj["container"]] = local_of(record(obj["container"], "db", obj["pod"], ip=obj["ip"]))
        else:
            state.changed(kind, event, obj)
        await enforcer.reconcile()
        by_nad = state.by_nad()
        local = {local.pod: enforcement.pod_info_of(local, state.pods.get(local.pod), by_nad)
                 for local in enforcer.locals.values()}
        world, index = afresh(state, local)  # every pod keyed anew, as passes once built it
        assert_same_world(enforcer.world(), world, index)
        keys = {local.pod for local in enforcer.locals.values()}
        fresh = {key: rules.compile_pod(world, key, scope.scopes(world)).document for key in keys}
        if state.policies:
            assert enforcer.last is not None
            assert {key: table for key, (table, _) in enforcer.last.compiled.items()} == fresh
        else:  # decided without compiling: no table anywhere, and the next policy's pass starts afresh
            assert enforcer.last is None and set(fresh.values()) <= {None}
        assert all(enforcer.applied[cid] == fresh[local.pod] for cid, local in enforcer.locals.items())
