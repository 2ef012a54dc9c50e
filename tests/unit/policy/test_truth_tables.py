"""The reference evaluator against the hand-written truth tables of tests/policy_cases.py
(the upstream netpol e2e topology: x/y/z × a/b/c), every probe of every case."""

from __future__ import annotations

import pytest

from bridge import policy as netpol
from bridge.policy import evaluate, scope
from tests import policy_cases
from tests.policy_cases import DEFAULT_TOPOLOGY as T


def _matrix(case: policy_cases.Case, probe: policy_cases.Probe) -> dict[tuple[str, str], bool]:
    world = policy_cases.world(T, case.policies(T))
    scopes = scope.scopes(world)
    protocol: netpol.ConnectionProtocol = netpol.ICMP if probe.protocol == "ICMP" else netpol.Protocol(probe.protocol)
    return {
        (s, d): evaluate.allowed(
            world, netpol.Connection.between(world, s, d, T.network, protocol, probe.port), scopes
        )
        for s in policy_cases.POD_KEYS
        for d in policy_cases.POD_KEYS
    }


@pytest.mark.parametrize(
    ("case", "probe"),
    [(c, p) for c in policy_cases.CASES for p in c.expected],
    ids=lambda v: v.name if isinstance(v, policy_cases.Case) else str(v),
)
def test_the_evaluator_gives_the_upstream_truth_table(case: policy_cases.Case, probe: policy_cases.Probe) -> None:
    got = _matrix(case, probe)
    want = case.expected[probe].matrix()
    assert got == want, f"{case.name} {probe}\nwant:\n{policy_cases.render(want)}\ngot:\n{policy_cases.render(got)}"


def test_every_case_blocks_something_or_is_meant_to_be_open() -> None:
    # A truth table that allows everything proves nothing unless the case says so.
    open_cases = {"no-policy", "policy-for-another-network"}
    for case in policy_cases.CASES:
        blocked = any(not v for r in case.expected.values() for v in r.matrix().values())
        assert blocked != (case.name in open_cases), case.name


def test_the_cases_cover_what_the_issue_lists() -> None:
    names = {c.name for c in policy_cases.CASES}
    assert {
        "deny-all-ingress", "deny-all-egress", "allow-from-same-namespace", "allow-from-labelled-namespace",
        "allow-from-labelled-pods-in-labelled-namespaces", "named-port-ingress", "end-port",
        "ip-block-with-except", "egress-to-ip-block", "policies-add-up",
    } <= names
