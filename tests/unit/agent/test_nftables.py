"""bridge.agent.netns.nftables without the kernel's nftables: the transaction it builds, what it refuses
before nft runs, and how it runs nft (time-out, bounded output, errors naming the namespace),
against stand-in `nsenter` and `nft` scripts under tmp_path and this process's own namespace
file. The real nft in real namespaces: tests/cni/test_policy_tables.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.agent.netns import nftables

OURS = {"family": "inet", "table": "podnetwork_policy"}
OWN_NETNS = "/proc/self/ns/net"


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, Any]:
    """A stand-in nsenter (checks it got the descriptor, drops --net) and a recording nft."""
    nsenter = script(tmp_path / "nsenter",
                     'case "$1" in --net=/proc/self/fd/*) [ -e "${1#--net=}" ] || exit 9;; *) exit 8;; esac\n'
                     'shift\nexec "$@"\n')
    record = tmp_path / "record"
    nft = script(tmp_path / "nft", f'echo "$@" > {record}.args\ncat > {record}.stdin\n')
    return {"nsenter": nsenter, "nft": nft, "record": record, "dir": tmp_path}


def test_apply_sends_one_document_that_replaces_our_table(fake: dict[str, Any]) -> None:
    ruleset = {"nftables": [{"add": {"table": {"family": "inet", "name": "podnetwork_policy"}}},
                            {"add": {"chain": {**OURS, "name": "input"}}}]}

    asyncio.run(nftables.apply(OWN_NETNS, ruleset, nft=fake["nft"], nsenter=fake["nsenter"]))

    assert Path(f"{fake['record']}.args").read_text().split() == ["-j", "-f", "-"]
    sent = json.loads(Path(f"{fake['record']}.stdin").read_text())
    table = {"table": {"family": "inet", "name": "podnetwork_policy"}}
    assert sent == {"nftables": [{"add": table}, {"delete": table}, *ruleset["nftables"]]}


def test_a_rulesets_metainfo_stays_first() -> None:
    meta = {"metainfo": {"json_schema_version": 1}}
    rule = {"add": {"rule": {**OURS, "chain": "input", "expr": [{"accept": None}]}}}
    table = {"table": {"family": "inet", "name": "podnetwork_policy"}}
    assert nftables.document({"nftables": [meta, rule]}) == {"nftables": [meta, {"add": table}, {"delete": table}, rule]}


@pytest.mark.parametrize(("ruleset", "said"), [
    ([], 'a ruleset is a libnftables JSON object {"nftables": [...]}'),
    ({"nftables": {}}, 'a ruleset is a libnftables JSON object {"nftables": [...]}'),
    ({"nftables": [{"flush": {"ruleset": None}}]}, "'ruleset' is not an object of a table"),
    ({"nftables": [{"add": {"table": {"family": "ip", "name": "filter"}}}]},
     "only table inet podnetwork_policy is ours to change, not ip filter"),
    ({"nftables": [{"delete": {"rule": {"family": "inet", "table": "kube-proxy", "chain": "c", "handle": 1}}}]},
     "only table inet podnetwork_policy is ours to change, not inet kube-proxy"),
    ({"nftables": [{"list": {"ruleset": None}}]}, "'list' is not a command this code sends"),
    ({"nftables": [{"add": {"chain": OURS, "rule": OURS}}]}, "the add command takes one object"),
    ({"nftables": ["add table inet x"]}, "each item is an object with one key"),
])
def test_a_ruleset_reaching_outside_our_table_is_refused_before_nft_runs(
        fake: dict[str, Any], ruleset: Any, said: str) -> None:
    with pytest.raises(ValueError) as caught:
        asyncio.run(nftables.apply(OWN_NETNS, ruleset, nft=fake["nft"], nsenter=fake["nsenter"]))
    assert said in str(caught.value)
    with pytest.raises(ValueError) as caught:  # an in-place change is held to the same
        asyncio.run(nftables.change(OWN_NETNS, ruleset, nft=fake["nft"], nsenter=fake["nsenter"]))
    assert said.replace("a ruleset is", "a change is") in str(caught.value)
    assert not Path(f"{fake['record']}.args").exists()


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8)
                    | st.sampled_from(["inet", "podnetwork_policy", "add", "table", "rule", "delete"]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["nftables", "add", "delete", "flush", "table", "chain", "rule", "family",
                                         "name", "metainfo", "set", "x"]), inner, max_size=3),
                    max_leaves=12))
def test_whatever_comes_in_either_is_refused_or_touches_only_our_table(ruleset: Any) -> None:
    sent: list[Any] = []
    for build in (nftables.document, nftables.changing):
        with contextlib.suppress(ValueError):
            sent += build(ruleset)["nftables"]
    for item in sent:
        (command, value), = item.items()
        if command == "metainfo":
            continue
        if command in nftables.ALLOWED_COMMANDS:
            (kind, value), = value.items()
        else:
            kind = command
        name = value["name"] if kind == "table" else value["table"]
        assert (value["family"], name) == ("inet", "podnetwork_policy")


def test_nft_refusing_names_the_namespace_and_quotes_nft(fake: dict[str, Any]) -> None:
    nft = script(fake["dir"] / "nft-no", 'cat >/dev/null\necho "Error: Could not process rule: No such file" >&2\n'
                                         "exit 1\n")
    with pytest.raises(nftables.NftablesError) as caught:
        asyncio.run(nftables.apply(OWN_NETNS, {"nftables": []}, nft=nft, nsenter=fake["nsenter"]))
    assert str(caught.value) == (f"apply nftables table inet podnetwork_policy in network namespace {OWN_NETNS} failed: "
                                 "nft said: Error: Could not process rule: No such file")
    assert not isinstance(caught.value, nftables.NetnsGone)


def test_nft_that_does_not_finish_is_killed_with_what_it_started(fake: dict[str, Any]) -> None:
    pidfile = fake["dir"] / "child.pid"
    nft = script(fake["dir"] / "nft-hangs", f"sleep 60 &\necho $! > {pidfile}\nwait\n")
    started = time.monotonic()
    with pytest.raises(nftables.NftablesError, match=r"nft did not finish within 0.3 s; it was killed"):
        asyncio.run(nftables.apply(OWN_NETNS, {"nftables": []}, timeout=0.3, nft=nft, nsenter=fake["nsenter"]))
    assert time.monotonic() - started < 30  # not the child's 60 s: a bound, not a timing
    child = int(pidfile.read_text())
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the time-out left nft's child running")


def test_what_nft_prints_is_read_to_a_bound(fake: dict[str, Any]) -> None:
    nft = script(fake["dir"] / "nft-loud", "cat >/dev/null\nhead -c 5000000 /dev/zero | tr '\\0' x >&2\nexit 1\n")
    with pytest.raises(nftables.NftablesError) as caught:
        asyncio.run(nftables.apply(OWN_NETNS, {"nftables": []}, nft=nft, nsenter=fake["nsenter"]))
    assert caught.value.detail.endswith("[...] (cut)")
    assert len(caught.value.detail) < nftables.MAX_OUTPUT_BYTES + 100


def test_exists_reads_nfts_list_of_tables(fake: dict[str, Any]) -> None:
    listing = {"nftables": [{"metainfo": {"version": "1.0.6"}},
                            {"table": {"family": "inet", "name": "other", "handle": 1}}]}
    for tables, found in ((listing, False), ({"nftables": [*listing["nftables"], {"table": {
            "family": "inet", "name": "podnetwork_policy", "handle": 2}}]}, True)):
        nft = script(fake["dir"] / "nft-list", f"echo '{json.dumps(tables)}'\n")
        assert asyncio.run(nftables.exists(OWN_NETNS, nft=nft, nsenter=fake["nsenter"])) is found
    nft = script(fake["dir"] / "nft-list", "echo 'table inet x'\n")
    with pytest.raises(nftables.NftablesError, match="nft answered what is not its JSON: table inet x"):
        asyncio.run(nftables.exists(OWN_NETNS, nft=nft, nsenter=fake["nsenter"]))


def test_a_path_that_is_no_network_namespace_is_told_apart_from_one_that_is_gone(
        fake: dict[str, Any], tmp_path: Path) -> None:
    plain = tmp_path / "netns"
    plain.write_text("")
    with pytest.raises(nftables.NftablesError, match="it is not a network namespace") as caught:
        asyncio.run(nftables.apply(str(plain), {"nftables": []}, nft=fake["nft"], nsenter=fake["nsenter"]))
    assert not isinstance(caught.value, nftables.NetnsGone)
    missing = str(tmp_path / "gone")
    with pytest.raises(nftables.NetnsGone, match=f"in network namespace {missing} failed: the network namespace"):
        asyncio.run(nftables.apply(missing, {"nftables": []}, nft=fake["nft"], nsenter=fake["nsenter"]))
    # A DEL after the runtime removed the namespace, or with none at all.
    asyncio.run(nftables.remove(missing, nft=fake["nft"], nsenter=fake["nsenter"]))
    asyncio.run(nftables.remove("", nft=fake["nft"], nsenter=fake["nsenter"]))
    assert not Path(f"{fake['record']}.args").exists()


def test_a_missing_nft_says_which_package_to_install(fake: dict[str, Any]) -> None:
    with pytest.raises(nftables.NftablesError, match="is not installed: install the nftables package"):
        asyncio.run(nftables.apply(OWN_NETNS, {"nftables": []}, nft=str(fake["dir"] / "no-nft"),
                                   nsenter=fake["nsenter"]))
