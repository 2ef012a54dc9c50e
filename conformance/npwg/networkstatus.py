"""NPWG 5: the network-status annotation a plugin may write on the pod, judged entry by entry.

A plugin "may" publish it (5), and may write it after it answered the runtime: the
scenario waits `STATUS_WAIT_SECONDS` for it, and is skipped when none comes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from conformance.npwg.bench import DEFAULT_NETWORK_NAME, NAMESPACE, Bench, Pod, Record
from conformance.npwg.judging import Attachment, Judge, Skip, add_ok, attachments, delete, nad, single
from conformance.npwg.kubeapi import AnnotationWrite

STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
#: How long after its ADD answer a plugin may take to write network-status. NPWG 5 only says
#: a plugin "may" publish it, not when: an implementation may answer the runtime first.
STATUS_WAIT_SECONDS = 10.0


def _status_writes(bench: Bench, pod: Pod) -> list[AnnotationWrite]:
    """The pod's network-status writes, waiting up to STATUS_WAIT_SECONDS for the first: a plugin
    may write it after it answered the runtime."""
    deadline = time.monotonic() + STATUS_WAIT_SECONDS
    while True:
        writes = [w for w in bench.writes(pod) if STATUS_ANNOTATION in w.annotations]
        if writes or time.monotonic() > deadline:
            return writes
        time.sleep(0.05)


def network_status(bench: Bench, judge: Judge) -> None:
    full, bare, twice = bench.name("st-full"), bench.name("st-bare"), bench.name("st-twice")
    for net, type_ in ((full, "npwg-rec-a"), (bare, "npwg-rec-b"), (twice, "npwg-rec-c")):
        nad(bench, net, single(net, type_))
    pod = bench.pod(
        "status", [{"name": full}, {"name": bare, "namespace": NAMESPACE}, {"name": twice}, {"name": twice}]
    )
    v03 = bench.cni_version.startswith("0.3.")
    ver: dict[str, str] = {"version": "4"} if v03 else {}
    ver6: dict[str, str] = {"version": "6"} if v03 else {}
    bench.answer(
        pod,
        full,
        {
            "interfaces": [
                {"name": "host-veth9", "mac": "0a:00:00:00:00:09"},
                {"name": "$IFNAME", "mac": "0a:00:00:00:00:01", "sandbox": "$NETNS"},
                # A second pod-side interface (a VLAN, a macvtap): 5.1.1 takes the first.
                {"name": "extra0", "mac": "0a:00:00:00:00:02", "sandbox": "$NETNS"},
            ],
            "ips": [
                {"address": "192.0.2.9/24", "interface": 0, **ver},
                {"address": "192.0.2.2/24", "interface": 1, **ver},
                {"address": "2001:db8::2234/64", "interface": 1, **ver6},
                {"address": "192.0.2.3/24", "interface": 2, **ver},
            ],
            "dns": {"nameservers": ["192.0.2.1"], "domain": "example.com", "search": ["eng.example.com"]},
        },
    )
    bench.answer(
        pod,
        bare,
        {
            "interfaces": [{"name": "host-tap7", "mac": "0a:00:00:00:00:07"}],
            "ips": [
                {"address": "198.51.100.7/24", "interface": 0, **ver},
                {"address": "198.51.100.5/24", **ver},
            ],
        },
    )
    add = add_ok(bench, judge, pod, "5", "ADD of four attachments")
    if not add.ok:
        return
    writes = _status_writes(bench, pod)
    if not writes:
        bench.cni("DEL", pod)
        raise Skip(
            f"the plugin wrote no {STATUS_ANNOTATION} on the pod within {STATUS_WAIT_SECONDS:g} s of its "
            'ADD answer (NPWG 5: an implementation "may" publish it)'
        )
    judge.note(f"network-status written by {writes[-1].method} {writes[-1].path} ({writes[-1].content_type})")
    records = bench.records(pod)
    delete(bench, judge, pod)
    try:
        status = json.loads(writes[-1].annotations[STATUS_ANNOTATION])
    except RecursionError:
        judge.require(False, "5", "the annotation's value must be JSON a reader can parse: nested too deeply")
        return
    except ValueError as exc:
        judge.require(False, "5", f"the annotation's value must be JSON: {exc}")
        return
    if not judge.require(
        isinstance(status, list) and all(isinstance(e, dict) for e in status),
        "5",
        f"the value must be a JSON list of maps, got {status!r}",
    ):
        return
    judge_status(judge, status, records, full=full, bare=bare, twice=twice)


def _entry_name_is(entry: Mapping[str, Any], network: str) -> bool:
    return entry.get("name") in (f"{NAMESPACE}/{network}", network)


def judge_status(
    judge: Judge, status: list[dict[str, Any]], records: list[Record], *, full: str, bare: str, twice: str
) -> None:
    """`status`, the network-status the plugin wrote for the pod of `network_status`, against NPWG 5:
    the default network, `full` (a result with host and pod interfaces, IPs and DNS), `bare` (a
    result with no pod interface) and `twice` (selected twice); `records` are the delegates'."""
    _judge_every_entry(judge, status)
    defaults = [e for e in status if e.get("default") is True]
    _judge_counts(judge, status, defaults, full=full, bare=bare, twice=twice)
    adds = {a.network: a for a in attachments(records, "ADD")}
    _judge_full(judge, status, adds, full)
    _judge_bare(judge, status, bare)
    _judge_twice(judge, status, twice)
    if defaults:
        _judge_default(judge, defaults[0], adds)


