"""bridge.agent.daemon.hotplug.decide: which networks a running container gains and loses when its
pod's selection changes (KEP Req 24), with NPWG 4.2.1 interface names. Pure: a cache record
and selection elements in, a Change out."""

from __future__ import annotations

import asyncio

import pytest

from bridge import npwg
from bridge.agent.daemon import hotplug
from bridge.agent.delegates.cache import Attachment, Record, State
from podnetwork.ground import constants
from podnetwork.ground.core import Pod


def record(*attached: tuple[str, str]) -> Record:
    """A complete record: the default network on eth0, then (network ref, ifname) pairs."""
    attachments = [Attachment("kubenet", "eth0", {}, default=True, state=State.ATTACHED)]
    attachments += [Attachment(ref, ifname, {}, state=State.ATTACHED) for ref, ifname in attached]
    return Record("ctr1", "/var/run/netns/x", "eth0", [["K8S_POD_UID", "uid-1"]], "team", "vm", True, None,
                  attachments)


def selection(text: str) -> list[npwg.NetworkSelectionElement]:
    return npwg.parse_selection(text, "team")


def summary(change: hotplug.Change) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    return ([(a.element.ref, a.ifname) for a in change.add], [(r.name, r.ifname) for r in change.remove])


def test_an_unchanged_selection_changes_nothing_and_a_changed_nad_is_not_a_change() -> None:
    change = hotplug.decide(record(("team/blue", "net1"), ("team/red", "data0")), selection("blue,red@data0"))
    assert not change
    assert change.describe() == "nothing to do"


def test_an_added_network_gets_the_next_free_generated_name_and_a_removed_one_is_detached() -> None:
    change = hotplug.decide(record(("team/blue", "net1"), ("team/red", "net2")), selection("blue,green"))
    assert summary(change) == ([("team/green", "net3")], [("team/red", "net2")])
    assert change.describe() == "attach team/green as net3; detach team/red (net2)"


def test_a_generated_name_skips_names_the_pod_already_uses() -> None:
    change = hotplug.decide(record(("team/blue", "net2")), selection("blue,green,red"))
    assert summary(change) == ([("team/green", "net1"), ("team/red", "net3")], [])


def test_an_added_network_gets_the_interface_it_asks_for() -> None:
    change = hotplug.decide(record(("team/blue", "net1")), selection("blue,green@data1"))
    assert summary(change) == ([("team/green", "data1")], [])


def test_npwg_4_2_the_same_network_twice_matches_attachments_in_order_and_adds_one() -> None:
    change = hotplug.decide(record(("team/blue", "net1")), selection("blue,blue"))
    assert summary(change) == ([("team/blue", "net2")], [])
    change = hotplug.decide(record(("team/blue", "net1"), ("team/blue", "net2")), selection("blue"))
    assert summary(change) == ([], [("team/blue", "net2")])


def test_a_network_moved_to_another_interface_is_detached_and_attached_again() -> None:
    change = hotplug.decide(record(("team/blue", "net1")), selection("blue@data0"))
    assert summary(change) == ([("team/blue", "data0")], [("team/blue", "net1")])


def test_removing_every_secondary_network_keeps_the_default_one() -> None:
    change = hotplug.decide(record(("team/blue", "net1"), ("team/red", "net2")), [])
    assert summary(change) == ([], [("team/blue", "net1"), ("team/red", "net2")])


@pytest.mark.parametrize("text", [
    '[{"name":"blue"},{"name":"green","default-route":[]}]',
    '[{"name":"blue"},{"name":"green","default-route":["10.1.0.1"]}]',
])
def test_an_added_network_that_asks_for_the_default_route_is_refused(text: str) -> None:
    with pytest.raises(hotplug.Refused, match=r"element 1 \(team/green\) asks for the pod's default route"):
        hotplug.decide(record(("team/blue", "net1")), selection(text))


@pytest.mark.parametrize(("text", "holder"), [("blue,green@eth0", "kubenet"), ("blue,green@net1", "team/blue")])
def test_an_added_network_cannot_take_an_interface_the_pod_uses(text: str, holder: str) -> None:
    with pytest.raises(hotplug.Refused, match=f"which {holder} already uses in the pod"):
        hotplug.decide(record(("team/blue", "net1")), selection(text))


def test_a_kept_network_may_keep_the_default_route_it_was_attached_with() -> None:
    rec = record(("team/blue", "net1"))
    change = hotplug.decide(rec, selection('[{"name":"blue","default-route":["10.1.0.1"]},{"name":"red"}]'))
    assert summary(change) == ([("team/red", "net2")], [])


