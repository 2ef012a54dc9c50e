"""The webhooks' body limit over real HTTPS: 413 before the body is read, however it is framed.

The API server caps request bodies at 3 MiB, so the AdmissionReviews it sends
stay near that; `podnetwork.kube.webhooks.server` refuses larger ones for both webhooks
(`--webhook-max-body-bytes`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.operator import command as bridge_command
from podnetwork import cli
from podnetwork.cli import operatorshell
from podnetwork.commands import controller as controller_command
from podnetwork.kube import certificates
from tests.api import bridge_api_support as bs
from tests.api import webhook_support as ws
from tests.api.kube_emulator import write_kubeconfig

pytestmark = pytest.mark.timeout(120)

HOOKS = [pytest.param(hook, id=hook.name) for hook in ws.HOOKS]
MiB = 1024 * 1024
PODNETWORK = [sys.executable, "-m", "podnetwork"]


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> certificates.Certificate:
    return ws.certificate(Path(tmp_path_factory.mktemp("webhook-cert")))


def padded(size: int) -> bytes:
    """A valid AdmissionReview of exactly `size` bytes (padding in an annotation nobody reads)."""
    body = ws.review()
    body["request"]["object"]["metadata"]["annotations"] = {"example.com/pad": ""}
    short = len(json.dumps(body).encode())
    body["request"]["object"]["metadata"]["annotations"]["example.com/pad"] = "x" * (size - short)
    raw = json.dumps(body).encode()
    assert len(raw) == size
    return raw


def assert_too_large(reply: ws.Reply, limit: int = operatorshell.MAX_BODY_BYTES) -> None:
    assert reply.status == 413, reply
    assert f"exceeds the limit of {limit} bytes" in reply.json()["detail"]
    assert reply.headers.get("connection") == "close"


@pytest.mark.parametrize("hook", HOOKS)
async def test_a_body_declared_over_3_mib_is_refused_with_413_before_any_of_it_is_read(
        hook: ws.Hook, cert: certificates.Certificate) -> None:
    total = 200 * MiB
    async with ws.serving(hook.app(), cert) as port:
        # The headers alone: a server that waited for the body would never answer.
        reply = await ws.raw_post(port, hook.path, {"Content-Type": "application/json",
                                                    "Content-Length": str(total)})
    assert_too_large(reply)
    assert f"request body of {total} bytes" in reply.json()["detail"]


@pytest.mark.parametrize("hook", HOOKS)
async def test_a_chunked_body_is_refused_with_413_as_soon_as_it_passes_the_limit(hook: ws.Hook, cert: certificates.Certificate) -> None:
    async with ws.serving(hook.app(), cert) as port:
        # No last chunk: a server that read on to the end of the body would never answer.
        reply = await ws.raw_post(port, hook.path, {"Content-Type": "application/json",
                                                    "Transfer-Encoding": "chunked"},
                                  ws.chunked(ws.past_the_limit(operatorshell.MAX_BODY_BYTES), last=False))
    assert_too_large(reply)


@pytest.mark.parametrize("hook", HOOKS)
async def test_a_content_length_that_lies_low_beside_chunked_framing_does_not_get_a_large_body_in(
        hook: ws.Hook, cert: certificates.Certificate) -> None:
    # HTTP/1.1: Transfer-Encoding wins over Content-Length, so the header is no bound; the bytes are.
    async with ws.serving(hook.app(), cert) as port:
        reply = await ws.raw_post(port, hook.path, {
            "Content-Type": "application/json", "Content-Length": "100", "Transfer-Encoding": "chunked"},
            ws.chunked(ws.past_the_limit(operatorshell.MAX_BODY_BYTES), last=False))
    assert_too_large(reply)


@pytest.mark.parametrize("hook", HOOKS)
async def test_a_content_length_that_lies_low_reads_only_what_it_declares(hook: ws.Hook, cert: certificates.Certificate) -> None:
    body = padded(4096)
    async with ws.serving(hook.app(), cert) as port:
        reply = await ws.raw_post(port, hook.path, {"Content-Type": "application/json", "Content-Length": "1000"},
                                  [body])
    assert reply.status == 400  # the first 1000 bytes, which are not a whole JSON document
    assert reply.json()["detail"].startswith("the body is not JSON")


@pytest.mark.parametrize("hook", HOOKS)
async def test_the_default_limit_is_3_mib_exactly(hook: ws.Hook, cert: certificates.Certificate) -> None:
    limit = operatorshell.MAX_BODY_BYTES
    assert limit == 3 * MiB
    async with ws.serving(hook.app(), cert) as port:
        at_limit = await ws.raw_post(port, hook.path, {"Content-Type": "application/json",
                                                       "Content-Length": str(limit)}, ws.pieces(padded(limit)))
        declared = await ws.raw_post(port, hook.path, {"Content-Length": str(limit + 1)})
        one_more = padded(limit + 1)
        streamed = await ws.raw_post(port, hook.path, {"Transfer-Encoding": "chunked"}, ws.chunked(
            [*ws.pieces(one_more[:limit]), one_more[limit:]], last=False))
    assert at_limit.status == 200, at_limit
    assert at_limit.json()["response"]["uid"] == "u-1"
    assert_too_large(declared)
    assert_too_large(streamed)


@pytest.mark.parametrize("hook", HOOKS)
async def test_a_smaller_limit_is_honoured_for_declared_and_chunked_bodies(hook: ws.Hook, cert: certificates.Certificate) -> None:
    limit = 4096
    async with ws.serving(hook.app(), cert, max_body_bytes=limit) as port:
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=ws.client_tls()) as client:
            fits = await client.post(hook.path, content=padded(limit))
        declared = await ws.raw_post(port, hook.path, {"Content-Length": str(limit + 1)})
        streamed = await ws.raw_post(port, hook.path, {"Transfer-Encoding": "chunked"},
                                     ws.chunked([b" " * limit, b" "], last=False))
    assert fits.status_code == 200 and fits.json()["response"]["allowed"] is True
    assert_too_large(declared, limit)
    assert f"{limit + 1} bytes exceeds the limit of {limit}" in declared.json()["detail"]
    assert_too_large(streamed, limit)


# --- the flag, in both commands ---------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["controller"], ["bridge", "--webhook"]], ids=["controller", "bridge"])
def test_both_commands_default_to_3_mib(argv: list[str]) -> None:
    parser = cli.build_parser({"controller": controller_command.command, "bridge": bridge_command.command})
    assert parser.parse_args(argv).webhook_max_body_bytes == 3 * MiB


@pytest.mark.parametrize("command", ["controller", "bridge"])
@pytest.mark.parametrize("value", ["0", "-5", "3MiB"])
async def test_a_limit_that_is_not_a_positive_byte_count_is_refused_at_the_command_line(
        command: str, value: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, command, "--webhook-max-body-bytes", value,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert f"invalid byte count {value!r}: expected a whole number, 1 or more" in err.decode()


async def started(port: int, path: str) -> None:
    async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=ws.client_tls()) as client:
        for _ in range(300):
            try:
                await client.get("/healthz")
                return
            except httpx.TransportError:
                await asyncio.sleep(0.1)
    raise AssertionError("the webhook never answered")


async def limited(port: int, path: str) -> tuple[ws.Reply, ws.Reply]:
    """A review of 4096 bytes, and one of 4097 (declared, so refused from the headers)."""
    await started(port, path)
    fits = padded(4096)
    return (await ws.raw_post(port, path, {"Content-Length": str(len(fits))}, [fits]),
            await ws.raw_post(port, path, {"Content-Length": "4097"}))


async def stopped(proc: asyncio.subprocess.Process) -> str:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    return out.decode()


async def test_podnetwork_controller_serves_admission_with_the_limit_of_its_flag() -> None:
    port = ws.free_port()
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "controller", "--feature-gates", "MultiNetwork=false", "--webhook-host", "127.0.0.1",
        "--webhook-port", str(port), "--webhook-max-body-bytes", "4096",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        fits, over = await limited(port, ws.CONTROLLER_VALIDATING.path)
    finally:
        out = await stopped(proc)
    assert proc.returncode == 0, out
    assert fits.status == 200 and fits.json()["response"] == {"uid": "u-1", "allowed": True}
    assert_too_large(over, 4096)


@pytest.mark.kmock(cls=bs.Emulator)
async def test_podnetwork_bridge_serves_its_webhook_with_the_limit_of_its_flag(kmock: Any, tmp_path: Path) -> None:
    bs.declare_resources(kmock)
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    port = ws.free_port()
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, "bridge", "--kubeconfig", str(config), "--webhook", "--webhook-host", "127.0.0.1",
        "--webhook-port", str(port), "--webhook-max-body-bytes", "4096",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "KUBECONFIG": ""})
    try:
        fits, over = await limited(port, ws.BRIDGE.path)
    finally:
        out = await stopped(proc)
    assert proc.returncode == 0, out
    assert fits.status == 200 and fits.json()["response"]["uid"] == "u-1"
    assert_too_large(over, 4096)
