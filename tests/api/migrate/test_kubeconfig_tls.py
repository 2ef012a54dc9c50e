"""A kubeconfig's certificates in use: HTTPS on loopback that requires a client certificate.

podnetwork.kube reads the kubeconfig for every command (migrate included);
these tests check that its lightkube client verifies the server with the
kubeconfig's CA and presents its client certificate (as data, as files, or from
an exec plugin).
"""

from __future__ import annotations

import base64
import datetime
import http.server
import ipaddress
import json
import ssl
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from podnetwork.kube import client as kube
from podnetwork.kube import credentials


def self_signed(directory: Path, name: str, cn: str) -> tuple[Path, Path]:
    """A self-signed EC certificate for `cn`, valid for 127.0.0.1, usable as its own CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert, key_file = directory / f"{name}.pem", directory / f"{name}.key"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert, key_file


class Server:
    """HTTPS on 127.0.0.1 that accepts only the client certificate it was given."""

    def __init__(self, cert: Path, key: Path, client_ca: Path) -> None:
        self.seen: list[dict[str, Any]] = []
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                peer = self.connection.getpeercert() or {}  # type: ignore[attr-defined]
                subject = dict(item for rdn in peer.get("subject", ()) for item in rdn)
                seen.append({"client": subject.get("commonName"), "authorization": self.headers["Authorization"]})
                body = json.dumps({"kind": "APIVersions"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_cert_chain(str(cert), str(key))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    self_signed(directory, "server", "apiserver")
    self_signed(directory, "client", "alice")
    return directory


@pytest.fixture()
def server(pki: Path) -> Iterator[Server]:
    srv = Server(pki / "server.pem", pki / "server.key", client_ca=pki / "client.pem")
    yield srv
    srv.stop()


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }))
    return str(path)


def get(path: str) -> dict[str, Any]:
    """One request through the client every command makes from this kubeconfig."""
    api = kube.Api(credentials.resolve(path), timeout=10)
    try:
        return api.get(kube.Pod, "p", "ns")
    finally:
        api.close()


def test_certificate_data_verifies_the_server_and_authenticates_the_client(
    pki: Path, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kubeconfig(tmp_path / "k", server.url, {"certificate-authority-data": b64(pki / "server.pem")},
                      {"client-certificate-data": b64(pki / "client.pem"),
                       "client-key-data": b64(pki / "client.key"), "token": "abc"})
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))  # where ssl's key files go for a moment
    assert get(path)["kind"] == "APIVersions"
    assert server.seen == [{"client": "alice", "authorization": "Bearer abc"}]
    assert list(scratch.iterdir()) == []  # the key material written from *-data is gone already


def test_certificate_files_are_relative_to_the_kubeconfig(pki: Path, server: Server) -> None:
    path = kubeconfig(pki / "k", server.url, {"certificate-authority": "server.pem"},
                      {"client-certificate": "client.pem", "client-key": "client.key"})
    assert get(path)["kind"] == "APIVersions"
    assert server.seen == [{"client": "alice", "authorization": None}]


def test_a_server_the_kubeconfig_does_not_vouch_for_is_refused(pki: Path, server: Server, tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "k", server.url, {},
                      {"client-certificate-data": b64(pki / "client.pem"), "client-key-data": b64(pki / "client.key")})
    with pytest.raises(kube.Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
        get(path)
    assert server.seen == []


def test_insecure_skip_tls_verify_still_presents_the_client_certificate(
    pki: Path, server: Server, tmp_path: Path
) -> None:
    path = kubeconfig(tmp_path / "k", server.url, {"insecure-skip-tls-verify": True},
                      {"client-certificate-data": b64(pki / "client.pem"), "client-key-data": b64(pki / "client.key")})
    assert get(path)["kind"] == "APIVersions"
    assert server.seen[0]["client"] == "alice"


def test_an_exec_plugin_may_answer_with_a_client_certificate(pki: Path, server: Server, tmp_path: Path) -> None:
    status = {"clientCertificateData": (pki / "client.pem").read_text(),
              "clientKeyData": (pki / "client.key").read_text()}
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json\nprint(json.dumps(" + repr({
        "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}) + "))\n")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(plugin)]}}
    path = kubeconfig(tmp_path / "k", server.url, {"certificate-authority-data": b64(pki / "server.pem")}, user)
    assert get(path)["kind"] == "APIVersions"
    assert server.seen == [{"client": "alice", "authorization": None}]
