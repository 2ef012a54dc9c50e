"""Which of this node's pods need their Services' table and routes written or removed now. Pure.

A local pod is a client of every Service on a PodNetwork it is attached to. Its attachments
come from the agent's record (`netns.local.local_of`: each secondary interface's NAD, its name
in the pod and the addresses its delegate gave), never from the pod's status, which is written
after the ADD answers: the rules can be in place before the answer. A record names a network by
its NAD, a Service by its PodNetwork: `by_nad` maps one to the other (`client_of`).

`decide` compiles each pod once (`dnat.compile_pod`; its containers share it) into `Tables`: the
ruleset and the UDP (ClusterIP, endpoint) pairs it translates to, and returns a `Step` for each
container whose `Tables` differ from what was last written there (`applied`; `UNKNOWN` after a
restart). The table holds no address of the pod (its keys are interface . ClusterIP), so pods
whose attachments have the same networks, interface names and address families share one
compiled table (`shape`); only their routes' source addresses differ (`_for_pod`). On a node of
20 such pods that is one compilation per pass instead of 20.

`stale_udp` says which of those pairs an update stopped translating to: the
conntrack entries of UDP flows to them must go, or the flows keep their old endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bridge.agent.netns.local import UNKNOWN, Local, Step
from bridge.services import ClientPod, Endpoint, Protocol, Route, Ruleset, Service, compile_pod, dnat
from bridge.services import model as services_model

Pair = tuple[str, str]
"""(a ClusterIP, an endpoint address it is translated to)."""


@dataclass(frozen=True)
class Tables:
    """What a client pod's namespace holds: the ruleset (table and routes) and its UDP pairs."""

    ruleset: Ruleset
    udp: frozenset[Pair] = frozenset()


def client_of(local: Local, by_nad: Mapping[str, str]) -> ClientPod:
    """The local pod as a client: each secondary interface on the PodNetwork its NAD backs (a NAD no
    PodNetwork is backed by keeps its own name, which no Service names)."""
    namespace, _, name = local.pod.partition("/")
    return ClientPod(namespace, name, tuple(
        services_model.Attachment(by_nad.get(i.network, i.network), i.interface, tuple(i.addresses))
        for i in local.interfaces))


def udp_pairs(pod: ClientPod, services: Iterable[Service],
              endpoints: Mapping[str, Sequence[Endpoint]]) -> frozenset[Pair]:
    """The (ClusterIP, endpoint) pairs the pod's table translates UDP to (as `compile_pod` chooses)."""
    out: set[Pair] = set()
    for service in services:
        udp = [p for p in service.ports if p.protocol is Protocol.UDP]
        itf = next((a for a in pod.attachments if a.network == service.network and a.interface), None)
        if not udp or itf is None:
            continue
        for cluster_ip in service.cluster_ips:
            if not any(a.version == cluster_ip.version for a in itf.addresses):
                continue
            for port in udp:
                out.update((str(cluster_ip), str(b.address))
                           for b in dnat.backends(port, cluster_ip.version, endpoints.get(service.key, ())))
    return frozenset(out)


def tables_of(pod: ClientPod, services: Sequence[Service],
              endpoints: Mapping[str, Sequence[Endpoint]]) -> Tables | None:
    """The pod's `Tables`, or None when no Service applies (no table, no route)."""
    networks = {a.network for a in pod.attachments}
    mine = [s for s in services if s.network in networks]
    if not mine:
        return None
    ruleset = compile_pod(pod, mine, endpoints)
    if ruleset.document is None:
        return None
    return Tables(ruleset, udp_pairs(pod, mine, endpoints))


Shape = tuple[tuple[str, str | None, tuple[int, ...]], ...]


def shape(pod: ClientPod) -> Shape:
    """What a pod's table depends on besides the Services: each attachment's network, interface and
    address families (in order: the first named interface on a network is the one used)."""
    return tuple((a.network, a.interface, tuple(sorted({x.version for x in a.addresses})))
                 for a in pod.attachments)


def _for_pod(tables: Tables, pod: ClientPod) -> Tables:
    """`tables` compiled for a pod of the same `shape`, with `pod`'s key and source addresses."""
    routes = []
    for route in tables.ruleset.routes:
        version = 6 if ":" in route.destination else 4
        itf = next(a for a in pod.attachments if a.interface == route.interface)
        source = next(a for a in itf.addresses if a.version == version)
        routes.append(Route(route.destination, route.interface, str(source)))
    ruleset = Ruleset(pod.key, tables.ruleset.commands, tuple(sorted(routes)), tables.ruleset.skipped)
    return Tables(ruleset, tables.udp)


def decide(services: Sequence[Service], endpoints: Mapping[str, Sequence[Endpoint]],
           by_nad: Mapping[str, str], locals_: Iterable[Local],
           applied: Mapping[str, object]) -> list[Step[Tables]]:
    """A step for each local container whose `Tables` differ from what was last written there
    (`applied`, by container ID; a container missing from it counts as `UNKNOWN`)."""
    compiled: dict[str, Tables | None] = {}
    by_shape: dict[Shape, Tables | None] = {}
    steps: list[Step[Tables]] = []
    for local in locals_:
        if local.pod not in compiled:
            pod = client_of(local, by_nad)
            key = shape(pod)
            if key not in by_shape:
                by_shape[key] = tables_of(pod, services, endpoints)
            template = by_shape[key]
            compiled[local.pod] = template if template is None else _for_pod(template, pod)
        tables = compiled[local.pod]
        if applied.get(local.container_id, UNKNOWN) != tables:
            skipped = tables.ruleset.skipped if tables is not None else ()
            steps.append(Step(local.container_id, local.pod, local.netns, tables, skipped))
    return steps


def stale_udp(before: object, after: Tables | None) -> list[Pair]:
    """The UDP pairs `before` translated to and `after` does not (nothing when `before` is unknown)."""
    if not isinstance(before, Tables):
        return []
    return sorted(before.udp - (after.udp if after is not None else frozenset()))


__all__ = ["Pair", "Shape", "Tables", "client_of", "decide", "shape", "stale_udp", "tables_of", "udp_pairs"]
