"""The webhook processes' memory stays bounded under many large requests (real processes, real HTTPS).

Before the body limit a 200 MB AdmissionReview was read whole, at 663 MiB peak
per process. Here each command serves its webhook as deployed, and gets, three
at a time: bodies declaring 200 MiB, chunked bodies of 100 MiB, and reviews just
under the 3 MiB limit built to cost the most once parsed (a million empty
objects). The peak resident size (VmHWM) of the process must stay under a
generous bound; nothing is timed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from podnetwork.cli import operatorshell
from tests.api import bridge_api_support as bs
from tests.api import webhook_support as ws
from tests.api.kube_emulator import write_kubeconfig

pytestmark = pytest.mark.timeout(300)

MiB = 1024 * 1024
PODNETWORK = [sys.executable, "-m", "podnetwork"]
#: Peak resident size allowed: several times what the processes need (about 100 MiB idle, and
#: some 100 MiB per limit-sized review being parsed), far under the 663 MiB one 200 MB body took.
PEAK_BOUND = 450 * MiB
CONCURRENCY = 3


def peak_rss(pid: int) -> int:
    """VmHWM: the highest resident set size the process has had, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


def costly_review() -> bytes:
    """A review just under the limit whose parsed form is as large as JSON allows: empty objects."""
    body = ws.review()
    body["request"]["object"]["spec"]["containers"] = []
    frame = json.dumps(body).encode()
    count = (operatorshell.MAX_BODY_BYTES - len(frame) - 16) // 3
    raw = frame.replace(b'"containers": []', b'"containers": [' + b",".join([b"{}"] * count) + b"]")
    assert len(raw) <= operatorshell.MAX_BODY_BYTES
    return raw


async def load(port: int, path: str) -> list[int]:
    """The requests of the module docstring; returns the status of each answer."""
    review = costly_review()
    jobs: list[Callable[[], Awaitable[int]]] = []
    for _ in range(6):
        async def declared() -> int:
            total = 200 * MiB
            reply = await ws.raw_post(port, path, {"Content-Length": str(total)}, ws.repeated(total),
                                      until_answered=True)
            return reply.status
        jobs.append(declared)
    for _ in range(6):
        async def streamed() -> int:
            reply = await ws.raw_post(port, path, {"Transfer-Encoding": "chunked"},
                                      ws.chunked(ws.repeated(100 * MiB)), until_answered=True)
            return reply.status
        jobs.append(streamed)
    for _ in range(12):
        async def costly() -> int:
            return (await ws.raw_post(port, path, {"Content-Length": str(len(review))}, ws.pieces(review))).status
        jobs.append(costly)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def run(job: Callable[[], Awaitable[int]]) -> int:
        async with gate:
            return await job()

    return await asyncio.gather(*(run(job) for job in jobs))


async def started(port: int, path: str) -> None:
    async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=ws.client_tls()) as client:
        for _ in range(300):
            try:
                await client.post(path, json=ws.review())
                return
            except httpx.TransportError:
                await asyncio.sleep(0.1)
    raise AssertionError("the webhook never answered")


async def under_load(argv: list[str], port: int, path: str, env: dict[str, str] | None = None) -> tuple[int, list[int]]:
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env)
    try:
        await started(port, path)
        statuses = await load(port, path)
        peak = peak_rss(proc.pid)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()[-2000:]
    return peak, statuses


def assert_bounded(peak: int, statuses: list[int]) -> None:
    assert peak < PEAK_BOUND, f"peak resident size {peak / MiB:.0f} MiB, bound {PEAK_BOUND / MiB:.0f} MiB"
    # Refused (the answer may be lost to the reset of a connection closed with the body unread).
    assert set(statuses[:12]) <= {413, ws.RESET}, statuses
    assert statuses[12:] == [200] * 12, statuses


async def test_podnetwork_controller_admission_stays_bounded_under_large_requests() -> None:
    port = ws.free_port()
    peak, statuses = await under_load(
        ["controller", "--feature-gates", "MultiNetwork=false", "--webhook-host", "127.0.0.1",
         "--webhook-port", str(port)], port, ws.CONTROLLER_VALIDATING.path)
    assert_bounded(peak, statuses)


@pytest.mark.kmock(cls=bs.Emulator)
async def test_podnetwork_bridge_webhook_stays_bounded_under_large_requests(kmock: Any, tmp_path: Path) -> None:
    bs.declare_resources(kmock)
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    port = ws.free_port()
    peak, statuses = await under_load(
        ["bridge", "--kubeconfig", str(config), "--webhook", "--webhook-host", "127.0.0.1",
         "--webhook-port", str(port)], port, ws.BRIDGE.path, env={**os.environ, "KUBECONFIG": ""})
    assert_bounded(peak, statuses)
