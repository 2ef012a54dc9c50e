"""What an update may change of a pod's networks and admission record (pure).

Hot-plug (KEP Story #8, Phase IV requirement 24: "add/remove attachments
to/from running Pods"): an update may add networks to the annotation or remove
them, under the rules of `network_change_errors`: the new list passes the same
static rules; the first entry and the `default` PodNetwork stay as they were
("not applicable for the Primary PodNetwork"); an entry kept across the change
is not edited in place, and the kept entries keep their order; an added entry
does not take the pod's default route, nor an interface name that an entry
removed by the same update still holds. See docs/hotplug.md.

The admission record (`multinetwork.x-k8s.io/attachment-networks`) is written
by admission only (`record_change_errors`), and neither it nor the networks
reach a pod through its status or a Binding (`status_change_errors`,
`binding_errors`). The controller's validating webhook
(`podnetwork.kep.admission.validate`) applies these rules to each update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from podnetwork.ground import constants
from podnetwork.ground.fielderrors import FieldError, InvalidObject, forbidden
from podnetwork.kep import networks, validation
from podnetwork.kep.admissionreview import Pod
from podnetwork.kep.api import Network

HOTPLUG_DOC = "docs/hotplug.md"
#: Pod annotations only admission may set or change (through the pod, never its subresources).
PROTECTED_ANNOTATIONS = (constants.NETWORKS_ANNOTATION, constants.ATTACHMENT_NETWORKS_ANNOTATION)
_PERMISSION_DOC = 'docs/controller.md "Permission to use a PodNetwork"'


def declared_text(pod: Pod) -> str | None:
    """The pod's networks annotation as written, or None when it has none."""
    return pod.annotation(constants.NETWORKS_ANNOTATION)


