"""NPWG 4.1.2.1.x: the keys of a selection element, the capabilities they need and the
runtimeConfig, `"interface"` (CNI_IFNAME) and `"cni-args"`, each judged as a scenario."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conformance.npwg.bench import Bench
from conformance.npwg.judging import Judge, add_ok, delete, nad, single


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
        nad(
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
        nad(
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
        add_ok(
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
        delete(bench, judge, pod)

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
    nad(bench, net_a, single(net_a, "npwg-rec-a"))
    nad(bench, net_b, single(net_b, "npwg-rec-b"))
    pod = bench.pod("interface", [{"name": net_a, "interface": "ext0"}, {"name": net_b}])
    bench.make_links(pod)
    add_ok(bench, judge, pod, "4.1.2.1.5.1", 'ADD with "interface": "ext0"')
    delete(bench, judge, pod)
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
    nad(bench, net, single(net, "npwg-rec-a", args={"cni": {"fromNad": "nad", "both": "nad"}}))
    pod = bench.pod("cni-args", [{"name": net, "cni-args": {"both": "pod", "fromPod": "pod"}}])
    add_ok(bench, judge, pod, "4.1.2.1.6.2", 'ADD with "cni-args"')
    got = [r.conf.get("args") for r in bench.records(pod) if r.command == "ADD" and r.network == net]
    want = {"fromNad": "nad", "both": "pod", "fromPod": "pod"}
    args = got[0] if got else None
    judge.require(
        isinstance(args, dict) and args.get("cni") == want,
        "4.1.2.1.6.2",
        f'the delegate must get "args": {{"cni": {want}}} (the pod\'s cni-args over the NAD\'s '
        f"args); it got {args!r}",
    )
    delete(bench, judge, pod)


__all__ = ["KEY_CASES", "KeyCase", "cni_args", "interface_key", "selection_key"]
