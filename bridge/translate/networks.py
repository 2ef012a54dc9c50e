"""Translation KEP-3698 -> NPWG: a pod's networks to a `k8s.v1.cni.cncf.io/networks` selection.

With `bridge.translate.refs`, the only code of the NPWG layer that knows
PodNetworks (see `.importlinter`); the CNI agent, the bridge operator and the
migration all go through this package.

Stable interface (the CNI agent and the migration are written against it)::

    objects = translate.Objects.from_objects([podnetwork, attachment, nad, options, ...])
    # or translate.Objects(podnetworks={name: obj}, attachments={(ns, name): obj},
    #                      nads={(ns, name): obj}, options={(ns, name): obj})
    result = translate.translate(networks, pod_namespace, objects)   # may raise TranslationError
    result.elements          # list[npwg.NetworkSelectionElement], in the pod's order
    result.sources           # list[translate.Source], one per element (same index)
    result.includes_default  # the pod lists the `default` PodNetwork
    result.default_source    # the Source of the `default` entry, or None
    result.warnings          # list[str]: what NPWG cannot express
    result.annotation        # npwg.format_selection(result.elements)

Objects are plain dicts as the API server returns them (kopf bodies work too).

The rules (KEP-3698 "PodNetwork", "PodNetworkAttachment"; NPWG multi-net spec v1.3):

- The `default` PodNetwork is the cluster-wide default network (NPWG 2.2, 6): every
  NPWG implementation attaches it, so it is never in the selection. Omitting it, or
  setting its `interfaceName`/`isDefaultGW*`, is translated with a warning. Omitting it
  is honoured by this project's CNI agent (KEP-3698: the list is explicit; it reads
  `includes_default` and attaches the first element in its place), not by Multus
  (`DEFAULT_LEFT_OUT_WARNING`); the selection is the same for both.
- A PodNetwork whose provider is `multinetwork.x-k8s.io/npwg-bridge` names exactly
  one NetworkAttachmentDefinition in `parametersRefs` (group `k8s.cni.cncf.io`, kind
  `network-attachment-definitions` as in the KEP's example, or `NetworkAttachmentDefinition`),
  with a namespace (a PodNetwork is cluster-scoped, a NAD is not).
- A PodNetworkAttachment maps to its PodNetwork's NAD unless its own `parametersRefs`
  name one NAD (a per-pod override; the namespace defaults to the attachment's);
  at most one `NetworkSelectionOptions` (group `bridge.multinetwork.x-k8s.io`) in its
  `parametersRefs` gives the per-pod keys of the element.
- `interfaceName` -> `interface` (4.1.2.1.5). `isDefaultGW4`/`isDefaultGW6` ->
  `default-route` (4.1.2.1.9): the options' `default-route` when set, else the
  gateways of the requested families named by the NAD's IPAM configuration
  (`gateway`, `ranges[][].gateway`, `routes[]` to 0.0.0.0/0 or ::/0, static
  `addresses[].gateway`), else `[]`, which this project's agent reads as "the
  gateway of this attachment's own CNI result". Multus needs a gateway IP, so a
  requested family without one is a warning and a `GatewayGap` in
  `Translation.gateway_gaps`: the bridge operator writes no selection holding
  one (`bridge.operator.pods`), as Multus would remove the pod's default route
  and add none (docs/bridge.md "Default routes with Multus"). When the families of
  that list are not the requested ones (`[]` for one family only; gateways of one
  family for both), the element also carries the implementation extension
  `multinetwork.x-k8s.io/default-route-families` (NPWG 4.1.2.1: keys with a dot),
  e.g. `["ipv4"]`: this project's agent moves only those families' default routes.

`translate` checks shape and references, not readiness: the caller (the bridge
controller) writes the annotation only once every object it names is Ready.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge import npwg
from bridge.translate.refs import (
    AttachmentParams,
    Objects,
    Reason,
    TranslationError,
    attachment_params,
    describe,
    is_bridge,
    podnetwork_nad,
)
from podnetwork.ground import constants
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import networks as kep_networks
from podnetwork.kep.api import Network

#: Implementation extension of a selection element (NPWG 4.1.2.1: keys with a dot are
#: implementation-specific and kept): the address families, `ipv4`/`ipv6`, whose default
#: route the element's `default-route` (4.1.2.1.9) moves. KEP-3698 asks per family
#: (`isDefaultGW4`/`isDefaultGW6`); NPWG's list of gateway IPs cannot say "IPv4 only"
#: when it is empty, nor "IPv6 from the CNI result" when it holds only IPv4 gateways.
DEFAULT_ROUTE_FAMILIES_KEY = f"{constants.GROUP}/default-route-families"
FAMILY_NAMES = {4: "ipv4", 6: "ipv6"}

#: Pod annotation: digest of the selection value the bridge wrote, so the bridge can tell
#: its own translation from a hand-written `k8s.v1.cni.cncf.io/networks` (and the
#: migration leaves its translations alone).
WRITTEN_ANNOTATION = f"bridge.{constants.GROUP}/networks-written"


def selection_digest(value: str) -> str:
    """The digest `WRITTEN_ANNOTATION` holds for the selection text `value`."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def written_by_bridge(annotations: Mapping[str, str]) -> bool:
    """The pod's NPWG selection is the bridge's translation of its PodNetworks, not a
    hand-written one: its digest is the one the bridge wrote beside it."""
    text = annotations.get(npwg.NETWORKS_ANNOTATION)
    return text is not None and annotations.get(WRITTEN_ANNOTATION) == selection_digest(text)


