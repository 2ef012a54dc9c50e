"""Names of the standard and the rules its values follow (1, 4.1.1, 4.1.2.1.x).

The annotation names, the NetworkAttachmentDefinition resource, the selection keys
with their spec sections and capabilities, and one function per value rule that
returns why a value is invalid, or None.
"""

from __future__ import annotations

import ipaddress

from podnetwork.ground import names

# --- Names of the standard -------------------------------------------------------------
# The annotations (4.1, 5) and the NetworkAttachmentDefinition's names (3.1) are spelled
# once, in podnetwork.ground.constants, because layers below the bridge address them too
# (the API clients list NADs, the KEP conformance suite reads the selection); this library
# gives them under the standard's own names.
from podnetwork.ground.constants import NAD_API_VERSION as NAD_API_VERSION
from podnetwork.ground.constants import NAD_GROUP as NAD_GROUP
from podnetwork.ground.constants import NAD_KIND as NAD_KIND
from podnetwork.ground.constants import NAD_PLURAL as NAD_PLURAL
from podnetwork.ground.constants import NAD_SHORT as NAD_SHORT
from podnetwork.ground.constants import NAD_SINGULAR as NAD_SINGULAR
from podnetwork.ground.constants import NAD_VERSION as NAD_VERSION
from podnetwork.ground.constants import NPWG_NETWORK_STATUS_ANNOTATION as NETWORK_STATUS_ANNOTATION
from podnetwork.ground.constants import NPWG_NETWORKS_ANNOTATION as NETWORKS_ANNOTATION

#: The selection keys of 4.1.2.1, in the spec's order (also the order `to_json` writes).
SELECTION_KEYS: tuple[str, ...] = (
    "name",
    "namespace",
    "ips",
    "mac",
    "interface",
    "cni-args",
    "portMappings",
    "bandwidth",
    "default-route",
    "infiniband-guid",
    "ipam-claim-reference",
)

#: Spec section of each selection key, quoted in error messages.
SECTIONS: dict[str, str] = {
    "name": "4.1.2.1.1",
    "namespace": "4.1.2.1.2",
    "ips": "4.1.2.1.3",
    "mac": "4.1.2.1.4",
    "interface": "4.1.2.1.5",
    "cni-args": "4.1.2.1.6",
    "portMappings": "4.1.2.1.7",
    "bandwidth": "4.1.2.1.8",
    "default-route": "4.1.2.1.9",
    "infiniband-guid": "4.1.2.1.10",
    "ipam-claim-reference": "4.1.2.1.11",
}

#: Selection key -> (CNI capability, runtimeConfig key) per 4.1.2.1.x.2 and CNI CONVENTIONS.md.
CAPABILITIES: dict[str, str] = {
    "ips": "ips",
    "mac": "mac",
    "portMappings": "portMappings",
    "bandwidth": "bandwidth",
    "infiniband-guid": "infinibandGUID",
}

#: Default burst (bits) when a bandwidth selection gives a rate only: the CNI reference
#: `bandwidth` plugin refuses a rate without a burst (4.1.2.1.8.2 lets us choose), and
#: kubelet uses the same "no burst limit" value for its own bandwidth annotations.
DEFAULT_BURST_BITS = 2**31 - 1

#: Kubernetes caps object names at 253 characters and namespace names at 63.
NAME_MAX = names.DNS1123_SUBDOMAIN_MAX
NAMESPACE_MAX = names.DNS1123_LABEL_MAX
#: Linux IFNAMSIZ is 16 including the terminating NUL.
IFNAME_MAX_BYTES = names.LINUX_IFNAME_MAX_BYTES


# --- Value rules (each returns a reason, or None when the value is valid) ------------------


def _dns_problem(value: str, max_length: int, fits: bool, form: str) -> str | None:
    if not value:
        return "must not be empty"
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    if not fits:
        return f"must be a DNS-1123 {form}, starting and ending with an alphanumeric character"
    return None


def name_problem(value: str, *, max_length: int = NAME_MAX) -> str | None:
    """3.3: units of the DNS-1123 label format."""
    return _dns_problem(value, max_length, names.is_dns1123_label(value),
                        "label: lower case alphanumeric characters or '-'")


def subdomain_problem(value: str, *, max_length: int = NAME_MAX) -> str | None:
    """A Kubernetes object name, such as a pod's: a DNS-1123 subdomain."""
    return _dns_problem(value, max_length, names.is_dns1123_subdomain(value),
                        "subdomain: lower case alphanumeric characters, '-' or '.'")


def interface_problem(value: str) -> str | None:
    """4.1.2.1.5: a valid Linux interface name (the kernel's `dev_valid_name`)."""
    return names.linux_ifname_problem(value)


def ip_problem(value: str, *, prefix_allowed: bool) -> str | None:
    """4.1.2.1.3: an IPv4 or IPv6 address, with an optional "/prefix" when allowed."""
    addr, slash, prefix = value.partition("/")
    if "%" in addr:
        return "must not carry an IPv6 zone"
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return "is not an IPv4 or IPv6 address"
    if slash:
        if not prefix_allowed:
            return "must be an address without a prefix length"
        if not prefix.isascii() or not prefix.isdigit() or int(prefix) > ip.max_prefixlen:
            return f"has an invalid prefix length (0..{ip.max_prefixlen})"
    return None


def nad_ref(namespace: str, name: str) -> str:
    """`namespace/name`, the reference form of 4.1.1 used in status names (5.3.1)."""
    return f"{namespace}/{name}"


__all__ = [
    "CAPABILITIES",
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
    "interface_problem",
    "ip_problem",
    "nad_ref",
    "name_problem",
    "subdomain_problem",
]
