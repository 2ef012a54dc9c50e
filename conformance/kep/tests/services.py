"""Services on a PodNetwork (KEP-3698 Phase III, Req 22, the Service half): EndpointSlices of the
network's addresses, and a ClusterIP that works inside the pods of that network.

A Service is served on PodNetwork N when it is annotated `multinetwork.x-k8s.io/podnetwork: N`
and labelled `service.kubernetes.io/service-proxy-name: podnetwork.multinetwork.x-k8s.io` (so that
kube-proxy leaves it alone). Its EndpointSlices of N are those labelled
`endpointslice.kubernetes.io/managed-by: endpointslice-controller.multinetwork.x-k8s.io` and
`kubernetes.io/service-name`; the upstream controller's slices of the same Service (cluster-network
addresses) are not looked at.

`ServiceEndpointSlices` needs no kubelet: its backends are pods that never run (a scheduling gate
of the suite's holds them), on a PodNetwork the suite creates, whose provider the suite plays: it
reports each pod's addresses per PodNetwork in `multinetwork.x-k8s.io/pod-ips` (KEP "Status", as
a provider does until the kubelet reports them) and their Ready condition. So the test judges the
Services implementation alone, on inputs it controls: an address on the cluster network and one
on the PodNetwork per pod and family, ready and not ready pods, two port numbers behind one named
port, a selected pod not on the network.

`ServiceClusterIP` needs pods that run (the NetworkPolicy tests' kubelet probe): two backends of
the `--probe-image` on the PodNetwork `--service-network` names, each answering its name on TCP
8080, and a client pod on the network that connects to the ClusterIP many times and exits 0 when
both answered and its interface on the network (`net1`) carried those connections. Its phase is
the answer: no exec, no logs. The backends listen on every address (`nc -l -p`: Debian's busybox
has no `-s` to bind one, and the suite runs any busybox), so an answer alone would not tell the
network from the cluster network; the client's packet counters on `net1` do.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.kep import client as kc
from conformance.kep import views
from conformance.kep.suite import ConformanceTest, Context
from conformance.kep.tests import common as c
from conformance.kep.tests.extended import DEFAULT, _pod_ips
from conformance.kep.tests.policy import CONNECT_SECONDS, kubelet_probe
from podnetwork.ground import constants

MANAGED_BY = constants.ENDPOINTSLICE_MANAGED_BY_LABEL
OURS = constants.ENDPOINTSLICE_MANAGED_BY
SERVICE_NAME = constants.ENDPOINTSLICE_SERVICE_NAME_LABEL
MAX_ENDPOINTS = constants.MAX_ENDPOINTS_PER_SLICE
PORT_NAME = "http"
#: The gate that keeps the API-only test's pods from ever running: the suite reports their addresses.
GATE = "conformance.multinetwork.x-k8s.io/never-runs"
FAMILY_OF = {4: "IPv4", 6: "IPv6"}
#: Connections the ClusterIP client makes: with random balancing over two backends, the chance that
#: one of them is never picked is 2 * 2**-CONNECTIONS.
CONNECTIONS = 24


@dataclass(frozen=True)
class Backend:
    """What a pod selected by the Service should give its slices (or that it is not on the network)."""

    pod: str
    addresses: Mapping[str, str]
    """Its address on the Service's PodNetwork, per family ("IPv4", "IPv6"); empty: not on it."""
    ready: bool
    """Its Ready condition is True."""
    port: int | None
    """Its container port of the Service port's named target (None: it declares none)."""
    elsewhere: Mapping[str, str] = field(default_factory=dict)
    """Its addresses on other PodNetworks (the cluster network's among them) -> the PodNetwork."""


def _family(address: str) -> str | None:
    try:
        return FAMILY_OF[ipaddress.ip_address(address).version]
    except ValueError:
        return None


