"""Kubeconfig files read as kubectl reads them, to the `Credentials` of one context.

Several files are merged as kubectl merges `$KUBECONFIG`: for each cluster, user
and context name the first file that defines it wins, and so does the first
`current-context`. What a kubeconfig may say, and how it is honoured, is in the
docstring of `podnetwork.kube.credentials`. Relative paths are relative to the
file that names them; `auth-provider` is refused with a hint to use an exec plugin.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podnetwork.kube.credentialmodel import EXEC_API_VERSIONS, Credentials, CredentialsError, ExecPlugin


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
    # Imported here: a process with in-cluster credentials (the CNI agent's DaemonSet) never
    # loads the YAML parser (~1 MB of its RSS, docs/benchmarks.md).
    import yaml

    merged = _Merged()
    for path in paths:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            hint = "; check the path of --kubeconfig" if explicit else ""
            raise CredentialsError(f"{path}: cannot read: {exc.strerror or exc}{hint}") from None
        except UnicodeDecodeError as exc:
            raise CredentialsError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
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
                # why: the agent process loads this module (no pydantic there); each field is checked
                # by hand with its own error, and `cluster: null` reads as empty, as kubectl reads it
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


def from_kubeconfig(paths: list[Path], context: str | None, source: str, *, explicit: bool) -> Credentials:
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


__all__ = ["from_kubeconfig"]
