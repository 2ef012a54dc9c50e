"""Connecting to a cluster the way kubectl does: kubeconfig files, contexts, in-cluster.

The official `kubernetes` client reads the kubeconfig (clusters, users, tokens,
client certificates, exec credential plugins, service account) into a private
`kubernetes.client.Configuration`; this module turns that into an httpx client
for `bridge.migrate.apply`. Two kubectl rules the client does not follow are
kept here (https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/):
`$KUBECONFIG` is read when called, not when imported, and when it merges files
the first `current-context` wins (the client lets the last one win).
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
NO_KUBECONFIG = "no kubeconfig: pass --kubeconfig PATH, set $KUBECONFIG, or create ~/.kube/config"


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used; the message says which file and what to fix."""


@dataclass
class Connection:
    """What an HTTP client needs to talk to one API server, kept in a kubernetes Configuration."""

    configuration: kubernetes.client.Configuration
    verify: ssl.SSLContext | bool = True
    namespace: str | None = None
    """The context's default namespace, if it sets one."""
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def server(self) -> str:
        return str(self.configuration.host)

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header as of now (an expired exec or service-account token is renewed)."""
        setting = self.configuration.auth_settings().get("BearerToken")
        value = str(setting["value"] or "").strip() if setting else ""
        return {"Authorization": value} if value else {}

    def client(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.server.rstrip("/"), verify=self.verify,
                            auth=_ConfigurationAuth(self), proxy=self.configuration.proxy, timeout=timeout)

    def close(self) -> None:
        """Remove the certificate files written from the kubeconfig's *-data fields."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class _ConfigurationAuth(httpx.Auth):
    """Sets Authorization on every request, so a long run outlives a short-lived token."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(self._connection.headers)
        yield request


def _files(explicit: str | None) -> list[Path]:
    if explicit:
        return [Path(explicit).expanduser()]
    env = os.environ.get("KUBECONFIG", "")
    paths = [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]
    paths = paths or [Path("~/.kube/config").expanduser()]
    # As kubectl: files of $KUBECONFIG that do not exist are skipped.
    return [p for p in paths if p.exists()]


def _contexts(files: list[Path]) -> tuple[dict[str, Mapping[str, Any]], str | None]:
    """Every context by name (the first one wins) and the first current-context."""
    contexts: dict[str, Mapping[str, Any]] = {}
    current: str | None = None
    for path in files:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise KubeconfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise KubeconfigError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(data, Mapping):
            raise KubeconfigError(f"{path}: a kubeconfig must be a mapping")
        current = current or data.get("current-context")
        for item in data.get("contexts") or []:
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise KubeconfigError(f"{path}: every entry of `contexts` needs a `name`")
            contexts.setdefault(item["name"], item.get("context") or {})
    return contexts, current


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _logged_errors() -> Iterator[list[str]]:
    """What the client logs (instead of raising) while loading: a failed exec plugin."""
    handler = _Errors()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.messages
    finally:
        root.removeHandler(handler)


def load(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """The connection of `context` (default: the current one) in the kubeconfig files.

    Without any kubeconfig, inside a pod, the pod's service account is used.
    Raises `KubeconfigError` naming what is missing.
    """
    files = _files(kubeconfig)
    if not files:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return _in_cluster()
        raise KubeconfigError(NO_KUBECONFIG)
    contexts, current = _contexts(files)
    chosen = context or current
    if not chosen:
        raise KubeconfigError("the kubeconfig sets no current-context; pass --context NAME")
    if chosen not in contexts:
        known = ", ".join(sorted(contexts)) or "none"
        raise KubeconfigError(f"context {chosen!r} is not in the kubeconfig (contexts: {known})")
    where = os.pathsep.join(str(p) for p in files)
    conn = Connection(kubernetes.client.Configuration(), namespace=contexts[chosen].get("namespace"))
    # *-data certificates become files (ssl reads only files); they live until `Connection.close`.
    conn._tmp = tempfile.TemporaryDirectory(prefix="podnetwork-kube-")
    try:
        with _logged_errors() as errors:
            kubernetes.config.load_kube_config(
                config_file=where, context=chosen, client_configuration=conn.configuration,
                persist_config=False, temp_file_path=conn._tmp.name)
        if errors:
            failed = "; ".join(errors)
            raise KubeconfigError(f"context {chosen!r}: the credential plugin (exec) failed: {failed}")
        if not conn.configuration.host:
            raise KubeconfigError(
                f"context {chosen!r} names cluster {contexts[chosen].get('cluster')!r}, which has no server")
        conn.verify = _tls(conn.configuration)
    except (kubernetes.config.ConfigException, OSError, ssl.SSLError, KeyError, TypeError) as exc:
        conn.close()
        raise KubeconfigError(f"{where}: context {chosen!r} cannot be used: {exc}") from None
    except KubeconfigError:
        conn.close()
        raise
    return conn


def _tls(cfg: kubernetes.client.Configuration) -> ssl.SSLContext | bool:
    if not str(cfg.host).startswith("https://"):
        return True
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert if cfg.verify_ssl else None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def _in_cluster() -> Connection:
    conn = Connection(configuration=kubernetes.client.Configuration())
    try:
        kubernetes.config.load_incluster_config(client_configuration=conn.configuration)
        conn.verify = _tls(conn.configuration)
    except (kubernetes.config.ConfigException, OSError, ssl.SSLError) as exc:
        raise KubeconfigError(f"{NO_KUBECONFIG} (in-cluster: {exc})") from None
    namespace_file = SERVICE_ACCOUNT / "namespace"
    if namespace_file.exists():
        conn.namespace = namespace_file.read_text(encoding="utf-8").strip()
    return conn


__all__ = ["Connection", "KubeconfigError", "load"]