@dataclass(frozen=True)
class Source:
    """Where one selection element came from."""

    pod_network: str
    """The PodNetwork's name (reported as `podNetwork` in the KEP pod IPs)."""
    interface: str | None
    """The KEP `interfaceName` (None: the NPWG implementation picks one)."""
    attachment: str | None = None
    """The PodNetworkAttachment's name, when the pod referenced one."""
    index: int = 0
    """Position of the entry in the pod's networks list."""



@dataclass(frozen=True)
class GatewayGap:
    """A family whose default route the pod asks for on a network whose NAD names no gateway of it.

    NPWG 4.1.2.1.9 lists gateway IPs; an empty list (or one missing a family) is read
    by this project's agent as "take it from the CNI result", but Multus treats any
    `default-route` as a gateway request and, finding no gateway of the family,
    removes the pod's default route of that family and adds none.
    """

    label: str
    """The pod's entry, e.g. `spec.networks[1] (PodNetwork 'dataplane')`."""
    nad: tuple[str, str]
    """(namespace, name) of the NetworkAttachmentDefinition that names no gateway."""
    families: tuple[int, ...]
    """The IP versions the pod asks for and the NAD names no gateway of."""
    warning: str = ""
    """The text of the same problem in `Translation.warnings` (written for any agent)."""

    @property
    def message(self) -> str:
        names = " and ".join(f"IPv{f}" for f in self.families)
        flags = " and ".join(f"isDefaultGW{f}" for f in self.families)
        return (
            f"{self.label}: {flags} cannot be honoured: NetworkAttachmentDefinition "
            f"{self.nad[0]}/{self.nad[1]} names no {names} gateway in its IPAM configuration, and "
            "Multus treats a \"default-route\" without one as a request to remove the pod's default "
            "route (NPWG 4.1.2.1.9); name the gateway in the NAD's IPAM (gateway, ranges[][].gateway "
            "or a default route in routes), or give it as default-route in a NetworkSelectionOptions"
        )


@dataclass
class Translation:
    """The NPWG selection for one pod, with where each element came from."""

    elements: list[npwg.NetworkSelectionElement] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    includes_default: bool = False
    default_source: Source | None = None
    warnings: list[str] = field(default_factory=list)
    gateway_gaps: list[GatewayGap] = field(default_factory=list)
    """Requested default-route families with no gateway to name (see `GatewayGap`): the
    elements carry `[]` or a partial list, which this project's agent completes from the
    CNI result; the bridge operator writes no selection while there is one."""

    @property
    def annotation(self) -> str:
        """The value for `k8s.v1.cni.cncf.io/networks` (JSON list format, 4.1.2)."""
        return npwg.format_selection(self.elements)



# --- Gateways ----------------------------------------------------------------------------------


