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
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from conformance.npwg.bench import (
    DEFAULT_NETWORK_NAME,
    DEFAULT_TYPE,
    NAMESPACE,
    RUNTIME_IFNAME,
    Bench,
    Invocation,
    Pod,
    Record,
)
from conformance.npwg.kubeapi import AnnotationWrite

STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
#: How long after its ADD answer a plugin may take to write network-status. NPWG 5 only says
#: a plugin "may" publish it, not when: an implementation may answer the runtime first.
STATUS_WAIT_SECONDS = 10.0

Verdict = Literal["passed", "failed", "skipped"]


class Skip(Exception):
    """The scenario cannot judge this plugin (the reason says why); not a failure."""


@dataclass
class Judge:
    """Collects one scenario's failures (each naming its section) and notes."""

    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def require(self, ok: bool, section: str, message: str) -> bool:
        if not ok:
            self.failures.append(f"NPWG {section}: {message}")
        return ok

    def note(self, message: str) -> None:
        self.notes.append(message)

    def invoked(self, inv: Invocation, section: str, what: str) -> bool:
        return self.require(inv.ok, section, f"{what}: the plugin failed, {inv.describe()}")

    def refused(self, inv: Invocation, section: str, what: str) -> bool:
        if inv.ok:
            return self.require(False, section, f"{what}: the plugin succeeded, it must fail")
        return self.require(
            inv.is_cni_error,
            "2.1 (CNI)",
            f"{what}: a failure must be a CNI error object "
            f"with an integer code on stdout, got {inv.describe()}",
        )


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


# --- reading the recordings ----------------------------------------------------------------------


@dataclass(frozen=True)
class Attachment:
    """One network attachment as the delegates saw it: the 4.2.1 tuple and its records."""

    network: str
    ifname: str
    records: tuple[Record, ...]

    @property
    def key(self) -> tuple[str, str]:
        return self.network, self.ifname

    def types(self) -> list[str]:
        return [r.type for r in self.records]


def attachments(records: Iterable[Record], command: str) -> list[Attachment]:
    """The attachments `command` reached, in the order of their first execution."""
    grouped: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        if r.command == command:
            grouped.setdefault((r.network, r.ifname), []).append(r)
    return [Attachment(k[0], k[1], tuple(v)) for k, v in grouped.items()]


def first_seq(records: Iterable[Record], command: str) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for r in records:
        if r.command == command:
            out.setdefault((r.network, r.ifname), r.seq)
    return out


def names(atts: Iterable[Attachment]) -> list[str]:
    return [f"{a.network}@{a.ifname}" for a in atts]


def _add_ok(bench: Bench, judge: Judge, pod: Pod, section: str, what: str, **kw: Any) -> Invocation:
    inv = bench.cni("ADD", pod, **kw)
    judge.invoked(inv, section, what)
    return inv


def _del(bench: Bench, judge: Judge, pod: Pod, section: str = "7.2", what: str = "DEL") -> Invocation:
    inv = bench.cni("DEL", pod)
    judge.invoked(inv, section, what)
    return inv


def _single(network: str, type_: str, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "${V}", "name": network, "type": type_, **extra}


def _conf(bench: Bench, conf: Mapping[str, Any]) -> dict[str, Any]:
    text = json.dumps(conf).replace("${V}", bench.cni_version)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _nad(bench: Bench, name: str, conf: Mapping[str, Any] | None) -> None:
    bench.nad(name, None if conf is None else _conf(bench, conf))


def check_teardown(judge: Judge, records: list[Record], section: str = "7.2") -> None:
    """Every attachment ADD reached was DELed after it, first DELs in the reverse order of the ADDs."""
    adds = first_seq(records, "ADD")
    dels: dict[tuple[str, str], int] = {}
    for r in records:
        if r.command == "DEL" and (r.network, r.ifname) in adds and r.seq > adds[(r.network, r.ifname)]:
            dels.setdefault((r.network, r.ifname), r.seq)
    missing = [f"{n}@{i}" for (n, i) in adds if (n, i) not in dels]
    judge.require(
        not missing,
        section,
        f"every attachment attempted during set-up must be torn down; never DELed: {', '.join(missing)}",
    )
    added_order = [k for k, _ in sorted(adds.items(), key=lambda kv: kv[1]) if k in dels]
    deleted_order = [k for k, _ in sorted(dels.items(), key=lambda kv: kv[1])]
    judge.require(
        deleted_order == list(reversed(added_order)),
        section,
        "attachments must be torn down in the reverse order of set-up (as CNI DELs a list): ADD order "
        f"{', '.join(f'{n}@{i}' for n, i in added_order)}; DEL order "
        f"{', '.join(f'{n}@{i}' for n, i in deleted_order)}",
    )


