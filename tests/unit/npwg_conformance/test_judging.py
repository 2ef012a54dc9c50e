"""How the harness judges recordings, as pure functions over made-up records (no plugin runs).

The tear-down rule of NPWG 7.2 (every attempted attachment DELed after its ADD, in
reverse order), the grouping of a config list's executions into attachments, CHECK's
tuples (4.2.1), and the network-status judge (5) on what Multus v4.2.4 wrote
(../shared/evidence/).
The CNI tier proves the same against real plugins in tests/cni/test_npwg_conformance.py.
"""

from __future__ import annotations

from typing import Any

from conformance.npwg.bench import Record
from conformance.npwg.judging import Judge, attachments, check_teardown
from conformance.npwg.networkstatus import judge_status
from conformance.npwg.scenarios import judge_check


def records(*steps: str) -> list[Record]:
    """`"ADD a net1 typeA"` -> a Record of that command, network, interface and plugin type."""
    out = []
    for seq, step in enumerate(steps):
        command, network, ifname, type_ = step.split()
        env = {"CNI_COMMAND": command, "CNI_IFNAME": ifname, "CNI_CONTAINERID": "c1"}
        out.append(Record(seq, type_, env, {"name": network}, True))
    return out


ADDS = ("ADD default eth0 d", "ADD a net1 x", "ADD a net1 y", "ADD b net2 x")


def test_a_reverse_teardown_of_every_attachment_passes() -> None:
    judge = Judge()
    check_teardown(judge, records(*ADDS, "DEL b net2 x", "DEL a net1 y", "DEL a net1 x", "DEL default eth0 d"))
    assert judge.failures == []


def test_a_forward_teardown_fails_naming_7_2_and_both_orders() -> None:
    judge = Judge()
    check_teardown(judge, records(*ADDS, "DEL default eth0 d", "DEL a net1 x", "DEL b net2 x"))
    assert judge.failures == [
        "NPWG 7.2: attachments must be torn down in the reverse order of set-up (as CNI DELs a list): ADD order "
        "default@eth0, a@net1, b@net2; DEL order default@eth0, a@net1, b@net2"
    ]


def test_an_attachment_never_deleted_fails_naming_it() -> None:
    judge = Judge()
    check_teardown(judge, records(*ADDS, "DEL b net2 x", "DEL default eth0 d"))
    assert judge.failures[0].startswith("NPWG 7.2: every attachment attempted during set-up must be torn down")
    assert judge.failures[0].endswith("never DELed: a@net1")


def test_a_del_before_the_add_does_not_count_as_its_teardown() -> None:
    judge = Judge()
    check_teardown(judge, records("DEL a net1 x", "ADD a net1 x"))
    assert judge.failures and "never DELed: a@net1" in judge.failures[0]


def test_the_plugins_of_one_list_make_one_attachment_per_network_and_interface() -> None:
    got = attachments(records(*ADDS), "ADD")
    assert [(a.network, a.ifname, a.types()) for a in got] == [
        ("default", "eth0", ["d"]), ("a", "net1", ["x", "y"]), ("b", "net2", ["x"])]


# --- CHECK (4.2.1): the tuple of what is checked, not whether a plugin checks ------------------------


def test_a_plugin_whose_check_reaches_no_attachment_gets_a_note_not_a_failure() -> None:
    # Multus thin's CmdCheck runs only the delegates of its own configuration: with
    # "clusterNetwork", none, and never the pod's NADs. 4.2.1 rules the tuple of each operation.
    judge = Judge()
    judge_check(judge, attachments(records(*ADDS[1:]), "ADD"), [])
    assert judge.failures == []
    assert judge.notes == [
        "CHECK reached none of the selected attachments (not checked: a@net1, b@net2); NPWG 4.2.1 "
        "constrains the tuple of each operation, not which operations a plugin runs, while CNI's CHECK "
        "expects a plugin to check what it set up"
    ]


