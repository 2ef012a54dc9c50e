"""The operators register their own webhook configurations, once they can answer them.

With `--manage-webhooks`, `podnetwork controller` and `podnetwork bridge` create (or
update) their Mutating/ValidatingWebhookConfigurations themselves, so that none exists
while nothing could answer it (their failurePolicy is Fail: a configuration without a
backend refuses every pod it covers). A `Keeper` per command, on every replica:

1. with `--webhook-secret`, reads (creates, renews) the Secret of the CA and serving
   certificate (`podnetwork.kube.webhooksecret`) and serves what it holds, reloading it
   when it changes;
2. checks that its own server answers `GET /healthz` over TLS, verified against the CA
   bundle it is about to register, for the name the API server dials;
3. before creating a configuration with `--webhook-service`, waits until that Service has
   a ready endpoint (an EndpointSlice saying so): the API server calls the Service;
4. creates each configuration, or patches it (with the resourceVersion it read) when its
   webhooks, caBundle, labels or owner differ from what it should be;
5. deletes the configurations the command serves only behind a flag that is now off
   (`retired`: the bridge's validating one without `--enforce-use-permission`), when they
   carry its managed-by label: turning the flag off withdraws the webhook with it;
6. does it again every `--webhook-check-interval` seconds, and sooner when a renewal is due.

Each configuration carries the labels `app.kubernetes.io/part-of: podnetwork` and
`app.kubernetes.io/managed-by: COMPONENT` and, with `--webhook-owner CLUSTERROLE`, an
ownerReference to that ClusterRole: a cluster-scoped object can only be owned by a
cluster-scoped one, and the operator's ClusterRole is deleted exactly when the operator is
uninstalled (`kubectl delete -k deploy/controller`), so the garbage collector removes the
configurations with it. The decisions are the pure functions here; `Keeper` does the I/O.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podnetwork.ground import constants
from podnetwork.ground.core import ObjectMeta, PartialObjectMetadata
from podnetwork.kube import webhooksecret

logger = logging.getLogger(__name__)

#: Seconds between attempts after a failure (the last one repeating), never more than the
#: check interval.
RETRY = (1.0, 2.0, 5.0, 10.0, 30.0)

#: Seconds a self-check (a TLS connection and GET /healthz) may take.
SELF_CHECK_TIMEOUT = 5.0

#: Listen addresses that stand for every local one, and the loopback address to dial instead.
WILDCARDS = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}

#: The label EndpointSlices carry of their Service (set by the EndpointSlice controller).
SERVICE_NAME_LABEL = constants.ENDPOINTSLICE_SERVICE_NAME_LABEL


@dataclass(frozen=True)
class Owner:
    """The ClusterRole that owns the configurations (`--webhook-owner`)."""

    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        # No blockOwnerDeletion: setting it needs the owner's finalizers permission, and the
        # configurations need not outlive their owner by a moment.
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "name": self.name, "uid": self.uid}


def desired(objects: Sequence[Mapping[str, Any]], ca_bundle_b64: str, component: str,
            owner: Owner | None) -> list[dict[str, Any]]:
    """The configurations as registered: `objects` (from the command's builder) with
    `ca_bundle_b64` in every webhook's clientConfig, our labels and, given, the owner."""
    wanted = []
    for obj in objects:
        new = copy.deepcopy(dict(obj))
        labels = _Configuration.model_validate(new).metadata.labels or {}  # the builder's: it fits
        meta = new.setdefault("metadata", {})
        meta["labels"] = {**labels, **webhooksecret.labels(component)}
        if owner is not None:
            meta["ownerReferences"] = [owner.reference()]
        for hook in new.get("webhooks") or []:
            hook["clientConfig"] = {**hook["clientConfig"], "caBundle": ca_bundle_b64}
        wanted.append(new)
    return wanted


def covers(current: Any, wanted: Any) -> bool:
    """Whether `current` (as the API server keeps it, with its defaults added) holds every field
    of `wanted` with the same value: dicts by key, lists item by item and of the same length."""
    if isinstance(wanted, Mapping):
        return isinstance(current, Mapping) and all(k in current and covers(current[k], v)
                                                    for k, v in wanted.items())
    if isinstance(wanted, list):
        return (isinstance(current, list) and len(current) == len(wanted)
                and all(covers(c, w) for c, w in zip(current, wanted, strict=True)))
    return bool(current == wanted)


class _Read(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class _ConfigurationMeta(ObjectMeta):
    owner_references: list[dict[str, Any]] | None = Field(None, alias="ownerReferences")


class _Configuration(_Read):
    """A (Mutating|Validating)WebhookConfiguration as stored, seen as what registration compares:
    the webhooks as they are (compared field by field with `covers`), labels and owners."""

    metadata: _ConfigurationMeta = Field(default_factory=_ConfigurationMeta)
    webhooks: list[dict[str, Any]] | None = None


def _configuration(obj: Mapping[str, Any]) -> _Configuration | None:
    """The stored configuration, or None when it does not fit (then it is not up to date)."""
    try:
        return _Configuration.model_validate(obj)
    except ValidationError:
        return None


def ours(current: Mapping[str, Any], component: str) -> bool:
    """Whether `current` carries the managed-by label of `component` (a configuration of the same
    name that someone else made is never ours to delete)."""
    stored = _configuration(current)
    labels = {} if stored is None else (stored.metadata.labels or {})
    return labels.get(webhooksecret.MANAGED_BY) == component


def up_to_date(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the stored configuration `current` already is `wanted`: its webhooks, labels and
    owner (fields the API server adds, such as matchPolicy, do not count). `wanted` is ours
    (`desired`)."""
    stored = _configuration(current)
    if stored is None:
        return False
    want = wanted["metadata"]
    return (covers(stored.webhooks, wanted.get("webhooks"))
            and covers(stored.metadata.labels or {}, want.get("labels", {}))
            and covers(stored.metadata.owner_references or [], want.get("ownerReferences", [])))


def patch(wanted: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
    """A JSON merge patch making a stored configuration `wanted`; with the resourceVersion it
    was decided from, so that it fails (409 Conflict) when another replica wrote meanwhile."""
    want = _Configuration.model_validate(wanted).metadata  # ours (`desired`): it fits
    body: dict[str, Any] = {"metadata": {"labels": want.labels or {}}, "webhooks": wanted["webhooks"]}
    if want.owner_references is not None:
        body["metadata"]["ownerReferences"] = want.owner_references
    if resource_version:
        body["metadata"]["resourceVersion"] = resource_version
    return body


class _ClientConfig(_Read):
    ca_bundle: Any = Field(None, alias="caBundle")


class _Webhook(_Read):
    client_config: _ClientConfig | None = Field(None, alias="clientConfig")


class _Bundles(_Read):
    webhooks: list[_Webhook] | None = None


def bundle_of(configuration: Mapping[str, Any]) -> str | None:
    """The caBundle (base64) of a configuration's first webhook."""
    try:
        hooks = _Bundles.model_validate(configuration).webhooks or []
    except ValidationError:
        return None
    for hook in hooks:
        value = None if hook.client_config is None else hook.client_config.ca_bundle
        return value if isinstance(value, str) else None
    return None


def _newest_start(bundle_b64: str) -> datetime.datetime | None:
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(base64.b64decode(bundle_b64, validate=True))
    except ValueError:
        return None
    return max(c.not_valid_before_utc for c in certs)


def newer_bundle(current_b64: str | None, ours_b64: str) -> bool:
    """Whether the registered bundle has a CA newer than all of ours: a replica that read the
    Secret before another one rotated its CA must not put the old bundle back, or the API
    server would refuse the rotated certificate the other replica serves."""
    if not current_b64 or current_b64 == ours_b64:
        return False
    theirs, ours = _newest_start(current_b64), _newest_start(ours_b64)
    return theirs is not None and ours is not None and theirs > ours


class _EndpointConditions(_Read):
    ready: bool | None = None


class _Endpoint(_Read):
    conditions: _EndpointConditions | None = None


class _EndpointSlice(_Read):
    """discovery.k8s.io/v1 EndpointSlice: its service label and its endpoints' readiness."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    endpoints: list[_Endpoint] | None = None


def ready_endpoint(slices: Sequence[Mapping[str, Any]], service: str) -> bool:
    """Whether an EndpointSlice of `service` has an endpoint ready to receive traffic (a ready
    condition that is unset counts as ready, as the EndpointSlice API says). A slice that does
    not fit the view has none."""
    for item in slices:
        try:
            slice_ = _EndpointSlice.model_validate(item)
        except ValidationError:
            continue
        if (slice_.metadata.labels or {}).get(SERVICE_NAME_LABEL) != service:
            continue
        for endpoint in slice_.endpoints or ():
            if endpoint.conditions is None or endpoint.conditions.ready is not False:
                return True
    return False


def loopback(host: str) -> str:
    """Where this process dials its own server listening on `host`."""
    return WILDCARDS.get(host, host.strip("[]"))


async def self_check(host: str, port: int, ca_bundle: bytes, server_hostname: str,
                     timeout: float = SELF_CHECK_TIMEOUT) -> str | None:
    """None when the server on `host`:`port` answers `GET /healthz` with 200 over TLS, its
    certificate verified against `ca_bundle` (PEM) for `server_hostname` as the API server
    verifies it (any certificate of the bundle is a trust anchor, as in Go); else what failed."""
    try:
        context = ssl.create_default_context(cadata=ca_bundle.decode())
    except (ssl.SSLError, ValueError) as exc:
        return f"the CA bundle is not usable ({exc})"
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    writer = None
    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for may swallow a cancellation that
        # comes as the connection fails, and the keeper would outlive its command.
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                loopback(host), port, ssl=context, server_hostname=server_hostname.strip("[]"))
            request = f"GET /healthz HTTP/1.1\r\nHost: {server_hostname}\r\nConnection: close\r\n\r\n"
            writer.write(request.encode())
            status = await reader.readline()
    except ssl.SSLCertVerificationError as exc:
        return (f"the served certificate does not verify against the CA bundle for {server_hostname} "
                f"({exc.verify_message})")
    except (OSError, TimeoutError, ssl.SSLError) as exc:
        return f"no answer from https://{loopback(host)}:{port}/healthz ({type(exc).__name__}: {exc})"
    finally:
        if writer is not None:
            writer.close()
    parts = status.split()
    if len(parts) < 2 or parts[1] != b"200":
        return f"GET /healthz answered {status.decode(errors='replace').strip()!r}"
    return None


@dataclass(frozen=True)
class SecretSource:
    """`--webhook-secret`: where the serving certificate and CA come from."""

    name: str
    namespace: str
    names: list[str]
    """The DNS names of the serving certificate (the Service's)."""
    issue: bool = True
    """False with `--webhook-secret-external`: read it, never write it."""
    lifetimes: webhooksecret.Lifetimes = field(default_factory=webhooksecret.Lifetimes)


@dataclass
class Keeper:
    """Keeps one command's webhooks served with a current certificate and registered (module doc).

    The command gives it what it serves and how the API server reaches it; `run` goes on
    until cancelled, logging (never raising) what fails, and trying again.
    """

    api: Any
    """A `podnetwork.kube.client.AsyncApi`."""
    component: str
    """The ClusterRole-like name of the operator, e.g. "podnetwork-controller" (the managed-by label)."""
    configurations: Callable[[Mapping[str, Any]], list[dict[str, Any]]]
    """The command's builder: clientConfig (without caBundle) -> the configuration objects."""
    client_config: dict[str, Any]
    """`{"url": URL}` or `{"service": {"namespace", "name", "port"}}`."""
    host: str
    port: int
    server_hostname: str
    """The name the API server dials and checks the certificate against."""
    served: Callable[[], bool]
    """Whether the webhook server has started."""
    tls: Any = None
    """The `podnetwork.kube.webhooks.ServingTLS` the Secret's certificate is loaded into."""
    secret: SecretSource | None = None
    ca_bundle: bytes = b""
    """The CA bundle (PEM) when there is no Secret: the given or self-signed certificate."""
    service: tuple[str, str] | None = None
    """(namespace, name) of the Service whose ready endpoint a first registration waits for."""
    owner: str | None = None
    """The ClusterRole that owns the configurations (`--webhook-owner`)."""
    interval: float = 60.0
    retired: Sequence[tuple[str, str]] = ()
    """(kind, name) of the configurations the command serves only behind a flag now off: deleted
    when they carry our managed-by label."""
    on_registered: Callable[[], None] | None = None
    clock: Callable[[], datetime.datetime] = webhooksecret.utcnow
    _said: set[str] = field(default_factory=set)

    async def run(self) -> None:
        failures = 0
        task = asyncio.current_task()
        while True:
            if task is not None and task.cancelling():
                raise asyncio.CancelledError  # a cancellation some library call swallowed
            delay: float | None
            try:
                delay = await self.once()
            except webhooksecret.SecretProblem as exc:
                delay = None
                logger.error("cannot serve the webhooks: %s", exc)
            except Exception as exc:  # an API error or worse: logged, then tried again
                delay = None
                logger.error("cannot register the webhooks: %s; retrying", exc)
            if delay is None:
                delay = min(RETRY[min(failures, len(RETRY) - 1)], self.interval)
                failures += 1
            else:
                failures = 0
            await asyncio.sleep(delay)

    def _once(self, key: str, message: str, *args: Any) -> None:
        """Log `message` at INFO the first time `key` comes up (a wait is said once, not per try)."""
        if key not in self._said:
            self._said.add(key)
            logger.info(message, *args)

    async def once(self) -> float | None:
        """One round: seconds until the next one, or None after a failure (retried sooner)."""
        renew_at = None
        bundle = self.ca_bundle
        if self.secret is not None:
            from podnetwork.kube import client as kube

            source = self.secret
            try:
                material = await webhooksecret.ensure(
                    self.api, source.name, source.namespace, source.names, component=self.component,
                    issue=source.issue, lifetimes=source.lifetimes, clock=self.clock)
            except kube.ApiError as exc:
                raise webhooksecret.SecretProblem(
                    f"{exc} (deploy/ grants the Secret by name in the Role of its rbac.yaml)") from None
            if self.tls.load(material.cert, material.key):
                logger.info("serving the certificate of Secret %s/%s", source.namespace, source.name)
            bundle, renew_at = material.ca_bundle, material.renew_at
        if not self.served():
            return 0.1  # the server is starting (it waited for the certificate)
        problem = await self_check(self.host, self.port, bundle, self.server_hostname)
        if problem is not None:
            logger.error("not registering the webhooks: %s", problem)
            return None
        if not await self.register(base64.b64encode(bundle).decode()):
            return None
        delay = self.interval
        if renew_at is not None:
            delay = min(delay, max(0.0, (renew_at - self.clock()).total_seconds()))
        return delay

    async def register(self, bundle_b64: str) -> bool:
        """Create or update every configuration and withdraw the retired ones; False when one has to
        wait or failed."""
        from podnetwork.kube import client as kube

        owner = None
        if self.owner is not None:
            try:
                role = await self.api.get(kube.ClusterRole, self.owner)
            except kube.NotFound:
                logger.warning("not registering the webhooks: their owner, ClusterRole %s (--webhook-owner), "
                               "does not exist (is podnetwork being uninstalled?)", self.owner)
                return False
            owner = Owner(self.owner, str(PartialObjectMetadata.model_validate(role).metadata.uid or ""))
        wanted = desired(self.configurations(self.client_config), bundle_b64, self.component, owner)
        for obj in wanted:
            kind, name = obj["kind"], obj["metadata"]["name"]
            resource = kube.BY_KIND[kind]
            try:
                current: dict[str, Any] | None = await self.api.get(resource, name)
            except kube.NotFound:
                current = None
            try:
                if current is None:
                    if not await self._backend_ready():
                        return False
                    await self.api.create(resource, obj)
                    logger.info("registered %s %s", kind, name)
                    continue
                if newer_bundle(bundle_of(current), bundle_b64):
                    logger.info("%s %s carries a newer CA than the Secret this replica read; "
                                "reading it again", kind, name)
                    return False
                if up_to_date(current, obj):
                    continue
                stored = _configuration(current)
                version = None if stored is None else stored.metadata.resource_version
                await self.api.patch(resource, name, patch(obj, version))
                logger.info("registered %s %s (updated)", kind, name)
            except kube.Conflict:
                logger.info("%s %s was written by another replica meanwhile; reading it again", kind, name)
                return False
            except kube.ApiError as exc:
                logger.error("cannot register %s %s: %s; retrying (deploy/ grants the permission in "
                             "its rbac.yaml)", kind, name, exc)
                return False
        # A configuration we could not withdraw is retried sooner, but never holds up readiness:
        # the ones wanted are registered.
        withdrawn = await self.withdraw()
        if self.on_registered is not None:
            self.on_registered()
        return withdrawn

    async def withdraw(self) -> bool:
        """Delete each of `retired` that is ours; False when one could not be read or deleted."""
        from podnetwork.kube import client as kube

        for kind, name in self.retired:
            resource = kube.BY_KIND[kind]
            try:
                current = await self.api.get(resource, name)
            except kube.NotFound:
                continue
            except kube.ApiError as exc:
                logger.error("cannot read %s %s to withdraw it: %s; retrying", kind, name, exc)
                return False
            if not ours(current, self.component):
                self._once(f"foreign {kind} {name}", "leaving %s %s alone: its label %s is not %s, so "
                           "another installation manages it", kind, name, webhooksecret.MANAGED_BY,
                           self.component)
                continue
            try:
                await self.api.delete(resource, name)
            except kube.NotFound:
                continue
            except kube.ApiError as exc:
                logger.error("cannot withdraw %s %s: %s; retrying (deploy/ grants delete by name in its "
                             "rbac.yaml)", kind, name, exc)
                return False
            logger.info("withdrew %s %s: the flag that serves it is off", kind, name)
        return True

    async def _backend_ready(self) -> bool:
        """With `--webhook-service`: whether the Service has a ready endpoint (this replica joins it
        once its readiness probe passes), so that the API server finds a backend at once."""
        if self.service is None:
            return True
        from podnetwork.kube import client as kube

        namespace, name = self.service
        listing = await self.api.list(kube.EndpointSlice, namespace, labels={SERVICE_NAME_LABEL: name})
        if ready_endpoint(listing.items, name):
            return True
        self._once(f"endpoints {namespace}/{name}", "waiting for a ready endpoint of Service %s/%s "
                   "before registering the webhooks (this pod becomes one once GET /readyz answers 200)",
                   namespace, name)
        return False
