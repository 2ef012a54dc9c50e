"""The upstream NetworkPolicy e2e topology and truth tables, as data, for MultiNetworkPolicy.

Shaped after Kubernetes' `test/e2e/network/netpol`: namespaces x, y, z (labelled `ns=x|y|z`),
pods a, b, c in each (labelled `pod=a|b|c`), each serving TCP and UDP on ports 80 and 81
under the named container ports `serve-80-tcp`, `serve-81-tcp`, `serve-80-udp`,
`serve-81-udp`. A case is a set of policies and, per probe (protocol and port), the expected
matrix of who reaches whom on the policies' network.

The expectations are written by hand from NetworkPolicy's semantics, in the way the upstream
suite writes them (`Reachability.expect(from, to, allowed)` over patterns such as `x/*`,
`*/a`, `x/a`); nothing here is computed by this project's evaluator. A pod always reaches
itself. Policies are built from a `Topology` (the network to name, the other network that
must stay open, the pods' addresses), so a harness with other addresses or a NAD-backed
network uses the same cases: `case.policies(topology)`.

Used by tests/unit/policy (the reference evaluator against these tables) and by the
real-traffic tests (the data path against them).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge import policy as netpol
from podnetwork.ground import constants

NAMESPACES: tuple[str, ...] = ("x", "y", "z")
PODS: tuple[str, ...] = ("a", "b", "c")
POD_KEYS: tuple[str, ...] = tuple(f"{ns}/{pod}" for ns in NAMESPACES for pod in PODS)
#: The named container ports every pod has: (name, protocol, port).
CONTAINER_PORTS: tuple[tuple[str, str, int], ...] = (
    ("serve-80-tcp", "TCP", 80),
    ("serve-81-tcp", "TCP", 81),
    ("serve-80-udp", "UDP", 80),
    ("serve-81-udp", "UDP", 81),
)


def namespace_labels(namespace: str) -> dict[str, str]:
    return {"ns": namespace}


def pod_labels(pod_key: str) -> dict[str, str]:
    return {"pod": pod_key.split("/")[1]}


@dataclass(frozen=True)
class Topology:
    """Where the cases run: the network the policies name, another network they must leave
    open, the subnet of the policies' network, each pod's address on it, and the annotation
    naming the network (the PodNetwork one by default; a NAD-backed harness may use
    `k8s.v1.cni.cncf.io/policy-for` with the NAD's name)."""

    network: str = "policy-net"
    other_network: str = "other-net"
    subnet: str = "10.99.0.0/24"
    addresses: Mapping[str, str] = field(
        default_factory=lambda: {
            f"{ns}/{pod}": f"10.99.0.{10 * (i + 1) + j + 1}"
            for i, ns in enumerate(NAMESPACES)
            for j, pod in enumerate(PODS)
        }
    )
    annotation: str = constants.POLICY_FOR_PODNETWORK_ANNOTATION

    def host(self, pod_key: str) -> str:
        """The pod's address as a host CIDR (`/32` or `/128`)."""
        address = self.addresses[pod_key]
        return f"{address}/{128 if ':' in address else 32}"


DEFAULT_TOPOLOGY = Topology()


def policy(t: Topology, namespace: str, name: str, spec: dict[str, Any], *, network: str | None = None) -> dict[str, Any]:
    """A MultiNetworkPolicy object for the topology's network (or `network`)."""
    return {
        "apiVersion": constants.POLICY_API_VERSION,
        "kind": constants.POLICY_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {t.annotation: network or t.network},
        },
        "spec": spec,
    }


class Reachability:
    """The expected matrix: every pair allowed unless an expectation says otherwise, in the order
    given (a later one overrides); a pod reaching itself is always allowed (as upstream's
    `AllowLoopback`)."""

    def __init__(self, default: bool = True) -> None:
        self.default = default
        self.rules: list[tuple[str, str, bool]] = []

    def expect(self, source: str, destination: str, allowed: bool) -> Reachability:
        self.rules.append((source, destination, allowed))
        return self

    def allowed(self, source: str, destination: str) -> bool:
        if source == destination:
            return True
        verdict = self.default
        for src, dst, value in self.rules:
            if fnmatch.fnmatchcase(source, src) and fnmatch.fnmatchcase(destination, dst):
                verdict = value
        return verdict

    def matrix(self) -> dict[tuple[str, str], bool]:
        return {(s, d): self.allowed(s, d) for s in POD_KEYS for d in POD_KEYS}