def _judge_every_entry(judge: Judge, status: list[dict[str, Any]]) -> None:
    """5.3.1, 5.3.4, 5.3.5: the keys every entry needs."""
    for entry in status:
        judge.require(
            isinstance(entry.get("name"), str) and bool(entry.get("name")),
            "5.3.1",
            f'every entry needs a string "name": {entry}',
        )
        judge.require(
            isinstance(entry.get("default"), bool),
            "5.3.5",
            f'"default" is required and boolean in every entry: {entry}',
        )
        if "mac" in entry:
            judge.require(
                "interface" in entry, "5.3.4", f'an entry with "mac" must have "interface": {entry}'
            )


def _judge_counts(judge: Judge, status: list[dict[str, Any]], defaults: list[dict[str, Any]], *,
                  full: str, bare: str, twice: str) -> None:
    """4.2, 5.1.1, 5.2: one default entry, one entry per attachment (not per pod interface)."""
    judge.require(
        len(defaults) == 1,
        "5.2, 5.3.5",
        f'exactly one entry, the cluster default network\'s, has "default": true; got {len(defaults)}',
    )
    judge.require(
        len(status) >= 5,
        "4.2, 5.2",
        "one entry per attachment (the default network and four "
        f"selected, {twice} twice): 5 entries, got {len(status)}: {[e.get('name') for e in status]}",
    )
    selected = (full, bare, twice)
    groups = [(f"{NAMESPACE}/{n}", [e for e in status if _entry_name_is(e, n)], 2 if n == twice else 1)
              for n in selected]
    groups.append(("the cluster default network",
                   [e for e in status if not any(_entry_name_is(e, n) for n in selected)], 1))
    for what, entries, wanted in groups:
        judge.require(
            len(entries) <= wanted,
            "5.1.1",
            f"{what}: {len(entries)} entries for {wanted} attachment(s) "
            f"(interfaces {[e.get('interface') for e in entries]}); an attachment's status is taken "
            "from the first sandbox interface of its result, one entry per attachment, not one per "
            "sandbox interface",
        )
    for network in (full, bare, twice):
        for entry in status:
            if entry.get("name") == network:
                judge.note(
                    f'entry {network!r} has no namespace (5.3.1: it "should" be {NAMESPACE}/{network})'
                )


