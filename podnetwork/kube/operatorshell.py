"""What the command shells of the two operators share, so they behave the same.

`podnetwork controller` and `podnetwork bridge` both run a kopf operator and,
beside it, admission webhooks over HTTPS. This module gives them:

- the --webhook-* flags (`add_webhook_arguments`) and their checks
  (`webhook_problem`), done before anything starts; a bad combination is a line
  on stderr and exit status 2, with the same words for both commands;
- the webhooks' socket, bound before kopf starts (a taken port is exit 2, not a
  crash after the operator came up), and their certificate (`Shell.webhook`);
- one owner of SIGINT/SIGTERM (`Shell.run`): the first one logs a line and stops
  kopf and the servers together, then the command exits 0.

`podnetwork scheduler-extender` uses `Shell` for its HTTP server too. Heavy
imports (kopf, uvicorn, cryptography) happen where they are used, so importing
this module stays cheap for `podnetwork --help`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from podnetwork.kube.certificates import Certificate, CertificateError
from podnetwork.kube.names import tcp_port

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


def byte_count(text: str) -> int:
    """`--webhook-max-body-bytes`: a whole number of bytes, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid byte count {text!r}: expected a whole number, 1 or more")
    return value


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
                        help="create/update the webhook configurations at startup, with the serving "
                        "certificate as their CA bundle (development clusters; deploy/ registers "
                        "them statically)")


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """--metrics-host/--metrics-port: where Prometheus scrapes the command (plain HTTP, GET
    /metrics; docs/metrics.md). Off unless --metrics-port is given."""
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address to serve the Prometheus metrics on (default 127.0.0.1; "
                        "0.0.0.0 for a scrape from another pod)")
    parser.add_argument("--metrics-port", type=tcp_port, default=None, metavar="PORT",
                        help="serve the Prometheus metrics over plain HTTP at GET /metrics on this "
                        "port (default: not served)")


START_TIME = "start-time"


def parse_priority(text: str) -> int:
    """`--priority`: an integer, or `start-time` (minus the current time in microseconds).

    kopf pauses every replica that sees a live peer of higher priority, and all
    of them when two share the highest one (kopf docs "Peering", "Priorities"),
    so the replicas of one Deployment, which share their arguments, need a value
    that differs per process. An earlier start gives a higher priority: a new
    replica waits behind the running one instead of taking over from it.
    """
    if text == START_TIME:
        return -(time.time_ns() // 1_000)
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid priority {text!r}: expected an integer or {START_TIME!r}") from None


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

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, serve: bool) -> WebhookFlags:
        return cls(serve=serve, host=args.webhook_host, port=args.webhook_port, cert=args.webhook_cert,
                   key=args.webhook_key, url=args.webhook_url, manage=args.manage_webhooks,
                   max_body_bytes=args.webhook_max_body_bytes)


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
                                          ("--webhook-url", flags.url), ("--manage-webhooks", flags.manage))
                 if value]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            return f"{', '.join(given)} only {verb} to webhooks served: {turn_on}"
        return None
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
    if webhooks.unreachable_registration(flags.manage, flags.url, flags.host):
        return (f"--manage-webhooks would register https://{flags.host}:{flags.port}, which the API "
                "server cannot call (and the webhooks fail closed: every pod they cover would be "
                "refused); pass --webhook-url https://NAME:PORT with a name the API server reaches, "
                "or --webhook-host with such an address")
    return None


# -- logging -------------------------------------------------------------------------------

#: Loggers of the operators' own code. At the default verbosity they log at INFO (start-up,
#: every write, every warning) while the libraries (kopf logs every handler it runs at INFO,
#: aiohttp and httpx every request) stay at the root's WARNING; `-v` shows everything.
OWN_LOGGERS = ("podnetwork", "bridge")


def operator_logging(verbose: int) -> None:
    """Our loggers at INFO unless `-v`/`-vv` already set the root lower (`podnetwork.cli`)."""
    if verbose == 0:
        for name in OWN_LOGGERS:
            logging.getLogger(name).setLevel(logging.INFO)


