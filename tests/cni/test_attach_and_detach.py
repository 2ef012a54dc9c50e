"""The CNI agent with real plugins in real network namespaces, driven through the shim.

Each test executes the installed `multinetwork` shim exactly as a container runtime
does (CNI environment + configuration on stdin), the shim talks to the agent over
its unix socket, and the agent runs the real `bridge` and `host-local` plugins.
Afterwards nothing may be left: no interface in the pod netns, no veth on the
bridges, no host-local reservation, no cache record.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.cni import shim
from tests.cni.agent_support import NOTHING_LEFT, World, bridge_podnetwork, run, spawn_gated_agent

pytestmark = pytest.mark.cni

NPWG_NETWORKS = "k8s.v1.cni.cncf.io/networks"
NPWG_STATUS = "k8s.v1.cni.cncf.io/network-status"
KEP_NETWORKS = "multinetwork.x-k8s.io/networks"


@pytest.fixture
async def world(cni_host: list[Path]) -> AsyncIterator[World]:
    w = World(cni_host)
    try:
        await w.start_agent()
        yield w
    finally:
        await w.cleanup()


def status_of(world: World, pod: str) -> list[dict]:
    annotations = world.objects.get("Pod", "default", pod)["metadata"]["annotations"]
    return json.loads(annotations[NPWG_STATUS])


@pytest.mark.parametrize("secondaries", [0, 1, 3])
async def test_add_check_del_through_the_shim_attach_the_default_network_and_each_selected_one(
    world: World, secondaries: int
) -> None:
    annotations: dict[str, str] = {}
    if secondaries == 1:
        world.nad("blue", world.network("blue", 1))
        annotations[NPWG_NETWORKS] = "blue"
    if secondaries == 3:
        # The pod's spec-style networks, through the bridge's translation; red takes the default route.
        for index, color in enumerate(("red", "green", "blue"), start=1):
            world.nad(color, world.network(color, index))
            bridge_podnetwork(world, color, color)
        annotations[KEP_NETWORKS] = json.dumps(
            [
                {"podNetworkName": "default"},
                {"podNetworkName": "red", "isDefaultGW4": True},
                {"podNetworkName": "green", "interfaceName": "data0"},
                {"podNetworkName": "blue"},
            ]
        )
    world.pod("web", annotations)
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr1", netns, "web")
    assert added.returncode == 0, added.stdout
    result = added.json
    sandbox = [i for i in result["interfaces"] if i.get("sandbox")]
    assert [i["name"] for i in sandbox] == ["eth0"], "the runtime gets the default network's result"

    expected_ifs = {0: ["eth0"], 1: ["eth0", "net1"], 3: ["data0", "eth0", "net1", "net2"]}[secondaries]
    assert world.interfaces(netns) == expected_ifs
    status = status_of(world, "web")
    assert [s["default"] for s in status] == [True] + [False] * secondaries
    assert status[0]["name"] == "kubenet" and status[0]["interface"] == "eth0"
    assert status[0]["ips"] == world.addresses(netns, "eth0")
    for entry in status[1:]:
        assert entry["ips"] == world.addresses(netns, entry["interface"])
    if secondaries == 3:
        assert [(s["name"], s["interface"]) for s in status[1:]] == [
            ("default/red", "net1"),
            ("default/green", "data0"),
            ("default/blue", "net2"),
        ]
        assert world.default_route_dev(netns) == ["net1"]
        assert status[1]["default-route"] == [world.subnet(1).replace(".0/24", ".1")]

    checked = await world.cni("CHECK", "ctr1", netns, "web")
    assert checked.returncode == 0, checked.stdout

    again = await world.cni("ADD", "ctr1", netns, "web")
    assert again.returncode == 0 and again.json == result, "ADD of an attached container returns the cached result"

    deleted = await world.cni("DEL", "ctr1", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    assert deleted.stdout == ""
    assert world.leftovers() == NOTHING_LEFT
    twice = await world.cni("DEL", "ctr1", netns, "web")
    assert twice.returncode == 0, "DEL of a torn-down container succeeds"


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0.0"])
async def test_every_supported_cni_version_attaches_reports_and_detaches(cni_host: list[Path], version: str) -> None:
    world = World(cni_host, cni_version=version)
    try:
        await world.start_agent()
        world.nad("blue", world.network("blue", 1))
        world.pod("web", {NPWG_NETWORKS: "blue"})
        netns = world.make_netns()

        added = await world.cni("ADD", "ctr-v", netns, "web")
        assert added.returncode == 0, added.stdout
        assert added.json["cniVersion"] == version
        status = status_of(world, "web")
        assert [(s["interface"], s["ips"]) for s in status] == [
            ("eth0", world.addresses(netns, "eth0")),
            ("net1", world.addresses(netns, "net1")),
        ]
        checked = await world.cni("CHECK", "ctr-v", netns, "web")
        if version == "0.3.1":
            assert checked.returncode == 1 and checked.json["code"] == 1, "0.3.1 has no CHECK"
        else:
            assert checked.returncode == 0, checked.stdout
        assert (await world.cni("DEL", "ctr-v", netns, "web")).returncode == 0
        assert world.leftovers() == NOTHING_LEFT
    finally:
        await world.cleanup()


async def test_check_reports_an_interface_that_vanished_and_del_still_cleans_up(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("web", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    assert (await world.cni("ADD", "ctr8", netns, "web")).returncode == 0
    run("ip", "-n", Path(netns).name, "link", "del", "net1")

    checked = await world.cni("CHECK", "ctr8", netns, "web")
    assert checked.returncode == 1 and "plugin bridge" in checked.json["msg"], checked.json
    assert (await world.cni("DEL", "ctr8", netns, "web")).returncode == 0
    assert world.leftovers() == NOTHING_LEFT


async def test_the_same_nad_selected_twice_gives_two_attachments_with_their_own_interface_and_ip(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("twice", {NPWG_NETWORKS: "blue,default/blue"})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr2", netns, "twice")
    assert added.returncode == 0, added.stdout
    assert world.interfaces(netns) == ["eth0", "net1", "net2"]
    net1, net2 = world.addresses(netns, "net1"), world.addresses(netns, "net2")
    assert len(net1) == len(net2) == 1 and net1 != net2
    status = status_of(world, "twice")
    assert [(s["name"], s["interface"]) for s in status] == [
        ("kubenet", "eth0"),
        ("default/blue", "net1"),
        ("default/blue", "net2"),
    ]

    assert (await world.cni("DEL", "ctr2", netns, "twice")).returncode == 0
    assert world.leftovers() == NOTHING_LEFT


async def test_a_failing_second_delegate_rolls_back_the_first_and_leaves_nothing(world: World) -> None:
    # host-local refuses a rangeStart outside the subnet, after the bridge plugin made its veth.
    broken = world.network("broken", 1)
    broken["plugins"][0]["ipam"]["ranges"][0][0]["rangeStart"] = "192.0.2.10"
    world.nad("broken", broken)
    world.pod("unlucky", {NPWG_NETWORKS: "broken"})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr3", netns, "unlucky")
    assert added.returncode == 1
    error = added.json
    assert "default/broken" in error["msg"] and "RangeStart 192.0.2.10 not in network" in error["msg"]
    assert world.leftovers() == NOTHING_LEFT
    assert world.objects.patches == [], "no network-status for a pod whose set-up failed"


async def test_a_default_route_that_cannot_be_set_fails_the_add_and_leaves_nothing(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("lost", {NPWG_NETWORKS: json.dumps([{"name": "blue", "default-route": ["192.0.2.1"]}])})
    netns = world.make_netns()

    added = await world.cni("ADD", "ctr7", netns, "lost")
    assert added.returncode == 1
    assert added.json["msg"].startswith("moving the default route failed"), added.json
    assert world.leftovers() == NOTHING_LEFT


async def test_the_agent_killed_between_two_delegate_adds_restarts_and_del_leaves_nothing(world: World) -> None:
    await world.stop_agent()
    world.nad("blue", world.network("blue", 1))
    world.pod("crashy", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    marker = world.root / "gated"
    process = spawn_gated_agent(world, "net1", marker)
    try:
        deadline = time.monotonic() + 20
        while not world.socket.exists():
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "the agent process did not open its socket"
            await asyncio.sleep(0.05)
        add = asyncio.create_task(world.cni("ADD", "ctr4", netns, "crashy"))
        while not marker.exists():
            assert time.monotonic() < deadline, "the second delegate ADD was never reached"
            assert not add.done(), (await add).stdout
            await asyncio.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        answer = await add
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stderr:
            process.stderr.close()

    assert answer.returncode == 1 and answer.json["code"] == 102, "the runtime hears the agent went away"
    assert world.interfaces(netns) == ["eth0"], "the first delegate had attached"
    record = json.loads((world.cache_dir / "ctr4.jsonl").read_text().splitlines()[-1])
    assert [(a["ifname"], a["state"]) for a in record["attachments"]] == [("eth0", "attached"), ("net1", "intent")]

    await world.start_agent()
    deleted = await world.cni("DEL", "ctr4", netns, "crashy")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


async def test_del_after_the_nad_and_the_pod_were_deleted_leaves_nothing(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    world.pod("gone", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()
    assert (await world.cni("ADD", "ctr5", netns, "gone")).returncode == 0
    assert world.interfaces(netns) == ["eth0", "net1"]

    world.objects.delete("NetworkAttachmentDefinition", "default", "blue")
    world.objects.delete("Pod", "default", "gone")
    await world.stop_agent()  # and a fresh agent: only the on-disk cache remembers
    await world.start_agent()

    deleted = await world.cni("DEL", "ctr5", netns, "gone")
    assert deleted.returncode == 0, deleted.stdout
    assert world.leftovers() == NOTHING_LEFT


async def test_twenty_pods_attach_concurrently_each_with_its_own_addresses(world: World) -> None:
    world.nad("blue", world.network("blue", 1))
    pods = [f"pod{i}" for i in range(20)]
    namespaces = {}
    for pod in pods:
        world.pod(pod, {NPWG_NETWORKS: "blue"})
        namespaces[pod] = world.make_netns()

    answers = await asyncio.gather(*(world.cni("ADD", f"ctr-{pod}", namespaces[pod], pod) for pod in pods))
    assert [a.returncode for a in answers] == [0] * 20, [a.stdout for a in answers if a.returncode]
    eth0 = [world.addresses(namespaces[p], "eth0")[0] for p in pods]
    net1 = [world.addresses(namespaces[p], "net1")[0] for p in pods]
    assert len(set(eth0)) == 20 and len(set(net1)) == 20
    assert len(world.reservations()) == 40

    answers = await asyncio.gather(*(world.cni("DEL", f"ctr-{pod}", namespaces[pod], pod) for pod in pods))
    assert [a.returncode for a in answers] == [0] * 20, [a.stdout for a in answers if a.returncode]
    assert world.leftovers() == NOTHING_LEFT


MALFORMED = {
    "stdin is not JSON": ({"stdin": b"{not json"}, 6),
    "no container ID": ({"env": {"CNI_CONTAINERID": ""}}, 4),
    "a container ID that is a path": ({"env": {"CNI_CONTAINERID": "../../etc/passwd"}}, 4),
    "no pod in CNI_ARGS": ({"env": {"CNI_ARGS": "IgnoreUnknown=1"}}, 4),
    "an unknown command": ({"env": {"CNI_COMMAND": "FROB"}}, 4),
    "a relative netns path": ({"env": {"CNI_NETNS": "proc/1/ns/net"}}, 4),
    "an unsupported cniVersion": ({"conf": {"cniVersion": "9.9.9"}}, 1),
    "an oversized request": ({"conf": {"padding": "x" * (2 * 1024 * 1024)}}, 103),
    "a pod the API does not know": ({"pod": "nobody"}, 104),
    "a NAD whose plugin type is ../../bin/sh": ({"pod": "sneaky"}, 105),
}


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_malformed_request_gets_a_clear_cni_error_and_changes_nothing(world: World, case: str) -> None:
    how, code = MALFORMED[case]
    world.nad("evil", {"cniVersion": CNI, "name": "evil", "type": "../../bin/sh"})
    world.pod("sneaky", {NPWG_NETWORKS: "evil"})
    world.pod("web")
    netns = world.make_netns()
    stdin = how.get("stdin")
    if "conf" in how:
        stdin = json.dumps({**world.runtime_conf(), **how["conf"]}).encode()
    env = {"CNI_COMMAND": "ADD", **how.get("env", {})}

    answer = await world.cni(env.pop("CNI_COMMAND"), "ctr6", netns, how.get("pod", "web"), stdin=stdin, env=env)

    assert answer.returncode == 1
    error = answer.json
    assert error["code"] == code, error
    assert error["msg"] and error["cniVersion"]
    if case.startswith("a NAD"):
        assert "../../bin/sh" in error.get("details", "") + error["msg"]
    assert world.leftovers() == NOTHING_LEFT
    assert world.objects.patches == []


CNI = "1.0.0"


async def test_a_request_body_that_is_not_a_cni_request_is_refused_by_the_agent(world: World) -> None:
    def post(body: bytes) -> tuple[int, dict]:
        head = f"POST /v1/cni HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        response = shim.exchange(str(world.socket), head.encode() + body, 10)
        header, _, payload = response.partition(b"\r\n\r\n")
        return int(header.split()[1]), json.loads(payload)

    for body in (b"garbage", b"CNI_COMMAND=ADD", b"NOT_CNI=1\n\n{}", b"CNI_COMMAND\n\n{}"):
        status, answer = await asyncio.to_thread(post, body)
        assert status == 400 and answer["code"] == 6 and answer["msg"] == "malformed request to the agent", (body, answer)
    assert world.leftovers() == NOTHING_LEFT
