"""What the command shells of the two operators share, so they behave the same.

`podnetwork controller` and `podnetwork bridge` both run a kopf operator and,
beside it, admission webhooks over HTTPS. This module gives them:

- the --webhook-* flags (`add_webhook_arguments`) and their checks
  (`webhook_problem`), done before anything starts; a bad combination is a line
  on stderr and exit status 2, with the same words for both commands;
- the webhooks' socket, bound before kopf starts (a taken port is exit 2, not a
  crash after the operator came up), and their certificate (`Shell.webhook`);
- with --manage-webhooks, their registration once they answer, and with --webhook-secret
  their certificate from a Secret, renewed and reloaded (`Shell.keep_webhooks`,
  `podnetwork.kube.registration`);
- one owner of SIGINT/SIGTERM (`Shell.run`): the first one logs a line and stops
  kopf and the servers together, then the command exits 0.

`podnetwork scheduler-extender` uses `Shell` for its HTTP server too. Heavy
imports (kopf, uvicorn, cryptography) happen where they are used, so importing
this module stays cheap for `podnetwork --help`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import logging
import signal
import socket
import sys
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from podnetwork.cli.arguments import byte_count, positive_seconds, service_reference, tcp_port
from podnetwork.kube.certificates import Certificate, CertificateError

if TYPE_CHECKING:
    from podnetwork.kube.credentials import Credentials

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Refused(Exception):
    """A problem found before anything started; the command prints it and exits 2."""


def refuse(command: str, problem: str) -> int:
    """Say `problem` as `command` on stderr; the exit status of a refusal."""
    print(f"{command}: {problem}", file=sys.stderr)
    return 2


# -- flags ---------------------------------------------------------------------------------


#: The API server refuses request bodies over 3 MiB (its MaxRequestBodyBytes), so the
#: AdmissionReviews it sends stay near that; larger ones come from elsewhere.
MAX_BODY_BYTES = 3 * 1024 * 1024


def add_webhook_arguments(parser: argparse.ArgumentParser, *, default_port: int) -> None:
    """The --webhook-* flags, the same for every command that serves admission webhooks."""
    parser.add_argument("--webhook-host", default="0.0.0.0",
                        help="address to serve the webhooks on (default 0.0.0.0: every address)")
    parser.add_argument("--webhook-port", type=tcp_port, default=default_port,
                        help=f"port to serve the webhooks on (default {default_port})")
    parser.add_argument("--webhook-cert", type=Path, metavar="FILE",
                        help="TLS certificate (PEM) of the webhooks; with --webhook-key. Without "
                        "both, a self-signed one for --webhook-host and --webhook-url's host is made")
    parser.add_argument("--webhook-key", type=Path, metavar="FILE",
                        help="private key (PEM) of --webhook-cert")
    parser.add_argument("--webhook-url", metavar="URL",
                        help="https URL the API server calls the webhooks at, for --manage-webhooks "
                        "(default https://HOST:PORT)")
    parser.add_argument("--webhook-max-body-bytes", type=byte_count,
                        default=MAX_BODY_BYTES, metavar="BYTES",
                        help="refuse larger webhook request bodies with HTTP 413, before reading them "
                        "(default 3145728: 3 MiB, the API server's own cap on a request body)")
    parser.add_argument("--manage-webhooks", action="store_true",
                        help="create and keep the webhook configurations, with the serving certificate's "
                        "CA bundle, once the webhooks answer (never before: their failurePolicy is Fail); "
                        "at --webhook-url, or at the Service of --webhook-service")
    parser.add_argument("--webhook-service", type=service_reference, metavar="NAMESPACE/NAME",
                        help="with --manage-webhooks: register the Service NAMESPACE/NAME (port 443) that "
                        "reaches these webhooks, instead of a URL; needs --webhook-secret")
    parser.add_argument("--webhook-secret", metavar="NAME",
                        help="serve the certificate of this Secret (in the namespace of --webhook-service) "
                        "and register its ca.crt: the replicas make a CA and a certificate for "
                        "SERVICE.NAMESPACE.svc there when it is missing, renew them before they expire, "
                        "and reload what it holds (docs/deploy.md \"Webhook certificates\")")
    parser.add_argument("--webhook-secret-external", action="store_true",
                        help="another issues --webhook-secret (e.g. cert-manager): read it, never write it")
    parser.add_argument("--webhook-owner", metavar="CLUSTERROLE",
                        help="with --manage-webhooks: make the webhook configurations dependents of this "
                        "ClusterRole, so that deleting it (kubectl delete -k deploy/...) deletes them")
    parser.add_argument("--webhook-check-interval", type=positive_seconds, default=60.0, metavar="SECONDS",
                        help="with --manage-webhooks: how often the certificate and the configurations are "
                        "checked and put right (default 60)")


@dataclass(frozen=True)
class WebhookFlags:
    """The --webhook-* flags of one command, and whether it serves webhooks at all."""

    serve: bool
    host: str
    port: int
    cert: Path | None
    key: Path | None
    url: str | None
    manage: bool
    max_body_bytes: int = MAX_BODY_BYTES
    """Larger request bodies get 413 unread (`webhooks.BodyLimit`)."""
    service: tuple[str, str] | None = None
    """--webhook-service: (namespace, name)."""
    secret: str | None = None
    secret_external: bool = False
    owner: str | None = None
    check_interval: float = 60.0

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, serve: bool) -> WebhookFlags:
        return cls(serve=serve, host=args.webhook_host, port=args.webhook_port, cert=args.webhook_cert,
                   key=args.webhook_key, url=args.webhook_url, manage=args.manage_webhooks,
                   max_body_bytes=args.webhook_max_body_bytes, service=args.webhook_service,
                   secret=args.webhook_secret, secret_external=args.webhook_secret_external,
                   owner=args.webhook_owner, check_interval=args.webhook_check_interval)


def url_problem(url: str) -> str | None:
    """What the API server would refuse in a webhook URL: it calls only https, and a URL
    without user info, query or fragment (admissionregistration.k8s.io/v1 WebhookClientConfig)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError as exc:
        return f"--webhook-url {url!r} is not a URL ({exc})"
    if parts.scheme != "https" or not parts.hostname or parts.username is not None \
            or parts.password is not None or parts.query or parts.fragment:
        return (f"--webhook-url {url!r} is not a URL the API server calls: expected "
                "https://NAME[:PORT][/PATH], without user, query or fragment")
    return None