# --- 3.4.1 and 3.4.2 -----------------------------------------------------------------------------


def config_source_order(bench: Bench, judge: Judge) -> None:
    from_spec, from_list, from_file, nowhere = (
        bench.name(n) for n in ("src-spec", "src-list", "src-file", "src-none")
    )
    v = bench.cni_version
    _nad(bench, from_spec, _single(from_spec, "npwg-rec-nad"))
    bench.on_disk(
        "10-spec-decoy.conflist",
        {"cniVersion": v, "name": from_spec, "plugins": [{"type": "npwg-rec-decoy"}]},
    )
    # 3.2.4: no spec; a config list and a single config on disk both carry the name.
    _nad(bench, from_list, None)
    bench.on_disk("20-a.conf", {"cniVersion": v, "name": from_list, "type": "npwg-rec-decoy"})
    bench.on_disk(
        "30-b.conflist", {"cniVersion": v, "name": from_list, "plugins": [{"type": "npwg-rec-conflist"}]}
    )
    # The file's name says nothing: a config list named after the NAD by file name only is no match.
    _nad(bench, from_file, None)
    bench.on_disk(
        f"{from_file}.conflist",
        {"cniVersion": v, "name": "not-" + from_file, "plugins": [{"type": "npwg-rec-decoy"}]},
    )
    bench.on_disk("40-c.conf", {"cniVersion": v, "name": from_file, "type": "npwg-rec-conf"})
    _nad(bench, nowhere, None)

    pod = bench.pod("source-order", f"{from_spec},{from_list},{from_file}")
    _add_ok(bench, judge, pod, "3.4.1", "ADD of a pod selecting three NADs")
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
    _del(bench, judge, pod)

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
    _add_ok(bench, judge, pod, "3.4.2", 'ADD of a pod selecting NADs whose config omits "name"')
    records = bench.records(pod)
    for command in ("ADD", "DEL"):
        if command == "DEL":
            _del(bench, judge, pod)
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


# --- 4.1.2.1.x: selection keys, capabilities and runtimeConfig -----------------------------------


@dataclass(frozen=True)
class KeyCase:
    key: str
    section: str
    capability: str
    value: Any
    same: Callable[[Any], bool]
    expected: str


def _ports_same(got: Any) -> bool:
    if not isinstance(got, list) or len(got) != 1 or not isinstance(got[0], dict):
        return False
    entry = got[0]
    return (
        entry.get("hostPort") == 8080
        and entry.get("containerPort") == 80
        and str(entry.get("protocol", "tcp")).lower() == "tcp"
    )


KEY_CASES = (
    KeyCase(
        "ips",
        "4.1.2.1.3.2",
        "ips",
        ["10.2.2.42/24", "2001:db8::5/64"],
        lambda got: got == ["10.2.2.42/24", "2001:db8::5/64"],
        '["10.2.2.42/24", "2001:db8::5/64"]',
    ),
    KeyCase(
        "mac",
        "4.1.2.1.4.2",
        "mac",
        "02:23:45:67:89:01",
        lambda got: isinstance(got, str) and got.lower() == "02:23:45:67:89:01",
        '"02:23:45:67:89:01"',
    ),
    KeyCase(
        "portMappings",
        "4.1.2.1.7.2",
        "portMappings",
        [{"hostPort": 8080, "containerPort": 80, "protocol": "TCP"}],
        _ports_same,
        '[{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}] (CONVENTIONS.md; protocol in any case)',
    ),
    KeyCase(
        "bandwidth",
        "4.1.2.1.8.2",
        "bandwidth",
        {"ingressRate": 2048, "ingressBurst": 1600, "egressRate": 4096, "egressBurst": 1600},
        lambda got: (
            got == {"ingressRate": 2048, "ingressBurst": 1600, "egressRate": 4096, "egressBurst": 1600}
        ),
        '{"ingressRate": 2048, "ingressBurst": 1600, "egressRate": 4096, "egressBurst": 1600}',
    ),
    KeyCase(
        "infiniband-guid",
        "4.1.2.1.10.2",
        "infinibandGUID",
        "24:8a:07:03:00:8d:ae:2f",
        lambda got: isinstance(got, str) and got.lower() == "24:8a:07:03:00:8d:ae:2f",
        '"24:8a:07:03:00:8d:ae:2f"',
    ),
)


