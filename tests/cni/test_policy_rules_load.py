"""The kernel accepts what the rule compiler writes: every pod's table of every truth-table case
(tests/policy_cases.py) loads with the real `nft -j -f` into a network namespace of the test,
replaces the previous one atomically, and `rules.removal()` leaves none. No traffic: the
truth tables with real packets are the traffic harness's."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.policy import rules, scope
from tests import policy_cases
from tests.policy_cases import DEFAULT_TOPOLOGY as T

pytestmark = pytest.mark.cni


@pytest.fixture
def netns(cni_host: list[Path]) -> Iterator[str]:
    if shutil.which("nft") is None:
        pytest.fail("needs nftables (`nft`): make system-deps")
    name = f"pnpol-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _load(netns: str, document: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(document))
    done = subprocess.run(["ip", "netns", "exec", netns, "nft", "-j", "-f", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _tables(netns: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "exec", netns, "nft", "-j", "list", "tables"], capture_output=True, text=True, check=True)
    return [i["table"]["name"] for i in json.loads(listed.stdout)["nftables"] if "table" in i]


def test_every_compiled_table_loads_replaces_the_last_and_removal_leaves_none(netns: str, tmp_path: Path) -> None:
    loaded = 0
    for case in policy_cases.CASES:
        world = policy_cases.world(T, case.policies(T))
        scopes = scope.scopes(world)
        for key in policy_cases.POD_KEYS:
            document = rules.compile_pod(world, key, scopes).document
            if document is not None:
                _load(netns, document, tmp_path)
                loaded += 1
                assert _tables(netns) == [rules.TABLE]
    assert loaded > 20
    _load(netns, rules.removal(), tmp_path)
    assert _tables(netns) == []
    _load(netns, rules.removal(), tmp_path)  # and again, with no table: still succeeds
