"""The pod-start benchmark's arithmetic (benchmarks/bench_podstart.py, docs/benchmarks.md): its
percentiles, its ratios as the tables print them, and its reading of our agent's log lines as the
agent writes them. The benchmark itself never runs in the suite (it asserts no timing); these are
the parts of it whose mistakes would print wrong figures without anyone noticing."""

from __future__ import annotations

import importlib.util
import random
import statistics
import sys
from pathlib import Path
from types import ModuleType

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
