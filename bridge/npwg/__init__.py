"""The Network Plumbing WG "net-attach-def" standard (multi-net spec v1.3) as a library.

Self-contained on purpose: of this project it imports only the ground
(`podnetwork.ground`: the names on the wire, the name rules, the NAD's typed view;
see `.importlinter`), so any tool may use it — the
translation, the migration, the CNI agent, or a program that has never heard of
PodNetworks. One module per part of the standard: `names` (1, 3.3, 4.1.2.1.x
value rules; the NAD's and the annotations' names, spelled in the ground),
`selection` (4.1), `delegation` (3.4, 4.1.2.1.x.2, 7.5), `status` (5); the NAD's
typed view (3.1) is `podnetwork.ground.nad`, re-exported here.
This package re-exports their public names, so `npwg.parse_selection(...)` reads
as the spec does.

What it offers, by section of the spec:

- 4.1 the selection annotation `k8s.v1.cni.cncf.io/networks`: `parse_selection`
  (both formats), `NetworkSelectionElement`, `format_selection`; invalid input
  raises `InvalidSelection`, which names the element and the key.
- 3.4 and 4.1.2.1.x "CNI Delegating Plugin Requirements": `delegate_config`,
  the CNI configuration a delegating plugin executes for one attachment;
  `DelegationError` when the spec says the request must fail.
- 5 the status annotation `k8s.v1.cni.cncf.io/network-status`: `status_entry`,
  one status map from one CNI result.

Where Multus or the NAD client library read the spec differently, this module
follows the spec; `docs/npwg-conformance.md` lists each difference.
"""

from __future__ import annotations

from bridge.npwg.delegation import (
    DelegationError,
    delegate_config,
    load_cni_config,
    plugins_of,
)
from bridge.npwg.names import (
    CAPABILITIES,
    DEFAULT_BURST_BITS,
    IFNAME_MAX_BYTES,
    NAD_API_VERSION,
    NAD_GROUP,
    NAD_KIND,
    NAD_PLURAL,
    NAD_SHORT,
    NAD_SINGULAR,
    NAD_VERSION,
    NAME_MAX,
    NAMESPACE_MAX,
    NETWORK_STATUS_ANNOTATION,
    NETWORKS_ANNOTATION,
    SECTIONS,
    SELECTION_KEYS,
    interface_problem,
    ip_problem,
    nad_ref,
    name_problem,
    subdomain_problem,
)
from bridge.npwg.selection import (
    InvalidSelection,
    NetworkSelectionElement,
    format_selection,
    ignored_key_warnings,
    parse_selection,
)
from bridge.npwg.status import (
    CNI_RESULT_VERSIONS,
    UnsupportedResultVersion,
    parse_status,
    status_entry,
)
from podnetwork.ground.nad import NetworkAttachmentDefinition, NetworkAttachmentDefinitionSpec

__all__ = [
    "CAPABILITIES",
    "CNI_RESULT_VERSIONS",
    "DEFAULT_BURST_BITS",
    "IFNAME_MAX_BYTES",
    "NAD_API_VERSION",
    "NAD_GROUP",
    "NAD_KIND",
    "NAD_PLURAL",
    "NAD_SHORT",
    "NAD_SINGULAR",
    "NAD_VERSION",
    "NAMESPACE_MAX",
    "NAME_MAX",
    "NETWORKS_ANNOTATION",
    "NETWORK_STATUS_ANNOTATION",
    "SECTIONS",
    "SELECTION_KEYS",
    "DelegationError",
    "InvalidSelection",
    "NetworkAttachmentDefinition",
    "NetworkAttachmentDefinitionSpec",
    "NetworkSelectionElement",
    "UnsupportedResultVersion",
    "delegate_config",
    "format_selection",
    "ignored_key_warnings",
    "interface_problem",
    "ip_problem",
    "load_cni_config",
    "nad_ref",
    "name_problem",
    "parse_selection",
    "parse_status",
    "plugins_of",
    "status_entry",
    "subdomain_problem",
]
