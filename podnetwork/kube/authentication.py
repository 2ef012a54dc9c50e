"""The Authorization header of each request, from credentials that may change while we run.

A static token or basic auth is sent as is; a token file is re-read every
`TOKEN_FILE_TTL` seconds (the kubelet rotates projected service account tokens);
an exec credential plugin (client.authentication.k8s.io) is run, within
`EXEC_TIMEOUT`, and its answer kept until it expires (`Authenticator`).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from podnetwork.kube.credentialmodel import (
    EXEC_TIMEOUT,
    TOKEN_FILE_TTL,
    Credentials,
    CredentialsError,
    ExecPlugin,
)


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
    # why: the agent process loads this module (its node API's credentials) and keeps pydantic out;
    # the ExecCredential's few fields are checked one by one below, each with its own error
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


__all__ = ["Authenticator", "ExecResult", "arun_exec", "run_exec"]