def webhook_problem(flags: WebhookFlags, *, turn_on: str) -> str | None:
    """What is wrong with these flags, or None. `turn_on` says how the command serves
    webhooks when it does not (e.g. "add --webhook"). Reads whether the files exist."""
    from podnetwork.kube import webhooks

    if not flags.serve:
        given = [name for name, value in (("--webhook-cert", flags.cert), ("--webhook-key", flags.key),
                                          ("--webhook-url", flags.url), ("--manage-webhooks", flags.manage),
                                          ("--webhook-service", flags.service),
                                          ("--webhook-secret", flags.secret))
                 if value]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            return f"{', '.join(given)} only {verb} to webhooks served: {turn_on}"
        return None
    problem = registration_problem(flags)
    if problem is not None:
        return problem
    if (flags.cert is None) != (flags.key is None):
        return ("--webhook-cert and --webhook-key go together: give both, or neither for a "
                "self-signed certificate")
    for flag, path in (("--webhook-cert", flags.cert), ("--webhook-key", flags.key)):
        if path is not None and not path.is_file():
            return f"{flag} {path} is not a readable file"
    if flags.url is not None:
        problem = url_problem(flags.url)
        if problem is not None:
            return problem
    if flags.service is None and webhooks.unreachable_registration(flags.manage, flags.url, flags.host):
        return (f"--manage-webhooks would register https://{flags.host}:{flags.port}, which the API "
                "server cannot call (and the webhooks fail closed: every pod they cover would be "
                "refused); pass --webhook-url https://NAME:PORT with a name the API server reaches, "
                "or --webhook-host with such an address")
    return None


