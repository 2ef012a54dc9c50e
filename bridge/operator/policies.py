"""What the bridge says about MultiNetworkPolicies: Events on the policy, planned. Pure.

KEP-3698 Phase III req 22 leaves NetworkPolicy on PodNetworks to the ecosystem's
MultiNetworkPolicy, whose CRD has no status subresource: what a policy's owner must know
is said in Events on the policy (and a log line), never in its status.

- A policy that cannot be parsed (`bridge.policy.parse_policy`): a Warning `InvalidPolicy`
  naming every bad field. It applies to nothing.
- A policy whose scope has findings (`bridge.policy.scope`): one Warning per finding,
  with its reason (`NoNetworkSelected`, `NetworkNotFound`, `InvalidPolicyFor`,
  `DefaultNetworkNotCovered`) and message.
- A policy that applies to at least one network: a Normal `PolicyApplies` naming them.

A policy that names a good network and a missing one gets both. Events are planned only
when what is said changes (`plan`): a watch replaying the same policy, or a PodNetwork
event that changes no network the policy names, posts nothing. A change posts only the
notes that are new; a note said before in this process and said again after a change
(a NAD deleted, then created again) renews its Event (`PostPolicyEvent.renew`), as the
kubelet's Events aggregate, so the latest Event always tells the current state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bridge.operator import pods
from bridge.policy import PolicyError, parse_policy, scope
from bridge.policy.model import MultiNetworkPolicy
from bridge.policy.world import NetworkInfo
from podnetwork.ground import constants
from podnetwork.ground.core import ObjectMeta, object_event

Key = tuple[str, str]


class Reason(StrEnum):
    """The bridge's own Event reasons on a policy (the scope's are `bridge.policy.scope.Reason`)."""

    INVALID_POLICY = "InvalidPolicy"
    """The policy does not parse: a field is of the wrong type or value."""
    POLICY_APPLIES = "PolicyApplies"
    """The policy applies to the networks named in the message."""


WARNING, NORMAL = "Warning", "Normal"


@dataclass(frozen=True, slots=True)
class Note:
    """One thing said about a policy: an Event's type, reason and message."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Seen:
    """A policy as the bridge last saw it: its metadata, and the parsed policy or why it does not parse."""

    meta: ObjectMeta
    policy: MultiNetworkPolicy | None = None
    error: str | None = None

    @property
    def key(self) -> Key:
        return (self.meta.namespace or "", self.meta.name or "")


def read(body: Mapping[str, Any]) -> Seen:
    """A watched MultiNetworkPolicy, parsed; never raises (a policy that does not parse is `error`)."""
    raw = body.get("metadata")
    try:
        meta = ObjectMeta.model_validate(raw if isinstance(raw, Mapping) else {})
    except ValueError:  # pydantic's ValidationError: metadata of the wrong shape
        meta = ObjectMeta()
    try:
        return Seen(meta, policy=parse_policy(body))
    except PolicyError as exc:
        return Seen(meta, error=str(exc))


def _network_name(network: NetworkInfo) -> str:
    if network.podnetwork and network.nad:
        return f"{constants.PODNETWORK_KIND} {network.podnetwork} ({constants.NAD_KIND} {network.nad})"
    if network.podnetwork:
        return f"{constants.PODNETWORK_KIND} {network.podnetwork}"
    return f"{constants.NAD_KIND} {network.nad}"


def notes(seen: Seen, networks: Mapping[str, NetworkInfo]) -> frozenset[Note]:
    """Everything to say about the policy now, given the networks that exist (by `NetworkInfo.key`)."""
    if seen.policy is None:
        return frozenset({Note(WARNING, Reason.INVALID_POLICY.value,
                               f"the policy is invalid and applies to nothing: {seen.error}")})
    found = scope.scope(seen.policy, networks)
    said = {Note(WARNING, f.reason.value, f.message) for f in found.findings}
    if found.networks:
        names = ", ".join(_network_name(networks[key]) for key in sorted(found.networks))
        said.add(Note(NORMAL, Reason.POLICY_APPLIES.value, f"the policy applies on {names}"))
    return frozenset(said)


@dataclass(frozen=True)
class PostPolicyEvent:
    """An Event on the policy. `renew`: if it exists already (a 409), it was said before a change
    and is said again: its count and lastTimestamp are bumped. Else a 409 means it was posted
    before this process started, and it stands as it is."""

    key: Key
    note: Note
    body: dict[str, Any]
    renew: bool


@dataclass(frozen=True)
class Said:
    """What the bridge last said about a policy: to the policy of this uid, these notes."""

    uid: str
    notes: frozenset[Note]


def event(seen: Seen, note: Note, *, now: str) -> dict[str, Any]:
    """The Event of `note` on the policy, named from its uid, reason and message (posted once each)."""
    key = pods.digest(f"{seen.meta.uid}/{note.reason}/{note.message}")
    return object_event(constants.POLICY_API_VERSION, constants.POLICY_KIND, seen.meta, note.reason,
                        note.message, key=key, type_=note.type, now=now, component=pods.COMPONENT)


def plan(seen: Seen, now_notes: frozenset[Note], last: Said | None, *, now: str
         ) -> tuple[tuple[PostPolicyEvent, ...], Said]:
    """The Events to post about a policy, and what the bridge has then said about it.

    Nothing when the notes are those last said to the same policy (same uid). A policy first
    seen (this process started, or it was created again under a new uid) gets every note, a
    409 meaning the Event is there already; a change posts the new notes, each renewed if it exists.
    """
    uid = seen.meta.uid or ""
    said = Said(uid, now_notes)
    if last is not None and last.uid == uid:
        if last.notes == now_notes:
            return (), said
        fresh, renew = now_notes - last.notes, True
    else:
        fresh, renew = now_notes, False
    order = sorted(fresh, key=lambda n: (n.type != WARNING, n.reason, n.message))
    posts = tuple(PostPolicyEvent(seen.key, n, event(seen, n, now=now), renew) for n in order)
    return posts, said


__all__ = [
    "NORMAL",
    "WARNING",
    "Key",
    "Note",
    "PostPolicyEvent",
    "Reason",
    "Said",
    "Seen",
    "event",
    "notes",
    "plan",
    "read",
]
