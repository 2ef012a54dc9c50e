"""Scrape a Prometheus endpoint over real HTTP and read its samples (tests of every tier use it)."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Exposition text -> {(sample name, labels): value}."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


async def scrape(url: str) -> Samples:
    """GET `url` (a /metrics endpoint): it must answer 200 in the text exposition format."""
    async with httpx.AsyncClient() as client:
        response = await client.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain"), response.headers
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when it is not exposed (a labelled child not created yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)