def render(matrix: Mapping[tuple[str, str], bool]) -> str:
    """A matrix as the upstream suite prints it: rows are sources, `.` allowed, `X` blocked."""
    lines = ["      " + " ".join(f"{d:>3}" for d in POD_KEYS)]
    for s in POD_KEYS:
        lines.append(f"{s:>5} " + " ".join(f"{'.' if matrix[(s, d)] else 'X':>3}" for d in POD_KEYS))
    return "\n".join(lines)


@dataclass(frozen=True)
class Probe:
    """What a probe sends: `TCP`, `UDP` or `SCTP` to a port, or `ICMP` (an echo request, no port)."""

    protocol: str
    port: int | None = None

    def __str__(self) -> str:
        return self.protocol if self.port is None else f"{self.protocol}/{self.port}"


TCP80, TCP81, UDP80, UDP81, ICMP = Probe("TCP", 80), Probe("TCP", 81), Probe("UDP", 80), Probe("UDP", 81), Probe("ICMP")


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    policies: Callable[[Topology], list[dict[str, Any]]]
    expected: Mapping[Probe, Reachability]


def _same(reach: Reachability, *probes: Probe) -> dict[Probe, Reachability]:
    return dict.fromkeys(probes, reach)


OPEN = Reachability()

CASES: tuple[Case, ...] = (
    Case(
        "no-policy",
        "Without policies every pod reaches every pod, on every port and protocol.",
        lambda t: [],
        _same(OPEN, TCP80, TCP81, UDP80, ICMP),
    ),
    Case(
        "deny-all-ingress",
        "An empty podSelector with no ingress rules isolates every pod of x for ingress.",
        lambda t: [policy(t, "x", "deny-all", {"podSelector": {}, "policyTypes": ["Ingress"]})],
        _same(Reachability().expect("*", "x/*", False), TCP80, TCP81, UDP80, ICMP),
    ),
    Case(
        "deny-all-ingress-defaulted",
        "policyTypes absent and no rules: the policy is of type Ingress (defaulting), x is isolated.",
        lambda t: [policy(t, "x", "deny-all", {"podSelector": {}})],
        _same(Reachability().expect("*", "x/*", False), TCP80, TCP81),
    ),
    Case(
        "deny-all-egress",
        "An empty podSelector with policyTypes [Egress] and no rules: pods of x reach nothing.",
        lambda t: [policy(t, "x", "deny-all-egress", {"podSelector": {}, "policyTypes": ["Egress"]})],
        _same(Reachability().expect("x/*", "*", False), TCP80, TCP81, UDP80, ICMP),
    ),
    Case(
        "allow-from-same-namespace",
        "Pods of x accept only pods of x (a podSelector peer alone means the policy's namespace).",
        lambda t: [policy(t, "x", "same-ns", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})],
        _same(Reachability().expect("*", "x/*", False).expect("x/*", "x/*", True), TCP80, TCP81, ICMP),
    ),
    Case(
        "allow-from-labelled-namespace",
        "x/a accepts only pods of namespaces labelled ns=y.",
        lambda t: [
            policy(t, "x", "from-y", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}],
            })
        ],
        _same(Reachability().expect("*", "x/a", False).expect("y/*", "x/a", True), TCP80, TCP81),
    ),
    Case(
        "allow-from-labelled-pods-in-labelled-namespaces",
        "x/a accepts pods labelled pod=c in namespaces y and z: both selectors in one peer are ANDed.",
        lambda t: [
            policy(t, "x", "from-c-in-y-z", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{
                    "namespaceSelector": {"matchExpressions": [{"key": "ns", "operator": "In", "values": ["y", "z"]}]},
                    "podSelector": {"matchLabels": {"pod": "c"}},
                }]}],
            })
        ],
        _same(
            Reachability().expect("*", "x/a", False).expect("y/c", "x/a", True).expect("z/c", "x/a", True),
            TCP80, TCP81,
        ),
    ),
    Case(
        "allow-from-namespace-or-pods",
        "Two peers are ORed: x/a accepts every pod of y, and pods labelled pod=c of its own namespace.",
        lambda t: [
            policy(t, "x", "from-y-or-c", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [
                    {"namespaceSelector": {"matchLabels": {"ns": "y"}}},
                    {"podSelector": {"matchLabels": {"pod": "c"}}},
                ]}],
            })
        ],
        _same(
            Reachability().expect("*", "x/a", False).expect("y/*", "x/a", True).expect("x/c", "x/a", True),
            TCP80, TCP81,
        ),
    ),
    Case(
        "match-expressions-not-in",
        "In y, pods not labelled pod=a accept only namespaces matching ns In [x].",
        lambda t: [
            policy(t, "y", "not-a-from-x", {
                "podSelector": {"matchExpressions": [{"key": "pod", "operator": "NotIn", "values": ["a"]}]},
                "ingress": [{"from": [
                    {"namespaceSelector": {"matchExpressions": [{"key": "ns", "operator": "In", "values": ["x"]}]}}
                ]}],
            })
        ],
        _same(
            Reachability()
            .expect("*", "y/b", False).expect("*", "y/c", False)
            .expect("x/*", "y/b", True).expect("x/*", "y/c", True),
            TCP80, TCP81,
        ),
    ),
    Case(
        "named-port-ingress",
        "Pods of x accept anyone, on the named port serve-81-tcp only: TCP 81 open, TCP 80, UDP and ICMP not.",
        lambda t: [
            policy(t, "x", "named-81", {
                "podSelector": {},
                "ingress": [{"ports": [{"port": "serve-81-tcp"}], "from": [{"namespaceSelector": {}}]}],
            })
        ],
        {
            TCP81: OPEN,
            TCP80: Reachability().expect("*", "x/*", False),
            UDP81: Reachability().expect("*", "x/*", False),
            ICMP: Reachability().expect("*", "x/*", False),
        },
    ),
    Case(
        "named-port-egress",
        "x/a may send only to the peer's named port serve-80-udp (UDP 80): its TCP is blocked, UDP 80 passes.",
        lambda t: [
            policy(t, "x", "egress-named", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "policyTypes": ["Egress"],
                "egress": [{"ports": [{"protocol": "UDP", "port": "serve-80-udp"}]}],
            })
        ],
        {
            UDP80: OPEN,
            UDP81: Reachability().expect("x/a", "*", False),
            TCP80: Reachability().expect("x/a", "*", False),
            TCP81: Reachability().expect("x/a", "*", False),
        },
    ),
    Case(
        "end-port",
        "Pods of x accept TCP 78 to 80 from anyone: 80, the last of the range, passes; 81 does not.",
        lambda t: [
            policy(t, "x", "range", {
                "podSelector": {},
                "ingress": [{"ports": [{"protocol": "TCP", "port": 78, "endPort": 80}]}],
            })
        ],
        {TCP80: OPEN, TCP81: Reachability().expect("*", "x/*", False), UDP80: Reachability().expect("*", "x/*", False)},
    ),
    Case(
        "ip-block-with-except",
        "x/a accepts the whole subnet except y/b's address: ipBlock matches pods by address.",
        lambda t: [
            policy(t, "x", "cidr-except", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{"ipBlock": {"cidr": t.subnet, "except": [t.host("y/b")]}}]}],
            })
        ],
        _same(Reachability().expect("y/b", "x/a", False), TCP80, TCP81),
    ),
    Case(
        "egress-to-ip-block",
        "x/a may reach only the addresses of y/a and z/b.",
        lambda t: [
            policy(t, "x", "egress-cidr", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "policyTypes": ["Egress"],
                "egress": [{"to": [{"ipBlock": {"cidr": t.host("y/a")}}, {"ipBlock": {"cidr": t.host("z/b")}}]}],
            })
        ],
        _same(
            Reachability().expect("x/a", "*", False).expect("x/a", "y/a", True).expect("x/a", "z/b", True),
            TCP80, TCP81, ICMP,
        ),
    ),
    Case(
        "egress-to-ip-block-except-on-a-port",
        "x/b may reach the subnet except z/* on TCP 80 only (no ICMP, nothing on 81).",
        lambda t: [
            policy(t, "x", "egress-cidr-port", {
                "podSelector": {"matchLabels": {"pod": "b"}},
                "policyTypes": ["Egress"],
                "egress": [{
                    "ports": [{"port": 80}],
                    "to": [{"ipBlock": {"cidr": t.subnet, "except": [t.host("z/a"), t.host("z/b"), t.host("z/c")]}}],
                }],
            })
        ],
        {
            TCP80: Reachability().expect("x/b", "z/*", False),
            TCP81: Reachability().expect("x/b", "*", False),
            ICMP: Reachability().expect("x/b", "*", False),
        },
    ),
    Case(
        "policies-add-up",
        "Three policies select x/a: from x/b, from namespace y, and from z/c on TCP 80 only; "
        "what x/a accepts is their union.",
        lambda t: [
            policy(t, "x", "from-b", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}],
            }),
            policy(t, "x", "from-y", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}],
            }),
            policy(t, "x", "from-z-c-80", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{
                    "ports": [{"port": 80}],
                    "from": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}, "podSelector": {"matchLabels": {"pod": "c"}}}],
                }],
            }),
        ],
        {
            TCP80: Reachability().expect("*", "x/a", False).expect("x/b", "x/a", True)
            .expect("y/*", "x/a", True).expect("z/c", "x/a", True),
            TCP81: Reachability().expect("*", "x/a", False).expect("x/b", "x/a", True).expect("y/*", "x/a", True),
        },
    ),
    Case(
        "ingress-and-egress-both-decide",
        "Pods of x may send only to y; pods of y accept only x/a: x/a reaches y, x/b and x/c are refused "
        "by y's ingress, and no pod of x reaches z or x.",
        lambda t: [
            policy(t, "x", "egress-to-y", {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}],
            }),
            policy(t, "y", "from-x-a", {
                "podSelector": {},
                "ingress": [{"from": [{
                    "namespaceSelector": {"matchLabels": {"ns": "x"}}, "podSelector": {"matchLabels": {"pod": "a"}},
                }]}],
            }),
        ],
        _same(
            Reachability().expect("x/*", "*", False).expect("*", "y/*", False).expect("x/a", "y/*", True),
            TCP80, TCP81,
        ),
    ),
    Case(
        "egress-rules-imply-egress-type",
        "policyTypes absent, only egress rules: the policy is of both types, so x/a accepts nothing "
        "and may send to every pod.",
        lambda t: [
            policy(t, "x", "egress-only-rules", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "egress": [{"to": [{"namespaceSelector": {}}]}],
            })
        ],
        _same(Reachability().expect("*", "x/a", False), TCP80, TCP81),
    ),
    Case(
        "ingress-type-ignores-egress-rules",
        "policyTypes [Ingress] with egress rules: the egress rules are ignored, x/a sends freely, accepts nothing.",
        lambda t: [
            policy(t, "x", "ingress-only", {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "policyTypes": ["Ingress"],
                "egress": [{"to": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}],
            })
        ],
        _same(Reachability().expect("*", "x/a", False), TCP80, TCP81),
    ),
    Case(
        "policy-for-another-network",
        "A deny-all policy naming the other network leaves this one open.",
        lambda t: [
            policy(t, "x", "deny-other", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
                   network=t.other_network)
        ],
        _same(OPEN, TCP80, TCP81, ICMP),
    ),
)