def backend(pod: Mapping[str, Any], network: str, target: str, protocol: str = "TCP") -> Backend:
    """A pod as a backend of a Service on `network` whose port targets the container port named
    `target`: its pod IPs per PodNetwork, its Ready condition, its port of that name."""
    on: dict[str, str] = {}
    elsewhere: dict[str, str] = {}
    for entry in _pod_ips(dict(pod)):
        ip, named = str(entry.get("ip") or ""), str(entry.get("podNetwork") or "")
        family = _family(ip)
        if family is None:
            continue
        if named == network:
            on.setdefault(family, ip)
        else:
            elsewhere[ip] = named
    seen = views.read(pod)
    state = seen.condition("Ready")
    port = None
    for container in seen.spec.containers or []:
        for p in container.ports or []:
            if p.name == target and (p.protocol or "TCP") == protocol and p.container_port is not None:
                port = p.container_port
    return Backend(str(seen.metadata.name), on, state is not None and state.get("status") == "True", port,
                   elsewhere)


def service_families(service: Mapping[str, Any]) -> tuple[str, ...]:
    """The address families of a Service, as the API server answered it: `spec.ipFamilies`; else
    those of its cluster IPs; else IPv4 (an API server always sets ipFamilies on a Service it
    allocated for)."""
    spec = views.read(service).spec
    if spec.ip_families:
        return tuple(spec.ip_families)
    ips = spec.cluster_ips or [spec.cluster_ip]
    found = [_family(str(ip)) for ip in ips if ip and ip != "None"]
    return tuple(dict.fromkeys(f for f in found if f)) or ("IPv4",)


def ours(service: str, slices: Sequence[Mapping[str, Any]]) -> list[views.EndpointSlice]:
    """The EndpointSlices of `service` on its PodNetwork: labelled with it and managed by the
    multi-network controller."""
    found = []
    for s in (views.read_as(s, views.EndpointSlice) for s in slices):
        labels = s.metadata.labels or {}
        if labels.get(SERVICE_NAME) == service and labels.get(MANAGED_BY) == OURS:
            found.append(s)
    return found


def slices_problem(service: str, network: str, families: Sequence[str], port_name: str,
                   backends: Sequence[Backend], slices: Sequence[Mapping[str, Any]]) -> str | None:
    """What is wrong with the EndpointSlices of `service` served on `network`, or None.

    `slices` are the namespace's EndpointSlices (the Service's are picked by their labels),
    `backends` every pod the Service selects. Right is: per family of the Service, exactly one
    endpoint per backend with an address of that family on `network`, holding that address;
    its conditions as the upstream controller sets them (ready and serving: the pod's Ready;
    terminating: false); the slice's port named `port_name` carrying the backend's number for
    the named target port; one address type per slice, at most 100 endpoints in one.
    """
    mine = ours(service, slices)
    by_pod = {b.pod: b for b in backends}
    elsewhere = {ip: (b.pod, net) for b in backends for ip, net in b.elsewhere.items()}
    seen: dict[tuple[str, str], str] = {}
    for s in mine:
        name = str(s.metadata.name)
        kind = str(s.address_type)
        if kind not in families:
            return (f"EndpointSlice {name} has addressType {kind}, not one of the Service's families "
                    f"{', '.join(families)}")
        endpoints = list(s.endpoints or [])
        if len(endpoints) > MAX_ENDPOINTS:
            return f"EndpointSlice {name} holds {len(endpoints)} endpoints; at most {MAX_ENDPOINTS} per slice"
        numbers = {p.name or "": p.port for p in s.ports or []}
        for ep in endpoints:
            addresses = [str(a) for a in ep.addresses or []]
            pod = (ep.target_ref.name if ep.target_ref else None) or ""
            if len(addresses) != 1:
                return (f"EndpointSlice {name}: the endpoint of pod {pod or '?'} has addresses {addresses}, "
                        "not one")
            (address,) = addresses
            if address in elsewhere:
                owner, other = elsewhere[address]
                return (f"EndpointSlice {name} lists {address}, pod {owner}'s address on PodNetwork {other}, "
                        f"not its address on {network}")
            if _family(address) != kind:
                return f"EndpointSlice {name} of addressType {kind} lists {address}"
            wanted = by_pod.get(pod)
            if wanted is None:
                return (f"EndpointSlice {name} lists {address} for {pod or 'no pod (no targetRef)'}, which "
                        "is not a pod the Service selects")
            if wanted.addresses.get(kind) != address:
                on = wanted.addresses.get(kind)
                return (f"EndpointSlice {name} lists {address} for pod {pod}, whose {kind} address on "
                        f"{network} is {on or 'none (it is not on the network)'}")
            if (kind, pod) in seen:
                return f"pod {pod} is listed twice ({seen[(kind, pod)]} and {name})"
            seen[(kind, pod)] = name
            got = (ep.conditions.ready, ep.conditions.serving, ep.conditions.terminating)
            if got != (wanted.ready, wanted.ready, False):
                return (f"EndpointSlice {name}: pod {pod} (Ready {wanted.ready}, not terminating) has "
                        f"conditions ready={got[0]}, serving={got[1]}, terminating={got[2]}; want "
                        f"{wanted.ready}, {wanted.ready}, False")
            if wanted.port is not None and numbers.get(port_name) != wanted.port:
                return (f"EndpointSlice {name}: port {port_name!r} is {numbers.get(port_name)} for pod "
                        f"{pod}, whose container port {port_name!r} is {wanted.port} (a named targetPort "
                        "resolves per pod)")
    missing = [f"{b.pod} ({kind} {b.addresses[kind]})" for b in backends for kind in families
               if kind in b.addresses and (kind, b.pod) not in seen]
    if missing:
        where = (f"in {', '.join(str(s.metadata.name) for s in mine)}" if mine
                 else f"(no EndpointSlice labelled {SERVICE_NAME}={service}, {MANAGED_BY}={OURS})")
        return f"no endpoint for pod {', '.join(missing)} on PodNetwork {network} {where}"
    return None


