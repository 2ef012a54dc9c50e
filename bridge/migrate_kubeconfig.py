"""Connecting to a cluster the way kubectl does: kubeconfig files, contexts, in-cluster.

Small on purpose (the `kubernetes` client is not required by the migration):
the kubeconfig rules of https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/
-- `$KUBECONFIG` is a list of files merged with the first value winning,
`--kubeconfig` replaces it, `--context` overrides `current-context`, relative
paths are relative to the file that names them -- and the credentials kubectl
supports without plugins: bearer token (`token`, `tokenFile`), client
certificates (path or data), basic auth, and `exec` credential plugins
(client.authentication.k8s.io ExecCredential).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used; the message says which file and what to fix."""


@dataclass
class Connection:
    """What an HTTP client needs to talk to one API server."""

    server: str
    verify: ssl.SSLContext | bool = True
    headers: dict[str, str] = field(default_factory=dict)
    auth: tuple[str, str] | None = None
    namespace: str | None = None
    """The context's default namespace, if it sets one."""
    _tmp: tempfile.TemporaryDirectory[str] | None = None

    def client(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.rstrip("/"),
            verify=self.verify,
            headers=self.headers,
            auth=self.auth,
            timeout=timeout,
        )

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _files(explicit: str | None) -> list[Path]:
    if explicit:
        return [Path(explicit).expanduser()]
    env = os.environ.get("KUBECONFIG", "")
    paths = [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]
    if paths:
        return paths
    default = Path("~/.kube/config").expanduser()
    return [default] if default.exists() else []


def _named(items: Any, what: str, path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for item in items or []:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise KubeconfigError(f"{path}: every entry of `{what}` needs a `name`")
        body = dict(item.get(what[:-1]) or {})
        body["_dir"] = str(path.parent)
        out.setdefault(item["name"], body)
    return out


def _path(value: str, entry: Mapping[str, Any]) -> str:
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else Path(entry["_dir"]) / p)


def _exec_credential(user: Mapping[str, Any]) -> dict[str, Any]:
    spec = user["exec"]
    env = dict(os.environ)
    for item in spec.get("env") or []:
        env[str(item["name"])] = str(item["value"])
    api_version = spec.get("apiVersion", "client.authentication.k8s.io/v1")
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    )
    argv = [str(spec["command"]), *(str(a) for a in spec.get("args") or [])]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        raise KubeconfigError(f"credential plugin {argv[0]!r} could not run: {exc}") from None
    if done.returncode != 0:
        raise KubeconfigError(
            f"credential plugin {argv[0]!r} failed (exit {done.returncode}): {done.stderr.strip()[:300]}"
        )
    try:
        status = json.loads(done.stdout).get("status") or {}
    except ValueError:
        raise KubeconfigError(f"credential plugin {argv[0]!r} did not print an ExecCredential") from None
    return dict(status)


def load(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """The connection of `context` (default: the current one) in the kubeconfig files.

    Without any kubeconfig, inside a pod, the pod's service account is used.
    Raises `KubeconfigError` naming what is missing.
    """
    files = _files(kubeconfig)
    if not files:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and SERVICE_ACCOUNT.is_dir():
            return _in_cluster()
        raise KubeconfigError(
            "no kubeconfig: pass --kubeconfig PATH, set $KUBECONFIG, or create ~/.kube/config"
        )
    current: str | None = None
    contexts: dict[str, dict[str, Any]] = {}
    clusters: dict[str, dict[str, Any]] = {}
    users: dict[str, dict[str, Any]] = {}
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
        for name, body in _named(data.get("contexts"), "contexts", path).items():
            contexts.setdefault(name, body)
        for name, body in _named(data.get("clusters"), "clusters", path).items():
            clusters.setdefault(name, body)
        for name, body in _named(data.get("users"), "users", path).items():
            users.setdefault(name, body)
    chosen = context or current
    if not chosen:
        raise KubeconfigError("the kubeconfig sets no current-context; pass --context NAME")
    if chosen not in contexts:
        known = ", ".join(sorted(contexts)) or "none"
        raise KubeconfigError(f"context {chosen!r} is not in the kubeconfig (contexts: {known})")
    ctx = contexts[chosen]
    cluster = clusters.get(str(ctx.get("cluster")))
    if cluster is None or not cluster.get("server"):
        raise KubeconfigError(
            f"context {chosen!r} names cluster {ctx.get('cluster')!r}, which has no server"
        )
    user = users.get(str(ctx.get("user")), {"_dir": "."})
    return _connection(cluster, user, ctx.get("namespace"))


def _connection(cluster: Mapping[str, Any], user: Mapping[str, Any], namespace: str | None) -> Connection:
    conn = Connection(server=str(cluster["server"]), namespace=namespace)

    def materialize(name: str, b64: str) -> str:
        # ssl loads certificates from files only; they live until `Connection.close`.
        if conn._tmp is None:
            conn._tmp = tempfile.TemporaryDirectory(prefix="podnetwork-kube-")
        target = Path(conn._tmp.name) / name
        target.write_bytes(base64.b64decode(b64))
        target.chmod(0o600)
        return str(target)

    if user.get("exec"):
        status = _exec_credential(user)
        user = dict(user)
        if status.get("token"):
            user["token"] = status["token"]
        # ExecCredential carries PEM text; the kubeconfig's *-data fields are base64 of it.
        for source, target in (
            ("clientCertificateData", "client-certificate-data"),
            ("clientKeyData", "client-key-data"),
        ):
            if status.get(source):
                user[target] = base64.b64encode(str(status[source]).encode()).decode()
    if conn.server.startswith("https://"):
        if cluster.get("insecure-skip-tls-verify"):
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            ca = materialize("ca.crt", cluster["certificate-authority-data"])
            ctx = ssl.create_default_context(cafile=ca)
        elif cluster.get("certificate-authority"):
            ctx = ssl.create_default_context(cafile=_path(cluster["certificate-authority"], cluster))
        else:
            ctx = ssl.create_default_context()
        cert = key = None
        if user.get("client-certificate-data"):
            cert = materialize("client.crt", user["client-certificate-data"])
        elif user.get("client-certificate"):
            cert = _path(user["client-certificate"], user)
        if user.get("client-key-data"):
            key = materialize("client.key", user["client-key-data"])
        elif user.get("client-key"):
            key = _path(user["client-key"], user)
        if cert:
            ctx.load_cert_chain(cert, key)
        conn.verify = ctx
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(_path(user["tokenFile"], user)).read_text(encoding="utf-8").strip()
    if not token:
        token = ((user.get("auth-provider") or {}).get("config") or {}).get("access-token")
    if token:
        conn.headers["Authorization"] = f"Bearer {token}"
    elif user.get("username") and user.get("password"):
        conn.auth = (str(user["username"]), str(user["password"]))
    return conn


def _in_cluster() -> Connection:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    token = (SERVICE_ACCOUNT / "token").read_text(encoding="utf-8").strip()
    namespace_file = SERVICE_ACCOUNT / "namespace"
    return Connection(
        server=server,
        verify=ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt")),
        headers={"Authorization": f"Bearer {token}"},
        namespace=namespace_file.read_text(encoding="utf-8").strip() if namespace_file.exists() else None,
    )


__all__ = ["Connection", "KubeconfigError", "load"]
