"""Reading kubeconfig files the way kubectl does (podnetwork.kube.credentials, which migrate and
every other command use), and authenticating as they say."""

from __future__ import annotations

import base64
import os
import re
import ssl
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from podnetwork.kube import credentials

EXEC_V1 = "client.authentication.k8s.io/v1"


def write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def config(server: str = "http://127.0.0.1:1", user: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "clusters": [{"name": "c", "cluster": {"server": server, **extra}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
        "current-context": "ctx",
    }


def header(creds: credentials.Credentials) -> str | None:
    return credentials.Authenticator(creds).header()


def test_the_current_context_gives_server_token_and_namespace(tmp_path: Path) -> None:
    path = write(tmp_path / "k", config(user={"token": "abc"}))
    creds = credentials.resolve(str(path))
    assert creds.server == "http://127.0.0.1:1"
    assert header(creds) == "Bearer abc"
    assert creds.namespace == "team"
    assert creds.context == "ctx"


def test_kubeconfig_files_merge_and_the_first_value_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write(tmp_path / "a", {"current-context": "ctx", "users": [{"name": "u", "user": {"token": "first"}}]})
    second = write(tmp_path / "b", {**config(user={"token": "second"}), "current-context": "other"})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(tmp_path / "absent"), str(second)]))
    creds = credentials.resolve()
    assert header(creds) == "Bearer first"
    assert creds.context == "ctx" and creds.server == "http://127.0.0.1:1"


def test_a_token_file_is_read_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    path = write(tmp_path / "k", config(user={"tokenFile": "tok"}))
    assert header(credentials.resolve(str(path))) == "Bearer from-file"


def test_an_exec_credential_plugin_supplies_the_token(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os\n"
        "assert json.loads(os.environ['KUBERNETES_EXEC_INFO'])['kind'] == 'ExecCredential'\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        "                  'status': {'token': os.environ['PLUGIN_TOKEN']}}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    user = {"exec": {"apiVersion": EXEC_V1, "command": sys.executable, "args": [str(plugin)],
                     "env": [{"name": "PLUGIN_TOKEN", "value": "xyz"}]}}
    assert header(credentials.resolve(str(write(tmp_path / "k", config(user=user))))) == "Bearer xyz"


def test_an_expired_exec_token_is_renewed_for_the_next_request(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib\n"
        f"count = pathlib.Path({str(tmp_path / 'count')!r})\n"
        "n = int(count.read_text()) + 1 if count.exists() else 1\n"
        "count.write_text(str(n))\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        "                  'status': {'token': f't{n}', 'expirationTimestamp': '2000-01-01T00:00:00Z'}}))\n"
    )
    user = {"exec": {"apiVersion": EXEC_V1, "command": sys.executable, "args": [str(plugin)]}}
    auth = credentials.Authenticator(credentials.resolve(str(write(tmp_path / "k", config(user=user)))))
    assert auth.header() == "Bearer t1"
    assert auth.header() == "Bearer t2"  # expired: the plugin runs again for the next request
    assert (tmp_path / "count").read_text() == "2"


def test_a_token_that_has_not_expired_is_reused(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib\n"
        f"count = pathlib.Path({str(tmp_path / 'count')!r})\n"
        "count.write_text(str(int(count.read_text()) + 1 if count.exists() else 1))\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        "                  'status': {'token': 'fresh', 'expirationTimestamp': '2999-01-01T00:00:00Z'}}))\n"
    )
    user = {"exec": {"apiVersion": EXEC_V1, "command": sys.executable, "args": [str(plugin)]}}
    auth = credentials.Authenticator(credentials.resolve(str(write(tmp_path / "k", config(user=user)))))
    assert [auth.header(), auth.header()] == ["Bearer fresh", "Bearer fresh"]
    assert (tmp_path / "count").read_text() == "1"
    auth.invalidate()  # as after a 401
    assert auth.header() == "Bearer fresh" and (tmp_path / "count").read_text() == "2"


@pytest.mark.parametrize(
    ("exec_", "message"),
    [
        ({"apiVersion": EXEC_V1, "command": sys.executable, "args": ["-c", "import sys; sys.exit('no login')"]},
         f"context 'ctx', user 'u': the credential plugin (exec) failed: {sys.executable} exited with 1: no login"),
        ({"apiVersion": EXEC_V1, "command": "/nonexistent/plugin", "installHint": "install it from example.org"},
         "the credential plugin (exec) failed: cannot run /nonexistent/plugin: no such file "
         "(install it from example.org)"),
        ({"apiVersion": EXEC_V1, "command": sys.executable, "args": ["-c", "print('{}')"]},
         "printed no ExecCredential"),
        # kubectl, too, refuses an exec section without apiVersion.
        ({"command": sys.executable}, "context 'ctx', user 'u': exec has no apiVersion"),
    ],
)
def test_a_failing_exec_plugin_is_reported(tmp_path: Path, exec_: dict[str, Any], message: str) -> None:
    with pytest.raises(credentials.CredentialsError, match=re.escape(message)):
        credentials.check(credentials.resolve(str(write(tmp_path / "k", config(user={"exec": exec_})))))


