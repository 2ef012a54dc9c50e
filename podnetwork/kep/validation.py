"""Static validation (KEP "Static validations"): pure functions returning field errors.

Each function returns a list of `FieldError` (empty when valid) and never raises
on bad input: the errors *are* the result. `require_valid_pod` raises
`InvalidObject` for callers that want an exception.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from podnetwork.ground import constants, names
from podnetwork.ground.fielderrors import (
    FieldError,
    InvalidObject,
    duplicate,
    forbidden,
    invalid,
    required,
    too_long,
)
from podnetwork.kep import networks
from podnetwork.kep.api import Network, PodNetwork, PodNetworkAttachment

DNS1123_SUBDOMAIN_MAX = names.DNS1123_SUBDOMAIN_MAX
LINUX_IFNAME_MAX_BYTES = names.LINUX_IFNAME_MAX_BYTES
#: Windows interface aliases: IF_MAX_STRING_SIZE is 256 including the NUL.
WINDOWS_IFNAME_MAX_CHARS = 255


def dns1123_subdomain_errors(path: str, name: str) -> list[FieldError]:
    """Kubernetes object-name rules (RFC 1123 subdomain)."""
    if not name:
        return [required(path)]
    errors = []
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        errors.append(too_long(path, DNS1123_SUBDOMAIN_MAX, "characters"))
    if not names.is_dns1123_subdomain(name):
        errors.append(
            invalid(
                path,
                name,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    return errors


def linux_ifname_errors(path: str, name: str) -> list[FieldError]:
    """The kernel's `dev_valid_name()`: 1..15 bytes, not `.`/`..`, no `/`, `:` or whitespace;
    and no lone surrogate (a JSON `\\udfff` escape): it has no UTF-8 form for a plugin's environment."""
    if name == "":
        return [invalid(path, name, "must not be empty")]
    if problem := names.surrogate_problem(name):
        return [invalid(path, name, problem)]
    if names.utf8_length(name) > LINUX_IFNAME_MAX_BYTES:
        return [too_long(path, LINUX_IFNAME_MAX_BYTES)]
    if name in (".", ".."):
        return [invalid(path, name, "must not be '.' or '..'")]
    bad = names.linux_ifname_bad_characters(name)
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        return [invalid(path, name, f"a Linux interface name may not contain {shown}")]
    return []


def windows_ifname_errors(path: str, name: str) -> list[FieldError]:
    """Windows interface aliases: 1..255 characters, no control characters, no
    leading or trailing whitespace (netsh and the NetAdapter cmdlets refuse them); no lone surrogate."""
    if name == "":
        return [invalid(path, name, "must not be empty")]
    if problem := names.surrogate_problem(name):
        return [invalid(path, name, problem)]
    if len(name) > WINDOWS_IFNAME_MAX_CHARS:
        return [too_long(path, WINDOWS_IFNAME_MAX_CHARS, "characters")]
    if any(unicodedata.category(c) == "Cc" for c in name):
        return [invalid(path, name, "a Windows interface name may not contain control characters")]
    if name != name.strip():
        return [invalid(path, name, "a Windows interface name may not start or end with whitespace")]
    return []


def validate_networks(
    nets: Sequence[Network], *, host_network: bool = False, os_name: str = "linux"
) -> list[FieldError]:
    """The KEP's static rules for a pod's networks list."""
    path = networks.FIELD
    if host_network:
        return [forbidden(path, "may not be set when `spec.hostNetwork` is true")]
    if not nets:
        return [
            required(
                path,
                "a pod must reference at least one PodNetwork or PodNetworkAttachment; "
                "remove the annotation to get the default PodNetwork",
            )
        ]
    errors: list[FieldError] = []
    seen_networks: set[str] = set()
    seen_attachments: set[str] = set()
    seen_ifnames: set[str] = set()
    gw_owner: dict[str, int] = {}
    ifname_rules = windows_ifname_errors if os_name == "windows" else linux_ifname_errors
    for i, net in enumerate(nets):
        item = f"{path}[{i}]"
        pn, pna = net.pod_network_name, net.pod_network_attachment_name
        if pn is None and pna is None:
            errors.append(required(item, "exactly one of podNetworkName or podNetworkAttachmentName"))
        elif pn is not None and pna is not None:
            errors.append(
                forbidden(item, "may not set both podNetworkName and podNetworkAttachmentName")
            )
        if pn is not None:
            field = f"{item}.podNetworkName"
            name_errors = dns1123_subdomain_errors(field, pn)
            errors.extend(name_errors)
            if not name_errors:
                if pn in seen_networks:
                    errors.append(duplicate(field, pn))
                seen_networks.add(pn)
        if pna is not None:
            field = f"{item}.podNetworkAttachmentName"
            name_errors = dns1123_subdomain_errors(field, pna)
            errors.extend(name_errors)
            if not name_errors:
                # The same attachment twice is the same PodNetwork twice.
                if pna in seen_attachments:
                    errors.append(duplicate(field, pna))
                seen_attachments.add(pna)
        if net.interface_name is not None:
            field = f"{item}.interfaceName"
            if_errors = ifname_rules(field, net.interface_name)
            errors.extend(if_errors)
            if not if_errors:
                if net.interface_name in seen_ifnames:
                    errors.append(duplicate(field, net.interface_name))
                seen_ifnames.add(net.interface_name)
        for family, flag in (("isDefaultGW4", net.is_default_gw4), ("isDefaultGW6", net.is_default_gw6)):
            if flag:
                if family in gw_owner:
                    errors.append(
                        invalid(
                            f"{item}.{family}",
                            True,
                            f"only one network may hold the default gateway; "
                            f"{path}[{gw_owner[family]}].{family} is already true",
                        )
                    )
                else:
                    gw_owner[family] = i
    return errors


