"""Which cluster a command talks to, and as whom: one precedence for every command.

Precedence (controller-runtime's, the one Kubernetes controllers use):

1. `--kubeconfig FILE`;
2. `$KUBECONFIG`: a `:`-separated list of files, merged as kubectl merges them
   (files that do not exist are skipped; for each cluster, user and context
   name the first file that defines it wins, and so does the first
   `current-context`);
3. the in-cluster service account (`KUBERNETES_SERVICE_HOST`/`_PORT` and the
   token in /var/run/secrets/kubernetes.io/serviceaccount), unless `--context`
   is given: a context names an entry of a kubeconfig, which the pod's account
   has none of;
4. `~/.kube/config`.

`--context NAME` selects the context of whichever kubeconfig is used (default:
its `current-context`). docs/architecture.md "Reaching the API" says the same
for users; each command's `--help` points there (`HELP`).

What a kubeconfig may say, and how it is honoured: `certificate-authority`
(file) or `-data`, `insecure-skip-tls-verify`, `tls-server-name`, `proxy-url`;
`client-certificate`/`client-key` (files) or `-data`, `token`, `tokenFile`,
`username`/`password`, and `exec` credential plugins (client.authentication.k8s.io
v1, v1beta1, v1alpha1; token or client certificate; re-run when the token
expires or the server answers 401). Relative paths are relative to the file
that names them. `auth-provider` is refused with a hint to use an exec plugin.

Nothing here imports lightkube or kopf at module level: the credentials are
plain data, and `kopf_login` imports kopf only when an operator asks for it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import datetime
import json
import os
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from podnetwork.kube import certificates

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: What each command's --help says about its credentials.
HELP = 'credentials: see docs/architecture.md "Reaching the API"'
NO_CLUSTER = ("no kubeconfig: pass --kubeconfig PATH, set $KUBECONFIG, or create ~/.kube/config "
              "(or run in a pod with a service account)")
#: Seconds an exec credential plugin may run (client-go sets none; a hung plugin would hang us).
EXEC_TIMEOUT = 60.0
#: Seconds a token read from a file is used before the file is read again (client-go: 60).
TOKEN_FILE_TTL = 60.0
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1",
                     "client.authentication.k8s.io/v1alpha1")


class CredentialsError(ValueError):
    """The credentials cannot be used; the message says which file or setting, and what to fix."""


@dataclass(frozen=True)
class ExecPlugin:
    """A kubeconfig `exec` credential plugin (client.authentication.k8s.io)."""

    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    install_hint: str | None = None
    where: str = ""
    """For messages: the context (and file) that configured it."""


@dataclass(frozen=True)
class Credentials:
    """One API server and how to authenticate to it. Certificates and keys are PEM text."""

    server: str
    source: str = ""
    """Where these came from, for messages: "--kubeconfig FILE", "$KUBECONFIG", "in-cluster"..."""
    context: str | None = None
    namespace: str | None = None
    """The context's (or the service account's) namespace, if it sets one."""
    ca_file: str | None = None
    ca_data: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    client_cert_data: str | None = None
    client_key_data: str | None = None
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = None
    exec_plugin: ExecPlugin | None = None
    proxy_url: str | None = None

    @property
    def describe(self) -> str:
        """The server and where it was configured, for messages."""
        context = f", context {self.context!r}" if self.context else ""
        return f"{self.server} ({self.source or 'given'}{context})"


# --- resolution ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, what: str = "the cluster",
                  kubeconfig_metavar: str = "FILE", context_metavar: str | None = None) -> None:
    """`--kubeconfig` and `--context`, with the same help in every command."""
    parser.add_argument("--kubeconfig", metavar=kubeconfig_metavar,
                        help=f"kubeconfig of {what} ({HELP})")
    parser.add_argument("--context", metavar=context_metavar,
                        help="kubeconfig context (default: the kubeconfig's current-context)")


def resolve(kubeconfig: str | None = None, context: str | None = None, *,
            environ: Mapping[str, str] | None = None, service_account: Path | None = None) -> Credentials:
    """The credentials the precedence of this module selects. Raises `CredentialsError`.

    Nothing is contacted and no plugin is run: `check` (or the first request) does that.
    """
    env = os.environ if environ is None else environ
    if kubeconfig:
        return _from_kubeconfig([Path(kubeconfig).expanduser()], context, f"--kubeconfig {kubeconfig}",
                                explicit=True)
    listed = env.get("KUBECONFIG", "")
    if listed.strip():
        paths = [Path(p).expanduser() for p in listed.split(os.pathsep) if p.strip()]
        existing = [p for p in paths if p.exists()]  # as kubectl: absent files are skipped
        if not existing:
            raise CredentialsError(f"$KUBECONFIG={listed}: none of its files exists; fix $KUBECONFIG or "
                                   "unset it (then the in-cluster account or ~/.kube/config is used)")
        return _from_kubeconfig(existing, context, f"$KUBECONFIG {listed}", explicit=False)
    in_cluster_problem = "a --context was given" if context else None
    if not context:
        try:
            return in_cluster(env, service_account or SERVICE_ACCOUNT)
        except CredentialsError as exc:
            in_cluster_problem = str(exc)
    home = Path(env.get("HOME") or str(Path.home()))
    default = home / ".kube" / "config"
    if default.exists():
        return _from_kubeconfig([default], context, f"~/.kube/config ({default})", explicit=True)
    raise CredentialsError(f"{NO_CLUSTER}; in-cluster: {in_cluster_problem}")


def in_cluster(environ: Mapping[str, str], account: Path) -> Credentials:
    """The pod's service account, as client-go's InClusterConfig reads it."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise CredentialsError("not in a pod (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set)")
    token = account / "token"
    if not token.is_file():
        raise CredentialsError(f"no service account token at {token} (automountServiceAccountToken: false?)")
    if ":" in host:
        host = f"[{host}]"
    ca = account / "ca.crt"
    namespace_file = account / "namespace"
    namespace = namespace_file.read_text(encoding="utf-8").strip() if namespace_file.is_file() else None
    return Credentials(server=f"https://{host}:{port}", source="in-cluster service account",
                       namespace=namespace or None, ca_file=str(ca) if ca.is_file() else None,
                       token_file=str(token))


