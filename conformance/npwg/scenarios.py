"""The scenarios: each one a rule of the NPWG multi-net spec v1.3, set up, run and judged.

A scenario puts pods and NetworkAttachmentDefinitions into the bench's API,
executes the plugin under test as the runtime does (ADD, CHECK, DEL), then judges
what the recording delegates saw and what was written on the pod. It judges
against the spec's text, never against any one implementation: a failure message
starts with the section it breaks (`NPWG 7.2: ...`). What the spec leaves open is
a *note*, not a failure (for example Multus's `net1`, `net2`, ... naming, which
4.2.1 does not require). A scenario whose rule the plugin's configuration makes
moot (no capability declared, so the runtime passes no `runtimeConfig`; no
network-status written, which NPWG 5 makes optional) is *skipped* with the reason.

This module holds the registry (`SCENARIOS`, `run_scenario`, `select`) and the
rules of 3.4, 4.2.1, 6 and 7; the judge is `conformance.npwg.judging`'s, and the
selection keys (4.1.2.1.x) and network-status (5) have modules of their own
(`selectionkeys`, `networkstatus`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from conformance.npwg.bench import DEFAULT_NETWORK_NAME, DEFAULT_TYPE, RUNTIME_IFNAME, Bench
from conformance.npwg.judging import (
    Attachment,
    Judge,
    Skip,
    Verdict,
    add_ok,
    attachments,
    check_teardown,
    delete,
    nad,
    names,
    single,
)
from conformance.npwg.networkstatus import network_status
from conformance.npwg.selectionkeys import KEY_CASES, cni_args, interface_key, selection_key


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    sections: tuple[str, ...]
    run: Callable[[Bench, Judge], None]


@dataclass(frozen=True)
class Outcome:
    scenario: Scenario
    verdict: Verdict
    failures: tuple[str, ...]
    notes: tuple[str, ...]
    skip_reason: str = ""


def run_scenario(scenario: Scenario, bench: Bench) -> Outcome:
    judge = Judge()
    try:
        scenario.run(bench, judge)
    except Skip as skip:
        return Outcome(scenario, "skipped", (), tuple(judge.notes), str(skip))
    except Exception as exc:  # one scenario the harness cannot finish must not hide the others' verdicts
        judge.failures.append(f"the harness could not finish the scenario (no verdict on a rule): {exc!r}")
    finally:
        bench.remove_netns()
    verdict: Verdict = "failed" if judge.failures else "passed"
    return Outcome(scenario, verdict, tuple(judge.failures), tuple(judge.notes))


# --- 3.4.1 and 3.4.2 -----------------------------------------------------------------------------


def config_source_order(bench: Bench, judge: Judge) -> None:
    from_spec, from_list, from_file, nowhere = (
        bench.name(n) for n in ("src-spec", "src-list", "src-file", "src-none")
    )
    v = bench.cni_version
    nad(bench, from_spec, single(from_spec, "npwg-rec-nad"))
    bench.on_disk(
        "10-spec-decoy.conflist",
        {"cniVersion": v, "name": from_spec, "plugins": [{"type": "npwg-rec-decoy"}]},
    )
    # 3.2.4: no spec; a config list and a single config on disk both carry the name.
    nad(bench, from_list, None)
    bench.on_disk("20-a.conf", {"cniVersion": v, "name": from_list, "type": "npwg-rec-decoy"})
    bench.on_disk(
        "30-b.conflist", {"cniVersion": v, "name": from_list, "plugins": [{"type": "npwg-rec-conflist"}]}
    )
    # The file's name says nothing: a config list named after the NAD by file name only is no match.
    nad(bench, from_file, None)
    bench.on_disk(
        f"{from_file}.conflist",
        {"cniVersion": v, "name": "not-" + from_file, "plugins": [{"type": "npwg-rec-decoy"}]},
    )
    bench.on_disk("40-c.conf", {"cniVersion": v, "name": from_file, "type": "npwg-rec-conf"})
    nad(bench, nowhere, None)

    pod = bench.pod("source-order", f"{from_spec},{from_list},{from_file}")
    add_ok(bench, judge, pod, "3.4.1", "ADD of a pod selecting three NADs")
    ran = {a.network: a.types() for a in attachments(bench.records(pod), "ADD")}
    expected = {
        from_spec: ("npwg-rec-nad", "rule 1, the NAD's spec.config"),
        from_list: ("npwg-rec-conflist", 'rule 2, an on-disk config list whose "name" matches'),
        from_file: ("npwg-rec-conf", 'rule 3, an on-disk config whose "name" matches'),
    }
    for network, (type_, rule) in expected.items():
        judge.require(
            ran.get(network) == [type_],
            "3.4.1",
            f"{network} must run {type_} ({rule}); the delegates run were {ran.get(network) or 'none'}",
        )
    delete(bench, judge, pod)

    lost = bench.pod("source-missing", nowhere)
    inv = bench.cni("ADD", lost)
    judge.refused(
        inv,
        "3.4.1",
        f"ADD of a pod selecting {nowhere}, which has no spec.config and no on-disk "
        "configuration (rule 4: the request must fail)",
    )
    ran_lost = [a.network for a in attachments(bench.records(lost), "ADD")]
    judge.require(nowhere not in ran_lost, "3.4.1", f"no delegate may run for {nowhere}")
    bench.cni("DEL", lost)


def name_injection(bench: Bench, judge: Judge) -> None:
    single, chained = bench.name("noname"), bench.name("noname-list")
    bench.nad(single, {"cniVersion": bench.cni_version, "type": "npwg-rec-a"})
    bench.nad(
        chained,
        {"cniVersion": bench.cni_version, "plugins": [{"type": "npwg-rec-a"}, {"type": "npwg-rec-b"}]},
    )
    pod = bench.pod("name-injection", f"{single},{chained}")
    add_ok(bench, judge, pod, "3.4.2", 'ADD of a pod selecting NADs whose config omits "name"')
    records = bench.records(pod)
    for command in ("ADD", "DEL"):
        if command == "DEL":
            delete(bench, judge, pod)
            records = bench.records(pod)
        seen = [
            (r.type, r.conf.get("name")) for r in records if r.command == command and r.type != DEFAULT_TYPE
        ]
        want = [("npwg-rec-a", single), ("npwg-rec-a", chained), ("npwg-rec-b", chained)]
        for item in want:
            judge.require(
                item in seen,
                "3.4.2",
                f'{command}: {item[0]} must get "name": {item[1]!r} (the NAD\'s '
                f"name, injected because its config has none); it got {seen}",
            )
    for r in records:
        if r.type in ("npwg-rec-a", "npwg-rec-b") and r.conf.get("name") == chained:
            judge.require(
                r.conf.get("cniVersion") == bench.cni_version,
                "7.1",
                f"{r.command} of {r.type} in a config list must get the list's cniVersion "
                f"{bench.cni_version!r}, got {r.conf.get('cniVersion')!r}",
            )


# --- 4.2.1: one tuple per attachment, unique interface names -------------------------------------


def interface_names(bench: Bench, judge: Judge) -> None:
    twice, other = bench.name("twice"), bench.name("other")
    nad(bench, twice, single(twice, "npwg-rec-a"))
    nad(bench, other, single(other, "npwg-rec-b"))
    pod = bench.pod("names", f"{twice},{twice},{other}")
    add = add_ok(bench, judge, pod, "4.2.1", "ADD of a pod selecting the same NAD twice (4.2.2)")
    adds = [a for a in attachments(bench.records(pod), "ADD") if a.network != DEFAULT_NETWORK_NAME]
    judge.require(
        sorted(a.network for a in adds) == sorted([twice, twice, other]),
        "4.2",
        f"each reference is a separate attachment: ADDs of {twice} twice and {other} once; got "
        f"{names(adds) or 'none'}",
    )
    ifs_twice = [a.ifname for a in adds if a.network == twice]
    judge.require(
        len(set(ifs_twice)) == len(ifs_twice),
        "4.2.1",
        f"CNI_IFNAME must be unique across the attachments of [container, {twice}]; got {ifs_twice}",
    )
    all_ifs = [RUNTIME_IFNAME] + [a.ifname for a in adds]
    if len(set(all_ifs)) != len(all_ifs):
        judge.note(f"two attachments of different networks share an interface name: {all_ifs}")
    generated = [a.ifname for a in adds]
    if generated != [f"net{i}" for i in range(1, len(generated) + 1)]:
        judge.note(
            f"generated names are {generated}, not net1, net2, ... (Multus's convention; 4.2.1 "
            "requires only uniqueness)"
        )

    if add.ok and _version_at_least(bench.cni_version, "0.4.0"):
        check = bench.cni("CHECK", pod, prev_result=add.answer)
        judge.invoked(check, "4.2.1", "CHECK after ADD")
        checked = [a for a in attachments(bench.records(pod), "CHECK") if a.network != DEFAULT_NETWORK_NAME]
        judge_check(judge, adds, checked)
    delete(bench, judge, pod)
    dels = [a for a in attachments(bench.records(pod), "DEL") if a.network != DEFAULT_NETWORK_NAME]
    judge.require(
        sorted(a.key for a in dels) == sorted(a.key for a in adds),
        "4.2.1",
        f"DEL must use each attachment's ADD tuple: ADD {names(adds)}, DEL {names(dels)}",
    )


def judge_check(judge: Judge, adds: list[Attachment], checked: list[Attachment]) -> None:
    """4.2.1 for CHECK: an attachment a CHECK reaches is reached with its ADD's tuple
    [container, network, CNI_IFNAME], and (CNI) with its ADD's result as prevResult.

    Which attachments a plugin CHECKs is not an NPWG rule: 4.2.1 makes "all CNI operations
    (eg ADD or DEL) for a given network attachment use the same unique tuple", it does not
    make a plugin forward CHECK. Attachments no CHECK reached are a note.
    """
    added = {a.key for a in adds}
    strangers = [a for a in checked if a.key not in added]
    judge.require(
        not strangers,
        "4.2.1",
        "CHECK must reach an attachment with its ADD's [container, network, CNI_IFNAME]: ADD "
        f"{names(adds)}; CHECK also ran {names(strangers)}, which no ADD set up",
    )
    for a in checked:
        if a.key in added:
            judge.require(
                a.records[0].conf.get("prevResult") is not None,
                "4.2.1 (CNI CHECK)",
                f"CHECK of {a.network}@{a.ifname} must carry its ADD's result as prevResult",
            )
    reached = {a.key for a in checked}
    unchecked = [a for a in adds if a.key not in reached]
    if unchecked:
        judge.note(
            f"CHECK reached {'none' if len(unchecked) == len(adds) else 'not all'} of the selected "
            f"attachments (not checked: {', '.join(names(unchecked))}); NPWG 4.2.1 constrains the tuple "
            "of each operation, not which operations a plugin runs, while CNI's CHECK expects a plugin "
            "to check what it set up"
        )


def _version_at_least(version: str, floor: str) -> bool:
    def parts(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split(".") if p.isdigit())

    return parts(version) >= parts(floor)


# --- 6, 6.2: the default network, first ----------------------------------------------------------


def default_first(bench: Bench, judge: Judge) -> None:
    net_a, net_b = bench.name("first-a"), bench.name("first-b")
    nad(bench, net_a, single(net_a, "npwg-rec-a"))
    nad(bench, net_b, single(net_b, "npwg-rec-b"))
    pod = bench.pod("default-first", f"{net_a},{net_b}")
    add_ok(bench, judge, pod, "6.2", "ADD")
    adds = attachments(bench.records(pod), "ADD")
    judge.require(
        bool(adds) and adds[0].network == DEFAULT_NETWORK_NAME,
        "6.2",
        f"the cluster default network ({DEFAULT_NETWORK_NAME}) must be attached before any selected "
        f"network; ADD order was {names(adds) or 'nothing'}",
    )
    default = [a for a in adds if a.network == DEFAULT_NETWORK_NAME]
    judge.require(
        bool(default) and default[0].ifname == RUNTIME_IFNAME,
        "6",
        f"the default network keeps Kubernetes' behaviour: its interface is the runtime's CNI_IFNAME "
        f"{RUNTIME_IFNAME!r}; got {default[0].ifname if default else 'no attachment'}",
    )
    delete(bench, judge, pod)

    bare = bench.pod("default-only")
    add_ok(bench, judge, bare, "6", "ADD of a pod selecting no network")
    got = names(attachments(bench.records(bare), "ADD"))
    judge.require(
        got == [f"{DEFAULT_NETWORK_NAME}@{RUNTIME_IFNAME}"],
        "6",
        f"every pod is attached to the cluster default network, and a pod selecting none only to it; "
        f"got {got or 'nothing'}",
    )
    delete(bench, judge, bare)


# --- 7.2: failures ------------------------------------------------------------------------------


def add_failure(bench: Bench, judge: Judge) -> None:
    ok_a, bad, ok_c = bench.name("mid-a"), bench.name("mid-fail"), bench.name("mid-c")
    for net, type_ in ((ok_a, "npwg-rec-a"), (bad, "npwg-rec-b"), (ok_c, "npwg-rec-c")):
        nad(bench, net, single(net, type_))
    pod = bench.pod("add-failure", f"{ok_a},{bad},{ok_c}")
    bench.fail(pod, "ADD", network=bad, code=11, msg="the scenario refuses this attachment")
    judge.refused(bench.cni("ADD", pod), "7.2", f"ADD where {bad}'s delegate fails")
    attempted = [a.network for a in attachments(bench.records(pod), "ADD")]
    judge.require(
        ok_c not in attempted,
        "7.2",
        f"after {bad} failed, {ok_c} must not be attempted; ADDs were {attempted}",
    )
    bench.cni("DEL", pod)  # the runtime's tear-down after a failed ADD (CRI)
    check_teardown(judge, bench.records(pod))

    early = bench.pod("default-failure", f"{ok_a},{ok_c}")
    bench.fail(early, "ADD", type_=DEFAULT_TYPE, msg="the scenario refuses the default network")
    judge.refused(bench.cni("ADD", early), "7.2", "ADD where the cluster default network's delegate fails")
    attempted = [a.network for a in attachments(bench.records(early), "ADD")]
    judge.require(
        not {ok_a, ok_c} & set(attempted),
        "7.2",
        f"after the default network failed, no selected network may be attempted; ADDs were {attempted}",
    )
    bench.cni("DEL", early)
    check_teardown(judge, bench.records(early))


def del_reverse(bench: Bench, judge: Judge) -> None:
    nets = [bench.name(f"rev-{x}") for x in "abc"]
    for net, type_ in zip(nets, ("npwg-rec-a", "npwg-rec-b", "npwg-rec-c"), strict=True):
        nad(bench, net, single(net, type_))
    pod = bench.pod("del-reverse", ",".join(nets))
    add_ok(bench, judge, pod, "7.2", "ADD of three networks")
    bench.fail(pod, "DEL", network=nets[1], msg="the scenario refuses this tear-down")
    inv = bench.cni("DEL", pod)
    judge.refused(inv, "7.2", f"DEL where {nets[1]}'s delegate fails (a final error must reach the runtime)")
    records = bench.records(pod)
    check_teardown(judge, records)
    after_failure = [r.network for r in records if r.command == "DEL"]
    for later in (nets[0], DEFAULT_NETWORK_NAME):
        judge.require(
            later in after_failure,
            "7.2",
            f"the failed DEL of {nets[1]} must not prevent the tear-down "
            f"of {later}; DELs were {after_failure}",
        )
    bench.unfail(pod)
    retry = bench.cni("DEL", pod)
    if not retry.ok:
        judge.note(
            f"the runtime's retry of DEL, once the delegate no longer fails, failed: {retry.describe()}"
        )


# --- 7.5: Kubernetes' runtimeConfig -------------------------------------------------------------

RUNTIME_VALUES: dict[str, Any] = {
    "portMappings": [{"hostPort": 30080, "containerPort": 80, "protocol": "tcp"}],
    "bandwidth": {
        "ingressRate": 1000000,
        "ingressBurst": 2000000,
        "egressRate": 1000000,
        "egressBurst": 2000000,
    },
}


def runtime_config(bench: Bench, judge: Judge) -> None:
    passed = {k: v for k, v in RUNTIME_VALUES.items() if k in bench.declared_capabilities()}
    if not passed:
        raise Skip(
            "the plugin's configuration declares neither the portMappings nor the bandwidth capability, "
            'so the runtime passes it no runtimeConfig (add "capabilities" to --conf to run this)'
        )
    net = bench.name("rt")
    nad(
        bench,
        net,
        {
            "cniVersion": "${V}",
            "name": net,
            "plugins": [{"type": "npwg-rec-a", "capabilities": {k: True for k in RUNTIME_VALUES}}],
        },
    )
    pod = bench.pod("runtime-config", net)
    add_ok(
        bench,
        judge,
        pod,
        "7.5",
        f"ADD with the runtime's runtimeConfig {sorted(passed)}",
        runtime_config=passed,
    )
    records = [r for r in bench.records(pod) if r.command == "ADD"]
    for r in records:
        if r.network == net:
            leaked = sorted(k for k in passed if k in r.runtime_config)
            judge.require(
                not leaked,
                "7.5",
                f"Kubernetes' runtimeConfig {leaked} must not reach {net}, which is "
                "not the cluster default network (its plugin declares those capabilities)",
            )
        elif r.network == DEFAULT_NETWORK_NAME:
            for key, value in passed.items():
                judge.require(
                    r.runtime_config.get(key) == value,
                    "7.5",
                    f"Kubernetes' runtimeConfig.{key} applies to the cluster default network, whose "
                    f"plugin declares it; it got {r.runtime_config.get(key, '(absent)')!r}",
                )
    judge.require(any(r.network == net for r in records), "7.5", f"{net} was never attached")
    delete(bench, judge, pod)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "config-source-order",
        "where a NAD's CNI configuration comes from: spec.config, then an on-disk "
        "config list, then a config file, else failure",
        ("3.4.1",),
        config_source_order,
    ),
    Scenario(
        "name-injection",
        'a NAD config without "name" reaches each delegate with the NAD\'s name',
        ("3.4.2", "7.1"),
        name_injection,
    ),
    *(
        Scenario(
            f"key-{c.key}",
            f'"{c.key}" becomes runtimeConfig.{c.capability} for the plugins declaring the '
            f"capability; without one the attachment fails",
            (c.section,),
            selection_key(c),
        )
        for c in KEY_CASES
    ),
    Scenario(
        "key-interface",
        '"interface" sets CNI_IFNAME; an interface name used twice fails',
        ("4.1.2.1.5", "4.1.2.1.5.1"),
        interface_key,
    ),
    Scenario(
        "key-cni-args", '"cni-args" merges over the NAD\'s args into args.cni', ("4.1.2.1.6.2",), cni_args
    ),
    Scenario(
        "interface-names",
        "one [container, network, CNI_IFNAME] tuple per attachment, unique names, the same "
        "on ADD, CHECK and DEL",
        ("4.2", "4.2.1"),
        interface_names,
    ),
    Scenario(
        "default-first",
        "the cluster default network is attached first, on the runtime's interface, to every pod",
        ("6", "6.2"),
        default_first,
    ),
    Scenario(
        "add-failure",
        "a failing attachment fails the ADD at once; nothing after it is attempted; every "
        "attempted attachment is torn down",
        ("7.2",),
        add_failure,
    ),
    Scenario(
        "del-reverse",
        "DEL tears down in reverse, continues past a failing attachment and reports the failure",
        ("7.2",),
        del_reverse,
    ),
    Scenario(
        "runtime-config",
        "Kubernetes' runtimeConfig reaches the cluster default network only",
        ("7.5",),
        runtime_config,
    ),
    Scenario(
        "network-status",
        "the network-status annotation: entries, default, interface, mac, ips, dns",
        ("5", "5.1.1", "5.2", "5.3"),
        network_status,
    ),
)
"""Every scenario, in the order they run."""


def select(ids: Iterable[str]) -> list[Scenario]:
    """The scenarios named (all when none); an unknown id is a ValueError listing the known ones."""
    wanted = list(ids)
    known = {s.id: s for s in SCENARIOS}
    unknown = [i for i in wanted if i not in known]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [s for s in SCENARIOS if not wanted or s.id in wanted]


__all__ = ["KEY_CASES", "SCENARIOS", "Outcome", "Scenario", "judge_check", "run_scenario", "select"]
