"""The Services' ClusterIPs on the node, without a kernel: what the agent keeps of the cluster
(`servicestate`), the pure decision of which client pods' tables change (`serving`), and the
reconciler with appliers that record (`servicer`: fail open at ADD, retries, DEL, conntrack).
The real nft, routes and traffic through the agent: tests/cni/test_service_enforcement.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from bridge.agent.delegates.cache import Attachment, Record, State
from bridge.agent.kube.watchcache import ENDPOINTSLICE, SERVICE
from bridge.agent.netns import nftables
from bridge.agent.netns.local import local_of
from bridge.agent.netns.reconciler import Settings
from bridge.agent.policy import decide as enforcement
from bridge.agent.services import decide as serving
from bridge.agent.services.apply import ClusterIPs
from bridge.agent.services.state import KINDS, ServiceState
from bridge.services import Ruleset
from podnetwork.ground import constants

NET = "blue"  # a PodNetwork of the bridge, backed by NAD default/blue-nad
CLUSTER_IP = "10.96.0.10"


def podnetwork(name: str = NET, nad_name: str = "blue-nad") -> dict[str, Any]:
    return {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetwork", "metadata": {"name": name},
            "spec": {"enabled": True, "provider": "multinetwork.x-k8s.io/npwg-bridge", "parametersRefs": [
                {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": nad_name,
                 "namespace": "default"}]}}


def service(name: str = "db", *, network: str | None = NET, proxied: bool = True, cluster_ip: str = CLUSTER_IP,
            ports: tuple[tuple[str, str, int], ...] = (("sql", "TCP", 5432), ("dns", "UDP", 53))) -> dict[str, Any]:
    labels = {constants.SERVICE_PROXY_NAME_LABEL: constants.SERVICE_PROXY_NAME} if proxied else {}
    annotations = {constants.SERVICE_PODNETWORK_ANNOTATION: network} if network else {}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": "app", "name": name, "labels": labels, "annotations": annotations},
            "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "selector": {"app": name},
                     "ports": [{"name": n, "protocol": p, "port": port, "targetPort": port} for n, p, port in ports]}}


def endpoint_slice(name: str, service_name: str, *addresses: str, ready: bool = True,
                   managed_by: str = constants.ENDPOINTSLICE_MANAGED_BY) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"namespace": "app", "name": name, "labels": {
                constants.ENDPOINTSLICE_MANAGED_BY_LABEL: managed_by,
                constants.ENDPOINTSLICE_SERVICE_NAME_LABEL: service_name}},
            "endpoints": [{"addresses": [a], "conditions": {"ready": ready}} for a in addresses],
            "ports": [{"name": "sql", "protocol": "TCP", "port": 15432}, {"name": "dns", "protocol": "UDP", "port": 1053}]}


def record(container: str, name: str, ip: str = "10.1.0.5", netns: str = "/n/1", nad: str = "default/blue-nad",
           ) -> Record:
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "br"}, {"name": "net1", "sandbox": netns}],
              "ips": [{"address": f"{ip}/24", "interface": 1}]}
    return Record(container, netns, "eth0", pod_namespace="app", pod_name=name, complete=True, attachments=[
        Attachment("kubenet", "eth0", {}, default=True, state=State.ATTACHED,
                   result={"ips": [{"address": "10.0.0.5/24"}]}),
        Attachment(nad, "net1", {}, state=State.ATTACHED, result=result),
    ])


def listed(*objects: dict[str, Any]) -> ServiceState:
    state = ServiceState()
    for kind in KINDS:
        state.listed(kind, [o for o in objects if o["kind"] == kind.name])
    assert state.ready
    return state


BASE = (podnetwork(), service(), endpoint_slice("db.ipv4.0", "db", "10.1.0.20", "10.1.0.21"))


# --- what the agent keeps ----------------------------------------------------------------------


def test_the_state_keeps_only_labelled_annotated_services_and_our_slices_and_maps_nads_to_podnetworks() -> None:
    state = listed(*BASE, service("plain", network=None), service("kube-proxys", proxied=False),
                   service("headless", cluster_ip="None"),
                   endpoint_slice("db-abcde", "db", "10.0.0.99", managed_by="endpointslice-controller.k8s.io"))
    assert set(state.services) == {"app/db"}
    assert set(state.slices) == {"app/db.ipv4.0"}  # the upstream controller's slice is not kept
    assert [str(e.address) for e in state.endpoints()["app/db"]] == ["10.1.0.20", "10.1.0.21"]
    assert state.by_nad() == {"default/blue-nad": NET}


def test_a_change_that_does_not_change_what_rules_read_pokes_nothing() -> None:
    pokes: list[int] = []
    state = listed(*BASE)
    state.on_change = lambda: pokes.append(state.version)
    state.changed(SERVICE, "MODIFIED", service())  # the same
    state.changed(SERVICE, "MODIFIED", service("other", network=None))  # not ours
    assert pokes == []
    state.changed(ENDPOINTSLICE, "MODIFIED", endpoint_slice("db.ipv4.0", "db", "10.1.0.20"))
    state.changed(SERVICE, "DELETED", service())
    assert len(pokes) == 2
    assert state.endpoints() == {}  # endpoints of a Service not kept are not served


class Gone(Exception):
    status = 404


def test_a_kind_not_served_is_said_once_counts_as_none_and_is_followed_once_served(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "bridge.agent.services.state")
    state = listed(*BASE)
    pokes: list[int] = []
    state.on_change = lambda: pokes.append(state.version)
    for _ in range(3):  # the watch's retries
        state.failed(ENDPOINTSLICE, Gone("404"))
    said = [r.message for r in caplog.records if "answered 404" in r.message]
    assert len(said) == 1 and said[0].startswith("services: ") and state.ready
    assert state.endpoints() == {} and len(pokes) == 1  # forgotten once, then nothing to change
    state.failed(ENDPOINTSLICE, OSError("connection reset"))  # a watch that ends keeps what was read
    assert len(pokes) == 1 and any("keeping what was read" in r.message for r in caplog.records)
    state.listed(ENDPOINTSLICE, [BASE[2]])
    assert "app/db" in state.endpoints() and any("served now" in r.message for r in caplog.records)


# --- the decision ------------------------------------------------------------------------------


def decide(state: ServiceState, applied: Mapping[str, Any], *records: Record) -> list[enforcement.Step[serving.Tables]]:
    return serving.decide(list(state.services.values()), state.endpoints(), state.by_nad(),
                          [local_of(r) for r in records], applied)


def test_a_pod_on_the_network_gets_the_cluster_ip_through_its_records_interface_and_address() -> None:
    state = listed(*BASE)
    [step] = decide(state, {}, record("c1", "client"))
    assert step.document is not None
    assert [(r.destination, r.interface, r.source) for r in step.document.ruleset.routes] == [
        (f"{CLUSTER_IP}/32", "net1", "10.1.0.5")]
    assert step.document.udp == {(CLUSTER_IP, "10.1.0.20"), (CLUSTER_IP, "10.1.0.21")}  # the UDP port's pairs


def test_a_pod_on_another_network_gets_no_table_and_an_unknown_namespace_is_cleaned() -> None:
    state = listed(*BASE)
    other = record("c2", "elsewhere", nad="default/red-nad")
    assert decide(state, {"c2": None}, other) == []  # nothing there, nothing wanted
    [step] = decide(state, {}, other)  # unknown (after a restart): removed to be sure
    assert step.document is None


def test_an_unchanged_pod_takes_no_step_and_an_endpoint_change_is_one_step_with_the_leaving_udp_pair() -> None:
    state = listed(*BASE)
    [first] = decide(state, {}, record("c1", "client"))
    assert decide(state, {"c1": first.document}, record("c1", "client")) == []
    state.changed(ENDPOINTSLICE, "MODIFIED", endpoint_slice("db.ipv4.0", "db", "10.1.0.21", "10.1.0.22"))
    [second] = decide(state, {"c1": first.document}, record("c1", "client"))
    assert serving.stale_udp(first.document, second.document) == [(CLUSTER_IP, "10.1.0.20")]
    assert serving.stale_udp(second.document, None) == [(CLUSTER_IP, "10.1.0.21"), (CLUSTER_IP, "10.1.0.22")]
    assert serving.stale_udp(enforcement.UNKNOWN, second.document) == []


def test_the_service_going_removes_the_table() -> None:
    state = listed(*BASE)
    [first] = decide(state, {}, record("c1", "client"))
    state.changed(SERVICE, "DELETED", service())
    [step] = decide(state, {"c1": first.document}, record("c1", "client"))
    assert step.document is None


# --- the reconciler, with appliers that record -------------------------------------------------


class Kernel:
    """Namespaces' rulesets, as applied; `failing` makes the next writes in a namespace fail."""

    def __init__(self) -> None:
        self.tables: dict[str, Ruleset] = {}
        self.flushed: list[tuple[str, tuple[str, str]]] = []
        self.failing: dict[str, int] = {}
        self.writes: list[tuple[str, str]] = []
        """(netns, "whole" or "in place") per table written."""

    async def apply(self, netns: str, ruleset: Ruleset, *, timeout: float) -> None:
        if self.failing.get(netns, 0) > 0:
            self.failing[netns] -= 1
            raise nftables.NftablesError(netns, "apply", "nft said: Error: boom")
        self.tables[netns] = ruleset
        self.writes.append((netns, "whole"))

    async def update(self, netns: str, before: Ruleset, after: Ruleset, delta: list[Any] | None, *,
                     timeout: float) -> bool:
        """As clusterips.update: in place only from the table there, else whole."""
        if delta is None or self.tables.get(netns) != before:
            await self.apply(netns, after, timeout=timeout)
            return False
        self.tables[netns] = after
        self.writes.append((netns, "in place"))
        return True

    async def remove(self, netns: str, *, timeout: float) -> None:
        self.tables.pop(netns, None)

    async def flush(self, netns: str, pairs: list[tuple[str, str]], *, timeout: float, conntrack: str) -> int:
        self.flushed.extend((netns, p) for p in pairs)
        return len(pairs)


