"""The webhooks' CA and serving certificate, kept in one Secret that every replica shares.

`podnetwork controller` and `podnetwork bridge` with `--webhook-secret NAME` serve the
certificate of that Secret (in the namespace of `--webhook-service`), and register its
`ca.crt` as the caBundle of their webhook configurations. The Secret holds:

    tls.crt, tls.key   the serving certificate for SERVICE.NAMESPACE.svc, and its key
    ca.crt             the CAs the API server is to trust: the current one first, then the
                       previous one while it is still valid (a CA rotation keeps both)
    ca.key             the current CA's key (only when the operators issue the certificate)

Two ways to fill it:

- the operators issue it (the default of deploy/): the first replica to find no Secret
  creates one; a replica that loses that race gets 409 AlreadyExists and reads the
  winner's. A renewal is a patch carrying the resourceVersion it was decided from, so of
  two replicas renewing at once one gets 409 Conflict, reads again, and finds it renewed.
- another issues it (`--webhook-secret-external`: cert-manager, deploy/components/):
  the operators only read it and say what is wrong with it.

`decide` is the pure decision (what to serve, what to write and why), `ensure` the I/O.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podnetwork.ground.core import ObjectMeta
from podnetwork.kube import certificates

logger = logging.getLogger(__name__)

TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
CA_CERT = "ca.crt"
CA_KEY = "ca.key"

#: Labels of what the operators create for their webhooks (the Secret, the configurations).
PART_OF = "app.kubernetes.io/part-of"
MANAGED_BY = "app.kubernetes.io/managed-by"
PROJECT = "podnetwork"

#: An annotation cert-manager puts on the Secrets it issues. A replica that issues its own
#: certificate leaves such a Secret alone: while an installation moves to cert-manager
#: (deploy/cert-manager/), replicas of the old kind must not overwrite what it issued.
CERT_MANAGER_ANNOTATION = "cert-manager.io/certificate-name"

#: Reads and writes of one `ensure` before it gives up: each conflict means another replica
#: wrote meanwhile, and the next read sees what it wrote.
ATTEMPTS = 5


def labels(component: str) -> dict[str, str]:
    """The labels of the objects `component` (e.g. "podnetwork-controller") makes for its webhooks."""
    return {PART_OF: PROJECT, MANAGED_BY: component}


@dataclass(frozen=True)
class Lifetimes:
    """How long what the operators issue is valid, and when it is renewed."""

    ca: datetime.timedelta = datetime.timedelta(days=3650)
    """Validity of a new CA. Ten years, as controller-runtime's cert-controller: a CA change
    reaches the webhook configurations of every replica, so it should be rare."""
    serving: datetime.timedelta = datetime.timedelta(days=365)
    """Validity of a new serving certificate (never past its CA's end). A year: renewing it
    changes nothing the API server holds (the CA stays), so it may be shorter if wanted."""
    renew_fraction: float = 1 / 3
    """A certificate is renewed once less than this fraction of its validity remains (a third,
    as cert-manager's default renewBefore), leaving months for a replica that is down to
    come back before anything expires."""


def renewal_time(cert: Any, fraction: float) -> datetime.datetime:
    """When `cert` (a cryptography x509.Certificate) is due for renewal."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return datetime.datetime.fromtimestamp(
        end.timestamp() - (end - start).total_seconds() * fraction, datetime.UTC)


class SecretProblem(Exception):
    """The Secret cannot serve and the operator may not fix it (`--webhook-secret-external`), or
    it kept changing under us; the message says what is wrong and what to do."""


@dataclass(frozen=True)
class Material:
    """What a replica serves and registers, PEM."""

    cert: bytes
    key: bytes
    ca_bundle: bytes
    """The CAs the API server trusts: the registered caBundle (base64 of this)."""
    renew_at: datetime.datetime | None
    """When a renewal is next due (None: not ours to renew)."""

    @property
    def ca_bundle_b64(self) -> str:
        return base64.b64encode(self.ca_bundle).decode()


@dataclass(frozen=True)
class Decision:
    material: Material
    write: dict[str, str] | None
    """The Secret's new `data` (base64 values); None when it is right as it is."""
    reason: str = ""
    """Why it is written, for the log line."""


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names of a Service the API server dials: SERVICE.NAMESPACE.svc
    (Kubernetes "Dynamic Admission Control", service reference)."""
    return [f"{service}.{namespace}.svc"]


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _decoded(data: Mapping[str, Any], key: str) -> bytes:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} is missing")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{key} is not base64") from None


def _certs(pem: bytes, key: str) -> list[Any]:
    from cryptography import x509

    try:
        found = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise ValueError(f"{key} is not PEM certificates") from None
    return list(found)


def _private_key(pem: bytes, key: str) -> Any:
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise ValueError(f"{key} is not an unencrypted PEM private key") from None


def _spki(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(public_key.public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo))


def _dns_names(cert: Any) -> set[str]:
    from cryptography import x509

    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(name).lower() for name in sans.get_values_for_type(x509.DNSName)}


def _issued_by(cert: Any, ca: Any) -> bool:
    from cryptography.exceptions import InvalidSignature

    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _pem(certs: Sequence[Any]) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _when(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def decide(data: Mapping[str, Any] | None, names: Sequence[str], now: datetime.datetime,
           lifetimes: Lifetimes = Lifetimes(), *, issue: bool = True) -> Decision:
    """What to serve from the Secret's `data` (None: no Secret) for the DNS `names`, at `now`,
    and what to write back: a new CA and certificate when there is no usable CA, a new
    certificate from the current CA when its own is due (or names other hosts, or was not
    signed by it), a new CA (the old one kept in the bundle while valid) when the CA is due,
    and the bundle without the CAs that expired. With `issue` False nothing is ever written:
    raises `SecretProblem` when the Secret cannot serve."""
    if not issue:
        return _external(data, names, now)
    if data is None:
        return _fresh(names, now, lifetimes, [], "it does not exist")
    try:
        bundle = _certs(_decoded(data, CA_CERT), CA_CERT)
        ca_key = _private_key(_decoded(data, CA_KEY), CA_KEY)
        ca = bundle[0]
        if _spki(ca_key.public_key()) != _spki(ca.public_key()):
            raise ValueError(f"{CA_KEY} is not the key of the first certificate of {CA_CERT}")
        ca_issued = certificates.Issued(_pem([ca]), _decoded(data, CA_KEY))
    except ValueError as exc:
        return _fresh(names, now, lifetimes, [], f"its CA is unusable ({exc})")
    valid = [c for c in bundle if c.not_valid_after_utc > now]
    if now >= renewal_time(ca, lifetimes.renew_fraction) or ca not in valid:
        return _fresh(names, now, lifetimes, valid,
                      f"its CA is due for renewal (valid until {_when(ca.not_valid_after_utc)})")
    problem = None
    try:
        leaf = _certs(_decoded(data, TLS_CERT), TLS_CERT)[0]
        key_pem = _decoded(data, TLS_KEY)
        leaf_key = _private_key(key_pem, TLS_KEY)
    except ValueError as exc:
        problem = f"its serving certificate is unusable ({exc})"
    else:
        if _spki(leaf_key.public_key()) != _spki(leaf.public_key()):
            problem = f"its {TLS_KEY} is not the key of {TLS_CERT}"
        elif not _issued_by(leaf, ca):
            problem = f"its serving certificate was not signed by the CA of {CA_CERT}"
        elif _dns_names(leaf) != {n.lower() for n in names}:
            named = ", ".join(sorted(_dns_names(leaf))) or "no DNS name"
            problem = f"its serving certificate names {named}, not {', '.join(names)}"
        elif leaf.not_valid_before_utc > now + certificates.CLOCK_SKEW:
            problem = f"its serving certificate is not valid before {_when(leaf.not_valid_before_utc)}"
        elif now >= renewal_time(leaf, lifetimes.renew_fraction):
            until = _when(leaf.not_valid_after_utc)
            problem = f"its serving certificate is due for renewal (valid until {until})"
    if problem is not None:
        serving = certificates.new_serving(ca_issued, names, now, lifetimes.serving)
        return _written(serving, ca_issued, valid, problem, lifetimes)
    material = Material(_decoded(data, TLS_CERT), key_pem, _pem(valid),
                        _next_renewal([leaf, ca], valid, lifetimes))
    if len(valid) < len(bundle):
        expired = ", ".join(c.subject.rfc4514_string() for c in bundle if c not in valid)
        return Decision(material, _data(material, ca_issued.key),
                        f"the expired CA {expired} leaves {CA_CERT}")
    return Decision(material, None)


def _next_renewal(certs: Sequence[Any], bundle: Sequence[Any], lifetimes: Lifetimes) -> datetime.datetime:
    due = [renewal_time(c, lifetimes.renew_fraction) for c in certs]
    due += [c.not_valid_after_utc for c in bundle[1:]]  # an old CA leaves the bundle when it expires
    return min(due)


def _fresh(names: Sequence[str], now: datetime.datetime, lifetimes: Lifetimes, keep: Sequence[Any],
           reason: str) -> Decision:
    ca = certificates.new_ca(now, lifetimes.ca)
    serving = certificates.new_serving(ca, names, now, lifetimes.serving)
    from cryptography import x509

    new = x509.load_pem_x509_certificate(ca.cert)
    return _written(serving, ca, [new, *keep], reason, lifetimes)


def _written(serving: certificates.Issued, ca: certificates.Issued, bundle: Sequence[Any], reason: str,
             lifetimes: Lifetimes) -> Decision:
    from cryptography import x509

    leaf = x509.load_pem_x509_certificate(serving.cert)
    current = x509.load_pem_x509_certificate(ca.cert)
    chain = [current, *(c for c in bundle if c != current)]
    material = Material(serving.cert, serving.key, _pem(chain),
                        _next_renewal([leaf, current], chain, lifetimes))
    return Decision(material, _data(material, ca.key), reason)


def _data(material: Material, ca_key: bytes) -> dict[str, str]:
    return {TLS_CERT: _b64(material.cert), TLS_KEY: _b64(material.key),
            CA_CERT: _b64(material.ca_bundle), CA_KEY: _b64(ca_key)}


def _external(data: Mapping[str, Any] | None, names: Sequence[str], now: datetime.datetime) -> Decision:
    if data is None:
        raise SecretProblem("it does not exist (yet): with --webhook-secret-external another issues it, "
                            "e.g. cert-manager from deploy/components/cert-manager/")
    try:
        cert_pem = _decoded(data, TLS_CERT)
        key_pem = _decoded(data, TLS_KEY)
        bundle_pem = _decoded(data, CA_CERT)
        leaf = _certs(cert_pem, TLS_CERT)[0]
        _certs(bundle_pem, CA_CERT)
        key = _private_key(key_pem, TLS_KEY)
    except ValueError as exc:
        raise SecretProblem(f"it cannot serve: {exc} (its issuer writes {TLS_CERT}, {TLS_KEY} and "
                            f"{CA_CERT})") from None
    if _spki(key.public_key()) != _spki(leaf.public_key()):
        raise SecretProblem(f"its {TLS_KEY} is not the key of {TLS_CERT}")
    missing = {n.lower() for n in names} - _dns_names(leaf)
    if missing:
        raise SecretProblem(f"its certificate does not name {', '.join(sorted(missing))}, the name the API "
                            "server dials: add it to the Certificate's dnsNames")
    if leaf.not_valid_after_utc <= now:
        raise SecretProblem(f"its certificate expired at {_when(leaf.not_valid_after_utc)}: is its issuer "
                            "renewing it (kubectl describe certificate)?")
    return Decision(Material(cert_pem, key_pem, bundle_pem, None), None)


def body(name: str, namespace: str, data: Mapping[str, str], component: str) -> dict[str, Any]:
    """A new Secret of type kubernetes.io/tls holding `data`."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace, "labels": labels(component)},
            "data": dict(data)}


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)



