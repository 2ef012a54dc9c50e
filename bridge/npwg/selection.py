"""The selection annotation `k8s.v1.cni.cncf.io/networks` (4.1).

`parse_selection` reads both formats (4.1.1 comma-separated, 4.1.2 JSON) into
`NetworkSelectionElement`s; `format_selection` writes them back. Invalid input
raises `InvalidSelection`, which names the element and the key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bridge.npwg.names import (
    NAMESPACE_MAX,
    NETWORKS_ANNOTATION,
    SECTIONS,
    interface_problem,
    ip_problem,
    name_problem,
    subdomain_problem,
)
from podnetwork.ground import jsontype

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

    def with_section(self, section: str) -> InvalidSelection:
        """The same error, citing `section`."""
        self.section = section
        self.args = (self._text(),)
        return self


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


# --- The selection element ---------------------------------------------------------------


@dataclass
class NetworkSelectionElement:
    """One element of the selection annotation (4.1.2.1). Unset keys are None.

    `namespace` is always filled: from the annotation, else from the pod (4.1.2.1.2).
    `extensions` holds the implementation keys (those with a dot, 4.1.2.1), kept as given;
    `ignored` the reserved keys the spec does not define.
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
    ignored: dict[str, Any] = field(default_factory=dict, compare=False)
    """Keys without a period that the spec does not define (4.1.2.1 reserves them), such as
    the pre-spec `ipRequest`, `macRequest`, `interfaceRequest`: ignored, not refused, so
    older manifests keep working; `ignored_key_warnings` says so. Never written back and
    not part of equality: they select nothing."""

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


ELEMENT_ATTRIBUTES = {
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


# --- Parsing ------------------------------------------------------------------------------


def _fail(index: int | None, key: str | None, message: str) -> InvalidSelection:
    return InvalidSelection(message, index=index, key=key, section=SECTIONS.get(key or "", "4.1.2.1"))


def _string(index: int, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(index, key, f"must be a string, not {jsontype.describe(value)}")
    return value


def _string_list(index: int, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(index, key, "must be a list of strings")
    return list(value)


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
        raise _fail(index, None, f"must be an object with at least a \"name\", not {jsontype.describe(raw)}")
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
        if not any(r.fullmatch(mac) for r in _MAC_RES):
            raise _fail(index, "mac", f"{json.dumps(mac)} is not a 6-byte Ethernet MAC address")
        kwargs["mac"] = mac
    if "interface" in raw:
        ifname = _string(index, "interface", raw["interface"])
        if problem := interface_problem(ifname):
            raise _fail(index, "interface", f"{json.dumps(ifname)} {problem}")
        kwargs["interface"] = ifname
    if "cni-args" in raw:
        if not isinstance(raw["cni-args"], dict):
            raise _fail(index, "cni-args", f"must be an object, not {jsontype.describe(raw['cni-args'])}")
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
        if not any(r.fullmatch(guid) for r in _GUID_RES):
            raise _fail(index, "infiniband-guid", f"{json.dumps(guid)} is not an 8-byte InfiniBand GUID")
        kwargs["infiniband_guid"] = guid
    if "ipam-claim-reference" in raw:
        claim = _string(index, "ipam-claim-reference", raw["ipam-claim-reference"])
        if subdomain_problem(claim) is not None:
            raise _fail(
                index, "ipam-claim-reference", f"{json.dumps(claim)} is not a Kubernetes object name"
            )
        if "ips" in raw:
            raise _fail(index, "ipam-claim-reference", "may not be set together with \"ips\"")
        kwargs["ipam_claim_reference"] = claim
    kwargs["extensions"] = {k: v for k, v in raw.items() if "." in k}
    kwargs["ignored"] = {k: v for k, v in raw.items() if "." not in k and k not in ELEMENT_ATTRIBUTES}
    return NetworkSelectionElement(**kwargs)


def _comma_element(index: int, item: str, pod_namespace: str) -> NetworkSelectionElement:
    """4.1.1 `name`, `namespace/name`, and the common `...@interface` suffix."""
    ref, at, ifname = item.partition("@")
    if "@" in ifname:
        # `net1@if1@if2` has no one reading: Multus and the NAD client refuse it too.
        raise _fail(
            index,
            "interface",
            f"{json.dumps(item)} has more than one '@'; write namespace/name@interface "
            "with one interface name",
        ).with_section("4.1.1")
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
    invalid, including `default-route` on more than one element (4.1.2.1.9) and a
    comma-format item with more than one `@`. Keys without a period that the spec does
    not define are not invalid: they land in each element's `ignored`
    (`ignored_key_warnings` words the warning a caller shows).
    """
    if not isinstance(annotation, str):
        raise InvalidSelection(f"must be a string, not {jsontype.describe(annotation)}")
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


def ignored_key_warnings(elements: Iterable[NetworkSelectionElement]) -> list[str]:
    """One warning per element that carries reserved keys the spec does not define."""
    out = []
    for index, element in enumerate(elements):
        if element.ignored:
            keys = ", ".join(sorted(repr(k) for k in element.ignored))
            out.append(
                f"{NETWORKS_ANNOTATION}[{index}] (element {element.name!r}): ignoring key(s) {keys}: "
                "keys without a period are reserved by NPWG multi-net spec 4.1.2.1 and these are not "
                "defined by it, so nothing acts on them; use the spec's keys (\"ips\", \"mac\", "
                "\"interface\", ...) or a reverse-domain key such as \"org.example.key\""
            )
    return out


def format_selection(elements: Iterable[NetworkSelectionElement]) -> str:
    """The JSON list format (4.1.2) of `elements`, compact, namespaces explicit."""
    return json.dumps([e.to_json() for e in elements], separators=(",", ":"))


__all__ = [
    "InvalidSelection",
    "NetworkSelectionElement",
    "format_selection",
    "ignored_key_warnings",
    "parse_selection",
]
