"""The Network Plumbing WG "net-attach-def" standard (multi-net spec v1.3) as a library.

Self-contained on purpose: it imports nothing of this project (see `.importlinter`,
contract `npwg-standalone`), so any tool may use it — the translation, the
migration, the CNI agent, or a program that has never heard of PodNetworks.

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

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --- Names of the standard -------------------------------------------------------------

#: Pod annotation selecting the secondary networks (4.1).
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
#: Pod annotation reporting the result of each attachment (5).
NETWORK_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"

#: API group, version and names of NetworkAttachmentDefinition (3.1).
NAD_GROUP = "k8s.cni.cncf.io"
NAD_VERSION = "v1"
NAD_API_VERSION = f"{NAD_GROUP}/{NAD_VERSION}"
NAD_KIND = "NetworkAttachmentDefinition"
NAD_PLURAL = "network-attachment-definitions"
NAD_SINGULAR = "network-attachment-definition"
NAD_SHORT = "net-attach-def"

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

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(rf"^{_LABEL}$")
_SUBDOMAIN_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
#: Kubernetes caps object names at 253 characters and namespace names at 63.
NAME_MAX = 253
NAMESPACE_MAX = 63
#: Linux IFNAMSIZ is 16 including the terminating NUL.
IFNAME_MAX_BYTES = 15
#: Bytes the kernel's dev_valid_name() refuses: '/', ':', NUL and its isspace() set.
_IFNAME_BAD_BYTES = frozenset(b"/:\0 \t\n\v\f\r\xa0")
_MAC_RES = (
    re.compile(r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$"),
    re.compile(r"^[0-9A-Fa-f]{2}(-[0-9A-Fa-f]{2}){5}$"),
    re.compile(r"^[0-9A-Fa-f]{4}(\.[0-9A-Fa-f]{4}){2}$"),
)
_GUID_RES = (
    re.compile(r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){7}$"),
    re.compile(r"^[0-9A-Fa-f]{2}(-[0-9A-Fa-f]{2}){7}$"),
    re.compile(r"^[0-9A-Fa-f]{4}(\.[0-9A-Fa-f]{4}){3}$"),
)
_PORT_KEYS = ("hostPort", "containerPort", "protocol", "hostIP")
_PROTOCOLS = ("TCP", "UDP", "SCTP")
_BANDWIDTH_KEYS = ("ingressRate", "ingressBurst", "egressRate", "egressBurst")


# --- Errors ------------------------------------------------------------------------------


class InvalidSelection(ValueError):
    """The selection annotation is invalid; per 4.1.2.1.x the whole annotation is ignored.

    `index` is the element's position (None for the annotation as a whole), `key`
    the offending key (None when the element itself is wrong), `section` the
    spec section that makes it invalid.
    """

    def __init__(
        self,
        message: str,
        *,
        index: int | None = None,
        key: str | None = None,
        section: str = "4.1",
        element: str | None = None,
    ) -> None:
        self.index = index
        self.key = key
        self.section = section
        self.detail = message
        """What is wrong, without the location."""
        self.element = element
        """The element's `name`, when it has a readable one."""
        super().__init__(self._text())

    def _text(self) -> str:
        where = NETWORKS_ANNOTATION if self.index is None else f"{NETWORKS_ANNOTATION}[{self.index}]"
        if self.key is not None:
            where += f".{self.key}"
        named = f"element {self.element!r}; " if self.element else ""
        return f"{where}: {self.detail} ({named}NPWG multi-net spec {self.section})"

    def naming(self, element: str) -> InvalidSelection:
        """The same error, naming the element it is about."""
        self.element = element
        self.args = (self._text(),)
        return self

    def __str__(self) -> str:
        return self._text()


class DelegationError(ValueError):
    """The delegating plugin must fail this attachment (3.4.1 rule 4, 4.1.2.1.x.2)."""


# --- The selection element ---------------------------------------------------------------