def world(t: Topology, policies: list[dict[str, Any]], *, node: str | None = None) -> netpol.World:
    """The topology as the decisions see it: namespaces, pods with their named ports and their
    address on `t.network` (interface `net1`), both networks, and the parsed policies."""
    ports = tuple(netpol.ContainerPort(n, netpol.Protocol(p), port) for n, p, port in CONTAINER_PORTS)
    return netpol.World.build(
        pods=[
            netpol.pod_info(
                key.split("/")[0], key.split("/")[1], pod_labels(key), node=node, ports=ports,
                interfaces=[netpol.interface(t.network, "net1", t.addresses[key])],
            )
            for key in POD_KEYS
        ],
        namespaces=[netpol.namespace_info(ns, namespace_labels(ns)) for ns in NAMESPACES],
        networks=[netpol.NetworkInfo(podnetwork=t.network), netpol.NetworkInfo(podnetwork=t.other_network)],
        policies=[netpol.parse_policy(p) for p in policies],
    )


def cases() -> Iterator[Case]:
    yield from CASES


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


__all__ = [
    "CASES",
    "CONTAINER_PORTS",
    "DEFAULT_TOPOLOGY",
    "ICMP",
    "NAMESPACES",
    "PODS",
    "POD_KEYS",
    "TCP80",
    "TCP81",
    "UDP80",
    "UDP81",
    "Case",
    "Probe",
    "Reachability",
    "Topology",
    "case",
    "namespace_labels",
    "pod_labels",
    "policy",
    "render",
    "world",
]
