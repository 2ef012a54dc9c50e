"""Live IP changes (KEP Req 25), the pure part: the status an address set gives
(`addresswatch.updated_status`), which addresses are pod IPs, reading the kernel's
messages (the bytes the kernel writes, through `bridge.agent.netns.netlink`'s parsers), and the debounce (`flush_at`, `retry_delay`).
The watch itself, with real namespaces and plugins, is tests/cni/test_live_ip_changes.py.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from bridge.agent.netns import netlink
from bridge.agent.pods.addresswatch import (
    IFA_F_DADFAILED,
    IFA_F_TENTATIVE,
    Address,
    Settings,
    cap_message,
    cap_status,
    change_summary,
    flush_at,
    interface_ips,
    is_pod_ip,
    link_names,
    observed_addresses,
    retry_delay,
    updated_status,
)
from bridge.translate import podips
from tests.unit.netlink_support import (
    IFA_ADDRESS,
    IFA_LOCAL,
    address_payload,
    flags_attr,
    ip_attr,
    link_payload,
)

STATUS: list[dict[str, Any]] = [
    {"name": "kubenet", "interface": "eth0", "ips": ["10.1.0.5/24"], "mac": "aa:bb:cc:00:00:01", "default": True},
    {"name": "default/blue", "interface": "net1", "ips": ["10.2.0.7/24"], "default": False,
     "dns": {"nameservers": ["10.2.0.1"]}},
]


def test_an_added_address_is_appended_to_its_interface_s_entry_and_nothing_else_changes() -> None:
    observed = {
        "lo": [Address("127.0.0.1", 8)],
        "eth0": [Address("10.1.0.5", 24), Address("2001:db8::5", 64)],
        "net1": [Address("10.2.0.7", 24)],
    }
    new = updated_status(STATUS, observed)
    assert new[0] == {**STATUS[0], "ips": ["10.1.0.5/24", "2001:db8::5/64"]}
    assert new[1] == STATUS[1]
    assert STATUS[0]["ips"] == ["10.1.0.5/24"], "the old status is not modified"


def test_a_removed_address_leaves_the_entry_and_an_interface_without_any_drops_ips() -> None:
    new = updated_status(STATUS, {"eth0": [Address("10.1.0.5", 24)], "net1": []})
    assert new[0] == STATUS[0]
    assert "ips" not in new[1] and new[1]["dns"] == STATUS[1]["dns"]


def test_the_old_ips_keep_their_order_so_the_pod_ip_of_each_family_stays_the_same() -> None:
    status = [{"name": "kubenet", "interface": "eth0", "ips": ["10.1.0.5/24", "fd00::5/64"], "default": True}]
    # The kernel lists a newer address first; the status keeps the plugin's address first.
    observed = {"eth0": [Address("fd00::9", 64), Address("10.1.0.9", 24), Address("fd00::5", 64),
                         Address("10.1.0.5", 24)]}
    assert updated_status(status, observed)[0]["ips"] == ["10.1.0.5/24", "fd00::5/64", "fd00::9/64", "10.1.0.9/24"]


def test_an_entry_whose_interface_is_not_in_the_namespace_keeps_its_ips() -> None:
    status = [*STATUS, {"name": "default/sriov", "interface": "net2", "ips": ["10.3.0.2/24"], "default": False},
              {"name": "default/old", "ips": ["10.4.0.2/24"], "default": False}]
    new = updated_status(status, {"eth0": [Address("10.1.0.5", 24)], "net1": [Address("10.2.0.7", 24)]})
    assert new == status


def test_link_local_ipv6_is_never_a_pod_ip_but_ipv4_link_local_and_ula_are() -> None:
    assert not is_pod_ip(Address("fe80::1", 64))
    assert not is_pod_ip(Address("febf::1", 64)), "fe80::/10 reaches up to febf::"
    assert is_pod_ip(Address("fec0::1", 64))
    assert is_pod_ip(Address("fd00::1", 64))
    assert is_pod_ip(Address("169.254.3.4", 16))
    new = updated_status(STATUS, {"eth0": [Address("10.1.0.5", 24), Address("fe80::a8bb:ccff:fe00:1", 64)],
                                  "net1": [Address("10.2.0.7", 24)]})
    assert new == STATUS


def test_a_tentative_address_is_not_added_until_dad_ends_and_a_failed_one_is_dropped() -> None:
    assert interface_ips(["10.1.0.5/24"], [Address("10.1.0.5", 24), Address("fd00::7", 64, IFA_F_TENTATIVE)]) == [
        "10.1.0.5/24"
    ]
    # Already listed (the plugin reported it before DAD ended): kept.
    assert interface_ips(["fd00::7/64"], [Address("fd00::7", 64, IFA_F_TENTATIVE)]) == ["fd00::7/64"]
    assert interface_ips(["fd00::7/64"], [Address("fd00::7", 64, IFA_F_DADFAILED)]) == []
    assert interface_ips([], [Address("fd00::7", 64)]) == ["fd00::7/64"]


def test_unreadable_old_ips_are_dropped_and_duplicates_reported_once() -> None:
    assert interface_ips(["not-an-ip", 7, "10.1.0.5/24", "10.1.0.5"], [Address("10.1.0.5", 24)]) == ["10.1.0.5/24"]


def test_the_bridge_reads_the_new_status_as_the_pod_s_ipv6_ip() -> None:
    """What the bridge's reverse translation makes of it: the added address is the
    default PodNetwork's IPv6 pod IP; its link-local one is not."""
    from bridge.translate.networks import Translation

    observed = {"eth0": [Address("fe80::1", 64), Address("10.1.0.5", 24), Address("2001:db8::5", 64)]}
    status = updated_status(STATUS[:1], observed)
    ips = podips.pod_ips(status, Translation(elements=[], sources=[], warnings=[]), "default")
    assert [ip["ip"] for ip in ips] == ["10.1.0.5", "2001:db8::5"]


