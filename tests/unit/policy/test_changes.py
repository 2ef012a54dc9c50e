"""`changes.affected`: the pods a change of the world can reach. On random worlds (the x/y/z × a/b/c
topology and random policies) and random changes (pods' labels, addresses, ports, pods coming
and going, policies coming, going and changing, a namespace's labels, a network), every pod
outside the answer compiles to the same ruleset before and after: recompiling only the answer
equals recompiling every pod. Hypothesis, bounded in examples."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import policy as netpol
from bridge.agent.policy import decide as enforcement
from bridge.policy import changes, rules, scope
from tests import policy_cases
from tests.policy_cases import DEFAULT_TOPOLOGY as T
from tests.unit.policy.test_rules_agree_with_the_evaluator import POLICIES

Change = Callable[[netpol.World], netpol.World]
PORTS = (netpol.ContainerPort("serve-80-tcp", netpol.Protocol.TCP, 80),
         netpol.ContainerPort("serve-80-udp", netpol.Protocol.UDP, 8080),
         netpol.ContainerPort("serve-81-tcp", netpol.Protocol.TCP, 81))


def _rebuilt(world: netpol.World, *, pods: Any = None, namespaces: Any = None, networks: Any = None,
             policies: Any = None) -> netpol.World:
    return netpol.World.build(
        world.pods.values() if pods is None else pods,
        world.namespaces.values() if namespaces is None else namespaces,
        world.networks.values() if networks is None else networks,
        world.policies if policies is None else policies,
    )


def _with_pod(world: netpol.World, pod: netpol.PodInfo) -> netpol.World:
    pods = dict(world.pods)
    pods[pod.key] = pod
    return _rebuilt(world, pods=pods.values())


def _pod(key: str, labels: dict[str, str], address: str | None, ports: tuple[netpol.ContainerPort, ...],
         other: bool) -> netpol.PodInfo:
    namespace, name = key.split("/")
    interfaces = [] if address is None else [netpol.interface(T.network, "net1", address)]
    if other:
        interfaces.append(netpol.interface(T.other_network, "net2", "10.98.0.7"))
    return netpol.pod_info(namespace, name, labels, ports=ports, interfaces=interfaces)


KEYS = st.sampled_from([*policy_cases.POD_KEYS, "x/d", "z/new"])
LABELS = st.sampled_from([{"pod": "a"}, {"pod": "b"}, {"pod": "c"}, {"pod": "d"}, {}, {"pod": "a", "extra": "1"}])
ADDRESSES = st.one_of(st.none(), st.sampled_from(["10.99.0.11", "10.99.0.200", "10.99.0.33", "10.99.0.40"]))
PORT_SETS = st.sampled_from([PORTS, PORTS[:1], (), PORTS[1:]])
POD_CHANGES = st.builds(
    lambda key, labels, address, ports, other: (lambda w: _with_pod(w, _pod(key, labels, address, ports, other))),
    KEYS, LABELS, ADDRESSES, PORT_SETS, st.booleans())
POD_REMOVALS = st.builds(
    lambda key: (lambda w: _rebuilt(w, pods=[p for p in w.pods.values() if p.key != key])), KEYS)


def _policy_added(raw: dict[str, Any], name: str) -> Change:
    raw["metadata"]["name"] = name
    parsed = netpol.parse_policy(raw)
    return lambda w: _rebuilt(w, policies=[*(p for p in w.policies if p.key != parsed.key), parsed])


def _policy_replaced(raw: dict[str, Any], index: int) -> Change:
    def change(w: netpol.World) -> netpol.World:
        if not w.policies:
            return w
        old = w.policies[index % len(w.policies)]
        raw["metadata"].update(namespace=old.namespace, name=old.name)
        new = netpol.parse_policy(raw)
        return _rebuilt(w, policies=[new if p.key == old.key else p for p in w.policies])
    return change


POLICY_CHANGES = st.one_of(
    st.builds(_policy_added, POLICIES, st.sampled_from(["p0", "new"])),
    st.builds(_policy_replaced, POLICIES, st.integers(0, 5)),
    st.builds(lambda i: (lambda w: _rebuilt(w, policies=[p for j, p in enumerate(w.policies) if j != i])),
              st.integers(0, 3)),
)
OTHER_CHANGES = st.sampled_from([
    lambda w: _rebuilt(w, namespaces=[netpol.namespace_info(n.name, {"ns": "y"} if n.name == "z" else n.labels)
                                      for n in w.namespaces.values()]),
    lambda w: _rebuilt(w, networks=[n for n in w.networks.values() if n.key != T.other_network]),
])
CHANGES = st.lists(st.one_of(POD_CHANGES, POD_CHANGES, POD_REMOVALS, POLICY_CHANGES, OTHER_CHANGES),
                   min_size=1, max_size=3)


def _documents(world: netpol.World) -> dict[str, Any]:
    scopes = scope.scopes(world)
    memo = rules.Memo(world)
    return {key: rules.compile_pod(world, key, scopes, memo).document for key in world.pods}


@settings(max_examples=150, deadline=None)
@given(st.lists(POLICIES, min_size=1, max_size=3), CHANGES)
def test_the_pods_a_change_cannot_reach_compile_to_the_same_ruleset(
        policies: list[dict[str, Any]], steps: list[Change]) -> None:
    for i, p in enumerate(policies):
        p["metadata"]["name"] = f"p{i}"
    before = policy_cases.world(T, policies)
    after = before
    for step in steps:
        after = step(after)
    reached = changes.affected(before, after, after.pods)
    if reached is None:
        return
    old, new = _documents(before), _documents(after)
    for key in after.pods:
        if key not in reached:
            assert key in old and old[key] == new[key], key


def test_a_peer_pod_s_change_reaches_only_the_pods_whose_policies_name_it() -> None:
    policies = policy_cases.case("allow-from-same-namespace").policies(T)
    before = policy_cases.world(T, policies)
    moved = _with_pod(before, _pod("y/b", {"pod": "b"}, "10.99.0.201", PORTS, False))
    # allow-from-same-namespace isolates x's pods and names x's pods: y/b's address reaches no one else.
    assert changes.affected(before, moved, before.pods) == {"y/b"}
    newcomer = _with_pod(before, _pod("x/d", {"pod": "d"}, "10.99.0.202", PORTS, False))
    assert changes.affected(before, newcomer, newcomer.pods) == {"x/a", "x/b", "x/c", "x/d"}
    assert changes.affected(before, before, before.pods) == set()
    relabelled = _rebuilt(before, namespaces=[netpol.namespace_info(n, {"ns": n, "new": "1"})
                                              for n in policy_cases.NAMESPACES])
    assert changes.affected(before, relabelled, before.pods) is None
    assert ipaddress.ip_address("10.99.0.202") in newcomer.pods["x/d"].addresses_on(T.network)


@settings(max_examples=60, deadline=None)
@given(st.lists(POLICIES, min_size=1, max_size=3), st.lists(CHANGES, min_size=1, max_size=3))
def test_a_pass_from_the_previous_one_decides_what_a_pass_from_nothing_decides(
        policies: list[dict[str, Any]], rounds: list[list[Change]]) -> None:
    """The agent's passes (`enforcement.decide_from`), each from the last: the same steps and tables
    as deciding every pod afresh, round after round."""
    for i, p in enumerate(policies):
        p["metadata"]["name"] = f"p{i}"
    world = policy_cases.world(T, policies)

    def locals_of(w: netpol.World) -> list[enforcement.Local]:
        return [enforcement.Local(f"c-{key}", key, f"/run/netns/{key}", ()) for key in w.pods]

    applied: dict[str, Any] = {}
    previous: enforcement.Pass | None = None
    for steps in [[], *rounds]:
        for step in steps:
            world = step(world)
        scopes = scope.scopes(world)
        got, previous = enforcement.decide_from(world, scopes, locals_of(world), applied, previous)
        assert got == enforcement.decide(world, scopes, locals_of(world), applied)
        assert {key: table for key, (table, _) in previous.compiled.items()} == _documents(world)
        applied = {step.container_id: step.document for step in got} | {
            c: d for c, d in applied.items() if c not in {s.container_id for s in got}}
