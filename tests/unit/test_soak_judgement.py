"""How the churn soak (tests/soak/soak.py) judges what it saw: which probes of the traffic a client
must see answered and by whom, the agent's RSS growth of one process, the parts `--spare` keeps.
The soak itself runs on a kit cluster (tests/real/test_soak.py); these are its pure parts, and the
probe as it connects from a network namespace."""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.soak import soak

NETWORK = "soak-blue-ab12"


def pod(name: str, labels: dict[str, str], ips: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels,
                         "annotations": {soak.POD_IPS: json.dumps(ips or [])}}}


def on_network(ip: str) -> list[dict[str, str]]:
    return [{"ip": "10.251.1.9", "podNetwork": "default", "interfaceName": "eth0"},
            {"ip": "fd00::9", "podNetwork": NETWORK, "interfaceName": "blue0"},
            {"ip": ip, "podNetwork": NETWORK, "interfaceName": "blue0"}]


def test_each_client_probes_each_server_on_the_network_and_the_cluster_ip() -> None:
    running = {
        "s1": pod("s1", {"app": "backend"}, on_network("10.253.7.2")),
        "s2": pod("s2", {"app": "backend"}, on_network("10.253.7.3")),
        "s3": pod("s3", {"app": "backend"}),  # no address on the network reported yet: not a target
        "a": pod("a", {soak.CLIENT_LABEL: soak.ALLOWED}),
        "d": pod("d", {soak.CLIENT_LABEL: soak.DENIED}),
        "x": pod("x", {}),  # neither server nor client
    }
    plan = soak.probe_plan(running, NETWORK, "10.0.0.44")
    assert [(p.client, p.kind, p.host, p.port, p.answerers) for p in plan] == [
        ("a", "policy probe", "10.253.7.2", soak.PORT, ("s1",)),
        ("a", "policy probe", "10.253.7.3", soak.PORT, ("s2",)),
        ("a", "service probe", "10.0.0.44", soak.SERVICE_PORT, ("s1", "s2")),
        ("d", "policy probe", "10.253.7.2", soak.PORT, ("s1",)),
        ("d", "policy probe", "10.253.7.3", soak.PORT, ("s2",)),
        ("d", "service probe", "10.0.0.44", soak.SERVICE_PORT, ("s1", "s2")),
    ]


def test_without_a_server_nothing_is_probed_not_even_the_cluster_ip() -> None:
    running = {"a": pod("a", {soak.CLIENT_LABEL: soak.ALLOWED}), "d": pod("d", {soak.CLIENT_LABEL: soak.DENIED})}
    assert soak.probe_plan(running, NETWORK, "10.0.0.44") == []


def test_an_allowed_client_must_hear_the_server_it_aimed_at_and_a_denied_one_nothing() -> None:
    allowed = soak.Probe("a", soak.ALLOWED, "policy probe", "10.253.7.2", soak.PORT, ("s1",))
    assert not allowed.wrong("s1")
    assert allowed.wrong(None)
    assert allowed.wrong("s2"), "an answer from another pod at that address is not the server's"
    assert "no answer, must be answered by s1" in allowed.said(None)
    denied = soak.Probe("d", soak.DENIED, "service probe", "10.0.0.44", soak.SERVICE_PORT, ("s1", "s2"))
    assert not denied.wrong(None)
    assert denied.wrong("s2")
    assert denied.said("s2") == (f"d ({soak.CLIENT_LABEL}=denied) to 10.0.0.44:80: answered 's2', "
                                 "must not be answered")


def sample(label: str, pid: int, rss: int | None, pods: int = 0) -> dict[str, Any]:
    return {"label": label, "pods": pods, "at": 0.0, "pid": pid, "rss_bytes": rss}


def test_rss_growth_is_of_the_agent_process_that_gave_the_pod_100_sample() -> None:
    samples = [sample("pod 100", 7, 60_000_000, 100), sample("count at 90s", 7, 70_000_000),
               sample("pod 200", 7, 61_000_000, 200), sample("pod 300", 8, 50_000_000, 300),
               sample("pod 400", 7, 62_500_000, 400)]
    # pod 300 is another process's (the agent was killed and started again): not compared
    assert soak.rss_growth(samples) == {"pid": 7, "from": "pod 100", "to": "pod 400", "from_bytes": 60_000_000,
                                        "to_bytes": 62_500_000, "bytes": 2_500_000}
    assert soak.rss_growth([sample("count final", 7, 1)]) is None


def test_spare_keeps_a_part_from_the_kills_and_refuses_to_spare_them_all() -> None:
    assert soak.parse(["--spare", "agent", "--spare", "kubelet"]).spare == ["agent", "kubelet"]
    with pytest.raises(SystemExit):
        soak.parse([arg for target in soak.TARGETS for arg in ("--spare", target)])
    with pytest.raises(SystemExit):
        soak.parse(["--spare", "etcd"])


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    """A TCP server on loopback that answers each connection with one line, `s1`."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"s1\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter"), reason="nsenter into a netns needs root")
def test_the_probe_connects_from_the_network_namespace_of_a_pid(server: tuple[str, int]) -> None:
    host, port = server
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]  # bound, not listening: refused
    probes = [soak.Probe("a", soak.ALLOWED, "policy probe", host, port, ("s1",)),
              soak.Probe("d", soak.DENIED, "policy probe", host, closed, ("s1",))]
    # this process's own network namespace, entered as the soak enters a client pod's
    assert soak.probe_from(os.getpid(), probes) == ["s1", None]
    assert soak.probe_from(2**22 + 1, probes) is None  # no such process: no namespace to probe from


def test_the_kills_are_due_one_in_each_slot_of_the_run_half_a_slot_apart_at_least() -> None:
    due = soak.kill_schedule(1800, 60, random.Random(3))
    assert len(due) == 60
    assert all(30 * i + 7.5 <= at <= 30 * i + 22.5 for i, at in enumerate(due))
    assert min(b - a for a, b in itertools.pairwise(due)) >= 15
    assert soak.kill_schedule(100, 0, random.Random(3)) == []