def selection_key(case: KeyCase) -> Callable[[Bench, Judge], None]:
    def run(bench: Bench, judge: Judge) -> None:
        slug = case.key.lower()
        declared, undeclared = bench.name(f"cap-{slug}"), bench.name(f"nocap-{slug}")
        _nad(
            bench,
            declared,
            {
                "cniVersion": "${V}",
                "name": declared,
                "plugins": [
                    {"type": "npwg-rec-cap", "capabilities": {case.capability: True}},
                    {"type": "npwg-rec-b"},
                ],
            },
        )
        other = "mac" if case.capability != "mac" else "ips"
        _nad(
            bench,
            undeclared,
            {
                "cniVersion": "${V}",
                "name": undeclared,
                "plugins": [
                    {"type": "npwg-rec-nocap", "capabilities": {case.capability: False, other: True}}
                ],
            },
        )

        pod = bench.pod(f"key-{slug}", [{"name": declared, case.key: case.value}])
        _add_ok(
            bench,
            judge,
            pod,
            case.section,
            f"ADD with {case.key!r} on a network whose plugin declares the {case.capability!r} capability",
        )
        got = [
            r.runtime_config.get(case.capability, "(absent)")
            for r in bench.records(pod)
            if r.command == "ADD" and r.type == "npwg-rec-cap"
        ]
        judge.require(
            len(got) == 1 and case.same(got[0]),
            case.section,
            f"the plugin declaring {case.capability!r} must get runtimeConfig.{case.capability} = "
            f"{case.expected}; it got {got[0] if got else 'no ADD at all'}",
        )
        _del(bench, judge, pod)

        refused = bench.pod(f"nokey-{slug}", [{"name": undeclared, case.key: case.value}])
        judge.refused(
            bench.cni("ADD", refused),
            case.section,
            f"ADD with {case.key!r} on a network where no plugin sets the {case.capability!r} "
            "capability to true (the entire attachment request must fail)",
        )
        bench.cni("DEL", refused)

    return run


def interface_key(bench: Bench, judge: Judge) -> None:
    net_a, net_b = bench.name("if-a"), bench.name("if-b")
    _nad(bench, net_a, _single(net_a, "npwg-rec-a"))
    _nad(bench, net_b, _single(net_b, "npwg-rec-b"))
    pod = bench.pod("interface", [{"name": net_a, "interface": "ext0"}, {"name": net_b}])
    bench.make_links(pod)
    _add_ok(bench, judge, pod, "4.1.2.1.5.1", 'ADD with "interface": "ext0"')
    _del(bench, judge, pod)
    records = bench.records(pod)
    for command in ("ADD", "DEL"):
        ifnames = [r.ifname for r in records if r.command == command and r.network == net_a]
        judge.require(
            bool(ifnames) and all(i == "ext0" for i in ifnames),
            "4.1.2.1.5.1",
            f'{command} of {net_a} must run with CNI_IFNAME=ext0, the selection\'s "interface"; '
            f"it ran with {ifnames or 'nothing'}",
        )

    twice = bench.pod(
        "interface-twice", [{"name": net_a, "interface": "dup0"}, {"name": net_b, "interface": "dup0"}]
    )
    # 4.1.2.1.5 says "used by a previous network attachment", not how to tell: the delegates
    # make what they report, so a plugin may look in the pod's namespace (Multus does).
    bench.make_links(twice)
    judge.refused(
        bench.cni("ADD", twice),
        "4.1.2.1.5",
        'ADD of two attachments asking for the same interface "dup0" (the second must fail)',
    )
    dup_adds = [r.ifname for r in bench.records(twice) if r.command == "ADD" and r.network == net_b]
    judge.require(
        not dup_adds,
        "4.1.2.1.5",
        f'{net_b} asks for "dup0", already used by {net_a}: its '
        f"attachment must fail, yet its delegate ran ADD with CNI_IFNAME={dup_adds}",
    )
    bench.cni("DEL", twice)


