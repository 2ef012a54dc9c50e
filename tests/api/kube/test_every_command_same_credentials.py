"""Every command finds its cluster the same way (docs/architecture.md "Reaching the API").

One HTTPS API stand-in on loopback per command run records the bearer token and
User-Agent of each request. Each credential source a scenario offers names the
same server with a token of its own: the two contexts of a kubeconfig given with
--kubeconfig ("flag-a", "flag-b"), a file of $KUBECONFIG ("env"), ~/.kube/config
("home", "home-b") and the pod's service account ("sa": token, CA and namespace
mounted at the real path, /var/run/secrets/kubernetes.io/serviceaccount, in a
private mount namespace, with KUBERNETES_SERVICE_HOST/PORT pointing at the
server). Every command runs as a process, as a user would run it; the token the
server sees says which source it took, and every source verifies the server
with its CA. The operators are checked twice: kopf's own requests (User-Agent
kopf/...) and the controller's own client's must carry the same token. Every request but
kopf's names the command that sent it in its User-Agent.
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from tests.unit.ports_support import free_port

pytestmark = pytest.mark.timeout(240)

ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
PLURALS = {"pods", "nodes", "namespaces", "events", "podnetworks", "podnetworkattachments",
           "network-attachment-definitions", "networkselectionoptions", "deployments", "statefulsets",
           "daemonsets", "replicasets", "jobs", "cronjobs", "clusterkopfpeerings", "customresourcedefinitions"}


class ApiStandIn:
    """Just enough of an API server over HTTPS for each command to make its first requests:
    discovery, empty lists, watches that stay quiet, 404 for objects, and creates echoed."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.seen: list[dict[str, str]] = []
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> tuple[str, dict[str, list[str]]]:
                url = urlsplit(self.path)
                seen.append({"method": self.command, "path": url.path,
                             "authorization": self.headers.get("Authorization") or "",
                             "agent": self.headers.get("User-Agent") or ""})
                length = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(length) if length else b""
                return url.path, parse_qs(url.query)

            def do_GET(self) -> None:
                path, query = self._record()
                parts = [p for p in path.split("/") if p]
                if query.get("watch", [""])[0] in ("true", "1"):
                    threading.Event().wait(0.3)  # a quiet watch, which the server ends
                    self._empty()
                elif path == "/api":
                    self._answer(200, {"kind": "APIVersions", "versions": ["v1"]})
                elif path == "/apis":
                    self._answer(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
                elif parts and parts[-1] in PLURALS:
                    self._answer(200, {"kind": "List", "apiVersion": "v1", "items": [],
                                       "metadata": {"resourceVersion": "1"}})
                else:
                    self._answer(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                       "reason": "NotFound", "code": 404, "message": f"{path} not found"})

            def _empty(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                self._record()
                self._answer(201, json.loads(self.body or b"{}"))

            def do_PATCH(self) -> None:
                path, _ = self._record()
                self._answer(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "reason": "NotFound", "code": 404, "message": f"{path} not found"})

            def log_message(self, *_: Any) -> None:
                pass

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cert), str(key))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def tokens(self, *, kopf: bool | None = None) -> set[str]:
        """The bearer tokens seen (kopf's requests only, or only the others)."""
        return {r["authorization"].removeprefix("Bearer ") for r in list(self.seen)
                if kopf is None or r["agent"].startswith("kopf/") == kopf}

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed to make test certificates (make setup installs it)"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=apiserver", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(directory / "server.key"), "-out", str(directory / "server.pem")],
                   check=True, capture_output=True)
    return directory


def private_mounts_problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a private mount namespace for the service account files)"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return None if probe.returncode == 0 else f"unshare -m fails: {probe.stderr.decode().strip()}"


