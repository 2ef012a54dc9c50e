"""Reading kubeconfig files the way kubectl does (bridge.migrate.kubeconfig)."""

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

from bridge.migrate import kubeconfig as migrate_kubeconfig

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


def test_the_current_context_gives_server_token_and_namespace(tmp_path: Path) -> None:
    path = write(tmp_path / "k", config(user={"token": "abc"}))
    conn = migrate_kubeconfig.load(str(path))
    assert conn.server == "http://127.0.0.1:1"
    assert conn.headers == {"Authorization": "Bearer abc"}
    assert conn.namespace == "team"
    conn.close()


def test_kubeconfig_files_merge_and_the_first_value_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write(tmp_path / "a", {"current-context": "ctx", "users": [{"name": "u", "user": {"token": "first"}}]})
    second = write(tmp_path / "b", {**config(user={"token": "second"}), "current-context": "other"})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    conn = migrate_kubeconfig.load()
    assert conn.headers["Authorization"] == "Bearer first"
    conn.close()


def test_a_token_file_is_read_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    path = write(tmp_path / "k", config(user={"tokenFile": "tok"}))
    conn = migrate_kubeconfig.load(str(path))
    assert conn.headers["Authorization"] == "Bearer from-file"
    conn.close()


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
    conn = migrate_kubeconfig.load(str(write(tmp_path / "k", config(user=user))))
    assert conn.headers["Authorization"] == "Bearer xyz"
    conn.close()


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
    conn = migrate_kubeconfig.load(str(write(tmp_path / "k", config(user=user))))
    with conn.client() as client:
        request = client.build_request("GET", "/api")
        sent = next(client.auth.auth_flow(request))
    assert sent.headers["Authorization"] == "Bearer t2"
    assert conn.headers["Authorization"] == "Bearer t3"
    conn.close()


@pytest.mark.parametrize(
    ("exec_", "message"),
    [
        ({"apiVersion": EXEC_V1, "command": sys.executable, "args": ["-c", "import sys; sys.exit('no login')"]},
         "credential plugin (exec) failed: exec: process returned 1. no login"),
        # kubectl, too, refuses an exec section without apiVersion.
        ({"command": sys.executable}, "credential plugin (exec) failed: exec: malformed request. missing key 'apiVersion'"),
    ],
)
def test_a_failing_exec_plugin_is_reported(tmp_path: Path, exec_: dict[str, Any], message: str) -> None:
    with pytest.raises(migrate_kubeconfig.KubeconfigError, match=re.escape(message)):
        migrate_kubeconfig.load(str(write(tmp_path / "k", config(user={"exec": exec_}))))


def test_insecure_https_skips_verification(tmp_path: Path) -> None:
    path = write(tmp_path / "k", config(server="https://10.0.0.1:6443", **{"insecure-skip-tls-verify": True}))
    conn = migrate_kubeconfig.load(str(path))
    assert isinstance(conn.verify, ssl.SSLContext)
    assert conn.verify.verify_mode == ssl.CERT_NONE
    conn.close()


def test_basic_auth_when_there_is_no_token(tmp_path: Path) -> None:
    conn = migrate_kubeconfig.load(str(write(tmp_path / "k", config(user={"username": "a", "password": "b"}))))
    assert conn.headers == {"Authorization": "Basic " + base64.b64encode(b"a:b").decode()}
    conn.close()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.pop("current-context"), "sets no current-context; pass --context NAME"),
        (lambda c: c["clusters"][0]["cluster"].pop("server"), "names cluster 'c', which has no server"),
        (lambda c: c.update({"contexts": [{"context": {}}]}), "every entry of `contexts` needs a `name`"),
        (lambda c: c.update({"current-context": "nope"}), "context 'nope' is not in the kubeconfig (contexts: ctx)"),
    ],
)
def test_unusable_kubeconfigs_say_what_to_fix(tmp_path: Path, mutate: Any, message: str) -> None:
    data = config()
    mutate(data)
    with pytest.raises(migrate_kubeconfig.KubeconfigError, match=re.escape(message)):
        migrate_kubeconfig.load(str(write(tmp_path / "k", data)))


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(migrate_kubeconfig.KubeconfigError, match="cannot read"):
        migrate_kubeconfig.load(str(tmp_path / "absent"))


def test_no_kubeconfig_at_all_says_how_to_give_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(migrate_kubeconfig.KubeconfigError, match="pass --kubeconfig PATH"):
        migrate_kubeconfig.load()

