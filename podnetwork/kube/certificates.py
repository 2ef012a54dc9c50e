"""The webhooks' serving certificate: the one given, a self-signed one made here, or one
issued here by a CA of our own (`new_ca`, `new_serving`: what `podnetwork.kube.webhooksecret`
keeps in a Secret for the replicas behind a Service).

The API server dials the host of the registered URL and checks it against the
certificate's subjectAltName (a certificate naming its host only in the CN is
refused since Go 1.15), so a self-signed certificate names --webhook-host and
the host of --webhook-url, each as an IP address or a DNS name as it is written.
It is its own CA: the registered caBundle is the certificate itself.
`cryptography` is imported where a certificate is made, so importing this module
stays cheap for `podnetwork --help`.

Key material made or received at run time stays in memory (`load_chain`): Python's
ssl reads a certificate and key from files only, so they are handed to it as
anonymous memory files, which leave nothing behind, not even when the process is
killed.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Listen addresses that name no host the API server could dial.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")

#: The subject's common name; informative only, the API server reads the SANs.
COMMON_NAME = "podnetwork-admission"

#: Validity of a self-signed certificate. It lives as long as its process (a new
#: one is made at each start), so a year is never reached in practice.
VALIDITY = datetime.timedelta(days=365)

#: Backdating of notBefore, so a peer whose clock lags a little accepts it at once.
CLOCK_SKEW = datetime.timedelta(minutes=5)


class CertificateError(ValueError):
    """A certificate or key that cannot serve; the message says which file and why."""


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path
    ca_bundle: str
    """Base64 PEM of the CA that signed `cert` (the cert itself when self-signed)."""


@dataclass(frozen=True)
class SubjectAltName:
    """One subjectAltName entry: an IP address or a DNS name."""

    kind: str
    """"IP" or "DNS"."""
    value: str


def subject_alt_names(hosts: Iterable[str]) -> list[SubjectAltName]:
    """The SANs naming `hosts`, in order, without repeats.

    A wildcard listen address names no host, so it stands for the local ones
    (127.0.0.1 and localhost), which is where a client on the same machine dials.
    An address in brackets (`[::1]`, as in a URL) is an IP address.
    """
    names: dict[SubjectAltName, None] = {}
    for host in hosts:
        if host in WILDCARD_HOSTS:
            names[SubjectAltName("IP", "127.0.0.1")] = None
            names[SubjectAltName("DNS", "localhost")] = None
            continue
        try:
            names[SubjectAltName("IP", str(ipaddress.ip_address(host.strip("[]"))))] = None
        except ValueError:
            names[SubjectAltName("DNS", host.lower())] = None
    return list(names)


def self_signed_pem(host: str, *also: str) -> tuple[bytes, bytes]:
    """A self-signed serving certificate for `host` and the hosts `also` (DNS names or IPs),
    and its key, as PEM (the key unencrypted PKCS #8)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    sans: list[x509.GeneralName] = []
    for san in subject_alt_names([host, *(h for h in also if h)]):
        if san.kind == "IP":
            sans.append(x509.IPAddress(ipaddress.ip_address(san.value)))
        else:
            sans.append(x509.DNSName(san.value))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, COMMON_NAME)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=True, content_commitment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return (certificate.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def self_signed(directory: Path, host: str, *also: str) -> Certificate:
    """`self_signed_pem` written to `directory` as tls.crt and tls.key (mode 0600)."""
    pem, key = self_signed_pem(host, *also)
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(pem)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key)
    return Certificate(cert_path, key_path, base64.b64encode(pem).decode())


def load(cert: Path, key: Path) -> Certificate:
    """The given --webhook-cert/--webhook-key, checked to be a matching PEM pair now rather
    than when the first connection comes; its caBundle is the certificate file itself
    (which holds the CA as well when it is a chain)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(cert), str(key))
    except ssl.SSLError as exc:
        raise CertificateError(
            f"--webhook-cert {cert} and --webhook-key {key} are not a PEM certificate and its "
            f"private key ({exc.reason or exc}): give a matching pair") from None
    except OSError as exc:
        raise CertificateError(
            f"cannot read --webhook-cert {cert} or --webhook-key {key}: {exc.strerror or exc}") from None
    return Certificate(cert, key, base64.b64encode(cert.read_bytes()).decode())


def load_chain(context: ssl.SSLContext, cert: str | bytes, key: str | bytes) -> None:
    """`context.load_cert_chain` of a certificate and its key, each a file's path (str) or PEM
    (bytes). PEM is handed to ssl as an anonymous memory file (Linux's memfd, under
    /proc/self/fd), which no directory lists and which is gone once closed or once the
    process dies; where there is none, it is written to a private temporary directory
    removed as soon as ssl has read it. Raises what `load_cert_chain` raises."""
    with contextlib.ExitStack() as stack:
        paths = [item if isinstance(item, str) else _memory_file(stack, item) for item in (cert, key)]
        context.load_cert_chain(paths[0], paths[1])


def _memory_file(stack: contextlib.ExitStack, data: bytes) -> str:
    """A path ssl can open that reads `data`, valid until `stack` closes."""
    fd = -1
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            fd = os.memfd_create("podnetwork-pem", os.MFD_CLOEXEC)
    if fd >= 0:
        stack.callback(os.close, fd)
        path = f"/proc/self/fd/{fd}"
    else:
        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="podnetwork-pem-"))
        path = os.path.join(directory, f"{len(os.listdir(directory))}.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        stack.callback(os.close, fd)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return path


def certificate(cert: Path | None, key: Path | None, directory: Path, host: str,
                url: str | None) -> Certificate:
    """The given --webhook-cert/--webhook-key, else a self-signed one made in `directory` for
    --webhook-host and the host of --webhook-url (the name the API server dials)."""
    if cert is not None and key is not None:
        return load(cert, key)
    url_host = urllib.parse.urlsplit(url or "").hostname or ""
    return self_signed(directory, host, url_host)


# -- a CA of our own and the serving certificates it signs ---------------------------------
# ECDSA P-256: the API server (Go's crypto/tls) accepts it, and a key is made in a millisecond
# where RSA 2048 takes a tenth of a second, which matters for replicas racing to make one.

#: The CA's common name; the API server reads only its signature and validity.
CA_COMMON_NAME = "podnetwork-webhook-ca"


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert: bytes
    key: bytes


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def new_ca(now: datetime.datetime, validity: datetime.timedelta) -> Issued:
    """A self-signed CA valid from `now` (backdated by `CLOCK_SKEW`) for `validity`, which may sign
    serving certificates only (path length 0)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    # NAME@UNIXTIME, as Kubernetes names its own self-signed CAs: the two CAs of a bundle during a
    # rotation stay apart in logs and in `openssl x509 -text`.
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{CA_COMMON_NAME}@{int(now.timestamp())}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=False, content_commitment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_serving(ca: Issued, dns_names: Sequence[str], now: datetime.datetime,
                validity: datetime.timedelta) -> Issued:
    """A serving certificate for `dns_names`, signed by `ca`, valid from `now` (backdated by
    `CLOCK_SKEW`) for `validity` but never past the CA's own end."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    issuer = x509.load_pem_x509_certificate(ca.cert)
    signer = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(signer, ec.EllipticCurvePrivateKey):
        raise CertificateError("the CA key is not an ECDSA key; a new CA is needed")
    key = ec.generate_private_key(ec.SECP256R1())
    end = min(now + validity, issuer.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=False, content_commitment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                       critical=False)
        .sign(signer, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
