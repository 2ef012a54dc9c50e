"""Which networks a MultiNetworkPolicy applies to (bridge.policy.scope), and the findings for
policies naming no network, unknown networks or garbage."""

from __future__ import annotations

import pytest

from bridge.policy import NetworkInfo, parse_policy, scope
from bridge.policy.scope import Reason

NETWORKS = {
    n.key: n
    for n in (
        NetworkInfo(podnetwork="storage", nad="infra/storage-nad"),  # a NAD-backed PodNetwork
        NetworkInfo(podnetwork="telco"),  # a KEP-native PodNetwork
        NetworkInfo(nad="x/macvlan1"),  # a NAD no PodNetwork uses (pods select it with the NPWG annotation)
    )
}


def _scope(annotations: dict[str, str]) -> scope.Scope:
    policy = parse_policy({"metadata": {"name": "p", "namespace": "x", "annotations": annotations}, "spec": {"podSelector": {}}})
    return scope.scope(policy, NETWORKS)


@pytest.mark.parametrize(
    ("annotations", "networks"),
    [
        ({"k8s.v1.cni.cncf.io/policy-for": "macvlan1"}, {"x/macvlan1"}),
        ({"k8s.v1.cni.cncf.io/policy-for": "x/macvlan1"}, {"x/macvlan1"}),
        ({"k8s.v1.cni.cncf.io/policy-for": " infra/storage-nad , macvlan1 ,"}, {"storage", "x/macvlan1"}),
        ({"multinetwork.x-k8s.io/policy-for": "storage"}, {"storage"}),
        ({"multinetwork.x-k8s.io/policy-for": "telco,storage"}, {"telco", "storage"}),
        ({"multinetwork.x-k8s.io/policy-for": "telco", "k8s.v1.cni.cncf.io/policy-for": "infra/storage-nad"}, {"telco", "storage"}),
    ],
)
def test_a_policy_applies_to_the_networks_its_annotations_name(annotations: dict[str, str], networks: set[str]) -> None:
    found = _scope(annotations)
    assert found.networks == networks
    assert found.findings == ()


def test_a_nad_backed_podnetwork_is_selected_by_either_name_as_one_network() -> None:
    assert _scope({"k8s.v1.cni.cncf.io/policy-for": "infra/storage-nad"}).networks == _scope(
        {"multinetwork.x-k8s.io/policy-for": "storage"}
    ).networks == {"storage"}


def test_a_bare_nad_name_means_the_policy_namespace() -> None:
    found = _scope({"k8s.v1.cni.cncf.io/policy-for": "storage-nad"})  # x/storage-nad does not exist
    assert found.networks == frozenset()
    assert [f.reason for f in found.findings] == [Reason.NETWORK_NOT_FOUND]
    assert "x/storage-nad" in found.findings[0].message


@pytest.mark.parametrize(
    ("annotations", "reason", "words"),
    [
        ({}, Reason.NO_NETWORK, "names no network"),
        ({"k8s.v1.cni.cncf.io/policy-for": " , "}, Reason.NO_NETWORK, "names no network"),
        ({"multinetwork.x-k8s.io/policy-for": "nope"}, Reason.NETWORK_NOT_FOUND, "no PodNetwork of that name"),
        ({"k8s.v1.cni.cncf.io/policy-for": "a/b/c"}, Reason.INVALID_POLICY_FOR, "namespace/name"),
        ({"k8s.v1.cni.cncf.io/policy-for": "Bad_Name"}, Reason.INVALID_POLICY_FOR, "name"),
        ({"multinetwork.x-k8s.io/policy-for": "x/telco"}, Reason.INVALID_POLICY_FOR, "PodNetwork name"),
        ({"multinetwork.x-k8s.io/policy-for": "default"}, Reason.DEFAULT_NETWORK, "NetworkPolicy"),
    ],
)
def test_a_policy_naming_nothing_usable_applies_to_nothing_and_says_why(
    annotations: dict[str, str], reason: Reason, words: str
) -> None:
    found = _scope(annotations)
    assert found.networks == frozenset()
    assert [f.reason for f in found.findings] == [reason]
    assert words in found.findings[0].message and found.findings[0].policy == "x/p"
    if annotations:
        assert found.findings[0].message.endswith("the policy applies to no network")


def test_a_good_name_still_applies_beside_a_bad_one_with_a_finding_for_the_bad() -> None:
    found = _scope({"multinetwork.x-k8s.io/policy-for": "telco, missing"})
    assert found.networks == {"telco"}
    assert [f.reason for f in found.findings] == [Reason.NETWORK_NOT_FOUND]
    assert "applies to no network" not in found.findings[0].message