@dataclass
class Sources:
    """The credential sources a scenario offers, all naming one server, each with its own token."""

    root: Path
    server: ApiStandIn
    ca: Path
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    account: Path | None = None

    def kubeconfig(self, name: str, contexts: dict[str, str], current: str) -> Path:
        """A kubeconfig with one context per token, all on the server, the CA as data."""
        ca_data = base64.b64encode(self.ca.read_bytes()).decode()
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": current,
            "clusters": [{"name": "api", "cluster": {"server": self.server.url,
                                                     "certificate-authority-data": ca_data}}],
            "users": [{"name": ctx, "user": {"token": token}} for ctx, token in contexts.items()],
            "contexts": [{"name": ctx, "context": {"cluster": "api", "user": ctx}} for ctx in contexts],
        }))
        return path

    def service_account(self) -> None:
        self.account = self.root / "sa"
        self.account.mkdir()
        (self.account / "token").write_text("sa\n")
        (self.account / "namespace").write_text("kube-system")
        shutil.copy(self.ca, self.account / "ca.crt")
        self.env.update({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.server.port)})


# Each scenario offers sources and says which token the commands must use.
def flag_beats_everything(s: Sources) -> str:
    s.argv += ["--kubeconfig", str(s.kubeconfig("flag.yaml", {"a": "flag-a", "b": "flag-b"}, "a"))]
    s.env["KUBECONFIG"] = str(s.kubeconfig("env.yaml", {"e": "env"}, "e"))
    s.kubeconfig("home/.kube/config", {"h": "home"}, "h")
    s.service_account()
    return "flag-a"


def flag_with_context(s: Sources) -> str:
    flag_beats_everything(s)
    s.argv += ["--context", "b"]
    return "flag-b"


def kubeconfig_env_beats_the_service_account(s: Sources) -> str:
    # kubectl's merge: the first file that exists and sets current-context wins.
    first = s.kubeconfig("env1.yaml", {"e": "env", "x": "env-other"}, "e")
    second = s.kubeconfig("env2.yaml", {"x": "second-file"}, "x")
    s.env["KUBECONFIG"] = os.pathsep.join([str(s.root / "absent.yaml"), str(first), str(second)])
    s.kubeconfig("home/.kube/config", {"h": "home"}, "h")
    s.service_account()
    return "env"


def service_account_beats_home(s: Sources) -> str:
    s.kubeconfig("home/.kube/config", {"h": "home"}, "h")
    s.service_account()
    return "sa"


def home_when_nothing_else(s: Sources) -> str:
    s.kubeconfig("home/.kube/config", {"h": "home", "hb": "home-b"}, "h")
    return "home"


def context_skips_the_service_account(s: Sources) -> str:
    s.kubeconfig("home/.kube/config", {"h": "home", "hb": "home-b"}, "h")
    s.service_account()
    s.argv += ["--context", "hb"]
    return "home-b"


SCENARIOS = [flag_beats_everything, flag_with_context, kubeconfig_env_beats_the_service_account,
             service_account_beats_home, home_when_nothing_else, context_skips_the_service_account]


def command_lines(root: Path) -> dict[str, list[str]]:
    """Each command, as short-lived as it can be made, and what it needs besides credentials."""
    agent = root / "agent"
    return {
        "controller": ["controller", "--no-webhook"],
        "bridge": ["bridge"],
        "scheduler-extender": ["scheduler-extender", "--host", "127.0.0.1", "--port", str(free_port())],
        # --install: the agent reads the `default` PodNetwork at once, to write its conflist.
        "cni-agent": ["cni-agent", "--install", "--install-bin-dir", str(agent / "bin"),
                      "--agent-conf-dir", str(agent / "conf"), "--socket", str(agent / "agent.sock"),
                      "--cache-dir", str(agent / "cache"), "--cni-conf-dir", str(agent / "net.d")],
        "migrate": ["migrate", "-n", "default"],
        "export-dra": ["export-dra", "-n", "default"],
        "graph": ["graph"],
        # Its first request (GET /version) shows the credentials; it is stopped then.
        "conformance": ["conformance", "--features", "PodNetworkAPI", "--request-timeout", "5"],
    }


ONE_SHOT = {"migrate", "export-dra", "graph"}


def done(name: str, server: ApiStandIn) -> bool:
    """A serving command has shown which credentials it uses (the controller: kopf's and its own)."""
    if name == "controller":
        return bool(server.tokens(kopf=True)) and any(r["method"] == "POST" for r in list(server.seen))
    if name == "bridge":
        return bool(server.tokens(kopf=True))
    return name not in ONE_SHOT and bool(server.seen)