# --- the probes -------------------------------------------------------------------------------


async def services_probe(ctx: Context) -> str | None:
    if not await ctx.client.served(kc.EndpointSlice):
        return "EndpointSlices (discovery.k8s.io/v1) are not served"
    return None


async def network_probe(ctx: Context) -> str | None:
    if not ctx.settings.get("SERVICE_NETWORK"):
        return ("no PodNetwork to serve a Service on: pass --service-network NAME, a Ready PodNetwork the "
                "cluster attaches to pods")
    return None


# --- ServiceEndpointSlices: the API only ---------------------------------------------------------


@dataclass(frozen=True)
class _Reported:
    """What the suite reports of a gated backend, as its network's provider."""

    index: int
    port: int
    ready: bool


def _pod_ips_of(index: int, network: str) -> list[dict[str, str]]:
    """Documentation addresses (RFC 5737, RFC 3849): one per family on default and on `network`."""
    default = constants.DEFAULT_PODNETWORK
    return [{"ip": f"192.0.2.{10 + index}", "podNetwork": default, "interfaceName": "eth0"},
            {"ip": f"2001:db8:0:1::{10 + index:x}", "podNetwork": default, "interfaceName": "eth0"},
            {"ip": f"198.51.100.{10 + index}", "podNetwork": network, "interfaceName": "net1"},
            {"ip": f"2001:db8:0:2::{10 + index:x}", "podNetwork": network, "interfaceName": "net1"}]


async def _gated(ctx: Context, name: str, networks: list[dict[str, Any]], port: int) -> None:
    await ctx.apply("pod-backend.yaml", NAME=name, NETWORKS=json.dumps(networks),
                    GATES=json.dumps([{"name": GATE}]), IMAGE="registry.k8s.io/pause:3.10", COMMAND="[]",
                    PORT=str(port))