@dataclass
class _Entry:
    data: Mapping[str, Any]
    file: Path


@dataclass
class _Merged:
    clusters: dict[str, _Entry] = field(default_factory=dict)
    users: dict[str, _Entry] = field(default_factory=dict)
    contexts: dict[str, _Entry] = field(default_factory=dict)
    current: str | None = None


def _read(paths: list[Path], explicit: bool) -> _Merged:
    merged = _Merged()
    for path in paths:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            hint = "; check the path of --kubeconfig" if explicit else ""
            raise CredentialsError(f"{path}: cannot read: {exc.strerror or exc}{hint}") from None
        except yaml.YAMLError as exc:
            raise CredentialsError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(data, Mapping):
            raise CredentialsError(f"{path}: a kubeconfig must be a mapping")
        current = data.get("current-context")
        if merged.current is None and isinstance(current, str) and current:
            merged.current = current
        for section, key, into in (("clusters", "cluster", merged.clusters), ("users", "user", merged.users),
                                   ("contexts", "context", merged.contexts)):
            items = data.get(section) or []
            if not isinstance(items, list):
                raise CredentialsError(f"{path}: `{section}` must be a list")
            for item in items:
                if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                    raise CredentialsError(f"{path}: every entry of `{section}` needs a `name`")
                body = item.get(key) or {}
                if not isinstance(body, Mapping):
                    raise CredentialsError(
                        f"{path}: {section} entry {item['name']!r}: `{key}` must be a mapping")
                into.setdefault(item["name"], _Entry(body, path))
    return merged


def _file(entry: _Entry, value: Any) -> str:
    """A path of the kubeconfig, relative to the file that names it."""
    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else entry.file.parent / path)


