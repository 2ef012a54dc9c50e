"""`podnetwork controller` webhook options: wildcard addresses and the self-signed certificate (no cluster involved).

--manage-webhooks registers webhooks that fail closed (failurePolicy Fail): a URL the
API server cannot dial, or a certificate that does not name the host it dials, makes
it refuse every pod outside the exempt namespaces.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from podnetwork import cli
from podnetwork.commands import controller as command


def test_manage_webhooks_on_the_wildcard_address_without_a_url_is_refused(capsys):
    assert cli.main(["controller", "--manage-webhooks"]) == 2
    out = capsys.readouterr().out
    assert "--webhook-url" in out
    assert "https://0.0.0.0:9443" in out


def test_manage_webhooks_on_the_ipv6_wildcard_without_a_url_is_refused(capsys):
    assert cli.main(["controller", "--manage-webhooks", "--webhook-host", "::"]) == 2
    assert "--webhook-url" in capsys.readouterr().out


def test_the_self_signed_certificate_names_the_host_of_the_webhook_url(tmp_path: Path):
    cert = command.self_signed(tmp_path, "0.0.0.0", "podnetwork.multinetwork-system.svc")
    text = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(cert.cert)],
                          check=True, capture_output=True, text=True).stdout
    assert "DNS:podnetwork.multinetwork-system.svc" in text
    assert "IP Address:127.0.0.1" in text


def test_the_self_signed_certificate_names_an_ip_url_host_as_an_ip(tmp_path: Path):
    cert = command.self_signed(tmp_path, "10.0.0.5", "10.0.0.5")
    text = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(cert.cert)],
                          check=True, capture_output=True, text=True).stdout
    assert text.count("IP Address:10.0.0.5") == 1
