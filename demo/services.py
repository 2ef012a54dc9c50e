"""A Service on PodNetwork blue in the demo (KEP-3698 Phase III, Req 22; docs/services.md).

The parts are the ones a cluster runs:

- **The ClusterIP** is allocated as the API server allocates it (`ServiceIPs`, registered on the
  store as the API server's own Service strategy, not a webhook): from the demo's
  service-cluster-ip-range `SERVICE_CIDR`, a random free address of its upper band; a requested
  one must be in the range and free, and it never changes afterwards.
- **The EndpointSlices** are written by the bridge's Services controller
  (`bridge.operator.serviceslices.Services`), which the demo runs beside the bridge's other
  handlers, fed by the store's watches (`demo.controlplane`).
- **The rules in the pods** are each node agent's own `bridge.agent.services.apply.ClusterIPs`, its
  `ServiceState` listing and watching Services, EndpointSlices and PodNetworks from the store
  (`demo.objects.follow`, `Demo._start_agent`): it writes the table `inet podnetwork_services`
  and the ClusterIP's route in each client pod of its node, and removes them.

Stage 4f: two backends (`echo-1` on node-a, `echo-2` on node-b) serve TCP 8080 (their container
port `echo`), answering their own name and the address the connection came from; a `client` on
node-a. All three are on `default` and on blue (`blue0`). Service `echo` (port 80, targetPort
`echo`) is served on blue. The client connects to the ClusterIP again and again and reaches
both backends, from its blue address; then echo-2 turns not Ready and every connection goes to
echo-1; then the Service is deleted and no rule or route of it is left in any pod.

Every packet stays between the demo's namespaces: the ClusterIP is routed only inside the
client pods, by the agent, to blue's interface; 198.19.0.0/24 is in RFC 2544's benchmarking
range like the networks, and the client pods have no default route (the default network has no
gateway). The stage's servers, Service and pods (their namespaces, and the tables in them) are
removed at its end, whatever happened.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import json
import random
import shutil
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bridge.agent.netns import clusterips, nftables
from demo import host as host_mod
from demo import stages
from demo.report import Report
from demo.store import CREATE, UPDATE, Invalid, Store
from demo.world import BLUE, DEFAULT, NODE_A, NODE_B, POD, pod_manifest
from podnetwork.ground import constants
from podnetwork.ground.core import ObjectMeta
from podnetwork.ground.service import Endpoint, EndpointSlice

SERVICE = ("v1", "Service")
SLICE = (f"{constants.ENDPOINTSLICE_GROUP}/{constants.ENDPOINTSLICE_VERSION}", "EndpointSlice")
#: The demo's service-cluster-ip-range (kube-apiserver --service-cluster-ip-range): in RFC 2544's
#: 198.18.0.0/15, like the networks, so that no real network routes it.
SERVICE_CIDR = ipaddress.IPv4Network("198.19.0.0/24")
NAME = "echo"
PORT = 80
TARGET_PORT = 8080
BACKENDS = {"echo-1": NODE_A, "echo-2": NODE_B}
CLIENT, CLIENT_NODE = "client", NODE_A
INTERFACE = "blue0"
#: Connections the client opens each time: with two endpoints picked at random, the chance that
#: one of them gets none of 20 is 2 in a million.
CONNECTIONS = 20


# --- the API server's part: ClusterIP allocation ------------------------------------------------


class _AllocatedSpec(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    cluster_ip: Any = Field(None, alias="clusterIP")
    cluster_ips: Any = Field(None, alias="clusterIPs")


class _Allocated(BaseModel):
    """A Service as the allocator reads it: its name and the addresses it holds (as stored, unchecked)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: _AllocatedSpec = Field(default_factory=_AllocatedSpec)


