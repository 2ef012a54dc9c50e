"""docs/scheduler-extender.md quotes the extender's messages and metrics as the code has them."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from podnetwork.kep import networks
from scheduler_plugin import app as app_mod
from scheduler_plugin import cache as cache_mod
from scheduler_plugin import decision, settings, wire
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


def test_documented_limits_are_the_ones_the_code_enforces() -> None:
    limits = DOC[DOC.index("## Limits"):DOC.index("## State")]
    for text in (
        f"exceeds the limit of {settings.DEFAULT_MAX_BODY_BYTES} bytes (--max-body-bytes)",
        f"{settings.DEFAULT_MAX_CONNECTIONS} (`--max-connections N`)",
        f"may not be more than {networks.MAX_ANNOTATION_BYTES} bytes",
        f"| message length | {wire.MAX_MESSAGE_CHARS} characters",
        f"| values quoted in a message | {decision.MAX_VALUE_CHARS} characters",
        f"| problems named in one message | {wire.MAX_PROBLEMS_SHOWN} |",
        f"at most {cache_mod.OFFER_MEMO_TEXT_LIMIT} characters",
        f"only texts up to {cache_mod.OFFER_MEMO_TEXT_LIMIT} characters are remembered",
    ):
        assert text in limits, text
    assert cache_mod.OFFER_MEMO_BUDGET == 1024 * 1024 and "up to 1 MiB of text" in limits


def test_documented_node_annotation_messages_are_the_ones_the_cache_writes() -> None:
    for text in ("blue,green", '{"blue": true}', '["blue", 1]'):
        offer = cache_mod.parse_node_offer(text)
        assert isinstance(offer, cache_mod.InvalidOffer)
        assert f"`{offer.message}`" in DOC, offer.message
