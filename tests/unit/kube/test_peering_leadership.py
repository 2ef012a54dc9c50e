"""Who leads a kopf peering, read from its object's status as kopf writes it
(podnetwork.kube.peering): a replica leads only once its own keep-alive is there and no live
peer outranks it, and a replica joining by arrival ranks below every live peer."""

from __future__ import annotations

import datetime

from podnetwork.kube import peering

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


def entry(priority: int, seconds_ago: float = 0, lifetime: int = 60) -> dict[str, object]:
    return {"priority": priority, "lifetime": lifetime,
            "lastseen": (NOW - datetime.timedelta(seconds=seconds_ago)).isoformat()}


def test_an_empty_status_leads_nobody_though_nobody_outranks_anyone() -> None:
    # The younger replica of a fresh install read the object before anyone had written to it.
    assert not peering.outranked({}, "b", 5, NOW)
    assert not peering.leads({}, "b", 5, NOW)


def test_a_replica_leads_once_its_own_live_keep_alive_is_there_and_no_live_peer_outranks_it() -> None:
    assert peering.leads({"b": entry(5)}, "b", 5, NOW)
    assert not peering.leads({"b": entry(5, seconds_ago=61)}, "b", 5, NOW)
    assert not peering.leads({"b": entry(5), "a": entry(7)}, "b", 5, NOW)
    assert not peering.leads({"b": entry(5), "a": entry(5)}, "b", 5, NOW)  # kopf pauses both
    assert peering.leads({"b": entry(5), "a": entry(7, seconds_ago=61)}, "b", 5, NOW)


def test_a_replica_joining_by_arrival_ranks_below_every_live_peer_and_keeps_its_own_value_when_alone() -> None:
    assert peering.arrival_priority({}, "b", -100, NOW) == -100
    # Its own entry from before a restart, and dead peers, rank nobody.
    assert peering.arrival_priority({"b": entry(50), "x": entry(9, seconds_ago=90)}, "b", -100, NOW) == -100
    assert peering.arrival_priority({"a": entry(-300)}, "b", -100, NOW) == -301
    assert peering.arrival_priority({"a": entry(10)}, "b", -100, NOW) == -100
    status = {"a": entry(-300), "c": entry(-200)}
    joined = peering.arrival_priority(status, "b", -100, NOW)
    assert not peering.leads({**status, "b": entry(joined)}, "b", joined, NOW)
