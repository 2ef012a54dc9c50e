"""The per-pod part of a claim: an attachment's interface name and per-pod keys (NPWG 4.1.2.1.x)
as the driver's opaque parameters, and the ResourceClaimTemplate spec that carries them."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from bridge import npwg, translate
from bridge.dra import objects as dra
from bridge.dra.devices import Network
from bridge.dra.objects import CNI_DRIVER, DRANET_DRIVER, REQUEST_NAME
from bridge.dra.reasons import Cannot, Reason

#: NPWG selection keys (4.1.2.1.x) neither driver's parameters can carry.
_UNSUPPORTED_KEYS = (
    ("cni_args", "cni-args", "4.1.2.1.6"),
    ("port_mappings", "portMappings", "4.1.2.1.7"),
    ("bandwidth", "bandwidth", "4.1.2.1.8"),
    ("infiniband_guid", "infiniband-guid", "4.1.2.1.10"),
    ("ipam_claim_reference", "ipam-claim-reference", "4.1.2.1.11"),
)


def with_prefix(ip: str, subnets: Sequence[str], what: str) -> str:
    """A per-pod IP as a CIDR: as written when it has a prefix, else with the prefix of the
    IPAM subnet that holds it (NPWG 4.1.2.1.3 allows an IP without one; DRANET needs CIDRs)."""
    if "/" in ip:
        return ip
    addr = ipaddress.ip_address(ip)
    for subnet in subnets:
        try:
            net = ipaddress.ip_interface(subnet).network
        except ValueError:
            continue
        if addr.version == net.version and addr in net:
            return f"{ip}/{net.prefixlen}"
    raise Cannot(Reason.UNSUPPORTED_IPAM, f"{what}: ips {ip!r} has no prefix length and the IPAM "
                  "configuration names no subnet holding it; DRANET takes addresses as CIDRs")


def _common_keys(element: npwg.NetworkSelectionElement, what: str) -> None:
    if element.default_route is not None:
        raise Cannot(
            Reason.DEFAULT_ROUTE,
            f"{what}: isDefaultGW4/isDefaultGW6 move the pod's default route to this network "
            "(NPWG 4.1.2.1.9); a DRA network driver adds an interface beside the cluster network, "
            "whose CNI plugin keeps the default route; drop isDefaultGW4/6 from this entry",
        )
    keys = [f"{wire} (NPWG {sec})" for attr, wire, sec in _UNSUPPORTED_KEYS
            if getattr(element, attr) is not None]
    keys += [f"{k} (an implementation key)" for k in element.extensions
             if k != translate.DEFAULT_ROUTE_FAMILIES_KEY]
    if keys:
        raise Cannot(Reason.UNSUPPORTED_KEY, f"{what}: the per-pod parameters {', '.join(keys)} "
                      "have no place in the driver's parameters")


def dranet_parameters(
    element: npwg.NetworkSelectionElement, net: Network, interface: str | None, what: str
) -> dict[str, Any]:
    _common_keys(element, what)
    iface = (net.interface or dra.DranetInterface()).model_copy(deep=True)
    if interface:
        iface.name = interface
    if element.ips:
        iface.addresses = [with_prefix(ip, net.subnets, what) for ip in element.ips]
        if iface.ipvlan is not None:
            iface.ipvlan.addressing = dra.DranetIPVlanAddressing(type="static")
    elif net.pool_ipam:
        raise Cannot(
            Reason.UNSUPPORTED_IPAM,
            f"{what}: the {net.pool_ipam} IPAM gives each attachment an address from a pool; DRANET "
            "takes fixed addresses or DHCP; give the attachment `ips` (a NetworkSelectionOptions), "
            f"use static IPAM, or export with --driver {CNI_DRIVER}",
        )
    elif iface.ipvlan is not None:
        iface.ipvlan.addressing = dra.DranetIPVlanAddressing(type="static" if iface.addresses else "none")
    if element.mac:
        iface.hardware_addr = element.mac
    params = dra.DranetNetworkConfig(interface=iface, routes=list(net.routes) or None)
    return params.to_dict()


def cni_parameters(
    element: npwg.NetworkSelectionElement, net: Network, interface: str, what: str
) -> dict[str, Any]:
    _common_keys(element, what)
    keys = [f"{wire} (NPWG {sec})" for wire, sec in (("ips", "4.1.2.1.3"), ("mac", "4.1.2.1.4"))
            if getattr(element, wire) is not None]
    if keys:
        raise Cannot(
            Reason.UNSUPPORTED_KEY,
            f"{what}: the per-pod parameters {', '.join(keys)} go to CNI runtimeConfig, which the "
            "CNI DRA driver's CNI object (ifName, config) has no field for; "
            f"export with --driver {DRANET_DRIVER} (static addresses and MAC)",
        )
    assert net.cni_config is not None
    return dra.CniParameters(if_name=interface, config=net.cni_config).to_dict()


def template_spec(
    driver: str, pod_network: str, parameters: dict[str, Any]
) -> dra.ResourceClaimTemplateSpec:
    return dra.ResourceClaimTemplateSpec(
        spec=dra.ResourceClaimSpec(
            devices=dra.DeviceClaim(
                requests=[
                    dra.DeviceRequest(
                        name=REQUEST_NAME,
                        exactly=dra.ExactDeviceRequest(
                            device_class_name=pod_network, allocation_mode="ExactCount", count=1
                        ),
                    )
                ],
                config=[
                    dra.DeviceClaimConfiguration(
                        requests=[REQUEST_NAME],
                        opaque=dra.OpaqueDeviceConfiguration(driver=driver, parameters=parameters),
                    )
                ],
            )
        )
    )


__all__ = ["cni_parameters", "dranet_parameters", "template_spec", "with_prefix"]
