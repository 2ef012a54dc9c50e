"""What the operators serve from the webhooks' Secret and what they write back to it
(`podnetwork.kube.webhooksecret.decide`), at chosen moments of the certificates' lives.

Every "it verifies" is a TLS handshake between two in-memory endpoints (no socket), the
client trusting only the CA bundle and dialling the Service's name, as the API server does.
"""

from __future__ import annotations

import base64
import datetime
import re
import ssl
import tempfile
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podnetwork.kube import certificates, webhooksecret
from podnetwork.kube.webhooksecret import CA_CERT, CA_KEY, TLS_CERT, TLS_KEY, Lifetimes, decide

NAME = "podnetwork-webhook.multinetwork-system.svc"
NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
YEAR = 365 * DAY


def handshake(cert: bytes, key: bytes, ca_bundle: bytes, server_hostname: str = NAME) -> None:
    """A TLS handshake of a client trusting only `ca_bundle` (PEM) and dialling `server_hostname`
    with a server serving `cert`/`key`; raises what the client refuses. The certificates'
    validity is checked at the real current time, so the moments used here are near it."""
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "c").write_bytes(cert)
        (Path(d) / "k").write_bytes(key)
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(str(Path(d) / "c"), str(Path(d) / "k"))
    client_ctx = ssl.create_default_context(cadata=ca_bundle.decode())
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(to_client, to_server, server_hostname=server_hostname)
    server = server_ctx.wrap_bio(server_in, server_out, server_side=True)
    done: set[str] = set()
    for _ in range(10):
        for name, end in (("client", client), ("server", server)):
            if name not in done:
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


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def raw(data: dict[str, str], key: str) -> bytes:
    return base64.b64decode(data[key])


def cas(data: dict[str, str]) -> list[x509.Certificate]:
    return list(x509.load_pem_x509_certificates(raw(data, CA_CERT)))


def leaf(data: dict[str, str]) -> x509.Certificate:
    return x509.load_pem_x509_certificate(raw(data, TLS_CERT))


def made(at: datetime.datetime) -> dict[str, str]:
    first = decide(None, [NAME], at)
    assert first.write is not None
    return first.write


def test_without_a_secret_a_ca_and_a_certificate_for_the_service_are_made_and_verify() -> None:
    decision = decide(None, [NAME], now())
    assert decision.write is not None and decision.reason == "it does not exist"
    assert set(decision.write) == {TLS_CERT, TLS_KEY, CA_CERT, CA_KEY}
    (ca,) = cas(decision.write)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    served = leaf(decision.write)
    assert served.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == [NAME]
    handshake(raw(decision.write, TLS_CERT), raw(decision.write, TLS_KEY), raw(decision.write, CA_CERT))
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(raw(decision.write, TLS_CERT), raw(decision.write, TLS_KEY), raw(decision.write, CA_CERT),
                  "podnetwork-webhook.other.svc")
    # What is served is what is written: every replica reading the Secret serves the same.
    assert decision.material.cert == raw(decision.write, TLS_CERT)
    assert decision.material.ca_bundle == raw(decision.write, CA_CERT)


def test_a_secret_in_the_middle_of_its_life_is_served_as_it_is_and_nothing_is_written() -> None:
    data = made(NOW)
    decision = decide(data, [NAME], NOW + 100 * DAY)
    assert decision.write is None
    assert decision.material.cert == raw(data, TLS_CERT) and decision.material.ca_bundle == raw(data, CA_CERT)
    # The next check that changes something: the serving certificate's renewal, two thirds into its year.
    assert decision.material.renew_at == webhooksecret.renewal_time(leaf(data), Lifetimes().renew_fraction)
    assert NOW + 240 * DAY < decision.material.renew_at < NOW + 250 * DAY


def test_a_serving_certificate_past_two_thirds_of_its_life_is_renewed_by_the_same_ca() -> None:
    data = made(now() - 250 * DAY)
    decision = decide(data, [NAME], now())
    assert decision.write is not None and "serving certificate is due for renewal" in decision.reason
    assert decision.write[CA_CERT] == data[CA_CERT] and decision.write[CA_KEY] == data[CA_KEY]
    assert leaf(decision.write) != leaf(data)
    # The registered caBundle does not change: the renewed certificate verifies against it.
    handshake(raw(decision.write, TLS_CERT), raw(decision.write, TLS_KEY), raw(data, CA_CERT))
    assert decide(decision.write, [NAME], now()).write is None


def test_a_ca_past_two_thirds_of_its_life_is_replaced_and_kept_in_the_bundle_while_valid() -> None:
    data = made(now() - 7 * YEAR)
    (old_ca,) = cas(data)
    decision = decide(data, [NAME], now())
    assert decision.write is not None and "CA is due for renewal" in decision.reason
    new_ca, kept = cas(decision.write)
    assert kept == old_ca and new_ca != old_ca
    assert leaf(decision.write).issuer == new_ca.subject
    # During the rotation, a replica that still serves a certificate of the old CA (not yet expired)
    # and one serving the new are both trusted by the new bundle.
    old = certificates.Issued(old_ca.public_bytes(Encoding.PEM), raw(data, CA_KEY))
    still_served = certificates.new_serving(old, [NAME], now() - DAY, YEAR)
    handshake(still_served.cert, still_served.key, raw(decision.write, CA_CERT))
    handshake(raw(decision.write, TLS_CERT), raw(decision.write, TLS_KEY), raw(decision.write, CA_CERT))


