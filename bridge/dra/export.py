"""PodNetworks and the workloads that use them, rendered as DRA objects. Pure.

The mapping (docs/dra.md has it side by side, with the sources):

- a PodNetwork -> a DeviceClass of the same name (both cluster-scoped DNS subdomains):
  `spec.selectors` pick the driver's devices that are on this network. For DRANET
  (driver `dra.net`) that is the host interface the PodNetwork's NAD names: a
  `host-device` NAD's `device`/`hwaddr`/`pciBusID`, an `ipvlan` NAD's `master`,
  matched against DRANET's device attributes `dra.net/ifName`, `mac`, `pciAddress`.
  For the CNI DRA driver every network is "a device of that driver";
- one attachment (an entry of the pod's networks, through the bridge's translation
  `bridge.translate.translate`, so PodNetworkAttachments and NetworkSelectionOptions
  resolve as they do for the CNI agent) -> a ResourceClaimTemplate with one request
  `nic` of `exactly` one device of the PodNetwork's class, and the driver's opaque
  parameters for that request: the interface name and every per-network and
  per-pod parameter the driver can take. Attachments with the same shape (same
  PodNetwork, same parameters) in one namespace share one template;
- the pod (or the pod template of a Deployment, StatefulSet, DaemonSet, ReplicaSet,
  Job, CronJob) -> `spec.resourceClaims[]` naming those templates, and without
  the KEP annotation, so the KEP layer and a DRA driver do not both attach it;
- a Pod's `k8s.v1.cni.cncf.io/network-status` -> KEP-4817 `networkData` per claim:
  what the driver would write in the ResourceClaim's `status.devices[]`.

The cluster default network (`default` PodNetwork) is not exported: DRA network
drivers add interfaces beside the pod's network, which the cluster's CNI plugin
still attaches (KEP "Default PodNetwork").

What a driver cannot express is an `Unexpressible` with a reason; a workload is
exported whole or not at all, as `podnetwork migrate` migrates (docs/migration.md).
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bridge import npwg, translate
from bridge.dra import objects as dra
from bridge.translate import podips
from podnetwork.ground import constants, excerpts
from podnetwork.ground import names as kube_names
from podnetwork.ground.fielderrors import InvalidObject
from podnetwork.kep import networks, validation
from podnetwork.kep.api import Network, PodNetwork

#: DRANET's driver name (its `AttrPrefix`, pkg/apis/attributes.go), the default.
DRANET_DRIVER = "dra.net"
CNI_DRIVER = dra.CNI_DRIVER
DRIVERS = (DRANET_DRIVER, CNI_DRIVER)

#: The one request of every exported template; config and containers name it.
REQUEST_NAME = "nic"
#: On DeviceClasses and templates: the PodNetwork they were exported from.
PODNETWORK_ANNOTATION = f"bridge.{constants.GROUP}/podnetwork"
#: Pod annotations that describe the KEP attachment and mean nothing after the export.
_KEP_POD_ANNOTATIONS = (
    constants.NETWORKS_ANNOTATION,
    constants.POD_IPS_ANNOTATION,
    constants.REQUEUED_AT_ANNOTATION,
    npwg.NETWORK_STATUS_ANNOTATION,
)
#: Server-set metadata that a manifest to re-create the object must not carry.
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")

_DNS_LABEL_MAX = 63
_NAME_MAX = 253
_HASH_LEN = 10


class Reason(StrEnum):
    """Why a PodNetwork or a workload cannot be expressed (translation reasons are kept too)."""

    INVALID_NETWORKS = "InvalidNetworks"
    INVALID_OBJECT = "InvalidObject"
    NOT_BRIDGE_PROVIDER = "NotBridgeProvider"
    DISABLED = "PodNetworkDisabled"
    CONFIG_ON_NODE = "ConfigOnNode"
    UNSUPPORTED_PLUGIN = "UnsupportedPlugin"
    CHAINED_PLUGINS = "ChainedPlugins"
    NO_DEVICE = "NoDevice"
    UNSUPPORTED_IPAM = "UnsupportedIPAM"
    UNSUPPORTED_KEY = "UnsupportedKey"
    DEFAULT_ROUTE = "DefaultRoute"
    ATTACHMENT_CHANGES_DEVICE = "AttachmentChangesDevice"
    PARAMETERS_TOO_LARGE = "ParametersTooLarge"


#: Workload kinds: (API group, kind) -> the path of the pod template (empty: the object).
WORKLOAD_TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): (),
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "StatefulSet"): ("spec", "template"),
    ("apps", "DaemonSet"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
}
_WORKLOAD_KINDS = frozenset(kind for _, kind in WORKLOAD_TEMPLATES)


@dataclass(frozen=True)
class Settings:
    driver: str = DRANET_DRIVER
    default_namespace: str = "default"


@dataclass(frozen=True)
class Unexpressible:
    """A PodNetwork or workload that the driver's DRA objects cannot express, and why."""

    ref: str
    reason: str
    message: str
    source: str = ""

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{self.ref}: {self.reason}: {self.message}"


