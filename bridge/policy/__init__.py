"""MultiNetworkPolicy on PodNetworks (KEP-3698 Phase III req 22): the API and the pure decisions.

- `model`: the `k8s.cni.cncf.io/v1beta1` MultiNetworkPolicy models and `parse_policy`;
- `world`: the typed inputs (pods, namespaces, networks, policies, a connection);
- `views`: the edge's builders of those inputs from Pod objects and typed views;
- `scope`: which networks each policy applies to, and findings for what it names wrongly;
- `evaluate`: the reference evaluator, `allowed(world, connection)`;
- `rules`: the compiler of one pod's nftables table (libnftables JSON, one transaction);
- `changes`: which pods a change of the world can reach (what a pass recompiles).

Nothing here does I/O: the agent's edge builds a `World`, asks which policies apply where,
and writes the rules the compiler returns. docs/network-policy.md is the user's side.
"""

from __future__ import annotations

from bridge.policy.model import (
    EgressRule,
    IngressRule,
    IPBlock,
    LabelSelector,
    LabelSelectorRequirement,
    MultiNetworkPolicy,
    MultiNetworkPolicySpec,
    Operator,
    PolicyError,
    PolicyPeer,
    PolicyPort,
    PolicyType,
    Protocol,
    parse_policy,
)
from bridge.policy.world import (
    ICMP,
    Address,
    Connection,
    ConnectionProtocol,
    ContainerPort,
    NamespaceInfo,
    NetworkInfo,
    PodInfo,
    PodInterface,
    World,
    interface,
    namespace_info,
    pod_info,
)

__all__ = [
    "ICMP",
    "Address",
    "Connection",
    "ConnectionProtocol",
    "ContainerPort",
    "EgressRule",
    "IPBlock",
    "IngressRule",
    "LabelSelector",
    "LabelSelectorRequirement",
    "MultiNetworkPolicy",
    "MultiNetworkPolicySpec",
    "NamespaceInfo",
    "NetworkInfo",
    "Operator",
    "PodInfo",
    "PodInterface",
    "PolicyError",
    "PolicyPeer",
    "PolicyPort",
    "PolicyType",
    "Protocol",
    "World",
    "interface",
    "namespace_info",
    "parse_policy",
    "pod_info",
]