def pod(uid: str = "uid-1", name: str = "vm", **annotations: str) -> Pod:
    return Pod.model_validate({"metadata": {"name": name, "namespace": "team", "uid": uid,
                                            "annotations": annotations}})


def test_a_record_belongs_to_the_pod_of_its_name_and_uid() -> None:
    rec = record()
    assert hotplug.belongs_to(rec, pod())
    assert not hotplug.belongs_to(rec, pod(uid="uid-2")), "a re-created pod of the same name is another pod"
    assert not hotplug.belongs_to(rec, pod(name="db"))
    rec.cni_args = []
    assert hotplug.belongs_to(rec, pod(uid="uid-2")), "without any UID the name decides"
    rec.pod_uid = "uid-1"  # the runtime passed no K8S_POD_UID: the UID the ADD read from the pod
    assert hotplug.belongs_to(rec, pod())
    assert not hotplug.belongs_to(rec, pod(uid="uid-2")), "a re-created pod of the same name is another pod"


def test_hotplug_watches_only_the_networks_annotations() -> None:
    a = pod(**{constants.NETWORKS_ANNOTATION: "[]", "other": "1"})
    b = pod(**{constants.NETWORKS_ANNOTATION: "[]", "other": "2", npwg.NETWORK_STATUS_ANNOTATION: "[]"})
    assert hotplug.networks_of(a) == hotplug.networks_of(b)
    c = pod(**{constants.NETWORKS_ANNOTATION: "[]", npwg.NETWORKS_ANNOTATION: "blue"})
    assert hotplug.networks_of(a) != hotplug.networks_of(c)


BLUE_SELECTION = '[{"name":"blue","namespace":"team"}]'


@pytest.mark.parametrize(("annotations", "wanted", "expected"), [
    ({}, "blue", True),  # NPWG-only pod: its selection is what the agent read
    ({constants.NETWORKS_ANNOTATION: "[]"}, "", True),  # nothing selected on either side
    ({constants.NETWORKS_ANNOTATION: "[]"}, "blue", False),  # the bridge has not written it yet
    ({constants.NETWORKS_ANNOTATION: "[]", npwg.NETWORKS_ANNOTATION: BLUE_SELECTION}, "blue", True),
    ({constants.NETWORKS_ANNOTATION: "[]", npwg.NETWORKS_ANNOTATION: "team/blue"}, "blue", True),
    ({constants.NETWORKS_ANNOTATION: "[]", npwg.NETWORKS_ANNOTATION: BLUE_SELECTION}, "blue,red", False),
    ({constants.NETWORKS_ANNOTATION: "[]", npwg.NETWORKS_ANNOTATION: "[oops"}, "blue", False),
], ids=["npwg-only", "both-empty", "not-written-yet", "agrees", "agrees-in-the-other-format", "stale",
        "unreadable"])
def test_a_kep_pod_changes_only_once_the_bridges_selection_agrees_with_its_networks(
    annotations: dict[str, str], wanted: str, expected: bool
) -> None:
    elements = selection(wanted) if wanted else []
    assert hotplug.settled(pod(**annotations), elements) is expected


async def test_only_a_change_of_the_networks_of_a_running_pod_of_this_node_is_queued(tmp_path) -> None:
    from bridge.agent.daemon.agent import Agent, AgentConfig
    from bridge.agent.kube.objects import MemoryObjects

    class Sink:
        async def post_event(self, body: object) -> None:
            raise AssertionError("nothing to report")

    hot = hotplug.HotPlug(Agent(MemoryObjects(), AgentConfig(cache_dir=tmp_path)), Sink(), "node-a")

    def body(node: str | None = "node-a", phase: str = "Running", **annotations: str) -> dict:
        return {"metadata": {"name": "vm", "namespace": "team", "uid": "uid-1", "annotations": annotations},
                "spec": {"nodeName": node}, "status": {"phase": phase}}

    for ignored in (body(node="node-b"), body(phase="Succeeded"), {"metadata": {"name": 5}}):
        hot.pod_changed(ignored)
        assert hot.idle.is_set(), ignored
    hot.pod_changed(body(**{constants.NETWORKS_ANNOTATION: "[]"}))
    assert not hot.idle.is_set(), "queued for the worker"
    assert await hot.handle(Pod.model_validate(body())) == [], "no container of it in the cache: nothing to do"