def _pem(value: Any, what: str) -> str:
    try:
        return base64.b64decode(str(value), validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        raise CredentialsError(f"{what} is not base64 of a PEM text") from None


def _from_kubeconfig(paths: list[Path], context: str | None, source: str, *, explicit: bool) -> Credentials:
    merged = _read(paths, explicit)
    where = os.pathsep.join(str(p) for p in paths)
    chosen = context or merged.current
    if not chosen:
        raise CredentialsError(f"{where}: the kubeconfig sets no current-context; pass --context NAME")
    if chosen not in merged.contexts:
        known = ", ".join(sorted(merged.contexts)) or "none"
        raise CredentialsError(f"{where}: context {chosen!r} is not in the kubeconfig (contexts: {known})")
    ctx = merged.contexts[chosen].data
    cluster_name = ctx.get("cluster")
    if not isinstance(cluster_name, str) or cluster_name not in merged.clusters:
        known = ", ".join(sorted(merged.clusters)) or "none"
        raise CredentialsError(f"{where}: context {chosen!r} names cluster {cluster_name!r}, which is not in "
                               f"the kubeconfig (clusters: {known})")
    cluster = merged.clusters[cluster_name]
    server = cluster.data.get("server")
    if not isinstance(server, str) or not server:
        raise CredentialsError(
            f"{where}: context {chosen!r} names cluster {cluster_name!r}, which has no server")
    at = f"{where}: cluster {cluster_name!r}"
    options: dict[str, Any] = {
        "server": server.rstrip("/"), "source": source, "context": chosen,
        "namespace": ctx.get("namespace") or None,
        "insecure": str(cluster.data.get("insecure-skip-tls-verify", False)).lower() == "true",
        "tls_server_name": cluster.data.get("tls-server-name") or None,
        "proxy_url": cluster.data.get("proxy-url") or None,
    }
    if cluster.data.get("certificate-authority-data"):
        options["ca_data"] = _pem(cluster.data["certificate-authority-data"],
                                  f"{at}: certificate-authority-data")
    elif cluster.data.get("certificate-authority"):
        options["ca_file"] = _file(cluster, cluster.data["certificate-authority"])
    user_name = ctx.get("user")
    if user_name:
        if user_name not in merged.users:
            known = ", ".join(sorted(merged.users)) or "none"
            raise CredentialsError(f"{where}: context {chosen!r} names user {user_name!r}, which is not "
                                   f"in the kubeconfig (users: {known})")
        options.update(_user(merged.users[user_name], f"{where}: context {chosen!r}, user {user_name!r}"))
    return Credentials(**options)


def _user(entry: _Entry, at: str) -> dict[str, Any]:
    user = entry.data
    if user.get("auth-provider"):
        provider = (user["auth-provider"] or {}).get("name", "?")
        raise CredentialsError(f"{at}: auth-provider {provider!r} is not supported; use an exec credential "
                               "plugin instead (e.g. kubelogin for oidc, gke-gcloud-auth-plugin, "
                               "kubelogin convert-kubeconfig for azure)")
    out: dict[str, Any] = {"token": user.get("token") or None, "username": user.get("username") or None,
                           "password": user.get("password") or None}
    if user.get("tokenFile"):
        out["token_file"] = _file(entry, user["tokenFile"])
    if user.get("client-certificate-data"):
        out["client_cert_data"] = _pem(user["client-certificate-data"], f"{at}: client-certificate-data")
    elif user.get("client-certificate"):
        out["client_cert_file"] = _file(entry, user["client-certificate"])
    if user.get("client-key-data"):
        out["client_key_data"] = _pem(user["client-key-data"], f"{at}: client-key-data")
    elif user.get("client-key"):
        out["client_key_file"] = _file(entry, user["client-key"])
    has_cert = bool(out.get("client_cert_data") or out.get("client_cert_file"))
    has_key = bool(out.get("client_key_data") or out.get("client_key_file"))
    if has_cert != has_key:
        raise CredentialsError(f"{at}: client-certificate and client-key go together; one is missing")
    spec = user.get("exec")
    if spec:
        out["exec_plugin"] = _exec_plugin(entry, spec, at)
    return out


def _exec_plugin(entry: _Entry, spec: Any, at: str) -> ExecPlugin:
    if not isinstance(spec, Mapping) or not spec.get("command"):
        raise CredentialsError(f"{at}: exec needs a `command`")
    version = spec.get("apiVersion")
    if version not in EXEC_API_VERSIONS:
        shown = "no apiVersion" if not version else f"apiVersion {version!r}"
        raise CredentialsError(f"{at}: exec has {shown}; kubectl and this client need one of "
                               f"{', '.join(EXEC_API_VERSIONS)}")
    command = str(spec["command"])
    if os.sep in command and not Path(command).is_absolute():
        command = _file(entry, command)  # as client-go: relative to the kubeconfig
    env = tuple((str(e.get("name")), str(e.get("value", ""))) for e in spec.get("env") or []
                if isinstance(e, Mapping))
    return ExecPlugin(api_version=str(version), command=command,
                      args=tuple(str(a) for a in spec.get("args") or []), env=env,
                      install_hint=spec.get("installHint") or None, where=at)


# --- authentication at request time ---------------------------------------------------------------


@dataclass(frozen=True)
class ExecResult:
    """What an exec plugin answered: a token and/or a client certificate, and until when."""

    token: str | None
    client_cert_data: str | None
    client_key_data: str | None
    expires: datetime.datetime | None

    def expired(self, now: datetime.datetime | None = None) -> bool:
        if self.expires is None:
            return False
        # A token about to expire is renewed ahead, as client-go does (it must outlive the request).
        margin = datetime.timedelta(seconds=10)
        return (now or datetime.datetime.now(datetime.UTC)) + margin >= self.expires


def _exec_command(plugin: ExecPlugin) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    env.update(dict(plugin.env))
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": plugin.api_version, "kind": "ExecCredential",
                                              "spec": {"interactive": False}})
    return [plugin.command, *plugin.args], env


