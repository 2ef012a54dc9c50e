"""The pod-start benchmark's arithmetic (benchmarks/bench_podstart.py, docs/benchmarks.md): its
percentiles, its ratios as the tables print them, and its reading of our agent's log lines as the
agent writes them. The benchmark itself never runs in the suite (it asserts no timing); these are
the parts of it whose mistakes would print wrong figures without anyone noticing."""

from __future__ import annotations

import contextlib
import datetime
import http.server
import importlib.util
import json
import random
import ssl
import statistics
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from bridge.agent.cni.request import Phases

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_podstart.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_podstart", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_podstart", module)  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_a_percentile_lies_between_the_two_nearest_ranks(bench: ModuleType) -> None:
    twenty = [float(v) for v in range(20, 0, -1)]  # unsorted on purpose
    assert bench.percentile(twenty, 50) == pytest.approx(10.5)
    assert bench.percentile(twenty, 95) == pytest.approx(19.05)
    assert bench.percentile(twenty, 99) == pytest.approx(19.81)
    assert bench.percentile(twenty, 0) == 1.0 and bench.percentile(twenty, 100) == 20.0


def test_one_value_is_every_percentile_and_no_value_or_a_percentile_out_of_range_is_refused(
        bench: ModuleType) -> None:
    assert [bench.percentile([0.7], p) for p in (50, 95, 99)] == [0.7, 0.7, 0.7]
    with pytest.raises(ValueError):
        bench.percentile([], 50)
    with pytest.raises(ValueError):
        bench.percentile([1.0, 2.0], 101)


def test_percentiles_agree_with_the_standard_librarys_inclusive_quantiles(bench: ModuleType) -> None:
    rng = random.Random(35)
    for size in (2, 3, 20, 100, 101):
        values = [rng.uniform(0.2, 9.0) for _ in range(size)]
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        for p in (50, 95, 99):
            assert bench.percentile(values, p) == pytest.approx(cuts[p - 1]), (size, p)


def test_a_ratio_is_printed_with_two_decimals_and_without_a_baseline_as_not_available(bench: ModuleType) -> None:
    assert bench.ratio(1.5, 1.0) == "1.50×"
    assert bench.ratio(0.9, 1.2) == "0.75×"
    assert bench.ratio(2.0, 3.0) == "0.67×"
    assert bench.ratio(1.0, 0.0) == "n/a"
    assert bench.ratio(None, 1.0) == "n/a" and bench.ratio(1.0, None) == "n/a"
    assert bench.milliseconds(1.2344) == "1234 ms" and bench.milliseconds(None) == "n/a"


def test_the_agents_add_and_status_write_lines_are_read_for_the_benchmarks_namespace_only(
        bench: ModuleType) -> None:
    phases = Phases()
    phases.spans = {"pod": 0.0011, "plan": 0.0004, "exec eth0": 0.012, "exec net1": 0.0105}
    log = "\n".join([
        # the agent's own format (bridge/agent/daemon/agent.py, request.Phases): the parser must follow it
        f"INFO bridge.agent: ADD container abc123 (pod bench-x/single-0) done in 31.4 ms ({phases})",
        f"INFO bridge.agent: ADD container def456 (pod other/p) done in 99.0 ms ({phases})",
        "INFO bridge.agent: DEL container abc123 (pod bench-x/single-0) done in 20.0 ms (exec eth0 9.00)",
        "INFO bridge.agent.pods.publisher: pod bench-x/single-0: network-status written in 6.5 ms",
        "INFO bridge.agent.pods.publisher: pod other/p: network-status written in 60.0 ms",
    ])
    adds, writes = bench.agent_log(log, "bench-x")
    assert adds == [{"total": 31.4, "pod": 1.1, "plan": 0.4, "exec eth0": 12.0, "exec net1": 10.5}]
    assert writes == [6.5]


def test_the_agents_metrics_are_summed_per_command_and_per_plugin_counting_successes_only(
        bench: ModuleType) -> None:
    from prometheus_client import generate_latest

    from bridge.agent.daemon.metrics import AgentMetrics

    # the agent's own registry, as its /metrics serves it: the parser must follow its names and labels
    metrics = AgentMetrics(lambda: 0)
    for seconds in (0.030, 0.050):
        metrics.requests.labels("ADD", "0").observe(seconds)
    metrics.requests.labels("ADD", "7").observe(0.9)
    metrics.requests.labels("DEL", "0").observe(0.020)
    metrics.observe_exec("bridge", "ADD", True, 0.010)
    metrics.observe_exec("bridge", "ADD", True, 0.014)
    metrics.observe_exec("bridge", "ADD", False, 0.5)
    means = bench.metric_means(generate_latest(metrics.registry).decode())
    assert means.keys() == {"ADD", "DEL", "exec bridge ADD"}
    assert means["ADD"] == (2, pytest.approx(0.080))
    assert means["DEL"] == (1, pytest.approx(0.020))
    assert means["exec bridge ADD"] == (2, pytest.approx(0.024))


