"""Which networks a MultiNetworkPolicy applies to, from its two `policy-for` annotations. Pure.

- `k8s.v1.cni.cncf.io/policy-for`: NetworkAttachmentDefinitions, comma-separated, each
  `name` (in the policy's namespace) or `namespace/name`, as multi-networkpolicy reads it;
- `multinetwork.x-k8s.io/policy-for`: PodNetworks by name, comma-separated.

Whitespace around items is ignored, and so are empty items (`a,,b`, a trailing comma). A
NAD-backed PodNetwork is selected by either of its names; a PodNetworkAttachment is not a
network of its own (its pods are on its PodNetwork), so it is covered through its PodNetwork
and is never named here.

A policy whose annotations name no network, only networks the world does not know, or
only garbage, applies to nothing: `Scope.networks` is empty and `Scope.findings` says why,
for the edge to turn into an Event on the policy and a log line. A policy that names a
good network and a bad one applies to the good one and carries a finding for the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from bridge import npwg
from bridge.policy.model import MultiNetworkPolicy
from bridge.policy.world import NetworkInfo, World
from podnetwork.ground import constants, excerpts


class Reason(StrEnum):
    """Why a policy, or part of it, applies to nothing: the Event reasons of a policy."""

    NO_NETWORK = "NoNetworkSelected"
    """Neither annotation names a network."""
    NETWORK_NOT_FOUND = "NetworkNotFound"
    """An item names a network (PodNetwork or NAD) that does not exist."""
    INVALID_POLICY_FOR = "InvalidPolicyFor"
    """An item is not a name (bad characters, too long, `a/b/c`)."""
    DEFAULT_NETWORK = "DefaultNetworkNotCovered"
    """An item names the cluster default PodNetwork, which NetworkPolicy governs."""


@dataclass(frozen=True, slots=True)
class Finding:
    """Something the owner of a policy should know: a reason (CamelCase) and a message."""

    policy: str
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Scope:
    """The keys (`NetworkInfo.key`) of the networks a policy applies to, and what was wrong."""

    networks: frozenset[str]
    findings: tuple[Finding, ...] = ()


def _items(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _nad_key(item: str, namespace: str) -> tuple[str | None, str | None]:
    """(`namespace/name`, None) or (None, why `item` is not a NAD's name)."""
    parts = item.split("/")
    if len(parts) == 1:
        parts = [namespace, *parts]
    if len(parts) != 2:
        return None, "must be a NetworkAttachmentDefinition's name or namespace/name"
    ns, name = parts
    if problem := npwg.name_problem(ns, max_length=npwg.NAMESPACE_MAX):
        return None, f"namespace {problem}"
    if problem := npwg.name_problem(name):
        return None, f"name {problem}"
    return f"{ns}/{name}", None


def scope(policy: MultiNetworkPolicy, networks: Mapping[str, NetworkInfo]) -> Scope:
    """The networks `policy` applies to among `networks` (keyed by `NetworkInfo.key`)."""
    by_nad = {n.nad: n.key for n in networks.values() if n.nad}
    by_podnetwork = {n.podnetwork: n.key for n in networks.values() if n.podnetwork}
    found: set[str] = set()
    findings: list[Finding] = []

    def finding(reason: Reason, message: str) -> None:
        findings.append(Finding(policy.key, reason, message))

    nad_items = _items(policy.metadata.annotation(constants.POLICY_FOR_NAD_ANNOTATION))
    pn_items = _items(policy.metadata.annotation(constants.POLICY_FOR_PODNETWORK_ANNOTATION))
    for item in nad_items:
        key, problem = _nad_key(item, policy.namespace)
        where = f"{constants.POLICY_FOR_NAD_ANNOTATION}: {excerpts.value(item)}"
        if key is None:
            finding(Reason.INVALID_POLICY_FOR, f"{where}: {problem}")
        elif key not in by_nad:
            finding(Reason.NETWORK_NOT_FOUND, f"{where}: no network uses {npwg.NAD_KIND} {key}")
        else:
            found.add(by_nad[key])
    for item in pn_items:
        where = f"{constants.POLICY_FOR_PODNETWORK_ANNOTATION}: {excerpts.value(item)}"
        if problem := npwg.subdomain_problem(item, max_length=253):
            finding(Reason.INVALID_POLICY_FOR, f"{where}: a {constants.PODNETWORK_KIND} name {problem}")
        elif item == constants.DEFAULT_PODNETWORK:
            finding(
                Reason.DEFAULT_NETWORK,
                f"{where}: the cluster default network is governed by NetworkPolicy, "
                f"not {constants.POLICY_KIND}; this item is ignored",
            )
        elif item not in by_podnetwork:
            finding(Reason.NETWORK_NOT_FOUND, f"{where}: no {constants.PODNETWORK_KIND} of that name")
        else:
            found.add(by_podnetwork[item])
    if not nad_items and not pn_items:
        finding(
            Reason.NO_NETWORK,
            f"the policy names no network: annotate it with {constants.POLICY_FOR_PODNETWORK_ANNOTATION} "
            f"(PodNetworks) or {constants.POLICY_FOR_NAD_ANNOTATION} (NetworkAttachmentDefinitions); "
            "it applies to nothing",
        )
    elif not found:
        suffix = "; the policy applies to no network"
        findings = [Finding(f.policy, f.reason, f.message + suffix) for f in findings]
    return Scope(frozenset(found), tuple(findings))


def scopes(world: World) -> dict[str, Scope]:
    """Every policy's scope, by the policy's key (`namespace/name`)."""
    return {p.key: scope(p, world.networks) for p in world.policies}


__all__ = ["Finding", "Reason", "Scope", "scope", "scopes"]