def cni_args(bench: Bench, judge: Judge) -> None:
    net = bench.name("args")
    _nad(bench, net, _single(net, "npwg-rec-a", args={"cni": {"fromNad": "nad", "both": "nad"}}))
    pod = bench.pod("cni-args", [{"name": net, "cni-args": {"both": "pod", "fromPod": "pod"}}])
    _add_ok(bench, judge, pod, "4.1.2.1.6.2", 'ADD with "cni-args"')
    got = [r.conf.get("args") for r in bench.records(pod) if r.command == "ADD" and r.network == net]
    want = {"fromNad": "nad", "both": "pod", "fromPod": "pod"}
    args = got[0] if got else None
    judge.require(
        isinstance(args, dict) and args.get("cni") == want,
        "4.1.2.1.6.2",
        f'the delegate must get "args": {{"cni": {want}}} (the pod\'s cni-args over the NAD\'s '
        f"args); it got {args!r}",
    )
    _del(bench, judge, pod)


# --- 4.2.1: one tuple per attachment, unique interface names -------------------------------------


def interface_names(bench: Bench, judge: Judge) -> None:
    twice, other = bench.name("twice"), bench.name("other")
    _nad(bench, twice, _single(twice, "npwg-rec-a"))
    _nad(bench, other, _single(other, "npwg-rec-b"))
    pod = bench.pod("names", f"{twice},{twice},{other}")
    add = _add_ok(bench, judge, pod, "4.2.1", "ADD of a pod selecting the same NAD twice (4.2.2)")
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
    _del(bench, judge, pod)
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
    _nad(bench, net_a, _single(net_a, "npwg-rec-a"))
    _nad(bench, net_b, _single(net_b, "npwg-rec-b"))
    pod = bench.pod("default-first", f"{net_a},{net_b}")
    _add_ok(bench, judge, pod, "6.2", "ADD")
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
    _del(bench, judge, pod)

    bare = bench.pod("default-only")
    _add_ok(bench, judge, bare, "6", "ADD of a pod selecting no network")
    got = names(attachments(bench.records(bare), "ADD"))
    judge.require(
        got == [f"{DEFAULT_NETWORK_NAME}@{RUNTIME_IFNAME}"],
        "6",
        f"every pod is attached to the cluster default network, and a pod selecting none only to it; "
        f"got {got or 'nothing'}",
    )
    _del(bench, judge, bare)


# --- 7.2: failures ------------------------------------------------------------------------------


def add_failure(bench: Bench, judge: Judge) -> None:
    ok_a, bad, ok_c = bench.name("mid-a"), bench.name("mid-fail"), bench.name("mid-c")
    for net, type_ in ((ok_a, "npwg-rec-a"), (bad, "npwg-rec-b"), (ok_c, "npwg-rec-c")):
        _nad(bench, net, _single(net, type_))
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
        _nad(bench, net, _single(net, type_))
    pod = bench.pod("del-reverse", ",".join(nets))
    _add_ok(bench, judge, pod, "7.2", "ADD of three networks")
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
    _nad(
        bench,
        net,
        {
            "cniVersion": "${V}",
            "name": net,
            "plugins": [{"type": "npwg-rec-a", "capabilities": {k: True for k in RUNTIME_VALUES}}],
        },
    )
    pod = bench.pod("runtime-config", net)
    _add_ok(
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
    _del(bench, judge, pod)


# --- 5: network-status --------------------------------------------------------------------------


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
        _nad(bench, net, _single(net, type_))
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
    add = _add_ok(bench, judge, pod, "5", "ADD of four attachments")
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
    _del(bench, judge, pod)
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
    defaults = [e for e in status if e.get("default") is True]
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
    adds = {a.network: a for a in attachments(records, "ADD")}

    entry_full = next((e for e in status if _entry_name_is(e, full)), None)
    if judge.require(entry_full is not None, "5.3.1", f"no entry names {NAMESPACE}/{full}") and entry_full:
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

    entry_bare = next((e for e in status if _entry_name_is(e, bare)), None)
    if judge.require(entry_bare is not None, "5.3.1", f"no entry names {NAMESPACE}/{bare}") and entry_bare:
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

    if defaults:
        d = defaults[0]
        default_add = adds.get(DEFAULT_NETWORK_NAME)
        if default_add is not None:
            judge.require(
                d.get("interface") == default_add.ifname,
                "5.3.2.1",
                f"the default entry's \"interface\" is its result's sandbox interface "
                f"{default_add.ifname!r}; got {d.get('interface')!r}",
            )
            judge.require(
                bool(d.get("ips")), "5.3.3.1", f"the default entry must report its result's IPs: {d}"
            )


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