def test_insecure_https_skips_verification(tmp_path: Path) -> None:
    path = write(tmp_path / "k", config(server="https://10.0.0.1:6443", **{"insecure-skip-tls-verify": True}))
    ctx = credentials.ssl_context(credentials.resolve(str(path)))
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


def test_basic_auth_when_there_is_no_token(tmp_path: Path) -> None:
    creds = credentials.resolve(str(write(tmp_path / "k", config(user={"username": "a", "password": "b"}))))
    assert header(creds) == "Basic " + base64.b64encode(b"a:b").decode()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.pop("current-context"), "sets no current-context; pass --context NAME"),
        (lambda c: c["clusters"][0]["cluster"].pop("server"), "names cluster 'c', which has no server"),
        (lambda c: c.update({"contexts": [{"context": {}}]}), "every entry of `contexts` needs a `name`"),
        (lambda c: c.update({"current-context": "nope"}), "context 'nope' is not in the kubeconfig (contexts: ctx)"),
        (lambda c: c["contexts"][0]["context"].update({"cluster": "d"}),
         "context 'ctx' names cluster 'd', which is not in the kubeconfig (clusters: c)"),
        (lambda c: c["contexts"][0]["context"].update({"user": "v"}),
         "context 'ctx' names user 'v', which is not in the kubeconfig (users: u)"),
        (lambda c: c["users"][0]["user"].update({"auth-provider": {"name": "oidc"}}),
         "auth-provider 'oidc' is not supported; use an exec credential plugin"),
        (lambda c: c["clusters"][0]["cluster"].update({"certificate-authority-data": "%%%"}),
         "cluster 'c': certificate-authority-data is not base64"),
        (lambda c: c["users"][0]["user"].update({"client-certificate": "cert.pem"}),
         "client-certificate and client-key go together"),
    ],
)
def test_unusable_kubeconfigs_say_what_to_fix(tmp_path: Path, mutate: Any, message: str) -> None:
    data = config()
    mutate(data)
    with pytest.raises(credentials.CredentialsError, match=re.escape(message)):
        credentials.resolve(str(write(tmp_path / "k", data)))


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(credentials.CredentialsError, match=re.escape(f"{tmp_path / 'absent'}: cannot read")):
        credentials.resolve(str(tmp_path / "absent"))


def test_no_kubeconfig_at_all_says_how_to_give_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(credentials.CredentialsError, match="pass --kubeconfig PATH") as caught:
        credentials.resolve()
    assert "in-cluster: not in a pod" in str(caught.value)



def service_account(directory: Path, *, namespace: str = "team") -> Path:
    directory.mkdir()
    (directory / "token").write_text("sa-token\n")
    (directory / "namespace").write_text(namespace)
    return directory


POD_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_in_a_pod_the_service_account_is_used(tmp_path: Path) -> None:
    account = service_account(tmp_path / "sa")
    creds = credentials.resolve(environ={**POD_ENV, "HOME": str(tmp_path)}, service_account=account)
    assert creds.server == "https://10.96.0.1:443" and creds.source == "in-cluster service account"
    assert creds.namespace == "team" and creds.ca_file is None  # no ca.crt: the system's CAs
    assert header(creds) == "Bearer sa-token"
    (account / "ca.crt").write_text("")
    v6 = credentials.resolve(environ={**POD_ENV, "KUBERNETES_SERVICE_HOST": "fd00::1"}, service_account=account)
    assert v6.server == "https://[fd00::1]:443" and v6.ca_file == str(account / "ca.crt")


def test_a_rotated_service_account_token_is_read_again(tmp_path: Path) -> None:
    account = service_account(tmp_path / "sa")
    now = [0.0]
    creds = credentials.resolve(environ=POD_ENV, service_account=account)
    auth = credentials.Authenticator(creds, clock=lambda: now[0])
    assert auth.header() == "Bearer sa-token"
    (account / "token").write_text("rotated")
    assert auth.header() == "Bearer sa-token"  # read at most every TOKEN_FILE_TTL seconds
    now[0] = credentials.TOKEN_FILE_TTL
    assert auth.header() == "Bearer rotated"


def test_a_context_skips_the_service_account_for_the_home_kubeconfig(tmp_path: Path) -> None:
    account = service_account(tmp_path / "sa")
    (tmp_path / ".kube").mkdir()
    data = config(user={"token": "home"})
    data["contexts"].append({"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "elsewhere"}})
    write(tmp_path / ".kube" / "config", data)
    env = {**POD_ENV, "HOME": str(tmp_path)}
    assert credentials.resolve(environ=env, service_account=account).source == "in-cluster service account"
    creds = credentials.resolve(context="other", environ=env, service_account=account)
    assert (creds.context, creds.namespace, header(creds)) == ("other", "elsewhere", "Bearer home")


def test_kubeconfig_env_naming_only_absent_files_says_so(tmp_path: Path) -> None:
    with pytest.raises(credentials.CredentialsError, match=re.escape("none of its files exists")):
        credentials.resolve(environ={"KUBECONFIG": str(tmp_path / "a"), **POD_ENV},
                            service_account=service_account(tmp_path / "sa"))