def _exec_failed(plugin: ExecPlugin, why: str) -> CredentialsError:
    hint = f" ({plugin.install_hint.strip()})" if plugin.install_hint else ""
    return CredentialsError(f"{plugin.where}: the credential plugin (exec) failed: {why}{hint}")


def _exec_result(plugin: ExecPlugin, returncode: int, stdout: bytes, stderr: bytes) -> ExecResult:
    if returncode != 0:
        said = stderr.decode(errors="replace").strip() or stdout.decode(errors="replace").strip()
        raise _exec_failed(plugin, f"{plugin.command} exited with {returncode}: {said[:500]}")
    try:
        answer = json.loads(stdout)
    except ValueError:
        raise _exec_failed(plugin, f"{plugin.command} printed no JSON ExecCredential") from None
    if not isinstance(answer, Mapping) or answer.get("kind") != "ExecCredential":
        raise _exec_failed(plugin, f"{plugin.command} printed no ExecCredential")
    if answer.get("apiVersion") != plugin.api_version:
        raise _exec_failed(plugin, f"it answered apiVersion {answer.get('apiVersion')!r}, "
                           f"the kubeconfig asked for {plugin.api_version!r}")
    status = answer.get("status") or {}
    token = status.get("token") or None
    cert, key = status.get("clientCertificateData") or None, status.get("clientKeyData") or None
    if not token and not (cert and key):
        raise _exec_failed(plugin, "its ExecCredential has neither a token nor a client certificate and key")
    expires = None
    if status.get("expirationTimestamp"):
        try:
            stamp = str(status["expirationTimestamp"]).replace("Z", "+00:00")
            expires = datetime.datetime.fromisoformat(stamp)
        except ValueError:
            raise _exec_failed(plugin, f"bad expirationTimestamp {status['expirationTimestamp']!r}") from None
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=datetime.UTC)
    return ExecResult(token, cert, key, expires)


