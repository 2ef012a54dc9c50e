"""The demo's Services stage's own parts: the ClusterIP allocation the store does as the API server
does it, the named TCP answers, and how the stage counts them (the stage itself: tests/e2e)."""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from demo import tcpprobe
from demo.services import SERVICE_CIDR, ServiceIPs, register, service_manifest, tally
from demo.store import CREATE, UPDATE, Invalid, Store


def svc(name: str = "db", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "demo"},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80}], **spec}}


def first(free: list[str]) -> str:
    return free[0]


def test_a_service_gets_a_free_address_of_the_range_s_upper_band_and_its_families() -> None:
    allocator = ServiceIPs(pick=first)
    got = allocator.admit(CREATE, svc(), None, [])["spec"]
    # A /24's static band is its first 16 addresses (KEP-3070): .1 to .15 are never picked at random.
    assert got["clusterIP"] == "198.19.0.16"
    assert got["clusterIPs"] == ["198.19.0.16"] and got["ipFamilies"] == ["IPv4"]
    assert got["type"] == "ClusterIP" and got["ipFamilyPolicy"] == "SingleStack"
    taken = [svc("a", clusterIP="198.19.0.16")]
    assert allocator.admit(CREATE, svc(), None, taken)["spec"]["clusterIP"] == "198.19.0.17"


def test_two_services_created_on_the_store_get_different_addresses_in_the_range() -> None:
    store = Store()
    register(store)
    a = store.create(svc("a"))["spec"]["clusterIP"]
    b = store.create(svc("b"))["spec"]["clusterIP"]
    assert a != b
    assert all(ipaddress.ip_address(ip) in SERVICE_CIDR for ip in (a, b))


def test_a_requested_address_must_be_an_address_in_the_range_and_free() -> None:
    store = Store()
    register(store)
    store.create(svc("a", clusterIP="198.19.0.10"))  # the static band is for requested addresses
    with pytest.raises(Invalid, match=re.escape('198.19.0.10": provided IP is already allocated')):
        store.create(svc("b", clusterIP="198.19.0.10"))
    with pytest.raises(Invalid, match=re.escape("not in the valid range. The range of valid IPs is 198.19.0.0/24")):
        store.create(svc("c", clusterIP="10.96.0.10"))
    with pytest.raises(Invalid, match="must be a valid IP address"):
        store.create(svc("d", clusterIP="nine"))
    assert [s["metadata"]["name"] for s in store.list("v1", "Service")] == ["a"]


def test_headless_and_external_name_services_get_no_address() -> None:
    allocator = ServiceIPs(pick=first)
    headless = allocator.admit(CREATE, svc(clusterIP="None"), None, [])["spec"]
    assert headless["clusterIP"] == "None" and headless["clusterIPs"] == ["None"]
    external = allocator.admit(CREATE, svc(type="ExternalName", externalName="db.example"), None, [])["spec"]
    assert "clusterIP" not in external


def test_the_address_never_changes_and_an_update_that_omits_it_keeps_it() -> None:
    store = Store()
    register(store)
    ip = store.create(svc())["spec"]["clusterIP"]
    with pytest.raises(Invalid, match="field is immutable"):
        store.patch("v1", "Service", "db", {"spec": {"clusterIP": "198.19.0.200"}}, "demo")
    replaced = svc()
    replaced["spec"]["ports"] = [{"port": 81}]
    assert store.update(replaced)["spec"]["clusterIP"] == ip
    assert store.get("v1", "Service", "db", "demo")["spec"]["clusterIPs"] == [ip]


def test_a_full_range_is_refused() -> None:
    allocator = ServiceIPs(ipaddress.IPv4Network("198.19.0.0/30"), pick=first)
    taken = [svc(str(n), clusterIP=ip) for n, ip in enumerate(("198.19.0.1", "198.19.0.2"))]
    with pytest.raises(Invalid, match="range is full"):
        allocator.admit(CREATE, svc(), None, taken)


@given(asked=st.one_of(st.text(max_size=20), st.ip_addresses(v=4).map(str)))
def test_any_requested_address_is_allocated_exactly_when_valid_in_range_and_free(asked: str) -> None:
    allocator = ServiceIPs(pick=first)
    taken = [svc("a", clusterIP="198.19.0.20")]
    try:
        valid = ipaddress.ip_address(asked)
    except ValueError:
        valid = None
    expected = (asked == "None" or (valid is not None and valid in SERVICE_CIDR and str(valid) == asked
                                    and asked not in ("198.19.0.0", "198.19.0.255", "198.19.0.20")))
    if not asked:
        expected = True  # empty: allocated at random
    try:
        got = allocator.admit(CREATE, svc(clusterIP=asked), None, taken)["spec"]["clusterIP"]
    except Invalid:
        assert not expected
    else:
        assert expected and (got == asked or not asked)


def test_the_stage_s_service_is_served_on_blue_and_left_alone_by_kube_proxy() -> None:
    manifest = service_manifest("demo")
    assert manifest["metadata"]["annotations"] == {"multinetwork.x-k8s.io/podnetwork": "blue"}
    assert manifest["metadata"]["labels"] == {
        "service.kubernetes.io/service-proxy-name": "podnetwork.multinetwork.x-k8s.io"}


def test_update_of_a_service_without_an_old_one_is_left_alone() -> None:
    assert ServiceIPs().admit(UPDATE, svc(), None, []) == svc()


# --- the answers ---------------------------------------------------------------------------------


def test_tally_counts_each_backend_and_the_clients_they_saw() -> None:
    names, peers = tally(["echo-1 from 198.18.1.8", "echo-2 from 198.18.1.8", "echo-1 from 198.18.0.10",
                          "- Network is unreachable"])
    assert names == {"echo-1": 2, "echo-2": 1, "(no answer)": 1}
    assert peers == {"198.18.1.8", "198.18.0.10"}


@pytest.fixture
def one_answer_server() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server answering each connection as `tcpprobe serve --name b1` does."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    port = listener.getsockname()[1]
    served: list[bytes] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, peer = listener.accept()
            except TimeoutError:
                continue
            with conn:
                served.append(tcpprobe.answer("b1", peer[0]))
                conn.sendall(served[-1])

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield port, served
    stop.set()
    thread.join(timeout=5)
    listener.close()


def test_connect_many_opens_a_new_connection_each_time_and_reads_each_answer(
        one_answer_server: tuple[int, list[bytes]]) -> None:
    port, served = one_answer_server
    outcomes = tcpprobe.connect_many("127.0.0.1", port, 2.0, 3)
    assert [text for text, _ in outcomes] == ["b1 from 127.0.0.1"] * 3
    assert len(served) == 3


def test_connect_many_says_what_happened_to_a_connection_nobody_answers() -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    [(text, why)] = tcpprobe.connect_many("127.0.0.1", port, 1.0, 1)
    assert text is None and "refused" in why.lower()


def test_an_unnamed_server_still_answers_ok_and_a_bad_count_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert tcpprobe.answer(None, "198.18.1.8") == tcpprobe.ANSWER
    assert tcpprobe.main(["connect", "127.0.0.1", "80", "--count", "0"]) == 2
    assert "--count must be at least 1" in capsys.readouterr().err