@dataclass(frozen=True)
class Note:
    """Something a migrated workload loses or gains that does not stop its export."""

    ref: str
    message: str
    source: str = ""

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{self.ref}: {self.message}"


@dataclass(frozen=True)
class Claim:
    """One attachment of one workload, as a pod claim on a template."""

    pod_claim: str
    """`spec.resourceClaims[].name` in the pod."""
    template: str
    pod_network: str
    interface: str | None
    index: int
    """The entry's position in the pod's networks list."""


@dataclass
class ExportedWorkload:
    ref: str
    source: str
    obj: dict[str, Any]
    """The workload as it should be applied: claims added, KEP annotations removed."""
    claims: list[Claim]


@dataclass
class NetworkDataEntry:
    """KEP-4817 data of one claim of one pod, from its NPWG network-status."""

    pod: str
    pod_claim: str
    pod_network: str
    driver: str
    data: dra.NetworkDeviceData

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "resourceClaimName": self.pod_claim,
            "podNetwork": self.pod_network,
            "request": REQUEST_NAME,
            "driver": self.driver,
            "networkData": self.data.to_dict(),
        }


@dataclass
class Export:
    device_classes: list[dra.DeviceClass] = field(default_factory=list)
    templates: list[dra.ResourceClaimTemplate] = field(default_factory=list)
    workloads: list[ExportedWorkload] = field(default_factory=list)
    network_data: list[NetworkDataEntry] = field(default_factory=list)
    unexpressible: list[Unexpressible] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    skipped: list[Note] = field(default_factory=list)

    def documents(self) -> list[dict[str, Any]]:
        """What to apply, in order: classes, templates (namespaced), then the workloads."""
        return (
            [c.to_dict() for c in self.device_classes]
            + [t.to_dict() for t in self.templates]
            + [w.obj for w in self.workloads]
        )


class _Cannot(Exception):
    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


# --- Inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str
    obj: Mapping[str, Any]
    template_path: tuple[str, ...]
    source: str = ""

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def template(self) -> Mapping[str, Any]:
        node: Any = self.obj
        for key in self.template_path:
            node = node.get(key) if isinstance(node, Mapping) else None
        return node if isinstance(node, Mapping) else {}

    @property
    def annotations(self) -> Mapping[str, Any]:
        return networks.annotations_of(self.template)

    @property
    def owner(self) -> str | None:
        meta = self.obj.get("metadata")
        refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
        for ref in refs if isinstance(refs, list) else []:
            if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") in _WORKLOAD_KINDS:
                return f"{ref.get('kind')} {self.namespace}/{ref.get('name')}"
        return None


def _group(api_version: Any) -> str | None:
    if not isinstance(api_version, str):
        return None
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def workload_of(obj: Mapping[str, Any], *, default_namespace: str, source: str = "") -> Workload | None:
    """The workload view of an object, or None for other kinds."""
    key = (_group(obj.get("apiVersion")), obj.get("kind"))
    path = WORKLOAD_TEMPLATES.get(key)  # type: ignore[arg-type]
    if path is None:
        return None
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return Workload(
        kind=str(obj["kind"]),
        namespace=str(meta.get("namespace") or default_namespace),
        name=str(meta.get("name") or ""),
        obj=obj,
        template_path=path,
        source=source,
    )


# --- Names -------------------------------------------------------------------------------------


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LEN]


def _label_from(name: str) -> str:
    """A DNS label made from a DNS subdomain (a PodNetwork name): dots become dashes."""
    label = name.replace(".", "-")[:_DNS_LABEL_MAX].strip("-")
    return label


def pod_claim_name(pod_network: str, index: int, taken: set[str]) -> str:
    """The pod's claim name for an attachment: the PodNetwork's name as a DNS label,
    else `network-<index>` (a name cut short, or one the pod already uses)."""
    label = _label_from(pod_network)
    if label and label not in taken and kube_names.is_dns1123_label(label):
        return label
    candidate = f"network-{index}"
    k = index
    while candidate in taken:
        k += 1000
        candidate = f"network-{k}"
    return candidate


