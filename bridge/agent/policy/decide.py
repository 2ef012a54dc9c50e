"""Which of this node's pods need their policy table written or removed now. Pure.

The agent's records know each local container's interfaces: the name in the pod and the
network (the NAD that attached it) and the addresses its delegate gave. A pod's status may not
name them yet (it is written after the ADD answers) or at all; the record always does. So the
rules of a local pod are compiled from its record (`netns.local.local_of`, `pod_info_of`), and no isolated
interface is ever left unenforced for want of a name.

`decide` compares what each container's namespace should hold (`rules.compile_pod`) with what
was last written there (`applied`; `UNKNOWN` after a restart, when a table may be there or
not) and returns a `Step` for each container whose table must change. Compiling is done once
per pod (its containers share it), and given the previous pass (`Pass`), only for the pods the
change between the two worlds can reach (`bridge.policy.changes.affected`): a new peer pod
recompiles the local pods whose policies may name it, not all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bridge.agent.netns.local import UNKNOWN, Local, Step
from bridge.policy import changes, evaluate, rules, views
from bridge.policy.scope import Scope
from bridge.policy.world import PodInfo, World, pod_info

Document = dict[str, Any]
Applied = Document | None | Literal["unknown"]


def pod_info_of(local: Local, watched: PodInfo | None, by_nad: Mapping[str, str]) -> PodInfo:
    """The local pod as decisions see it: labels and ports as watched (`watched`, None: a pod
    the watch has not delivered: no labels, no ports), interfaces from the record (keyed by
    network), each with the addresses its status adds (a live address change)."""
    names = {i.interface for i in local.interfaces}
    reported = tuple(i for i in watched.interfaces if i.interface in names) if watched is not None else ()
    interfaces = views.keyed(local.interfaces + reported, by_nad)
    # A status entry names its network as reported; the record's name wins (one entry each).
    interfaces = tuple(i for i in interfaces if i.network in {by_nad.get(n.network, n.network)
                                                              for n in local.interfaces})
    if watched is None:
        namespace, _, name = local.pod.partition("/")
        return pod_info(namespace, name, interfaces=interfaces)
    return PodInfo(watched.namespace, watched.name, watched.labels, watched.node, watched.ports, interfaces)


def selected(policies: Iterable[Any], pod: PodInfo) -> bool:
    """Whether any policy's podSelector selects `pod`: if none does, it needs no table, whatever
    the rest of the world is (the cheap test before compiling)."""
    return any(evaluate.selects(p, pod) for p in policies)


Compiled = tuple[Document | None, tuple[str, ...]]
"""A pod's table (None: none) and what of it could not be enforced (`rules.Ruleset`)."""


@dataclass(frozen=True)
class Pass:
    """What a pass decided from, for the next to start from: its world and each pod's table."""

    world: World
    compiled: Mapping[str, Compiled]


def decide(world: World, scope_of: Mapping[str, Scope], locals_: Iterable[Local],
           applied: Mapping[str, Applied]) -> list[Step[Document]]:
    """A step for each local container whose table differs from what was last written there
    (`applied`, by container ID; a container missing from it counts as `UNKNOWN`)."""
    return decide_from(world, scope_of, locals_, applied, None)[0]


def decide_from(world: World, scope_of: Mapping[str, Scope], locals_: Iterable[Local],
                applied: Mapping[str, Applied], previous: Pass | None) -> tuple[list[Step[Document]], Pass]:
    """`decide`, compiling only the pods that the change since `previous` can reach (the others'
    tables are `previous`'s); and this pass, for the next. The agent's worlds share their pods
    with the state between passes (`PolicyState.keyed_pods`), so keeping one costs a mapping."""
    locals_ = list(locals_)
    reached = None if previous is None else changes.affected(
        previous.world, world, {local.pod for local in locals_ if local.pod in previous.compiled})
    compiled: dict[str, Compiled] = {}
    memo: rules.Memo | None = None
    steps: list[Step[Document]] = []
    for local in locals_:
        if local.pod not in world.pods:
            continue
        if local.pod not in compiled:
            if previous is not None and reached is not None and local.pod not in reached \
                    and local.pod in previous.compiled:
                compiled[local.pod] = previous.compiled[local.pod]
            else:
                memo = memo or rules.Memo(world)
                ruleset = rules.compile_pod(world, local.pod, scope_of, memo)
                compiled[local.pod] = (ruleset.document, ruleset.unenforced)
        document, unenforced = compiled[local.pod]
        if applied.get(local.container_id, UNKNOWN) != document:
            steps.append(Step(local.container_id, local.pod, local.netns, document, unenforced))
    return steps, Pass(world, compiled)


__all__ = ["UNKNOWN", "Applied", "Compiled", "Document", "Local", "Pass", "Step", "decide", "decide_from",
           "pod_info_of", "selected"]