@dataclass
class NetworkSelectionElement:
    """One element of the selection annotation (4.1.2.1). Unset keys are None.

    `namespace` is always filled: from the annotation, else from the pod (4.1.2.1.2).
    `extensions` holds the implementation keys (those with a dot, 4.1.2.1), kept as given.
    Values are kept as written (e.g. a MAC's case, a port mapping's protocol case), so
    `parse_selection(format_selection(x), ns) == x`.
    """

    name: str
    namespace: str
    ips: list[str] | None = None
    mac: str | None = None
    interface: str | None = None
    cni_args: dict[str, Any] | None = None
    port_mappings: list[dict[str, Any]] | None = None
    bandwidth: dict[str, int] | None = None
    default_route: list[str] | None = None
    infiniband_guid: str | None = None
    ipam_claim_reference: str | None = None
    extensions: dict[str, Any] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        """`namespace/name`, the NAD reference form of 4.1.1 and the status `name` (5.3.1)."""
        return f"{self.namespace}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        """The element with the spec's key names, unset keys omitted, extensions last."""
        values = {
            "name": self.name,
            "namespace": self.namespace,
            "ips": self.ips,
            "mac": self.mac,
            "interface": self.interface,
            "cni-args": self.cni_args,
            "portMappings": self.port_mappings,
            "bandwidth": self.bandwidth,
            "default-route": self.default_route,
            "infiniband-guid": self.infiniband_guid,
            "ipam-claim-reference": self.ipam_claim_reference,
        }
        out: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
        out.update(self.extensions)
        return out


_ATTRS = {
    "name": "name",
    "namespace": "namespace",
    "ips": "ips",
    "mac": "mac",
    "interface": "interface",
    "cni-args": "cni_args",
    "portMappings": "port_mappings",
    "bandwidth": "bandwidth",
    "default-route": "default_route",
    "infiniband-guid": "infiniband_guid",
    "ipam-claim-reference": "ipam_claim_reference",
}


# --- Value rules (each returns a reason, or None when the value is valid) ------------------


def name_problem(value: str, *, max_length: int = NAME_MAX) -> str | None:
    """3.3: units of the DNS-1123 label format."""
    if not value:
        return "must not be empty"
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    if not _LABEL_RE.fullmatch(value):
        return (
            "must be a DNS-1123 label: lower case alphanumeric characters or '-', "
            "starting and ending with an alphanumeric character"
        )
    return None


def subdomain_problem(value: str, *, max_length: int = NAME_MAX) -> str | None:
    """A Kubernetes object name, such as a pod's: a DNS-1123 subdomain."""
    if not value:
        return "must not be empty"
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    if not _SUBDOMAIN_RE.fullmatch(value):
        return (
            "must be a DNS-1123 subdomain: lower case alphanumeric characters, '-' or '.', "
            "starting and ending with an alphanumeric character"
        )
    return None


def interface_problem(value: str) -> str | None:
    """4.1.2.1.5: a valid Linux interface name (the kernel's `dev_valid_name`)."""
    if value == "":
        return "must not be empty"
    if len(value.encode("utf-8", "surrogatepass")) > IFNAME_MAX_BYTES:
        return f"must be at most {IFNAME_MAX_BYTES} bytes (Linux IFNAMSIZ)"
    if value in (".", ".."):
        return "must not be '.' or '..'"
    # The kernel tests bytes with its own isspace(), which counts 0xA0 (a UTF-8
    # continuation byte, as in "à") and not Unicode spaces such as U+2003.
    bad = sorted(
        {c for c in value if any(b in _IFNAME_BAD_BYTES for b in c.encode("utf-8", "surrogatepass"))}
    )
    if bad:
        return "a Linux interface name may not contain " + ", ".join(repr(c) for c in bad)
    return None


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


# --- Parsing ------------------------------------------------------------------------------


def _fail(index: int | None, key: str | None, message: str) -> InvalidSelection:
    return InvalidSelection(message, index=index, key=key, section=SECTIONS.get(key or "", "4.1.2.1"))


