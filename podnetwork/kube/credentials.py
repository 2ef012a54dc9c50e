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

This module is what callers import: the precedence (`resolve`), the checks and
kopf's login are here, and it re-exports its parts: the data
(`podnetwork.kube.credentialmodel`), the kubeconfig reader (`kubeconfig`), the
Authorization header (`authentication`) and the TLS context (`clienttls`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from podnetwork.kube.authentication import Authenticator, ExecResult, arun_exec, run_exec
from podnetwork.kube.clienttls import ssl_context
from podnetwork.kube.credentialmodel import (
    EXEC_API_VERSIONS,
    EXEC_TIMEOUT,
    TOKEN_FILE_TTL,
    Credentials,
    CredentialsError,
    ExecPlugin,
)
from podnetwork.kube.kubeconfig import from_kubeconfig

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: What each command's --help says about its credentials.
HELP = 'credentials: see docs/architecture.md "Reaching the API"'
NO_CLUSTER = ("no kubeconfig: pass --kubeconfig PATH, set $KUBECONFIG, or create ~/.kube/config "
              "(or run in a pod with a service account)")


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
        return from_kubeconfig([Path(kubeconfig).expanduser()], context, f"--kubeconfig {kubeconfig}",
                                explicit=True)
    listed = env.get("KUBECONFIG", "")
    if listed.strip():
        paths = [Path(p).expanduser() for p in listed.split(os.pathsep) if p.strip()]
        existing = [p for p in paths if p.exists()]  # as kubectl: absent files are skipped
        if not existing:
            raise CredentialsError(f"$KUBECONFIG={listed}: none of its files exists; fix $KUBECONFIG or "
                                   "unset it (then the in-cluster account or ~/.kube/config is used)")
        return from_kubeconfig(existing, context, f"$KUBECONFIG {listed}", explicit=False)
    in_cluster_problem = "a --context was given" if context else None
    if not context:
        try:
            return in_cluster(env, service_account or SERVICE_ACCOUNT)
        except CredentialsError as exc:
            in_cluster_problem = str(exc)
    home = Path(env.get("HOME") or str(Path.home()))
    default = home / ".kube" / "config"
    if default.exists():
        return from_kubeconfig([default], context, f"~/.kube/config ({default})", explicit=True)
    raise CredentialsError(f"{NO_CLUSTER}; in-cluster: {in_cluster_problem}")


def _service_problem(host: str | None, port: str | None) -> str:
    """What is missing of the two variables the kubelet sets in every pod's containers."""
    if not host and not port:
        return "not in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set)"
    given, missing = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") if host else (
        "KUBERNETES_SERVICE_PORT", "KUBERNETES_SERVICE_HOST")
    state = "is empty" if (port if host else host) is not None else "is not"
    return f"{given} is set but {missing} {state}; a pod has both: set {missing}, or unset {given}"


def in_cluster(environ: Mapping[str, str], account: Path) -> Credentials:
    """The pod's service account, as client-go's InClusterConfig reads it."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise CredentialsError(_service_problem(host, port))
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
    "EXEC_API_VERSIONS",
    "EXEC_TIMEOUT",
    "HELP",
    "NO_CLUSTER",
    "SERVICE_ACCOUNT",
    "TOKEN_FILE_TTL",
    "Authenticator",
    "Credentials",
    "CredentialsError",
    "ExecPlugin",
    "ExecResult",
    "add_arguments",
    "arun_exec",
    "check",
    "in_cluster",
    "kopf_login",
    "login_problem",
    "resolve",
    "run_exec",
    "ssl_context",
]