async def run_command(name: str, argv: list[str], sources: Sources) -> tuple[str, tuple[int | None, str]]:
    """Run one command until `done` or its exit; its exit status (None: killed) and output."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(sources.root / "home"),
           "LANG": "C.UTF-8", **sources.env}
    command = [sys.executable, "-m", "podnetwork", *argv, *sources.argv]
    if sources.account is not None:
        # The service account at its real path, in a mount namespace of this process only.
        run = (f'mount -t tmpfs tmpfs "$(readlink -f /var/run)" && mkdir -p {ACCOUNT_DIR} '
               f'&& cp "$ACCOUNT"/* {ACCOUNT_DIR}/ && exec "$@"')
        command = ["unshare", "-m", "sh", "-c", run, "sh", *command]
        env["ACCOUNT"] = str(sources.account)
    proc = await asyncio.create_subprocess_exec(*command, env=env, cwd=sources.root,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 90
    try:
        while not done(name, sources.server) and proc.returncode is None and loop.time() < deadline:
            await asyncio.sleep(0.1)
    finally:
        killed = proc.returncode is None
        if killed:
            proc.send_signal(signal.SIGKILL)
        out, _ = await proc.communicate()
    return name, (None if killed else proc.returncode, out.decode(errors="replace")[-3000:])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
async def test_every_command_takes_the_same_credentials(scenario: Any, pki: Path, tmp_path: Path) -> None:
    needs_account = scenario in (flag_beats_everything, flag_with_context,
                                 kubeconfig_env_beats_the_service_account, service_account_beats_home,
                                 context_skips_the_service_account)
    if needs_account and (problem := private_mounts_problem()):
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount the service account in CI: {problem}")
        pytest.skip(problem)
    servers: dict[str, ApiStandIn] = {}
    runs = []
    try:
        for name, argv in command_lines(tmp_path / "commands").items():
            server = servers[name] = ApiStandIn(pki / "server.pem", pki / "server.key")
            sources = Sources(tmp_path / name, server, pki / "server.pem")
            sources.root.mkdir(parents=True)
            expected = scenario(sources)
            runs.append(run_command(name, argv, sources))
        outputs = dict(await asyncio.gather(*runs))
    finally:
        for server in servers.values():
            server.stop()
    seen = {name: server.tokens() for name, server in servers.items()}
    assert seen == {name: {expected} for name in servers}, "\n\n".join(
        f"--- {name} (saw {seen[name]}, exit {outputs[name][0]}):\n{outputs[name][1]}" for name in servers)
    for name in ONE_SHOT:  # they finished, with what the server answered
        assert outputs[name][0] == 0, outputs[name][1]
    # The operators' kopf login and their own client took the same credentials.
    assert servers["controller"].tokens(kopf=True) == servers["controller"].tokens(kopf=False) == {expected}
    assert servers["bridge"].tokens(kopf=True) == {expected}
    # Each names itself (the API server takes the field manager from the User-Agent), not as
    # "python-httpx2/...".
    agents = {name: {r["agent"] for r in list(server.seen) if not r["agent"].startswith("kopf/")}
              for name, server in servers.items()}
    assert {name: {agent.split("/")[0] for agent in seen} for name, seen in agents.items()} == {
        name: {f"podnetwork-{name}"} for name in servers}, agents


def test_the_help_of_every_command_points_to_the_one_description() -> None:
    import argparse

    from podnetwork import cli
    from podnetwork.kube import credentials

    helps = {}
    for name, command in cli.program._commands().items():
        parser = argparse.ArgumentParser()
        command.configure(parser)
        flags = {option: action for action in parser._actions for option in action.option_strings}
        if "--kubeconfig" in flags:
            helps[name] = (credentials.HELP in (flags["--kubeconfig"].help or ""), "--context" in flags)
    assert set(helps) == {"controller", "bridge", "scheduler-extender", "cni-agent", "migrate", "export-dra", "dra-driver",
                          "explain", "graph", "conformance"}
    assert all(points and has_context for points, has_context in helps.values()), helps