# -- the watch's end ---------------------------------------------------------------------------------

class _Watched(http.server.BaseHTTPRequestHandler):
    """A pods list and watch as the API server serves them: each watch sends one ADDED event (pod
    `a` on the first connection, `b` on the second...), then waits for `release`, sends one more
    (`a2`, `b2`) and stays open."""

    protocol_version = "HTTP/1.1"
    connections: list[threading.Event] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _chunk(self, event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self) -> None:
        if "watch=true" not in self.path:
            body = json.dumps({"metadata": {"resourceVersion": "1"}, "items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        release = threading.Event()
        self.connections.append(release)
        name = "abcdefgh"[len(self.connections) - 1]
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        pod = {"metadata": {"name": name, "resourceVersion": "2"}, "spec": {}, "status": {}}
        with contextlib.suppress(OSError):
            self._chunk({"type": "ADDED", "object": pod})
            release.wait(30)
            self._chunk({"type": "MODIFIED", "object": {**pod, "metadata": {"name": name + "2",
                                                                             "resourceVersion": "3"}}})
            release.wait(30)


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """A TLS server on loopback with the kit's file names (pki/ca.crt, admin.crt, admin.key), as
    PodWatch reads a cluster's."""
    from podnetwork.kube import certificates

    pem, key = certificates.self_signed_pem("127.0.0.1")
    pki = tmp_path / "pki"
    pki.mkdir()
    for name, data in (("ca.crt", pem), ("admin.crt", pem), ("admin.key", key)):
        (pki / name).write_bytes(data)
    _Watched.connections = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Watched)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(root=tmp_path, server=f"https://127.0.0.1:{server.server_address[1]}")
    finally:
        for release in _Watched.connections:
            release.set()
        server.shutdown()
        server.server_close()


def test_a_closed_watch_ends_its_thread_so_the_next_watch_keeps_its_connection_whole(
        bench: ModuleType, api_server: SimpleNamespace) -> None:
    # Closing the client alone left the thread blocked in its TLS read on a freed fd number; the
    # next watch's connection got that number, and the old watch's next bytes made the thread read
    # the new connection's: SSL WRONG_VERSION_NUMBER there, once per run.
    first = bench.PodWatch(api_server, "ns")
    first.wait(["a"], "seen", 30)
    first.close()
    assert not first.thread.is_alive()
    second = bench.PodWatch(api_server, "ns")
    try:
        second.wait(["b"], "seen", 30)
        for release in _Watched.connections:
            release.set()  # the first connection's server side writes too, if it can
        second.wait(["b2"], "seen", 30)
        assert (second.reconnects, second.failure, "a2" in second.pods) == ([], None, False)
    finally:
        second.close()
    assert not second.thread.is_alive()


# -- the node's logs and the API server's admission figures ----------------------------------------

SANDBOX, CONTAINER = "4f3e" * 16, "9a8b" * 16
CONTAINERD_LOG = f"""\
time="2026-12-07T02:40:01.100000000Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{{Name:single-0,Uid:0c1d,Namespace:bench-x,Attempt:0,}}"
time="2026-12-07T02:40:01.120000000Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{{Name:single-0,Uid:0c1e,Namespace:other,Attempt:0,}}"
time="2026-12-07T02:40:01.250000000Z" level=info msg="starting signal loop" namespace=k8s.io path=/var/tmp/n/containerd/state/io.containerd.runtime.v2.task/k8s.io/{SANDBOX} pid=4242 runtime=io.containerd.runc.v2
time="2026-12-07T02:40:01.300000000Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{{Name:single-0,Uid:0c1d,Namespace:bench-x,Attempt:0,}} returns sandbox id \\"{SANDBOX}\\""
time="2026-12-07T02:40:01.350000000Z" level=info msg="CreateContainer within sandbox \\"{SANDBOX}\\" for container &ContainerMetadata{{Name:c,Attempt:0,}}"
time="2026-12-07T02:40:01.400000000Z" level=info msg="CreateContainer within sandbox \\"{SANDBOX}\\" for &ContainerMetadata{{Name:c,Attempt:0,}} returns container id \\"{CONTAINER}\\""
time="2026-12-07T02:40:01.410000000Z" level=info msg="StartContainer for \\"{CONTAINER}\\""
time="2026-12-07T02:40:01.500000000Z" level=info msg="StartContainer for \\"{CONTAINER}\\" returns successfully"
"""
KUBELET_LOG = """\
I1207 02:40:01.000001    2744 kubelet.go:2724] "SyncLoop ADD" source="api" pods=["bench-x/single-0"]
I1207 02:40:01.350000    2744 kubelet.go:2730] "SyncLoop UPDATE" source="api" pods=["bench-x/single-0"]
I1207 02:40:01.360000    2744 kubelet.go:2730] "SyncLoop UPDATE" source="api" pods=["bench-x/single-0"]
I1207 02:40:02.600000    2744 kubelet.go:2757] "SyncLoop (PLEG): event for pod" pod="bench-x/single-0" event={"ID":"u","Type":"ContainerStarted","Data":"bb"}
I1207 02:40:01.600000    2744 kubelet.go:2757] "SyncLoop (PLEG): event for pod" pod="bench-x/single-0" event={"ID":"u","Type":"ContainerStarted","Data":"aa"}
I1207 02:40:02.700000    2744 kubelet.go:2724] "SyncLoop ADD" source="api" pods=["other/single-0"]
I1207 02:40:02.800000    2744 pod_startup_latency_tracker.go:148] "Observed pod startup duration" pod="bench-x/single-0" podStartSLOduration=1.78 observedRunningTime="2026-12-07 02:40:02.738079468 +0000 UTC m=+6.736593285" watchObservedRunningTime="2026-12-07 02:40:02.785674144 +0000 UTC m=+6.784187961"
"""


def test_containerd_and_the_kubelet_steps_are_read_per_pod_of_the_namespace(bench: ModuleType) -> None:
    marks = bench.containerd_marks(CONTAINERD_LOG, "bench-x")
    base = datetime.datetime(2026, 12, 7, 2, 40, 1, tzinfo=datetime.UTC).timestamp()
    assert {step: round(when - base, 3) for step, when in marks["single-0"].items()} == {
        "sandbox asked": 0.1, "CNI over": 0.25, "sandbox done": 0.3, "container started": 0.5}
    kubelet = bench.kubelet_marks(KUBELET_LOG, "bench-x", 2026)
    local = datetime.datetime(2026, 12, 7, 2, 40, 1).timestamp()  # klog writes local time
    running = kubelet["single-0"].pop("running")
    assert {step: round(when - local, 3) for step, when in kubelet["single-0"].items()} == {
        "kubelet ADD": 0.0, "kubelet UPDATE": 0.35, "PLEG saw it": 1.6}
    assert round(running - base, 3) == 1.738  # UTC, as the line says
    assert list(kubelet) == ["single-0"]


def test_admission_figures_are_the_change_between_two_scrapes_of_a_pods_post(bench: ModuleType) -> None:
    post = 'component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"'
    hook = 'name="pods.x.io",operation="CREATE",rejected="false",type="admit"'

    def scrape(posts: int, seconds: float, hooks: int) -> str:
        return "\n".join([
            f"apiserver_request_duration_seconds_sum{{{post}}} {seconds}",
            f"apiserver_request_duration_seconds_count{{{post}}} {posts}",
            f"apiserver_request_duration_seconds_count{{{post.replace('pods', 'events')}}} 40",
            f"apiserver_admission_webhook_admission_duration_seconds_sum{{{hook}}} {hooks * 0.01}",
            f"apiserver_admission_webhook_admission_duration_seconds_count{{{hook}}} {hooks}",
            f"apiserver_admission_webhook_admission_duration_seconds_count{{{hook.replace('CREATE', 'UPDATE')}}} 9",
        ])

    means = bench.admission_means(bench.admission_sums(scrape(3, 0.3, 1)), bench.admission_sums(scrape(8, 0.8, 6)))
    assert {key: (count, round(mean, 6)) for key, (count, mean) in means.items()} == {
        "request": (5, 0.1), "webhook pods.x.io admit": (5, 0.01)}


def test_our_operators_webhook_apps_are_read_per_component_and_path(bench: ModuleType) -> None:
    text = "\n".join([
        '# HELP podnetwork_bridge_webhook_request_duration_seconds Time to answer an admission request, by path.',
        'podnetwork_bridge_webhook_request_duration_seconds_bucket{le="0.005",path="/mutate-pods"} 1.0',
        'podnetwork_bridge_webhook_request_duration_seconds_count{path="/mutate-pods"} 4.0',
        'podnetwork_bridge_webhook_request_duration_seconds_sum{path="/mutate-pods"} 0.02',
        'podnetwork_controller_webhook_request_duration_seconds_count{path="/validate"} 2.0',
        'podnetwork_controller_webhook_request_duration_seconds_sum{path="/validate"} 0.004',
    ])
    assert bench.app_sums(text) == {"bridge app /mutate-pods": [4.0, 0.02], "controller app /validate": [2.0, 0.004]}