async def _report(ctx: Context, name: str, pod_ips: list[dict[str, str]], ready: bool) -> None:
    """Write what a provider and a kubelet would: the pod's IPs per PodNetwork, its Ready condition."""
    await ctx.client.patch(kc.Pod, name, {"metadata": {"annotations": {
        constants.POD_IPS_ANNOTATION: json.dumps(pod_ips)}}}, namespace=ctx.namespace)
    current = views.read(await ctx.client.get(kc.Pod, name, ctx.namespace))
    kept = [x for x in current.status.conditions or []
            if not (isinstance(x, dict) and x.get("type") == "Ready")]
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    await ctx.client.patch(kc.Pod, name, {"status": {"conditions": [*kept, condition]}},
                           namespace=ctx.namespace, status=True)


async def _backends(ctx: Context, network: str) -> list[Backend]:
    pods = await ctx.client.list(kc.Pod, ctx.namespace)
    return [backend(p, network, PORT_NAME) for p in pods
            if (views.read(p).metadata.labels or {}).get("app") == "backend"]


async def _slices_match(ctx: Context, service: str, network: str, why: str) -> None:
    obj = await ctx.client.get(kc.Service, service, ctx.namespace)
    assert obj is not None, f"Service {service} is gone"
    families = service_families(obj)

    async def check() -> bool:
        problem = slices_problem(service, network, families, PORT_NAME, await _backends(ctx, network),
                                 await ctx.client.list(kc.EndpointSlice, ctx.namespace))
        if problem is not None:
            raise kc.Unmet(problem)
        return True

    await ctx.client.eventually(f"the EndpointSlices of Service {service} hold its pods' addresses on "
                                f"{network} {why}", check)


async def _no_slices(ctx: Context, service: str, why: str) -> None:
    async def gone() -> bool:
        left = [str(s.metadata.name) for s in ours(service, await ctx.client.list(kc.EndpointSlice,
                                                                                       ctx.namespace))]
        if left:
            raise kc.Unmet(f"EndpointSlices {', '.join(left)} are still there")
        return True

    await ctx.client.eventually(f"Service {service} has no EndpointSlice of its PodNetwork {why}", gone)


async def _refused(ctx: Context, service: str, names: str) -> None:
    """An Event about `service` names `names`, and the Service gets no slice."""
    async def event() -> str:
        for ev in await ctx.client.list(kc.Event, ctx.namespace):
            seen = views.read_as(ev, views.Event)
            if seen.about == service and names in seen.text:
                return seen.text
        raise kc.Unmet(f"no Event on Service {service} names {names}")

    await ctx.client.eventually(f"an Event on Service {service} says why it is not served ({names})", event)

    async def no_slice() -> str | None:
        made = ours(service, await ctx.client.list(kc.EndpointSlice, ctx.namespace))
        return f"it has EndpointSlices {kc.shown([s.metadata.name for s in made])}" if made else None

    await ctx.client.never(f"Service {service}, refused, gets no EndpointSlice", no_slice, for_seconds=2.0)