class _Secret(BaseModel):
    """A core/v1 Secret as this module reads it: metadata and `data` (base64 text per key)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    data: dict[str, str] | None = None


def _read(obj: Mapping[str, Any], where: str) -> _Secret:
    try:
        return _Secret.model_validate(obj)
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise SecretProblem(f"{where}: does not fit a Secret: {fields}") from None

async def ensure(api: Any, name: str, namespace: str, names: Sequence[str], *, component: str,
                 issue: bool = True, lifetimes: Lifetimes = Lifetimes(),
                 clock: Callable[[], datetime.datetime] = utcnow) -> Material:
    """What to serve, from the Secret `namespace`/`name`, after creating or renewing it as
    `decide` says. `api` is a `podnetwork.kube.client.AsyncApi`. Raises `SecretProblem`
    when it cannot serve, and the client's `ApiError` when the API refuses."""
    from podnetwork.kube import client as kube

    where = f"Secret {namespace}/{name}"
    for _ in range(ATTEMPTS):
        try:
            current: dict[str, Any] | None = await api.get(kube.Secret, name, namespace)
        except kube.NotFound:
            current = None
        secret = None if current is None else _read(current, where)
        data = None if secret is None else dict(secret.data or {})
        ours = issue and (secret is None or secret.metadata.annotation(CERT_MANAGER_ANNOTATION) is None)
        if issue and not ours:
            logger.debug("%s is issued by cert-manager (annotation %s): serving it, never writing it",
                         where, CERT_MANAGER_ANNOTATION)
        try:
            decision = decide(data, names, clock(), lifetimes, issue=ours)
        except SecretProblem as exc:
            raise SecretProblem(f"{where}: {exc}") from None
        if decision.write is None:
            return decision.material
        try:
            if current is None:
                await api.create(kube.Secret, body(name, namespace, decision.write, component))
                logger.info("created %s with a new CA and serving certificate for %s", where,
                            ", ".join(names))
            else:
                version = secret.metadata.resource_version if secret is not None else None
                await api.patch(kube.Secret, name, {"metadata": {"resourceVersion": version},
                                                    "data": decision.write}, namespace=namespace)
                logger.info("renewed %s: %s", where, decision.reason)
        except kube.Conflict:
            # 409 AlreadyExists on create, Conflict on a stale resourceVersion: another replica
            # wrote first; what it wrote is read next, and serves for both.
            logger.info("%s was written by another replica meanwhile; reading it again", where)
            continue
        return decision.material
    raise SecretProblem(f"{where} changed under every one of {ATTEMPTS} attempts to write it; "
                        "is another program writing it?")