def _string(index: int, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(index, key, f"must be a string, not {_json_type(value)}")
    return value


def _string_list(index: int, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(index, key, "must be a list of strings")
    return list(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _port_number(index: int, key: str, value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise _fail(index, key, f"{what} must be an integer between 1 and 65535, got {json.dumps(value)}")
    return value


def _port_mappings(index: int, value: Any) -> list[dict[str, Any]]:
    key = "portMappings"
    if not isinstance(value, list) or not value:
        raise _fail(index, key, "must be a non-empty list of port mappings")
    out = []
    for i, pm in enumerate(value):
        what = f"entry {i}"
        if not isinstance(pm, dict):
            raise _fail(index, key, f"{what} must be an object with hostPort and containerPort")
        unknown = sorted(set(pm) - set(_PORT_KEYS))
        if unknown:
            raise _fail(index, key, f"{what} has unknown key(s) {unknown}; known: {list(_PORT_KEYS)}")
        for required in ("hostPort", "containerPort"):
            if required not in pm:
                raise _fail(index, key, f"{what} lacks the required {required!r}")
            _port_number(index, key, pm[required], f"{what}.{required}")
        if "protocol" in pm and (
            not isinstance(pm["protocol"], str) or pm["protocol"].upper() not in _PROTOCOLS
        ):
            raise _fail(index, key, f"{what}.protocol must be one of TCP, UDP, SCTP (any case)")
        if "hostIP" in pm and (
            not isinstance(pm["hostIP"], str) or ip_problem(pm["hostIP"], prefix_allowed=False)
        ):
            raise _fail(index, key, f"{what}.hostIP must be an IP address")
        out.append(dict(pm))
    return out


def _bandwidth(index: int, value: Any) -> dict[str, int]:
    key = "bandwidth"
    if not isinstance(value, dict) or not value:
        raise _fail(index, key, f"must be a non-empty object with keys among {list(_BANDWIDTH_KEYS)}")
    for k, v in value.items():
        if k not in _BANDWIDTH_KEYS:
            raise _fail(index, key, f"unknown key {k!r}; known: {list(_BANDWIDTH_KEYS)}")
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise _fail(index, key, f"{k} must be a positive integer, got {json.dumps(v)}")
    for direction in ("ingress", "egress"):
        if f"{direction}Burst" in value and f"{direction}Rate" not in value:
            raise _fail(index, key, f"{direction}Burst requires {direction}Rate")
    return dict(value)


def _element(index: int, raw: Any, pod_namespace: str) -> NetworkSelectionElement:
    if not isinstance(raw, dict):
        raise _fail(index, None, f"must be an object with at least a \"name\", not {_json_type(raw)}")
    for key in raw:
        if not isinstance(key, str) or ("." not in key and key not in _ATTRS):
            raise InvalidSelection(
                f"unknown key {key!r}: keys without a period are reserved by the spec; "
                "implementation keys use reverse domain names such as \"org.example.key\"",
                index=index,
                key=key,
                section="4.1.2.1",
            )
    if "name" not in raw:
        raise _fail(index, "name", "is required")
    kwargs: dict[str, Any] = {}
    name = _string(index, "name", raw["name"])
    if problem := name_problem(name):
        raise _fail(index, "name", f"{json.dumps(name)} {problem}")
    kwargs["name"] = name
    try:
        return _element_keys(index, raw, pod_namespace, kwargs)
    except InvalidSelection as exc:
        raise exc.naming(name) from None


def _element_keys(
    index: int, raw: dict[str, Any], pod_namespace: str, kwargs: dict[str, Any]
) -> NetworkSelectionElement:
    namespace = _string(index, "namespace", raw["namespace"]) if "namespace" in raw else ""
    namespace = namespace or pod_namespace  # 4.1.2.1.1: missing or empty means the pod's
    if problem := name_problem(namespace, max_length=NAMESPACE_MAX):
        raise _fail(index, "namespace", f"{json.dumps(namespace)} {problem}")
    kwargs["namespace"] = namespace
    if "ips" in raw:
        ips = _string_list(index, "ips", raw["ips"])
        if not ips:
            raise _fail(index, "ips", "must contain at least one address")
        for ip in ips:
            if problem := ip_problem(ip, prefix_allowed=True):
                raise _fail(index, "ips", f"{json.dumps(ip)} {problem}")
        kwargs["ips"] = ips
    if "mac" in raw:
        mac = _string(index, "mac", raw["mac"])
        if not any(r.match(mac) for r in _MAC_RES):
            raise _fail(index, "mac", f"{json.dumps(mac)} is not a 6-byte Ethernet MAC address")
        kwargs["mac"] = mac
    if "interface" in raw:
        ifname = _string(index, "interface", raw["interface"])
        if problem := interface_problem(ifname):
            raise _fail(index, "interface", f"{json.dumps(ifname)} {problem}")
        kwargs["interface"] = ifname
    if "cni-args" in raw:
        if not isinstance(raw["cni-args"], dict):
            raise _fail(index, "cni-args", f"must be an object, not {_json_type(raw['cni-args'])}")
        kwargs["cni_args"] = dict(raw["cni-args"])
    if "portMappings" in raw:
        kwargs["port_mappings"] = _port_mappings(index, raw["portMappings"])
    if "bandwidth" in raw:
        kwargs["bandwidth"] = _bandwidth(index, raw["bandwidth"])
    if "default-route" in raw:
        gateways = _string_list(index, "default-route", raw["default-route"])
        for gw in gateways:
            if problem := ip_problem(gw, prefix_allowed=False):
                raise _fail(index, "default-route", f"gateway {json.dumps(gw)} {problem}")
        kwargs["default_route"] = gateways
    if "infiniband-guid" in raw:
        guid = _string(index, "infiniband-guid", raw["infiniband-guid"])
        if not any(r.match(guid) for r in _GUID_RES):
            raise _fail(index, "infiniband-guid", f"{json.dumps(guid)} is not an 8-byte InfiniBand GUID")
        kwargs["infiniband_guid"] = guid
    if "ipam-claim-reference" in raw:
        claim = _string(index, "ipam-claim-reference", raw["ipam-claim-reference"])
        if not claim or len(claim) > NAME_MAX or not _SUBDOMAIN_RE.match(claim):
            raise _fail(
                index, "ipam-claim-reference", f"{json.dumps(claim)} is not a Kubernetes object name"
            )
        if "ips" in raw:
            raise _fail(index, "ipam-claim-reference", "may not be set together with \"ips\"")
        kwargs["ipam_claim_reference"] = claim
    kwargs["extensions"] = {k: v for k, v in raw.items() if "." in k}
    return NetworkSelectionElement(**kwargs)


def _comma_element(index: int, item: str, pod_namespace: str) -> NetworkSelectionElement:
    """4.1.1 `name`, `namespace/name`, and the common `...@interface` suffix."""
    ref, at, ifname = item.partition("@")
    namespace, slash, name = ref.rpartition("/")
    if slash and not namespace:
        raise _fail(index, "namespace", f"{json.dumps(item)} has an empty namespace before '/'")
    if "/" in namespace:
        raise _fail(index, "name", f"{json.dumps(item)} has more than one '/'")
    raw: dict[str, Any] = {"name": name}
    if namespace:
        raw["namespace"] = namespace
    if at:
        raw["interface"] = ifname
    return _element(index, raw, pod_namespace)


def parse_selection(annotation: str, pod_namespace: str) -> list[NetworkSelectionElement]:
    """Parse `k8s.v1.cni.cncf.io/networks` in either format (4.1.1, 4.1.2).

    A value whose first non-blank character is `[` is the JSON list format; any
    other is the comma-delimited format, where `ns/name@ifname` names the
    interface (a widely used extension; the name after `@` follows the Linux rule
    of 4.1.2.1.5). An empty or blank annotation selects nothing. Raises
    `InvalidSelection` naming the element and key for anything the spec calls
    invalid, including `default-route` on more than one element (4.1.2.1.9).
    """
    if not isinstance(annotation, str):
        raise InvalidSelection(f"must be a string, not {_json_type(annotation)}")
    if problem := name_problem(pod_namespace, max_length=NAMESPACE_MAX):
        raise ValueError(f"pod namespace {pod_namespace!r} {problem}")
    text = annotation.strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise InvalidSelection(f"is not valid JSON: {exc}", section="4.1.2") from None
        if not isinstance(data, list):
            raise InvalidSelection("the JSON format must be a list of objects", section="4.1.2")
        elements = [_element(i, raw, pod_namespace) for i, raw in enumerate(data)]
    else:
        if text.startswith(("{", '"')):
            raise InvalidSelection(
                'the JSON format must be a list, e.g. [{"name": "net-a"}]', section="4.1.2"
            )
        elements = []
        for i, item in enumerate(text.split(",")):
            item = item.strip()
            if not item:
                raise InvalidSelection("empty item in the comma-delimited list", index=i, section="4.1.1")
            elements.append(_comma_element(i, item, pod_namespace))
    routed = [i for i, e in enumerate(elements) if e.default_route is not None]
    if len(routed) > 1:
        raise InvalidSelection(
            f"only one element may set \"default-route\"; elements {routed} do",
            index=routed[1],
            key="default-route",
            section="4.1.2.1.9",
        )
    return elements


def format_selection(elements: Iterable[NetworkSelectionElement]) -> str:
    """The JSON list format (4.1.2) of `elements`, compact, namespaces explicit."""
    return json.dumps([e.to_json() for e in elements], separators=(",", ":"))


# --- Delegation (3.4, 4.1.2.1.x.2, 7.5) ----------------------------------------------------


def plugins_of(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The plugin configurations of a CNI config list, or `[config]` for a single config."""
    if "plugins" in config:
        return list(config["plugins"])
    return [dict(config)]


def load_cni_config(text: str, source: str) -> dict[str, Any]:
    """Parse and check a CNI configuration or configuration list.

    Checks what a delegating plugin needs before executing anything: JSON object;
    a list has a non-empty `plugins` list of objects; every plugin `type` is a bare
    executable name (no `/`, not `.`/`..`), since it becomes a path under CNI_PATH.
    Raises `DelegationError` whose message starts with `source`.
    """
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DelegationError(f"{source}: CNI configuration is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise DelegationError(f"{source}: CNI configuration must be a JSON object")
    if "plugins" in config:
        plugins = config["plugins"]
        if not isinstance(plugins, list) or not plugins:
            raise DelegationError(f"{source}: \"plugins\" must be a non-empty list")
    else:
        plugins = [config]
    for i, plugin in enumerate(plugins):
        where = f"{source}: plugins[{i}]" if "plugins" in config else source
        if not isinstance(plugin, dict):
            raise DelegationError(f"{where}: must be a JSON object")
        ptype = plugin.get("type")
        if not isinstance(ptype, str) or not ptype:
            raise DelegationError(f"{where}: \"type\" must name a CNI plugin")
        if "/" in ptype or "\\" in ptype or "\0" in ptype or ptype in (".", ".."):
            raise DelegationError(
                f"{where}: plugin type {ptype!r} must be a bare executable name found in CNI_PATH"
            )
    for key in ("name", "cniVersion"):
        if key in config and not isinstance(config[key], str):
            raise DelegationError(f"{source}: {key!r} must be a string")
    return config


def _from_disk(nad_name: str, conf_dir: Path) -> dict[str, Any] | None:
    """3.4.1 rules 2 and 3: a config list, then a single config, whose `name` matches."""
    if not conf_dir.is_dir():
        return None
    files = sorted(p for p in conf_dir.iterdir() if p.is_file())
    for suffixes in ((".conflist",), (".conf", ".json")):
        for path in files:
            if path.suffix not in suffixes:
                continue
            try:
                config = load_cni_config(path.read_text(encoding="utf-8"), str(path))
            except (OSError, UnicodeDecodeError, DelegationError):
                continue  # a broken file of another network must not hide ours
            if config.get("name") == nad_name and (("plugins" in config) == (suffixes == (".conflist",))):
                return config
    return None


def _runtime_value(key: str, value: Any) -> Any:
    """The runtimeConfig form of a selection value (CNI CONVENTIONS.md)."""
    if key == "portMappings":
        return [
            {**pm, "protocol": str(pm.get("protocol", "tcp")).lower()} for pm in value
        ]
    if key == "bandwidth":
        out = dict(value)
        for direction in ("ingress", "egress"):
            if f"{direction}Rate" in out and f"{direction}Burst" not in out:
                out[f"{direction}Burst"] = DEFAULT_BURST_BITS
        return out
    return value


def _declares(plugin: Mapping[str, Any], capability: str) -> bool:
    caps = plugin.get("capabilities")
    return isinstance(caps, dict) and caps.get(capability) is True


def delegate_config(
    element: NetworkSelectionElement | None,
    nad_name: str,
    nad_namespace: str,
    nad_config: str | None,
    cni_conf_dir: str | Path | None,
    *,
    is_default: bool = False,
    k8s_runtime_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The CNI configuration to execute for one attachment (3.4, 4.1.2.1.x.2, 7.5).

    Source, by 3.4.1's order: `nad_config` (the NAD's `spec.config`, when non-blank);
    else a `.conflist` in `cni_conf_dir` whose `name` is `nad_name`; else a `.conf` or
    `.json` there whose `name` is `nad_name`; else `DelegationError`. A missing `name`
    is injected as `nad_name` (3.4.2).

    The result is a single config or a config list, shaped as found, with per-plugin
    additions applied the way libcni applies capability arguments: each plugin
    gets `runtimeConfig` entries only for the capabilities it declares
    (`"capabilities": {"ips": true}`). The element's `ips`, `mac`, `portMappings`,
    `bandwidth` (rate-only gets a burst of `DEFAULT_BURST_BITS`) and
    `infiniband-guid` (as `infinibandGUID`) require some plugin to declare the
    capability, else `DelegationError` naming it. `cni-args` go into each plugin's
    `args.cni`, the annotation's values winning over the NAD's (4.1.2.1.6.2).
    `k8s_runtime_config` (what the runtime passed the delegating plugin) reaches
    the plugins only when `is_default` (7.5); undeclared keys of it are dropped.
    `interface` (CNI_IFNAME), `default-route` and `ipam-claim-reference` are the
    caller's business: they are not CNI configuration.
    """
    source = f"NetworkAttachmentDefinition {nad_namespace}/{nad_name}"
    if nad_config is not None and nad_config.strip():
        config = load_cni_config(nad_config, f"{source} spec.config")
    else:
        config = _from_disk(nad_name, Path(cni_conf_dir)) if cni_conf_dir is not None else None
        if config is None:
            raise DelegationError(
                f"{source} has no spec.config and no CNI .conflist/.conf/.json file named "
                f"{nad_name!r} exists in {cni_conf_dir} (NPWG multi-net spec 3.4.1)"
            )
    config = json.loads(json.dumps(config))  # a private copy we may change
    config.setdefault("name", nad_name)
    is_list = "plugins" in config
    plugins: list[dict[str, Any]] = config["plugins"] if is_list else [config]

    wanted: dict[str, Any] = {}  # capability -> runtimeConfig value
    if is_default and k8s_runtime_config:
        wanted.update(k8s_runtime_config)
    required: list[tuple[str, str]] = []  # (selection key, capability)
    if element is not None:
        for key, capability in CAPABILITIES.items():
            value = getattr(element, _ATTRS[key])
            if value is not None:
                wanted[capability] = _runtime_value(key, value)
                required.append((key, capability))
    for key, capability in required:
        if not any(_declares(p, capability) for p in plugins):
            raise DelegationError(
                f"{source}: the selection sets {key!r} but no plugin declares the "
                f"{capability!r} capability (\"capabilities\": {{\"{capability}\": true}}); "
                f"NPWG multi-net spec {SECTIONS[key]}.2"
            )
    for plugin in plugins:
        runtime = {cap: value for cap, value in wanted.items() if _declares(plugin, cap)}
        if runtime:
            plugin["runtimeConfig"] = {**(plugin.get("runtimeConfig") or {}), **runtime}
        if element is not None and element.cni_args:
            args = plugin.get("args", {})
            if not isinstance(args, dict) or not isinstance(args.get("cni", {}), dict):
                raise DelegationError(
                    f"{source}: the selection sets 'cni-args' but the configuration's \"args\" "
                    "(and its \"cni\") must be JSON objects to merge them into (CNI CONVENTIONS; "
                    "NPWG multi-net spec 4.1.2.1.6.2)"
                )
            args = dict(args)
            args["cni"] = {**(args.get("cni") or {}), **element.cni_args}
            plugin["args"] = args
    return config


# --- Status (5) ----------------------------------------------------------------------------


def _version_tuple(version: Any) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in str(version).split(".")[:3])
    except ValueError:
        return (0, 0, 0)


def _dns(result: Mapping[str, Any]) -> dict[str, Any] | None:
    dns = result.get("dns")
    if not isinstance(dns, dict):
        return None
    out = {k: dns[k] for k in ("nameservers", "domain", "search") if dns.get(k)}
    return out or None


def _is_default_destination(dst: Any) -> bool:
    return dst in ("0.0.0.0/0", "::/0")


def _result_gateways(result: Mapping[str, Any]) -> list[str]:
    routes: list[Any] = list(result.get("routes") or [])
    for legacy in ("ip4", "ip6"):
        block = result.get(legacy)
        if isinstance(block, dict):
            routes.extend(block.get("routes") or [])
    gateways = []
    for route in routes:
        if isinstance(route, dict) and _is_default_destination(route.get("dst")) and route.get("gw"):
            gateways.append(str(route["gw"]))
    return gateways


def status_entry(
    name: str,
    cni_result: Mapping[str, Any] | None,
    *,
    default: bool,
    interface: str | None = None,
    default_route: Sequence[str] | None = None,
    device_info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One network-status map (5.3) from one attachment's CNI ADD result.

    `name` is `namespace/name` of the NAD (5.3.1) or the default network's name.
    From a 0.3.0+ result: `interface` and `mac` from the first interface with a
    `sandbox`, `ips` from the result's entries pointing at that interface, or from
    those with no interface index when no sandbox interface exists (5.3.3.1); from
    a 0.1.0/0.2.0 result, `ips` from `ip4`/`ip6` and `interface` from the
    `interface` argument (the CNI_IFNAME used, 5.3.2.1). `dns` keeps `nameservers`,
    `domain` and `search` (5.3.6). With no result (None) the map is minimal (5.1.1).
    `default_route` is None unless the selection asked for the default route; then
    the entry carries it: the given gateways, or when the list is empty, the
    gateways of the result's default routes (5.3.6.4). IP addresses are reported
    as the result gives them, with their prefix length, as in 5.4's examples.
    """
    entry: dict[str, Any] = {"name": name}
    mac: str | None = None
    ips: list[str] = []
    result: Mapping[str, Any] = cni_result or {}
    if result:
        # The shape decides, the version only when the shape is silent: some plugins
        # omit cniVersion, some echo a config version their result does not follow.
        if "ips" in result or "interfaces" in result:
            legacy = False
        elif "ip4" in result or "ip6" in result:
            legacy = True
        else:
            legacy = _version_tuple(result.get("cniVersion", "0.1.0")) < (0, 3, 0)
        if legacy:
            for block in (result.get("ip4"), result.get("ip6")):
                if isinstance(block, dict) and block.get("ip"):
                    ips.append(str(block["ip"]))
        else:
            interfaces = result.get("interfaces") or []
            sandbox_index = next(
                (
                    i
                    for i, itf in enumerate(interfaces)
                    if isinstance(itf, dict) and itf.get("sandbox")
                ),
                None,
            )
            entries = [e for e in result.get("ips") or [] if isinstance(e, dict) and e.get("address")]
            if sandbox_index is not None:
                itf = interfaces[sandbox_index]
                interface = itf.get("name") or interface
                mac = itf.get("mac") or None
                ips = [str(e["address"]) for e in entries if e.get("interface") == sandbox_index]
            else:
                ips = [
                    str(e["address"])
                    for e in entries
                    if not isinstance(e.get("interface"), int) or e["interface"] < 0
                ]
    if interface:
        entry["interface"] = interface
    if ips:
        entry["ips"] = ips
    if mac and interface:
        entry["mac"] = mac  # 5.3.4: "mac" only together with "interface"
    entry["default"] = bool(default)
    dns = _dns(result)
    if dns:
        entry["dns"] = dns
    if default_route is not None:
        entry["default-route"] = list(default_route) or _result_gateways(result)
    if device_info is not None:
        entry["device-info"] = dict(device_info)
    return entry


def parse_status(annotation: str) -> list[dict[str, Any]]:
    """Parse `k8s.v1.cni.cncf.io/network-status` (5): a JSON list of maps with a string `name`.

    Raises `ValueError` saying what is wrong; unknown keys are kept.
    """
    try:
        data = json.loads(annotation)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{NETWORK_STATUS_ANNOTATION}: not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValueError(f"{NETWORK_STATUS_ANNOTATION}: must be a JSON list of maps (5)")
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError(
                f"{NETWORK_STATUS_ANNOTATION}[{i}]: must be a map with a string \"name\" (5.3.1)"
            )
    return data


def nad_ref(namespace: str, name: str) -> str:
    """`namespace/name`, the reference form of 4.1.1 used in status names (5.3.1)."""
    return f"{namespace}/{name}"


__all__ = [
    "CAPABILITIES",
    "DEFAULT_BURST_BITS",
    "NAD_API_VERSION",
    "NAD_GROUP",
    "NAD_KIND",
    "NAD_PLURAL",
    "NAD_SHORT",
    "NAD_SINGULAR",
    "NAD_VERSION",
    "NETWORKS_ANNOTATION",
    "NETWORK_STATUS_ANNOTATION",
    "SELECTION_KEYS",
    "DelegationError",
    "InvalidSelection",
    "NetworkSelectionElement",
    "delegate_config",
    "format_selection",
    "interface_problem",
    "ip_problem",
    "load_cni_config",
    "nad_ref",
    "name_problem",
    "parse_selection",
    "parse_status",
    "plugins_of",
    "status_entry",
]