async def endpoint_slices(ctx: Context) -> None:
    await ctx.probe("services", services_probe)
    network = await c.podnetwork(ctx, "served")
    await c.wait_condition(ctx, kc.PodNetwork, network, c.READY, "True")
    on = [DEFAULT, {"podNetworkName": network, "interfaceName": "net1"}]
    # Two port numbers behind the one port name; one pod not Ready; one selected pod not on the network.
    reported = {"backend-a": _Reported(1, 8080, True), "backend-b": _Reported(2, 8080, True),
                "backend-c": _Reported(3, 9090, False)}
    for name, r in reported.items():
        await _gated(ctx, name, on, r.port)
        await _report(ctx, name, _pod_ips_of(r.index, network), r.ready)
    await _gated(ctx, "not-on-network", [DEFAULT], 8080)
    await _report(ctx, "not-on-network", _pod_ips_of(9, network)[:2], True)
    await ctx.apply("service.yaml", NAME="backend", NETWORK=network, TYPE="ClusterIP")
    await _slices_match(ctx, "backend", network, "(ready and not, two numbers for the named port)")

    await ctx.client.delete(kc.Pod, "backend-b", ctx.namespace)
    await _gated(ctx, "backend-d", on, 8080)
    await _report(ctx, "backend-d", _pod_ips_of(4, network), True)
    await _report(ctx, "backend-c", _pod_ips_of(3, network), True)
    await _slices_match(ctx, "backend", network, "after one backend went, one came and one became Ready")

    await ctx.client.patch(kc.Service, "backend", {"metadata": {"annotations": {
        constants.SERVICE_PODNETWORK_ANNOTATION: None}}}, namespace=ctx.namespace)
    await _no_slices(ctx, "backend", "once it stops naming the network")
    await ctx.client.patch(kc.Service, "backend", {"metadata": {"annotations": {
        constants.SERVICE_PODNETWORK_ANNOTATION: network}}}, namespace=ctx.namespace)
    await _slices_match(ctx, "backend", network, "once it names the network again")
    await ctx.client.delete(kc.Service, "backend", ctx.namespace)
    await _no_slices(ctx, "backend", "once it is deleted")

    await ctx.apply("service.yaml", NAME="node-port", NETWORK=network, TYPE="NodePort")
    await _refused(ctx, "node-port", "NodePort")
    missing = ctx.name("absent")
    await ctx.apply("service.yaml", NAME="unknown-network", NETWORK=missing, TYPE="ClusterIP")
    await _refused(ctx, "unknown-network", missing)


# --- ServiceClusterIP: pods that run ------------------------------------------------------------


def server_command(answer: str) -> list[str]:
    """Answer `answer` to each connection on TCP 8080, on every address of the pod: `nc -l -p` is all
    that every busybox's `nc` offers (Debian's has no `-s` to bind one address). That the connections
    came over the network is the client's to prove (`client_command`)."""
    return ["sh", "-c", f"while true; do echo {answer} | nc -l -p 8080; done"]


#: A pod's packets received and sent on its `net1` (/proc/net/dev, of the reader's network namespace).
NET1_PACKETS = "awk -F'[: ]+' '$2 == \"net1\" {print $4 + 0, $12 + 0}' /proc/net/dev"


def client_command(address: str, port: int, answers: Sequence[str]) -> list[str]:
    """Connect CONNECTIONS times to `address`:`port`; exit 0 when every one of `answers` was heard and
    `net1` (the client's interface on the Service's network) carried at least one packet each way per
    connection. A ClusterIP translated to the backends' cluster-network addresses would reach them
    (they listen on every address) but over `eth0`, leaving `net1` all but silent."""
    want = " && ".join(f"grep -qx {a} /tmp/seen" for a in answers)
    return ["sh", "-c", f"set -- $({NET1_PACKETS}); RX=$1 TX=$2; "
                        f"for i in $(seq {CONNECTIONS}); do nc -w {CONNECT_SECONDS} {address} {port} "
                        f"</dev/null; done | sort -u > /tmp/seen; cat /tmp/seen; "
                        f"set -- $({NET1_PACKETS}); RX=$(($1 - RX)) TX=$(($2 - TX)); "
                        f"echo \"net1: $RX packets received, $TX sent\"; "
                        f"{want} && [ $RX -ge {CONNECTIONS} ] && [ $TX -ge {CONNECTIONS} ]"]


async def _ended(ctx: Context, name: str) -> bool:
    async def ended() -> str | None:
        phase = views.read(await ctx.client.get(kc.Pod, name, ctx.namespace)).status.phase
        if phase in ("Succeeded", "Failed"):
            return phase
        raise kc.Unmet(f"client pod {name} is {phase or 'not yet scheduled'}")

    seconds = ctx.timeouts.schedule + CONNECTIONS * CONNECT_SECONDS
    return await ctx.client.eventually(f"client pod {name} ends", ended, timeout=seconds) == "Succeeded"