def _judge_full(judge: Judge, status: list[dict[str, Any]], adds: Mapping[str, Attachment],
                full: str) -> None:
    """5.3.2.1, 5.3.3.1, 5.3.4.1, 5.3.6: a result with host and pod interfaces, IPs and DNS."""
    entry_full = next((e for e in status if _entry_name_is(e, full)), None)
    found = judge.require(entry_full is not None, "5.3.1", f"no entry names {NAMESPACE}/{full}")
    if not found or not entry_full:
        return
    want_if = adds[full].ifname if full in adds else "?"
    judge.require(
        entry_full.get("interface") == want_if,
        "5.3.2.1",
        f'{full}: "interface" comes from the first result interface with a sandbox ({want_if!r}), '
        f"not the host-side one nor the second pod-side extra0; got {entry_full.get('interface')!r}",
    )
    judge.require(
        entry_full.get("mac") == "0a:00:00:00:00:01",
        "5.3.4.1",
        f'{full}: "mac" is the first sandbox interface\'s (0a:00:00:00:00:01); '
        f"got {entry_full.get('mac')!r}",
    )
    got_ips = [str(ip).split("/")[0] for ip in entry_full.get("ips") or []]
    judge.require(
        sorted(got_ips) == ["192.0.2.2", "2001:db8::2234"],
        "5.3.3.1",
        f'{full}: "ips" are those whose "interface" index is the sandbox interface (rule 1): '
        "192.0.2.2 and 2001:db8::2234, never the host side's 192.0.2.9 or extra0's 192.0.2.3; "
        f"got {entry_full.get('ips')}",
    )
    dns = entry_full.get("dns")
    if dns is None:
        judge.note(f"{full}: the result's dns is not reported (5.3.6 makes it optional)")
    else:
        want_dns = {"nameservers": ["192.0.2.1"], "domain": "example.com", "search": ["eng.example.com"]}
        judge.require(
            isinstance(dns, dict) and all(dns.get(k) == v for k, v in want_dns.items()),
            "5.3.6",
            f'{full}: "dns" carries the result\'s nameservers, domain and search {want_dns}; got {dns}',
        )
    # A missing "default" is reported above; here only a claim to be the default network.
    judge.require(
        entry_full.get("default") is not True, "5.3.5", f"{full} is marked the default network; it is not"
    )


def _judge_bare(judge: Judge, status: list[dict[str, Any]], bare: str) -> None:
    """5.3.2, 5.3.3, 5.3.3.1: a result with no interface in the pod's namespace."""
    entry_bare = next((e for e in status if _entry_name_is(e, bare)), None)
    found = judge.require(entry_bare is not None, "5.3.1", f"no entry names {NAMESPACE}/{bare}")
    if not found or not entry_bare:
        return
    got_ips = [str(ip).split("/")[0] for ip in entry_bare.get("ips") or []]
    # 5.3.3: "addresses assigned to the pod" (shall); 5.3.3.1 rule 2 says which (should).
    judge.require(
        got_ips == ["198.51.100.5"],
        "5.3.3, 5.3.3.1",
        f'{bare}: a result with no sandbox interface reports the IP without an "interface" index '
        f"(rule 2), 198.51.100.5, never the host interface's 198.51.100.7; got {entry_bare.get('ips')}",
    )
    judge.require(
        entry_bare.get("interface") != "host-tap7",
        "5.3.2",
        f'{bare}: "interface" names an interface in the pod\'s namespace; host-tap7 has no sandbox',
    )


def _judge_twice(judge: Judge, status: list[dict[str, Any]], twice: str) -> None:
    """4.2: a network selected twice is two attachments, two entries."""
    twins = [e for e in status if _entry_name_is(e, twice)]
    judge.require(
        len(twins) >= 2, "4.2", f"{twice} selected twice needs two status entries; got {len(twins)}"
    )
    if len(twins) >= 2:
        judge.require(
            twins[0].get("interface") != twins[1].get("interface"),
            "4.2",
            f"{twice}'s two entries must describe two attachments; both name {twins[0].get('interface')!r}",
        )


def _judge_default(judge: Judge, entry: Mapping[str, Any], adds: Mapping[str, Attachment]) -> None:
    """5.3.2.1, 5.3.3.1: the default network's entry describes its result."""
    default_add = adds.get(DEFAULT_NETWORK_NAME)
    if default_add is None:
        return
    judge.require(
        entry.get("interface") == default_add.ifname,
        "5.3.2.1",
        f"the default entry's \"interface\" is its result's sandbox interface "
        f"{default_add.ifname!r}; got {entry.get('interface')!r}",
    )
    judge.require(
        bool(entry.get("ips")), "5.3.3.1", f"the default entry must report its result's IPs: {entry}"
    )


__all__ = ["STATUS_ANNOTATION", "STATUS_WAIT_SECONDS", "judge_status", "network_status"]
