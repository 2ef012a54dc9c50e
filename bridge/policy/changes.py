"""Which pods' rulesets a change of the world can reach, so that a pass recompiles only those. Pure.

What `rules.compile_pod(world, pod)` reads, and so what can change a pod's ruleset:

- the pod itself: its labels (which policies select it), its interfaces, its named ports
  (an ingress named port resolves on the pod);
- the policies that select it, and their scopes (the policy and the networks);
- for each rule of those policies: the pods its selector peers select (their addresses), and
  for an egress rule with a named port, the named ports of the pods it may reach (every pod
  when the rule has no peer or an `ipBlock` peer: `rules._egress_named`);
- namespaces' labels (namespaceSelectors) and the networks (scopes, keys).

So between two worlds with the same namespaces and networks, a pod's ruleset can differ only
if the pod changed, if a policy selecting it (in either world) changed, came or went, or if a
pod that changed (as it was or as it is) is one a rule of a policy selecting it may name.
A change of a namespace or of a network reaches every pod (`None`: recompile everything).
`ipBlock` peers name addresses, not pods: a pod's change does not reach them (except through
an egress named port, above). Over-approximating is safe (a pod recompiled for nothing gets
the same ruleset); tests/unit/policy/test_changes.py checks that nothing outside the answer
changes, on random worlds and changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bridge.policy.evaluate import peer_selects_pod, selects
from bridge.policy.model import MultiNetworkPolicy, PolicyType
from bridge.policy.world import PodInfo, World


def _same(a: object, b: object) -> bool:
    return a is b or a == b


def changed_pods(before: World, after: World) -> set[str]:
    """The keys of the pods that came, went or changed (labels, node, ports, interfaces)."""
    old, new = before.pods, after.pods
    out = {key for key, pod in new.items() if not _same(old.get(key), pod)}
    out.update(key for key in old if key not in new)
    return out


def _names(policy: MultiNetworkPolicy, world: World, pods: Sequence[PodInfo]) -> bool:
    """Whether a rule of `policy` may name one of `pods` (module docstring)."""
    for direction in (PolicyType.INGRESS, PolicyType.EGRESS):
        for rule in policy.rules(direction):
            anyone = not rule.peers or any(p.ip_block is not None for p in rule.peers)
            if direction is PolicyType.EGRESS and anyone:
                named = [port for port in rule.ports or () if isinstance(port.port, str)]
                if any(pod.named_port(port.port, port.protocol) is not None  # type: ignore[arg-type]
                       for port in named for pod in pods):
                    return True
            for peer in rule.peers:
                if peer.ip_block is None and any(peer_selects_pod(world, policy, peer, pod) for pod in pods):
                    return True
    return False


def affected(before: World, after: World, pods: Iterable[str]) -> set[str] | None:
    """Of `pods` (keys of `after`'s pods), those whose ruleset may differ between the two worlds;
    None when every pod's may (a namespace's labels or the networks changed)."""
    if not _same(before.namespaces, after.namespaces) or not _same(before.networks, after.networks):
        return None
    keys = [key for key in pods if key in after.pods]
    changed = changed_pods(before, after)
    old = {p.key: p for p in before.policies}
    new = {p.key: p for p in after.policies}
    policies = [p for key in old.keys() | new.keys() if not _same(old.get(key), new.get(key))
                for p in (old.get(key), new.get(key)) if p is not None]
    if changed:
        versions = [pod for key in changed for pod in (before.pods.get(key), after.pods.get(key))
                    if pod is not None]
        # Unchanged policies are the same in both worlds, and so are the namespaces' labels.
        policies.extend(p for p in after.policies if _names(p, after, versions))
    out = {key for key in keys if key in changed}
    out.update(key for key in keys if key not in out and any(selects(p, after.pods[key]) for p in policies))
    return out


__all__ = ["affected", "changed_pods"]