def _field(obj: Any, name: str) -> Mapping[str, Any]:
    """`obj[name]` when both are mappings, else empty: manifests come from users,
    and a wrongly typed part must give field errors (or none), never a traceback."""
    value = obj.get(name) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def validate_pod(pod: Mapping[str, Any]) -> list[FieldError]:
    """Static checks of a pod's networks; a pod without the annotation is valid."""
    spec = _field(pod, "spec")
    os_name = _field(spec, "os").get("name")
    # Only a real `true` is hostNetwork: the API server refuses any other type.
    return validate_declared(networks.annotations_of(pod).get(constants.NETWORKS_ANNOTATION),
                             host_network=spec.get("hostNetwork") is True,
                             os_name=os_name if isinstance(os_name, str) else None)


def validate_declared(text: str | None, *, host_network: bool, os_name: str | None) -> list[FieldError]:
    """Static checks of the networks annotation `text` of a pod with `spec.hostNetwork` and
    `spec.os.name` as given (no OS: Linux); a pod without the annotation (None) is valid."""
    if text is None:
        return []
    try:
        nets = networks.parse(text)
    except InvalidObject as exc:
        return exc.errors
    return validate_networks(nets, host_network=host_network, os_name=os_name.lower() if os_name else "linux")


def require_valid_pod(pod: Mapping[str, Any]) -> None:
    errors = validate_pod(pod)
    if errors:
        raise InvalidObject(errors)


def _model_errors(model: type[pydantic.BaseModel], obj: Any) -> list[FieldError]:
    try:
        model.model_validate(obj)
    except pydantic.ValidationError as exc:
        out = []
        for err in exc.errors():
            loc = ""
            for part in err["loc"]:
                loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
            msg = err["msg"]
            if err["type"] == "missing":
                out.append(required(loc or "<root>"))
            elif err["type"] == "extra_forbidden":
                out.append(forbidden(loc, "unknown field"))
            else:
                out.append(invalid(loc or "<root>", err.get("input"), msg.lower()))
        return out
    return []


def _status_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    conditions = _field(obj, "status").get("conditions") or []
    seen: set[str] = set()
    errors = []
    for i, cond in enumerate(conditions if isinstance(conditions, list) else []):
        t = cond.get("type") if isinstance(cond, dict) else None
        if isinstance(t, str):
            if t in seen:
                errors.append(duplicate(f"status.conditions[{i}].type", t))
            seen.add(t)
    return errors


def _name_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    name = _field(obj, "metadata").get("name")
    if not isinstance(name, str):
        return [required("metadata.name")]
    return dns1123_subdomain_errors("metadata.name", name)


def validate_podnetwork(obj: Mapping[str, Any]) -> list[FieldError]:
    """Static checks of a PodNetwork manifest (the same rules the CRD schema enforces)."""
    errors = _name_errors(obj) + _model_errors(PodNetwork, obj) + _status_errors(obj)
    if _field(obj, "metadata").get("namespace"):
        errors.append(forbidden("metadata.namespace", "PodNetwork is cluster-scoped"))
    return errors


def validate_attachment(obj: Mapping[str, Any]) -> list[FieldError]:
    """Static checks of a PodNetworkAttachment manifest."""
    errors = _name_errors(obj) + _model_errors(PodNetworkAttachment, obj) + _status_errors(obj)
    pn = _field(obj, "spec").get("podNetworkName")
    if isinstance(pn, str) and pn:
        errors.extend(dns1123_subdomain_errors("spec.podNetworkName", pn))
    return errors