async def cluster_ip(ctx: Context) -> None:
    await ctx.probe("services", services_probe)
    await ctx.probe("service-network", network_probe)
    await ctx.probe("kubelet", kubelet_probe)
    network = ctx.settings["SERVICE_NETWORK"]
    on = [DEFAULT, {"podNetworkName": network, "interfaceName": "net1"}]
    (service,) = await ctx.apply("service.yaml", NAME="backend", NETWORK=network, TYPE="ClusterIP")
    served = await ctx.client.get(kc.Service, "backend", ctx.namespace) or service
    family = service_families(served)[0]
    spec = views.read(served).spec
    cluster_ips = [str(ip) for ip in spec.cluster_ips or [] if _family(str(ip)) == family]
    assert cluster_ips, (f"the API server gave Service backend no {family} ClusterIP: "
                         f"{kc.shown(served.get('spec'))}")
    answers = ("backend-a", "backend-b")
    for name in answers:
        await ctx.apply("pod-backend.yaml", NAME=name, NETWORKS=json.dumps(on), GATES="[]",
                        IMAGE=ctx.settings["PROBE_IMAGE"], COMMAND=json.dumps(server_command(name)),
                        PORT="8080")

    async def running() -> bool:
        for name in answers:
            pod = await ctx.client.get(kc.Pod, name, ctx.namespace)
            if (kc.condition(pod, "Ready") or {}).get("status") != "True":
                raise kc.Unmet(f"backend {name} is not Ready: {kc.shown((pod or {}).get('status'))}")
            if family not in backend(pod or {}, network, PORT_NAME).addresses:
                raise kc.Unmet(f"backend {name} reports no {family} address on PodNetwork {network}")
        return True

    await ctx.client.eventually(f"both backends run with an address on {network}", running,
                                timeout=ctx.timeouts.schedule)
    await _slices_match(ctx, "backend", network, "(pods that run)")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.timeouts.settle
    command = json.dumps(client_command(cluster_ips[0], 80, answers))
    for attempt in range(1, 100):
        name = f"client-{attempt}"
        await ctx.apply("pod-probe.yaml", NAME=name, NETWORKS=json.dumps(on),
                        LABELS=json.dumps({"app": "client"}), COMMAND=command, RESTART="Never",
                        PROBE_IMAGE=ctx.settings["PROBE_IMAGE"])
        if await _ended(ctx, name):
            return
        assert loop.time() < deadline, (
            f"no client pod on {network} reached both backends through ClusterIP {cluster_ips[0]}:80 over "
            f"net1, its interface on {network}, in {ctx.timeouts.settle:g}s ({attempt} client pods, "
            f"{CONNECTIONS} connections each, each needing a packet out and one in on net1)")


TESTS: tuple[ConformanceTest, ...] = (
    ConformanceTest(
        "ServiceEndpointSlices",
        "A Service annotated with a PodNetwork gets EndpointSlices (managed-by the multi-network controller) "
        "holding exactly its pods' addresses on that network, per family, with their readiness and the named "
        "target port resolved per pod, following pods that come, go and become Ready; it loses them when it "
        "stops naming the network or is deleted; a NodePort Service or one naming a missing network gets an "
        "Event and no slice.",
        ("Services",), "KEP Req 22 (Phase III); EndpointSlice conventions (managed-by, service-name, "
        "conditions, 100 per slice)",
        endpoint_slices, ("podnetwork.yaml", "pod-backend.yaml", "service.yaml")),
    ConformanceTest(
        "ServiceClusterIP",
        "A client pod on a PodNetwork reaches, through a Service's ClusterIP, each of the Service's two "
        "backends over that network (its connections go out and come back on its interface there).",
        ("Services",), "KEP Req 22 (Phase III)", cluster_ip,
        ("pod.yaml", "pod-backend.yaml", "pod-probe.yaml", "service.yaml")),
)

__all__ = ["TESTS", "Backend", "backend", "client_command", "cluster_ip", "endpoint_slices", "ours",
           "server_command", "service_families", "slices_problem"]
