"""The kernel accepts what the rule compiler writes: every pod's table of every truth-table case
(tests/policy_cases.py) loads through the agent's applier (`bridge.agent.netns.nftables.apply`: the real
`nft -j -f -` in a network namespace of the test), replaces the previous one atomically, and
`nftables.remove` leaves none. No traffic: the truth tables with real packets are the traffic
harness's."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.agent.netns import nftables
from bridge.policy import rules, scope
from tests import policy_cases
from tests.cni.netpol_support import nft_or_skip
from tests.policy_cases import DEFAULT_TOPOLOGY as T

pytestmark = pytest.mark.cni


@pytest.fixture
def netns(cni_host: list[Path]) -> Iterator[str]:
    nft_or_skip()
    name = f"pnpol-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield f"/var/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


async def test_every_compiled_table_loads_replaces_the_last_and_removal_leaves_none(netns: str) -> None:
    loaded = 0
    for case in policy_cases.CASES:
        world = policy_cases.world(T, case.policies(T))
        scopes = scope.scopes(world)
        for key in policy_cases.POD_KEYS:
            document = rules.compile_pod(world, key, scopes).document
            if document is not None:
                await nftables.apply(netns, document)
                loaded += 1
                assert await nftables.exists(netns)
    assert loaded > 20
    await nftables.remove(netns)
    assert not await nftables.exists(netns)
    await nftables.remove(netns)  # and again, with no table: still succeeds
    assert rules.TABLE == nftables.TABLE
