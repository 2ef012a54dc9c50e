"""docs/metrics.md lists exactly the metrics each component registers, with their types, and
every name follows the rules of podnetwork/cli/metrics.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from bridge.agent.daemon.metrics import AgentMetrics
from bridge.operator import command as bridge_command
from bridge.operator import controller as bridge_controller
from bridge.operator import serviceslices
from podnetwork.cli import metrics
from podnetwork.commands import controller as controller_command
from podnetwork.kep import controller
from scheduler_plugin import app, cache, settings
from tests.api.metrics_support import parse, value

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(podnetwork_[a-z_]+)` \| (counter|gauge|histogram) \|")


def registries() -> dict[str, CollectorRegistry]:
    agent = AgentMetrics(lambda: 0)
    agent.watch_status_writes(lambda: 0, lambda: 0)  # the publisher's hook, wired at merge
    return {
        "agent": agent.registry,
        "controller": controller_command.metrics(controller.Controller()).registry,
        "bridge": bridge_metrics(),
        "extender": app.create_app(cache.Cache(), settings.Settings()).state.metrics.registry,
    }


def bridge_metrics() -> CollectorRegistry:
    measured = bridge_command.metrics(bridge_controller.Bridge())
    bridge_command.service_metrics(measured, serviceslices.Services())  # as `--services` (the default) adds it
    return measured.registry


def documented() -> dict[str, str]:
    rows = [ROW.match(line) for line in DOC.read_text().splitlines()]
    return {m.group(1): m.group(2) for m in rows if m}


def test_the_document_lists_every_registered_metric_and_nothing_else() -> None:
    registered = {name: kind for reg in registries().values() for name, kind in metrics.families(reg).items()}
    assert documented() == registered


@pytest.mark.parametrize("component", ["agent", "controller", "bridge", "extender"])
def test_every_name_follows_the_rules(component: str) -> None:
    assert metrics.problems(registries()[component], component) == []


def test_the_rules_catch_a_foreign_prefix_a_gauge_named_total_and_a_histogram_without_unit() -> None:
    reg = metrics.registry()
    Counter("other_requests", "x", registry=reg)
    Gauge("podnetwork_agent_things_total", "x", registry=reg)
    Histogram("podnetwork_agent_latency", "x", registry=reg)
    found = metrics.problems(reg, "agent")
    assert any("other_requests_total: does not start with podnetwork_agent_" in p for p in found)
    assert any("podnetwork_agent_things_total: only counters" in p for p in found)
    assert any("podnetwork_agent_latency: a histogram names its unit" in p for p in found)


def test_the_status_writes_hook_reads_the_publisher_at_each_scrape() -> None:
    queue = {"pending": 3, "failed": 1}
    agent = AgentMetrics(lambda: 0)
    names = metrics.families(agent.registry)
    assert "podnetwork_agent_status_writes_pending" not in names  # not wired: not claimed
    agent.watch_status_writes(lambda: queue["pending"], lambda: queue["failed"])
    first = parse(metrics.exposition(agent.registry)[0].decode())
    queue.update(pending=0, failed=2)
    second = parse(metrics.exposition(agent.registry)[0].decode())
    assert value(first, "podnetwork_agent_status_writes_pending") == 3
    assert value(first, "podnetwork_agent_status_writes_failed_total") == 1
    assert value(second, "podnetwork_agent_status_writes_pending") == 0
    assert value(second, "podnetwork_agent_status_writes_failed_total") == 2


def test_a_gauge_whose_reader_fails_is_left_out_and_the_scrape_still_answers() -> None:
    reg = metrics.registry()

    def broken() -> float:
        raise RuntimeError("gone")

    reg.register(metrics.CallbackGauge("podnetwork_agent_broken_records", "x", broken))
    reg.register(metrics.CallbackGauge("podnetwork_agent_fine_records", "x", lambda: 7))
    samples = parse(metrics.exposition(reg)[0].decode())
    assert value(samples, "podnetwork_agent_fine_records") == 7
    assert ("podnetwork_agent_broken_records", frozenset()) not in samples


def test_handlers_registered_through_the_counting_decorators_count_runs_and_failures_and_keep_their_ids(
) -> None:
    import asyncio

    import kopf

    from podnetwork.cli import handlers

    measured = metrics.OperatorMetrics("controller")
    on = handlers.Handlers(measured)
    registry = kopf.OperatorRegistry()

    @on.index("pods", registry=registry)
    def pod_refs(**_: object) -> int:
        return 1

    @on.event("example.com", "v1", "widgets", registry=registry, id="widget_event")
    async def widget_event(**_: object) -> None:
        raise RuntimeError("boom")

    assert pod_refs.__qualname__.endswith("pod_refs"), "kopf derives handler ids from the qualified name"
    assert asyncio.iscoroutinefunction(widget_event), "kopf would run a plain function in a thread"
    assert pod_refs() == 1
    with pytest.raises(RuntimeError):
        asyncio.run(widget_event())
    samples = parse(metrics.exposition(measured.registry)[0].decode())
    runs, failures = "podnetwork_controller_handler_runs_total", "podnetwork_controller_handler_failures_total"
    assert value(samples, runs, handler="pod_refs", resource="pods") == 1
    assert value(samples, failures, handler="pod_refs", resource="pods") == 0
    assert value(samples, runs, handler="widget_event", resource="widgets") == 1
    assert value(samples, failures, handler="widget_event", resource="widgets") == 1