def _link(index: int, name: str) -> tuple[int, str]:
    parsed = netlink.parse_link(memoryview(link_payload(index, name)))
    assert parsed is not None
    return parsed


def _addr(index: int, attrs: list[bytes], prefixlen: int, flags: int = 0) -> netlink.AddressEntry:
    parsed = netlink.parse_address(memoryview(address_payload(index, prefixlen, attrs, flags=flags)))
    assert parsed is not None
    return parsed


def test_kernel_messages_become_addresses_per_interface() -> None:
    links = [_link(1, "lo"), _link(2, "eth0"), _link(3, "net1")]
    addresses = [
        _addr(1, [ip_attr(IFA_ADDRESS, "127.0.0.1"), ip_attr(IFA_LOCAL, "127.0.0.1")], 8),
        # IPv4 point-to-point: IFA_ADDRESS is the peer, IFA_LOCAL the interface's own.
        _addr(2, [ip_attr(IFA_ADDRESS, "10.9.9.9"), ip_attr(IFA_LOCAL, "10.1.0.5")], 32),
        # The 32-bit IFA_FLAGS attribute, when present, is the flags (ifaddrmsg's 8 bits are not).
        _addr(2, [ip_attr(IFA_ADDRESS, "fd00::7"), flags_attr(IFA_F_TENTATIVE)], 64, flags=0),
        _addr(2, [ip_attr(IFA_ADDRESS, "fd00::8")], 64, flags=IFA_F_TENTATIVE),
        _addr(9, [ip_attr(IFA_ADDRESS, "10.7.0.1")], 24),  # an interface gone since the link dump
    ]
    assert observed_addresses(link_names(links), addresses) == {
        "lo": [Address("127.0.0.1", 8)],
        "eth0": [Address("10.1.0.5", 32), Address("fd00::7", 64, IFA_F_TENTATIVE),
                 Address("fd00::8", 64, IFA_F_TENTATIVE)],
        "net1": [],
    }


# --- the debounce ------------------------------------------------------------------------------

S = Settings(quiet=0.5, max_delay=2.0, min_interval=2.0)


def test_a_change_is_looked_at_after_a_quiet_period() -> None:
    assert flush_at(10.0, 10.0, None, S) == 10.5
    assert flush_at(10.0, 10.3, None, S) == 10.8, "each change restarts the quiet period"


def test_a_storm_is_looked_at_no_later_than_max_delay_after_its_first_change() -> None:
    assert flush_at(10.0, 11.9, None, S) == 12.0


def test_two_looks_are_at_least_min_interval_apart() -> None:
    assert flush_at(10.0, 10.0, 9.0, S) == 11.0
    assert flush_at(10.0, 10.0, 5.0, S) == 10.5


