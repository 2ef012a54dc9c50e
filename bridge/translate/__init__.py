"""The translation KEP-3698 -> NPWG: the only code of the NPWG layer that knows PodNetworks.

- `refs`: what `parametersRefs` name, resolved (the only reader of `parametersRefs`);
- `networks`: a pod's networks to a `k8s.v1.cni.cncf.io/networks` selection;
- `params`: ParamsReady of the bridge's PodNetworks and attachments;
- `podips`: NPWG `network-status` back to the KEP's pod IPs per PodNetwork.

The names of `refs` and `networks` are re-exported here, so callers write
`translate.translate(networks, namespace, objects)` and `translate.Objects`. The bridge
operator and the CNI agent decide from a pod the same way: `parse_networks` (the one parser
of the KEP annotation), `admitted_networks`, `translate` and `refusal`.
"""

from __future__ import annotations

from bridge.translate.networks import (
    DEFAULT_LEFT_OUT_WARNING,
    DEFAULT_ROUTE_FAMILIES_KEY,
    FAMILY_NAMES,
    GATEWAY_MISSING_REASON,
    WRITTEN_ANNOTATION,
    GatewayGap,
    Source,
    Translation,
    admitted_networks,
    ipam_gateways,
    parse_networks,
    refusal,
    selection_digest,
    translate,
    written_by_bridge,
)
from bridge.translate.refs import (
    NAD_KINDS,
    OPTIONS_API_VERSION,
    OPTIONS_GROUP,
    OPTIONS_KEYS,
    OPTIONS_KIND,
    OPTIONS_KINDS,
    OPTIONS_PLURAL,
    OPTIONS_SINGULAR,
    OPTIONS_VERSION,
    AttachmentParams,
    InvalidKey,
    Key,
    NetworkSelectionOptions,
    Obj,
    Objects,
    Reason,
    TranslationError,
    Typed,
    attachment_params,
    describe,
    field_errors,
    is_bridge,
    nad_config_problem,
    options_problem,
    podnetwork_nad,
    read,
    references,
)
from podnetwork.ground.constants import ATTACHMENT_NETWORKS_ANNOTATION

# The KEP entry of a pod's networks list and the KEP objects' models: re-exported
# for the agent, which sees the KEP layer only through this package (.importlinter).
from podnetwork.kep.api import Network, PodNetwork, PodNetworkAttachment

__all__ = [
    "ATTACHMENT_NETWORKS_ANNOTATION",
    "DEFAULT_LEFT_OUT_WARNING",
    "DEFAULT_ROUTE_FAMILIES_KEY",
    "FAMILY_NAMES",
    "GATEWAY_MISSING_REASON",
    "NAD_KINDS",
    "OPTIONS_API_VERSION",
    "OPTIONS_GROUP",
    "OPTIONS_KEYS",
    "OPTIONS_KIND",
    "OPTIONS_KINDS",
    "OPTIONS_PLURAL",
    "OPTIONS_SINGULAR",
    "OPTIONS_VERSION",
    "WRITTEN_ANNOTATION",
    "AttachmentParams",
    "GatewayGap",
    "InvalidKey",
    "Key",
    "Network",
    "NetworkSelectionOptions",
    "Obj",
    "Objects",
    "PodNetwork",
    "PodNetworkAttachment",
    "Reason",
    "Source",
    "Translation",
    "TranslationError",
    "Typed",
    "admitted_networks",
    "attachment_params",
    "describe",
    "field_errors",
    "ipam_gateways",
    "is_bridge",
    "nad_config_problem",
    "options_problem",
    "parse_networks",
    "podnetwork_nad",
    "read",
    "references",
    "refusal",
    "selection_digest",
    "translate",
    "written_by_bridge",
]
