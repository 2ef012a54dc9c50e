"""How the harness judges recordings, as pure functions over made-up records (no plugin runs).

The tear-down rule of NPWG 7.2 (every attempted attachment DELed after its ADD, in
reverse order) and the grouping of a config list's executions into attachments.
The CNI tier proves the same against real plugins in tests/cni/test_npwg_conformance.py.
"""

from __future__ import annotations

from conformance.npwg.bench import Record
from conformance.npwg.scenarios import Judge, attachments, check_teardown


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
