"""What docs/deploy.md says the operators' webhook servers answer, against the answer itself: the
controller's admission application over httpx (ASGI), byte for byte as `kubectl get --raw` prints
it. The doc said `ok`; the server answers `{"status":"ok"}`."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from podnetwork.commands import admissionapp

ROOT = Path(__file__).resolve().parents[3]


async def test_the_webhook_proxys_healthz_answers_what_the_deploy_doc_says() -> None:
    doc = (ROOT / "docs" / "deploy.md").read_text()
    said = re.search(r"podnetwork-webhook:443/proxy/healthz\"`\s+answers `([^`]+)`", doc)
    assert said is not None, "docs/deploy.md no longer says what /healthz answers"
    app = admissionapp.app(lambda _: None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
        answer = await client.get("/healthz")
    assert answer.status_code == 200
    assert answer.content.decode() == said.group(1)