def template_name(pod_network: str, spec: Mapping[str, Any]) -> str:
    """`<podnetwork>-<10 hex of the template spec>`: one name per shape, stable across runs."""
    base = pod_network[: _NAME_MAX - _HASH_LEN - 1].rstrip("-.")
    return f"{base}-{_digest(spec)}"


def _cel_string(value: str) -> str:
    # A JSON string literal is a CEL string literal (both take \" \\ \n \uXXXX).
    return json.dumps(value)


# --- Devices and parameters per driver ---------------------------------------------------------


@dataclass(frozen=True)
class _Network:
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


def _nad_config(nad: npwg.NetworkAttachmentDefinition, what: str) -> dict[str, Any]:
    text = nad.spec.config
    if text is None or not text.strip():
        raise _Cannot(
            Reason.CONFIG_ON_NODE,
            f"{what} has no spec.config: its configuration is a file on each node (NPWG 3.2.4), "
            "which a DRA claim cannot name; put the configuration in spec.config",
        )
    try:
        return npwg.load_cni_config(text, f"{what} spec.config")
    except npwg.DelegationError as exc:
        raise _Cannot(str(translate.Reason.INVALID_PARAMETERS), str(exc)) from None


def _attr(driver: str, name: str, value: str) -> str:
    return f"device.attributes[{_cel_string(driver)}].{name} == {_cel_string(value)}"


def _ipam_subnets(ipam: Mapping[str, Any]) -> list[str]:
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


def _dranet_network(nad: npwg.NetworkAttachmentDefinition, what: str, driver: str) -> _Network:
    """DRANET moves a host interface into the pod, or makes an ipvlan child of one
    (DRANET pkg/apis/types.go `InterfaceConfig.IPVlan`); it runs no CNI plugin."""
    config = _nad_config(nad, what)
    plugins = npwg.plugins_of(config)
    types = [str(p.get("type")) for p in plugins]
    if len(plugins) > 1:
        raise _Cannot(
            Reason.CHAINED_PLUGINS,
            f"{what} chains the CNI plugins {', '.join(types)}; DRANET runs no CNI plugin, so "
            f"{', '.join(types[1:])} would not run; export with --driver {CNI_DRIVER}",
        )
    main = plugins[0]
    ptype = types[0]
    selectors: list[str] = []
    iface = dra.DranetInterface()
    if ptype == "host-device":
        if main.get("kernelpath"):
            raise _Cannot(Reason.NO_DEVICE, f"{what}: host-device `kernelpath` has no DRANET attribute; "
                          "name the device by `device`, `hwaddr` or `pciBusID`")
        for key, attr in (("device", "ifName"), ("hwaddr", "mac"), ("pciBusID", "pciAddress")):
            value = main.get(key)
            if isinstance(value, str) and value:
                selectors.append(_attr(driver, attr, value.lower() if key == "hwaddr" else value))
        if not selectors:
            raise _Cannot(Reason.NO_DEVICE, f"{what}: the host-device configuration names no device "
                          "(`device`, `hwaddr` or `pciBusID`)")
    elif ptype == "ipvlan":
        master = main.get("master")
        if not isinstance(master, str) or not master:
            raise _Cannot(Reason.NO_DEVICE, f"{what}: the ipvlan configuration names no `master`; the "
                          "plugin would pick the node's default-route interface, which no selector can name")
        selectors.append(_attr(driver, "ifName", master))
        mode = main.get("mode") or "l2"
        if mode == "l2":
            iface.ipvlan = dra.DranetIPVlan(mode="l2")
        elif mode == "l3":
            iface.ipvlan = dra.DranetIPVlan(mode="l3")
        elif mode == "l3s":
            iface.ipvlan = dra.DranetIPVlan(mode="l3s")
        else:
            raise _Cannot(Reason.UNSUPPORTED_PLUGIN, f"{what}: ipvlan mode {mode!r} is not l2, l3 or l3s")
        if isinstance(main.get("mtu"), int):
            iface.mtu = main["mtu"]
    else:
        raise _Cannot(
            Reason.UNSUPPORTED_PLUGIN,
            f"{what} uses the CNI plugin {ptype!r}; DRANET attaches host interfaces (host-device) or "
            f"ipvlan children of them, and cannot make a {ptype} interface; export with "
            f"--driver {CNI_DRIVER}, which runs the plugin",
        )
    raw_ipam = main.get("ipam")
    ipam: Mapping[str, Any] = raw_ipam if isinstance(raw_ipam, Mapping) else {}
    ipam_type = ipam.get("type")
    routes: list[dra.DranetRoute] = []
    pool: str | None = None
    if not ipam_type:
        pass
    elif ipam_type == "static":
        iface.addresses = [a["address"] for a in ipam.get("addresses") or []
                           if isinstance(a, Mapping) and isinstance(a.get("address"), str)] or None
        routes = _routes(ipam, what)
    elif ipam_type == "dhcp":
        if ptype == "ipvlan":
            raise _Cannot(Reason.UNSUPPORTED_IPAM, f"{what}: DRANET's ipvlan addressing has no DHCP")
        iface.dhcp = True
    else:
        pool = str(ipam_type)
        routes = _routes(ipam, what)
        if any(r.gateway is None for r in routes):
            raise _Cannot(Reason.UNSUPPORTED_IPAM, f"{what}: a route of the {pool} IPAM has no `gw`; "
                          "DRANET's routes need the gateway written out")
    return _Network(tuple(selectors), iface, tuple(routes), pool, tuple(_ipam_subnets(ipam)))


