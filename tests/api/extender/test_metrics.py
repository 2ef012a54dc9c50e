"""The extender's /metrics scraped over real HTTP (uvicorn on loopback) after real /filter calls."""

from __future__ import annotations

import json

import httpx

from scheduler_plugin import app as app_mod
from scheduler_plugin.settings import Settings
from tests.api.extender_support import by_names, pod, served, world
from tests.api.metrics_support import scrape, value

NAMES = ["node-a", "node-b", "node-c"]


async def test_a_filter_call_moves_the_request_latency_and_node_outcome_metrics() -> None:
    with served(app_mod.create_app(world(), Settings())) as url:
        before = await scrape(f"{url}/metrics")
        async with httpx.AsyncClient(base_url=url) as client:
            reply = await client.post("/filter", content=json.dumps(
                by_names(pod([{"podNetworkName": "blue"}]), NAMES)))
        after = await scrape(f"{url}/metrics")
    assert reply.status_code == 200
    passed, failed = len(reply.json()["NodeNames"]), len(reply.json()["FailedNodes"])
    assert (passed, failed) == (2, 1)
    assert value(before, "podnetwork_extender_requests_total", verb="filter", code="200") == 0
    assert value(after, "podnetwork_extender_requests_total", verb="filter", code="200") == 1
    assert value(after, "podnetwork_extender_request_duration_seconds_count", verb="filter") == 1
    assert value(after, "podnetwork_extender_filtered_nodes_total", outcome="passed") == passed
    assert value(after, "podnetwork_extender_filtered_nodes_total", outcome="failed") == failed
    assert value(after, "podnetwork_extender_cache_synced") == 1