FAST = Settings(quiet=0.01, max_delay=0.05, retry_first=0.02, retry_max=0.1, ready_timeout=0.2)


def served(state: ServiceState, kernel: Kernel) -> ClusterIPs:
    return ClusterIPs(state, FAST, apply=kernel.apply, update=kernel.update, remove=kernel.remove,
                      flush=kernel.flush)


async def test_add_writes_the_cluster_ips_before_it_answers_and_the_loop_follows_endpoints_and_flushes_udp() -> None:
    kernel, state = Kernel(), listed(*BASE)
    agent = served(state, kernel)
    await agent.added(record("c1", "client"))
    assert "/n/1" in kernel.tables  # written by the time the ADD's hook returns
    agent.start()
    try:
        state.changed(ENDPOINTSLICE, "MODIFIED", endpoint_slice("db.ipv4.0", "db", "10.1.0.21"))
        await asyncio.wait_for(agent.idle(), 5)
        assert agent.applied["c1"] is not None and agent.applied["c1"] != enforcement.UNKNOWN
        assert kernel.flushed == [("/n/1", (CLUSTER_IP, "10.1.0.20"))]
        state.changed(SERVICE, "DELETED", service())
        await asyncio.wait_for(agent.idle(), 5)
        assert "/n/1" not in kernel.tables
        assert ("/n/1", (CLUSTER_IP, "10.1.0.21")) in kernel.flushed
    finally:
        await agent.stop()