def _simulate(changes: list[float], settings: Settings) -> list[float]:
    """The looks an event loop would make, driven by flush_at alone."""
    looks: list[float] = []
    pending: list[float] = []
    events = iter(sorted(changes))
    nxt = next(events, None)
    while nxt is not None or pending:
        due = flush_at(pending[0], pending[-1], looks[-1] if looks else None, settings) if pending else None
        if nxt is not None and (due is None or nxt < due):
            pending.append(nxt)
            nxt = next(events, None)
        else:
            assert due is not None
            looks.append(due)
            pending = []
    return looks


def test_a_change_every_10_ms_for_a_minute_gives_at_most_one_look_per_min_interval() -> None:
    changes = [i * 0.01 for i in range(6000)]
    looks = _simulate(changes, S)
    assert len(looks) <= 60 / S.min_interval + 1
    assert all(b - a >= S.min_interval for a, b in itertools.pairwise(looks))
    assert looks[-1] >= changes[-1], "the last change is seen"


def test_a_burst_is_one_look() -> None:
    assert _simulate([5.0 + i * 0.001 for i in range(100)], S) == [pytest.approx(5.099 + S.quiet)]


def test_failed_writes_back_off_doubling_up_to_the_maximum() -> None:
    assert [retry_delay(n, S) for n in (1, 2, 3, 4, 5, 6, 7)] == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"quiet": -1}, "quiet must not be negative"), ({"quiet": 3, "max_delay": 2}, "max_delay must be at least quiet"),
     ({"max_ips_per_interface": 0}, "max_ips_per_interface must be at least 1"),
     ({"max_status_bytes": 0}, "max_status_bytes must be at least 1")],
)
def test_settings_that_cannot_work_are_refused_with_the_setting_named(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings(**kwargs)


# --- what is written: bounded ------------------------------------------------------------------


def many(n: int, prefix: str = "2001:db8:1::") -> list[str]:
    return [f"{prefix}{i:x}/64" for i in range(1, n + 1)]


def test_thirteen_thousand_addresses_are_cut_to_the_first_of_the_interface_well_under_the_api_limit() -> None:
    observed = {"eth0": [Address("10.1.0.5", 24)] + [Address(ip.split("/")[0], 64) for ip in many(13_000)]}
    new, cut = cap_status(updated_status(STATUS, observed), S)
    ips = new[0]["ips"]
    assert len(ips) == S.max_ips_per_interface and ips[0] == "10.1.0.5/24", "the plugin's address stays first"
    assert cut == {"eth0": (S.max_ips_per_interface, 13_001)}
    assert len(json.dumps(new)) <= S.max_status_bytes < 256 * 1024
    assert new[1] == STATUS[1], "other entries are left alone"


def test_over_the_byte_bound_every_entry_keeps_fewer_but_at_least_its_first() -> None:
    status = [{"name": f"ns/n{i}", "interface": f"net{i}", "ips": many(64, f"2001:db8:{i:x}::")} for i in range(40)]
    settings = Settings(max_status_bytes=16 * 1024)
    new, cut = cap_status(status, settings)
    assert len(json.dumps(new)) <= settings.max_status_bytes
    assert all(1 <= len(e["ips"]) < 64 and e["ips"][0] == status[i]["ips"][0] for i, e in enumerate(new))
    assert set(cut) == {f"net{i}" for i in range(40)}


def test_a_status_within_the_bounds_is_written_as_it_is() -> None:
    assert cap_status(STATUS, S) == ([dict(e) for e in STATUS], {})


def test_the_cap_is_said_with_the_counts_and_the_bounds() -> None:
    message = cap_message({"eth0": (64, 13_001)}, S)
    assert message.startswith("network-status lists only 64 of 13001 addresses of eth0: the agent writes at most 64 ")
    assert "256 KiB" in message and len(message) < 1024


def test_a_change_is_summarized_with_counts_and_the_first_few_addresses() -> None:
    before = [{"interface": "eth0", "ips": ["10.1.0.5/24"]}, {"interface": "net1", "ips": ["10.2.0.7/24"]}]
    after = [{"interface": "eth0", "ips": ["10.1.0.5/24", *many(5000)]}, {"interface": "net1", "ips": ["10.2.0.7/24"]}]
    summary = change_summary(before, after)
    assert summary == ("eth0: 1 -> 5001 IPs, added 2001:db8:1::1/64, 2001:db8:1::2/64, 2001:db8:1::3/64, "
                       "... (4997 more)")
    assert change_summary(after, before).startswith("eth0: 5001 -> 1 IPs, removed 2001:db8:1::1/64")