def test_a_check_with_a_tuple_no_add_used_fails_4_2_1() -> None:
    judge = Judge()
    adds = attachments(records(*ADDS[1:]), "ADD")
    checked = attachments(records("CHECK a net1 x", "CHECK a net7 x"), "CHECK")
    judge_check(judge, adds, checked)
    assert judge.failures[0] == (
        "NPWG 4.2.1: CHECK must reach an attachment with its ADD's [container, network, CNI_IFNAME]: "
        "ADD ['a@net1', 'b@net2']; CHECK also ran ['a@net7'], which no ADD set up")
    assert any("4.2.1 (CNI CHECK)" in f and "a@net1" in f for f in judge.failures), "no prevResult"
    assert "not checked: b@net2" in judge.notes[0]


# --- network-status (5): what Multus v4.2.4 wrote, judged rule by rule -----------------------------

NS = "npwgc"
DNS = {"nameservers": ["192.0.2.1"], "domain": "example.com", "search": ["eng.example.com"]}
STATUS_ADDS = records("ADD npwgc-default eth0 d", "ADD st-full net1 a", "ADD st-bare net2 b",
                      "ADD st-twice net3 c", "ADD st-twice net4 c")
MULTUS_STATUS = [
    {"name": "npwgc-default", "interface": "eth0", "ips": ["10.1.0.2"], "mac": "02:00:00:00:00:01", "default": True,
     "dns": {}},
    # One entry per sandbox interface (the NAD client's CreateNetworkStatuses), "default" left out when
    # false (omitempty), every IP of a one-interface result (CreateNetworkStatus).
    {"name": f"{NS}/st-full", "interface": "net1", "ips": ["192.0.2.2", "2001:db8::2234"],
     "mac": "0a:00:00:00:00:01", "dns": DNS},
    {"name": f"{NS}/st-full", "interface": "extra0", "ips": ["192.0.2.3"], "mac": "0a:00:00:00:00:02", "dns": DNS},
    {"name": f"{NS}/st-bare", "ips": ["198.51.100.7", "198.51.100.5"], "dns": {}},
    {"name": f"{NS}/st-twice", "interface": "net3", "ips": ["10.88.112.202"], "mac": "02:02:37:02:d1:86", "dns": {}},
    {"name": f"{NS}/st-twice", "interface": "net4", "ips": ["10.238.216.186"], "mac": "02:62:f4:91:f3:38",
     "dns": {}},
]


def _status_failures(status: list[dict[str, Any]]) -> list[str]:
    judge = Judge()
    judge_status(judge, status, STATUS_ADDS, full="st-full", bare="st-bare", twice="st-twice")
    return judge.failures


def test_multus_status_fails_each_rule_it_breaks_once_and_no_other() -> None:
    failures = _status_failures(MULTUS_STATUS)
    missing_default = [f for f in failures if f.startswith('NPWG 5.3.5: "default" is required and boolean')]
    assert len(missing_default) == 5, "every entry but the default network's omits it"
    rest = [f for f in failures if f not in missing_default]
    assert [f.split(":")[0] for f in rest] == ["NPWG 5.1.1", "NPWG 5.3.3, 5.3.3.1"], rest
    assert rest[0].startswith("NPWG 5.1.1: npwgc/st-full: 2 entries for 1 attachment(s) (interfaces ['net1', "
                              "'extra0']); an attachment's status is taken from the first sandbox interface")
    assert "198.51.100.5, never the host interface's 198.51.100.7" in rest[1]
    assert not any("default network" in f and "st-full" in f for f in failures), \
        "a missing default is not a claim to be the default network"


def test_the_same_status_with_default_false_one_entry_per_attachment_and_pod_ips_passes() -> None:
    fixed = [dict(e, default=e.get("default", False)) for e in MULTUS_STATUS if e.get("interface") != "extra0"]
    fixed[2] = dict(fixed[2], ips=["198.51.100.5"])
    assert _status_failures(fixed) == []


def test_an_entry_that_claims_the_default_network_fails_5_3_5() -> None:
    claimed = [dict(e, default=e.get("default", False)) for e in MULTUS_STATUS if e.get("interface") != "extra0"]
    claimed[2] = dict(claimed[2], ips=["198.51.100.5"])
    claimed[1] = dict(claimed[1], default=True)
    failures = _status_failures(claimed)
    assert "NPWG 5.3.5: st-full is marked the default network; it is not" in failures
