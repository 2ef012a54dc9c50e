"""The pod's spec-style networks, carried in the `multinetwork.x-k8s.io/networks` annotation.

Until Pod.spec.networks exists (KEP "Attaching PodNetwork to a Pod"), the list
lives in a pod annotation as JSON. Field paths in errors use the KEP's field,
`spec.networks[i]...`, so messages will not change when the field arrives; a
JSON syntax error points at the annotation itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from podnetwork.ground import constants
from podnetwork.ground.fielderrors import ErrorType, FieldError, InvalidObject, invalid
from podnetwork.kep.api import DEFAULT_NETWORKS, Network

FIELD = "spec.networks"
ANNOTATION_FIELD = f"metadata.annotations[{constants.NETWORKS_ANNOTATION}]"
#: The API server caps all annotations of an object together at 256 KiB.
MAX_ANNOTATION_BYTES = 256 * 1024

_KNOWN_KEYS = {
    info.alias or name for name, info in Network.model_fields.items()
}
_HINTS = {
    "podNetwork": "podNetworkName",
    "podNetworkAttachment": "podNetworkAttachmentName",
    "interface": "interfaceName",
    "primary": "isDefaultGW4/isDefaultGW6",
    "isDefaultGw4": "isDefaultGW4",
    "isDefaultGw6": "isDefaultGW6",
    "name": "podNetworkName",
}


def _element_errors(index: int, raw: Any) -> tuple[Network | None, list[FieldError]]:
    path = f"{FIELD}[{index}]"
    if not isinstance(raw, dict):
        return None, [invalid(path, raw, "must be an object such as {\"podNetworkName\": \"default\"}")]
    errors: list[FieldError] = []
    for key in raw:
        if key not in _KNOWN_KEYS:
            hint = f"; did you mean {_HINTS[key]!r}?" if key in _HINTS else ""
            errors.append(
                FieldError(
                    f"{path}.{key}",
                    ErrorType.NOT_SUPPORTED,
                    key,
                    f"unknown field; known fields are {', '.join(sorted(_KNOWN_KEYS))}{hint}",
                )
            )
    if errors:
        return None, errors
    try:
        return Network.model_validate(raw, strict=True), []
    except pydantic.ValidationError as exc:
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"])
            errors.append(invalid(f"{path}.{key}", err.get("input"), err["msg"].lower()))
        return None, errors


def parse(text: str) -> list[Network]:
    """Parse the networks annotation. Raises `InvalidObject` naming every problem.

    Only the shape is checked here (JSON list of objects with known keys of the
    right types); the KEP's static rules are `podnetwork.kep.validation`'s job.
    """
    if not isinstance(text, str):
        raise InvalidObject([invalid(ANNOTATION_FIELD, text, "must be a string")])
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ANNOTATION_BYTES:
        raise InvalidObject(
            [FieldError(ANNOTATION_FIELD, ErrorType.TOO_LONG,
                        detail=f"may not be more than {MAX_ANNOTATION_BYTES} bytes")]
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidObject(
            [invalid(ANNOTATION_FIELD, text,
                     f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")]
        ) from None
    except (RecursionError, ValueError) as exc:
        raise InvalidObject([invalid(ANNOTATION_FIELD, text, f"not valid JSON: {exc}")]) from None
    if not isinstance(data, list):
        raise InvalidObject(
            [invalid(ANNOTATION_FIELD, text,
                     'must be a JSON list, e.g. [{"podNetworkName": "default"}]')]
        )
    networks: list[Network] = []
    errors: list[FieldError] = []
    for i, raw in enumerate(data):
        net, errs = _element_errors(i, raw)
        errors.extend(errs)
        if net is not None:
            networks.append(net)
    if errors:
        raise InvalidObject(errors)
    return networks


def format(networks: Sequence[Network]) -> str:
    """Serialize a networks list as the annotation's JSON (compact, wire names)."""
    return json.dumps([n.to_dict() for n in networks], separators=(",", ":"))


RECORD_FIELD = f"metadata.annotations[{constants.ATTACHMENT_NETWORKS_ANNOTATION}]"
_RECORD_EXAMPLE = '{"fast": "dataplane"}'


def parse_attachment_networks(text: str) -> dict[str, str]:
    """Parse the admission record `multinetwork.x-k8s.io/attachment-networks`: attachment name ->
    the PodNetwork it named when the pod was admitted. Raises `InvalidObject` when it is not a
    JSON object of strings."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ANNOTATION_BYTES:
        raise InvalidObject([FieldError(RECORD_FIELD, ErrorType.TOO_LONG,
                                        detail=f"may not be more than {MAX_ANNOTATION_BYTES} bytes")])
    try:
        data = json.loads(text)
    except (RecursionError, ValueError) as exc:
        raise InvalidObject([invalid(RECORD_FIELD, text, f"not valid JSON: {exc}")]) from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise InvalidObject([invalid(RECORD_FIELD, text,
                                     f"must be a JSON object of strings, e.g. {_RECORD_EXAMPLE}")])
    return data


def format_attachment_networks(record: Mapping[str, str]) -> str:
    """The admission record's JSON (compact, sorted: one record has one text)."""
    return json.dumps(dict(sorted(record.items())), separators=(",", ":"))


def attachment_networks(obj: Mapping[str, Any]) -> dict[str, str] | None:
    """The admission record of a pod, or None when it has none. Raises `InvalidObject`."""
    text = annotations_of(obj).get(constants.ATTACHMENT_NETWORKS_ANNOTATION)
    return None if text is None else parse_attachment_networks(text)


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def declared(pod: Mapping[str, Any]) -> list[Network] | None:
    """The networks a pod names in its annotation, or None when it names none."""
    text = annotations_of(pod).get(constants.NETWORKS_ANNOTATION)
    return None if text is None else parse(text)


def effective(
    pod: Mapping[str, Any], namespace_default: Sequence[Network] | None = None
) -> list[Network]:
    """The networks a pod is attached to, after auto-population (KEP "Auto-population").

    A hostNetwork pod attaches to none; a pod that names none gets its namespace's
    default list when one is set (KEP Story #6), else `[{"podNetworkName": "default"}]`.
    Raises `InvalidObject` when the annotation cannot be parsed.
    """
    named = declared(pod)
    if named is not None:
        return named
    # The wire form, as `annotations_of` reads it: static validation names the fields of a pod
    # that does not parse, so these rules cannot ask for a typed view first.
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if isinstance(spec, Mapping) and spec.get("hostNetwork"):
        return []
    return list(namespace_default) if namespace_default else list(DEFAULT_NETWORKS)


__all__ = [
    "ANNOTATION_FIELD",
    "FIELD",
    "RECORD_FIELD",
    "attachment_networks",
    "declared",
    "effective",
    "format",
    "format_attachment_networks",
    "parse",
    "parse_attachment_networks",
]