def run_exec(plugin: ExecPlugin) -> ExecResult:
    """Run the plugin once (blocking). Raises `CredentialsError` saying what failed."""
    argv, env = _exec_command(plugin)
    try:
        done = subprocess.run(argv, env=env, capture_output=True, timeout=EXEC_TIMEOUT, check=False,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise _exec_failed(plugin, f"cannot run {plugin.command}: no such file") from None
    except PermissionError:
        raise _exec_failed(plugin, f"cannot run {plugin.command}: not executable") from None
    except subprocess.TimeoutExpired:
        raise _exec_failed(plugin, f"{plugin.command} did not answer within {EXEC_TIMEOUT:g}s") from None
    return _exec_result(plugin, done.returncode, done.stdout, done.stderr)


async def arun_exec(plugin: ExecPlugin) -> ExecResult:
    """`run_exec` without blocking the event loop."""
    argv, env = _exec_command(plugin)
    try:
        proc = await asyncio.create_subprocess_exec(*argv, env=env, stdin=subprocess.DEVNULL,
                                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise _exec_failed(plugin, f"cannot run {plugin.command}: no such file") from None
    except PermissionError:
        raise _exec_failed(plugin, f"cannot run {plugin.command}: not executable") from None
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), EXEC_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise _exec_failed(plugin, f"{plugin.command} did not answer within {EXEC_TIMEOUT:g}s") from None
    return _exec_result(plugin, proc.returncode or 0, stdout, stderr)


class Authenticator:
    """The Authorization header of each request, renewed as the credentials require.

    A static token is sent as is; a token file is re-read every `TOKEN_FILE_TTL`
    seconds (the kubelet rotates projected service account tokens); an exec
    plugin's token is kept until it expires. `invalidate` (after a 401) forces
    a new read or a new run.
    """

    def __init__(self, credentials: Credentials, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.credentials = credentials
        self._clock = clock
        self._lock = threading.Lock()
        self._file_token: tuple[str, float] | None = None
        self._exec: ExecResult | None = None
        self._alock: asyncio.Lock | None = None

    @property
    def renewable(self) -> bool:
        """Whether a 401 may be cured by reading or running again."""
        return bool(self.credentials.token_file or self.credentials.exec_plugin)

    def invalidate(self) -> None:
        with self._lock:
            self._file_token = None
            self._exec = None

    def _static(self) -> str | None:
        creds = self.credentials
        if creds.token:
            return f"Bearer {creds.token}"
        if creds.username and creds.password:
            pair = f"{creds.username}:{creds.password}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        return None

    def _from_file(self) -> str | None:
        path = self.credentials.token_file
        if not path:
            return None
        with self._lock:
            cached = self._file_token
            if cached is not None and self._clock() - cached[1] < TOKEN_FILE_TTL:
                return cached[0]
            try:
                token = Path(path).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise CredentialsError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
            if not token:
                raise CredentialsError(f"the token file {path} is empty")
            self._file_token = (f"Bearer {token}", self._clock())
            return self._file_token[0]

    def exec_result(self) -> ExecResult | None:
        """The plugin's current answer, running it when there is none or it expired (blocking)."""
        plugin = self.credentials.exec_plugin
        if plugin is None:
            return None
        with self._lock:
            if self._exec is None or self._exec.expired():
                self._exec = run_exec(plugin)
            return self._exec

    async def aexec_result(self) -> ExecResult | None:
        plugin = self.credentials.exec_plugin
        if plugin is None:
            return None
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:  # concurrent requests share one run of the plugin
            current = self._exec
            if current is None or current.expired():
                current = await arun_exec(plugin)
                self._exec = current
            return current

    def header(self) -> str | None:
        """The Authorization header (blocking: may read a file or run a plugin)."""
        creds = self.credentials
        if creds.token or (creds.username and creds.password):
            return self._static()
        if creds.token_file:
            return self._from_file()
        result = self.exec_result()
        return f"Bearer {result.token}" if result is not None and result.token else None

    async def aheader(self) -> str | None:
        creds = self.credentials
        if creds.exec_plugin is not None and not (creds.token or creds.token_file):
            result = await self.aexec_result()
            return f"Bearer {result.token}" if result is not None and result.token else None
        return self.header()


# --- TLS ------------------------------------------------------------------------------------------


def ssl_context(credentials: Credentials, authenticator: Authenticator | None = None) -> ssl.SSLContext:
    """How to verify the server and which client certificate to present. Raises `CredentialsError`.

    An exec plugin that answers with a client certificate is run here (once; a
    rotated plugin certificate needs a new client).
    """
    creds = credentials
    what = creds.describe
    try:
        ctx = ssl.create_default_context(cafile=creds.ca_file, cadata=creds.ca_data)
    except FileNotFoundError:
        raise CredentialsError(f"{what}: certificate-authority {creds.ca_file}: no such file") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise CredentialsError(f"{what}: the certificate authority cannot be used: {exc}") from None
    if creds.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert_data, key_data = creds.client_cert_data, creds.client_key_data
    if creds.exec_plugin is not None and not (creds.client_cert_file or cert_data):
        result = (authenticator or Authenticator(creds)).exec_result()
        if result is not None and result.client_cert_data and result.client_key_data:
            cert_data, key_data = result.client_cert_data, result.client_key_data
    try:
        # *-data stay in memory (`certificates.load_chain`); files are read where they are.
        cert: str | bytes | None = cert_data.encode("ascii") if cert_data else creds.client_cert_file
        key: str | bytes | None = key_data.encode("ascii") if key_data else creds.client_key_file
        if cert and key:
            certificates.load_chain(ctx, cert, key)
    except FileNotFoundError as exc:
        raise CredentialsError(f"{what}: client certificate or key {exc.filename}: no such file") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise CredentialsError(f"{what}: the client certificate cannot be used: {exc}") from None
    return ctx


# --- checks and kopf -------------------------------------------------------------------------------


def check(credentials: Credentials) -> None:
    """Everything that can fail before the first request: TLS material, token file, exec plugin."""
    auth = Authenticator(credentials)
    ssl_context(credentials, auth)
    auth.header()


def login_problem(kubeconfig: str | None, context: str | None = None) -> str | None:
    """Why no cluster can be reached with these flags, or None. For the operators' pre-start
    check: kopf retries a failing login every minute with a traceback and never says how to fix it."""
    try:
        check(resolve(kubeconfig, context))
    except CredentialsError as exc:
        return str(exc)
    return None


def kopf_login(credentials: Credentials) -> Callable[..., Any]:
    """A `kopf.on.login` handler that logs kopf in with `credentials` (kopf's public API).

    kopf calls it at start and again after a 401: a token file is read and an
    exec plugin run anew each time, and an exec token's expiry is passed on so
    kopf logs in again before it lapses.
    """

    def login(**_: Any) -> Any:
        import kopf

        auth = Authenticator(credentials)
        try:
            result = auth.exec_result()
            header = auth.header()
        except CredentialsError as exc:
            raise kopf.LoginError(str(exc)) from None
        scheme, _sep, token = (header or "").partition(" ")
        cert_data, key_data = credentials.client_cert_data, credentials.client_key_data
        if result is not None and result.client_cert_data and not credentials.client_cert_file:
            cert_data, key_data = result.client_cert_data, result.client_key_data
        basic = scheme == "Basic"
        return kopf.ConnectionInfo(
            server=credentials.server,
            ca_path=credentials.ca_file,
            ca_data=credentials.ca_data,
            insecure=credentials.insecure or None,
            username=credentials.username if basic else None,
            password=credentials.password if basic else None,
            scheme=None if basic or not token else scheme,
            token=None if basic or not token else token,
            certificate_path=credentials.client_cert_file,
            certificate_data=cert_data,
            private_key_path=credentials.client_key_file,
            private_key_data=key_data,
            default_namespace=credentials.namespace,
            proxy_url=credentials.proxy_url,
            expiration=result.expires if result is not None else None,
        )

    return login


__all__ = [
    "HELP",
    "SERVICE_ACCOUNT",
    "Authenticator",
    "Credentials",
    "CredentialsError",
    "ExecPlugin",
    "ExecResult",
    "add_arguments",
    "check",
    "in_cluster",
    "kopf_login",
    "login_problem",
    "resolve",
    "ssl_context",
]