def record_of(pod: Pod) -> dict[str, str] | None:
    """The pod's admission record, or None when it has none or cannot be read."""
    text = pod.annotation(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    if text is None:
        return None
    try:
        return networks.parse_attachment_networks(text)
    except InvalidObject:
        return None


def attachment_names(text: str | None) -> set[str]:
    """The attachments a networks annotation names (none when it cannot be read)."""
    if text is None:
        return set()
    try:
        return {name for net in networks.parse(text) if (name := net.pod_network_attachment_name)}
    except InvalidObject:
        return set()


def static_errors(pod: Pod) -> list[FieldError]:
    """The KEP's static rules for the networks the pod names ("Static validations")."""
    return validation.validate_declared(declared_text(pod), host_network=pod.host_network,
                                        os_name=pod.os_name)


def binding_errors(binding: Mapping[str, Any]) -> list[FieldError]:
    """Why a Binding (`pods/binding`, what kube-scheduler creates) may not be made: it carries
    the networks or the record among its annotations, which the API server copies onto the pod
    it binds, and no webhook sees that pod change."""
    found = [key for key in PROTECTED_ANNOTATIONS if key in networks.annotations_of(binding)]
    return [forbidden(f"metadata.annotations[{key}]",
                      "a Binding's annotations are copied onto the pod it binds; the pod's networks and "
                      "admission record can be set only when the pod is created or updated "
                      f"({_PERMISSION_DOC})")
            for key in found]


def status_change_errors() -> list[FieldError]:
    """Why an update of `pods/status` may not change the networks."""
    return [forbidden(
        networks.ANNOTATION_FIELD,
        "the networks of a pod cannot be changed through its status (pods/status): only an "
        "update of the pod itself is checked as hot-plug and for the permission to use its "
        f"networks; change them on the pod (kubectl annotate or patch without --subresource), "
        f"see {HOTPLUG_DOC}")]


def record_change_errors(old_pod: Pod, pod: Pod) -> list[FieldError]:
    """Why an update may not change the pod's admission record (`multinetwork.x-k8s.io/attachment-networks`).

    The record says which PodNetwork each attachment named when admission checked the
    pod; the agent and the bridge refuse an attachment that names another one since.
    So, whoever sends the update (the pod's owner, or anyone allowed `pods/status`):
    - an entry stays as it was while the pod names its attachment: it is neither
      changed nor removed;
    - an entry is added only for an attachment the same update adds to the networks
      (the controller's mutating webhook writes it; with `--enforce-use-permission`,
      `authorize_use` checks it against the attachment as it is now);
    - the record is readable JSON whenever it changes.
    Entries of attachments the pod no longer names may go.
    """
    field = networks.RECORD_FIELD
    old_text = old_pod.annotation(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    new_text = pod.annotation(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    if old_text == new_text:
        return []
    why = ("it records the PodNetwork each PodNetworkAttachment named when the pod was admitted, "
           f"so only admission writes it ({_PERMISSION_DOC})")
    try:
        new = networks.parse_attachment_networks(new_text) if new_text is not None else {}
    except InvalidObject as exc:
        return exc.errors
    old = record_of(old_pod) or {}
    names_now = attachment_names(declared_text(pod))
    names_before = attachment_names(declared_text(old_pod))
    errors: list[FieldError] = []
    for name, network in sorted(old.items()):
        if name in names_now and new.get(name) != network:
            errors.append(forbidden(f"{field}[{name}]",
                                    f'the entry of PodNetworkAttachment "{name}" ({network!r}) cannot be '
                                    f"changed or removed while the pod names the attachment: {why}"))
    for name in sorted(set(new) - set(old)):
        if name not in names_now or name in names_before:
            errors.append(forbidden(f"{field}[{name}]",
                                    f'an entry for PodNetworkAttachment "{name}" can be added only by the '
                                    f"update that adds the attachment to the pod's networks: {why}"))
    return errors


def change_errors(before: str | None, after: str | None, pod: Pod) -> list[FieldError]:
    """Why an update may not change the networks annotation from `before` to `after`."""
    if after is None:
        return [forbidden(networks.ANNOTATION_FIELD,
                          "the networks annotation of an existing pod cannot be removed; to detach "
                          "networks, list the ones to keep (at least the first)")]
    if before is None:
        return [forbidden(networks.ANNOTATION_FIELD,
                          "this pod was created without a networks annotation, so it has no networks "
                          "to change (KEP Story #8 hot-plug starts from the networks the pod was "
                          "admitted with); delete and re-create the pod with the annotation")]
    errors = static_errors(pod)
    if errors:
        return errors
    try:
        old = networks.parse(before)
    except InvalidObject:
        return [forbidden(networks.ANNOTATION_FIELD,
                          "the pod's current networks annotation cannot be parsed, so no change of it "
                          "can be checked; delete and re-create the pod")]
    return network_change_errors(old, networks.parse(after))


def network_change_errors(old: Sequence[Network], new: Sequence[Network]) -> list[FieldError]:
    """Why a running pod's networks may not change from `old` to `new` (hot-plug, KEP Req 24).

    Both lists are statically valid. An entry is known by what it references (a
    PodNetwork or a PodNetworkAttachment, each at most once in a valid list).

    - The first entry stays exactly as it is, and so does the `default` PodNetwork
      (KEP Story #8: hot-plug is "not applicable for the Primary PodNetwork");
      `default` cannot be added either: the cluster default network is attached
      when the pod starts, or never.
    - A kept entry keeps its interface name and default-gateway flags: the agent
      would have to detach and attach it again, which is a removal and an
      addition, two updates the user makes on purpose.
    - Kept entries keep their relative order: the order is the interface order
      (NPWG 4.2.1's generated names) the pod was attached with.
    - An added entry does not take the pod's default route (isDefaultGW4/6):
      moving a running pod's default route would cut its existing connections.
    - An added entry does not ask for the interface name of an entry the same
      update removes: the agent attaches before it detaches, so that a failed
      attach leaves the pod as it was.
    """
    old_at = {net.reference: i for i, net in enumerate(old)}
    new_at = {net.reference: i for i, net in enumerate(new)}
    return (_first_and_default_errors(old, new, old_at, new_at) + _kept_errors(old, new, old_at, new_at)
            + _added_errors(old, new, old_at, new_at))


_Positions = Mapping[tuple[str, str], int]


def _first_and_default_errors(old: Sequence[Network], new: Sequence[Network],
                              old_at: _Positions, new_at: _Positions) -> list[FieldError]:
    """The first entry and the `default` PodNetwork stay as they are."""
    errors: list[FieldError] = []
    field, how = networks.FIELD, f"see {HOTPLUG_DOC}"
    if not new or not old or new[0] != old[0]:
        first = networks.format(old[:1])
        errors.append(forbidden(f"{field}[0]",
                                f"the first network of a running pod cannot be removed, replaced or edited "
                                f"(KEP Story #8: not applicable to the primary PodNetwork); keep {first} "
                                f"as the first entry; {how}"))
    default = (constants.PODNETWORK_KIND, constants.DEFAULT_PODNETWORK)
    if default in old_at and default not in new_at:
        errors.append(forbidden(field,
                                f'the "{constants.DEFAULT_PODNETWORK}" PodNetwork cannot be removed from a '
                                f"running pod (it is the cluster default network); keep its entry; {how}"))
    if default in new_at and default not in old_at:
        errors.append(forbidden(f"{field}[{new_at[default]}]",
                                f'the "{constants.DEFAULT_PODNETWORK}" PodNetwork cannot be added to a '
                                f"running pod: the cluster default network is attached when the pod starts; "
                                f"{how}"))
    return errors


def _kept_errors(old: Sequence[Network], new: Sequence[Network],
                 old_at: _Positions, new_at: _Positions) -> list[FieldError]:
    """A kept entry is not edited in place, and the kept entries keep their order."""
    errors: list[FieldError] = []
    field, how = networks.FIELD, f"see {HOTPLUG_DOC}"
    kept = [ref for ref in old_at if ref in new_at]
    for ref in kept:
        i, j = old_at[ref], new_at[ref]
        if j == 0 or old[i] == new[j]:
            continue
        errors.append(forbidden(f"{field}[{j}]",
                                f"{ref[0]} {ref[1]!r} is attached; its interfaceName and isDefaultGW4/6 "
                                f"cannot change in place (was {networks.format([old[i]])}); remove it in one "
                                f"update and add it back in another; {how}"))
    order = [new_at[ref] for ref in kept]
    if order != sorted(order):
        errors.append(forbidden(field,
                                "the networks the pod keeps must stay in their order (it is the order of "
                                "their interfaces); add and remove entries without moving the others; "
                                f"{how}"))
    return errors


def _added_errors(old: Sequence[Network], new: Sequence[Network],
                  old_at: _Positions, new_at: _Positions) -> list[FieldError]:
    """An added entry takes neither the default route nor a removed entry's interface name."""
    errors: list[FieldError] = []
    field, how = networks.FIELD, f"see {HOTPLUG_DOC}"
    removed_ifnames = {old[old_at[ref]].interface_name for ref in old_at if ref not in new_at} - {None}
    for ref, j in new_at.items():
        if ref in old_at:
            continue
        net = new[j]
        for flag, on in (("isDefaultGW4", net.is_default_gw4), ("isDefaultGW6", net.is_default_gw6)):
            if on:
                errors.append(forbidden(f"{field}[{j}].{flag}",
                                        "a network added to a running pod cannot take its default route "
                                        f"(its existing connections would break); leave {flag} unset; {how}"))
        if net.interface_name in removed_ifnames:
            errors.append(forbidden(f"{field}[{j}].interfaceName",
                                    f"interface {net.interface_name!r} still belongs to a network this "
                                    "update removes (the agent attaches before it detaches); remove that "
                                    f"network in one update and add this one in the next; {how}"))
    return errors


__all__ = [
    "HOTPLUG_DOC",
    "PROTECTED_ANNOTATIONS",
    "attachment_names",
    "binding_errors",
    "change_errors",
    "declared_text",
    "network_change_errors",
    "record_change_errors",
    "record_of",
    "static_errors",
    "status_change_errors",
]
