"""The agent's TLS connections with asyncio's read buffer at 64 KiB (`command.small_tls_read_buffers`,
256 KiB per connection on Python 3.11): set for the connections opened afterwards, and an answer
several times the buffer still arrives whole through the agent's API client."""

from __future__ import annotations

import asyncio
import json
import ssl
from asyncio import sslproto
from pathlib import Path

import pytest

from bridge.agent.daemon import command
from podnetwork.kube import certificates, credentials, lite


def test_the_buffer_is_lowered_never_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", 256 * 1024)
    command.small_tls_read_buffers()
    assert sslproto.SSLProtocol.max_size == command.TLS_READ_BUFFER == 64 * 1024
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", 16 * 1024)
    command.small_tls_read_buffers()
    assert sslproto.SSLProtocol.max_size == 16 * 1024


async def test_an_answer_of_many_buffers_arrives_whole_over_tls(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", 256 * 1024)
    command.small_tls_read_buffers()
    cert = certificates.self_signed(tmp_path, "127.0.0.1")
    big = {"kind": "ConfigMap", "metadata": {"name": "big"}, "data": {f"k{i}": "x" * 1000 for i in range(400)}}
    body = json.dumps(big).encode()
    assert len(body) > 6 * command.TLS_READ_BUFFER

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(cert.cert, cert.key)
    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=serving)
    port = server.sockets[0].getsockname()[1]
    api = lite.LiteApi(credentials.Credentials(server=f"https://127.0.0.1:{port}", ca_file=str(cert.cert)))
    try:
        assert await api.get("/api/v1/namespaces/default/configmaps/big") == big
    finally:
        await api.close()
        server.close()
        await server.wait_closed()
