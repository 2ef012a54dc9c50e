"""The webhooks' self-signed certificate, as the API server checks it.

The API server (Go's crypto/x509) dials the host of the registered URL, trusts
only the registered caBundle and reads the host from the subjectAltName, never
from the CN. Python's ssl does the same here (CN checks off), in a TLS handshake
between two in-memory endpoints: no socket, no network.
"""

from __future__ import annotations

import base64
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from podnetwork.kube import certificates, webhooks


def handshake(cert: certificates.Certificate, ca_bundle: str, server_hostname: str) -> None:
    """A TLS handshake of a client that trusts `ca_bundle` (base64 PEM, as registered) and
    dials `server_hostname`, with a server serving `cert`; raises what the client refuses."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(cert.cert), str(cert.key))
    client_ctx = ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode())
    client_ctx.hostname_checks_common_name = False  # as Go: the SANs only
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(to_client, to_server, server_hostname=server_hostname)
    server = server_ctx.wrap_bio(server_in, server_out, server_side=True)
    done: set[str] = set()
    for _ in range(10):
        for name, end in (("client", client), ("server", server)):
            if name in done:
                continue
            try:
                end.do_handshake()
                done.add(name)
            except ssl.SSLWantReadError:
                pass
        server_in.write(to_server.read())
        to_client.write(server_out.read())
        if done == {"client", "server"}:
            return
    raise AssertionError(f"the handshake did not finish ({sorted(done)} done)")


def registered(tmp_path: Path, host: str, url: str | None) -> tuple[certificates.Certificate, str]:
    """The certificate a command makes for --webhook-host/--webhook-url, and the caBundle
    that --manage-webhooks registers with it."""
    cert = certificates.certificate(None, None, tmp_path, host, url)
    return cert, webhooks.client_config(url, host, 9443, cert)["caBundle"]


@pytest.mark.parametrize(
    ("host", "url", "dialled", "refused"),
    [
        pytest.param("0.0.0.0", "https://podnetwork.multinetwork-system.svc:9443",
                     ["podnetwork.multinetwork-system.svc", "localhost", "127.0.0.1"],
                     ["podnetwork.other.svc", "multinetwork-system.svc", "127.0.0.2"],
                     id="a service name behind the wildcard address"),
        pytest.param("10.0.0.5", None, ["10.0.0.5"], ["10.0.0.6", "localhost"], id="an IP host"),
        pytest.param("::", "https://[fd00::5]:9443", ["fd00::5", "127.0.0.1"], ["fd00::6"],
                     id="an IPv6 URL"),
        pytest.param("webhook.example", "https://Webhook.Example:9443/base", ["webhook.example"],
                     ["example", "10.0.0.5"], id="a DNS host written in capitals in the URL"),
    ],
)
def test_the_certificate_verifies_against_the_registered_ca_bundle_for_the_dialled_host_only(
    tmp_path: Path, host: str, url: str | None, dialled: list[str], refused: list[str]
) -> None:
    cert, ca_bundle = registered(tmp_path, host, url)
    for name in dialled:
        handshake(cert, ca_bundle, name)
    for name in refused:
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
            handshake(cert, ca_bundle, name)


def test_another_certificate_for_the_same_host_is_not_trusted(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cert, _ = registered(tmp_path / "a", "127.0.0.1", None)
    _, other_bundle = registered(tmp_path / "b", "127.0.0.1", None)
    with pytest.raises(ssl.SSLCertVerificationError, match=r"self-signed certificate"):
        handshake(cert, other_bundle, "127.0.0.1")


def test_an_ip_is_an_ip_san_and_a_name_a_dns_san(tmp_path: Path) -> None:
    # Go refuses to match an IP it dials against a DNS SAN spelling that IP.
    cert = certificates.self_signed(tmp_path, "10.0.0.5", "10.0.0.5", "[fd00::5]", "svc.example")
    loaded = x509.load_pem_x509_certificate(cert.cert.read_bytes())
    sans = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5"),
                                                        ipaddress.ip_address("fd00::5")]
    assert sans.get_values_for_type(x509.DNSName) == ["svc.example"]


def test_the_certificate_is_a_serving_certificate_with_a_private_key_file(tmp_path: Path) -> None:
    cert = certificates.self_signed(tmp_path, "127.0.0.1")
    loaded = x509.load_pem_x509_certificate(cert.cert.read_bytes())
    assert loaded.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = loaded.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value.digital_signature and usage.value.key_encipherment
    assert not usage.value.key_cert_sign
    assert list(loaded.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    assert loaded.issuer == loaded.subject  # self-signed: it is its own CA bundle
    assert base64.b64decode(cert.ca_bundle) == cert.cert.read_bytes()
    assert stat.S_IMODE(cert.key.stat().st_mode) == 0o600


def test_subject_alt_names_stand_a_wildcard_for_the_local_host_and_drop_repeats() -> None:
    names = certificates.subject_alt_names(["0.0.0.0", "[::1]", "Svc.Example", "svc.example", "", "::"])
    assert [(n.kind, n.value) for n in names] == [
        ("IP", "127.0.0.1"), ("DNS", "localhost"), ("IP", "::1"), ("DNS", "svc.example")]


def test_a_given_key_that_is_not_the_certificates_is_refused_with_both_files_named(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = certificates.self_signed(tmp_path / "a", "127.0.0.1")
    b = certificates.self_signed(tmp_path / "b", "127.0.0.1")
    with pytest.raises(certificates.CertificateError, match="not a PEM certificate and its private key") as err:
        certificates.load(a.cert, b.key)
    assert str(a.cert) in str(err.value) and str(b.key) in str(err.value)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(certificates.CertificateError, match="not a PEM certificate"):
        certificates.load(garbage, a.key)
    given = certificates.load(a.cert, a.key)
    assert given.ca_bundle == a.ca_bundle
