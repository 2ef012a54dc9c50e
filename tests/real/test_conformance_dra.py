"""`podnetwork conformance --features DRAPlacement,DRANetworkData` on the kit's cluster, with
`podnetwork dra-driver` running on two nodes as tests/real/test_dra_driver.py runs it (its `dra`
fixture: the drivers with tokens of their ServiceAccount, the DeviceClass applied, node B added): the
opt-in features pass as a user runs them, every test of them, and nothing of them is left; with a
driver the cluster does not run, DRAPlacement's tests are skipped saying which DeviceClass is missing.

A module of its own: the fixture's second node stays up for the module, which the one-node run of
tests/real/test_conformance.py must not see.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.kep.tests import ALL
from tests.real.cluster_support import Api
from tests.real.test_conformance import (
    _conformance,
    _nothing_left,
    _outcomes,
    _podnetworks,
    _said,
    bridge_networks,
    report_file,  # noqa: F401 (a fixture of this module too)
)
from tests.real.test_dra_driver import (
    OFFERS,
    Dra,
    dra,  # noqa: F401 (a fixture of this module too)
)

pytestmark = pytest.mark.usefixtures("components")

FEATURE = "DRAPlacement"
TESTS = {t.name for t in ALL if FEATURE in t.features}
NETWORK_DATA = "DRANetworkData"


def _offers(api: Api, running: Dra) -> dict[str, str | None]:
    return {n.name: api.get(f"/api/v1/nodes/{n.name}")["metadata"].get("annotations", {}).get(OFFERS)
            for n in (running.a, running.b)}


def test_the_dra_placement_and_network_data_features_pass_with_the_driver_on_two_nodes(
        dra: Dra, api: Api, ns: str, report_file: Path) -> None:  # noqa: F811 (the fixtures imported above)
    offers = _offers(api, dra)
    # DRANetworkData's network: a PodNetwork of the bridge on a NAD of a bridge and a subnet of its own,
    # which the agent attaches (the pod names it in its networks too)
    with bridge_networks(api, ns, ("service",)) as names:
        before = _podnetworks(api)
        try:
            proc, made = _conformance(dra.cluster, report_file, "--features", f"{FEATURE},{NETWORK_DATA}",
                                      "--dra-network", names["service"])
        finally:
            _nothing_left(api, before)
    assert made is not None, f"no report written: {_said(proc)}"
    passed, failed, skipped = _outcomes(made)
    assert (passed, failed, skipped) == (TESTS | {NETWORK_DATA}, {}, {}), (
        f"{json.dumps([failed, skipped], indent=1)}\n{_said(proc)}")
    assert proc.returncode == 0, _said(proc)
    assert "cleanupProblems" not in made, made["cleanupProblems"]
    assert made["requestedFeatures"] == [FEATURE, NETWORK_DATA]
    assert _offers(api, dra) == offers, "the tests put the nodes' PodNetworks annotation back"

    before = _podnetworks(api)
    try:
        proc, made = _conformance(dra.cluster, report_file, "--features", FEATURE, "--dra-driver",
                                  "absent.example.com")
    finally:
        _nothing_left(api, before)
    assert made is not None, f"no report written: {_said(proc)}"
    passed, failed, skipped = _outcomes(made)
    assert (passed, failed, set(skipped)) == (set(), {}, TESTS), _said(proc)
    assert all(reason.startswith("no DeviceClass absent.example.com: no DRA driver serves PodNetworks")
               for reason in skipped.values()), skipped
    assert proc.returncode == 0, _said(proc)