def _cni_network(nad: npwg.NetworkAttachmentDefinition, what: str) -> _Network:
    """The CNI DRA driver runs the NAD's configuration as it is (its `CNI.config`)."""
    return _Network((), cni_config=_nad_config(nad, what))


def _network(nad: npwg.NetworkAttachmentDefinition, what: str, driver: str) -> _Network:
    if driver == CNI_DRIVER:
        return _cni_network(nad, what)
    return _dranet_network(nad, what, driver)


def _class(name: str, net: _Network, driver: str) -> dra.DeviceClass:
    expressions = [f"device.driver == {_cel_string(driver)}", *net.selectors]
    return dra.DeviceClass(
        metadata=dra.Meta(name=name, annotations={PODNETWORK_ANNOTATION: name}),
        spec=dra.DeviceClassSpec(
            selectors=[dra.DeviceSelector(cel=dra.CELDeviceSelector(expression=e)) for e in expressions]
        ),
    )


# --- Per-pod keys ------------------------------------------------------------------------------

#: NPWG selection keys (4.1.2.1.x) neither driver's parameters can carry.
_UNSUPPORTED_KEYS = (
    ("cni_args", "cni-args", "4.1.2.1.6"),
    ("port_mappings", "portMappings", "4.1.2.1.7"),
    ("bandwidth", "bandwidth", "4.1.2.1.8"),
    ("infiniband_guid", "infiniband-guid", "4.1.2.1.10"),
    ("ipam_claim_reference", "ipam-claim-reference", "4.1.2.1.11"),
)


def _with_prefix(ip: str, subnets: Sequence[str], what: str) -> str:
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
    raise _Cannot(Reason.UNSUPPORTED_IPAM, f"{what}: ips {ip!r} has no prefix length and the IPAM "
                  "configuration names no subnet holding it; DRANET takes addresses as CIDRs")