class ServiceIPs:
    """kube-apiserver's ClusterIP allocation for the demo's store (KEP-1880, KEP-3070): a Service
    created without `spec.clusterIP` gets a random free address of the range's upper band (the
    lower band, where the first address is the `kubernetes` Service's, is for addresses asked for
    by name); a requested address must be in the range and free; `clusterIP: None` is headless;
    an ExternalName Service gets none; the address never changes (a field error otherwise)."""

    def __init__(self, cidr: ipaddress.IPv4Network = SERVICE_CIDR, *,
                 pick: Callable[[list[str]], str] = random.choice) -> None:
        self.cidr = cidr
        self.pick = pick
        """Chooses among the free addresses of a band (at random, as the API server does)."""
        hosts = [str(ip) for ip in cidr.hosts()]
        # KEP-3070: the static band is min(max(16, size/16), 256) addresses from the range's start.
        static = min(max(16, cidr.num_addresses // 16), 256)
        self.static, self.dynamic = hosts[:static - 1], hosts[static - 1:]

    def admit(self, operation: str, obj: dict[str, Any], old: dict[str, Any] | None,
              services: list[dict[str, Any]]) -> dict[str, Any]:
        """The Service to store, `services` being those stored now; raises `Invalid` to refuse it."""
        spec = obj.setdefault("spec", {})  # written into, as the API server's strategy does
        name = _Allocated.model_validate(obj).metadata.name
        if operation == UPDATE and old is not None:
            kept = _Allocated.model_validate(old).spec
            if spec.get("clusterIP", kept.cluster_ip) != kept.cluster_ip:
                raise Invalid(f'Service "{name}" is invalid: spec.clusterIPs[0]: Invalid value: '
                              f'{json.dumps(spec.get("clusterIP"))}: field is immutable')
            if "cluster_ip" in kept.model_fields_set:
                spec["clusterIP"] = kept.cluster_ip
            if "cluster_ips" in kept.model_fields_set:
                spec["clusterIPs"] = kept.cluster_ips
            return obj
        if operation != CREATE:
            return obj
        spec.setdefault("type", "ClusterIP")
        if spec["type"] == "ExternalName":
            return obj
        asked = spec.get("clusterIP")
        if asked == "None":
            spec["clusterIPs"] = ["None"]
            return obj
        used = {_Allocated.model_validate(s).spec.cluster_ip for s in services}
        if asked:
            address = self._checked(name, asked, used)
        else:
            free = [ip for ip in self.dynamic if ip not in used] or \
                [ip for ip in self.static if ip not in used]
            if not free:
                raise Invalid(f'Service "{name}" is invalid: spec.clusterIPs: Internal error: failed to '
                              f"allocate a serviceIP: range is full ({self.cidr})")
            address = self.pick(free)
        spec.update(clusterIP=address, clusterIPs=[address], ipFamilies=["IPv4"],
                    ipFamilyPolicy="SingleStack")
        return obj

    def _checked(self, name: Any, asked: Any, used: set[Any]) -> str:
        prefix = f'Service "{name}" is invalid: spec.clusterIPs[0]: Invalid value: {json.dumps(asked)}'
        try:
            address = str(ipaddress.ip_address(str(asked)))
        except ValueError:
            raise Invalid(f"{prefix}: must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)") \
                from None
        if address not in self.static and address not in self.dynamic:
            raise Invalid(f"{prefix}: provided IP is not in the valid range. The range of valid IPs is "
                          f"{self.cidr}")
        if address in used:
            raise Invalid(f"{prefix}: provided IP is already allocated")
        return address


def register(store: Store, allocator: ServiceIPs | None = None) -> ServiceIPs:
    """Allocate the ClusterIPs of the Services created on `store` (`ServiceIPs`), as the API server
    does before any admission webhook sees the Service."""
    allocator = allocator or ServiceIPs()
    store.add_admission(*SERVICE, mutate=lambda operation, obj, old: allocator.admit(
        operation, obj, old, store.list(*SERVICE)))
    return allocator


# --- the stage ----------------------------------------------------------------------------------


Demo = stages.Demo


def service_manifest(ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": ns,
                         "annotations": {constants.SERVICE_PODNETWORK_ANNOTATION: BLUE.name},
                         "labels": {constants.SERVICE_PROXY_NAME_LABEL: constants.SERVICE_PROXY_NAME}},
            "spec": {"selector": {"app": NAME},
                     "ports": [{"name": "echo", "port": PORT, "targetPort": "echo", "protocol": "TCP"}]}}


def _pod(name: str, node: str, app: str) -> dict[str, Any]:
    manifest = pod_manifest(name, [{"podNetworkName": DEFAULT.name},
                                   {"podNetworkName": BLUE.name, "interfaceName": INTERFACE}], node)
    manifest["metadata"]["labels"] = {"app": app}
    if app == NAME:
        manifest["spec"]["containers"][0]["ports"] = [
            {"name": "echo", "containerPort": TARGET_PORT, "protocol": "TCP"}]
    return manifest


def tally(answers: list[str]) -> tuple[collections.Counter[str], set[str]]:
    """The answers of `tcpprobe connect --count` ("NAME from PEER", or "-" for none): how many
    each backend gave, and the client addresses the backends saw."""
    names: collections.Counter[str] = collections.Counter()
    peers = set()
    for line in answers:
        name, sep, peer = line.partition(" from ")
        if sep:
            names[name] += 1
            peers.add(peer)
        else:
            names["(no answer)"] += 1
    return names, peers


Servers = stages.Servers


async def connect_many(netns: str, address: str, count: int = CONNECTIONS) -> list[str]:
    """`count` new connections from the namespace to `address`:`PORT`: each one's answer, or `- `
    and what happened (`tcpprobe connect --count`)."""
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", netns, sys.executable, "-m", "demo.tcpprobe", "connect", address, str(PORT),
        "--count", str(count), "--timeout", "1", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return [line for line in out.decode(errors="replace").splitlines() if line.strip()]


async def settle(demo: Demo) -> None:
    """Until every node's agent has brought its pods' ClusterIP rules to what the store says."""
    await stages.settle(demo, lambda agent: agent.services, "ClusterIP rules")


def _label(found: EndpointSlice, key: str) -> str | None:
    return found.metadata.labels.get(key) if found.metadata.labels else None


def _slices(api: Store, ns: str) -> list[EndpointSlice]:
    found = (EndpointSlice.model_validate(s) for s in api.list(*SLICE, ns))
    return [s for s in found if _label(s, constants.ENDPOINTSLICE_SERVICE_NAME_LABEL) == NAME]


def _show_slices(r: Report, api: Store, ns: str) -> list[EndpointSlice]:
    found = _slices(api, ns)
    for s in found:
        r.say(f"  bridge: EndpointSlice {ns}/{s.metadata.name} ({s.address_type}, managed-by "
              f"{_label(s, constants.ENDPOINTSLICE_MANAGED_BY_LABEL)}), ports "
              + ", ".join(f"{p.name} {p.port}/{p.protocol}" for p in s.ports or []))
        for e in s.endpoints or []:
            c = e.conditions
            r.say(f"    {', '.join(e.addresses)} {_pod_of(e)} on {e.node_name}: ready={c.ready} "
                  f"serving={c.serving} terminating={c.terminating}")
        r.detail(f"EndpointSlice {s.metadata.name}", s.model_dump(by_alias=True, exclude_none=True))
    if not found:
        r.say(f"  no EndpointSlice of Service {ns}/{NAME}")
    return found


def _pod_of(endpoint: Endpoint) -> str | None:
    return endpoint.target_ref.name if endpoint.target_ref else None


def _endpoints(found: list[EndpointSlice]) -> dict[str, tuple[str, bool]]:
    """Pod name -> (its address, ready) over the slices."""
    return {str(_pod_of(e)): (a, bool(e.conditions.ready))
            for s in found for e in s.endpoints or [] for a in e.addresses}


def _route_get(netns: str, address: str) -> str:
    """The route the pod's kernel picks for `address` (`ip route get`'s first line, without its uid)."""
    out = host_mod.run(["ip", "-n", netns, "-4", "route", "get", address], check=False).stdout
    first = out.strip().splitlines()[0] if out.strip() else "(no route)"
    return first.split(" uid ")[0].strip()


async def run(demo: Demo, *, ns: str) -> None:
    """Stage 4f: a Service on blue; the client reaches both backends through its ClusterIP, then only
    the ready one; the Service deleted, no rule is left."""
    r = demo.report
    absent = [tool for tool in ("nft", "nsenter") if shutil.which(tool) is None]
    if absent:
        r.skip(f"4f. a Service on blue: needs {' and '.join(absent)} (apt-get install nftables util-linux)")
        return
    r.section("4f. A Service on blue: EndpointSlices of blue's addresses, its ClusterIP in the pods "
              "(KEP Req 22)")
    servers = Servers()
    started: list[str] = []
    try:
        blue = await _pods_on_blue(demo, ns, started)
        if blue is None:
            return
        await _backends_serve(demo, servers)
        cluster_ip = await _service_gets_its_slices(demo, ns, blue)
        await _the_agent_writes_the_client_rules(demo, cluster_ip, blue)
        await _the_client_reaches_both_backends(demo, cluster_ip, blue)
        await _a_not_ready_backend_gets_nothing(demo, ns, cluster_ip)
        await _deleting_the_service_leaves_nothing(demo, ns, cluster_ip)
    finally:
        await _remove_the_stage(demo, ns, servers, started)
    if started:
        r.say(f"CNI DEL of {', '.join(started)}: their namespaces, and the tables in them, are gone")


async def _pods_on_blue(demo: Demo, ns: str, started: list[str]) -> dict[str, str | None] | None:
    """The backends and the client attached (each name added to `started` as it is created): their
    blue addresses, or None when one has none (said)."""
    r = demo.report
    for name, node in (*BACKENDS.items(), (CLIENT, CLIENT_NODE)):
        await demo._create_pod(_pod(name, node, NAME if name in BACKENDS else CLIENT))
        started.append(name)  # removed at the end, its sandbox too if the ADD fails half-way
        await demo.kubelets[node].start_pod(ns, name)
        r.say(f"{node}: CNI ADD {ns}/{name} via the shim, netns {demo._sandbox(name).netns}")
    for running in demo.agents:
        await running.agent.status.idle()
    demo._flush_notes()
    blue = {name: demo._ip_on(name, BLUE.name) for name in started}
    on_default = {name: demo._ip_on(name, DEFAULT.name) for name in started}
    r.say(f"on blue: {json.dumps(blue)}; on default: {json.dumps(on_default)}")
    if not all(blue.values()):
        r.check(False, "the Service's pods have addresses on blue", blue)
        return None
    return blue


async def _backends_serve(demo: Demo, servers: Servers) -> None:
    for name in BACKENDS:
        await servers.start(demo._sandbox(name).netns, "0.0.0.0", TARGET_PORT, name=name)
    demo.report.say(f"echo-1 and echo-2 serve TCP {TARGET_PORT} (container port 'echo') on every address, "
                    "answering '<name> from <the client's address>'")


async def _service_gets_its_slices(demo: Demo, ns: str, blue: dict[str, str | None]) -> str:
    """Service echo created: its ClusterIP allocated, the bridge's EndpointSlices of the backends'
    blue addresses, no Warning. Returns the ClusterIP."""
    r, api = demo.report, demo.api
    r.say("")
    created = api.create(service_manifest(ns))
    cluster_ip = str(created["spec"].get("clusterIP"))
    r.say(f"create Service {ns}/{NAME}: {constants.SERVICE_PODNETWORK_ANNOTATION}: blue, label "
          f"{constants.SERVICE_PROXY_NAME_LABEL}={constants.SERVICE_PROXY_NAME}, selector app={NAME}, "
          f"port {PORT} -> targetPort echo")
    r.say(f"  the API server allocated ClusterIP {cluster_ip} from the service range {SERVICE_CIDR}")
    r.check(ipaddress.ip_address(cluster_ip) in SERVICE_CIDR,
            f"Service {NAME} got a ClusterIP in {SERVICE_CIDR}", created["spec"])
    await settle(demo)
    found = _show_slices(r, api, ns)
    endpoints = _endpoints(found)
    r.check(endpoints == {name: (blue[name], True) for name in BACKENDS}
            and all(s.address_type == "IPv4" and [p.port for p in s.ports or []] == [TARGET_PORT]
                    for s in found),
            "the bridge's EndpointSlices list echo-1 and echo-2 by their blue addresses, ready, on port "
            f"{TARGET_PORT} (the named targetPort resolved)", endpoints)
    r.check(not any(ipaddress.ip_address(a) in ipaddress.ip_network(DEFAULT.subnet)
                    for a, _ in endpoints.values()),
            f"no endpoint is a cluster-network address ({DEFAULT.subnet})", endpoints)
    warnings = [(e.reason, e.message) for e in stages.events_about(api, ns, "Service", NAME)]
    r.check(not warnings, f"the bridge posted no Warning on Service {ns}/{NAME}", warnings)
    return cluster_ip


async def _the_agent_writes_the_client_rules(demo: Demo, cluster_ip: str,
                                             blue: dict[str, str | None]) -> None:
    """The client's node agent wrote the Services table and the ClusterIP's route over blue; a pod not
    on blue got neither."""
    r = demo.report
    client = demo._sandbox(CLIENT).netns
    client_path = demo._sandbox(CLIENT).netns_path
    ours = await clusterips.routes(client_path)
    route = _route_get(client, cluster_ip)
    r.say(f"{CLIENT_NODE}'s agent wrote table {nftables.SERVICES.family} {nftables.SERVICES.name} in "
          f"{CLIENT}'s namespace; route to the ClusterIP: {route}")
    rules = host_mod.run(["ip", "netns", "exec", client, "nft", "list", "table", nftables.SERVICES.family,
                          nftables.SERVICES.name], check=False).stdout
    for line in rules.splitlines():
        if "dnat" in line and "numgen" in line:
            r.say(f"  {line.strip()}")
    r.detail(f"nft list table in {CLIENT}", rules)
    r.check(await nftables.exists(client_path, table=nftables.SERVICES)
            and [(str(ipaddress.ip_interface(x.destination).ip), x.interface) for x in ours]
            == [(cluster_ip, INTERFACE)]
            and f"dev {INTERFACE} src {blue[CLIENT]}" in route,
            f"the agent routes the ClusterIP in {CLIENT} through {INTERFACE} from its blue address, "
            "with its table",
            {"routes": [f"{x.destination} dev {x.interface} src {x.source}" for x in ours],
             "route get": route})
    plain = demo._sandbox("plain").netns_path
    r.check(not await nftables.exists(plain, table=nftables.SERVICES),
            "pod plain (not on blue) has no Services table")


async def _the_client_reaches_both_backends(demo: Demo, cluster_ip: str, blue: dict[str, str | None]) -> None:
    r = demo.report
    answers = await connect_many(demo._sandbox(CLIENT).netns, cluster_ip)
    names, peers = tally(answers)
    r.say(f"{CLIENT} -> {cluster_ip}:{PORT}, {CONNECTIONS} new connections: "
          + ", ".join(f"{n} x{c}" for n, c in sorted(names.items()))
          + f"; the backends saw {', '.join(sorted(peers)) or 'nobody'}")
    r.check(set(names) == set(BACKENDS),
            f"{CLIENT} reached both echo-1 and echo-2 through the ClusterIP", answers)
    r.check(peers == {blue[CLIENT]},
            f"every connection came from {CLIENT}'s blue address {blue[CLIENT]} (over {INTERFACE}, "
            "not eth0)", sorted(peers))


async def _a_not_ready_backend_gets_nothing(demo: Demo, ns: str, cluster_ip: str) -> None:
    """echo-2's Ready condition turns False: the bridge marks it not ready, the agent leaves it out."""
    r, api = demo.report, demo.api
    r.say("")
    pod = api.get(*POD, "echo-2", ns)
    conditions = [dict(c, status="False") if c.get("type") == "Ready" else c
                  for c in pod["status"].get("conditions") or []]
    api.patch(*POD, "echo-2", {"status": {"conditions": conditions}}, ns, subresource="status")
    r.say("echo-2 turns not Ready (its Ready condition False, as the kubelet sets it when a readiness "
          "probe fails); the agents rewrite their pods' tables")
    await settle(demo)
    endpoints = _endpoints(_show_slices(r, api, ns))
    r.check(endpoints.get("echo-2", ("", True))[1] is False and endpoints.get("echo-1", ("", False))[1],
            "the bridge marked echo-2 not ready in the slice (echo-1 still ready)", endpoints)
    answers = await connect_many(demo._sandbox(CLIENT).netns, cluster_ip)
    names, _ = tally(answers)
    r.say(f"{CLIENT} -> {cluster_ip}:{PORT}, {CONNECTIONS} new connections: "
          + ", ".join(f"{n} x{c}" for n, c in sorted(names.items())))
    r.check(names == {"echo-1": CONNECTIONS},
            "every connection went to echo-1: the agent left not-ready echo-2 out", answers)


async def _deleting_the_service_leaves_nothing(demo: Demo, ns: str, cluster_ip: str) -> None:
    r, api = demo.report, demo.api
    r.say("")
    api.delete(*SERVICE, NAME, ns)
    await settle(demo)
    left_slices = [s.metadata.name for s in _slices(api, ns)]
    r.say(f"delete Service {ns}/{NAME}: its EndpointSlices go with it (ownerReferences, the garbage "
          f"collector): {left_slices or 'none left'}")
    r.check(not left_slices, "the Service's EndpointSlices are gone", left_slices)
    left = await _rules_left(demo)
    client = demo._sandbox(CLIENT).netns
    answers = await connect_many(client, cluster_ip, 1)
    r.say(f"{CLIENT} -> {cluster_ip}:{PORT}: {answers[0] if answers else '(nothing)'}; route: "
          f"{_route_get(client, cluster_ip)}")
    r.check(not left, "with the Service deleted no pod's namespace holds its table or a route of it",
            left)
    r.check(tally(answers)[0].keys() <= {"(no answer)"}, "the ClusterIP answers no more", answers)


async def _remove_the_stage(demo: Demo, ns: str, servers: Servers, started: list[str]) -> None:
    """The servers, the Service and the stage's pods removed, whatever happened."""
    await servers.stop()
    with contextlib.suppress(Exception):
        demo.api.delete(*SERVICE, NAME, ns)
    for name in started:
        node = BACKENDS.get(name, CLIENT_NODE)
        try:
            await demo.kubelets[node].stop_pod(ns, name)
        except Exception as exc:  # keep removing the others; the demo's cleanup tries again
            demo.report.check(False, f"CNI DEL of {ns}/{name} at the end of the stage", str(exc))
        with contextlib.suppress(Exception):
            demo.api.delete(*POD, name, ns)
    demo._flush_notes()


async def _rules_left(demo: Demo) -> list[str]:
    """The pods whose namespace holds the Services table or a route of ours."""
    left = []
    for kubelet in demo.kubelets.values():
        for key, sandbox in kubelet.sandboxes.items():
            if await nftables.exists(sandbox.netns_path, table=nftables.SERVICES) \
                    or await clusterips.routes(sandbox.netns_path):
                left.append(key)
    return left


__all__ = ["SERVICE_CIDR", "ServiceIPs", "register", "run", "service_manifest", "tally"]