async def test_the_first_write_and_one_after_a_restart_are_whole_and_an_endpoint_change_is_in_place() -> None:
    kernel, state = Kernel(), listed(*BASE)
    agent = served(state, kernel)
    agent.start([record("c1", "client")])  # recorded before a restart: what is there is unknown
    try:
        await asyncio.wait_for(agent.idle(), 5)
        state.changed(ENDPOINTSLICE, "MODIFIED", endpoint_slice("db.ipv4.0", "db", "10.1.0.21"))
        await asyncio.wait_for(agent.idle(), 5)
        assert kernel.writes == [("/n/1", "whole"), ("/n/1", "in place")] and agent.in_place == 1
        tables = agent.applied["c1"]
        assert isinstance(tables, serving.Tables) and kernel.tables["/n/1"] == tables.ruleset
        assert kernel.flushed == [("/n/1", (CLUSTER_IP, "10.1.0.20"))]
    finally:
        await agent.stop()


async def test_add_fails_open_when_the_write_fails_and_the_loop_retries_until_it_passes(caplog: Any) -> None:
    kernel, state = Kernel(), listed(*BASE)
    kernel.failing["/n/1"] = 2  # the ADD's write and the first retry fail
    agent = served(state, kernel)
    await agent.added(record("c1", "client"))  # no exception: the pod starts
    assert "/n/1" not in kernel.tables and "fails open" in caplog.text
    agent.start()
    try:
        await asyncio.wait_for(agent.idle(), 5)
        assert "/n/1" in kernel.tables and "c1" not in agent.retries
    finally:
        await agent.stop()


