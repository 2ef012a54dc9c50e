"""Malformed requests, through the shim and straight to the agent's socket: each gets a
clear CNI error with the spec's code and changes nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from bridge.agent.shim import shim
from tests.cni.agent_support import NOTHING_LEFT, NPWG_NETWORKS, World

pytestmark = pytest.mark.cni


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
