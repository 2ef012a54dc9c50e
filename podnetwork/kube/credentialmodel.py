"""Credentials as plain data: one API server and how to authenticate to it.

Made by `podnetwork.kube.credentials.resolve` (from a kubeconfig, `podnetwork.kube.kubeconfig`,
or the pod's service account) and used by `authentication` (the Authorization header) and
`clienttls` (the TLS context). Nothing here imports lightkube or kopf.
"""

from __future__ import annotations

from dataclasses import dataclass

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


__all__ = [
    "EXEC_API_VERSIONS",
    "EXEC_TIMEOUT",
    "TOKEN_FILE_TTL",
    "Credentials",
    "CredentialsError",
    "ExecPlugin",
]