def ipam_gateways(nad: npwg.NetworkAttachmentDefinition) -> list[str]:
    """The gateways a NAD's IPAM configuration names, in order, without duplicates."""
    config_text = nad.spec.config
    if config_text is None or not config_text.strip():
        return []
    try:
        config = json.loads(config_text)
    except ValueError:
        return []
    found: list[Any] = []
    plugins = config.get("plugins") if isinstance(config.get("plugins"), list) else [config]
    for plugin in plugins:
        ipam = plugin.get("ipam") if isinstance(plugin, dict) else None
        if not isinstance(ipam, dict):
            continue
        found.append(ipam.get("gateway"))
        for rangeset in ipam.get("ranges") or []:
            for r in rangeset if isinstance(rangeset, list) else []:
                if isinstance(r, dict):
                    found.append(r.get("gateway"))
        for addr in ipam.get("addresses") or []:
            if isinstance(addr, dict):
                found.append(addr.get("gateway"))
        for route in ipam.get("routes") or []:
            if isinstance(route, dict) and route.get("dst") in ("0.0.0.0/0", "::/0"):
                found.append(route.get("gw"))
    out: list[str] = []
    for gw in found:
        if isinstance(gw, str) and npwg.ip_problem(gw, prefix_allowed=False) is None and gw not in out:
            out.append(gw)
    return out


def _family(ip: str) -> int:
    return ipaddress.ip_address(ip).version



# --- Translation -------------------------------------------------------------------------------


def _entry_label(index: int, net: Network) -> str:
    kind, name = net.reference
    return f"spec.networks[{index}] ({kind} {name!r})"


#: The pod's `multinetwork.x-k8s.io/networks`, read by the one parser admission, the bridge and
#: the agent use (`podnetwork.kep.networks.parse`: a JSON list of objects with known keys of the
#: right types, within the annotations' size cap). Raises `InvalidObject` naming every problem.
#: Here because the agent reaches the KEP layer only through this package (.importlinter).
parse_networks = kep_networks.parse


