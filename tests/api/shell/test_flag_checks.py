"""`podnetwork controller` and `podnetwork bridge --webhook` as processes: the same --webhook-* flags
are refused the same way, with exit status 2, before either touches the cluster."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import kmock
import pytest

from podnetwork.kube import certificates
from tests.api.kube_emulator import Emulator, write_kubeconfig
from tests.unit.ports_support import free_port

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(120)]

PODNETWORK = [sys.executable, "-m", "podnetwork"]
#: What makes each command serve its webhooks: the controller does by default.
SERVING = {"controller": [], "bridge": ["--webhook"]}


async def run(command: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *PODNETWORK, command, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": ""})
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def refusal(command: str, err: str) -> str:
    """The last line of stderr, without the command's name."""
    line = err.strip().splitlines()[-1]
    prefix = f"podnetwork {command}: "
    assert line.startswith(prefix), err
    return line.removeprefix(prefix).removeprefix("error: ")  # argparse says "error: " first


def mismatched_pair(tmp: Path) -> list[str]:
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    a = certificates.self_signed(tmp / "a", "127.0.0.1")
    b = certificates.self_signed(tmp / "b", "127.0.0.1")
    return ["--webhook-cert", str(a.cert), "--webhook-key", str(b.key)]


# Each case: the flags (files in a temp dir), and what the refusal says. The port is given
# (the commands' defaults differ), before the flags, which may give another.
CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("a certificate without its key", lambda tmp: ["--webhook-cert", str(tmp / "c.pem")], "go together"),
    ("files that do not exist",
     lambda tmp: ["--webhook-cert", str(tmp / "none.pem"), "--webhook-key", str(tmp / "none.key")],
     "is not a readable file"),
    ("registering the wildcard listen address", lambda _: ["--manage-webhooks"], "the API server cannot call"),
    ("a URL the API server does not call",
     lambda _: ["--manage-webhooks", "--webhook-url", "http://webhook.example:9443"],
     "is not a URL the API server calls"),
    ("a port out of range", lambda _: ["--webhook-port", "70000"], "invalid port '70000'"),
    ("a key that is not the certificate's",
     lambda tmp: [*mismatched_pair(tmp), "--webhook-host", "127.0.0.1"],
     "are not a PEM certificate and its private key"),
    # The Service-backed registration of deploy/ (docs/deploy.md "Webhook certificates").
    ("a Service without the Secret its replicas share",
     lambda _: ["--manage-webhooks", "--webhook-service", "multinetwork-system/podnetwork-webhook"],
     "--webhook-service needs --webhook-secret"),
    ("a Secret without the Service it names",
     lambda _: ["--manage-webhooks", "--webhook-secret", "podnetwork-webhook-tls"],
     "--webhook-secret needs --manage-webhooks and --webhook-service"),
    ("a Service and a URL",
     lambda _: ["--manage-webhooks", "--webhook-service", "ns/svc", "--webhook-secret", "tls",
                "--webhook-url", "https://webhook.example:9443"], "give one"),
    ("a Service not registered", lambda _: ["--webhook-service", "ns/svc", "--webhook-secret", "tls"],
     "--webhook-service only applies to the registration of --manage-webhooks"),
    ("a Secret and certificate files",
     lambda tmp: ["--manage-webhooks", "--webhook-service", "ns/svc", "--webhook-secret", "tls",
                  *mismatched_pair(tmp)], "two certificates: give one"),
    ("an external Secret without its name", lambda _: ["--webhook-secret-external"],
     "add --webhook-secret NAME"),
    ("a Service that is not NAMESPACE/NAME", lambda _: ["--webhook-service", "podnetwork-webhook"],
     "invalid Service 'podnetwork-webhook': expected NAMESPACE/NAME"),
    ("an owner without registration", lambda _: ["--webhook-owner", "podnetwork-controller"],
     "--webhook-owner only applies to the registration of --manage-webhooks"),
    ("a check interval of zero", lambda _: ["--webhook-check-interval", "0"], "invalid interval '0'"),
]


@pytest.mark.parametrize(("flags", "expected"), [pytest.param(f, e, id=i) for i, f, e in CASES])
async def test_both_commands_refuse_the_same_webhook_flags_with_the_same_words(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, flags: Callable[[Path], list[str]], expected: str
) -> None:
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    args = ["--kubeconfig", str(config), "--webhook-port", str(free_port()), *flags(tmp_path)]
    (code_c, err_c), (code_b, err_b) = await asyncio.gather(
        run("controller", *SERVING["controller"], *args), run("bridge", *SERVING["bridge"], *args))
    assert (code_c, code_b) == (2, 2), (err_c, err_b)
    assert refusal("controller", err_c) == refusal("bridge", err_b)
    assert expected in refusal("controller", err_c)
    assert "Traceback" not in err_c + err_b
    assert list(kmock) == []  # neither command started: not one request to the cluster


async def test_both_commands_refuse_a_webhook_port_in_use_before_starting(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["--kubeconfig", str(config), "--webhook-host", "127.0.0.1", "--webhook-port", str(port)]
        (code_c, err_c), (code_b, err_b) = await asyncio.gather(
            run("controller", *args), run("bridge", "--webhook", *args))
    assert (code_c, code_b) == (2, 2), (err_c, err_b)
    assert refusal("controller", err_c) == refusal("bridge", err_b)
    assert refusal("controller", err_c).startswith(f"cannot listen on 127.0.0.1:{port}: ")
    assert "--webhook-port" in refusal("controller", err_c)
    assert list(kmock) == []


async def test_webhook_flags_without_webhooks_say_how_to_serve_them_in_each_command() -> None:
    (code_c, err_c), (code_b, err_b) = await asyncio.gather(
        run("controller", "--no-webhook", "--manage-webhooks"), run("bridge", "--manage-webhooks"))
    assert (code_c, code_b) == (2, 2)
    assert refusal("controller", err_c) == "--manage-webhooks only applies to webhooks served: drop --no-webhook"
    assert refusal("bridge", err_b) == "--manage-webhooks only applies to webhooks served: add --webhook"


async def test_both_commands_refuse_a_priority_without_peering_with_the_same_words(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    config = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))
    (code_c, err_c), (code_b, err_b) = await asyncio.gather(
        run("controller", "--no-webhook", "--kubeconfig", str(config), "--priority", "start-time"),
        run("bridge", "--kubeconfig", str(config), "--priority", "start-time"))
    assert (code_c, code_b) == (2, 2), (err_c, err_b)
    assert refusal("controller", err_c) == refusal("bridge", err_b)
    assert refusal("bridge", err_b).startswith("--priority only matters among peers: add --peering NAME")
    assert list(kmock) == []
