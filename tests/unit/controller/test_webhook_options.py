"""`podnetwork controller` webhook options: wildcard addresses and the self-signed certificate (no cluster involved).

--manage-webhooks registers webhooks that fail closed (failurePolicy Fail): a URL the
API server cannot dial, or a certificate that does not name the host it dials, makes
it refuse every pod outside the exempt namespaces.
"""

from __future__ import annotations

from pathlib import Path

from cryptography import x509

from podnetwork import cli
from podnetwork.kube import certificates


def alt_names(cert: Path) -> list[str]:
    """The certificate's subjectAltName as `DNS:name` / `IP:address`."""
    sans = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    return [f"DNS:{n}" for n in sans.get_values_for_type(x509.DNSName)] + [
        f"IP:{a}" for a in sans.get_values_for_type(x509.IPAddress)]


def test_manage_webhooks_on_the_wildcard_address_without_a_url_is_refused(capsys):
    assert cli.main(["controller", "--manage-webhooks"]) == 2
    out = capsys.readouterr().err
    assert "--webhook-url" in out
    assert "https://0.0.0.0:9443" in out


def test_manage_webhooks_on_the_ipv6_wildcard_without_a_url_is_refused(capsys):
    assert cli.main(["controller", "--manage-webhooks", "--webhook-host", "::"]) == 2
    assert "--webhook-url" in capsys.readouterr().err


def test_the_self_signed_certificate_names_the_host_of_the_webhook_url(tmp_path: Path):
    cert = certificates.self_signed(tmp_path, "0.0.0.0", "podnetwork.multinetwork-system.svc")
    names = alt_names(cert.cert)
    assert "DNS:podnetwork.multinetwork-system.svc" in names
    assert "IP:127.0.0.1" in names


def test_the_self_signed_certificate_names_an_ip_url_host_as_an_ip(tmp_path: Path):
    cert = certificates.self_signed(tmp_path, "10.0.0.5", "10.0.0.5")
    assert alt_names(cert.cert) == ["IP:10.0.0.5"]