def registration_problem(flags: WebhookFlags) -> str | None:
    """What does not go together among --manage-webhooks, --webhook-service, --webhook-secret and
    the certificate flags, or None."""
    if flags.service is not None and flags.url is not None:
        return "--webhook-service and --webhook-url both say where the API server calls: give one"
    for flag, value in (("--webhook-service", flags.service), ("--webhook-owner", flags.owner)):
        if value and not flags.manage:
            return f"{flag} only applies to the registration of --manage-webhooks: add it"
    if flags.service is not None and flags.secret is None:
        return ("--webhook-service needs --webhook-secret: the replicas behind one Service must serve "
                "one certificate, kept in that Secret")
    if flags.secret is not None:
        if flags.service is None:
            return ("--webhook-secret needs --manage-webhooks and --webhook-service NAMESPACE/NAME: the "
                    "Service names the certificate and the namespace of the Secret")
        if flags.cert is not None or flags.key is not None:
            return "--webhook-secret and --webhook-cert/--webhook-key are two certificates: give one"
    if flags.secret_external and flags.secret is None:
        return "--webhook-secret-external says who writes --webhook-secret: add --webhook-secret NAME"
    return None


def webhook_summary(flags: WebhookFlags, paths: Sequence[str]) -> str:
    """Where the webhooks are served and how they are registered, for the start-up line."""
    if not flags.serve:
        return "not served"
    host = f"[{flags.host}]" if ":" in flags.host else flags.host
    served = ", ".join(f"https://{host}:{flags.port}{path}" for path in paths)
    if flags.manage and flags.service is not None:
        namespace, name = flags.service
        issued = "issued by another" if flags.secret_external else "issued and renewed here"
        return (f"{served}, certificate of Secret {namespace}/{flags.secret} ({issued}), registered at "
                f"Service {namespace}/{name} once it answers (--manage-webhooks)")
    if flags.manage:
        url = flags.url or f"https://{host}:{flags.port}"
        return f"{served}, registered at {url.rstrip('/')} (--manage-webhooks)"
    return f"{served}, registered by hand (no --manage-webhooks)"


# -- running -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """A webhook address ready to serve: its socket is bound, its certificate made or loaded, or
    (with --webhook-secret) to be loaded from the Secret into `tls` before it serves."""

    flags: WebhookFlags
    sockets: list[socket.socket]
    certificate: Certificate | None
    """The certificate given by --webhook-cert and --webhook-key; else None."""
    tls: Any = None
    """Else the `webhooks.ServingTLS` serving a self-signed certificate made in memory, or with
    --webhook-secret the one the Secret's certificate is loaded into."""
    ca_bundle: str = ""
    """Base64 PEM of the CA the API server is to trust ("" with --webhook-secret: the Secret's)."""

    @property
    def serving(self) -> Any:
        """What the server serves with: `tls`, else `certificate`."""
        return self.tls if self.tls is not None else self.certificate

    def client_config(self) -> dict[str, Any]:
        """Where --manage-webhooks registers the API server to call: the Service (port 443), or
        the URL (default https://HOST:PORT); the caBundle is added at registration."""
        if self.flags.service is not None:
            namespace, name = self.flags.service
            return {"service": {"namespace": namespace, "name": name, "port": 443}}
        url = self.flags.url
        if url is None:
            host = self.flags.host
            url = f"https://[{host}]:{self.flags.port}" if ":" in host else f"https://{host}:{self.flags.port}"
        return {"url": url}

    def server_hostname(self) -> str:
        """The name the API server dials, which the certificate must name."""
        if self.flags.service is not None:
            namespace, name = self.flags.service
            return f"{name}.{namespace}.svc"
        return urllib.parse.urlsplit(self.client_config()["url"]).hostname or self.flags.host


class Readiness:
    """What the command still waits for before its webhooks report ready (`GET /readyz`).

    The operators mark what they wait for (`wait_for`) before serving, and what is
    done when it is (`done`); `pending` is what `/readyz` reports (503 while not
    empty). Used from the event loop's thread only.
    """

    def __init__(self) -> None:
        self._pending: list[str] = []

    def wait_for(self, what: str) -> None:
        if what not in self._pending:
            self._pending.append(what)

    def done(self, what: str) -> None:
        if what in self._pending:
            self._pending.remove(what)
            logger.info("ready: %s", what)

    def pending(self) -> list[str]:
        return list(self._pending)


#: What `Readiness` waits for under `--manage-webhooks`.
REGISTRATION = "the webhook configuration is registered (--manage-webhooks)"


