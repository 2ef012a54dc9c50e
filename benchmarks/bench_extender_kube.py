"""Benchmark: the extender's own cost inside kube-scheduler, against a null extender.

kube-scheduler v1.36 calls an HTTP extender like this (pkg/scheduler/extender.go,
schedule_one.go):

- one `POST <urlPrefix>/filter` per pod, from `findNodesThatPassExtenders`, inside the
  scheduling cycle, which `ScheduleOne` runs for one pod at a time ("It is serialized on
  the scheduling algorithm's host fitting"); only binding runs in the background, and an
  extender without `bindVerb` is not called there. So the extender sees one request at a
  time: concurrency 1;
- with `nodeCacheCapable: true` the body is `json.Marshal(ExtenderArgs{Pod, Nodes: nil,
  NodeNames})`: the Go field names, compact, `"Nodes":null`, the pod as its informer
  holds it (since v1.36, without `managedFields`: kubernetes#137473), and the names of
  the nodes that passed its own filters: `numFeasibleNodesToFind`, 50 - nodes/125 per
  cent of the cluster (at least 5 %, at least 100 nodes), starting at a rotating index;
- the headers Go's `http.Client` writes (`User-Agent`, `Content-Length`,
  `Content-Type: application/json`, `Accept-Encoding: gzip`) over one kept-alive
  connection (`utilnet.SetTransportDefaults(&http.Transport{})`: Go's default of 2 idle
  connections per host; serial calls reuse one); a 5 s `httpTimeout` by default.

Here the client does the same from Python, on a plain blocking socket, so that it costs
as little as it can beside the servers (it sends bytes prepared beforehand and reads the
reply without decoding it: what kube-scheduler's Go decoder then spends on a longer
reply is not counted). Two servers, each in its own process, served as `podnetwork
scheduler-extender` serves (uvicorn with the same options, the same FastAPI stack):

- **podnetwork**: `scheduler_plugin.app.create_app` over a cache of the cluster;
- **null**: the cheapest extender in that stack: one FastAPI route that reads the
  body, takes `NodeNames` out of it with orjson and answers `{"NodeNames": [...]}`,
  every node passing, with no other field.

Batches of pods go to each alternately (order swapped every batch), so a burst of
other work on a shared machine hits both alike; the figure is the ratio of their
throughputs (pods/s) in adjacent batches, median and middle half over the pairs.
Beside it, in-process (no HTTP at all): what `/filter` does with these bodies (the short
way: the names stay bytes, the reply is joined from per-snapshot pieces), what the long
way every other body takes costs (parse, decide, write the reply) and its decision alone,
against the HTTP round trip of the null extender, which is the protocol's own cost.

The cluster: four PodNetworks, each offered by half of the nodes (node i offers network
k when bit k of i is set); pods name one or two of them in turn, so a pod passes about
half or a quarter of its candidates, and each failing node's message names a network
it lacks (checked on every distinct pod before timing).

Run:  .venv/bin/python benchmarks/bench_extender_kube.py [--nodes 1000 5000] [--all-nodes]
      [--before DIR]   # DIR: an older tree, e.g. git archive REV | tar -x -C DIR
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import timeit
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response

NETWORKS = ["blue", "green", "red", "yellow"]
NETWORKS_ANNOTATION = "multinetwork.x-k8s.io/networks"
NODE_ANNOTATION = "multinetwork.x-k8s.io/podnetworks"
#: uvicorn's options as `podnetwork scheduler-extender` passes them (its --max-connections 16).
SERVE_OPTIONS: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "off",
                                 "limit_concurrency": 17}


def feasible_nodes(nodes: int, percentage: int = 0) -> int:
    """kube-scheduler's `numFeasibleNodesToFind` (schedule_one.go), adaptive when `percentage` is 0."""
    if nodes < 100:
        return nodes
    if percentage == 0:
        percentage = max(50 - nodes // 125, 5)
    return max(nodes * percentage // 100, 100)


def offered(i: int) -> list[str]:
    return [n for k, n in enumerate(NETWORKS) if i >> k & 1]


def node_items(nodes: int) -> list[dict[str, Any]]:
    items = []
    for i in range(nodes):
        # Every node lists what it offers (`[]`: only default), so each network is on exactly half.
        annotations = {NODE_ANNOTATION: json.dumps(offered(i))}
        items.append({"metadata": {"name": f"node-{i:05d}", "annotations": annotations}})
    return items


def kube_pod(p: int) -> dict[str, Any]:
    """A Deployment's pod as kube-scheduler's informer holds it: defaulted by the API server,
    in the Go structs' field order, without managedFields."""
    nets = [{"podNetworkName": NETWORKS[p % 4], "interfaceName": "net1"}]
    if p % 2:
        nets.append({"podNetworkName": NETWORKS[(p + 1) % 4], "interfaceName": "net2"})
    suffix = f"{p:05x}"
    return {
        "metadata": {
            "name": f"web-7c9f8d6b5-{suffix}", "generateName": "web-7c9f8d6b5-", "namespace": "shop",
            "uid": f"5d2c3a1e-8f4b-4c7a-9e21-0000000{suffix}", "resourceVersion": str(100000 + p),
            "creationTimestamp": "2026-05-01T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7c9f8d6b5"},
            "annotations": {NETWORKS_ANNOTATION: json.dumps(nets, separators=(",", ":"))},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c9f8d6b5",
                                 "uid": "0b7e6c2d-1a3f-4e5b-8c9d-112233445566", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}], "defaultMode": 420}}],
            "containers": [{
                "name": "web", "image": "registry.example/web:1.4.2",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "resources": {"limits": {"memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
                "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def go_marshal(value: Any) -> bytes:
    """`json.Marshal`'s bytes: compact, and `<`, `>`, `&` escaped as Go's encoder does."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def bodies(nodes: int, candidates: int, count: int = 40) -> list[bytes]:
    """`count` filter calls: one pod each, its candidates a window starting one window further."""
    names = [f"node-{i:05d}" for i in range(nodes)]
    out = []
    for p in range(count):
        start = (p * candidates) % nodes
        window = (names + names)[start:start + candidates]
        out.append(go_marshal({"Pod": kube_pod(p), "Nodes": None, "NodeNames": window}))
    return out


def check_reply(body: bytes, reply: bytes, null: bool) -> None:
    """The reply is what kube-scheduler needs: every candidate passed or failed, and each
    failed node's message names a network that node does not offer."""
    args, answer = json.loads(body), json.loads(reply)
    names = args["NodeNames"]
    if null:
        answer.pop("Pad", None)
        assert answer == {"NodeNames": names}, "the null extender must pass every node"
        return
    nets = [n["podNetworkName"] for n in json.loads(args["Pod"]["metadata"]["annotations"][NETWORKS_ANNOTATION])]
    failed = answer["FailedNodes"]
    assert not answer["Error"] and not answer["FailedAndUnresolvableNodes"], answer["Error"]
    assert answer["NodeNames"] == [n for n in names if n not in failed], "the rest pass, in request order"
    assert set(failed) <= set(names)
    for name in names:
        lacking = [n for n in nets if n not in offered(int(name[5:]))]
        if not lacking:
            assert name in answer["NodeNames"], f"{name} offers every network of the pod"
        else:
            assert failed[name] in {f'podnetwork "{n}" is not available on this node' for n in lacking}, (
                f"{name}: {failed.get(name)!r} does not name a network it lacks ({lacking})")


# --- the servers, each in its own process ------------------------------------------------------


def serve_podnetwork(port: int, nodes: int) -> None:
    import uvicorn

    from scheduler_plugin import app as app_mod
    from scheduler_plugin import cache as cache_mod
    from scheduler_plugin.settings import Settings

    cache = cache_mod.Cache()
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    for name in ["default", *NETWORKS]:
        cache.upsert({"kind": "PodNetwork", "metadata": {"name": name}, "status": ready})
    cache.replace("Node", node_items(nodes))
    cache.mark_synced()
    uvicorn.run(app_mod.create_app(cache, Settings()), host="127.0.0.1", port=port, **SERVE_OPTIONS)


def null_app() -> Any:
    """The null extender as a FastAPI route: every node passing, the minimal reply."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/filter")
    async def filter_(request: Request) -> Response:
        names = orjson.loads(await request.body())["NodeNames"]
        return Response(orjson.dumps({"NodeNames": names}), media_type="application/json")

    return app


class NullApp(FastAPI):
    """The null extender in the stack podnetwork serves `/filter` with: the FastAPI
    application, `POST /filter` handed straight to a plain ASGI endpoint. With `pad`, its
    reply carries that many more bytes (a `Pad` string kube-scheduler would ignore)."""

    pad = b""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/filter" and scope["method"] == "POST":
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            content = orjson.dumps({"NodeNames": orjson.loads(b"".join(chunks))["NodeNames"]})
            if self.pad:
                content = content[:-1] + self.pad
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]})
            await send({"type": "http.response.body", "body": content})
            return
        await super().__call__(scope, receive, send)


def serve_null(port: int, raw: bool, pad: int = 0) -> None:
    import uvicorn

    application = NullApp(docs_url=None, redoc_url=None, openapi_url=None) if raw else null_app()
    if pad:
        application.pad = b',"Pad":"' + b" " * max(pad - 9, 0) + b'"}'
    uvicorn.run(application, host="127.0.0.1", port=port, **SERVE_OPTIONS)


def start(role: str, nodes: int, code: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """A server in its own process; with `code`, the project's packages come from that tree."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = code
    proc = subprocess.Popen([sys.executable, __file__, "--serve", role, str(port), "--nodes", str(nodes)],
                            stdout=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the {role} server did not start")


# --- the client: Go's requests on one kept-alive connection -------------------------------------


class Connection:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # Go sets it too
        self.file = self.sock.makefile("rb", buffering=1 << 20)
        self.host = b"127.0.0.1:%d" % port

    def request(self, body: bytes) -> bytes:
        """The request exactly as Go's http.Client writes it (header order included)."""
        return (b"POST /filter HTTP/1.1\r\nHost: %s\r\nUser-Agent: Go-http-client/1.1\r\n"
                b"Content-Length: %d\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n"
                % (self.host, len(body))) + body

    def call(self, request: bytes) -> bytes:
        self.sock.sendall(request)
        status = self.file.readline()
        length = -1
        while (line := self.file.readline()) != b"\r\n":
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        reply = self.file.read(length)
        if status[9:12] != b"200":
            raise RuntimeError(f"HTTP {status!r}: {reply[:300]!r}")
        return reply

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def batch(conn: Connection, requests: list[bytes], pods: int, offset: int) -> float:
    """Pods per second over `pods` calls, one after the other."""
    started = time.perf_counter()
    for p in range(offset, offset + pods):
        conn.call(requests[p % len(requests)])
    return pods / (time.perf_counter() - started)


def compare(ports: dict[str, int], calls: list[bytes], pods: int, batches: int) -> dict[str, list[float]]:
    conns = {arm: Connection(port) for arm, port in ports.items()}
    try:
        requests = {arm: [c.request(b) for b in calls] for arm, c in conns.items()}
        for arm, c in conns.items():
            for body, request in zip(calls, requests[arm], strict=True):
                check_reply(body, c.call(request), null=arm.startswith("null"))
            batch(c, requests[arm], 200, 0)  # warm up
        rates: dict[str, list[float]] = {arm: [] for arm in conns}
        for i in range(batches):
            order = list(conns) if i % 2 == 0 else list(conns)[::-1]
            for arm in order:
                rates[arm].append(batch(conns[arm], requests[arm], pods, i * pods))
        return rates
    finally:
        for c in conns.values():
            c.close()


def in_process(nodes: int, calls: list[bytes]) -> dict[str, float]:
    """Microseconds per pod without any HTTP, over the same pods (best of 5): what `/filter`
    does with kube-scheduler's bodies (the short way: names as bytes, the reply joined from
    per-snapshot pieces), the long way every other body takes (parse the body, decide,
    write the reply) and its decision alone, and the null extender's work."""
    from scheduler_plugin import app as app_mod
    from scheduler_plugin import cache as cache_mod
    from scheduler_plugin import decision, wire
    from scheduler_plugin.settings import Settings

    cache = cache_mod.Cache()
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    for name in ["default", *NETWORKS]:
        cache.upsert({"kind": "PodNetwork", "metadata": {"name": name}, "status": ready})
    cache.replace("Node", node_items(nodes))
    cache.mark_synced()
    snap = cache.snapshot()
    endpoint = app_mod.create_app(cache, Settings()).filter_endpoint
    assert endpoint is not None
    extra = 0
    for body in calls:  # every benchmark body takes the short way, and answers as the long way does
        short = endpoint._answer_fast(body)
        assert short is not None and orjson.loads(short) == orjson.loads(endpoint._answer_long(body))
        extra += len(short) - len(orjson.dumps({"NodeNames": orjson.loads(body)["NodeNames"]}))
    parsed = [wire.parse_args(b) for b in calls]
    names = [a.candidate_names() for a in parsed]

    def short_way() -> None:
        for body in calls:
            endpoint._answer_fast(body)

    def long_way() -> None:
        for body in calls:
            endpoint._answer_long(body)

    def decide() -> None:
        for args, candidates in zip(parsed, names, strict=True):
            decision.filter_nodes(args.pod, candidates, snap)

    def null() -> None:
        for body in calls:
            orjson.dumps({"NodeNames": orjson.loads(body)["NodeNames"]})

    def best(fn: Any) -> float:
        return min(timeit.repeat(fn, number=5, repeat=5)) / 5 / len(calls) * 1e6

    return {"short way": best(short_way), "long way": best(long_way), "decision": best(decide),
            "null handling": best(null), "extra bytes": extra / len(calls)}


def ratios(rates: dict[str, list[float]], arm: str, base: str) -> list[float]:
    """Throughput of `arm` over `base`, batch pair by batch pair."""
    return [a / b for a, b in zip(rates[arm], rates[base], strict=True)]


def spread(values: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.2f} - {q3:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000], help="cluster sizes")
    parser.add_argument("--all-nodes", action="store_true",
                        help="also percentageOfNodesToScore: 100 (every node a candidate)")
    parser.add_argument("--pods", type=int, default=40, help="pods per batch (default: %(default)s)")
    parser.add_argument("--batches", type=int, default=100, help="batches per arm (default: %(default)s)")
    parser.add_argument("--before", metavar="DIR", help="also run the extender from the project's code in DIR")
    parser.add_argument("--serve", nargs=2, metavar=("ROLE", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        role, port = args.serve[0], int(args.serve[1])
        if role.startswith("null"):
            serve_null(port, raw=role != "null-fastapi", pad=int(role[11:]) if role.startswith("null-sized") else 0)
        else:
            serve_podnetwork(port, args.nodes[0])
        return
    print(f"kube-scheduler's filter calls, nodeCacheCapable, 1 pod at a time on one kept-alive connection; "
          f"{args.batches} batches of {args.pods} pods per arm, alternated (Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} before)")
    print()
    scenarios = [(n, feasible_nodes(n)) for n in args.nodes]
    if args.all_nodes:
        scenarios += [(n, n) for n in args.nodes]
    rows = []
    for nodes, candidates in scenarios:
        calls = bodies(nodes, candidates)
        cost = in_process(nodes, calls)
        procs = {"null": start("null", nodes), "null, FastAPI route": start("null-fastapi", nodes),
                 "null, reply as long": start(f"null-sized:{cost['extra bytes']:.0f}", nodes),
                 "podnetwork": start("podnetwork", nodes)}
        if args.before:
            procs["before"] = start("podnetwork", nodes, args.before)
        try:
            rates = compare({arm: port for arm, (_, port) in procs.items()}, calls, args.pods, args.batches)
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait(10)
        rows.append((nodes, candidates, len(calls[0]), rates, cost))
    print("| nodes | candidates | request bytes | null pods/s | podnetwork pods/s | ratio to null, median | "
          "middle half | null as a FastAPI route: pods/s, podnetwork's ratio | null with a reply as long as "
          "podnetwork's: bytes added, its ratio to null, podnetwork's ratio to it |"
          + (" before: ratio to null |" if args.before else ""))
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |" + (" --- |" if args.before else ""))
    for nodes, candidates, size, rates, cost in rows:
        r = ratios(rates, "podnetwork", "null")
        f = ratios(rates, "podnetwork", "null, FastAPI route")
        sized, to_sized = ratios(rates, "null, reply as long", "null"), ratios(rates, "podnetwork", "null, reply as long")
        line = (f"| {nodes} | {candidates} | {size} | {statistics.median(rates['null']):.0f} | "
                f"{statistics.median(rates['podnetwork']):.0f} | **{statistics.median(r):.2f}** | {spread(r)} | "
                f"{statistics.median(rates['null, FastAPI route']):.0f}, {statistics.median(f):.2f} | "
                f"{cost['extra bytes']:.0f}, {statistics.median(sized):.2f} ({spread(sized)}), "
                f"{statistics.median(to_sized):.2f} ({spread(to_sized)}) |")
        if args.before:
            b = ratios(rates, "before", "null")
            line += f" {statistics.median(b):.2f} ({spread(b)}) |"
        print(line)
    print()
    print("Per pod, microseconds: the protocol (a null extender's HTTP round trip) against the work "
          "in process")
    print()
    print("| nodes | candidates | null round trip | podnetwork round trip | podnetwork's extra | "
          "in-process: short way (kube-scheduler's bodies) | in-process: long way (parse + decision + reply) | "
          "in-process: its decision | in-process: null's parse + reply |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for nodes, candidates, _, rates, cost in rows:
        null_us, ours_us = 1e6 / statistics.median(rates["null"]), 1e6 / statistics.median(rates["podnetwork"])
        print(f"| {nodes} | {candidates} | {null_us:.0f} | {ours_us:.0f} | {ours_us - null_us:.0f} | "
              f"{cost['short way']:.1f} | {cost['long way']:.1f} | {cost['decision']:.1f} | "
              f"{cost['null handling']:.1f} |")
    print()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