def version() -> str:
    """The installed version of this project, as its start-up line says."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("podnetwork")
    except PackageNotFoundError:
        return "unknown"


def webhook_summary(flags: WebhookFlags, paths: Sequence[str]) -> str:
    """Where the webhooks are served and how they are registered, for the start-up line."""
    if not flags.serve:
        return "not served"
    host = f"[{flags.host}]" if ":" in flags.host else flags.host
    served = ", ".join(f"https://{host}:{flags.port}{path}" for path in paths)
    if flags.manage:
        url = flags.url or f"https://{host}:{flags.port}"
        return f"{served}, registered at {url.rstrip('/')} (--manage-webhooks)"
    return f"{served}, registered by its configuration (deploy/)"


def log_start(command: str, *, cluster: str, webhook: str, features: Mapping[str, object]) -> None:
    """One INFO line when an operator starts: version, cluster, webhooks, features."""
    listed = ", ".join(f"{name}={_shown(value)}" for name, value in features.items())
    logger.info("%s %s starting: cluster %s; webhooks %s; features %s", command, version(), cluster, webhook,
                listed)


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return "+".join(str(v) for v in value) or "none"
    return str(value)


# -- running -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """A webhook address ready to serve: its socket is bound, its certificate made or loaded."""

    flags: WebhookFlags
    sockets: list[socket.socket]
    certificate: Certificate

    def client_config(self) -> dict[str, str]:
        """What --manage-webhooks registers: the URL the API server calls, and the CA bundle."""
        from podnetwork.kube import webhooks

        return webhooks.client_config(self.flags.url, self.flags.host, self.flags.port, self.certificate)


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

    Used as a context manager, which owns the bound sockets and the directory of
    a self-signed certificate:

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
        self._servers: list[tuple[Any, list[socket.socket], str]] = []
        self._operator: dict[str, Any] | None = None
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
        self-signed certificate (in a directory removed with the shell)."""
        from podnetwork.kube import certificates

        sockets = self.listen(flags.host, flags.port, "pick another --webhook-host or --webhook-port")
        if flags.cert is not None and flags.key is not None:
            try:
                certificate = certificates.load(flags.cert, flags.key)
            except CertificateError as exc:
                raise Refused(str(exc)) from None
        else:
            directory = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="podnetwork-webhook-"))
            certificate = certificates.certificate(None, None, Path(directory), flags.host, flags.url)
        return Endpoint(flags, sockets, certificate)

    def serve(self, app: Any, sockets: list[socket.socket], certificate: Certificate | None = None,
              *, ready_probe: bool = False, **config: Any) -> None:
        """Serve `app` on `sockets` (HTTPS with `certificate`) while the shell runs;
        with `ready_probe`, `GET /readyz` answers from `readiness` (`webhooks.ReadyProbe`);
        `config` goes to uvicorn's Config."""
        from podnetwork.kube import webhooks

        host, port = sockets[0].getsockname()[:2]
        scheme = "https" if certificate is not None else "http"
        where = f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
        pending = self.readiness.pending if ready_probe else None
        self._servers.append((webhooks.server(app, certificate, pending=pending, **config), sockets, where))

    def metrics(self, app: Any, host: str, port: int | None) -> None:
        """Serve the metrics `app` (`podnetwork.kube.metrics.asgi_app`) over plain HTTP on
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

    async def run(self) -> None:
        """Run the servers and the operator until a signal, `stop`, or the end of any of
        them; then stop them all, and re-raise the first failure."""
        loop = asyncio.get_running_loop()
        self._take_signals(loop)
        tasks = [asyncio.create_task(self._serve(server, sockets, where), name=f"serving {where}")
                 for server, sockets, where in self._servers]
        if self._operator is not None:
            tasks.append(asyncio.create_task(self._run_operator(self._operator), name="kopf operator"))
        stopper = asyncio.create_task(self.stop.wait(), name="stop flag")
        try:
            await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.stop.set()  # whichever ended first, the others follow
            for server, _, _ in self._servers:
                server.should_exit = True
            results = await asyncio.gather(*tasks, return_exceptions=True)
            stopper.cancel()
            self._release_signals(loop)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result

    async def _serve(self, server: Any, sockets: list[socket.socket], where: str) -> None:
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
        for server, _, _ in self._servers:
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
    """Call `on_demoted` when kopf pauses this replica after it has been the active one, beside
    the operator of `registry` (which must use `identity`; `podnetwork.kube.peering.guard_demotion`).

    A resumed replica keeps what it had in memory when it paused, and kopf's
    re-listing does not report the objects deleted meanwhile: the controller's in-use
    index would keep pods that are gone, and their finalizers; the bridge's caches, NADs
    that are gone. A clean restart avoids that, and it comes back as a paused standby.
    `api` is a `podnetwork.kube.client.AsyncApi`.
    """
    import kopf

    from podnetwork.kube import peering

    task: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start_demotion_guard(settings: kopf.OperatorSettings, **_: Any) -> None:
        # kopf's public settings say which peering object and priority the operator runs with.
        name, priority = settings.peering.name, settings.peering.priority
        task.append(asyncio.create_task(retrying(
            "watching the peering object",
            lambda: peering.guard_demotion(api, name, identity, priority, on_demoted))))

    @kopf.on.cleanup(registry=registry)
    async def stop_demotion_guard(**_: Any) -> None:
        for t in task:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