def admitted_networks(annotations: Mapping[str, str]) -> dict[str, str] | None:
    """The pod's admission record (`multinetwork.x-k8s.io/attachment-networks`): attachment ->
    the PodNetwork it named when the pod was admitted; None when the pod has none.

    Raises `TranslationError` (`Reason.INVALID_RECORD`) when it cannot be read: only
    admission writes it, so an unreadable one was forged, and no attachment is trusted.
    """
    text = annotations.get(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    if text is None:
        return None
    try:
        return kep_networks.parse_attachment_networks(text)
    except InvalidObject as exc:
        raise TranslationError(Reason.INVALID_RECORD, f"the pod's admission record {exc}") from None


def translate(
    networks: Sequence[Network],
    pod_namespace: str,
    objects: Objects,
    admitted: Mapping[str, str] | None = None,
) -> Translation:
    """Translate a pod's KEP networks into the NPWG selection. See the module docstring.

    `admitted` is the pod's admission record (`admitted_networks`): an attachment it
    names must still name the PodNetwork recorded there, or the translation fails
    (`Reason.ATTACHMENT_CHANGED`): with `--enforce-use-permission`, admission checked
    the permission to use that PodNetwork, and an attachment deleted and re-created
    since to name another must not carry the pod onto it (docs/controller.md
    "Permission to use a PodNetwork"). An attachment the record does not name (a pod
    admitted without enforcement) is not held to anything.

    Raises `TranslationError` (with a `Reason`) when a referenced object is missing,
    is not provided by this bridge, or has invalid parameters. A translation may still be
    one no selection should be made of: `refusal` says so.
    """
    out = Translation()
    gw_claimed_by: int | None = None  # index of the element holding default-route
    for index, net in enumerate(networks):
        label = _entry_label(index, net)
        pn_name, params = _entry_params(label, net, pod_namespace, objects, admitted)
        source = Source(pn_name, net.interface_name, net.pod_network_attachment_name, index)
        if pn_name == constants.DEFAULT_PODNETWORK:
            _default_entry(label, net, params, source, out)
            continue
        nad_key, nad = _bridge_nad(label, pn_name, params, objects)
        raw: dict[str, Any] = {"name": nad_key[1], "namespace": nad_key[0]}
        raw.update({k: v for k, v in params.options.items() if k != "default-route"})
        if net.interface_name is not None:
            raw["interface"] = net.interface_name
        if net.is_default_gw4 or net.is_default_gw6:
            if gw_claimed_by is not None:
                out.warnings.append(
                    f"{label}: NPWG lets only one element hold \"default-route\" (4.1.2.1.9); it stays "
                    f"on spec.networks[{gw_claimed_by}], so this network's isDefaultGW4/6 is not applied"
                )
            else:
                gw_claimed_by = index
                gateways, families = _gateways(label, params, nad_key, nad, bool(net.is_default_gw4),
                                               bool(net.is_default_gw6), out)
                raw["default-route"] = gateways
                if families is not None:
                    raw[DEFAULT_ROUTE_FAMILIES_KEY] = families
        elif "default-route" in params.options:
            out.warnings.append(
                f"{label}: the NetworkSelectionOptions' default-route is ignored because the pod "
                "sets neither isDefaultGW4 nor isDefaultGW6 on this network"
            )
        try:
            (element,) = npwg.parse_selection(json.dumps([raw]), pod_namespace)
        except npwg.InvalidSelection as exc:  # e.g. an interfaceName NPWG refuses
            raise TranslationError(Reason.INVALID_PARAMETERS, f"{label}: {exc}") from None
        out.elements.append(element)
        out.sources.append(source)
    if not out.includes_default:
        out.warnings.append(DEFAULT_LEFT_OUT_WARNING)
    return out


#: The warning of a translation whose pod leaves out the `default` PodNetwork.
DEFAULT_LEFT_OUT_WARNING = (
    "the pod does not list the default PodNetwork, but NPWG cannot leave it out: Multus attaches the "
    "cluster-wide default network first (NPWG 6.2); this project's CNI agent attaches only the listed "
    "networks (docs/agent.md \"The explicit list\")"
)

#: Why a translation is refused (`refusal`): the bridge's Event reason, the agent's error.
GATEWAY_MISSING_REASON = "DefaultGatewayMissing"


def refusal(translation: Translation) -> str | None:
    """Why no NPWG implementation should attach this translation, or None when one may.

    An element whose `default-route` lacks a gateway of a requested family (`GatewayGap`):
    Multus treats any `default-route` list, `[]` included, as a gateway request, removes the
    pod's default route of that family and adds none (NPWG 4.1.2.1.9; docs/bridge.md "Default
    routes with Multus"). The bridge writes no selection for it, and this project's agent
    attaches nothing for it: both decide from the same pod the same way.
    """
    if not translation.gateway_gaps:
        return None
    return "; ".join(gap.message for gap in translation.gateway_gaps)


def _entry_params(
    label: str, net: Network, pod_namespace: str, objects: Objects, admitted: Mapping[str, str] | None
) -> tuple[str, AttachmentParams]:
    """(the PodNetwork's name, the attachment's parameters) of one entry of the pod's networks."""
    attachment_name = net.pod_network_attachment_name
    if not attachment_name:
        return net.pod_network_name or "", AttachmentParams(None, {})
    what = describe(constants.ATTACHMENT_KIND, attachment_name, pod_namespace)
    attachment = objects.attachments.get((pod_namespace, attachment_name))
    if attachment is None:
        if problem := objects.problem(constants.ATTACHMENT_KIND, pod_namespace, attachment_name):
            raise TranslationError(
                Reason.INVALID_PARAMETERS, f"{label}: {what} does not fit its schema: {problem}"
            )
        raise TranslationError(Reason.ATTACHMENT_NOT_FOUND, f"{label}: {what} does not exist")
    pn_name = attachment.spec.pod_network_name
    recorded = (admitted or {}).get(attachment_name)
    if recorded is not None and recorded != pn_name:
        raise TranslationError(
            Reason.ATTACHMENT_CHANGED,
            f"{label}: {what} names PodNetwork {pn_name!r}, but the pod was admitted with it naming "
            f"{recorded!r} ({constants.ATTACHMENT_NETWORKS_ANNOTATION}): the attachment was replaced "
            "after admission, so the permission to use its network was never checked; re-create the "
            "pod to have it checked, or put the attachment back",
        )
    return pn_name, attachment_params(attachment, objects)


def _default_entry(
    label: str, net: Network, params: AttachmentParams, source: Source, out: Translation
) -> None:
    """An entry naming the `default` PodNetwork: never in the selection (NPWG 6), with warnings."""
    out.includes_default = True
    out.default_source = source
    if net.interface_name:
        out.warnings.append(
            f"{label}: interfaceName {net.interface_name!r} is not applied: NPWG has no way to "
            "name the cluster-wide default network's interface; the runtime names it (NPWG 6)"
        )
    if net.is_default_gw4 or net.is_default_gw6:
        out.warnings.append(
            f"{label}: isDefaultGW4/isDefaultGW6 on the default PodNetwork select nothing in NPWG: "
            "the cluster-wide default network keeps the default routes of its own CNI "
            "configuration unless another element sets \"default-route\" (NPWG 6, 4.1.2.1.9)"
        )
    if params.nad or params.options:
        out.warnings.append(
            f"{label}: the attachment's parameters are not applied to the cluster-wide default "
            "network: NPWG selects secondary networks only (NPWG 4)"
        )


def _bridge_nad(
    label: str, pn_name: str, params: AttachmentParams, objects: Objects
) -> tuple[tuple[str, str], npwg.NetworkAttachmentDefinition]:
    """The NAD an entry delegates to: the attachment's own, else its bridge PodNetwork's."""
    podnetwork = objects.podnetworks.get(pn_name)
    if podnetwork is None:
        what = describe(constants.PODNETWORK_KIND, pn_name)
        if problem := objects.problem(constants.PODNETWORK_KIND, "", pn_name):
            raise TranslationError(
                Reason.INVALID_PARAMETERS, f"{label}: {what} does not fit its schema: {problem}"
            )
        raise TranslationError(Reason.PODNETWORK_NOT_FOUND, f"{label}: {what} does not exist")
    if not is_bridge(podnetwork):
        raise TranslationError(
            Reason.NOT_BRIDGE_PROVIDER,
            f"{label}: {describe(constants.PODNETWORK_KIND, pn_name)} has provider "
            f"{podnetwork.spec.provider!r}, not {constants.BRIDGE_PROVIDER!r}",
        )
    if params.nad is not None:
        return params.nad, objects.nads[params.nad]
    return podnetwork_nad(podnetwork, objects)


def _gateways(
    label: str,
    params: AttachmentParams,
    nad_key: tuple[str, str],
    nad: npwg.NetworkAttachmentDefinition,
    wants4: bool,
    wants6: bool,
    out: Translation,
) -> tuple[list[str], list[str] | None]:
    """The element's `default-route`, and the families extension when the list alone misleads.

    An NPWG agent moves the default route of each family of the listed gateways, and,
    for `[]`, of every family in the attachment's CNI result. The extension is written
    only when that differs from what the pod asked for, so a selection that NPWG alone
    expresses (and a migrated one, `bridge.migrate`) carries no extension.
    """
    families = {4} if wants4 and not wants6 else {6} if wants6 and not wants4 else {4, 6}
    if "default-route" in params.options:
        gateways = list(params.options["default-route"])
    else:
        gateways = [gw for gw in ipam_gateways(nad) if _family(gw) in families]
        gateways.sort(key=_family)
        missing = families - {_family(gw) for gw in gateways}
        if missing:
            out.warnings.append(
                f"{label}: the NetworkAttachmentDefinition's IPAM configuration names no IPv"
                f"{'/IPv'.join(str(f) for f in sorted(missing))} gateway, so \"default-route\" "
                f"is {json.dumps(gateways)}: this project's agent takes the missing gateway from "
                "the attachment's own CNI result, but implementations such as Multus need a "
                "gateway IP (set it in a NetworkSelectionOptions); the bridge writes no "
                "selection for such a pod"
            )
            out.gateway_gaps.append(GatewayGap(label, nad_key, tuple(sorted(missing)), out.warnings[-1]))
    listed = {_family(gw) for gw in gateways}
    implied = listed if gateways else {4, 6}
    if implied == families:
        return gateways, None
    return gateways, [FAMILY_NAMES[f] for f in sorted(families)]


__all__ = [
    "DEFAULT_LEFT_OUT_WARNING",
    "DEFAULT_ROUTE_FAMILIES_KEY",
    "FAMILY_NAMES",
    "GATEWAY_MISSING_REASON",
    "WRITTEN_ANNOTATION",
    "GatewayGap",
    "Source",
    "Translation",
    "admitted_networks",
    "ipam_gateways",
    "parse_networks",
    "refusal",
    "selection_digest",
    "translate",
    "written_by_bridge",
]
