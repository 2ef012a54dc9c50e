"""docs/scheduler-extender.md quotes the extender's messages and metrics as the code has them."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from scheduler_plugin import app as app_mod
from scheduler_plugin import cache as cache_mod
from scheduler_plugin import decision
from scheduler_plugin.settings import Settings

DOC = (Path(__file__).resolve().parents[3] / "docs" / "scheduler-extender.md").read_text()


def test_documented_messages_are_the_ones_the_decision_writes() -> None:
    for message in (
        decision.not_found("PodNetwork", "X"),
        decision.not_found("PodNetworkAttachment", "X"),
        decision.not_ready("PodNetwork", "X", "<reason>", "<message>"),
        decision.not_available("X"),
        decision.NOT_SYNCED,
        decision.UNKNOWN_NODE,
    ):
        assert f"`{message}`" in DOC, message


async def test_documented_metrics_are_served() -> None:
    application = app_mod.create_app(cache_mod.Cache(), Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://x") as client:
        await client.post("/filter", json={"Pod": {}, "NodeNames": ["n"]})
        text = (await client.get("/metrics")).text
    served = {family.name for family in text_string_to_metric_families(text)}
    documented = set(re.findall(r"`(podnetwork_extender_[a-z_]+)", DOC))
    assert documented, "the doc lists no metrics"
    for name in documented:
        assert name.removesuffix("_total") in served, name