async def test_queued_pods_wait_as_the_watch_gave_them_and_the_worker_reads_each_in_turn(tmp_path) -> None:
    """A node's listing queues every pod: held as views too, it was held twice until the last was
    handled (a view is larger than its object; docs/benchmarks.md, "Agent RSS, every feature on")."""
    from bridge.agent.daemon.agent import Agent, AgentConfig
    from bridge.agent.kube.objects import MemoryObjects

    class Sink:
        async def post_event(self, body: object) -> None:
            raise AssertionError("nothing to report")

    hot = hotplug.HotPlug(Agent(MemoryObjects(), AgentConfig(cache_dir=tmp_path)), Sink(), "node-a")
    listing = [{"metadata": {"name": f"vm{i}", "namespace": "team", "annotations": {
        constants.NETWORKS_ANNOTATION: "[]"}}, "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}}
        for i in range(3)]
    for obj in listing:
        hot.pod_changed(obj)
    assert all(a is b for a, b in zip(hot._pending.values(), listing, strict=True))
    hot.start()
    try:
        async with asyncio.timeout(10):
            await hot.idle.wait()
    finally:
        await hot.stop()
    assert hot._pending == {}


def test_an_unreadable_npwg_selection_of_a_running_pod_is_refused_not_read_as_empty() -> None:
    with pytest.raises(hotplug.Refused, match=r"k8s.v1.cni.cncf.io/networks is invalid"):
        hotplug.check_selection(pod(**{npwg.NETWORKS_ANNOTATION: "[oops"}))
    hotplug.check_selection(pod(**{npwg.NETWORKS_ANNOTATION: "blue"}))
    # With KEP networks the bridge owns that annotation; `settled` waits for it instead.
    hotplug.check_selection(pod(**{npwg.NETWORKS_ANNOTATION: "[oops", constants.NETWORKS_ANNOTATION: "[]"}))


def test_a_deleted_pod_that_does_not_fit_the_pod_view_is_ignored(tmp_path) -> None:
    from bridge.agent.daemon.agent import Agent, AgentConfig
    from bridge.agent.kube.objects import MemoryObjects

    class Sink:
        async def post_event(self, body: object) -> None:
            raise AssertionError("nothing to report")

    hot = hotplug.HotPlug(Agent(MemoryObjects(), AgentConfig(cache_dir=tmp_path)), Sink(), "node-a")
    for unfit in ({"metadata": "junk"}, {"metadata": {"name": 5}}, ["not", "an", "object"]):
        hot.pod_deleted(unfit)  # type: ignore[arg-type]
    hot.pod_deleted({"metadata": {"name": "vm", "namespace": "team"}})
    assert hot.idle.is_set()


# --- a pod with the KEP's explicit list: its first network is on eth0, in place of the default ---


def explicit_record(*attached: tuple[str, str]) -> Record:
    """A complete record of a pod whose KEP networks leave out `default`: blue on eth0, then the rest."""
    rec = record(*attached)
    rec.attachments[0] = Attachment("team/blue", "eth0", {}, default=True, state=State.ATTACHED)
    rec.explicit = True
    return rec


def test_an_explicit_list_keeps_its_first_network_on_eth0_and_adds_a_second() -> None:
    change = hotplug.decide(explicit_record(), selection("blue,red"), explicit=True)
    assert summary(change) == ([("team/red", "net1")], [])
    change = hotplug.decide(explicit_record(("team/red", "net1")), selection("blue"), explicit=True)
    assert summary(change) == ([], [("team/red", "net1")])
    assert not hotplug.decide(explicit_record(("team/red", "net1")), selection("blue,red"), explicit=True)


@pytest.mark.parametrize("text", ["red", "red,blue", "green,red"])
def test_the_first_network_of_an_explicit_list_cannot_be_removed_or_replaced(text: str) -> None:
    with pytest.raises(hotplug.Refused, match=r"team/blue holds the pod's eth0 .* cannot be removed or replaced"):
        hotplug.decide(explicit_record(("team/red", "net1")), selection(text), explicit=True)


def test_the_default_network_cannot_be_removed_from_or_added_to_a_running_pod() -> None:
    with pytest.raises(hotplug.Refused, match=r"the cluster default network .* cannot be removed"):
        hotplug.decide(record(("team/blue", "net1")), selection("blue"), explicit=True)
    with pytest.raises(hotplug.Refused, match=r"the cluster default network cannot be added"):
        hotplug.decide(explicit_record(), selection("blue"), explicit=False)


def test_a_refusal_in_an_explicit_list_names_the_element_by_its_place_in_the_pods_list() -> None:
    with pytest.raises(hotplug.Refused, match=r"selection element 2 \(team/green\) asks for the pod's default route"):
        hotplug.decide(explicit_record(), selection('[{"name":"blue"},{"name":"red"},{"name":"green",'
                                                    '"default-route":[]}]'), explicit=True)
