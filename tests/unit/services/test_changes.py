"""bridge.services.changes without a kernel: the commands that turn one compiled table into another,
run on a model of the table that refuses what the kernel refuses (a rule naming a set or chain
that is not there, a chain deleted while something refers to it or holds rules, an element
deleted that is not there, added twice). Applying the changes to the old table must give exactly
the new one, for any two tables the compiler writes; and an endpoint change must touch its
Service's chains only. The kernel doing the same, with real traffic: tests/cni/test_service_cluster_ips.py.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import services
from bridge.services import changes, dnat
from bridge.services.model import Endpoint, EndpointPort, Protocol, Service, ServicePort, SessionAffinity

ip = ipaddress.ip_address
PORTS = (ServicePort(80, Protocol.TCP, "http", "http"), ServicePort(53, Protocol.UDP, "dns", "dns"),
         ServicePort(7, Protocol.SCTP, "echo", "echo"))
ENDPOINT_PORTS = (EndpointPort("http", Protocol.TCP, 8080), EndpointPort("dns", Protocol.UDP, 5353),
                  EndpointPort("echo", Protocol.SCTP, 7))
CLIENT = services.ClientPod("x", "client", (
    services.attachment("blue", "net1", "10.1.0.9/24", "fd00:1::9"),
    services.attachment("red", "net2", "10.2.0.9"),
))
CLUSTER_IPS = ("10.96.0.10", "10.96.0.11", "fd00:96::10", "10.96.0.12")
ADDRESSES = ("10.1.0.20", "10.1.0.21", "10.1.0.22", "fd00:1::20", "fd00:1::21", "10.2.0.20")


class Model:
    """A table as the kernel holds it, changed by libnftables JSON commands the way the kernel
    accepts or refuses them (AssertionError for a command the kernel would refuse)."""

    def __init__(self) -> None:
        self.exists = False
        self.sets: dict[str, tuple[str, str]] = {}  # name -> (kind, declaration)
        self.elements: dict[str, dict[str, str]] = {}  # name -> key -> element
        self.chains: dict[str, str] = {}
        self.rules: dict[str, list[str]] = {}

    def run(self, commands: list[dict[str, Any]]) -> None:
        for command in commands:
            ((verb, body),) = command.items()
            ((kind, obj),) = body.items()
            if kind == "table":
                assert verb == "add"
                self.exists = True
                continue
            assert self.exists, f"no table for {command}"
            assert (obj["family"], obj["table"]) == (dnat.FAMILY, dnat.TABLE), command
            getattr(self, f"{verb}_{'set' if kind == 'map' else kind}")(kind, obj)

    def state(self) -> tuple[Any, ...]:
        return self.exists, self.sets, self.elements, self.chains, self.rules

    @staticmethod
    def references(value: Any) -> tuple[set[str], set[str]]:
        """The sets (`@name`) and chains (goto, jump) an expression or element names."""
        sets = {s[1:] for s in _strings(value) if s.startswith("@")}
        chains = {d[k]["target"] for d in _dicts(value) for k in ("goto", "jump") if k in d}
        return sets, chains

    def add_set(self, kind: str, obj: dict[str, Any]) -> None:
        declaration = json.dumps({k: v for k, v in obj.items() if k != "elem"}, sort_keys=True)
        assert obj["name"] not in self.sets, f"set {obj['name']} exists"
        self.sets[obj["name"]] = (kind, declaration)
        self.elements[obj["name"]] = {}
        if "elem" in obj:
            assert obj["elem"], "nft refuses an empty elem"
            self.add_element("element", obj)

    def delete_set(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["name"]
        assert self.sets.get(name, ("", ""))[0] == kind, f"no {kind} {name}"
        for chain, rules in self.rules.items():
            for rule in rules:
                assert name not in self.references(json.loads(rule))[0], f"{name} in use by chain {chain}"
        del self.sets[name], self.elements[name]

    def add_element(self, _: str, obj: dict[str, Any]) -> None:
        name = obj["name"]
        assert name in self.sets, f"no set {name}"
        kind = self.sets[name][0]
        for element in obj["elem"]:
            for chain in self.references(element)[1]:
                assert chain in self.chains, f"element {element} names chain {chain}, not there"
            key = changes.element_key(kind, element)
            assert key not in self.elements[name], f"element {element} exists in {name}"
            self.elements[name][key] = json.dumps(element, sort_keys=True)

    def delete_element(self, _: str, obj: dict[str, Any]) -> None:
        name = obj["name"]
        assert name in self.sets, f"no set {name}"
        for key in obj["elem"]:
            canon = json.dumps(key, sort_keys=True)
            assert canon in self.elements[name], f"no element {key} in {name}"
            del self.elements[name][canon]

    def add_chain(self, _: str, obj: dict[str, Any]) -> None:
        assert obj["name"] not in self.chains, f"chain {obj['name']} exists"
        self.chains[obj["name"]] = json.dumps(obj, sort_keys=True)
        self.rules[obj["name"]] = []

    def flush_chain(self, _: str, obj: dict[str, Any]) -> None:
        assert obj["name"] in self.chains, f"no chain {obj['name']}"
        self.rules[obj["name"]] = []

    def delete_chain(self, _: str, obj: dict[str, Any]) -> None:
        name = obj["name"]
        assert name in self.chains and not self.rules[name], f"chain {name} missing or not empty"
        for rules in self.rules.values():
            assert all(name not in self.references(json.loads(r))[1] for r in rules), f"chain {name} in use"
        for elements in self.elements.values():
            assert all(name not in self.references(json.loads(e))[1] for e in elements.values()), \
                f"chain {name} in a map"
        del self.chains[name], self.rules[name]

    def add_rule(self, _: str, obj: dict[str, Any]) -> None:
        assert obj["chain"] in self.chains, f"no chain {obj['chain']}"
        sets, chains = self.references(obj["expr"])
        assert sets <= self.sets.keys(), f"a rule names sets {sets - self.sets.keys()}, not there"
        assert chains <= self.chains.keys(), f"a rule names chains {chains - self.chains.keys()}, not there"
        self.rules[obj["chain"]].append(json.dumps(obj["expr"], sort_keys=True))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _dicts(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        return [value, *(d for v in value.values() for d in _dicts(v))]
    if isinstance(value, list):
        return [d for v in value for d in _dicts(v)]
    return []


def built(commands: tuple[dict[str, Any], ...]) -> Model:
    model = Model()
    model.run(list(commands))
    return model


def compiled(world: tuple[list[Service], dict[str, list[Endpoint]]]) -> tuple[dict[str, Any], ...]:
    return dnat.compile_pod(CLIENT, world[0], world[1]).commands


def service(n: int, network: str = "blue", cluster_ips: tuple[str, ...] = ("10.96.0.10",),
            ports: tuple[ServicePort, ...] = PORTS, affinity: SessionAffinity = SessionAffinity.NONE,
            timeout: int = 10800) -> Service:
    return Service("x", f"s{n}", network, tuple(ip(a) for a in cluster_ips), ports, affinity, timeout)


def endpoint(address: str, ready: bool = True) -> Endpoint:
    return Endpoint(ip(address), ENDPOINT_PORTS, ready, ready)


@st.composite
def worlds(draw: st.DrawFn, shared_ips: bool = True) -> tuple[list[Service], dict[str, list[Endpoint]]]:
    """Up to 4 Services and their endpoints; with `shared_ips`, Services may share a ClusterIP (no
    API server allows it, but the compiler must stay sound), else each has its own, as in a cluster."""
    out, endpoints = [], {}
    for n in draw(st.sets(st.integers(0, 3), max_size=4)):
        own = (f"10.96.0.{10 + n}", f"fd00:96::{10 + n}")
        svc = service(n, draw(st.sampled_from(("blue", "red"))),
                      tuple(draw(st.sets(st.sampled_from(CLUSTER_IPS if shared_ips else own), min_size=1,
                                         max_size=2))),
                      tuple(draw(st.sets(st.sampled_from(PORTS), min_size=1))),
                      draw(st.sampled_from(list(SessionAffinity))), draw(st.sampled_from((60, 10800))))
        out.append(svc)
        endpoints[svc.key] = [endpoint(a, draw(st.booleans())) for a in draw(st.sets(st.sampled_from(ADDRESSES)))]
    return out, endpoints


@settings(max_examples=300, deadline=None)
@given(worlds(), worlds())
def test_the_changes_applied_to_the_old_table_give_the_new_one_or_the_whole_table_is_written(
        old_world: Any, new_world: Any) -> None:
    old, new = compiled(old_world), compiled(new_world)
    delta = changes.changes(old, new)
    if delta is None:
        # Only when there is no table on a side, or a declaration (a set's timeout) changed.
        assert not old or not new or _declarations_differ(old, new)
        return
    model = built(old)
    model.run(delta)
    assert model.state() == built(new).state()
    if old == new:
        assert delta == []


def _declarations_differ(old: tuple[dict[str, Any], ...], new: tuple[dict[str, Any], ...]) -> bool:
    a, b = changes.read(old), changes.read(new)
    return any(a.sets[n] != b.sets[n] for n in a.sets.keys() & b.sets.keys()) or \
        any(a.chains[n] != b.chains[n] for n in a.chains.keys() & b.chains.keys())


@settings(max_examples=100, deadline=None)
@given(worlds(shared_ips=False), st.data())
def test_an_endpoint_change_of_one_service_touches_that_services_chains_only(world: Any, data: st.DataObject) -> None:
    services_, endpoints = world
    if not services_:
        return
    changed = data.draw(st.sampled_from(services_))
    after = copy.copy(endpoints)
    after[changed.key] = [endpoint(a) for a in data.draw(st.sets(st.sampled_from(ADDRESSES), min_size=1))]
    old, new = compiled(world), compiled((services_, after))
    delta = changes.changes(old, new)
    if not old or not new:  # no table on a side: nothing to change in place
        assert delta is None
        return
    assert delta is not None
    model = built(old)
    model.run(delta)
    assert model.state() == built(new).state()
    for command in delta:
        ((_, body),) = command.items()
        ((kind, obj),) = body.items()
        if kind == "chain":
            assert obj["name"] in ("reject", "dnat") or _owner(new, old, obj["name"]) == changed.key, command


def _owner(new: tuple[dict[str, Any], ...], old: tuple[dict[str, Any], ...], chain: str) -> str:
    """The Service a chain serves, by its comment (`namespace/name port ...`)."""
    for commands in (new, old):
        for c in commands:
            obj = c["add"].get("chain")
            if obj is not None and obj["name"] == chain:
                return str(obj["comment"]).split(" ")[0]
    raise AssertionError(f"no chain {chain}")


def test_one_endpoint_replaced_among_a_hundred_services_is_two_chains_refilled() -> None:
    """The benchmark's change (docs/benchmarks.md, "Services ... (the agent)"): of a table of 100
    Services with a TCP and a UDP port, one endpoint replaced is 4 commands, not ~400."""
    ports = PORTS[:2]
    many = [service(n, cluster_ips=(f"10.96.1.{n + 1}",), ports=ports) for n in range(100)]
    endpoints = {s.key: [endpoint(f"10.1.{n}.{k + 1}") for k in range(10)] for n, s in enumerate(many)}
    after = dict(endpoints)
    after["x/s7"] = [*endpoints["x/s7"][1:], endpoint("10.1.7.99")]
    old, new = compiled((many, endpoints)), compiled((many, after))
    delta = changes.changes(old, new)
    assert delta is not None and len(old) > 400
    assert [next(iter(c)) for c in delta] == ["flush", "flush", "add", "add"]
    model = built(old)
    model.run(delta)
    assert model.state() == built(new).state()


def test_a_new_service_adds_its_chains_and_elements_and_keeps_every_other_chain() -> None:
    one, two = service(1), service(2, cluster_ips=("10.96.0.11", "fd00:96::11"))
    endpoints = {one.key: [endpoint("10.1.0.20")], two.key: [endpoint("10.1.0.21"), endpoint("fd00:1::21")]}
    old, new = compiled(([one], endpoints)), compiled(([one, two], endpoints))
    delta = changes.changes(old, new)
    assert delta is not None
    verbs = {(next(iter(c)), next(iter(next(iter(c.values()))))) for c in delta}
    assert ("delete", "chain") not in verbs and ("flush", "chain") in verbs  # the base chains gain IPv6
    model = built(old)
    model.run(delta)
    assert model.state() == built(new).state()


def test_client_ip_affinity_keeps_an_endpoints_chain_and_set_when_the_others_change() -> None:
    svc = service(1, affinity=SessionAffinity.CLIENT_IP, ports=PORTS[:1])
    old = compiled(([svc], {svc.key: [endpoint("10.1.0.20"), endpoint("10.1.0.21")]}))
    new = compiled(([svc], {svc.key: [endpoint("10.1.0.21"), endpoint("10.1.0.22")]}))
    delta = changes.changes(old, new)
    assert delta is not None
    kept = {n for n in set(changes.read(old).sets) & set(changes.read(new).sets) if n.endswith("_clients")}
    assert len(kept) == 1  # 10.1.0.21's clients stay with it
    assert not any(obj.get("name") in kept for c in delta for body in c.values() for obj in body.values())


def test_no_table_on_either_side_or_a_changed_affinity_timeout_is_a_whole_write() -> None:
    svc = service(1, affinity=SessionAffinity.CLIENT_IP)
    endpoints = {svc.key: [endpoint("10.1.0.20")]}
    table = compiled(([svc], endpoints))
    assert changes.changes((), table) is None and changes.changes(table, ()) is None
    longer = service(1, affinity=SessionAffinity.CLIENT_IP, timeout=60)
    assert changes.changes(table, compiled(([longer], endpoints))) is None
    assert changes.changes(table, table) == []


def test_a_command_the_compiler_does_not_write_is_refused() -> None:
    with pytest.raises(ValueError, match="not a command of a compiled table"):
        changes.read([{"flush": {"chain": {"family": "inet", "table": dnat.TABLE, "name": "dnat"}}}])
    with pytest.raises(ValueError, match="not a libnftables JSON command"):
        changes.read([{"add": {}, "delete": {}}])