async def test_add_before_the_services_are_read_starts_the_pod_and_serves_it_once_they_are() -> None:
    kernel, state = Kernel(), ServiceState()
    agent = served(state, kernel)
    agent.start()
    try:
        await agent.added(record("c1", "client"))  # waits ready_timeout, then goes on
        assert kernel.tables == {} and agent.missing_kinds() == [k.name for k in KINDS]
        for kind in KINDS:
            state.listed(kind, [o for o in BASE if o["kind"] == kind.name])
        await asyncio.wait_for(agent.idle(), 5)
        assert "/n/1" in kernel.tables
    finally:
        await agent.stop()


async def test_del_removes_the_table_and_forgets_the_container() -> None:
    kernel, state = Kernel(), listed(*BASE)
    agent = served(state, kernel)
    await agent.added(record("c1", "client"))
    await agent.deleted("c1", "/n/1")
    assert kernel.tables == {} and agent.locals == {} and agent.applied == {}
    assert kernel.flushed == [("/n/1", (CLUSTER_IP, "10.1.0.20")), ("/n/1", (CLUSTER_IP, "10.1.0.21"))]


async def test_at_start_a_recorded_pod_is_reconciled_and_one_no_service_applies_to_is_cleaned() -> None:
    kernel, state = Kernel(), listed(*BASE)
    kernel.tables["/n/2"] = Ruleset("app/elsewhere", ())  # what a previous agent may have left
    agent = served(state, kernel)
    agent.start([record("c1", "client"), record("c2", "elsewhere", netns="/n/2", nad="default/red-nad")])
    try:
        await asyncio.wait_for(agent.idle(), 5)
        assert set(kernel.tables) == {"/n/1"}
    finally:
        await agent.stop()


def test_pods_of_one_shape_share_a_compilation_and_each_gets_exactly_its_own_compiled_tables() -> None:
    state = listed(*BASE, service("dual", cluster_ip="10.96.0.11"))
    records = [record(f"c{i}", f"client-{i}", ip=f"10.1.0.{i + 5}", netns=f"/n/{i}") for i in range(3)]
    steps = decide(state, {}, *records)
    for r, step in zip(records, steps, strict=True):
        own = serving.tables_of(serving.client_of(local_of(r), state.by_nad()),
                                list(state.services.values()), state.endpoints())
        assert step.document == own  # as if compiled for this pod alone
    assert {s.document.ruleset.routes[0].source for s in steps if s.document} == {"10.1.0.5", "10.1.0.6", "10.1.0.7"}