def _common_keys(element: npwg.NetworkSelectionElement, what: str) -> None:
    if element.default_route is not None:
        raise _Cannot(
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
        raise _Cannot(Reason.UNSUPPORTED_KEY, f"{what}: the per-pod parameters {', '.join(keys)} "
                      "have no place in the driver's parameters")


def _dranet_parameters(
    element: npwg.NetworkSelectionElement, net: _Network, interface: str | None, what: str
) -> dict[str, Any]:
    _common_keys(element, what)
    iface = (net.interface or dra.DranetInterface()).model_copy(deep=True)
    if interface:
        iface.name = interface
    if element.ips:
        iface.addresses = [_with_prefix(ip, net.subnets, what) for ip in element.ips]
        if iface.ipvlan is not None:
            iface.ipvlan.addressing = dra.DranetIPVlanAddressing(type="static")
    elif net.pool_ipam:
        raise _Cannot(
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


def _cni_parameters(
    element: npwg.NetworkSelectionElement, net: _Network, interface: str, what: str
) -> dict[str, Any]:
    _common_keys(element, what)
    keys = [f"{wire} (NPWG {sec})" for wire, sec in (("ips", "4.1.2.1.3"), ("mac", "4.1.2.1.4"))
            if getattr(element, wire) is not None]
    if keys:
        raise _Cannot(
            Reason.UNSUPPORTED_KEY,
            f"{what}: the per-pod parameters {', '.join(keys)} go to CNI runtimeConfig, which the "
            "CNI DRA driver's CNI object (ifName, config) has no field for; "
            f"export with --driver {DRANET_DRIVER} (static addresses and MAC)",
        )
    assert net.cni_config is not None
    return dra.CniParameters(if_name=interface, config=net.cni_config).to_dict()


def _template_spec(
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


# --- The export --------------------------------------------------------------------------------


@dataclass
class Inventory:
    """The objects an export reads: the KEP and NPWG objects, and the workloads."""

    objects: list[Mapping[str, Any]] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)

    def add(self, obj: Mapping[str, Any], *, default_namespace: str = "default", source: str = "") -> None:
        wl = workload_of(obj, default_namespace=default_namespace, source=source)
        if wl is not None:
            self.workloads.append(wl)
        else:
            self.objects.append(obj)


@dataclass
class _Networks:
    """Each PodNetwork's class, or why it has none."""

    classes: dict[str, tuple[_Network, translate.Key]] = field(default_factory=dict)
    problems: dict[str, _Cannot] = field(default_factory=dict)


def _podnetwork_classes(objs: translate.Objects, settings: Settings, out: Export) -> _Networks:
    result = _Networks()
    for (kind, _ns, name), unfit in sorted(objs.invalid.items()):
        if kind == constants.PODNETWORK_KIND:
            result.problems[name] = _Cannot(Reason.INVALID_OBJECT, f"does not fit its schema: {unfit}")
    for name, pn in sorted(objs.podnetworks.items()):
        ref = f"PodNetwork {name}"
        if name == constants.DEFAULT_PODNETWORK:
            out.skipped.append(Note(ref, "the cluster default network stays with the cluster's CNI plugin; "
                                    "DRA network drivers add interfaces beside it"))
            continue
        try:
            result.classes[name] = _class_network(pn, objs, settings)
        except _Cannot as exc:
            result.problems[name] = exc
    for name, why in sorted(result.problems.items()):
        out.unexpressible.append(Unexpressible(f"PodNetwork {name}", why.reason, str(why)))
    for name, (net, _key) in sorted(result.classes.items()):
        out.device_classes.append(_class(name, net, settings.driver))
    return result


def _class_network(
    pn: PodNetwork, objs: translate.Objects, settings: Settings
) -> tuple[_Network, translate.Key]:
    if not pn.spec.enabled:
        raise _Cannot(Reason.DISABLED, "spec.enabled is false; DRA has no disabled DeviceClass: export it "
                      "once it is enabled (or leave its DeviceClass out to keep pods off it)")
    if not translate.is_bridge(pn):
        raise _Cannot(
            Reason.NOT_BRIDGE_PROVIDER,
            f"provider {pn.spec.provider!r}: only PodNetworks of {constants.BRIDGE_PROVIDER} have "
            "parameters (a NetworkAttachmentDefinition) that say which devices are on the network",
        )
    try:
        key, nad = translate.podnetwork_nad(pn, objs)
    except translate.TranslationError as exc:
        raise _Cannot(str(exc.reason), str(exc)) from None
    what = f"NetworkAttachmentDefinition {key[0]}/{key[1]}"
    return _network(nad, what, settings.driver), key


def _default_notes(nets: Sequence[Network]) -> list[str]:
    notes: list[str] = []
    listed = False
    for i, net in enumerate(nets):
        if net.pod_network_name == constants.DEFAULT_PODNETWORK:
            listed = True
            if net.interface_name or net.is_default_gw4 or net.is_default_gw6:
                notes.append(
                    f"spec.networks[{i}]: interfaceName/isDefaultGW4/isDefaultGW6 of the default PodNetwork "
                    "are not carried: the cluster's CNI plugin attaches and names the pod's network"
                )
    if not listed:
        notes.append("the pod does not list the default PodNetwork, but it keeps the cluster's network: "
                     "DRA claims add interfaces beside it")
    return notes


@dataclass
class _Mapped:
    claims: list[Claim]
    templates: list[dra.ResourceClaimTemplate]
    notes: list[str]
    translation: translate.Translation


def _map_workload(
    wl: Workload, objs: translate.Objects, nets_by_pn: _Networks, settings: Settings
) -> _Mapped:
    """The claims and templates of one workload. Raises `_Cannot` naming the first problem."""
    text = wl.annotations.get(constants.NETWORKS_ANNOTATION)
    raw_spec = wl.template.get("spec")
    if not isinstance(raw_spec, Mapping):
        raise _Cannot(Reason.INVALID_OBJECT, "the pod spec is not an object")
    spec: Mapping[str, Any] = raw_spec
    if not isinstance(spec.get("resourceClaims") or [], list):
        raise _Cannot(Reason.INVALID_OBJECT, "spec.resourceClaims is not a list")
    try:
        nets = networks.parse(text)  # type: ignore[arg-type]
    except InvalidObject as exc:
        raise _Cannot(Reason.INVALID_NETWORKS, "; ".join(str(e) for e in exc.errors)) from None
    errors = validation.validate_networks(nets, host_network=spec.get("hostNetwork") is True)
    if errors:
        raise _Cannot(Reason.INVALID_NETWORKS, "; ".join(str(e) for e in errors))
    try:
        tr = translate.translate(nets, wl.namespace, objs)
    except translate.TranslationError as exc:
        raise _Cannot(str(exc.reason), str(exc)) from None
    taken = {str(c.get("name")) for c in spec.get("resourceClaims") or [] if isinstance(c, Mapping)}
    claims: list[Claim] = []
    templates: list[dra.ResourceClaimTemplate] = []
    notes = _default_notes(nets)
    auto_names = 0
    for element, source in zip(tr.elements, tr.sources, strict=True):
        named = (f"PodNetworkAttachment {source.attachment}" if source.attachment
                 else f"PodNetwork {source.pod_network}")
        label = f"spec.networks[{source.index}] ({named})"
        if source.pod_network in nets_by_pn.problems:
            why = nets_by_pn.problems[source.pod_network]
            raise _Cannot(why.reason, f"{label}: PodNetwork {source.pod_network} has no DeviceClass "
                          f"({why.reason}, on its own line)")
        if source.pod_network not in nets_by_pn.classes:
            raise _Cannot(str(translate.Reason.PODNETWORK_NOT_FOUND),
                          f"{label}: PodNetwork {source.pod_network} does not exist")
        class_net, class_key = nets_by_pn.classes[source.pod_network]
        nad_key = (element.namespace, element.name)
        what = f"{label}: NetworkAttachmentDefinition {element.ref}"
        net = class_net
        if nad_key != class_key:
            # A PodNetworkAttachment naming its own NAD: the class still picks the devices.
            net = _network(objs.nads[nad_key], what, settings.driver)
            if net.selectors != class_net.selectors:
                raise _Cannot(
                    Reason.ATTACHMENT_CHANGES_DEVICE,
                    f"{what} selects other devices than PodNetwork {source.pod_network}'s DeviceClass "
                    f"({' && '.join(net.selectors)} instead of {' && '.join(class_net.selectors)})",
                )
        interface = source.interface
        if settings.driver == CNI_DRIVER:
            if not interface:
                auto_names += 1
                interface = _free_interface(nets, auto_names)
                notes.append(f"{label}: no interfaceName; the CNI DRA driver needs one: {interface}")
            parameters = _cni_parameters(element, net, interface, what)
        else:
            parameters = _dranet_parameters(element, net, interface, what)
        size = len(json.dumps(parameters, separators=(",", ":")).encode())
        if size > dra.MAX_PARAMETERS_BYTES:
            raise _Cannot(Reason.PARAMETERS_TOO_LARGE, f"{what}: the driver parameters are {size} bytes; "
                          f"DRA allows {dra.MAX_PARAMETERS_BYTES}")
        tspec = _template_spec(settings.driver, source.pod_network, parameters)
        tname = template_name(source.pod_network, tspec.to_dict())
        templates.append(
            dra.ResourceClaimTemplate(
                metadata=dra.Meta(name=tname, namespace=wl.namespace,
                                  annotations={PODNETWORK_ANNOTATION: source.pod_network}),
                spec=tspec,
            )
        )
        claim = pod_claim_name(source.pod_network, source.index, taken)
        taken.add(claim)
        claims.append(Claim(claim, tname, source.pod_network, interface, source.index))
    return _Mapped(claims, templates, notes, tr)


def _free_interface(nets: Sequence[Network], k: int) -> str:
    """`net<k>` as NPWG implementations name unnamed attachments, skipping names the pod uses."""
    used = {n.interface_name for n in nets if n.interface_name}
    n = k
    while f"net{n}" in used:
        n += 1
    return f"net{n}"


def rewrite(obj: Mapping[str, Any], template_path: Sequence[str], claims: Sequence[Claim],
            *, is_pod: bool) -> dict[str, Any]:
    """The workload with the claims in its pod template and the KEP's pod annotations removed,
    ready to apply: no status, no server-set metadata, and for a Pod no `nodeName` (a pod
    bound to a node skips the scheduler, which allocates its claims)."""
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in _SERVER_METADATA:
            meta.pop(key, None)
    node: Any = out
    for key in template_path:
        node = node.setdefault(key, {})
    tmeta = node.setdefault("metadata", {})
    annotations = tmeta.get("annotations") or {}
    written = translate.written_by_bridge(annotations)
    drop = set(_KEP_POD_ANNOTATIONS)
    if written:
        drop |= {npwg.NETWORKS_ANNOTATION, translate.WRITTEN_ANNOTATION}
    annotations = {k: v for k, v in annotations.items() if k not in drop}
    if annotations:
        tmeta["annotations"] = annotations
    else:
        tmeta.pop("annotations", None)
    if not tmeta:
        node.pop("metadata", None)
    spec = node.setdefault("spec", {})
    claims_list = list(spec.get("resourceClaims") or [])
    claims_list += [
        dra.PodResourceClaim(name=c.pod_claim, resource_claim_template_name=c.template).to_dict()
        for c in claims
    ]
    if claims_list:
        spec["resourceClaims"] = claims_list
    gates = [g for g in spec.get("schedulingGates") or []
             if not (isinstance(g, Mapping) and g.get("name") == constants.NPWG_SELECTION_GATE)]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    if is_pod:
        spec.pop("nodeName", None)
    return out


def _cidr(ip: str, subnets: Sequence[str]) -> tuple[str, bool] | None:
    """An NPWG status IP as a CIDR, and whether the prefix was known (else a host prefix);
    None when it is no address. Any pod's status may hold anything (its tenant can write it)."""
    if "%" in ip:  # an IPv6 zone: Python reads one, a CIDR of KEP-4817 has none
        return None
    try:
        if "/" in ip:
            return ipaddress.ip_interface(ip).with_prefixlen, True
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return None
    try:
        return _with_prefix(ip, subnets, ""), True
    except _Cannot:
        return f"{addr}/{addr.max_prefixlen}", False


def _network_data(
    wl: Workload, mapped: _Mapped, objs: translate.Objects, settings: Settings, notes: list[Note]
) -> list[NetworkDataEntry]:
    text = wl.annotations.get(npwg.NETWORK_STATUS_ANNOTATION)
    if wl.kind != "Pod" or not isinstance(text, str):
        return []
    try:
        status = npwg.parse_status(text)
    except ValueError as exc:
        notes.append(Note(wl.ref, f"no networkData: {npwg.NETWORK_STATUS_ANNOTATION} cannot be read: {exc}",
                          wl.source))
        return []
    by_index = {c.index: c for c in mapped.claims}
    subnets_of = {(e.namespace, e.name): _subnets_of(objs.nads.get((e.namespace, e.name)))
                  for e in mapped.translation.elements}
    out: list[NetworkDataEntry] = []
    for source, entry in podips.match(status, mapped.translation, wl.namespace):
        claim = by_index.get(source.index)
        if claim is None:
            continue
        element = mapped.translation.elements[mapped.translation.sources.index(source)]
        ips: list[str] = []
        for ip in entry.get("ips") or []:
            if not isinstance(ip, str):
                continue
            read = _cidr(ip, subnets_of.get((element.namespace, element.name), []))
            if read is None:
                notes.append(Note(wl.ref, f"networkData of {claim.pod_claim}: {excerpts.value(ip)} in "
                                  f"{npwg.NETWORK_STATUS_ANNOTATION} is not an IP address: left out",
                                  wl.source))
                continue
            cidr, known = read
            if not known:
                notes.append(Note(wl.ref, f"networkData of {claim.pod_claim}: the prefix length of {ip} "
                                  f"is unknown (not in network-status nor the IPAM subnets): written {cidr}",
                                  wl.source))
            ips.append(cidr)
        if len(ips) > dra.MAX_NETWORK_DATA_IPS:
            notes.append(Note(wl.ref, f"networkData of {claim.pod_claim}: {len(ips)} IPs, KEP-4817 allows "
                              f"{dra.MAX_NETWORK_DATA_IPS}: the first {dra.MAX_NETWORK_DATA_IPS} are written",
                              wl.source))
        iface = entry.get("interface")
        mac = entry.get("mac")
        data = dra.NetworkDeviceData(
            interface_name=iface if isinstance(iface, str) else None,
            ips=ips[: dra.MAX_NETWORK_DATA_IPS] or None,
            hardware_address=mac if isinstance(mac, str) else None,
        )
        out.append(NetworkDataEntry(f"{wl.namespace}/{wl.name}", claim.pod_claim, claim.pod_network,
                                    settings.driver, data))
    return out


def _subnets_of(nad: npwg.NetworkAttachmentDefinition | None) -> list[str]:
    if nad is None or not nad.spec.config:
        return []
    try:
        plugins = npwg.plugins_of(npwg.load_cni_config(nad.spec.config, "spec.config"))
    except npwg.DelegationError:
        return []
    ipam = plugins[0].get("ipam")
    return _ipam_subnets(ipam) if isinstance(ipam, Mapping) else []


def export(inventory: Inventory, settings: Settings = Settings()) -> Export:
    """Everything DRA needs for the inventory's PodNetworks and workloads, or why not."""
    out = Export()
    objs = translate.Objects.from_objects(inventory.objects)
    nets_by_pn = _podnetwork_classes(objs, settings, out)
    templates: dict[tuple[str, str], dra.ResourceClaimTemplate] = {}
    # In a stable order whatever order the inputs came in (files, or one list per kind).
    for wl in sorted(inventory.workloads, key=lambda w: (w.namespace, w.kind, w.name)):
        if constants.NETWORKS_ANNOTATION not in wl.annotations:
            continue
        owner = wl.owner
        try:
            mapped = _map_workload(wl, objs, nets_by_pn, settings)
        except _Cannot as exc:
            if owner is None:
                out.unexpressible.append(Unexpressible(wl.ref, exc.reason, str(exc), wl.source))
            continue
        out.network_data += _network_data(wl, mapped, objs, settings, out.notes)
        if owner is not None:
            out.skipped.append(Note(wl.ref, f"managed by {owner}: export the owner", wl.source))
            continue
        for t in mapped.templates:
            templates.setdefault((t.metadata.namespace or "", t.metadata.name), t)
        out.notes += [Note(wl.ref, n, wl.source) for n in mapped.notes]
        out.workloads.append(
            ExportedWorkload(wl.ref, wl.source,
                             rewrite(wl.obj, wl.template_path, mapped.claims, is_pod=wl.kind == "Pod"),
                             mapped.claims)
        )
    out.templates = [templates[k] for k in sorted(templates)]
    return out


def problems(e: Export) -> str:
    """`!` per PodNetwork or workload that cannot be expressed, `i` per note, `~` per skipped one
    (the marks of `podnetwork migrate`)."""
    lines = [f"! {u}\n" for u in e.unexpressible]
    lines += [f"i {n}\n" for n in e.notes]
    lines += [f"~ {s}\n" for s in e.skipped]
    return "".join(lines)


def summary(e: Export) -> str:
    line = (f"export: {len(e.device_classes)} DeviceClass, {len(e.templates)} ResourceClaimTemplate, "
            f"{len(e.workloads)} workload(s), {len(e.network_data)} networkData")
    if e.unexpressible:
        line += f"; {len(e.unexpressible)} cannot be expressed"
    if e.skipped:
        line += f"; {len(e.skipped)} skipped"
    return line


NETWORK_DATA_KIND = "NetworkDataExport"
NETWORK_DATA_API_VERSION = translate.OPTIONS_API_VERSION


def network_data_document(entries: Iterable[NetworkDataEntry]) -> dict[str, Any]:
    """The networkData of every exported claim, in one document that is never sent to a
    cluster: a ResourceClaim's status is the driver's to write."""
    return {
        "apiVersion": NETWORK_DATA_API_VERSION,
        "kind": NETWORK_DATA_KIND,
        "items": [e.to_dict() for e in entries],
    }


__all__ = [
    "CNI_DRIVER",
    "DRANET_DRIVER",
    "DRIVERS",
    "NETWORK_DATA_API_VERSION",
    "NETWORK_DATA_KIND",
    "PODNETWORK_ANNOTATION",
    "REQUEST_NAME",
    "WORKLOAD_TEMPLATES",
    "Claim",
    "Export",
    "ExportedWorkload",
    "Inventory",
    "NetworkDataEntry",
    "Note",
    "Reason",
    "Settings",
    "Unexpressible",
    "Workload",
    "export",
    "network_data_document",
    "pod_claim_name",
    "problems",
    "rewrite",
    "summary",
    "template_name",
    "workload_of",
]