def test_an_expired_ca_leaves_the_bundle() -> None:
    data = made(NOW)
    rotated = decide(data, [NAME], NOW + 7 * YEAR).write
    assert rotated is not None and len(cas(rotated)) == 2
    current = decide(rotated, [NAME], NOW + 7 * YEAR + DAY)
    assert current.write is None and current.material.renew_at is not None
    # The old CA expires ten years after NOW; the bundle is renewed then, even with nothing else due.
    assert current.material.renew_at <= cas(rotated)[1].not_valid_after_utc
    later = decide(rotated, [NAME], cas(rotated)[1].not_valid_after_utc + DAY)
    assert later.write is not None
    assert cas(later.write) == cas(rotated)[:1]


def test_a_certificate_for_another_service_name_is_reissued_for_this_one() -> None:
    data = made(NOW)
    decision = decide(data, ["podnetwork-bridge-webhook.multinetwork-system.svc"], NOW + DAY)
    assert decision.write is not None and f"names {NAME}" in decision.reason
    assert decision.write[CA_CERT] == data[CA_CERT]
    assert leaf(decision.write).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == [
        "podnetwork-bridge-webhook.multinetwork-system.svc"]


def test_a_certificate_that_its_ca_did_not_sign_is_reissued() -> None:
    data, other = made(NOW), made(NOW)
    mixed = {**data, TLS_CERT: other[TLS_CERT], TLS_KEY: other[TLS_KEY]}
    decision = decide(mixed, [NAME], NOW + DAY)
    assert decision.write is not None and "not signed by the CA" in decision.reason
    assert decision.write[CA_CERT] == data[CA_CERT]


@pytest.mark.parametrize(("broken", "reason"), [
    ({CA_KEY: None}, "ca.key is missing"),
    ({CA_CERT: "not base64!"}, "ca.crt is not base64"),
    ({CA_CERT: base64.b64encode(b"garbage").decode()}, "ca.crt is not PEM certificates"),
    ({CA_KEY: "swap"}, "ca.key is not the key of the first certificate of ca.crt"),
])
def test_an_unusable_ca_is_replaced_by_a_new_one_with_the_reason(broken: dict[str, str | None], reason: str) -> None:
    data = made(NOW)
    other = made(NOW)
    for key, value in broken.items():
        if value is None:
            del data[key]
        else:
            data[key] = other[CA_KEY] if value == "swap" else value
    decision = decide(data, [NAME], NOW + DAY)
    assert decision.write is not None
    assert decision.reason == f"its CA is unusable ({reason})"
    assert len(cas(decision.write)) == 1


def test_a_key_that_is_not_the_certificates_is_reissued() -> None:
    data, other = made(NOW), made(NOW)
    decision = decide({**data, TLS_KEY: other[TLS_KEY]}, [NAME], NOW + DAY)
    assert decision.write is not None and decision.reason == "its tls.key is not the key of tls.crt"


def test_an_external_secret_is_only_read_and_its_ca_crt_is_the_bundle() -> None:
    data = made(now())
    issued = {k: v for k, v in data.items() if k != CA_KEY}  # cert-manager writes no ca.key
    decision = decide(issued, [NAME], now(), issue=False)
    assert decision.write is None
    assert decision.material.ca_bundle == raw(data, CA_CERT) and decision.material.renew_at is None
    # Due for renewal or not, it is not ours to renew.
    assert decide(made(now() - 300 * DAY), [NAME], now(), issue=False).write is None


@pytest.mark.parametrize(("data", "message"), [
    (None, "does not exist (yet)"),
    ({TLS_CERT: "", TLS_KEY: "", CA_CERT: ""}, "it cannot serve: tls.crt is missing"),
])
def test_an_external_secret_that_cannot_serve_is_a_problem_never_a_write(
    data: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(webhooksecret.SecretProblem, match=re.escape(message)):
        decide(data, [NAME], NOW, issue=False)


def test_an_external_secret_for_another_name_or_expired_says_what_to_fix() -> None:
    data = made(NOW)
    with pytest.raises(webhooksecret.SecretProblem, match=re.escape("does not name other.multinetwork-system.svc")):
        decide(data, ["other.multinetwork-system.svc"], NOW, issue=False)
    with pytest.raises(webhooksecret.SecretProblem, match=r"expired at .* renewing it"):
        decide(data, [NAME], NOW + 2 * YEAR, issue=False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from([TLS_CERT, TLS_KEY, CA_CERT, CA_KEY, "other"]),
                       st.one_of(st.text(max_size=40), st.binary(max_size=60).map(
                           lambda b: base64.b64encode(b).decode()))))
def test_whatever_a_secret_holds_the_operator_either_serves_it_or_replaces_it_and_an_external_one_is_refused(
    data: dict[str, str]
) -> None:
    decision = decide(data, [NAME], NOW)
    assert decision.write is not None  # random bytes are never a usable CA
    assert decide(decision.write, [NAME], NOW).write is None
    with pytest.raises(webhooksecret.SecretProblem):
        decide(data, [NAME], NOW, issue=False)
