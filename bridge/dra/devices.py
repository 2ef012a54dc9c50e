"""What a NetworkAttachmentDefinition gives a DRA claim, per driver, and the DeviceClass it makes.

- DRANET (driver `dra.net`) moves a host interface into the pod: a `host-device`
  NAD's `device`/`hwaddr`/`pciBusID`, or makes an ipvlan child of an `ipvlan` NAD's
  `master`; its DeviceClass selects that interface by DRANET's device attributes
  `dra.net/ifName`, `mac`, `pciAddress`, and the NAD's IPAM becomes fixed addresses,
  routes or DHCP. It runs no CNI plugin.
- The CNI DRA driver runs the NAD's configuration as it is: every network is "a
  device of that driver".

The NAD's configuration is CNI JSON, read as the NPWG library loads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge import npwg, translate
from bridge.dra import objects as dra
from bridge.dra.objects import CNI_DRIVER, PODNETWORK_ANNOTATION
from bridge.dra.reasons import Cannot, Reason
from podnetwork.ground import constants
from podnetwork.kep.api import PodNetwork


def cel_string(value: str) -> str:
    # A JSON string literal is a CEL string literal (both take \" \\ \n \uXXXX).
    return json.dumps(value)


@dataclass(frozen=True)
class Network:
    """What a NAD gives a claim, per driver (the NAD's part of the opaque parameters)."""

    selectors: tuple[str, ...]
    """CEL expressions (besides the driver's) that pick the devices of this network."""
    interface: dra.DranetInterface | None = None
    routes: tuple[dra.DranetRoute, ...] = ()
    pool_ipam: str | None = None
    """The type of an IPAM plugin that allocates from a pool (DRANET cannot)."""
    subnets: tuple[str, ...] = ()
    """Subnets the IPAM names, to give per-pod `ips` without a prefix their length."""
    cni_config: dict[str, Any] | None = None


def nad_config(nad: npwg.NetworkAttachmentDefinition, what: str) -> dict[str, Any]:
    text = nad.spec.config
    if text is None or not text.strip():
        raise Cannot(
            Reason.CONFIG_ON_NODE,
            f"{what} has no spec.config: its configuration is a file on each node (NPWG 3.2.4), "
            "which a DRA claim cannot name; put the configuration in spec.config",
        )
    try:
        return npwg.load_cni_config(text, f"{what} spec.config")
    except npwg.DelegationError as exc:
        raise Cannot(str(translate.Reason.INVALID_PARAMETERS), str(exc)) from None


def _attr(driver: str, name: str, value: str) -> str:
    return f"device.attributes[{cel_string(driver)}].{name} == {cel_string(value)}"


def ipam_subnets(ipam: Mapping[str, Any]) -> list[str]:
    subnets: list[str] = []
    if isinstance(ipam.get("subnet"), str):
        subnets.append(ipam["subnet"])
    for rangeset in ipam.get("ranges") or []:
        for r in rangeset if isinstance(rangeset, list) else []:
            if isinstance(r, Mapping) and isinstance(r.get("subnet"), str):
                subnets.append(r["subnet"])
    for a in ipam.get("addresses") or []:
        if isinstance(a, Mapping) and isinstance(a.get("address"), str):
            subnets.append(a["address"])
    return subnets


def _routes(ipam: Mapping[str, Any], what: str) -> list[dra.DranetRoute]:
    out: list[dra.DranetRoute] = []
    for r in ipam.get("routes") or []:
        if not isinstance(r, Mapping) or not isinstance(r.get("dst"), str):
            continue
        gw = r.get("gw")
        out.append(dra.DranetRoute(destination=r["dst"], gateway=gw if isinstance(gw, str) else None))
    return out


def _host_device(main: Mapping[str, Any], driver: str, what: str) -> list[str]:
    """The selectors of the host interface a `host-device` configuration names."""
    if main.get("kernelpath"):
        raise Cannot(Reason.NO_DEVICE, f"{what}: host-device `kernelpath` has no DRANET attribute; "
                     "name the device by `device`, `hwaddr` or `pciBusID`")
    selectors: list[str] = []
    for key, attr in (("device", "ifName"), ("hwaddr", "mac"), ("pciBusID", "pciAddress")):
        value = main.get(key)
        if isinstance(value, str) and value:
            selectors.append(_attr(driver, attr, value.lower() if key == "hwaddr" else value))
    if not selectors:
        raise Cannot(Reason.NO_DEVICE, f"{what}: the host-device configuration names no device "
                     "(`device`, `hwaddr` or `pciBusID`)")
    return selectors


def _ipvlan(main: Mapping[str, Any], driver: str, what: str, iface: dra.DranetInterface) -> list[str]:
    """The selector of an `ipvlan` configuration's master; its mode and MTU go to `iface`."""
    master = main.get("master")
    if not isinstance(master, str) or not master:
        raise Cannot(Reason.NO_DEVICE, f"{what}: the ipvlan configuration names no `master`; the "
                     "plugin would pick the node's default-route interface, which no selector can name")
    mode = main.get("mode") or "l2"
    if mode == "l2":
        iface.ipvlan = dra.DranetIPVlan(mode="l2")
    elif mode == "l3":
        iface.ipvlan = dra.DranetIPVlan(mode="l3")
    elif mode == "l3s":
        iface.ipvlan = dra.DranetIPVlan(mode="l3s")
    else:
        raise Cannot(Reason.UNSUPPORTED_PLUGIN, f"{what}: ipvlan mode {mode!r} is not l2, l3 or l3s")
    if isinstance(main.get("mtu"), int):
        iface.mtu = main["mtu"]
    return [_attr(driver, "ifName", master)]


def _dranet_ipam(
    ipam: Mapping[str, Any], ptype: str, what: str, iface: dra.DranetInterface
) -> tuple[list[dra.DranetRoute], str | None]:
    """The routes of an IPAM configuration and, for one that allocates from a pool, its type;
    fixed addresses and DHCP go to `iface`."""
    ipam_type = ipam.get("type")
    if not ipam_type:
        return [], None
    if ipam_type == "static":
        iface.addresses = [a["address"] for a in ipam.get("addresses") or []
                           if isinstance(a, Mapping) and isinstance(a.get("address"), str)] or None
        return _routes(ipam, what), None
    if ipam_type == "dhcp":
        if ptype == "ipvlan":
            raise Cannot(Reason.UNSUPPORTED_IPAM, f"{what}: DRANET's ipvlan addressing has no DHCP")
        iface.dhcp = True
        return [], None
    pool = str(ipam_type)
    routes = _routes(ipam, what)
    if any(r.gateway is None for r in routes):
        raise Cannot(Reason.UNSUPPORTED_IPAM, f"{what}: a route of the {pool} IPAM has no `gw`; "
                     "DRANET's routes need the gateway written out")
    return routes, pool


def _dranet_network(nad: npwg.NetworkAttachmentDefinition, what: str, driver: str) -> Network:
    """DRANET moves a host interface into the pod, or makes an ipvlan child of one
    (DRANET pkg/apis/types.go `InterfaceConfig.IPVlan`); it runs no CNI plugin."""
    config = nad_config(nad, what)
    plugins = npwg.plugins_of(config)
    types = [str(p.get("type")) for p in plugins]
    if len(plugins) > 1:
        raise Cannot(
            Reason.CHAINED_PLUGINS,
            f"{what} chains the CNI plugins {', '.join(types)}; DRANET runs no CNI plugin, so "
            f"{', '.join(types[1:])} would not run; export with --driver {CNI_DRIVER}",
        )
    main = plugins[0]
    ptype = types[0]
    iface = dra.DranetInterface()
    if ptype == "host-device":
        selectors = _host_device(main, driver, what)
    elif ptype == "ipvlan":
        selectors = _ipvlan(main, driver, what, iface)
    else:
        raise Cannot(
            Reason.UNSUPPORTED_PLUGIN,
            f"{what} uses the CNI plugin {ptype!r}; DRANET attaches host interfaces (host-device) or "
            f"ipvlan children of them, and cannot make a {ptype} interface; export with "
            f"--driver {CNI_DRIVER}, which runs the plugin",
        )
    raw_ipam = main.get("ipam")
    ipam: Mapping[str, Any] = raw_ipam if isinstance(raw_ipam, Mapping) else {}
    routes, pool = _dranet_ipam(ipam, ptype, what, iface)
    return Network(tuple(selectors), iface, tuple(routes), pool, tuple(ipam_subnets(ipam)))


def _cni_network(nad: npwg.NetworkAttachmentDefinition, what: str) -> Network:
    """The CNI DRA driver runs the NAD's configuration as it is (its `CNI.config`)."""
    return Network((), cni_config=nad_config(nad, what))


def network(nad: npwg.NetworkAttachmentDefinition, what: str, driver: str) -> Network:
    if driver == CNI_DRIVER:
        return _cni_network(nad, what)
    return _dranet_network(nad, what, driver)


def device_class(name: str, net: Network, driver: str) -> dra.DeviceClass:
    expressions = [f"device.driver == {cel_string(driver)}", *net.selectors]
    return dra.DeviceClass(
        metadata=dra.Meta(name=name, annotations={PODNETWORK_ANNOTATION: name}),
        spec=dra.DeviceClassSpec(
            selectors=[dra.DeviceSelector(cel=dra.CELDeviceSelector(expression=e)) for e in expressions]
        ),
    )



@dataclass
class Classes:
    """Each PodNetwork's class (the network its NAD gives, and that NAD), or why it has none."""

    networks: dict[str, tuple[Network, translate.Key]] = field(default_factory=dict)
    problems: dict[str, Cannot] = field(default_factory=dict)


def class_network(pn: PodNetwork, objs: translate.Objects, driver: str) -> tuple[Network, translate.Key]:
    """The network of a PodNetwork's DeviceClass, and its NAD. Raises `Cannot`."""
    if not pn.spec.enabled:
        raise Cannot(Reason.DISABLED, "spec.enabled is false; DRA has no disabled DeviceClass: export it "
                     "once it is enabled (or leave its DeviceClass out to keep pods off it)")
    if not translate.is_bridge(pn):
        raise Cannot(
            Reason.NOT_BRIDGE_PROVIDER,
            f"provider {pn.spec.provider!r}: only PodNetworks of {constants.BRIDGE_PROVIDER} have "
            "parameters (a NetworkAttachmentDefinition) that say which devices are on the network",
        )
    try:
        key, nad = translate.podnetwork_nad(pn, objs)
    except translate.TranslationError as exc:
        raise Cannot(str(exc.reason), str(exc)) from None
    what = f"NetworkAttachmentDefinition {key[0]}/{key[1]}"
    return network(nad, what, driver), key


__all__ = ["Classes", "Network", "cel_string", "class_network", "device_class", "ipam_subnets", "nad_config",
           "network"]