class Shell:
    """Servers and a kopf operator of one command, run until SIGINT/SIGTERM or `stop`.

    Used as a context manager, which owns the bound sockets:

        with Shell("podnetwork bridge", stop) as shell:
            endpoint = shell.webhook(flags)          # Refused: bad port, bad certificate
            shell.serve(app, endpoint.sockets, endpoint.certificate)
            shell.operator(registry=registry, clusterwide=True)
            await shell.run()
    """

    def __init__(self, command: str, stop: asyncio.Event | None = None) -> None:
        self.command = command
        self.stop = stop if stop is not None else asyncio.Event()
        self._stack = contextlib.ExitStack()
        self._servers: list[tuple[Any, list[socket.socket], str, Any]] = []
        self._background: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = []
        self._operator: dict[str, Any] | None = None
        self._server_check: Credentials | None = None
        self._signalled: list[signal.Signals] = []
        self.readiness = Readiness()
        """What `/readyz` of the servers made with `ready_probe` waits for."""

    def __enter__(self) -> Shell:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stack.close()

    def listen(self, host: str, port: int, hint: str) -> list[socket.socket]:
        """Sockets bound to `host`:`port`, closed with the shell. Refused with `hint` when
        the address cannot be taken (in use, not local, not a name)."""
        from podnetwork.kube import webhooks

        try:
            sockets = webhooks.listen(host, port)
        except webhooks.ListenError as exc:
            raise Refused(f"{exc}; {hint}") from None
        for sock in sockets:
            self._stack.callback(sock.close)
        return sockets

    def webhook(self, flags: WebhookFlags) -> Endpoint:
        """Bind the webhooks' address, then load --webhook-cert/--webhook-key or make a
        self-signed certificate (in memory only: a killed process leaves no key on disk); with
        --webhook-secret, only the (empty) context its certificate is loaded into later
        (`keep_webhooks`)."""
        from podnetwork.kube import certificates, webhooks

        sockets = self.listen(flags.host, flags.port, "pick another --webhook-host or --webhook-port")
        if flags.secret is not None:
            return Endpoint(flags, sockets, None, webhooks.ServingTLS())
        if flags.cert is not None and flags.key is not None:
            try:
                certificate = certificates.load(flags.cert, flags.key)
            except CertificateError as exc:
                raise Refused(str(exc)) from None
            return Endpoint(flags, sockets, certificate, ca_bundle=certificate.ca_bundle)
        url_host = urllib.parse.urlsplit(flags.url or "").hostname or ""
        cert, key = certificates.self_signed_pem(flags.host, url_host)
        tls = webhooks.ServingTLS()
        tls.load(cert, key)
        return Endpoint(flags, sockets, None, tls, ca_bundle=base64.b64encode(cert).decode())

    def serve(self, app: Any, sockets: list[socket.socket], certificate: Any = None,
              *, ready_probe: bool = False, **config: Any) -> Any:
        """Serve `app` on `sockets` (HTTPS with `certificate`: a `Certificate`, or a
        `webhooks.ServingTLS`, served once it has loaded one) while the shell runs; with
        `ready_probe`, `GET /readyz` answers from `readiness` (`webhooks.ReadyProbe`);
        `config` goes to uvicorn's Config. Returns the server (its `started` says it serves)."""
        from podnetwork.kube import webhooks

        host, port = sockets[0].getsockname()[:2]
        scheme = "https" if certificate is not None else "http"
        where = f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
        pending = self.readiness.pending if ready_probe else None
        server = webhooks.server(app, certificate, pending=pending, **config)
        tls = certificate if isinstance(certificate, webhooks.ServingTLS) else None
        self._servers.append((server, sockets, where, tls))
        return server

    def background(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `run()` while the shell runs; cancelled when it stops."""
        self._background.append((name, run))

    def keep_webhooks(self, endpoint: Endpoint, server: Any, api: Any, *, component: str,
                      configurations: Callable[[Mapping[str, Any]], list[dict[str, Any]]],
                      retired: Sequence[tuple[str, str]] = ()) -> None:
        """With --manage-webhooks: register the webhook configurations `configurations` builds
        once `server` answers, delete those of `retired` (kind, name) that are ours (a
        configuration served only behind a flag now off), with --webhook-secret serve and renew
        the Secret's certificate (`podnetwork.kube.registration.Keeper`), while the shell runs.
        `api` is an AsyncApi. With a URL (development), `/readyz` waits for the registration, as
        pods created before are not seen by the webhooks; behind a Service, it must not: the API
        server calls only ready endpoints, so the registration waits for the readiness instead."""
        from podnetwork.kube import registration, webhooksecret

        flags = endpoint.flags
        secret = None
        if flags.secret is not None and flags.service is not None:
            namespace, name = flags.service
            secret = registration.SecretSource(flags.secret, namespace,
                                               webhooksecret.service_names(name, namespace),
                                               issue=not flags.secret_external)
        keeper = registration.Keeper(
            api=api, component=component, configurations=configurations,
            client_config=endpoint.client_config(),
            host=flags.host, port=flags.port, server_hostname=endpoint.server_hostname(),
            served=lambda: bool(server.started), tls=endpoint.tls, secret=secret,
            ca_bundle=base64.b64decode(endpoint.ca_bundle),
            service=flags.service, owner=flags.owner, interval=flags.check_interval, retired=retired)
        if flags.service is None:
            self.readiness.wait_for(REGISTRATION)
            keeper.on_registered = lambda: self.readiness.done(REGISTRATION)
        self.background("keeping the webhooks", keeper.run)

    def metrics(self, app: Any, host: str, port: int | None) -> None:
        """Serve the metrics `app` (`podnetwork.cli.metrics.asgi_app`) over plain HTTP on
        `host`:`port` while the shell runs; nothing when `port` is None (the flag not given)."""
        if port is None:
            return
        sockets = self.listen(host, port, "pick another --metrics-host or --metrics-port")
        self.serve(app, sockets, access_log=False)

    def operator(self, **options: Any) -> None:
        """Run a kopf operator while the shell runs; `options` go to `kopf.spawn_tasks`
        (registry, clusterwide, peering...), which gets the shell's stop flag. Without an
        `identity`, `podnetwork.kube.peering.identity()` (kopf's own needs a passwd entry)."""
        if options.get("identity") is None:
            from podnetwork.kube import peering

            options["identity"] = peering.identity()
        self._operator = options

    def check_server(self, credentials: Credentials) -> None:
        """Before anything runs (`run`), refuse a server of `credentials` that answers as no
        Kubernetes API server does (`podnetwork.kube.client.answer_problem`): kopf's first
        request would end the command with a traceback. Asked after the local checks (ports,
        certificates), so that a wrong flag is said without a request to the cluster."""
        self._server_check = credentials

    async def run(self) -> None:
        """Run the servers and the operator until a signal, `stop`, or the end of any of
        them; then stop them all, and re-raise the first failure. `Refused` first when the
        server of `check_server` is not an API server."""
        if self._server_check is not None:
            from podnetwork.kube import client as kube

            problem = await asyncio.to_thread(kube.answer_problem, self._server_check)
            if problem is not None:
                raise Refused(problem)
        loop = asyncio.get_running_loop()
        self._take_signals(loop)
        tasks = [asyncio.create_task(self._serve(server, sockets, where, tls), name=f"serving {where}")
                 for server, sockets, where, tls in self._servers]
        background = [asyncio.create_task(run(), name=name) for name, run in self._background]
        if self._operator is not None:
            tasks.append(asyncio.create_task(self._run_operator(self._operator), name="kopf operator"))
        stopper = asyncio.create_task(self.stop.wait(), name="stop flag")
        try:
            await asyncio.wait([*tasks, *background, stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.stop.set()  # whichever ended first, the others follow
            for server, _, _, _ in self._servers:
                server.should_exit = True
            for task in background:
                task.cancel()
            results = await asyncio.gather(*tasks, *background, return_exceptions=True)
            stopper.cancel()
            self._release_signals(loop)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result

    async def _serve(self, server: Any, sockets: list[socket.socket], where: str, tls: Any) -> None:
        if tls is not None and not tls.loaded.is_set():
            # Nothing listens until there is a certificate: a probe or the API server gets a
            # refused connection, not a TLS error.
            logger.info("%s: waiting for the webhooks' certificate before serving %s", self.command, where)
            waiting = asyncio.create_task(tls.loaded.wait())
            stopping = asyncio.create_task(self.stop.wait())
            await asyncio.wait([waiting, stopping], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            stopping.cancel()
            if not tls.loaded.is_set():
                return
        logger.info("%s: serving %s", self.command, where)
        await server.serve(sockets=sockets)
        logger.info("%s: stopped serving %s", self.command, where)

    async def _run_operator(self, options: dict[str, Any]) -> None:
        """What `kopf.operator` does, with the shell's signal handlers put back after kopf
        installed its own (`kopf.spawn_tasks` does, unconditionally in the main thread): one
        handler stops kopf and the servers together, through the stop flag."""
        import kopf

        current = asyncio.current_task()
        existing = {task for task in asyncio.all_tasks() if task is not current}
        tasks = await kopf.spawn_tasks(stop_flag=self.stop, **options)
        self._take_signals(asyncio.get_running_loop())
        await kopf.run_tasks(tasks, ignored=existing)

    def _take_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in SIGNALS:
            # Off the main thread (an embedding test), the loop takes no signals: `stop` only.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal, sig)

    def _release_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signalled.append(sig)
        if len(self._signalled) == 1:
            logger.warning("%s: %s received, stopping", self.command, sig.name)
            self.stop.set()
            return
        # A second signal while stopping: stop waiting for requests in flight.
        logger.warning("%s: %s received again, stopping without waiting for open requests",
                       self.command, sig.name)
        for server, _, _, _ in self._servers:
            server.force_exit = True


# -- peering -------------------------------------------------------------------------------


async def retrying(what: str, run: Callable[[], Awaitable[None]], backoff: float = 10.0) -> None:
    """Run `run` again after an error: a side watch that ended on, say, a 403 would
    otherwise leave its cache or guard silently stale while the operator runs on."""
    while True:
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # logged, then retried: the operator must go on
            logger.error("%s failed (%s: %s); retrying in %ss", what, type(exc).__name__, exc, backoff)
            await asyncio.sleep(backoff)


def register_demotion_guard(registry: Any, api: Any, identity: str,
                            on_demoted: Callable[[], None]) -> None:
    """Join the peering before kopf starts, then call `on_demoted` when kopf pauses this replica
    after it has been the active one, beside the operator of `registry` (which must use
    `identity`; `podnetwork.kube.peering.join` and `guard_demotion`).

    The join is a startup handler: kopf starts no watch (nor its own keep-alive) before its
    startup handlers succeed, and it sets the priority kopf runs with (a `--priority start-time`
    becomes the rank of this replica's arrival). So a replica never acts before its keep-alive
    and those of the replicas that arrived earlier are in the object kopf reads first, and two
    replicas starting together do not both act for a moment, then one exit.

    A resumed replica keeps what it had in memory when it paused, and kopf's
    re-listing does not report the objects deleted meanwhile: the controller's in-use
    index would keep pods that are gone, and their finalizers; the bridge's caches, NADs
    that are gone. A clean restart avoids that, and it comes back as a paused standby.
    `api` is a `podnetwork.kube.client.AsyncApi`.
    """
    import kopf

    from podnetwork.cli.arguments import StartTime
    from podnetwork.kube import peering

    task: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start_demotion_guard(settings: kopf.OperatorSettings, **_: Any) -> None:
        # kopf's public settings say which peering object and priority the operator runs with.
        name, priority = settings.peering.name, settings.peering.priority
        if settings.peering.clusterwide and not settings.peering.standalone and name:
            try:
                priority = await peering.join(api, name, identity, priority,
                                              by_arrival=isinstance(priority, StartTime),
                                              lifetime=settings.peering.lifetime)
            except peering.PeeringMissing as exc:
                raise kopf.TemporaryError(f"waiting for the peering object ({exc}; deploy/peering/)",
                                          delay=5) from exc
            settings.peering.priority = priority
            logger.info("joined peering %r with priority %s", name, priority)
        task.append(asyncio.create_task(retrying(
            "watching the peering object",
            lambda: peering.guard_demotion(api, name, identity, priority, on_demoted))))

    @kopf.on.cleanup(registry=registry)
    async def stop_demotion_guard(**_: Any) -> None:
        for t in task:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
